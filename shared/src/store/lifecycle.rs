//! The data's lifecycle in the store: a tenant's settings (retention overrides, purge mark),
//! an event's payload expunged, and the purge's guarded deletes ([`LifecycleStore`]).

use crate::domain::ids::{DeliveryId, EndpointId, EventId, JobId, TenantId};
use crate::domain::model::{Endpoint, Job};
use crate::domain::tenant::TenantSettings;
use crate::store::StoreError;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The `payload_sha256` of a delivery whose event's payload was expunged: no payload's digest.
pub const EXPUNGED_DIGEST: &str = "expunged";

/// A tenant's endpoints and settings as one read sees them ([`LifecycleStore::tenant_snapshot`]).
#[derive(Debug, Clone, Default)]
pub struct TenantSnapshot {
    /// Every endpoint of the tenant.
    pub endpoints: Vec<Endpoint>,
    /// Its settings item, if it has one.
    pub settings: Option<TenantSettings>,
}

/// What an event's item says of its lifecycle (no payload).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRecord {
    /// Tenant.
    pub tenant_id: TenantId,
    /// Event id.
    pub event_id: EventId,
    /// When DynamoDB TTL removes it, unix seconds.
    pub expires_at: i64,
    /// When its payload was expunged (`POST /v1/events/{id}/expunge`); absent: not expunged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expunged_at: Option<DateTime<Utc>>,
}

/// A deleted endpoint's tombstone (`TENANT#{tenant}` / `DELETED#{id}`, docs/storage.md): what
/// a purge of its tenant needs to find what the endpoint left behind (its deliveries, in the
/// `by_endpoint` index until their retention ends, and its counters), written by
/// [`crate::store::EndpointStore::delete_endpoint`] in the delete's transaction. No secret,
/// no URL: only keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletedEndpoint {
    /// Its tenant.
    pub tenant_id: TenantId,
    /// The endpoint's id.
    pub endpoint_id: EndpointId,
    /// Its rate limit when deleted (attempts a second): how many rate-window partitions it had
    /// ([`crate::domain::rate::SLOTS_PER_COUNTER`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit_per_second: Option<u32>,
    /// When it was deleted.
    pub deleted_at: DateTime<Utc>,
    /// When DynamoDB TTL removes the tombstone, unix seconds: once its deliveries and
    /// counters are gone too (the longest of the tenant's retentions after the deletion, and
    /// a day for the clean-up job).
    pub expires_at: i64,
}

/// An item (or the items written together with it) a purge deletes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Purgeable {
    /// A delivery item.
    Delivery(DeliveryId),
    /// An event's item (payload, fingerprint): (tenant, event id).
    Event(TenantId, EventId),
    /// An endpoint with its id pointer and its copies: (tenant, endpoint id).
    Endpoint(TenantId, EndpointId),
    /// A tenant's settings item with its copies.
    Settings(TenantId),
    /// A deleted endpoint's tombstone: (tenant, endpoint id).
    Tombstone(TenantId, EndpointId),
    /// One item by its table key (`pk`, `sk`): a counter of an endpoint (delivered per day,
    /// rate window) as [`LifecycleStore::endpoint_counters`] lists it, or an item of the
    /// tenant's a purge's scan found ([`LifecycleStore::scan_tenant`]).
    Item(String, String),
}

/// A page of a purge's scan of the table ([`LifecycleStore::scan_tenant`]).
#[derive(Debug, Clone, Default)]
pub struct ScanPage {
    /// The tenant's items found, but for its settings item and jobs.
    pub items: Vec<Purgeable>,
    /// Where the scan goes on (opaque); `None`: the scan is complete.
    pub next: Option<String>,
}

/// A tenant's settings, expunge and purge (`docs/storage.md`, the settings item).
#[async_trait]
pub trait LifecycleStore: Send + Sync {
    /// A tenant's endpoints and settings as an event keyed by `key` reads them: in
    /// DynamoStore one strongly consistent Query (paged past 1 MB) of the tenant's partition
    /// (or the endpoint copy `key` picks), `sk BETWEEN "ENDPOINT#" AND "SETTINGS"`: the
    /// endpoints' Query widened to the settings item, so ingest reads both for the price of
    /// one request.
    async fn tenant_snapshot(&self, tenant_id: &TenantId, key: &str) -> Result<TenantSnapshot, StoreError>;
    /// A tenant's settings (strongly consistent); `None`: it has none.
    async fn get_settings(&self, tenant_id: &TenantId) -> Result<Option<TenantSettings>, StoreError>;
    /// Writes `settings` (and its copies), conditional on the stored version being
    /// `expected_version` (0: no item), with `job` created in the same TransactWriteItems when
    /// given (a purge's). False when the guard failed (another writer came first).
    async fn save_settings(
        &self,
        settings: &TenantSettings,
        expected_version: u64,
        job: Option<&Job>,
    ) -> Result<bool, StoreError>;
    /// An event's lifecycle (strongly consistent); `None`: no such event item.
    async fn event_record(&self, tenant_id: &TenantId, event_id: &EventId) -> Result<Option<EventRecord>, StoreError>;
    /// Expunges an event's payload: first sets the `payload_sha256` of each of `delivery_ids`
    /// (the event's deliveries) to [`EXPUNGED_DIGEST`] (an UpdateItem each, conditional on the
    /// item existing), so that no payload riding in a queue message matches it any more and
    /// deliver reads the stored one; then removes the payload and the request's fingerprint
    /// (`request_sha256`: the SHA-256 of a short payload can be guessed) from the event's item
    /// and marks it `expunged_at` (an UpdateItem conditional on the item existing). False when there is
    /// no such event item. Idempotent: a second expunge keeps the first time.
    async fn expunge_payload(
        &self,
        tenant_id: &TenantId,
        event_id: &EventId,
        delivery_ids: &[DeliveryId],
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError>;
    /// Up to `limit` counter items of endpoint `endpoint_id` (its delivered-per-day counters
    /// and rate windows; `rate_limit_per_second` says how many rate-window partitions it
    /// has), keys only.
    async fn endpoint_counters(
        &self,
        endpoint_id: &EndpointId,
        rate_limit_per_second: Option<u32>,
        limit: usize,
    ) -> Result<Vec<Purgeable>, StoreError>;
    /// The tombstones of a tenant's deleted endpoints (strongly consistent; in DynamoDB one
    /// Query of `TENANT#{tenant}`, `begins_with(sk, "DELETED#")`, paged past 1 MB).
    async fn deleted_endpoints(&self, tenant_id: &TenantId) -> Result<Vec<DeletedEndpoint>, StoreError>;
    /// Scans the table for the items of a tenant, from `cursor` (`None`: the start), reading at
    /// most `pages` pages of 1 MB: in DynamoDB an eventually consistent Scan filtered on
    /// `tenant_id` (0.5 read units per 4 KB of table read, items or not). Leaves out the
    /// tenant's settings item (and copies) and its jobs: the purge removes the first last and
    /// keeps the second. What finds an event item whose ingest died before its deliveries,
    /// which no index names by tenant.
    async fn scan_tenant(
        &self,
        tenant_id: &TenantId,
        cursor: Option<&str>,
        pages: usize,
    ) -> Result<ScanPage, StoreError>;
    /// Deletes `items`, each write guarded by the lease of job `job_id` (its due time still
    /// `lease_due_at`, milliseconds): in DynamoStore TransactWriteItems of up to 99 deletes
    /// with a ConditionCheck on the job item. False when the lease was lost (a later step took
    /// the job): the batch that found it so deleted nothing.
    async fn purge(&self, job_id: &JobId, lease_due_at: i64, items: &[Purgeable]) -> Result<bool, StoreError>;
}
