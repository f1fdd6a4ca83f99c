//! The API keys' storage: [`ApiKeyStore`] (items in `docs/storage.md`).

use super::{Page, StoreError};
use crate::domain::api_key::ApiKey;
use async_trait::async_trait;
use chrono::{DateTime, Utc};

/// Days an API key's item is kept after it was revoked or expired (its TTL): long enough for
/// an operator to look a logged prefix up, then gone.
pub const KEPT_AFTER_END_DAYS: i64 = 30;

/// Producers' API keys ([`crate::domain::api_key`]): one item per key, in one partition (they
/// are few, and read once per process and cache period, not per event).
#[async_trait]
pub trait ApiKeyStore: Send + Sync {
    /// Stores a new key, conditional on its id being new.
    ///
    /// # Errors
    /// [`StoreError::AlreadyExists`] when the id is taken.
    async fn create_api_key(&self, key: &ApiKey) -> Result<(), StoreError>;
    /// A key by id (`key_{ulid}`), strongly consistent.
    async fn get_api_key(&self, id: &str) -> Result<Option<ApiKey>, StoreError>;
    /// A page of the keys, by id (oldest first: ids are ULIDs), up to `limit` (1 to 100),
    /// after `cursor`.
    ///
    /// # Errors
    /// [`StoreError::InvalidCursor`] for a cursor this listing did not hand out.
    async fn list_api_keys(&self, limit: usize, cursor: Option<&str>) -> Result<Page<ApiKey>, StoreError>;
    /// Revokes a key at `at` (and sets its item's TTL `KEPT_AFTER_END_DAYS` (30) days later),
    /// conditional on it existing and not being revoked. Returns the key as it is now; `None`
    /// when it does not exist. A key already revoked comes back unchanged.
    async fn revoke_api_key(&self, id: &str, at: DateTime<Utc>) -> Result<Option<ApiKey>, StoreError>;
    /// Removes `tenant_id` from a key's `tenant_ids` (a purge of the tenant), conditional on
    /// the key naming it and at least one other tenant. Returns the key as it is now; `None`
    /// when it does not exist. A key that does not name the tenant, names it alone (the caller
    /// revokes such a key instead), or is for every tenant comes back unchanged.
    async fn remove_api_key_tenant(&self, id: &str, tenant_id: &str) -> Result<Option<ApiKey>, StoreError>;
    /// Sets a key's `last_used_at`, if the key exists (the last writer's time stands: two
    /// processes' times differ by at most their cache period).
    async fn touch_api_key(&self, id: &str, at: DateTime<Utc>) -> Result<(), StoreError>;
}
