//! Sync mode (`"mode": "sync"`): the one inline attempt of an event ingest accepted.

use super::*;

/// Makes the inline attempt of a sync event ([`ingest::ingest`] with `sync`), once, and sets
/// [`ingest::Accepted::outcome`]: the attempt's outcome, or, for a repeated event id or an
/// attempt that could not be completed, where the delivery stands (`deferred`).
///
/// # Errors
/// [`ServiceError::Unavailable`] when reading where a repeated event's delivery stands failed;
/// [`ServiceError::Validation`] when the event has no delivery.
pub async fn attempt_inline(app: &App, mut accepted: ingest::Accepted) -> Result<ingest::Accepted, ServiceError> {
    let first = accepted.inline_attempt.take();
    accepted.outcome = Some(sync_attempt(app, &accepted.deliveries, first).await?);
    Ok(accepted)
}

/// The one inline attempt of a sync event (`first`: the message for attempt 1, when this call
/// created the delivery), or, for a repeated event id, where it stands.
async fn sync_attempt(
    app: &App,
    deliveries: &[ingest::DeliveryRef],
    first: Option<delivery_lifecycle::Enqueue>,
) -> Result<ingest::SyncOutcome, ServiceError> {
    let Some(d) = deliveries.first() else {
        return Err(ServiceError::Validation("mode: sync needs exactly one subscribed endpoint".into()));
    };
    let created_here = first.is_some();
    if let Some(first) = first {
        match attempt(app, &first.message, Mode::Once).await {
            Ok(Handled::Attempted(status, attempt)) => {
                return Ok(ingest::SyncOutcome {
                    delivery_id: d.id.clone(),
                    status,
                    attempt: Some(*attempt),
                    deferred: None,
                });
            }
            Ok(_) => {}
            Err(e) => {
                // The event and its delivery are written and in the due index: the sweeper
                // re-drives it (a claim that failed), or records the lost attempt when the
                // lease runs out and re-drives it (a record that failed after the POST). Say so
                // rather than answer 503, which would read as "nothing was accepted".
                tracing::warn!(delivery_id = %d.id, error = %e, "sync attempt not completed; delivery deferred");
                let deferred = format!(
                    "the inline attempt could not be completed ({e}); the event is accepted and delivery {} \
                     continues asynchronously under the endpoint's retry policy (the receiver may see this \
                     webhook-id more than once); follow GET /v1/deliveries/{}",
                    d.id, d.id
                );
                return Ok(ingest::SyncOutcome {
                    delivery_id: d.id.clone(),
                    status: DeliveryStatus::Scheduled,
                    attempt: None,
                    deferred: Some(deferred),
                });
            }
        }
    }
    let current =
        app.store.get_delivery(&d.id).await?.ok_or_else(|| ServiceError::NotFound(format!("delivery {}", d.id)))?;
    // A delivery still under way (a repeat of an event id whose earlier post is being
    // delivered, or an inline attempt that could not start, its claim given back and queued
    // again): not a failure, so not a 502.
    let deferred = matches!(current.status, DeliveryStatus::Scheduled | DeliveryStatus::Sending).then(|| {
        let why = if created_here {
            "the inline attempt could not start and was queued again"
        } else {
            "this event id was accepted before and its delivery is still under way"
        };
        format!(
            "{why} (status {}); the event is accepted: follow delivery {} at GET /v1/deliveries/{} \
             for its outcome",
            current.status.as_str(),
            d.id,
            d.id
        )
    });
    Ok(ingest::SyncOutcome {
        delivery_id: d.id.clone(),
        status: current.status,
        attempt: current.attempts.last().cloned(),
        deferred,
    })
}
