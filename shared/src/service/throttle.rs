//! Enforcing an endpoint's rate limit in deliver: [`admit`] takes a slot before the POST or
//! gives the claim back to wait; [`observe`] moves the adaptive rate after it. The decisions
//! (windows, counters, AIMD) and their cost are in [`crate::domain::rate`].

use crate::App;
use crate::domain::model::{Delivery, Endpoint};
use crate::domain::rate::{counter, effective, next_rate, slots, wait_seconds};
use crate::domain::retry_policy::Outcome;
use crate::error::ServiceError;
use crate::service::lanes;
use bytes::Bytes;
use chrono::{DateTime, Utc};

/// What [`admit`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Go ahead. With a limit, the time the slot was taken at, which is the attempt's start
    /// (its `webhook-timestamp` second is the window it was counted in); `None` without a
    /// limit (nothing was read or written).
    Go(Option<DateTime<Utc>>),
    /// Over the limit: the claim was given back and the message sent again for later.
    Waits,
    /// Over the limit, and the claim was lost meanwhile (a duplicate): nothing sent.
    Lost,
}

/// Takes a slot for an attempt of `delivery` on `ep`, or, over the limit, gives the claim
/// back and sends the message again when its window comes (see the module docs).
///
/// # Errors
/// [`ServiceError::Unavailable`] when the counter, the give-back or the send failed; the
/// delivery is then left `sending` with a lease, or `scheduled` in the due index, and the
/// sweeper recovers it.
pub async fn admit(
    app: &App,
    delivery: &Delivery,
    ep: &Endpoint,
    payload: Option<&Bytes>,
) -> Result<Admission, ServiceError> {
    let Some(slots) = slots(ep) else { return Ok(Admission::Go(None)) };
    let now = app.clock.now();
    let (counter, slots) = counter(&ep.id, &delivery.id, slots);
    let count = app.store.take_rate_slot(&counter, now.timestamp()).await?;
    let wait = wait_seconds(count, slots);
    if wait == 0 {
        return Ok(Admission::Go(Some(now)));
    }
    let queue = lanes::queue_for(app, crate::domain::lane::is_slow(ep, now));
    let wait = u32::try_from(wait).unwrap_or(u32::MAX);
    let given = lanes::give_back(app, delivery, wait, payload, queue).await?;
    if given {
        tracing::info!(delivery_id = %delivery.id, endpoint_id = %ep.id, count, slots, wait_seconds = wait, "rate limit: attempt waits");
    }
    Ok(if given { Admission::Waits } else { Admission::Lost })
}

/// Moves the adaptive rate as an attempt's outcome asks (see [`next_rate`]); best effort: a
/// lost condition (another attempt moved it first) or a failed write is logged and left.
pub async fn observe(app: &App, ep: &Endpoint, outcome: Outcome, retry_after: Option<u64>, failures_in_a_row: u32) {
    let now_ms = app.clock.now().timestamp_millis();
    let Some(rate) = next_rate(ep, outcome, retry_after, failures_in_a_row, now_ms) else { return };
    match app.store.set_effective_rate(&ep.tenant_id, &ep.id, ep.rate_changed_at_ms, rate, now_ms).await {
        Ok(true) => {
            tracing::info!(endpoint_id = %ep.id, from = ?effective(ep), to = rate, outcome = ?outcome, "adaptive rate changed")
        }
        Ok(false) => {}
        Err(e) => tracing::warn!(endpoint_id = %ep.id, error = %e, "adaptive rate not written"),
    }
}
