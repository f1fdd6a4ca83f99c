//! Endpoint health: disabling (410 Gone, circuit breaker, an operator), holding the
//! unfinished deliveries of a disabled endpoint, re-enabling it with a bounded release of what
//! was held, the half-open probe, and the background jobs that do the bounded work one
//! sweeper tick at a time.
//!
//! Nothing is dropped on any of these paths: a held delivery keeps its history and goes back
//! to `scheduled` when its endpoint is enabled again. Its payload lives in the event's item
//! for `WEBHOOKS_EVENT_RETENTION_DAYS` from ingest; a delivery held longer than that ends
//! `exhausted` with `payload_expired` when it is released, visibly, rather than sent empty.

use crate::App;
use crate::error::ServiceError;
use crate::lifecycle::{self, Enqueue};
use crate::model::{DeliveryStatus, Disabled, Endpoint, Job, JobKind};
use crate::store::{Applied, DeliveryQuery, collect_deliveries};
use chrono::{DateTime, Duration, Utc};

/// Most scheduled deliveries held inline when an endpoint is disabled (the rest are held by
/// deliver when they come due).
pub const HOLD_INLINE_LIMIT: usize = 1000;

/// Disables an endpoint (once: a second disable of a disabled endpoint does nothing), tells
/// its owner, holds its scheduled deliveries, and, for a paused endpoint with `auto_resume`,
/// schedules the half-open probe. Returns whether it changed anything.
///
/// # Errors
/// [`ServiceError::Unavailable`] when DynamoDB failed.
pub async fn disable(app: &App, endpoint: &Endpoint, disabled: Disabled) -> Result<bool, ServiceError> {
    if !app.store.disable_endpoint(&endpoint.tenant_id, &endpoint.id, &disabled).await? {
        return Ok(false);
    }
    app.notifier.endpoint_disabled(endpoint, &disabled).await;
    if disabled.reason == "circuit_breaker" && endpoint.auto_resume {
        let at = disabled.at + Duration::seconds(i64::try_from(endpoint.auto_resume_after_seconds).unwrap_or(300));
        start_job(app, endpoint, JobKind::Probe, at, None, None).await?;
    }
    hold_pending(app, endpoint).await?;
    Ok(true)
}

/// Holds up to [`HOLD_INLINE_LIMIT`] scheduled deliveries of an endpoint. Returns how many.
///
/// # Errors
/// [`ServiceError::Unavailable`] when DynamoDB failed.
pub async fn hold_pending(app: &App, endpoint: &Endpoint) -> Result<usize, ServiceError> {
    let query = DeliveryQuery {
        endpoint_id: Some(endpoint.id.clone()),
        status: Some(DeliveryStatus::Scheduled),
        ..DeliveryQuery::default()
    };
    let mut held = 0;
    for d in collect_deliveries(app.store.as_ref(), query, HOLD_INLINE_LIMIT).await? {
        let t = lifecycle::hold_scheduled(app.clock.now(), d.attempt_count);
        if let Applied::Done(_) = app.store.apply(&d.id, &t, false).await? {
            held += 1;
        }
    }
    Ok(held)
}

/// Enables an endpoint and starts the job that gives back its held deliveries,
/// `config.release_per_tick` per sweeper tick.
///
/// # Errors
/// [`ServiceError::NotFound`]; [`ServiceError::Unavailable`] when DynamoDB failed.
pub async fn enable(app: &App, endpoint: &Endpoint) -> Result<Job, ServiceError> {
    let now = app.clock.now();
    if !app.store.enable_endpoint(&endpoint.tenant_id, &endpoint.id, now).await? {
        return Err(ServiceError::NotFound(format!("endpoint {}", endpoint.id)));
    }
    tracing::info!(endpoint_id = %endpoint.id, "endpoint enabled");
    start_job(app, endpoint, JobKind::Release, now, None, None).await
}

/// Creates a running job whose first step is due at `run_at`.
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
    let job = Job {
        id: format!("job_{}", app.random.ulid(now)),
        kind,
        tenant_id: endpoint.tenant_id.clone(),
        endpoint_id: endpoint.id.clone(),
        status: "running".into(),
        since,
        until,
        cursor: None,
        processed: 0,
        run_at: Some(run_at),
        created_at: now,
        updated_at: now,
    };
    app.store.put_job(&job).await?;
    Ok(job)
}

/// Runs one step of a due job (the sweeper calls this). A step handles at most
/// `config.release_per_tick` deliveries; a job with more to do runs again next tick.
/// Returns the messages to send.
///
/// # Errors
/// [`ServiceError::Unavailable`] when DynamoDB failed; the job runs again after its lease.
pub async fn run_job_step(app: &App, id: &str, due_at: i64) -> Result<Vec<Enqueue>, ServiceError> {
    let now = app.clock.now();
    // Take the step: a concurrent tick loses this condition. If this worker dies, the job is
    // due again in a minute.
    if !app.store.claim_job(id, due_at, now.timestamp_millis() + 60_000).await? {
        return Ok(Vec::new());
    }
    let Some(mut job) = app.store.get_job(id).await? else { return Ok(Vec::new()) };
    let endpoint = app.store.get_endpoint(&job.tenant_id, &job.endpoint_id).await?;
    let mut out = Vec::new();
    let limit = app.config.release_per_tick.max(1);
    match (job.kind, endpoint) {
        (_, None) => job.status = "cancelled".into(),
        (JobKind::Release, Some(ep)) if !ep.enabled => job.status = "cancelled".into(),
        (JobKind::Release, Some(ep)) => {
            // Released deliveries leave `held`, so each step starts from the oldest again.
            let (found, _) = release_page(app, &ep, DeliveryStatus::Held, limit, None, &mut job, &mut out).await?;
            if found < limit {
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
        (JobKind::Probe, Some(ep)) if ep.enabled => job.status = "done".into(),
        (JobKind::Probe, Some(ep)) => {
            let page = app
                .store
                .list_deliveries(&DeliveryQuery {
                    endpoint_id: Some(ep.id.clone()),
                    status: Some(DeliveryStatus::Held),
                    oldest_first: true,
                    limit: 1,
                    ..DeliveryQuery::default()
                })
                .await?;
            match page.data.first() {
                None => {
                    // Nothing to probe with yet; look again after the cool-down.
                    job.run_at =
                        Some(now + Duration::seconds(i64::try_from(ep.auto_resume_after_seconds).unwrap_or(300)));
                }
                Some(d) => {
                    app.store.set_probe(&ep.tenant_id, &ep.id, Some(&d.id)).await?;
                    if let Some((t, e)) = lifecycle::release(&app.config, now, &d.id, d.status, d.attempt_count, now)
                        && let Applied::Done(_) = app.store.apply(&d.id, &t, false).await?
                    {
                        out.extend(e);
                        job.processed += 1;
                    }
                    tracing::info!(endpoint_id = %ep.id, delivery_id = %d.id, "half-open probe released");
                    job.status = "done".into();
                }
            }
        }
    }
    if job.status == "running" && job.run_at.is_none_or(|t| t <= now) {
        job.run_at = Some(now);
    }
    if job.status != "running" {
        job.run_at = None;
    }
    job.updated_at = now;
    app.store.put_job(&job).await?;
    Ok(out)
}

/// Releases one page (up to `limit`, oldest first) of `ep`'s deliveries in `status`
/// accepted in the job's window, continuing from `cursor`. Returns how many it found and the
/// next page's cursor.
async fn release_page(
    app: &App,
    ep: &Endpoint,
    status: DeliveryStatus,
    limit: usize,
    cursor: Option<String>,
    job: &mut Job,
    out: &mut Vec<Enqueue>,
) -> Result<(usize, Option<String>), ServiceError> {
    let page = app
        .store
        .list_deliveries(&DeliveryQuery {
            endpoint_id: Some(ep.id.clone()),
            status: Some(status),
            since: job.since,
            until: job.until,
            oldest_first: true,
            limit,
            cursor,
        })
        .await?;
    let now = app.clock.now();
    for d in &page.data {
        if let Some((t, e)) = lifecycle::release(&app.config, now, &d.id, d.status, d.attempt_count, now)
            && let Applied::Done(_) = app.store.apply(&d.id, &t, false).await?
        {
            out.extend(e);
            job.processed += 1;
        }
    }
    Ok((page.data.len(), page.next_cursor))
}
