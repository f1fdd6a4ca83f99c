//! Operational events: what happened to an endpoint, for the producer's own code to act on
//! (Svix's `endpoint.disabled`, Outpost's alerts, Convoy's meta events).
//!
//! | event type | when | detail |
//! |---|---|---|
//! | `endpoint.disabled` | an operator disabled it, or the receiver did (410 under `standard`) | `reason` (`manual`, `gone`), `status_code`, `delivery_id` |
//! | `endpoint.paused` | the circuit breaker paused it (failures in a row reached its threshold) | `reason` (`circuit_breaker`), `status_code`, `delivery_id` |
//! | `endpoint.enabled` | an operator enabled it, or a half-open probe's success did | `reason` (`manual`, `probe_succeeded`) |
//!
//! Each carries `endpoint_id`, `tenant_id` and `at` (when the transition happened). The
//! event is fixed by the transition that causes it and written with it, on its notify job
//! ([`crate::domain::model::Job::event`]), so it is published at least once even if the
//! process dies right after the transition (the sweeper runs the job); a retried publish can
//! repeat it (`id`, the same on every publish, tells repeats apart).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The EventBridge `source` of every operational event.
pub const SOURCE: &str = "webhooks.operational";

/// The stack's own tenant for operational endpoints: endpoints registered under this
/// `tenant_id` (through the admin API, like any other) receive the operational events they
/// subscribe to as signed webhooks, through the same pipeline as every event (retries, dead
/// letters, replay). Reserved: a producer's event for it is refused (403 `reserved_tenant`).
pub const TENANT: &str = "webhooks.operational";

/// One operational event, as published (EventBridge `detail-type` is `event_type`, `detail`
/// the whole value).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperationalEvent {
    /// The event's id, the same on every publish of it (the notify job's id): deduplicate
    /// on it.
    pub id: String,
    /// `endpoint.disabled`, `endpoint.paused` or `endpoint.enabled`.
    pub event_type: String,
    /// The endpoint.
    pub endpoint_id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// Why: `manual`, `gone`, `circuit_breaker`, `probe_succeeded`.
    pub reason: String,
    /// The status code that caused a stop, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
    /// The delivery whose attempt caused a stop, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_id: Option<String>,
    /// When the transition happened.
    pub at: DateTime<Utc>,
}

impl OperationalEvent {
    /// Whether it tells of a stop (disabled or paused): the owner's SNS notification goes
    /// with those.
    pub fn is_stop(&self) -> bool {
        self.event_type != "endpoint.enabled"
    }
}
