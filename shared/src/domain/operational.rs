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
//! | `job.finished` | a recover or hold job ended | its status: `done`, `cancelled` | `job_id`, `job_kind`, `processed` |
//!
//! Each carries `id`, `endpoint_id`, `tenant_id` and `at` (when the transition happened).
//! Every event is fixed by the transition that causes it and written with it, on a notify job
//! ([`crate::domain::model::Job::event`]) in the same write, so it is published at least once
//! even if the process dies right after the transition (the sweeper runs the job); a retried
//! publish can repeat it (`id`, the same on every publish, tells repeats apart):
//! - endpoint transitions: the job is one of the transition's jobs
//!   ([`crate::domain::endpoint_lifecycle`]);
//! - `delivery.exhausted`: the job rides on the delivery's transition
//!   ([`crate::domain::delivery_lifecycle::complete`], [`exhausted_job`]). Cost, per exhausted
//!   delivery, in DynamoDB requests: the record is one TransactWriteItems (the delivery's
//!   update and the job's PutItem) instead of one UpdateItem, so no extra request there but
//!   twice the write units of the delivery item (a transaction's price) plus the job item's;
//!   then the job's step: a claim (UpdateItem), a GetItem of the job, a GetItem of the
//!   endpoint and the job's save (PutItem), 4 requests, plus the EventBridge PutEvents. A
//!   record of a delivered attempt, or of a retry, carries no job and costs what it did;
//! - `job.finished`: the step that ends a recover or hold job writes the notify job in the
//!   same TransactWriteItems as the job's own final save
//!   ([`crate::store::JobStore::finish_job`]);
//! - `endpoint.failing`: see [`FAILING_FRACTION`] and [`failing_job`].

use crate::domain::model::{Attempt, Delivery, Job, JobKind};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The EventBridge `source` of every operational event.
pub const SOURCE: &str = "webhooks.operational";

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
    /// `job.finished`: `recover` or `hold`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_kind: Option<String>,
    /// `job.finished`: deliveries the job released (recover) or held (hold).
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

/// A notify job id made from `now` and a digest of `parts`: `job_` + a ULID whose time is
/// `now` (so it sorts with the others) and whose random part is the digest, the same for the
/// same transition (a transition built twice from the same item writes the same job).
fn derived_job_id(now: DateTime<Utc>, parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    let digest = h.finalize();
    let mut random = [0u8; 16];
    random.copy_from_slice(&digest[..16]);
    let ms = u64::try_from(now.timestamp_millis()).unwrap_or(0);
    format!("job_{}", ulid::Ulid::from_parts(ms, u128::from_be_bytes(random)).to_string().to_lowercase())
}

/// A running notify job on (`tenant_id`, `endpoint_id`) due at `now`, publishing `event`
/// (whose `id` is set to the job's).
pub fn notify_job(id: String, tenant_id: &str, endpoint_id: &str, now: DateTime<Utc>, event: OperationalEvent) -> Job {
    Job {
        kind: JobKind::Notify,
        tenant_id: tenant_id.to_string(),
        endpoint_id: endpoint_id.to_string(),
        status: "running".into(),
        since: None,
        until: None,
        cursor: None,
        processed: 0,
        run_at: Some(now),
        event: Some(OperationalEvent { id: id.clone(), ..event }),
        created_at: now,
        updated_at: now,
        id,
    }
}

/// The notify job of `claimed` becoming exhausted at `now` with `last` its last attempt: it
/// publishes `delivery.exhausted`.
pub fn exhausted_job(claimed: &Delivery, last: &Attempt, now: DateTime<Utc>) -> Job {
    let id = derived_job_id(now, &["delivery.exhausted", &claimed.id, &claimed.attempt_count.to_string()]);
    let reason = if last.error.as_deref() == Some("payload_expired") { "payload_expired" } else { "retry_policy" };
    let event = OperationalEvent {
        event_type: "delivery.exhausted".into(),
        endpoint_id: claimed.endpoint_id.clone(),
        tenant_id: claimed.tenant_id.clone(),
        reason: reason.into(),
        status_code: last.status_code,
        delivery_id: Some(claimed.id.clone()),
        event_id: Some(claimed.event_id.clone()),
        delivery_event_type: Some(claimed.event_type.clone()),
        attempt_count: Some(claimed.attempt_count),
        error: last.error.clone(),
        at: now,
        ..OperationalEvent::default()
    };
    notify_job(id, &claimed.tenant_id, &claimed.endpoint_id, now, event)
}

/// The notify job of `job` (a recover or hold job) finishing at `now` with its status:
/// `job.finished`. `None` for other kinds or a job still running.
pub fn finished_job(job: &Job, now: DateTime<Utc>) -> Option<Job> {
    let kind = match job.kind {
        JobKind::Recover => "recover",
        JobKind::Hold => "hold",
        _ => return None,
    };
    if job.status == "running" {
        return None;
    }
    let id = derived_job_id(now, &["job.finished", &job.id]);
    let event = OperationalEvent {
        event_type: "job.finished".into(),
        endpoint_id: job.endpoint_id.clone(),
        tenant_id: job.tenant_id.clone(),
        reason: job.status.clone(),
        job_id: Some(job.id.clone()),
        job_kind: Some(kind.into()),
        processed: Some(job.processed),
        at: now,
        ..OperationalEvent::default()
    };
    Some(notify_job(id, &job.tenant_id, &job.endpoint_id, now, event))
}

/// The notify job of `endpoint_id`'s failures in a row reaching [`failing_at`] its breaker's
/// `threshold`, counted at `failures` by the failure of `delivery_id` (its last attempt
/// `last`) at `now`: it publishes `endpoint.failing`.
pub fn failing_job(
    tenant_id: &str,
    endpoint_id: &str,
    failures: u32,
    threshold: u32,
    delivery_id: &str,
    last: &Attempt,
    now: DateTime<Utc>,
) -> Job {
    let id = derived_job_id(now, &["endpoint.failing", endpoint_id, delivery_id, &last.attempt.to_string()]);
    let event = OperationalEvent {
        event_type: "endpoint.failing".into(),
        endpoint_id: endpoint_id.to_string(),
        tenant_id: tenant_id.to_string(),
        reason: "failures_in_a_row".into(),
        status_code: last.status_code,
        delivery_id: Some(delivery_id.to_string()),
        error: last.error.clone(),
        consecutive_failures: Some(failures),
        threshold: Some(threshold),
        at: now,
        ..OperationalEvent::default()
    };
    notify_job(id, tenant_id, endpoint_id, now, event)
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

    #[test]
    fn the_same_transition_makes_the_same_job_and_another_another() {
        let now = Utc::now();
        let a = derived_job_id(now, &["delivery.exhausted", "dlv_1", "3"]);
        assert_eq!(a, derived_job_id(now, &["delivery.exhausted", "dlv_1", "3"]));
        assert_ne!(a, derived_job_id(now, &["delivery.exhausted", "dlv_1", "4"]));
        assert!(a.starts_with("job_") && a.len() == 30, "{a}");
    }
}
