//! The event-type catalog's storage: [`EventTypeStore`] (items in `docs/storage.md`).

use super::{Page, StoreError};
use crate::domain::event_type::{EventType, EventTypeVersion};
use async_trait::async_trait;

/// The event-type catalog ([`crate::domain::event_type`]): one item per type (its current
/// state) and one per schema version, every change guarded on the revision read.
#[async_trait]
pub trait EventTypeStore: Send + Sync {
    /// Creates an event type and the record of its version 1, both conditional on being new
    /// (one TransactWriteItems in DynamoDB).
    ///
    /// # Errors
    /// [`StoreError::AlreadyExists`] when the name is taken.
    async fn create_event_type(&self, event_type: &EventType) -> Result<(), StoreError>;
    /// An event type by name (strongly consistent), with its `revision`.
    async fn get_event_type(&self, name: &str) -> Result<Option<EventType>, StoreError>;
    /// One version's record of an event type's schema.
    async fn event_type_version(&self, name: &str, version: u64) -> Result<Option<EventTypeVersion>, StoreError>;
    /// Writes `event_type` over the stored one if the stored `revision` is still
    /// `expected_revision`; with `new_version`, with the record of its (new) `version` in the
    /// same transaction. False when the guard did not hold (another change came first, or the
    /// type is gone): nothing was written.
    async fn save_event_type(
        &self,
        event_type: &EventType,
        expected_revision: u64,
        new_version: bool,
    ) -> Result<bool, StoreError>;
    /// A page of the catalog, by name, up to `limit` (1 to 100), after `cursor`.
    ///
    /// # Errors
    /// [`StoreError::InvalidCursor`] for a cursor this listing did not hand out.
    async fn list_event_types(&self, limit: usize, cursor: Option<&str>) -> Result<Page<EventType>, StoreError>;
}
