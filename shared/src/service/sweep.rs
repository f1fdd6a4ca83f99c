//! The sweeper: enqueues deliveries whose wait was longer than SQS's delay limit, with the
//! exact remaining delay, and re-drives anything overdue (a lost message, an expired lease).
//! It never sends HTTP, and one tick handles at most `config.sweep_batch` items.

use crate::App;
use crate::error::ServiceError;
use crate::lifecycle;
use crate::service::health;
use crate::store::{Applied, Due};
use futures::StreamExt;
use serde::Serialize;

/// What one tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SweepReport {
    /// Items read from the due index.
    pub examined: usize,
    /// Messages sent.
    pub enqueued: usize,
    /// Of those, expired leases recovered.
    pub recovered_leases: usize,
    /// Items another tick or worker changed first.
    pub lost: usize,
    /// Job steps run (release after re-enable, recover, half-open probe).
    pub jobs_run: usize,
}

/// One sweeper tick.
///
/// # Errors
/// [`ServiceError::Unavailable`] when a query or the final send failed; whatever was not
/// enqueued stays in the due index for the next tick.
pub async fn sweep(app: &App) -> Result<SweepReport, ServiceError> {
    let cfg = &app.config;
    let now = app.clock.now();
    let per_shard = cfg.sweep_batch.div_ceil(cfg.due_shards as usize).max(1);
    let reads = (0..cfg.due_shards).map(|shard| app.store.due(shard, now.timestamp_millis(), per_shard));
    let mut items = Vec::new();
    for r in futures::future::join_all(reads).await {
        items.extend(r?);
    }
    let mut report = SweepReport { examined: items.len(), ..SweepReport::default() };
    let mut to_send = Vec::new();
    let mut planned = Vec::new();
    for item in &items {
        match item {
            Due::Delivery(d) => planned.extend(lifecycle::sweep(cfg, now, d)),
            Due::Job { id, due_at } => match health::run_job_step(app, id, *due_at).await {
                Ok(messages) => {
                    report.jobs_run += 1;
                    to_send.extend(messages);
                }
                Err(e) => tracing::warn!(job_id = %id, error = %e, "job step failed; it runs again after its lease"),
            },
        }
    }
    let applied: Vec<_> = futures::stream::iter(planned.into_iter().map(|(t, enqueue)| {
        let app = app.clone();
        async move {
            let recovered = t.forgive_attempt;
            match app.store.apply(&enqueue.message.delivery_id, &t, false).await {
                Ok(Applied::Done(_)) => Ok(Some((enqueue, recovered))),
                Ok(Applied::Lost) => Ok(None),
                Err(e) => Err(e),
            }
        }
    }))
    .buffer_unordered(16)
    .collect()
    .await;
    let mut first_error = None;
    for r in applied {
        match r {
            Ok(Some((e, recovered))) => {
                report.recovered_leases += usize::from(recovered);
                to_send.push(e);
            }
            Ok(None) => report.lost += 1,
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    report.enqueued = to_send.len();
    app.queue.send(&to_send).await?;
    if let Some(e) = first_error {
        return Err(e.into());
    }
    crate::metrics::emit(
        cfg.emit_metrics,
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
