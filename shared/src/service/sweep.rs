//! The sweeper: enqueues deliveries whose wait was longer than SQS's delay limit, with the
//! exact remaining delay, and re-drives anything overdue (a lost message, an expired lease:
//! that one after reading the item, to record the lost attempt on its bounded history). It
//! never sends HTTP, and one tick handles at most `config.sweep_batch` items.

use crate::App;
use crate::domain::delivery_lifecycle::{self, DueItem, Enqueue};
use crate::domain::model::DeliveryStatus;
use crate::error::ServiceError;
use crate::service::endpoint_state;
use crate::store::keys::{JOB_SHARD, due_pk};
use crate::store::{Applied, Due, StoreError};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};

/// What one tick did.
///
/// Of the due deliveries read, each is counted once: in `enqueued` or `unsent` (its
/// transition written, with a message), `leases_pending`, `lost`, `failed` or `deferred`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SweepReport {
    /// Items read from the due index: due deliveries (at most `sweep_batch`) and job steps
    /// (at most `sweep_batch` more, from their own partition).
    pub examined: usize,
    /// Of those, job steps.
    pub examined_jobs: usize,
    /// Messages sent (re-drives, and job steps' messages).
    pub enqueued: usize,
    /// Of the deliveries re-driven, expired leases recovered.
    pub recovered_leases: usize,
    /// Items another tick or worker changed first.
    pub lost: usize,
    /// `sending` items that came due before their lease was over: their due time moved to
    /// the lease's end (no message).
    pub leases_pending: usize,
    /// Job steps run (hold, notify, release after re-enable, recover, half-open probe, end
    /// deleted).
    pub jobs_run: usize,
    /// Due job steps left for the next tick because the tick's budget
    /// (`WEBHOOKS_SWEEP_BUDGET_SECONDS`) was spent, or a send failed.
    pub jobs_deferred: usize,
    /// Due-index reads that failed (one shard's, or the job partition's): logged, and the
    /// tick goes on without them and ends in the error; their items wait for the next tick.
    pub failed_reads: usize,
    /// Due deliveries whose read or transition failed (logged; they stay due).
    pub failed: usize,
    /// Messages whose send failed (their transitions were written: those deliveries wait for
    /// their re-drive, `WEBHOOKS_REDRIVE_AFTER_SECONDS`). A send of more than one
    /// SendMessageBatch call may have sent its first part.
    pub unsent: usize,
    /// Due deliveries left untouched for the next tick because a send had failed.
    pub deferred: usize,
}

/// Re-drives (transitions and their reads) in flight at once.
const IN_FLIGHT: usize = 16;

/// Most messages of one send: SQS's SendMessageBatch limit (10). Each batch is sent as soon as
/// its transitions are written, so a tick that dies (its Lambda timing out) leaves at most the
/// transitions in flight and one batch without their message, waiting for their re-drive.
const SEND_BATCH: usize = 10;

/// A due-index read that failed: logged and counted; the tick goes on without it and ends in
/// the first error (so the sweeper's error alarm sees it).
fn failed_read(shard: u32, e: StoreError, report: &mut SweepReport, error: &mut Option<ServiceError>) {
    tracing::warn!(partition = %due_pk(shard), error = %e, "due index partition not read; its items wait for the next tick");
    report.failed_reads += 1;
    error.get_or_insert(e.into());
}

/// Up to `sweep_batch` due items over all shards, never more: an even share of each shard
/// first, then what is left of the cap to the shards that had more (hashing spreads items
/// evenly only on average), for at most four rounds; once fewer items are left than shards
/// with more, those shards are asked one after another, from a random one, for all that is
/// left. Every item is read once. A shard whose read fails is passed over for the rest of the
/// tick ([`failed_read`]); its share goes to the others.
async fn read_due(app: &App, until_ms: i64, report: &mut SweepReport, error: &mut Option<ServiceError>) -> Vec<Due> {
    let cfg = &app.config;
    let mut items = Vec::new();
    // Shards that filled their share, with the last item read from each.
    let mut open: Vec<(u32, Option<Due>)> = (0..cfg.due_shards).map(|shard| (shard, None)).collect();
    for _round in 0..4 {
        let budget = cfg.sweep_batch.saturating_sub(items.len());
        if budget == 0 || open.is_empty() {
            break;
        }
        if budget < open.len() {
            // A share of at least one each would read past the cap. Start at a random shard,
            // so no shard waits on the others every tick (ticks come at a fixed interval: a
            // start taken from the clock could pick the same shards each time).
            let mut pick = [0u8; 4];
            app.random.fill(&mut pick);
            let start = usize::try_from(u32::from_le_bytes(pick)).unwrap_or(0) % open.len();
            open.rotate_left(start);
            for (shard, after) in &open {
                let left = cfg.sweep_batch.saturating_sub(items.len());
                if left == 0 {
                    break;
                }
                match app.store.due(*shard, until_ms, left, after.as_ref()).await {
                    Ok(page) => items.extend(page),
                    Err(e) => failed_read(*shard, e, report, error),
                }
            }
            break;
        }
        let share = budget / open.len();
        let reads = open.iter().map(|(shard, after)| app.store.due(*shard, until_ms, share, after.as_ref()));
        let pages = futures::future::join_all(reads).await;
        let mut still_open = Vec::new();
        for ((shard, _), page) in open.iter().zip(pages) {
            let page = match page {
                Ok(page) => page,
                Err(e) => {
                    failed_read(*shard, e, report, error);
                    continue;
                }
            };
            if page.len() >= share {
                still_open.push((*shard, page.last().cloned()));
            }
            items.extend(page);
        }
        open = still_open;
    }
    items
}

/// What re-driving one due delivery came to.
enum Redrive {
    /// Its transition is written; this message is to be sent (and whether it recovered an
    /// expired lease).
    Send(Enqueue, bool),
    /// A `sending` item whose lease is not over: its due time moved to the lease's end.
    LeasePending,
    /// It moved on since the due read, or another tick or worker changed it first.
    Lost,
    /// Not touched: a send had failed.
    Deferred,
}

/// Re-drives one due delivery: its guarded transition ([`delivery_lifecycle::sweep`]), the message to
/// send once it is written. Touches nothing once `stopped` is set.
async fn redrive(app: &App, now: DateTime<Utc>, item: DueItem, stopped: &AtomicBool) -> Result<Redrive, StoreError> {
    if stopped.load(Ordering::SeqCst) {
        return Ok(Redrive::Deferred);
    }
    // An expired lease is recorded on the item's history, trimmed to the same bound as every
    // record (see delivery_lifecycle::sweep): read it first.
    let read = match item.status {
        DeliveryStatus::Sending => app.store.get_delivery(&item.id).await?,
        _ => None,
    };
    let Some((t, enqueue)) = delivery_lifecycle::sweep(&app.config, now, &item, read.as_ref()) else {
        // It moved on since the due read.
        return Ok(Redrive::Lost);
    };
    let recovered = t.forgive_attempt;
    Ok(match app.store.apply(&item.id, &t, false).await? {
        Applied::Done(_) => match enqueue {
            Some(e) => Redrive::Send(e, recovered),
            None => Redrive::LeasePending,
        },
        Applied::Lost => Redrive::Lost,
    })
}

/// Sends `messages` now, in batches of [`SEND_BATCH`], counting them in `report`. Once a send
/// failed (`stopped`), nothing more is sent this tick: the tick starts no new transition,
/// and the deliveries whose messages were not sent wait for their re-drive.
async fn send_now(
    app: &App,
    messages: &[Enqueue],
    report: &mut SweepReport,
    error: &mut Option<ServiceError>,
    stopped: &AtomicBool,
) {
    for batch in messages.chunks(SEND_BATCH) {
        if stopped.load(Ordering::SeqCst) {
            report.unsent += batch.len();
            continue;
        }
        match app.queue.send(batch).await {
            Ok(()) => report.enqueued += batch.len(),
            Err(e) => {
                tracing::warn!(messages = batch.len(), error = %e, "messages not sent; their deliveries wait for their re-drive, and the tick starts nothing more");
                report.unsent += batch.len();
                stopped.store(true, Ordering::SeqCst);
                error.get_or_insert(e.into());
            }
        }
    }
}

/// One sweeper tick.
///
/// It goes on past what fails: a due-index read (that partition's items wait for the next
/// tick), a delivery's transition (it stays due), a job step (it runs again after its lease).
/// Each delivery's message is sent as soon as its transition is written, a batch at a time;
/// once a send failed, the tick starts nothing more (what it did not touch stays due for the
/// next tick, sooner than a re-drive).
///
/// # Errors
/// [`ServiceError::Unavailable`] (after the tick has done all it could, its report logged)
/// when a read, a transition or a send failed: the first such error.
pub async fn sweep(app: &App) -> Result<SweepReport, ServiceError> {
    let cfg = &app.config;
    let started = std::time::Instant::now();
    let now = app.clock.now();
    let now_ms = now.timestamp_millis();
    let mut report = SweepReport::default();
    let mut error: Option<ServiceError> = None;
    let mut items = read_due(app, now_ms, &mut report, &mut error).await;
    // Job steps come from their own partition, with their own cap: however many are due,
    // they never take the deliveries' share of the batch.
    // A failed read of it leaves the jobs for the next tick, not the deliveries.
    let job_steps = match app.store.due(JOB_SHARD, now_ms, cfg.sweep_batch, None).await {
        Ok(steps) => steps,
        Err(e) => {
            failed_read(JOB_SHARD, e, &mut report, &mut error);
            Vec::new()
        }
    };
    report.examined_jobs = job_steps.len();
    items.extend(job_steps);
    report.examined = items.len();
    let mut due = Vec::new();
    let mut jobs = Vec::new();
    for item in items {
        match item {
            Due::Delivery(d) if d.due_at <= now_ms => due.push(d),
            Due::Delivery(_) => {}
            Due::Job { id, due_at } => jobs.push((id, due_at)),
        }
    }
    // Set once a send failed.
    let stopped = AtomicBool::new(false);
    let mut redriven = futures::stream::iter(due.into_iter().map(|item| redrive(app, now, item, &stopped)))
        .buffer_unordered(IN_FLIGHT)
        .ready_chunks(SEND_BATCH);
    while let Some(done) = redriven.next().await {
        let mut batch = Vec::new();
        for r in done {
            match r {
                Ok(Redrive::Send(e, recovered)) => {
                    report.recovered_leases += usize::from(recovered);
                    batch.push(e);
                }
                Ok(Redrive::LeasePending) => report.leases_pending += 1,
                Ok(Redrive::Lost) => report.lost += 1,
                Ok(Redrive::Deferred) => report.deferred += 1,
                Err(e) => {
                    tracing::warn!(error = %e, "due delivery not re-driven; it stays due");
                    report.failed += 1;
                    error.get_or_insert(e.into());
                }
            }
        }
        send_now(app, &batch, &mut report, &mut error, &stopped).await;
    }
    drop(redriven);
    // Job steps after the due deliveries, while the tick's budget lasts: a busy job cannot
    // starve re-drives and long waits, and what is left runs next tick.
    for (id, due_at) in jobs {
        if stopped.load(Ordering::SeqCst) || started.elapsed() >= cfg.sweep_budget {
            report.jobs_deferred += 1;
            continue;
        }
        match tokio::time::timeout(
            cfg.sweep_budget.saturating_sub(started.elapsed()),
            endpoint_state::run_job_step_until(app, &id, due_at, started + cfg.sweep_budget),
        )
        .await
        {
            Ok(Ok(messages)) => {
                report.jobs_run += 1;
                send_now(app, &messages, &mut report, &mut error, &stopped).await;
            }
            Ok(Err(e)) => tracing::warn!(job_id = %id, error = %e, "job step failed; it runs again after its lease"),
            Err(_) => {
                tracing::warn!(job_id = %id, "job step ran out of the tick's budget; it runs again after its lease")
            }
        }
    }
    crate::metrics::emit(
        cfg,
        now_ms,
        &[
            ("SweepEnqueued", report.enqueued as f64, "Count"),
            ("SweepRecoveredLeases", report.recovered_leases as f64, "Count"),
        ],
    );
    if report.examined > 0 || error.is_some() {
        tracing::info!(?report, "sweep");
    }
    match error {
        Some(e) => Err(e),
        None => Ok(report),
    }
}
