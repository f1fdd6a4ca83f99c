//! Where endpoints and deliveries live: the [`Store`] trait and its DynamoDB implementation.
//!
//! The table's layout (storage version [`version::STORAGE_VERSION`]) is `docs/storage.md`,
//! included below; every key builder is in [`keys`].
//!
#![doc = include_str!("../../../docs/storage.md")]

mod api_keys;
mod attention;
pub mod dynamo;
mod event_types;
pub mod keys;
pub mod lifecycle;
pub mod payload;
pub mod version;

use crate::domain::delivery_lifecycle::{DueItem, Transition};
use crate::domain::endpoint_lifecycle::Change;
use crate::domain::ids::{DeliveryId, EndpointId, EventId, JobId, TenantId};
use crate::domain::model::{Delivery, DeliveryStatus, Endpoint, Job, StoredEvent};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub use api_keys::ApiKeyStore;
pub use attention::{Attention, AttentionMark};
pub use dynamo::DynamoStore;
pub use event_types::EventTypeStore;
pub use lifecycle::{DeletedEndpoint, LifecycleStore, Purgeable, ScanPage, TenantSnapshot};

/// A store call that failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The AWS call failed (after the SDK's own retries).
    #[error("dynamodb: {0}")]
    Aws(String),
    /// DynamoDB refused the request as malformed (a `ValidationException`): a request we
    /// built wrong, never worth retrying.
    #[error("dynamodb refused the request: {0}")]
    Invalid(String),
    /// An item could not be read back into the domain type.
    #[error("corrupt item: {0}")]
    Corrupt(String),
    /// A pagination cursor that this store did not hand out.
    #[error("invalid cursor")]
    InvalidCursor,
    /// A query this store cannot answer.
    #[error("unsupported query: {0}")]
    Unsupported(String),
    /// A conditional create lost: the item already exists.
    #[error("already exists")]
    AlreadyExists,
    /// An event id was repeated by an `Idempotency-Key` request whose fingerprint differs
    /// from the one stored with the event ([`crate::domain::model::StoredEvent::request_sha256`]):
    /// nothing was written.
    #[error("the event id was first accepted with a different request")]
    RequestMismatch,
}

/// A delivery as lists show it (no payload, no attempt history).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeliverySummary {
    /// Delivery id.
    pub id: DeliveryId,
    /// Event id.
    pub event_id: EventId,
    /// Event type.
    pub event_type: String,
    /// Tenant.
    pub tenant_id: TenantId,
    /// Endpoint.
    pub endpoint_id: EndpointId,
    /// Status.
    pub status: DeliveryStatus,
    /// Attempts started.
    pub attempt_count: u32,
    /// Next attempt (scheduled only).
    #[serde(default)]
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// Accepted at.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// When retention removes it (stored as the TTL, unix seconds; shown as RFC 3339).
    #[serde(default, serialize_with = "ttl_as_time")]
    pub expires_at: Option<i64>,
    /// The delivery's own exhausted retention, days (stamped at ingest from its tenant's
    /// override; absent: the stack's). Read from the item, not from `by_status`.
    #[serde(default, skip_serializing)]
    pub exhausted_retention_days: Option<u32>,
}

fn ttl_as_time<S: serde::Serializer>(ttl: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
    ttl.and_then(|t| DateTime::<Utc>::from_timestamp(t, 0)).serialize(s)
}

/// Which deliveries to list.
#[derive(Debug, Clone, Default)]
pub struct DeliveryQuery {
    /// Deliveries of this endpoint.
    pub endpoint_id: Option<EndpointId>,
    /// In this status. Without `endpoint_id`, only `exhausted` or `held`.
    pub status: Option<DeliveryStatus>,
    /// Accepted at or after this time (with `endpoint_id`).
    pub since: Option<DateTime<Utc>>,
    /// Accepted before this time (with `endpoint_id`).
    pub until: Option<DateTime<Utc>>,
    /// Oldest first instead of newest first.
    pub oldest_first: bool,
    /// Page size, 1 to 100.
    pub limit: usize,
    /// From a previous page's `next_cursor`.
    pub cursor: Option<String>,
}

/// An item of the due index.
#[derive(Debug, Clone, PartialEq)]
pub enum Due {
    /// A delivery.
    Delivery(DueItem),
    /// A job whose next step is due, with the `due_at` (milliseconds) it was read with.
    Job {
        /// Job id.
        id: JobId,
        /// Its due-index time when read.
        due_at: i64,
    },
}

/// One page of a list.
#[derive(Debug, Clone, Serialize)]
pub struct Page<T> {
    /// The items, newest first.
    pub data: Vec<T>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// Every delivery `query` matches, up to `max`, following the cursor page by page (100 a
/// page). The query's own `limit` and `cursor` are ignored.
///
/// # Errors
/// The store's error.
pub async fn collect_deliveries(
    store: &dyn Store,
    query: DeliveryQuery,
    max: usize,
) -> Result<Vec<DeliverySummary>, StoreError> {
    let mut out = Vec::new();
    let mut query = DeliveryQuery { limit: 100, cursor: None, ..query };
    while out.len() < max {
        query.limit = (max - out.len()).min(100);
        let page = store.list_deliveries(&query).await?;
        out.extend(page.data);
        match page.next_cursor {
            Some(c) => query.cursor = Some(c),
            None => break,
        }
    }
    Ok(out)
}

/// What [`EventStore::insert_event`] created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inserted {
    /// The payload item (false: the event id was seen before and keeps its first payload).
    pub event: bool,
    /// Per delivery, in the order given.
    pub deliveries: Vec<bool>,
}

/// The endpoint part of a [`EndpointStore::commit`].
#[derive(Debug, Clone, Copy)]
pub enum EndpointWrite<'a> {
    /// Write this change (guarded by its expected version) and create its jobs.
    Change(&'a Change),
    /// Write nothing to the endpoint; only require that it is still at `version`.
    Unchanged {
        /// Tenant.
        tenant_id: &'a TenantId,
        /// Endpoint id.
        id: &'a EndpointId,
        /// The version read.
        version: u64,
    },
}

/// What a [`EndpointStore::commit`] came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Committed {
    /// Everything was written.
    Done,
    /// Nothing was written: the endpoint is gone or no longer at the version read.
    EndpointChanged,
    /// Nothing was written: the delivery's guard did not hold.
    DeliveryLost,
}

/// What an endpoint's per-day delivered counters hold over a span of days
/// ([`CounterStore::delivered_tally`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeliveredTally {
    /// Deliveries counted delivered.
    pub delivered: u64,
    /// The latest time a delivery was counted (the record's time); `None` when none was.
    pub last_delivered_at: Option<DateTime<Utc>>,
}

/// How many deliveries are in one status ([`DeliveryStore::count_deliveries_in`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counted {
    /// The count.
    pub n: u64,
    /// False when reading stopped at a cap: for a final status, `n` is at least that many;
    /// for `scheduled` and `sending`, their sum is the `open` range counted, split by the
    /// items read (`sending` those seen sending, `scheduled` the rest).
    pub exact: bool,
}

/// What [`CounterStore::count_failure`] came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FailureCount {
    /// Failed attempts in a row, this one included (of the attempts that read the same copy
    /// of the endpoint, when the table keeps copies: that copy's run since its last 2xx).
    pub in_a_row: u32,
    /// Whether the circuit breaker opens on this failure.
    pub opens_breaker: bool,
    /// Whether this failure is to announce the endpoint failing (`endpoint.failing`): the
    /// failures in a row (summed over the copies) reached
    /// [`crate::domain::operational::failing_at`] of the threshold and the endpoint item has
    /// no announcement of its run yet ([`CounterStore::announce_failing`]).
    pub announce_failing: bool,
    /// The failures in a row over every copy, when they were summed (else `in_a_row`): what
    /// the announcement reports.
    pub total: u32,
}

impl FailureCount {
    /// The count of one counter (no copies): `n` in a row, the breaker opening at `threshold`
    /// (0: never).
    pub fn single(n: u32, threshold: u32) -> Self {
        Self { in_a_row: n, opens_breaker: threshold > 0 && n >= threshold, announce_failing: false, total: n }
    }

    /// As [`FailureCount::single`], with `announced`: whether the endpoint item holds an
    /// announcement of its run already.
    pub fn single_announced(n: u32, threshold: u32, announced: bool) -> Self {
        let reached = crate::domain::operational::failing_at(threshold).is_some_and(|at| n >= at);
        Self { announce_failing: reached && !announced, ..Self::single(n, threshold) }
    }
}

/// Whether a guarded transition applied.
#[derive(Debug, Clone)]
pub enum Applied {
    /// It applied; the item after the change when it was asked for.
    Done(Option<Box<Delivery>>),
    /// The guard did not hold (someone else got there first, or the item is gone).
    Lost,
}

/// An endpoint's configuration and state: its item (and copies), its id pointer, the listing
/// of a tenant's endpoints. Every change after creation goes through [`EndpointStore::commit`].
#[async_trait]
pub trait EndpointStore: Send + Sync {
    /// Creates an endpoint (and its id pointer). Finding the very same endpoint there (its
    /// secret and creation time: an earlier try of this create, whose answer was lost) is
    /// success, not a conflict.
    ///
    /// # Errors
    /// [`StoreError::AlreadyExists`] when the id is taken by another endpoint.
    async fn create_endpoint(&self, endpoint: &Endpoint) -> Result<(), StoreError>;
    /// An endpoint by tenant and id (strongly consistent).
    async fn get_endpoint(&self, tenant_id: &TenantId, id: &EndpointId) -> Result<Option<Endpoint>, StoreError>;
    /// An endpoint by id alone (reads its pointer first).
    async fn find_endpoint(&self, id: &EndpointId) -> Result<Option<Endpoint>, StoreError>;
    /// The endpoint as an attempt reads it right before its POST (strongly consistent): the
    /// same as [`EndpointStore::get_endpoint`], from the copy of the endpoint item that `key` (the
    /// delivery id) picks when the store keeps copies ([`dynamo`]'s endpoint copies), so one
    /// hot endpoint's reads spread over several partitions.
    async fn read_endpoint(
        &self,
        tenant_id: &TenantId,
        id: &EndpointId,
        key: &str,
    ) -> Result<Option<Endpoint>, StoreError>;
    /// Every endpoint of a tenant: one strongly consistent Query (paged past 1 MB), of the
    /// copy that `key` (the event id) picks when the store keeps copies.
    async fn tenant_endpoints(&self, tenant_id: &TenantId, key: &str) -> Result<Vec<Endpoint>, StoreError>;
    /// Writes, in one TransactWriteItems, an endpoint transition (or only a check that the
    /// endpoint is still at a version) with its jobs and, when given, a guarded delivery
    /// transition: all of it or nothing. The one way an endpoint's configuration or state is
    /// written after its creation (see [`crate::domain::endpoint_lifecycle`]).
    async fn commit(
        &self,
        endpoint: EndpointWrite<'_>,
        delivery: Option<(&DeliveryId, &Transition)>,
    ) -> Result<Committed, StoreError>;
    /// A page of the endpoints, across tenants, that are `why` (stopped or failing), newest
    /// first by when they became so, up to `limit` (1 to 100), after `cursor`. Marks kept on
    /// the endpoint items themselves (written by [`EndpointStore::commit`],
    /// [`CounterStore::count_failure`] and [`CounterStore::reset_failures`]) and read through
    /// an index that can lag the table a moment: a caller reads each endpoint before it shows
    /// it. With endpoint copies, a failing endpoint can be listed once per copy failing.
    async fn attention_endpoints(
        &self,
        why: Attention,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<Page<AttentionMark>, StoreError>;
    /// Deletes an endpoint (its item, pointer and copies) and writes its tombstone
    /// (`deleted`), in one transaction.
    async fn delete_endpoint(&self, deleted: &DeletedEndpoint) -> Result<(), StoreError>;
    /// A page of a tenant's endpoints.
    async fn list_endpoints(
        &self,
        tenant_id: &TenantId,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<Page<Endpoint>, StoreError>;
}

/// The counters beside an endpoint's versioned configuration, written without a version
/// check: failures in a row, deliveries counted per day, the slow-lane marker, the adaptive
/// rate and the per-second rate windows.
#[async_trait]
pub trait CounterStore: Send + Sync {
    /// Announces the endpoint's run of failures: creates `notify` (the notify job of its
    /// `endpoint.failing`) and marks the endpoint item announced (`failing_announced`, the
    /// job's id) in one TransactWriteItems, conditional on the item having no such mark. False
    /// when it had one (the run was announced) or the endpoint is gone. The mark is removed
    /// with the counter by the reset that ends the endpoint item's run, or an enable.
    async fn announce_failing(&self, tenant_id: &TenantId, id: &EndpointId, notify: &Job) -> Result<bool, StoreError>;
    /// Adds one to the endpoint's failures in a row (on the copy an attempt keyed by `key`
    /// read, when the table keeps copies) and says whether the circuit breaker at `threshold`
    /// (0: never) opens (None: gone). With one copy: the new count, opening at exactly
    /// `threshold` failed attempts in a row. With R copies: this copy's run since its last
    /// 2xx, and the breaker opens when the runs summed over the copies reach `threshold` (read
    /// once this copy holds its share; see [`dynamo`]'s endpoint copies). A counter, not
    /// state: no version check, no version bump.
    ///
    /// Counted once per (`key`, `attempt`): the write marks the counter with them and is
    /// conditional on the mark being another, so a retry of the same write (the SDK's, after
    /// an answer lost once the write applied) finds its own mark and counts nothing again. It
    /// returns the count as the first write left it. (Only the last mark is kept: a retry
    /// that comes after another attempt's failure was counted on the same item counts again;
    /// SDK retries come within milliseconds, so that takes a lost answer and a second failure
    /// of the same endpoint in that window.)
    ///
    /// `at` is the attempt's time: the first failure of a run marks the endpoint failing
    /// since then ([`EndpointStore::attention_endpoints`]), and the reset that ends the run removes
    /// the mark.
    async fn count_failure(
        &self,
        tenant_id: &TenantId,
        id: &EndpointId,
        key: &str,
        attempt: u32,
        threshold: u32,
        at: DateTime<Utc>,
    ) -> Result<Option<FailureCount>, StoreError>;
    /// Zeroes the endpoint's failures in a row, on the copy an attempt keyed by `key` read (a
    /// counter; see [`CounterStore::count_failure`]).
    async fn reset_failures(&self, tenant_id: &TenantId, id: &EndpointId, key: &str) -> Result<(), StoreError>;
    /// The failures in a row an endpoint's view shows: `endpoint`'s own count (the endpoint
    /// item's) when the counter is one item; summed over the copies when it is split
    /// (one strongly consistent BatchGetItem, a read unit per copy; see [`dynamo`]'s endpoint
    /// copies). Only the views read it, so that finding an endpoint to change it costs no
    /// read of the copies.
    async fn failures_in_a_row(&self, endpoint: &Endpoint) -> Result<u32, StoreError>;
    /// As [`CounterStore::failures_in_a_row`], for a listing's page of one tenant's endpoints (as
    /// read), in their order: summed over the copies when the counter is split, with one
    /// Query per copy after the first over the page's key range. Apart from the
    /// single-endpoint read so that the functions that show one endpoint (deliver's disable
    /// answers with it) need no Query of the table.
    async fn listed_failures_in_a_row(&self, endpoints: &[Endpoint]) -> Result<Vec<u32>, StoreError>;
    /// Counts `delivery_ids` (deliveries of `endpoint_id` one call recorded delivered, at
    /// least one) on the UTC day of `at`: one atomic ADD of their number to a small counter
    /// item per (endpoint, day, split: the split of the smallest id), `expires_at` (unix
    /// seconds) its TTL, and `at` as the item's `last_delivered_at` (a plain SET in the same
    /// write: a count that lands late, after a newer one, leaves its earlier time). Best
    /// effort, after the deliveries' records: a failure or a crash in between leaves the
    /// count short by these deliveries and the time as it was, never a delivery unrecorded.
    ///
    /// Counted once per set, as [`CounterStore::count_failure`] is per attempt: the counter
    /// keeps the smallest id of the last set it counted (`last_counted`; a delivery is
    /// recorded delivered once, so no other set has it) and the ADD is conditional on it
    /// being another, so a retry of the same write after a lost answer counts nothing.
    async fn count_delivered(
        &self,
        endpoint_id: &EndpointId,
        delivery_ids: &[DeliveryId],
        at: DateTime<Utc>,
        expires_at: i64,
    ) -> Result<(), StoreError>;
    /// Deliveries of `endpoint_id` counted delivered on the UTC day of `since` and after, and
    /// the latest time one was counted: one Query per counter partition (1, or 1 +
    /// `WEBHOOKS_ENDPOINT_INDEX_SHARDS`), each reading at most one small item per day;
    /// nothing grows with the endpoint's history.
    async fn delivered_tally(
        &self,
        endpoint_id: &EndpointId,
        since: DateTime<Utc>,
    ) -> Result<DeliveredTally, StoreError>;
    /// Sets the endpoint's slow-lane marker `slow_until` (`None` removes it): state, not
    /// configuration, so no version check and no version bump (see [`crate::domain::lane`]). An
    /// endpoint that is gone is left alone.
    async fn set_slow_until(
        &self,
        tenant_id: &TenantId,
        id: &EndpointId,
        until: Option<DateTime<Utc>>,
    ) -> Result<(), StoreError>;
    /// Counts one attempt start of `endpoint_id` in the one-second window `second` (unix
    /// seconds) and returns the window's count after it (1 for the first). One atomic `ADD`
    /// on a counter item that TTL removes a few minutes later (see [`crate::domain::rate`]).
    async fn take_rate_slot(&self, endpoint_id: &str, second: i64) -> Result<u64, StoreError>;
    /// Sets the endpoint's adaptive rate (`effective_rate_per_second` = `rate`,
    /// `rate_changed_at_ms` = `now_ms`) if `rate_changed_at_ms` is still `expected_ms`
    /// (`None`: absent); false when another writer came first or the endpoint is gone. No
    /// version check and no version bump.
    async fn set_effective_rate(
        &self,
        tenant_id: &TenantId,
        id: &EndpointId,
        expected_ms: Option<i64>,
        rate: f64,
        now_ms: i64,
    ) -> Result<bool, StoreError>;
}

/// Accepted events: the event item (payload, fingerprint) with its deliveries.
#[async_trait]
pub trait EventStore: Send + Sync {
    /// Writes an accepted event: its payload item and one delivery per endpoint, each in the
    /// due index at its `due_at` (`None` for a held delivery, which goes to the `by_status`
    /// index instead), all or nothing, by conditional PutItems (a transaction would bill every
    /// KB twice, DynamoDB pricing): the payload item first, then the deliveries. On an error,
    /// whatever this call wrote is deleted again (even a write whose answer was lost after it
    /// landed), unless a concurrent call with the same event id relies on it: a call that
    /// finds items it did not write marks the event `promised` before it answers, and a
    /// promised event and its deliveries are never deleted (the error then says to retry with
    /// the id). No delivery is left without its payload item. Says which items this call
    /// created: an item that existed already (the same event id ingested twice) is left as it
    /// was, payload included.
    ///
    /// # Errors
    /// [`StoreError::RequestMismatch`] when the event id exists with another
    /// `request_sha256` and this event has one too (a reused `Idempotency-Key`): nothing of
    /// this call's stays. Otherwise an AWS error as above.
    async fn insert_event(
        &self,
        event: &StoredEvent,
        deliveries: &[(&Delivery, Option<i64>)],
    ) -> Result<Inserted, StoreError>;
    /// An event's payload (strongly consistent); `None` once retention removed it.
    async fn get_payload(&self, tenant_id: &TenantId, event_id: &EventId) -> Result<Option<String>, StoreError>;
}

/// Deliveries: read one, apply a guarded transition ([`crate::domain::delivery_lifecycle`]
/// builds them), the due index, listings and counts.
#[async_trait]
pub trait DeliveryStore: Send + Sync {
    /// A delivery by id, with its attempts.
    async fn get_delivery(&self, id: &DeliveryId) -> Result<Option<Delivery>, StoreError>;
    /// Applies a guarded transition; with `return_new`, the item after it.
    async fn apply(&self, id: &DeliveryId, transition: &Transition, return_new: bool) -> Result<Applied, StoreError>;
    /// Up to `limit` items of one due-index shard with `due_at <= until_ms`, earliest first;
    /// with `after` (the last item of a previous call on this shard), those after it. An
    /// item that does not read as a due delivery is logged with its key and left out, not
    /// an error.
    async fn due(&self, shard: u32, until_ms: i64, limit: usize, after: Option<&Due>) -> Result<Vec<Due>, StoreError>;
    /// Every delivery of an event id (one per endpoint it went to, of every tenant that used
    /// the id), read by their ids from the endpoints its event items list (a strongly
    /// consistent Query of the id's `EVENT_ID#` partition).
    async fn event_deliveries(&self, event_id: &EventId) -> Result<Vec<DeliverySummary>, StoreError>;
    /// A page of deliveries: up to `query.limit` of them (clamped to 1-100). A page can be
    /// shorter than the limit, even empty, and still have a `next_cursor`: every request reads
    /// a bounded number of index entries and items, whatever the backlog (a status filter on
    /// the `open` range reads past the entries of the other status only so far). Only a page
    /// without `next_cursor` is the last.
    async fn list_deliveries(&self, query: &DeliveryQuery) -> Result<Page<DeliverySummary>, StoreError>;
    /// How many of an endpoint's deliveries are in `status` ([`Self::count_deliveries_in`]'s
    /// count, exact or not).
    async fn count_deliveries(&self, endpoint_id: &EndpointId, status: DeliveryStatus) -> Result<u64, StoreError>;
    /// How many of an endpoint's deliveries are in each of `statuses`, in their order, with a
    /// bounded read whatever the backlog: in DynamoStore, per index partition one
    /// `Select=COUNT` Query of each status's key range, stopping at 5,000 entries, and for
    /// `scheduled` and `sending` (one `open` range: `by_endpoint` projects no status) the
    /// items of its oldest 100 entries (eventually consistent, half a read unit each). A count
    /// that stopped at a cap says so (`exact` false). By default, one exact
    /// `count_deliveries` each.
    async fn count_deliveries_in(
        &self,
        endpoint_id: &EndpointId,
        statuses: &[DeliveryStatus],
    ) -> Result<Vec<Counted>, StoreError> {
        let counts =
            futures::future::try_join_all(statuses.iter().map(|st| self.count_deliveries(endpoint_id, *st))).await?;
        Ok(counts.into_iter().map(|n| Counted { n, exact: true }).collect())
    }
}

/// Jobs (recover, hold, release, probe): created, claimed and saved under a lease.
#[async_trait]
pub trait JobStore: Send + Sync {
    /// Creates a job (its id is new: a conditional PutItem), in the due index at `run_at`
    /// while it is running.
    ///
    /// # Errors
    /// [`StoreError::AlreadyExists`] when a job has the id.
    async fn create_job(&self, job: &Job) -> Result<(), StoreError>;
    /// Writes what a job step came to (progress, cursor, next `run_at`, end), guarded like
    /// every other transition: only while the job's due time is still `lease_due_at`
    /// (milliseconds), the lease the step took with [`JobStore::claim_job`]. False when the
    /// step outlived its lease and a later step took the job: that step's progress stands,
    /// and this one's is dropped (every step's own writes are guarded transitions, so the
    /// later step finds what this one did).
    async fn save_job(&self, job: &Job, lease_due_at: i64) -> Result<bool, StoreError>;
    /// [`JobStore::save_job`] of a job's last step together with `notify`, the notify job of
    /// its `job.finished` event, created in the same write (one TransactWriteItems), so the
    /// event is published at least once whatever happens after. False as `save_job`'s.
    async fn finish_job(&self, job: &Job, lease_due_at: i64, notify: &Job) -> Result<bool, StoreError>;
    /// A job by id.
    async fn get_job(&self, id: &JobId) -> Result<Option<Job>, StoreError>;
    /// Takes a job's due step: moves its due time from `expected_due_at` to `lease_due_at`
    /// (both milliseconds); false when another tick took it first.
    async fn claim_job(&self, id: &JobId, expected_due_at: i64, lease_due_at: i64) -> Result<bool, StoreError>;
}

/// Persistence of endpoints, events, deliveries, jobs, the event-type catalog and API keys: every aggregate's trait, which
/// [`DynamoStore`] (one file per aggregate under `dynamo/`) and the simulation's in-memory
/// store implement. Services take an `Arc<dyn Store>` and name the trait whose methods they
/// call.
pub trait Store:
    EndpointStore + CounterStore + EventStore + DeliveryStore + JobStore + EventTypeStore + ApiKeyStore + LifecycleStore
{
}

impl<
    T: EndpointStore
        + CounterStore
        + EventStore
        + DeliveryStore
        + JobStore
        + EventTypeStore
        + ApiKeyStore
        + LifecycleStore,
> Store for T
{
}

/// How a store failure answers a caller: a bad cursor or an unsupported query is the
/// caller's (422); a request DynamoDB refused or an item we cannot read back is ours (500);
/// anything else is worth retrying (503).
impl From<StoreError> for crate::error::ServiceError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::InvalidCursor => Self::Validation("cursor: not a cursor this API returned".into()),
            StoreError::Unsupported(m) => Self::Validation(m),
            // DynamoDB refused a request we built: validation belongs before any AWS call, so
            // this is our bug, and retrying will not help.
            StoreError::Invalid(m) => Self::Internal(format!("internal error: {m}")),
            // An item we cannot read back (a payload frame that does not decompress): ours to
            // fix; a retry reads the same item.
            e @ StoreError::Corrupt(_) => Self::Internal(format!("internal error: {e}")),
            other => Self::Unavailable(other.to_string()),
        }
    }
}
