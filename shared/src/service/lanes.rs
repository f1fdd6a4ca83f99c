//! The slow lane at work: which queue an attempt goes to, the marker an attempt's duration
//! writes, and the give-back that forwards or delays an attempt. The routing rules and their
//! cost are in [`crate::domain::lane`].

use crate::App;
use crate::domain::delivery_lifecycle;
use crate::domain::delivery_lifecycle::Field;
use crate::domain::lane::marker_after;
use crate::domain::model::{Delivery, Endpoint};
use crate::error::ServiceError;
use crate::queue::Queue;
use bytes::Bytes;

/// The queue for an attempt of an endpoint that is slow (`slow`) or not: the slow lane when
/// there is one and it is slow, else the main queue.
pub fn queue_for(app: &App, slow: bool) -> &dyn Queue {
    match (&app.slow_queue, slow) {
        (Some(q), true) => q.as_ref(),
        _ => app.queue.as_ref(),
    }
}

/// Records what an attempt of `duration_ms` says of its endpoint's lane (see
/// [`marker_after`]); best effort: a failed write is logged and the next attempt decides
/// again. Returns whether the endpoint is slow now. Without a slow lane, nothing is written.
pub async fn observe(app: &App, ep: &Endpoint, duration_ms: u64) -> bool {
    if app.slow_queue.is_none() {
        return false;
    }
    let now = app.clock.now();
    let Some(marker) = marker_after(&app.config, ep, now, duration_ms) else {
        return crate::domain::lane::is_slow(ep, now);
    };
    match app.store.set_slow_until(&ep.tenant_id, &ep.id, marker).await {
        Ok(()) => tracing::info!(endpoint_id = %ep.id, slow_until = ?marker, duration_ms, "endpoint lane changed"),
        Err(e) => tracing::warn!(endpoint_id = %ep.id, error = %e, "slow lane marker not written"),
    }
    marker.is_some_and(|t| t > now)
}

/// Gives a claimed delivery back without an attempt (`scheduled` again, the attempt number
/// not spent) due in `delay_seconds`, and sends the message for the same attempt to
/// `queue`, with that delay (at most `WEBHOOKS_SQS_MAX_DELAY_SECONDS`). The delivery stays in
/// the due index at its due time plus `WEBHOOKS_REDRIVE_AFTER_SECONDS`, so a send that fails
/// is re-driven by the sweeper. Returns false when the claim was lost meanwhile (nothing
/// sent).
///
/// # Errors
/// [`ServiceError::Unavailable`] when the write or the send failed.
pub async fn give_back(
    app: &App,
    delivery: &Delivery,
    delay_seconds: u32,
    payload: Option<&Bytes>,
    queue: &dyn Queue,
) -> Result<bool, ServiceError> {
    let cfg = &app.config;
    let now = app.clock.now();
    let delay = delay_seconds.min(cfg.sqs_max_delay_seconds);
    let (mut t, enqueue) = delivery_lifecycle::unclaim(cfg, now, delivery);
    let mut enqueue = enqueue.unwrap_or(delivery_lifecycle::Enqueue {
        message: delivery_lifecycle::AttemptMessage::new(delivery.id.clone(), delivery.attempt_count),
        delay_seconds: 0,
    });
    if delay > 0 {
        let at = now + chrono::Duration::seconds(i64::from(delay));
        t.next_attempt_at = Field::Set(at);
        t.due_at = Field::Set(at.timestamp_millis() + i64::from(cfg.redrive_after_seconds) * 1000);
        enqueue.delay_seconds = delay;
    }
    match app.store.apply(&delivery.id, &t, false).await? {
        crate::store::Applied::Done(_) => {}
        crate::store::Applied::Lost => return Ok(false),
    }
    enqueue.message.payload = payload.and_then(|p| String::from_utf8(p.to_vec()).ok());
    queue.send(&[enqueue]).await?;
    Ok(true)
}
