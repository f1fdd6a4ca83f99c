//! The sweeper: enqueues deliveries whose wait was longer than SQS's delay limit, with the
//! exact remaining delay, and re-drives anything overdue (a lost message, an expired lease:
//! that one after reading the item, to record the lost attempt on its bounded history). It
//! never sends HTTP, and one tick handles at most `config.sweep_batch` items.

use crate::App;
use crate::error::ServiceError;
use crate::lifecycle;
use crate::model::DeliveryStatus;
use crate::service::health;
use crate::store::keys::JOB_SHARD;
use crate::store::{Applied, Due, StoreError};
use futures::StreamExt;
use serde::Serialize;

/// What one tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SweepReport {
    /// Items read from the due index: due deliveries (at most `sweep_batch`) and job steps
    /// (at most `sweep_batch` more, from their own partition).
    pub examined: usize,
    /// Of those, job steps.
    pub examined_jobs: usize,
    /// Messages sent.
    pub enqueued: usize,
    /// Of those, expired leases recovered.
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
    /// (`WEBHOOKS_SWEEP_BUDGET_SECONDS`) was spent.
    pub jobs_deferred: usize,
}

/// Up to `sweep_batch` due items over all shards, never more: an even share of each shard
/// first, then what is left of the cap to the shards that had more (hashing spreads items
/// evenly only on average), for at most four rounds; once fewer items are left than shards
/// with more, those shards are asked one after another, from a random one, for all that is
/// left. Every item is read once.
async fn read_due(app: &App, until_ms: i64) -> Result<Vec<Due>, ServiceError> {
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
                items.extend(app.store.due(*shard, until_ms, left, after.as_ref()).await?);
            }
            break;
        }
        let share = budget / open.len();
        let reads = open.iter().map(|(shard, after)| app.store.due(*shard, until_ms, share, after.as_ref()));
        let pages = futures::future::join_all(reads).await;
        let mut still_open = Vec::new();
        for ((shard, _), page) in open.iter().zip(pages) {
            let page = page?;
            if page.len() >= share {
                still_open.push((*shard, page.last().cloned()));
            }
            items.extend(page);
        }
        open = still_open;
    }
    Ok(items)
}

/// One sweeper tick.
///
/// # Errors
/// [`ServiceError::Unavailable`] when a query or the final send failed; whatever was not
/// enqueued stays in the due index for the next tick.
pub async fn sweep(app: &App) -> Result<SweepReport, ServiceError> {
    let cfg = &app.config;
    let started = std::time::Instant::now();
    let now = app.clock.now();
    let mut items = read_due(app, now.timestamp_millis()).await?;
    // Job steps come from their own partition, with their own cap: however many are due,
    // they never take the deliveries' share of the batch.
    // A failed read of it leaves the jobs for the next tick, not the deliveries.
    let job_steps = match app.store.due(JOB_SHARD, now.timestamp_millis(), cfg.sweep_batch, None).await {
        Ok(steps) => steps,
        Err(e) => {
            tracing::warn!(error = %e, "due job steps not read; they run next tick");
            Vec::new()
        }
    };
    let examined_jobs = job_steps.len();
    items.extend(job_steps);
    let mut report = SweepReport { examined: items.len(), examined_jobs, ..SweepReport::default() };
    let mut to_send = Vec::new();
    let mut due = Vec::new();
    let mut jobs = Vec::new();
    for item in &items {
        match item {
            Due::Delivery(d) if d.due_at <= now.timestamp_millis() => due.push(d.clone()),
            Due::Delivery(_) => {}
            Due::Job { id, due_at } => jobs.push((id, *due_at)),
        }
    }
    let applied: Vec<_> = futures::stream::iter(due.into_iter().map(|item| {
        let app = app.clone();
        async move {
            // An expired lease is recorded on the item's history, trimmed to the same bound
            // as every record (see lifecycle::sweep): read it first.
            let read = match item.status {
                DeliveryStatus::Sending => app.store.get_delivery(&item.id).await?,
                _ => None,
            };
            let Some((t, enqueue)) = lifecycle::sweep(&app.config, now, &item, read.as_ref()) else {
                // It moved on since the due read.
                return Ok(None);
            };
            let recovered = t.forgive_attempt;
            match app.store.apply(&item.id, &t, false).await? {
                Applied::Done(_) => Ok(Some((enqueue, recovered))),
                Applied::Lost => Ok(None),
            }
        }
    }))
    .buffer_unordered(16)
    .collect()
    .await;
    let mut first_error: Option<StoreError> = None;
    for r in applied {
        match r {
            Ok(Some((Some(e), recovered))) => {
                report.recovered_leases += usize::from(recovered);
                to_send.push(e);
            }
            Ok(Some((None, _))) => report.leases_pending += 1,
            Ok(None) => report.lost += 1,
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    // Job steps after the due deliveries, while the tick's budget lasts: a busy job cannot
    // starve re-drives and long waits, and what is left runs next tick.
    for (id, due_at) in jobs {
        if started.elapsed() >= cfg.sweep_budget {
            report.jobs_deferred += 1;
            continue;
        }
        match tokio::time::timeout(
            cfg.sweep_budget.saturating_sub(started.elapsed()),
            health::run_job_step(app, id, due_at),
        )
        .await
        {
            Ok(Ok(messages)) => {
                report.jobs_run += 1;
                to_send.extend(messages);
            }
            Ok(Err(e)) => tracing::warn!(job_id = %id, error = %e, "job step failed; it runs again after its lease"),
            Err(_) => {
                tracing::warn!(job_id = %id, "job step ran out of the tick's budget; it runs again after its lease")
            }
        }
    }
    report.enqueued = to_send.len();
    app.queue.send(&to_send).await?;
    if let Some(e) = first_error {
        return Err(e.into());
    }
    crate::metrics::emit(
        cfg,
        now.timestamp_millis(),
        &[
            ("SweepEnqueued", report.enqueued as f64, "Count"),
            ("SweepRecoveredLeases", report.recovered_leases as f64, "Count"),
        ],
    );
    if report.examined > 0 {
        tracing::info!(?report, "sweep");
    }
    Ok(report)
}
