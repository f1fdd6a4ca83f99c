//! A tenant purged on request (`DELETE /v1/tenants/{id}`, GDPR): a background job of kind
//! [`JobKind::Purge`], one bounded step per sweeper tick, each delete guarded by the job's
//! lease ([`crate::store::LifecycleStore::purge`]).
//!
//! - **Start.** The tenant's settings item gets the purge mark and the job is created, in one
//!   TransactWriteItems guarded on the settings' version. From then on ingest refuses the
//!   tenant's events (409 `tenant_purging`): it reads the mark with the tenant's endpoints, in
//!   the same Query, so the refusal costs an event no request. Endpoint creation and settings
//!   changes are refused too.
//! - **Deliveries and events.** Each step lists the tenant's endpoints and, per endpoint, its
//!   deliveries (`by_endpoint`, every bucket), and deletes each delivery with its event's item
//!   (the payload and fingerprint: the idempotency record), at most
//!   [`PURGE_STEP_DELIVERIES`] deliveries a step.
//! - **Settle.** An ingest that read the endpoints just before the mark may still write for
//!   [`INGEST_SETTLE_SECONDS`] after the job started; a deliver call that claimed a delivery
//!   before it was deleted may still count it in its endpoint's counters for
//!   [`DELIVER_SETTLE_SECONDS`]. So the first step that finds no delivery left, once the job is
//!   older than the first, notes the time (`since`); the endpoints (item, pointer, copies),
//!   their counters (delivered per day, rate windows) and last the settings item go once the
//!   second has passed since then, and a step that finds deliveries again starts the wait over.
//! - **Crash.** A step keeps no state that the table does not: its next run lists what is
//!   left and goes on, so a step that died between two of its writes (or whose lease ran out)
//!   is resumed from the table itself. `processed` counts the items removed by the steps that
//!   saved their progress (at least that many are gone).
//! - **Left behind.** Deliveries of endpoints deleted before the purge (no index names them by
//!   tenant; they expire with their retention), the tenant's jobs (`JOB#`, 14 days' TTL) and
//!   the purge job itself, the record that the purge happened.

use crate::App;
use crate::domain::ids;
use crate::domain::model::{Job, JobKind};
use crate::domain::tenant::{PurgeMark, TenantSettings};
use crate::error::ServiceError;
use crate::store::{DeliveryQuery, Purgeable};
use chrono::{DateTime, Duration, Utc};

/// How long after a purge starts an ingest call that read the tenant's endpoints before the
/// mark may still write (the ingest function's 30 s timeout, twice), seconds.
pub const INGEST_SETTLE_SECONDS: i64 = 60;

/// How long after a delivery was last found a deliver call that claimed it may still write
/// the endpoint's counters (the deliver function's 120 s timeout, and the index's lag),
/// seconds.
pub const DELIVER_SETTLE_SECONDS: i64 = 150;

/// How many times a purge's start is tried again after the settings changed under it.
const CHANGE_TRIES: usize = 5;

/// Most deliveries one step deletes (each with its event's item).
pub const PURGE_STEP_DELIVERIES: usize = 500;

/// Starts the purge of a tenant: marks it and creates the job (one transaction), or answers
/// the purge under way. Returns the job (`GET /v1/jobs/{id}` follows it).
///
/// # Errors
/// [`ServiceError::Validation`] for a tenant id outside the id rule; [`ServiceError::Conflict`]
/// when the settings kept changing; [`ServiceError::Unavailable`] when DynamoDB failed.
pub async fn delete_tenant(app: &App, tenant_id: &str) -> Result<Job, ServiceError> {
    ids::client_id("tenant_id", tenant_id)?;
    for _ in 0..CHANGE_TRIES {
        let now = app.clock.now();
        let current = app.store.get_settings(tenant_id).await?;
        if let Some(mark) = current.as_ref().and_then(|s| s.purge.as_ref())
            && let Some(job) = app.store.get_job(&mark.job_id).await?
        {
            return Ok(job);
        }
        let current = current.unwrap_or_else(|| TenantSettings::empty(tenant_id, now));
        let job = Job {
            id: format!("job_{}", app.random.ulid(now)),
            kind: JobKind::Purge,
            tenant_id: tenant_id.to_string(),
            endpoint_id: String::new(),
            status: "running".into(),
            since: None,
            until: None,
            cursor: None,
            processed: 0,
            run_at: Some(now),
            event: None,
            created_at: now,
            updated_at: now,
        };
        let marked = TenantSettings {
            purge: Some(PurgeMark { job_id: job.id.clone(), started_at: now }),
            version: current.version + 1,
            updated_at: now,
            ..current.clone()
        };
        if app.store.save_settings(&marked, current.version, Some(&job)).await? {
            tracing::warn!(tenant_id, job_id = %job.id, "tenant purge started");
            return Ok(job);
        }
    }
    Err(ServiceError::Conflict(format!("tenant {tenant_id}'s settings changed under {CHANGE_TRIES} tries; retry")))
}

/// One step of purge job `job`, taken with the lease `lease` (due time, milliseconds); the
/// sweeper runs it through [`crate::service::endpoint_state::run_job_step`]. Saves the job's
/// progress while the lease holds.
///
/// # Errors
/// [`ServiceError::Unavailable`] when DynamoDB failed; the step runs again.
pub async fn step(app: &App, mut job: Job, now: DateTime<Utc>, lease: i64) -> Result<(), ServiceError> {
    let tenant = job.tenant_id.clone();
    let settings = app.store.get_settings(&tenant).await?;
    match settings.as_ref().and_then(|s| s.purge.as_ref()) {
        Some(mark) if mark.job_id == job.id => {
            if let Some(removed) = work(app, &mut job, now, lease).await? {
                job.processed += u32::try_from(removed).unwrap_or(u32::MAX);
            } else {
                tracing::warn!(job_id = %job.id, "purge step outlived its lease; the later step goes on");
                return Ok(());
            }
        }
        // The settings item is removed last: the step that removed it died before its save.
        None => job.status = "done".into(),
        // Another purge's mark (this one's settings were removed and the tenant purged again).
        Some(_) => job.status = "cancelled".into(),
    }
    job.run_at = (job.status == "running").then_some(now);
    job.updated_at = now;
    if !app.store.save_job(&job, lease).await? {
        tracing::warn!(job_id = %job.id, "purge step outlived its lease; the later step's progress stands");
    } else if job.status == "done" {
        tracing::warn!(tenant_id = %tenant, job_id = %job.id, removed = job.processed, "tenant purged");
    }
    Ok(())
}

/// The step's deletes; how many items it removed, `None` when the lease was lost.
async fn work(app: &App, job: &mut Job, now: DateTime<Utc>, lease: i64) -> Result<Option<usize>, ServiceError> {
    let tenant = job.tenant_id.clone();
    let mut removed = 0;
    let mut endpoints = Vec::new();
    let mut cursor = None;
    loop {
        let page = app.store.list_endpoints(&tenant, 100, cursor.as_deref()).await?;
        endpoints.extend(page.data);
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    // Deliveries and their events, endpoint by endpoint, up to the step's bound.
    let mut found_any = false;
    for ep in &endpoints {
        loop {
            let left = PURGE_STEP_DELIVERIES.saturating_sub(removed / 2);
            if left == 0 {
                return Ok(Some(removed));
            }
            let query = DeliveryQuery {
                endpoint_id: Some(ep.id.clone()),
                oldest_first: true,
                limit: left.min(100),
                ..DeliveryQuery::default()
            };
            let page = app.store.list_deliveries(&query).await?;
            found_any |= !page.data.is_empty() || page.next_cursor.is_some();
            if page.data.is_empty() {
                break;
            }
            let items: Vec<Purgeable> = page
                .data
                .iter()
                .flat_map(|d| [Purgeable::Delivery(d.id.clone()), Purgeable::Event(tenant.clone(), d.event_id.clone())])
                .collect();
            if !app.store.purge(&job.id, lease, &items).await? {
                return Ok(None);
            }
            removed += items.len();
            job.cursor = Some(format!("deliveries of endpoint {}", ep.id));
        }
    }
    let ingest_settled = now - job.created_at >= Duration::seconds(INGEST_SETTLE_SECONDS);
    if found_any || !ingest_settled {
        job.since = None;
        return Ok(Some(removed));
    }
    let quiet_since = *job.since.get_or_insert(now);
    if now - quiet_since < Duration::seconds(DELIVER_SETTLE_SECONDS) {
        job.cursor = Some("waiting for in-flight calls to end".into());
        return Ok(Some(removed));
    }
    // Endpoints with their counters, then the settings item (the mark) last.
    for ep in &endpoints {
        let mut items = app.store.endpoint_counters(ep, 1_000).await?;
        let all_counters = items.len() < 1_000;
        if all_counters {
            items.push(Purgeable::Endpoint(tenant.clone(), ep.id.clone()));
        }
        if !app.store.purge(&job.id, lease, &items).await? {
            return Ok(None);
        }
        removed += items.len();
        job.cursor = Some(format!("endpoint {}", ep.id));
        if !all_counters {
            return Ok(Some(removed));
        }
    }
    if !app.store.purge(&job.id, lease, &[Purgeable::Settings(tenant.clone())]).await? {
        return Ok(None);
    }
    job.cursor = None;
    job.status = "done".into();
    Ok(Some(removed + 1))
}
