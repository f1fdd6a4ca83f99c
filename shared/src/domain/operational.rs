//! Operational events: what happened to an endpoint, a delivery or a job, for the producer's
//! own code to act on (Svix's `endpoint.disabled`, Outpost's alerts, Convoy's meta events).
//!
//! | event type | when | `reason` | detail beyond the common fields |
//! |---|---|---|---|
//! | `endpoint.disabled` | an operator disabled it, or the receiver did (410 under `standard`) | `manual`, `gone` | `status_code`, `delivery_id` |
//! | `endpoint.paused` | the circuit breaker paused it (failures in a row reached its threshold) | `circuit_breaker` | `status_code`, `delivery_id` |
//! | `endpoint.enabled` | an operator enabled it, or a half-open probe's success did | `manual`, `probe_succeeded` | - |
//! | `endpoint.failing` | its failures in a row reached [`FAILING_FRACTION`] of its breaker's threshold, once per run of failures | `failures_in_a_row` | `consecutive_failures`, `threshold`, `status_code`, `error`, `delivery_id` |
//! | `delivery.exhausted` | a delivery became a dead letter by its retry policy (a final answer, its attempts used up, or its payload expired) | `retry_policy`, `payload_expired` | `delivery_id`, `event_id`, `delivery_event_type`, `attempt_count`, `status_code`, `error` |
//! | `job.finished` | a recover, hold or purge job ended | its status: `done`, `cancelled` | `job_id`, `job_kind`, `processed` |
//!
//! Each carries `id`, `endpoint_id`, `tenant_id` and `at` (when the transition happened).
//! Every event is fixed by the transition that causes it and written with it, on a notify job
//! ([`crate::domain::model::Job::event`]) in the same write, so it is published at least once
//! even if the process dies right after the transition (the sweeper runs the job); a retried
//! publish can repeat it (`id`, the same on every publish, tells repeats apart):
//! - endpoint transitions: the job is one of the transition's jobs
//!   ([`crate::domain::endpoint_lifecycle`]);
//! - `delivery.exhausted`: the job rides on the delivery's transition
//!   ([`crate::domain::delivery_lifecycle::complete`], [`crate::domain::endpoint_lifecycle::exhausted_job`]). Cost, per exhausted
//!   delivery, in DynamoDB requests: the record is one TransactWriteItems (the delivery's
//!   update and the job's PutItem) instead of one UpdateItem, so no extra request there but
//!   twice the write units of the delivery item (a transaction's price) plus the job item's;
//!   then the job's step: a claim (UpdateItem), a GetItem of the job, a GetItem of the
//!   endpoint and the job's save (PutItem), 4 requests, plus the EventBridge PutEvents. A
//!   record of a delivered attempt, or of a retry, carries no job and costs what it did;
//! - `job.finished`: the step that ends a recover, hold or purge job writes the notify job in the
//!   same TransactWriteItems as the job's own final save
//!   ([`crate::store::JobStore::finish_job`]);
//! - `endpoint.failing`: the failures-in-a-row counter is an ADD, not a versioned transition,
//!   so the announcement is a mark instead: the failure whose count (summed over the copies)
//!   is at or past [`failing_at`] and that finds no `failing_announced` mark on the endpoint
//!   item writes its notify job ([`crate::domain::endpoint_lifecycle::failing_job`]) and the mark in one TransactWriteItems
//!   conditional on the mark's absence ([`crate::store::CounterStore::announce_failing`]):
//!   once per run, since the mark stays until the reset that ends the run (a 2xx counted on
//!   any copy) or an enable removes it. At least once: deliver announces right after counting
//!   and before recording the attempt; a process that dies before the announcement leaves
//!   the mark absent, so the run's next failure announces it (the unrecorded attempt is
//!   re-driven by the sweeper, and fails again while the receiver does). A run that ends with
//!   that very failure (its next attempt a 2xx) is not announced: nothing is failing by then.
//!   Cost: one TransactWriteItems per run (plus, with endpoint copies, one BatchGetItem of the
//!   copies' counts per failure once the copy holds its share of the mark, as the breaker's
//!   check already does at its own mark); nothing on an endpoint without failures.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The EventBridge `source` of every operational event.
pub const SOURCE: &str = "webhooks.operational";

/// The stack's own tenant for operational endpoints: endpoints registered under this
/// `tenant_id` (through the admin API, like any other) receive the operational events they
/// subscribe to as signed webhooks, through the same pipeline as every event (retries, dead
/// letters, replay). Reserved: a producer's event for it is refused (403 `reserved_tenant`).
pub const TENANT: &str = "webhooks.operational";

/// Refuses [`TENANT`] where only the stack may act for it (403 `reserved_tenant`): a
/// producer's event, a portal session (its holder could register endpoints that receive every
/// tenant's operational events), an API key naming it (the key could post nothing there), and
/// a purge (it would stop the stack's own announcements). `what` names the field or route in
/// the message. The operator manages the tenant's endpoints through the admin API.
///
/// # Errors
/// [`crate::error::ServiceError::ReservedTenant`] when `tenant_id` is [`TENANT`].
pub fn refuse_reserved(tenant_id: &str, what: &str) -> Result<(), crate::error::ServiceError> {
    if tenant_id == TENANT {
        return Err(crate::error::ServiceError::ReservedTenant(format!(
            "{what}: {TENANT} is the stack's own tenant for operational events; manage its endpoints through the admin API"
        )));
    }
    Ok(())
}

/// Every operational event type, the catalog of [`TENANT`]'s endpoints (with
/// `WEBHOOKS_EVENT_TYPES=registered`, their `event_types` are checked against these, not the
/// producers' catalog).
pub const EVENT_TYPES: [&str; 6] = [
    "endpoint.disabled",
    "endpoint.paused",
    "endpoint.enabled",
    "endpoint.failing",
    "delivery.exhausted",
    "job.finished",
];

/// The share of an endpoint's circuit-breaker threshold (failures in a row) at which
/// `endpoint.failing` is published: half, so an owner hears of a receiver going bad while as
/// many failures again remain before the breaker pauses it (with the default threshold of 100,
/// after 50 failed attempts in a row; at the `standard` preset's first waits that is minutes
/// to hours ahead of the pause, time to fix the receiver before deliveries are held). A
/// threshold of 1 announces at 1, with the pause.
pub const FAILING_FRACTION: f64 = 0.5;

/// The failures in a row at which `endpoint.failing` is published for a breaker `threshold`:
/// [`FAILING_FRACTION`] of it, rounded up, at least 1; `None` when the breaker is off (0).
pub fn failing_at(threshold: u32) -> Option<u32> {
    (threshold > 0).then(|| ((f64::from(threshold) * FAILING_FRACTION).ceil() as u32).max(1))
}

/// One operational event, as published (EventBridge `detail-type` is `event_type`, `detail`
/// the whole value).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct OperationalEvent {
    /// The event's id, the same on every publish of it (the notify job's id): deduplicate
    /// on it.
    pub id: String,
    /// One of the event types in the module's table.
    pub event_type: String,
    /// The endpoint.
    pub endpoint_id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// Why: `manual`, `gone`, `circuit_breaker`, `probe_succeeded`, `failures_in_a_row`,
    /// `retry_policy`, `payload_expired`, `done`, `cancelled`.
    pub reason: String,
    /// The status code that caused a stop, of the last attempt of an exhausted delivery, or
    /// of the failure that made an endpoint failing, if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
    /// The delivery whose attempt caused a stop, or that was exhausted, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_id: Option<String>,
    /// `delivery.exhausted`: the delivery's event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    /// `delivery.exhausted`: the delivery's event type (e.g. `order.paid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_event_type: Option<String>,
    /// `delivery.exhausted`: attempts made on the delivery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_count: Option<u32>,
    /// The last attempt's error class (`http_status`, `timeout`, ...), when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `endpoint.failing`: failed attempts in a row when it was counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_failures: Option<u32>,
    /// `endpoint.failing`: the circuit breaker's threshold (failures in a row).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<u32>,
    /// `job.finished`: the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// `job.finished`: `recover`, `hold` or `purge`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_kind: Option<String>,
    /// `job.finished`: deliveries the job released (recover) or held (hold), items a purge
    /// removed (at least).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processed: Option<u32>,
    /// When the transition happened.
    pub at: DateTime<Utc>,
}

impl OperationalEvent {
    /// Whether it tells of a stop (disabled or paused): the owner's SNS notification goes
    /// with those.
    pub fn is_stop(&self) -> bool {
        matches!(self.event_type.as_str(), "endpoint.disabled" | "endpoint.paused")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failing_is_announced_at_half_the_threshold_rounded_up() {
        assert_eq!(failing_at(100), Some(50));
        assert_eq!(failing_at(5), Some(3));
        assert_eq!(failing_at(1), Some(1));
        assert_eq!(failing_at(0), None, "no breaker, no announcement");
    }

    #[test]
    fn only_disables_and_pauses_are_stops() {
        let e = |t: &str| OperationalEvent { event_type: t.into(), ..OperationalEvent::default() };
        assert!(e("endpoint.disabled").is_stop() && e("endpoint.paused").is_stop());
        for t in ["endpoint.enabled", "endpoint.failing", "delivery.exhausted", "job.finished"] {
            assert!(!e(t).is_stop(), "{t}");
        }
    }
}
