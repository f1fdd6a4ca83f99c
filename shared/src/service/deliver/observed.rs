//! Recording an outcome that came in a message ([`AttemptMessage::observed`]): the attempt was
//! made by a worker whose record write failed on every try ([`super::settle::keep_outcome`]).
//! No POST: the outcome as observed is recorded, under the same guard a record has.

use super::*;
use crate::domain::model::DeliveryStatus;

/// Records `seen`, the outcome of attempt `msg.attempt` as the worker that made it saw it.
///
/// The delivery is found `sending` with that attempt (the worker's claim, its lease over or
/// not): recorded as deliver records any attempt. Or the sweeper came first and recorded the
/// attempt `lease_expired`, its re-drive not claimed yet: the claim is taken back
/// ([`delivery_lifecycle::reclaim_lapsed`]) and the outcome recorded in place of the lapse.
/// Anything else (the record landed after all, its answer lost; the re-drive claimed already;
/// a duplicate of this message) leaves the delivery as it is: `Duplicate`. A delivery found
/// delivered by this very attempt is then counted in its endpoint's stats, which the worker
/// did not do (its record had failed).
///
/// # Errors
/// [`ServiceError::Unavailable`] when a DynamoDB call failed: the message goes back to SQS.
pub(super) async fn record_observed(
    app: &App,
    msg: &AttemptMessage,
    seen: &Attempt,
    tally: &DeliveredInCall,
) -> Result<Handled, ServiceError> {
    let Some(read) = app.store.get_delivery(&msg.delivery_id).await? else {
        return Ok(Handled::Duplicate);
    };
    let delivery = if read.status == DeliveryStatus::Sending && read.attempt_count == msg.attempt {
        read
    } else if let Some(t) = delivery_lifecycle::reclaim_lapsed(&app.config, app.clock.now(), &read, msg.attempt) {
        match app.store.apply(&read.id, &t, true).await? {
            Applied::Done(Some(d)) => *d,
            Applied::Done(None) => return Err(ServiceError::Unavailable("reclaim returned no item".into())),
            Applied::Lost => return Ok(Handled::Duplicate),
        }
    } else {
        let by_this = read.status == DeliveryStatus::Delivered
            && read.attempt_count == msg.attempt
            && read.attempts.last().is_some_and(|a| a.attempt == msg.attempt && a.error.is_none());
        if by_this {
            // The record landed on its last try and its answer was lost: counted here.
            tally.note_delivered(&read, read.updated_at, read.retention_days(&app.config, true));
        }
        tracing::info!(delivery_id = %read.id, attempt = msg.attempt, status = read.status.as_str(), "observed outcome already recorded or moved past; message dropped");
        return Ok(Handled::Duplicate);
    };
    let endpoint = app.store.read_endpoint(&delivery.tenant_id, &delivery.endpoint_id, &delivery.id).await?;
    let probe = endpoint.as_ref().is_some_and(|ep| ep.state() == EndpointState::Probing(&delivery.id));
    let result = SendResult {
        outcome: outcome_of(seen),
        body: seen.response_body.clone(),
        retry_after_seconds: seen.retry_after_seconds,
        duration_ms: seen.duration_ms,
        detail: None,
        cause: seen.cause.as_deref().and_then(cause_of),
    };
    tracing::info!(delivery_id = %delivery.id, attempt = msg.attempt, status_code = seen.status_code, "recording an outcome observed by an earlier worker; no POST");
    let made = Made {
        delivery,
        endpoint,
        payload: None,
        result,
        started: seen.at,
        auth_used: seen.auth.clone(),
        token_fetch_ms: seen.token_fetch_ms,
        probe,
        observed: true,
    };
    settle(app, made, Mode::Policy, tally).await
}

/// The outcome an attempt record says (the inverse of [`error_class`]).
fn outcome_of(a: &Attempt) -> Outcome {
    match (a.status_code, a.error.as_deref()) {
        (Some(code), _) => Outcome::Status(code),
        (None, Some("timeout")) => Outcome::Timeout,
        (None, Some("auth_failed")) => Outcome::AuthFailed,
        (None, Some("destination_not_allowed")) => Outcome::Refused,
        _ => Outcome::Connection,
    }
}

/// The cause a record names, as the sender's constant ([`crate::sender::SendResult::cause`]).
fn cause_of(cause: &str) -> Option<&'static str> {
    ["refused", "reset", "dns", "tls", "timeout", "other"].into_iter().find(|c| *c == cause)
}
