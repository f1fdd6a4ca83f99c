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
//! - **Deleted endpoints.** An endpoint deleted before the purge left a tombstone
//!   (`TENANT#{tenant}` / `DELETED#{id}`, written with the delete and kept while its
//!   deliveries and counters are): the purge treats it as an endpoint, its deliveries through
//!   the `by_endpoint` index, then its counters and the tombstone.
//! - **Scan.** Last, before the settings item, the table is scanned for anything else of the
//!   tenant's ([`PURGE_STEP_SCAN_PAGES`] pages a step, the position in the job's `cursor`):
//!   what no index names by tenant, e.g. the event item of an ingest that died between the
//!   event and its deliveries. The figure it buys: a purge that leaves nothing of the tenant
//!   whatever crashed before it, for one read of the table per purge (purges are rare; the
//!   alternative, an index of events by tenant, would cost every event a write).
//! - **Left behind.** The tenant's jobs (`JOB#`, 14 days' TTL) and the purge job itself, the
//!   record that the purge happened.

use crate::App;
use crate::domain::ids::{JobId, TenantId};
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

/// Most pages of 1 MB one step's scan reads ([`crate::store::LifecycleStore::scan_tenant`]):
/// 20 MB a step, at one step a sweeper tick (a minute) a 10 GB table is scanned in about
/// 8.5 hours, for 0.5 read units per 4 KB ($0.016 per GB at $0.125 per million read units,
/// DynamoDB on-demand pricing).
pub const PURGE_STEP_SCAN_PAGES: usize = 20;

/// The prefix of a purge job's `cursor` while it scans the table (the rest is the scan's
/// position).
pub const SCAN_CURSOR: &str = "scan after ";

/// Starts the purge of a tenant: marks it and creates the job (one transaction), or answers
/// the purge under way. Returns the job (`GET /v1/jobs/{id}` follows it).
///
/// # Errors
/// [`ServiceError::Conflict`] when the settings kept changing; [`ServiceError::Unavailable`] when DynamoDB failed.
pub async fn delete_tenant(app: &App, tenant_id: &TenantId) -> Result<Job, ServiceError> {
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
            id: JobId::made(format!("job_{}", app.random.ulid(now))),
            kind: JobKind::Purge,
            tenant_id: tenant_id.clone(),
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
            tracing::warn!(%tenant_id, job_id = %job.id, "tenant purge started");
            return Ok(job);
        }
    }
    Err(ServiceError::Conflict(format!("tenant {tenant_id}'s settings changed under {CHANGE_TRIES} tries; retry")))
}

/// One step of purge job `job`, taken with the lease `lease` (due time, milliseconds); the
/// sweeper runs it through [`crate::service::endpoint_state::run_job_step`]. Saves the job's
/// progress while the lease holds. Returns the notify job of its end (`job.finished`),
/// written with the last save, for the caller to run at once (the sweeper runs it otherwise).
///
/// # Errors
/// [`ServiceError::Unavailable`] when DynamoDB failed; the step runs again.
pub async fn step(app: &App, mut job: Job, now: DateTime<Utc>, lease: i64) -> Result<Option<Job>, ServiceError> {
    let tenant = job.tenant_id.clone();
    let settings = app.store.get_settings(&tenant).await?;
    match settings.as_ref().and_then(|s| s.purge.as_ref()) {
        Some(mark) if mark.job_id == job.id => {
            if let Some(removed) = work(app, &mut job, now, lease).await? {
                job.processed += u32::try_from(removed).unwrap_or(u32::MAX);
            } else {
                tracing::warn!(job_id = %job.id, "purge step outlived its lease; the later step goes on");
                return Ok(None);
            }
        }
        // The settings item is removed last: the step that removed it died before its save.
        None => job.status = "done".into(),
        // Another purge's mark (this one's settings were removed and the tenant purged again).
        Some(_) => job.status = "cancelled".into(),
    }
    job.run_at = (job.status == "running").then_some(now);
    job.updated_at = now;
    // The end is an operational event (`job.finished`, `job_kind: purge`): its notify job is
    // written with the last save, then run at once (the sweeper runs it if this fails).
    let finished = crate::domain::endpoint_lifecycle::finished_job(&job, now);
    let saved = match &finished {
        Some(notify) => app.store.finish_job(&job, lease, notify).await?,
        None => app.store.save_job(&job, lease).await?,
    };
    if !saved {
        tracing::warn!(job_id = %job.id, "purge step outlived its lease; the later step's progress stands");
        return Ok(None);
    } else if finished.is_some() {
        tracing::warn!(tenant_id = %tenant, job_id = %job.id, removed = job.processed, status = %job.status, "tenant purge ended");
    }
    Ok(finished)
}

/// The step's deletes; how many items it removed, `None` when the lease was lost.
async fn work(app: &App, job: &mut Job, now: DateTime<Utc>, lease: i64) -> Result<Option<usize>, ServiceError> {
    let tenant = job.tenant_id.clone();
    let mut removed = 0;
    // The tenant's endpoints, live and deleted (their tombstones): (id, rate limit, item).
    let mut owners = Vec::new();
    let mut cursor = None;
    loop {
        let page = app.store.list_endpoints(&tenant, 100, cursor.as_deref()).await?;
        owners.extend(
            page.data
                .into_iter()
                .map(|ep| (ep.rate_limit_per_second, Purgeable::Endpoint(tenant.clone(), ep.id.clone()), ep.id)),
        );
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    owners.extend(app.store.deleted_endpoints(&tenant).await?.into_iter().map(|d| {
        (d.rate_limit_per_second, Purgeable::Tombstone(tenant.clone(), d.endpoint_id.clone()), d.endpoint_id)
    }));
    // Deliveries and their events, endpoint by endpoint, up to the step's bound.
    let mut found_any = false;
    for (_, _, endpoint_id) in &owners {
        loop {
            let left = PURGE_STEP_DELIVERIES.saturating_sub(removed / 2);
            if left == 0 {
                return Ok(Some(removed));
            }
            let query = DeliveryQuery {
                endpoint_id: Some(endpoint_id.clone()),
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
            job.cursor = Some(format!("deliveries of endpoint {endpoint_id}"));
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
    // Endpoints (items or tombstones) with their counters.
    for (rate_limit, item, endpoint_id) in owners {
        let mut items = app.store.endpoint_counters(&endpoint_id, rate_limit, 1_000).await?;
        let all_counters = items.len() < 1_000;
        if all_counters {
            items.push(item);
        }
        if !app.store.purge(&job.id, lease, &items).await? {
            return Ok(None);
        }
        removed += items.len();
        job.cursor = Some(format!("endpoint {endpoint_id}"));
        if !all_counters {
            return Ok(Some(removed));
        }
    }
    // Then the table scanned for anything else of the tenant's (an event item whose ingest
    // died before its deliveries), a bounded number of pages a step.
    let from = job.cursor.as_deref().and_then(|c| c.strip_prefix(SCAN_CURSOR));
    let page = app.store.scan_tenant(&tenant, from, PURGE_STEP_SCAN_PAGES).await?;
    if !page.items.is_empty() {
        if !app.store.purge(&job.id, lease, &page.items).await? {
            return Ok(None);
        }
        removed += page.items.len();
    }
    if let Some(next) = page.next {
        job.cursor = Some(format!("{SCAN_CURSOR}{next}"));
        return Ok(Some(removed));
    }
    // The settings item (the mark) last.
    if !app.store.purge(&job.id, lease, &[Purgeable::Settings(tenant.clone())]).await? {
        return Ok(None);
    }
    job.cursor = None;
    job.status = "done".into();
    Ok(Some(removed + 1))
}
