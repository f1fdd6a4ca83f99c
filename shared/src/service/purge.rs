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
//!   is resumed from the table itself. `processed` counts the items removed by the pieces
//!   saved (at least that many are gone).
//! - **Progress.** A step works in pieces (a page of an endpoint's deliveries, an endpoint, a
//!   page of the scan), saves the job after each (its lease kept), and starts a piece only
//!   while the longest so far still fits before the sweeper's tick ends: a step the tick's
//!   timeout cuts off loses at most one piece, and the scan's position moves every step. A
//!   running purge job never expires (its mark stands until it ends: see
//!   [`crate::store::JobStore`]'s items); each step emits `PurgeProgressAgeSeconds`, the time
//!   since the last save, and `PurgeStalledAlarm` fires past [`PURGE_STALLED_SECONDS`].
//!   A delivery listing is followed to its end: a page can come back short, even empty, with
//!   a cursor.
//! - **Deleted endpoints.** An endpoint deleted before the purge left a tombstone
//!   (`TENANT#{tenant}` / `DELETED#{id}`, written with the delete and kept while its
//!   deliveries and counters are): the purge treats it as an endpoint, its deliveries through
//!   the `by_endpoint` index, then its counters and the tombstone.
//! - **Scan.** Last, before the settings item, the table is scanned for anything else of the
//!   tenant's (at most [`PURGE_STEP_SCAN_PAGES`] pages a step, the position in the job's `cursor`):
//!   what no index names by tenant, e.g. the event item of an ingest that died between the
//!   event and its deliveries. The figure it buys: a purge that leaves nothing of the tenant
//!   whatever crashed before it, for one read of the table per purge (purges are rare; the
//!   alternative, an index of events by tenant, would cost every event a write).
//! - **API keys.** Each step first takes the tenant out of the API keys
//!   ([`crate::service::api_keys::forget_tenant`]): a key naming it alone is revoked, one
//!   naming it with others no longer names it; a key for every tenant is untouched.
//! - **Left behind.** The tenant's jobs (`JOB#`, 14 days' TTL) and the purge job itself, the
//!   record that the purge happened.

use crate::App;
use crate::domain::ids::{JobId, TenantId};
use crate::domain::model::{Job, JobKind};
use crate::domain::tenant::{PurgeMark, TenantSettings};
use crate::error::ServiceError;
use crate::store::{DeliveryQuery, Purgeable};
use chrono::{DateTime, Duration, Utc};
use std::time::{Duration as StdDuration, Instant};

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

/// A purge job's `cursor` once its scan of the table is complete (what is left: the settings
/// item).
pub const SCAN_DONE: &str = "scan done";

/// Seconds a running purge may go without saving progress before its step logs an error:
/// 1800 (30 minutes: thirty sweeper ticks, each of which saves at least once when it runs).
/// The template's `PurgeStalledAlarm` fires at the same figure on `PurgeProgressAgeSeconds`.
pub const PURGE_STALLED_SECONDS: i64 = 1800;

/// Starts the purge of a tenant: marks it and creates the job (one transaction), or answers
/// the purge under way. Returns the job (`GET /v1/jobs/{id}` follows it).
///
/// # Errors
/// [`ServiceError::ReservedTenant`] (403) for the operational events' tenant;
/// [`ServiceError::Conflict`] when the settings kept changing; [`ServiceError::Unavailable`] when DynamoDB failed.
pub async fn delete_tenant(app: &App, tenant_id: &TenantId) -> Result<Job, ServiceError> {
    crate::domain::operational::refuse_reserved(tenant_id, "tenant_id")?;
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

/// One step of purge job `job`, taken with the lease `lease` (due time, milliseconds), to end
/// by `deadline` (the sweeper's tick budget); the sweeper runs it through
/// [`crate::service::endpoint_state::run_job_step_until`]. Saves the job's progress after each
/// bounded piece of work while the lease holds (so a step cut off by the tick's timeout loses
/// at most its last piece), and starts no piece it has no time left for. Returns the notify
/// job of its end (`job.finished`), written with the last save, for the caller to run at once
/// (the sweeper runs it otherwise).
///
/// Emits `PurgeProgressAgeSeconds` first: seconds since the job last saved progress (the
/// `PurgeStalledAlarm` of the template watches it).
///
/// # Errors
/// [`ServiceError::Unavailable`] when DynamoDB failed; the step runs again.
pub async fn step(
    app: &App,
    mut job: Job,
    now: DateTime<Utc>,
    lease: i64,
    deadline: Instant,
) -> Result<Option<Job>, ServiceError> {
    let age = (now - job.updated_at).num_seconds().max(0);
    crate::metrics::emit(&app.config, now.timestamp_millis(), &[("PurgeProgressAgeSeconds", age as f64, "Seconds")]);
    if age >= PURGE_STALLED_SECONDS {
        tracing::error!(tenant_id = %job.tenant_id, job_id = %job.id, seconds = age, "purge has saved no progress for a long time");
    }
    let tenant = job.tenant_id.clone();
    let settings = app.store.get_settings(&tenant).await?;
    match settings.as_ref().and_then(|s| s.purge.as_ref()) {
        Some(mark) if mark.job_id == job.id => {
            let mut run = Run { app, job: &mut job, lease, deadline, longest: StdDuration::ZERO };
            if run.work(now).await?.is_none() {
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
    // `updated_at` of a running purge is its last progress (the metric above reads it): moved
    // by each save of a piece and each wait that passes, not by a step that did nothing.
    if job.status != "running" {
        job.updated_at = app.clock.now();
    }
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

/// One step's work on its job: each piece (a page of deliveries, an endpoint, a page of the
/// scan) deleted, then saved ([`Run::save`]); `None` from a method: the lease was lost.
struct Run<'a> {
    app: &'a App,
    job: &'a mut Job,
    lease: i64,
    /// When the step must have ended (the sweeper's budget).
    deadline: Instant,
    /// The longest piece so far, with its save: a piece is started only while that much time
    /// is left.
    longest: StdDuration,
}

impl Run<'_> {
    /// Whether a piece as long as the longest so far still fits before the deadline.
    fn time_left(&self) -> bool {
        Instant::now() + self.longest < self.deadline
    }

    /// Saves the job's progress after a piece that began at `began` and removed `removed`
    /// items, keeping the lease (the job stays due at the lease's end, as taken). False when
    /// the lease was lost.
    async fn save(&mut self, removed: usize, began: Instant) -> Result<bool, ServiceError> {
        self.job.processed = self.job.processed.saturating_add(u32::try_from(removed).unwrap_or(u32::MAX));
        self.job.updated_at = self.app.clock.now();
        self.job.run_at = DateTime::from_timestamp_millis(self.lease);
        let saved = self.app.store.save_job(self.job, self.lease).await?;
        self.longest = self.longest.max(began.elapsed());
        Ok(saved)
    }

    /// The step's deletes, piece by piece while its time lasts.
    async fn work(&mut self, now: DateTime<Utc>) -> Result<Option<()>, ServiceError> {
        let app = self.app;
        let tenant = self.job.tenant_id.clone();
        // The API keys first, every step (a key made for the tenant during the purge is
        // caught by the next): none may post for the tenant once the purge is done.
        crate::service::api_keys::forget_tenant(app, tenant.as_str()).await?;
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
        // Deliveries and their events, endpoint by endpoint, up to the step's bound; each
        // listing followed to its end (a page can be short, even empty, with a cursor).
        let mut deliveries = 0;
        for (_, _, endpoint_id) in &owners {
            let mut cursor = None;
            loop {
                let left = PURGE_STEP_DELIVERIES.saturating_sub(deliveries);
                if left == 0 || !self.time_left() {
                    return Ok(Some(()));
                }
                let began = Instant::now();
                let query = DeliveryQuery {
                    endpoint_id: Some(endpoint_id.clone()),
                    oldest_first: true,
                    limit: left.min(100),
                    cursor: cursor.take(),
                    ..DeliveryQuery::default()
                };
                let page = app.store.list_deliveries(&query).await?;
                if !page.data.is_empty() {
                    let items: Vec<Purgeable> = page
                        .data
                        .iter()
                        .flat_map(|d| {
                            [Purgeable::Delivery(d.id.clone()), Purgeable::Event(tenant.clone(), d.event_id.clone())]
                        })
                        .collect();
                    if !app.store.purge(&self.job.id, self.lease, &items).await? {
                        return Ok(None);
                    }
                    deliveries += page.data.len();
                    // Found again: the wait for in-flight calls starts over.
                    self.job.since = None;
                    self.job.cursor = Some(format!("deliveries of endpoint {endpoint_id}"));
                    if !self.save(items.len(), began).await? {
                        return Ok(None);
                    }
                }
                match page.next_cursor {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
            }
        }
        let ingest_settled = now - self.job.created_at >= Duration::seconds(INGEST_SETTLE_SECONDS);
        if deliveries > 0 || !ingest_settled {
            self.job.since = None;
            if deliveries == 0 {
                // Waiting for ingest calls to end: the time passing is the progress.
                self.job.updated_at = app.clock.now();
            }
            return Ok(Some(()));
        }
        let quiet_since = *self.job.since.get_or_insert(now);
        if now - quiet_since < Duration::seconds(DELIVER_SETTLE_SECONDS) {
            self.job.cursor = Some("waiting for in-flight calls to end".into());
            self.job.updated_at = app.clock.now();
            return Ok(Some(()));
        }
        // Endpoints (items or tombstones) with their counters.
        for (rate_limit, item, endpoint_id) in owners {
            if !self.time_left() {
                return Ok(Some(()));
            }
            let began = Instant::now();
            let mut items = app.store.endpoint_counters(&endpoint_id, rate_limit, 1_000).await?;
            let all_counters = items.len() < 1_000;
            if all_counters {
                items.push(item);
            }
            if !app.store.purge(&self.job.id, self.lease, &items).await? {
                return Ok(None);
            }
            self.job.cursor = Some(format!("endpoint {endpoint_id}"));
            if !self.save(items.len(), began).await? {
                return Ok(None);
            }
            if !all_counters {
                return Ok(Some(()));
            }
        }
        // Then the table scanned for anything else of the tenant's (an event item whose ingest
        // died before its deliveries), a page at a time, its position saved after each.
        for _ in 0..PURGE_STEP_SCAN_PAGES {
            if self.job.cursor.as_deref() == Some(SCAN_DONE) {
                break;
            }
            if !self.time_left() {
                return Ok(Some(()));
            }
            let began = Instant::now();
            let from = self.job.cursor.as_deref().and_then(|c| c.strip_prefix(SCAN_CURSOR)).map(String::from);
            let page = app.store.scan_tenant(&tenant, from.as_deref(), 1).await?;
            if !page.items.is_empty() && !app.store.purge(&self.job.id, self.lease, &page.items).await? {
                return Ok(None);
            }
            self.job.cursor = Some(match page.next {
                Some(next) => format!("{SCAN_CURSOR}{next}"),
                None => SCAN_DONE.to_string(),
            });
            if !self.save(page.items.len(), began).await? {
                return Ok(None);
            }
        }
        if self.job.cursor.as_deref() != Some(SCAN_DONE) || !self.time_left() {
            return Ok(Some(()));
        }
        // The settings item (the mark) last.
        if !app.store.purge(&self.job.id, self.lease, &[Purgeable::Settings(tenant.clone())]).await? {
            return Ok(None);
        }
        self.job.processed = self.job.processed.saturating_add(1);
        self.job.cursor = None;
        self.job.status = "done".into();
        Ok(Some(()))
    }
}
