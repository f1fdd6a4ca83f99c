//! Endpoint health: the services that move an endpoint through
//! [`crate::domain::endpoint_lifecycle`] (disable, enable, any guarded change with its re-read on a lost
//! guard) and the background jobs that carry out what must follow a transition, one bounded
//! step per sweeper tick: hold a disabled endpoint's scheduled deliveries, tell its owner,
//! release what was held after an enable, release a half-open probe, recover a window of dead
//! letters, end what a deleted endpoint's delete missed; a tenant's purge runs its own steps
//! ([`crate::service::purge`]).
//!
//! A transition's jobs are written in the same transaction as the transition; the caller runs
//! the hold and notify steps at once (best effort) and the sweeper runs whatever is still due,
//! so each is done at least once whatever single call fails. Every step is idempotent: a hold
//! or release is a guarded delivery transition, and a notification sent twice says the same
//! thing twice.
//!
//! Nothing is dropped on any of these paths: a held delivery keeps its history and goes back
//! to `scheduled` when its endpoint is enabled again. Its payload lives in the event's item
//! for `WEBHOOKS_EVENT_RETENTION_DAYS` from ingest; a delivery held longer than that ends
//! `exhausted` with `payload_expired` when it is released, visibly, rather than sent empty.

use crate::App;
use crate::domain::delivery_lifecycle::{self, EndpointEntry, Enqueue};
use crate::domain::endpoint_lifecycle::{self, Change};
use crate::domain::ids::{EndpointId, JobId, TenantId};
use crate::domain::model::{
    Delivery, DeliveryStatus, Disabled, Endpoint, EndpointState, Job, JobKind, REASON_ENDPOINT_DELETED, REASON_MANUAL,
    REASON_UNSUBSCRIBED,
};
use crate::domain::operational::OperationalEvent;
use crate::error::ServiceError;
use crate::store::{Applied, Committed, DeliveryQuery, EndpointWrite};
use chrono::{DateTime, Duration, Utc};

mod pages;
use pages::{end_deleted_page, hold_page, probe_step, release_page};

/// How many times a guarded endpoint change is decided again after losing its guard before
/// the caller gets 409 `conflict`.
pub const CHANGE_TRIES: usize = 5;

/// How long after a release or hold job starts it keeps looking for stragglers: the
/// `by_endpoint` index it reads lags the table (usually well under a second), so a step that
/// finds nothing left ends the job only once the job is this old. Seconds.
pub const INDEX_SETTLE_SECONDS: i64 = 5;

/// How long an `end_deleted` job waits for its endpoint's delete before it gives up (600
/// seconds: the delete follows the job's write within one admin call, 30 s at most on
/// Lambda; a delete that failed half way leaves the endpoint, and its caller an error to
/// retry, which writes a new job).
pub const END_DELETED_GIVE_UP_SECONDS: i64 = 600;

/// Reads endpoint (`tenant_id`, `id`), asks `decide` for a change on it as read, and commits
/// the change with its jobs; when another writer changed the endpoint first, reads it again
/// and asks again. Runs the change's hold and notify jobs inline afterwards (the sweeper
/// finishes them if this fails). Returns the endpoint as stored after, and the change written
/// (`None` when `decide` asked for none).
///
/// # Errors
/// [`ServiceError::NotFound`] when the endpoint does not exist; [`ServiceError::Conflict`]
/// when it changed under every one of [`CHANGE_TRIES`] tries; whatever `decide` returns;
/// [`ServiceError::Unavailable`] when DynamoDB failed.
pub async fn change_endpoint(
    app: &App,
    tenant_id: &TenantId,
    id: &EndpointId,
    mut decide: impl FnMut(&Endpoint) -> Result<Option<Change>, ServiceError>,
) -> Result<(Endpoint, Option<Change>), ServiceError> {
    for _ in 0..CHANGE_TRIES {
        let ep = app.store.get_endpoint(tenant_id, id).await?.ok_or_else(|| not_found(id))?;
        let Some(change) = decide(&ep)? else { return Ok((ep, None)) };
        match app.store.commit(EndpointWrite::Change(&change), None).await? {
            Committed::Done => {
                committed(app, &ep, &change);
                run_inline(app, &change.jobs).await;
                return Ok((change.endpoint.clone(), Some(change)));
            }
            Committed::EndpointChanged | Committed::DeliveryLost => continue,
        }
    }
    Err(ServiceError::Conflict(format!("endpoint {id} changed under {CHANGE_TRIES} tries; retry")))
}

/// Counts a transition written (after its commit) in the metrics ops alarm on (see
/// [`stop_metric`]), with a log line naming the tenant and the endpoint (Logs Insights groups
/// on them; they are never metric dimensions). Every caller that commits a [`Change`] calls
/// this.
pub fn committed(app: &App, before: &Endpoint, change: &Change) {
    let after = &change.endpoint;
    if let Some(m) = stop_metric(before, after) {
        tracing::warn!(
            tenant_id = %after.tenant_id,
            endpoint_id = %after.id,
            reason = after.disabled.as_ref().map(|d| d.reason.as_str()).unwrap_or_default(),
            metric = m.0,
            "endpoint stopped"
        );
        crate::metrics::emit(&app.config, app.clock.now().timestamp_millis(), &[m]);
    }
}

/// The metric a move of an endpoint from `before` to `after` counts: into paused (the circuit
/// breaker) `EndpointsPaused`; into disabled for a receiver's disable code (`gone`)
/// `EndpointsDisabled`. An operator's manual disable, enables, and the probe's back-and-forth
/// between paused and probing count nothing.
pub fn stop_metric(before: &Endpoint, after: &Endpoint) -> Option<crate::metrics::Metric<'static>> {
    let reason = after.disabled.as_ref().map(|d| d.reason.as_str());
    match (before.state(), after.state(), reason) {
        (EndpointState::Paused | EndpointState::Probing(_), EndpointState::Paused, _) => None,
        (_, EndpointState::Paused, _) => Some(("EndpointsPaused", 1.0, "Count")),
        (EndpointState::Disabled, EndpointState::Disabled, _) => None,
        (_, EndpointState::Disabled, Some(r)) if r != REASON_MANUAL => Some(("EndpointsDisabled", 1.0, "Count")),
        _ => None,
    }
}

fn not_found(id: &str) -> ServiceError {
    ServiceError::NotFound(format!("endpoint {id}"))
}

/// Disables an endpoint for `disabled.reason` (see [`endpoint_lifecycle::disable`] for which
/// states it moves). Returns the endpoint after, and whether it changed.
///
/// # Errors
/// As [`change_endpoint`].
pub async fn disable(app: &App, endpoint: &Endpoint, disabled: Disabled) -> Result<(Endpoint, bool), ServiceError> {
    let (ep, change) = change_endpoint(app, &endpoint.tenant_id, &endpoint.id, |ep| {
        Ok(endpoint_lifecycle::disable(ep, app.clock.now(), disabled.clone(), &app.random))
    })
    .await?;
    if change.is_some() {
        tracing::warn!(endpoint_id = %ep.id, reason = %disabled.reason, "endpoint disabled");
    }
    Ok((ep, change.is_some()))
}

/// Enables an endpoint; the returned job gives back its held deliveries,
/// `config.release_per_tick` per sweeper tick.
///
/// # Errors
/// As [`change_endpoint`].
pub async fn enable(app: &App, endpoint: &Endpoint) -> Result<(Endpoint, Job), ServiceError> {
    let (ep, change) = change_endpoint(app, &endpoint.tenant_id, &endpoint.id, |ep| {
        Ok(Some(endpoint_lifecycle::enable(ep, app.clock.now(), &app.random)))
    })
    .await?;
    let jobs = change.map(|c| c.jobs).unwrap_or_default();
    run_inline(app, &jobs).await;
    let job = jobs
        .into_iter()
        .find(|j| j.kind == JobKind::Release)
        .ok_or_else(|| ServiceError::Unavailable("enable wrote no release job".into()))?;
    tracing::info!(endpoint_id = %ep.id, "endpoint enabled");
    Ok((ep, job))
}

/// Runs the first step of the hold and notify jobs among `jobs` now, so that a disable's
/// effects do not wait for the next sweeper tick. Best effort: a step that fails (or that
/// another worker took) is left to the sweeper, which finds the job in the due index.
pub async fn run_inline(app: &App, jobs: &[Job]) {
    for job in jobs.iter().filter(|j| matches!(j.kind, JobKind::Hold | JobKind::Notify)) {
        let Some(at) = job.run_at else { continue };
        match run_endpoint_job_step(app, &job.id, at.timestamp_millis()).await {
            Ok(messages) if messages.is_empty() => {}
            Ok(messages) => {
                if let Err(e) = app.queue.send(&messages).await {
                    tracing::warn!(job_id = %job.id, error = %e, "job messages not sent; the sweeper re-drives them");
                }
            }
            Err(e) => tracing::warn!(job_id = %job.id, error = %e, "job step failed; the sweeper runs it again"),
        }
    }
}

/// Creates a running job of `kind` on `endpoint` whose first step is due at `run_at` (recover
/// jobs; the jobs of a transition are written by the transition).
///
/// # Errors
/// [`ServiceError::Unavailable`] when DynamoDB failed.
pub async fn start_job(
    app: &App,
    endpoint: &Endpoint,
    kind: JobKind,
    run_at: DateTime<Utc>,
    since: Option<DateTime<Utc>>,
    until: Option<DateTime<Utc>>,
) -> Result<Job, ServiceError> {
    let now = app.clock.now();
    let job = Job { since, until, ..endpoint_lifecycle::new_job(&app.random, endpoint, kind, now, run_at) };
    app.store.create_job(&job).await?;
    Ok(job)
}

/// Runs one step of a due job (the sweeper calls this): an endpoint job's ([`job_step`]) or a
/// tenant purge's ([`crate::service::purge::step`]). A step handles at most
/// `config.release_per_tick` deliveries; a job with more to do runs again next tick.
/// Returns the messages to send.
///
/// # Errors
/// [`ServiceError::Unavailable`] when DynamoDB failed; the job runs again after its lease.
pub async fn run_job_step(app: &App, id: &JobId, due_at: i64) -> Result<Vec<Enqueue>, ServiceError> {
    run_job_step_until(app, id, due_at, std::time::Instant::now() + app.config.sweep_budget).await
}

/// [`run_job_step`] for a step that must end by `deadline` (the sweeper's tick budget): a
/// purge's step starts no piece of work it has no time left for, and saves after each
/// ([`crate::service::purge::step`]).
///
/// # Errors
/// As [`run_job_step`].
pub async fn run_job_step_until(
    app: &App,
    id: &JobId,
    due_at: i64,
    deadline: std::time::Instant,
) -> Result<Vec<Enqueue>, ServiceError> {
    let Some((job, now, lease)) = take_step(app, id, due_at).await? else { return Ok(Vec::new()) };
    let out = if job.kind == JobKind::Purge {
        match crate::service::purge::step(app, job, now, lease, deadline).await {
            Ok(Some(notify)) => {
                Box::pin(run_inline(app, std::slice::from_ref(&notify))).await;
                Ok(Vec::new())
            }
            Ok(None) => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    } else {
        job_step(app, job, now, lease).await
    };
    step_ended(app, id, now, lease, out).await
}

/// [`run_job_step`] of a hold or notify job run inline ([`run_inline`]): never a purge's
/// (whose steps scan the table: only the sweeper's role may).
async fn run_endpoint_job_step(app: &App, id: &JobId, due_at: i64) -> Result<Vec<Enqueue>, ServiceError> {
    let Some((job, now, lease)) = take_step(app, id, due_at).await? else { return Ok(Vec::new()) };
    let out = job_step(app, job, now, lease).await;
    step_ended(app, id, now, lease, out).await
}

/// Takes a step of job `id` due at `due_at`: its lease (a concurrent tick loses this
/// condition; if this worker dies, the job is due again after the lease, the sweeper's budget:
/// no step outlives it) and the job as it is then. `None`: another took it, or it is gone.
async fn take_step(app: &App, id: &JobId, due_at: i64) -> Result<Option<(Job, DateTime<Utc>, i64)>, ServiceError> {
    let now = app.clock.now();
    let lease =
        now.timestamp_millis() + i64::try_from(app.config.sweep_budget.as_millis()).unwrap_or(60_000).max(1_000);
    if !app.store.claim_job(id, due_at, lease).await? {
        return Ok(None);
    }
    match app.store.get_job(id).await {
        Ok(job) => Ok(job.map(|j| (j, now, lease))),
        Err(e) => step_ended(app, id, now, lease, Err(e.into())).await.map(|_| None),
    }
}

/// A step's outcome; a failed one makes the job due again at once rather than after the lease
/// (best effort: the lease is the fallback). Every step is idempotent, so repeating its first
/// half is safe.
async fn step_ended(
    app: &App,
    id: &JobId,
    now: DateTime<Utc>,
    lease: i64,
    out: Result<Vec<Enqueue>, ServiceError>,
) -> Result<Vec<Enqueue>, ServiceError> {
    if out.is_err() {
        let _ = app.store.claim_job(id, lease, now.timestamp_millis()).await;
    }
    out
}

/// One step of endpoint job `job`, taken with the lease `lease` (due time, milliseconds): its
/// work, then its outcome written only while the lease still holds
/// ([`crate::store::JobStore::save_job`]). A purge job is the sweeper's ([`run_job_step`]):
/// left as it is here.
async fn job_step(app: &App, mut job: Job, now: DateTime<Utc>, lease: i64) -> Result<Vec<Enqueue>, ServiceError> {
    if job.kind == JobKind::Purge {
        return Ok(Vec::new());
    }
    let endpoint = match job.endpoint() {
        Some(id) => app.store.get_endpoint(&job.tenant_id, &id).await?,
        None => None,
    };
    let mut out = Vec::new();
    // A list page holds at most 100 deliveries: a step that asked for more and found fewer
    // would take that as "nothing left".
    let limit = app.config.release_per_tick.clamp(1, 100);
    let settled = now - job.created_at >= Duration::seconds(INDEX_SETTLE_SECONDS);
    match (job.kind, endpoint) {
        (JobKind::EndDeleted, None) => {
            // The index settles from the delete, which the first step to find the endpoint
            // gone stands for (the job is written ahead of the delete's own work).
            let gone = *job.since.get_or_insert(now);
            let (found, more) = end_deleted_page(app, &job, limit).await?;
            job.processed += u32::try_from(found).unwrap_or(u32::MAX);
            if found < limit && !more && now - gone >= Duration::seconds(INDEX_SETTLE_SECONDS) {
                job.status = "done".into();
            }
        }
        // The delete has not happened (yet: it runs after this job is written); look again
        // next tick, and give up once the delete clearly failed (its caller saw an error).
        (JobKind::EndDeleted, Some(_)) => {
            if now - job.created_at > Duration::seconds(END_DELETED_GIVE_UP_SECONDS) {
                job.status = "cancelled".into();
            }
        }
        // Deleted since: the transition's operational event still goes out (it happened).
        (JobKind::Notify, None) => {
            if let Some(event) = &job.event {
                publish_operational(app, event).await?;
                job.processed += 1;
                job.status = "done".into();
            } else {
                job.status = "cancelled".into();
            }
        }
        (JobKind::Purge, _) | (_, None) => job.status = "cancelled".into(),
        (JobKind::Release, Some(ep)) if !ep.enabled => job.status = "cancelled".into(),
        (JobKind::Release, Some(ep)) => {
            // Released deliveries leave `held`, so each step starts from the oldest again.
            let (found, more) = release_page(app, &ep, DeliveryStatus::Held, limit, None, &mut job, &mut out).await?;
            if found < limit && more.is_none() && settled {
                job.status = "done".into();
            }
        }
        (JobKind::Recover, Some(ep)) => {
            let cursor = job.cursor.take();
            let (_, next) =
                release_page(app, &ep, DeliveryStatus::Exhausted, limit, cursor, &mut job, &mut out).await?;
            match next {
                Some(c) => job.cursor = Some(c),
                None => job.status = "done".into(),
            }
        }
        (JobKind::Hold, Some(ep)) if ep.enabled => job.status = "cancelled".into(),
        (JobKind::Hold, Some(ep)) => {
            let (found, interrupted, more) = hold_page(app, &ep, limit, &mut job).await?;
            if found < limit && !more && settled && !interrupted {
                job.status = "done".into();
            }
        }
        (JobKind::Notify, Some(ep)) => {
            // The owner's notification of a stop, while the endpoint is still stopped (first,
            // as before operational events: a failing bus does not hold it back).
            if job.event.as_ref().is_none_or(|e| e.is_stop()) {
                match (&ep.disabled, ep.enabled) {
                    (Some(disabled), false) => {
                        app.notifier.endpoint_disabled(&ep, disabled).await.map_err(ServiceError::Unavailable)?;
                    }
                    _ if job.event.is_none() => job.status = "cancelled".into(),
                    _ => {}
                }
            }
            // The transition's operational event, whatever happened since (at least once: a
            // failed publish fails the step, which runs again; so may the SNS notification).
            if let Some(event) = &job.event {
                publish_operational(app, event).await?;
            }
            if job.status == "running" {
                job.processed += 1;
                job.status = "done".into();
            }
        }
        (JobKind::Probe, Some(ep)) => match ep.state() {
            EndpointState::Paused if ep.auto_resume => probe_step(app, &ep, &mut job, &mut out).await?,
            // A probe is out already (this job is a leftover), or the endpoint was enabled or
            // disabled for another reason: no probe.
            _ => job.status = "cancelled".into(),
        },
    }
    if job.status == "running" && job.run_at.is_none_or(|t| t <= now) {
        job.run_at = Some(now);
    }
    if job.status != "running" {
        job.run_at = None;
    }
    job.updated_at = now;
    // A recover or hold job's end (a purge's: [`crate::service::purge::step`]) is an operational event (`job.finished`): its notify job is
    // written with the job's last save, then run at once (the sweeper runs it if this fails).
    let finished = endpoint_lifecycle::finished_job(&job, now);
    let saved = match &finished {
        Some(notify) => app.store.finish_job(&job, lease, notify).await?,
        None => app.store.save_job(&job, lease).await?,
    };
    if !saved {
        // The step outlived its lease and a later one took the job: its progress stands. What
        // this step changed is written (guarded transitions), so its messages still go out.
        tracing::warn!(job_id = %job.id, "job step outlived its lease; the later step's progress stands");
    } else if let Some(notify) = finished {
        Box::pin(run_inline(app, std::slice::from_ref(&notify))).await;
    }
    Ok(out)
}

/// Unfinished statuses: the delivery may still be attempted.
pub const UNFINISHED: [DeliveryStatus; 3] = [DeliveryStatus::Scheduled, DeliveryStatus::Sending, DeliveryStatus::Held];

/// Ends one delivery of a deleted endpoint as `exhausted` (reason `endpoint_deleted`), from
/// the state it was listed in or, when it moved on meanwhile (an attempt finished), from the
/// state it is in now; a delivery that finished meanwhile is left as it is.
///
/// A delivery `sending` under a lease that has not run out is left too: its POST may be in
/// flight, and ending it would report `exhausted` while the receiver logs a 200. Its worker
/// records what the receiver answered (a retryable failure is scheduled as the policy says);
/// its next claim, or the sweeper's re-drive of a worker that died, finds the endpoint gone
/// and ends it then with reason `endpoint_deleted` (issue #35 input 5). So a delivery can
/// stay `scheduled` for a deleted endpoint until its next attempt is due.
///
/// # Errors
/// [`ServiceError::Unavailable`] when DynamoDB failed.
pub async fn end_as_deleted(app: &App, d: &crate::store::DeliverySummary) -> Result<(), ServiceError> {
    let (id, status, attempt_count, days) = (&d.id, d.status, d.attempt_count, d.exhausted_retention_days);
    let entry = EndpointEntry::new(&d.endpoint_id, d.created_at);
    let now = app.clock.now();
    let in_flight = |d: &Delivery| d.status == DeliveryStatus::Sending && d.lease_until.is_some_and(|l| l > now);
    if status == DeliveryStatus::Sending && app.store.get_delivery(id).await?.is_some_and(|d| in_flight(&d)) {
        return Ok(());
    }
    let t = delivery_lifecycle::abandon(&app.config, now, status, attempt_count, entry, REASON_ENDPOINT_DELETED, days);
    if let Applied::Lost = app.store.apply(id, &t, false).await?
        && let Some(cur) = app.store.get_delivery(id).await?
        && UNFINISHED.contains(&cur.status)
        && !in_flight(&cur)
    {
        let t = delivery_lifecycle::abandon(
            &app.config,
            now,
            cur.status,
            cur.attempt_count,
            EndpointEntry::of(&cur),
            REASON_ENDPOINT_DELETED,
            cur.exhausted_retention_days,
        );
        app.store.apply(id, &t, false).await?;
    }
    Ok(())
}

/// Publishes an operational event: on the stack's bus, then to the stack's operational
/// endpoints ([`crate::domain::operational::TENANT`]) as a signed webhook. At least once: a
/// failure of either fails the notify step, which runs again; a repeat is the same event (its
/// `id`) on the bus and the same event, accepted once, for the endpoints. An event about the
/// operational tenant's own endpoints or deliveries goes to the bus only: posted to the
/// operational endpoints, an operational endpoint that is down would feed itself events
/// about its own failures.
async fn publish_operational(app: &App, event: &OperationalEvent) -> Result<(), ServiceError> {
    app.notifier.operational(event).await.map_err(ServiceError::Unavailable)?;
    if event.tenant_id != crate::domain::operational::TENANT {
        crate::service::ingest::ingest_operational(app, event).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Random;
    use crate::domain::ids::id;
    use crate::domain::model::{REASON_CIRCUIT_BREAKER, REASON_GONE};

    fn ep() -> Endpoint {
        let now = Utc::now();
        Endpoint {
            circuit_breaker_threshold: 5,
            auto_resume: true,
            auto_resume_after_seconds: 60,
            ..Endpoint::new(id("ep_1"), id("t"), "https://example.com", "whsec_AAAA", now)
        }
    }

    fn stop(ep: &Endpoint, reason: &str) -> Endpoint {
        let why = Disabled { reason: reason.into(), at: Utc::now(), status_code: None, delivery_id: None };
        endpoint_lifecycle::disable(ep, Utc::now(), why, &Random::seeded(1)).unwrap().endpoint
    }

    fn name(m: Option<crate::metrics::Metric<'static>>) -> Option<&'static str> {
        m.map(|(n, _, _)| n)
    }

    #[test]
    fn the_breaker_and_a_disable_code_count_and_an_operator_or_a_probe_does_not() {
        let enabled = ep();
        let paused = stop(&enabled, REASON_CIRCUIT_BREAKER);
        assert_eq!(name(stop_metric(&enabled, &paused)), Some("EndpointsPaused"));
        assert_eq!(name(stop_metric(&enabled, &stop(&enabled, REASON_GONE))), Some("EndpointsDisabled"));
        assert_eq!(name(stop_metric(&enabled, &stop(&enabled, REASON_MANUAL))), None, "an operator's own act");
        // A probe out and failed again: still the same pause.
        let now = Utc::now();
        let probing = endpoint_lifecycle::probe_out(&paused, &id("dlv_1"), now).unwrap().endpoint;
        let back = endpoint_lifecycle::probe_failed(&probing, "dlv_1", now, 60, &Random::seeded(1)).unwrap().endpoint;
        assert_eq!(name(stop_metric(&probing, &back)), None);
        // The probe answered 410: the receiver disabled it.
        assert_eq!(name(stop_metric(&probing, &stop(&probing, REASON_GONE))), Some("EndpointsDisabled"));
        let enabled_again = endpoint_lifecycle::enable(&paused, now, &Random::seeded(1)).endpoint;
        assert_eq!(name(stop_metric(&paused, &enabled_again)), None);
    }
}
