//! The one place that owns an endpoint's state transitions, as [`crate::domain::delivery_lifecycle`] owns a
//! delivery's.
//!
//! ```text
//!            disable (manual), a disable code such as 410 (gone)
//!  enabled ------------------------------------------------------> disabled
//!     |   circuit breaker: N failed attempts in a row                  |
//!     '------------------------------------> paused                    |
//!                                   probe out |  ^ probe failed        |
//!                                             v  |                     |
//!                                           probing --probe 2xx--> enabled
//!  paused, probing --disable (manual) or a disable code--> disabled (probing ends)
//!  disabled, paused, probing --enable--> enabled
//! ```
//!
//! Who moves it: an operator (`disable`, `enable`, `PATCH`, `rotate-secret` through
//! [`crate::service::endpoints`]), deliver (a disable code, the circuit breaker, the probe's
//! outcome) and the sweeper's probe job. Each function here returns a [`Change`]: the endpoint
//! as it must be stored, the version it must still have (the guard), and the jobs that must
//! follow the transition. The store writes all of it in one TransactWriteItems
//! ([`crate::store::EndpointStore::commit`]), so a transition and its side effects (hold, notify,
//! release, the next probe) are recorded together or not at all; the jobs sit in the due
//! index and the sweeper finishes whatever the caller did not finish inline, so a failed AWS
//! call or a dead process cannot leave one undone. A write whose guard lost (someone changed
//! the endpoint since it was read) is re-read and decided again by the caller.
//!
//! What each state does to deliveries (deliver reads the endpoint with a strongly consistent
//! GetItem after its claim and right before its POST, whatever path queued the attempt):
//! - **enabled**: attempted under the retry policy.
//! - **disabled**, **paused**: new events are stored and held when they come up; scheduled
//!   deliveries are held (the hold job, and deliver when one comes due); an attempt in flight
//!   finishes and is recorded; held ones wait for `enable` (or the probe).
//! - **probing**: as paused, except the one probe delivery, which is attempted.
//!
//! The failures-in-a-row counter is not state: it moves with an atomic ADD
//! ([`crate::store::CounterStore::count_failure`]) and no versioned write touches it, except the
//! ones that reset it (enable, a successful probe).

use crate::clock::Random;
use crate::domain::ids::{DeliveryId, JobId, TenantId};
use crate::domain::model::{
    Attempt, Delivery, Disabled, Endpoint, EndpointState, Job, JobKind, REASON_CIRCUIT_BREAKER, REASON_GONE,
    REASON_MANUAL,
};
use crate::domain::operational::OperationalEvent;
use chrono::{DateTime, Duration, Utc};
use sha2::{Digest, Sha256};

/// A guarded change of an endpoint: write `endpoint` only while the stored one is still at
/// `expected_version`, and create `jobs` with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// The version read; the write loses when the stored version differs.
    pub expected_version: u64,
    /// The endpoint as it must be stored (`version` = `expected_version` + 1).
    pub endpoint: Endpoint,
    /// Zero the failures-in-a-row counter in the same write.
    pub reset_failures: bool,
    /// Work that must follow the transition, written with it (see the module docs).
    pub jobs: Vec<Job>,
}

/// A new running job of `kind` on `ep`, first due at `run_at`.
pub fn new_job(random: &Random, ep: &Endpoint, kind: JobKind, now: DateTime<Utc>, run_at: DateTime<Utc>) -> Job {
    Job {
        id: JobId::made(format!("job_{}", random.ulid(now))),
        kind,
        tenant_id: ep.tenant_id.clone(),
        endpoint_id: ep.id.to_string(),
        status: "running".into(),
        since: None,
        until: None,
        cursor: None,
        processed: 0,
        run_at: Some(run_at),
        event: None,
        created_at: now,
        updated_at: now,
    }
}

fn next(ep: &Endpoint, now: DateTime<Utc>) -> Endpoint {
    let mut e = ep.clone();
    e.version = ep.version + 1;
    e.updated_at = now;
    e
}

/// `now` plus `seconds`, at most [`crate::domain::retry_policy::MAX_WAIT_SECONDS`].
fn after(now: DateTime<Utc>, seconds: u64) -> DateTime<Utc> {
    now + Duration::seconds(i64::try_from(seconds.min(crate::domain::retry_policy::MAX_WAIT_SECONDS)).unwrap_or(0))
}

/// A change of configuration (PATCH, secret rotation): `apply` edits a copy; the state is
/// left as it is. A paused endpoint whose `auto_resume` is turned on (or whose cool-down
/// changes) gets a probe job after the (new) cool-down.
///
/// # Errors
/// Whatever `apply` returns.
pub fn configure<E>(
    ep: &Endpoint,
    now: DateTime<Utc>,
    random: &Random,
    apply: impl FnOnce(&mut Endpoint) -> Result<(), E>,
) -> Result<Change, E> {
    let mut e = next(ep, now);
    apply(&mut e)?;
    // State fields are this module's; a configuration change never moves them.
    e.enabled = ep.enabled;
    e.disabled = ep.disabled.clone();
    e.probe_delivery_id = ep.probe_delivery_id.clone();
    e.version = ep.version + 1;
    let resume_changed =
        e.auto_resume && (!ep.auto_resume || e.auto_resume_after_seconds != ep.auto_resume_after_seconds);
    let jobs = if e.state() == EndpointState::Paused && resume_changed {
        vec![new_job(random, ep, JobKind::Probe, now, after(now, e.auto_resume_after_seconds))]
    } else {
        Vec::new()
    };
    Ok(Change { expected_version: ep.version, endpoint: e, reset_failures: false, jobs })
}

/// Stops an endpoint for `disabled.reason`:
/// - from enabled, any reason: disabled (or paused for `circuit_breaker`), with a hold job, a
///   notify job and, for a pause with `auto_resume`, the probe job after the cool-down;
/// - from paused or probing, `manual` or `gone`: disabled for that reason, probing ends (an
///   operator's disable wins over the breaker's auto-resume);
/// - otherwise (already disabled, or the breaker on a paused endpoint): `None`, no change.
pub fn disable(ep: &Endpoint, now: DateTime<Utc>, disabled: Disabled, random: &Random) -> Option<Change> {
    let reason = disabled.reason.clone();
    match (ep.state(), reason.as_str()) {
        (EndpointState::Enabled, _) => {}
        (EndpointState::Paused | EndpointState::Probing(_), REASON_MANUAL | REASON_GONE) => {}
        _ => return None,
    }
    let mut e = next(ep, now);
    e.enabled = false;
    let mut notify = new_job(random, ep, JobKind::Notify, now, now);
    notify.event = Some(stopped_event(&notify.id, ep, &disabled));
    e.disabled = Some(disabled);
    e.probe_delivery_id = None;
    let mut jobs = vec![new_job(random, ep, JobKind::Hold, now, now), notify];
    if reason == REASON_CIRCUIT_BREAKER && ep.auto_resume {
        jobs.push(new_job(random, ep, JobKind::Probe, now, after(now, ep.auto_resume_after_seconds)));
    }
    Some(Change { expected_version: ep.version, endpoint: e, reset_failures: false, jobs })
}

/// Starts an endpoint again from any state: enabled, failures zeroed, no probe, and a release
/// job that gives back its held deliveries at a bounded rate. From enabled it changes nothing
/// but still starts a release job (harmless: it finds nothing held).
pub fn enable(ep: &Endpoint, now: DateTime<Utc>, random: &Random) -> Change {
    enable_because(ep, now, random, REASON_MANUAL)
}

/// [`enable`], with the operational event's reason: a notify job publishes
/// `endpoint.enabled` when the endpoint was not enabled before.
fn enable_because(ep: &Endpoint, now: DateTime<Utc>, random: &Random, reason: &str) -> Change {
    let mut e = next(ep, now);
    e.enabled = true;
    e.disabled = None;
    e.probe_delivery_id = None;
    e.consecutive_failures = 0;
    let mut jobs = vec![new_job(random, ep, JobKind::Release, now, now)];
    if ep.state() != EndpointState::Enabled {
        let mut notify = new_job(random, ep, JobKind::Notify, now, now);
        notify.event = Some(enabled_event(&notify.id, ep, reason, now));
        jobs.push(notify);
    }
    Change { expected_version: ep.version, endpoint: e, reset_failures: true, jobs }
}

/// Paused to probing, with `delivery_id` (a held delivery, released in the same write) as the
/// probe. `None` unless paused.
pub fn probe_out(ep: &Endpoint, delivery_id: &DeliveryId, now: DateTime<Utc>) -> Option<Change> {
    if ep.state() != EndpointState::Paused {
        return None;
    }
    let mut e = next(ep, now);
    e.probe_delivery_id = Some(delivery_id.clone());
    Some(Change { expected_version: ep.version, endpoint: e, reset_failures: false, jobs: Vec::new() })
}

/// The probe `delivery_id` failed: back to paused, with the next probe job after
/// `cool_down_seconds` (0 when the probe could not be sent at all and says nothing of the
/// receiver). `None` unless probing with that delivery.
pub fn probe_failed(
    ep: &Endpoint,
    delivery_id: &str,
    now: DateTime<Utc>,
    cool_down_seconds: u64,
    random: &Random,
) -> Option<Change> {
    if ep.state() != EndpointState::Probing(delivery_id) {
        return None;
    }
    let mut e = next(ep, now);
    e.probe_delivery_id = None;
    let at = after(now, cool_down_seconds);
    let jobs = vec![new_job(random, ep, JobKind::Probe, now, at)];
    Some(Change { expected_version: ep.version, endpoint: e, reset_failures: false, jobs })
}

/// The probe `delivery_id` succeeded: enabled, as [`enable`]. `None` unless probing with
/// that delivery.
pub fn probe_succeeded(ep: &Endpoint, delivery_id: &str, now: DateTime<Utc>, random: &Random) -> Option<Change> {
    (ep.state() == EndpointState::Probing(delivery_id)).then(|| enable_because(ep, now, random, "probe_succeeded"))
}

/// The operational event of a stop: `endpoint.paused` for the circuit breaker, else
/// `endpoint.disabled`; `id` is the notify job's.
fn stopped_event(id: &str, ep: &Endpoint, disabled: &Disabled) -> OperationalEvent {
    let event_type = if disabled.reason == REASON_CIRCUIT_BREAKER { "endpoint.paused" } else { "endpoint.disabled" };
    OperationalEvent {
        id: id.into(),
        event_type: event_type.into(),
        endpoint_id: ep.id.to_string(),
        tenant_id: ep.tenant_id.to_string(),
        reason: disabled.reason.clone(),
        status_code: disabled.status_code,
        delivery_id: disabled.delivery_id.as_ref().map(String::from),
        at: disabled.at,
        ..OperationalEvent::default()
    }
}

/// The operational event of an enable (`endpoint.enabled`, for `reason`); `id` is the notify
/// job's.
fn enabled_event(id: &str, ep: &Endpoint, reason: &str, at: DateTime<Utc>) -> OperationalEvent {
    OperationalEvent {
        id: id.into(),
        event_type: "endpoint.enabled".into(),
        endpoint_id: ep.id.to_string(),
        tenant_id: ep.tenant_id.to_string(),
        reason: reason.into(),
        at,
        ..OperationalEvent::default()
    }
}

// Notify jobs of operational events that are not an endpoint's transition (see
// crate::domain::operational): a dead letter, a failing endpoint, a job's end.

/// A notify job id made from `now` and a digest of `parts`: `job_` + a ULID whose time is
/// `now` (so it sorts with the others) and whose random part is the digest, the same for the
/// same transition (a transition built twice from the same item writes the same job).
pub fn derived_job_id(now: DateTime<Utc>, parts: &[&str]) -> JobId {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    let digest = h.finalize();
    let mut random = [0u8; 16];
    random.copy_from_slice(&digest[..16]);
    let ms = u64::try_from(now.timestamp_millis()).unwrap_or(0);
    JobId::made(format!("job_{}", ulid::Ulid::from_parts(ms, u128::from_be_bytes(random)).to_string().to_lowercase()))
}

/// A running notify job on (`tenant_id`, `endpoint_id`) due at `now`, publishing `event`
/// (whose `id` is set to the job's).
pub fn notify_job(
    id: JobId,
    tenant_id: &TenantId,
    endpoint_id: &str,
    now: DateTime<Utc>,
    event: OperationalEvent,
) -> Job {
    Job {
        kind: JobKind::Notify,
        tenant_id: tenant_id.clone(),
        endpoint_id: endpoint_id.to_string(),
        status: "running".into(),
        since: None,
        until: None,
        cursor: None,
        processed: 0,
        run_at: Some(now),
        event: Some(OperationalEvent { id: id.to_string(), ..event }),
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
        endpoint_id: claimed.endpoint_id.to_string(),
        tenant_id: claimed.tenant_id.to_string(),
        reason: reason.into(),
        status_code: last.status_code,
        delivery_id: Some(claimed.id.to_string()),
        event_id: Some(claimed.event_id.to_string()),
        delivery_event_type: Some(claimed.event_type.clone()),
        attempt_count: Some(claimed.attempt_count),
        error: last.error.clone(),
        at: now,
        ..OperationalEvent::default()
    };
    notify_job(id, &claimed.tenant_id, &claimed.endpoint_id, now, event)
}

/// The notify job of `job` (a recover, hold or purge job) finishing at `now` with its status:
/// `job.finished`. `None` for other kinds or a job still running.
pub fn finished_job(job: &Job, now: DateTime<Utc>) -> Option<Job> {
    let kind = match job.kind {
        JobKind::Recover => "recover",
        JobKind::Hold => "hold",
        JobKind::Purge => "purge",
        _ => return None,
    };
    if job.status == "running" {
        return None;
    }
    let id = derived_job_id(now, &["job.finished", &job.id]);
    let event = OperationalEvent {
        event_type: "job.finished".into(),
        endpoint_id: job.endpoint_id.clone(),
        tenant_id: job.tenant_id.to_string(),
        reason: job.status.clone(),
        job_id: Some(job.id.to_string()),
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
    tenant_id: &TenantId,
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
    use crate::domain::ids::id;

    fn ep() -> Endpoint {
        let now = Utc::now();
        Endpoint {
            consecutive_failures: 3,
            circuit_breaker_threshold: 5,
            auto_resume: true,
            auto_resume_after_seconds: 60,
            version: 7,
            ..Endpoint::new(id("ep_1"), id("t"), "https://example.com", "whsec_AAAA", now)
        }
    }

    fn why(reason: &str) -> Disabled {
        Disabled { reason: reason.into(), at: Utc::now(), status_code: None, delivery_id: None }
    }

    fn kinds(c: &Change) -> Vec<JobKind> {
        c.jobs.iter().map(|j| j.kind).collect()
    }

    #[test]
    fn every_change_is_guarded_by_the_version_read_and_bumps_it() {
        let r = Random::seeded(1);
        let now = Utc::now();
        let c = disable(&ep(), now, why(REASON_MANUAL), &r).unwrap();
        assert_eq!((c.expected_version, c.endpoint.version), (7, 8));
        let c = configure::<()>(&ep(), now, &r, |e| {
            e.url = "https://other.example.com".into();
            e.enabled = false; // not a configuration field: ignored
            Ok(())
        })
        .unwrap();
        assert_eq!((c.expected_version, c.endpoint.version, c.endpoint.enabled), (7, 8, true));
        assert_eq!(enable(&ep(), now, &r).expected_version, 7);
    }

    #[test]
    fn turning_auto_resume_on_while_paused_schedules_a_probe() {
        let r = Random::seeded(1);
        let now = Utc::now();
        let manual = Endpoint { auto_resume: false, ..ep() };
        let paused = disable(&manual, now, why(REASON_CIRCUIT_BREAKER), &r).unwrap();
        assert_eq!(kinds(&paused), [JobKind::Hold, JobKind::Notify], "no probe without auto_resume");
        let on = configure::<()>(&paused.endpoint, now, &r, |e| {
            e.auto_resume = true;
            Ok(())
        })
        .unwrap();
        assert_eq!(kinds(&on), [JobKind::Probe]);
        let unchanged = configure::<()>(&on.endpoint, now, &r, |_| Ok(())).unwrap();
        assert!(unchanged.jobs.is_empty());
    }

    #[test]
    fn the_breaker_pauses_with_a_probe_and_a_manual_disable_of_a_paused_endpoint_wins() {
        let r = Random::seeded(1);
        let now = Utc::now();
        let paused = disable(&ep(), now, why(REASON_CIRCUIT_BREAKER), &r).unwrap();
        assert_eq!(kinds(&paused), [JobKind::Hold, JobKind::Notify, JobKind::Probe]);
        assert_eq!(paused.endpoint.state(), EndpointState::Paused);
        assert!(disable(&paused.endpoint, now, why(REASON_CIRCUIT_BREAKER), &r).is_none());

        let probing = probe_out(&paused.endpoint, &id("dlv_1"), now).unwrap().endpoint;
        assert_eq!(probing.state(), EndpointState::Probing("dlv_1"));
        assert!(probing.accepts("dlv_1") && !probing.accepts("dlv_2"));

        let manual = disable(&probing, now, why(REASON_MANUAL), &r).unwrap();
        assert_eq!(manual.endpoint.state(), EndpointState::Disabled);
        assert_eq!(kinds(&manual), [JobKind::Hold, JobKind::Notify], "no probe after a manual disable");
        assert!(probe_succeeded(&manual.endpoint, "dlv_1", now, &r).is_none());

        let gone = disable(&probing, now, why(REASON_GONE), &r).unwrap();
        assert_eq!(gone.endpoint.disabled.unwrap().reason, REASON_GONE);
    }

    #[test]
    fn a_probe_resumes_or_goes_back_to_paused_with_the_next_probe() {
        let r = Random::seeded(1);
        let now = Utc::now();
        let paused = disable(&ep(), now, why(REASON_CIRCUIT_BREAKER), &r).unwrap().endpoint;
        let probing = probe_out(&paused, &id("dlv_1"), now).unwrap().endpoint;
        assert!(probe_failed(&probing, "dlv_2", now, 60, &r).is_none(), "only the probe's own outcome counts");
        let failed = probe_failed(&probing, "dlv_1", now, 60, &r).unwrap();
        assert_eq!(failed.endpoint.state(), EndpointState::Paused);
        assert_eq!(failed.jobs[0].run_at, Some(now + Duration::seconds(60)));
        let ok = probe_succeeded(&probing, "dlv_1", now, &r).unwrap();
        assert_eq!(ok.endpoint.state(), EndpointState::Enabled);
        assert!(ok.reset_failures);
        assert_eq!(kinds(&ok), [JobKind::Release, JobKind::Notify]);
        let event = ok.jobs[1].event.clone().unwrap();
        assert_eq!((event.event_type.as_str(), event.reason.as_str()), ("endpoint.enabled", "probe_succeeded"));
        assert_eq!(event.id, ok.jobs[1].id, "the event's id is its notify job's, the same on every publish");
    }

    #[test]
    fn the_same_transition_makes_the_same_job_and_another_another() {
        let now = Utc::now();
        let a = derived_job_id(now, &["delivery.exhausted", "dlv_1", "3"]);
        assert_eq!(a, derived_job_id(now, &["delivery.exhausted", "dlv_1", "3"]));
        assert_ne!(a, derived_job_id(now, &["delivery.exhausted", "dlv_1", "4"]));
        assert!(a.starts_with("job_") && a.len() == 30, "{a}");
    }

    #[test]
    fn each_stop_and_each_start_carries_its_operational_event() {
        let now = Utc::now();
        let r = Random::seeded(3);
        let why = |reason: &str| Disabled { reason: reason.into(), at: now, status_code: Some(410), delivery_id: None };
        for (reason, event_type) in [
            (REASON_GONE, "endpoint.disabled"),
            (REASON_MANUAL, "endpoint.disabled"),
            (REASON_CIRCUIT_BREAKER, "endpoint.paused"),
        ] {
            let c = disable(&ep(), now, why(reason), &r).unwrap();
            let notify = c.jobs.iter().find(|j| j.kind == JobKind::Notify).unwrap();
            let event = notify.event.clone().unwrap();
            assert_eq!((event.event_type.as_str(), event.reason.as_str()), (event_type, reason));
            assert_eq!(event.status_code, Some(410));
        }
        let stopped = disable(&ep(), now, why(REASON_MANUAL), &r).unwrap().endpoint;
        assert_eq!(kinds(&enable(&stopped, now, &r)), [JobKind::Release, JobKind::Notify]);
        assert_eq!(kinds(&enable(&ep(), now, &r)), [JobKind::Release], "enabling an enabled endpoint tells nothing");
    }
}
