//! Deliver: claim, sign, POST, record the attempt, schedule the next one.
//!
//! Only our own failures (an AWS call) are reported back to SQS as `batchItemFailures`. A
//! receiver's failure is recorded and rescheduled by us, never left to SQS redelivery, so the
//! wait between attempts is the policy's, not the queue's visibility timeout.
//!
//! The endpoint's side of an attempt is decided here and written through
//! [`crate::domain::endpoint_lifecycle`]: a disable code (410 under `standard`) disables the endpoint
//! and holds the delivery; N failed attempts in a row pause it (circuit breaker; with
//! endpoint copies, N summed over the copies' runs, see the store's endpoint copies); a delivery
//! that comes up while its endpoint does not accept it is held without an attempt; a
//! half-open probe's outcome resumes the endpoint or schedules the next probe. Each of these
//! is written with the attempt's record in one transaction, with the jobs that must follow.

use crate::App;
use crate::domain::delivery_lifecycle::{self, AttemptMessage, Next, Transition};
use crate::domain::endpoint_lifecycle;
use crate::domain::lane::{self, Lane};
use crate::domain::model::{
    Attempt, Delivery, DeliveryStatus, Disabled, Endpoint, EndpointState, REASON_CIRCUIT_BREAKER,
    REASON_ENDPOINT_DELETED, REASON_GONE, REASON_UNSUBSCRIBED,
};
use crate::domain::retry_policy::{Outcome, Verdict};
use crate::domain::signing;
use crate::error::ServiceError;
use crate::metrics;
use crate::queue;
use crate::sender::SendResult;
use crate::service::{endpoint_state, ingest};
use crate::service::{lanes, throttle};
use crate::store::{Applied, Committed, EndpointWrite, FailureCount};
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use bytes::Bytes;

mod counted;
mod observed;
pub mod post;
mod record;
mod settle;
mod sync;
use counted::DeliveredInCall;
use record::*;
use settle::{Made, settle};
pub use sync::attempt_inline;

/// What handling one attempt message came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Handled {
    /// The attempt was made and recorded; the delivery is now in this status.
    Attempted(DeliveryStatus, Box<Attempt>),
    /// The endpoint is disabled: the delivery is held, no attempt was made.
    Held,
    /// The claim was lost: a duplicate message, or the attempt was already made.
    Duplicate,
    /// The claim was given back without an attempt (its lease had less left than the request
    /// timeout) and the same attempt queued again.
    Requeued,
    /// The claim was given back without an attempt and the same attempt sent to the slow
    /// lane (see [`crate::domain::lane`]).
    Rerouted,
    /// The claim was given back without an attempt, to wait for the endpoint's rate limit
    /// (see [`crate::domain::rate`]); not an attempt, not a failure.
    RateLimited,
    /// The endpoint was deleted: the delivery ended as a dead letter with reason
    /// `endpoint_deleted`, no attempt made or recorded.
    Ended,
    /// The attempt was made but its record failed on every try: its outcome was sent to the
    /// queue to be recorded on receipt (see [`AttemptMessage::observed`]).
    Kept,
    /// Deliveries owed to their endpoint's stats were counted (see [`AttemptMessage::owed`]).
    Counted,
}

/// How many attempts this call may make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The retry policy decides (SQS-driven delivery).
    Policy,
    /// One attempt, whatever happens is final (synchronous ingest).
    Once,
}

/// Handles an SQS batch; messages are processed concurrently. Returns the ids of messages
/// that failed for our own reasons (SQS retries those) and of malformed messages (which go
/// to the queue's dead-letter queue after its `maxReceiveCount`).
pub async fn deliver_batch(app: &App, event: SqsEvent) -> SqsBatchResponse {
    let tally = DeliveredInCall::default();
    let tally = &tally;
    let work = event.records.into_iter().map(|record| async move {
        let id = record.message_id.clone().unwrap_or_default();
        let body = record.body.as_deref().unwrap_or("");
        let lane = lane::of_source(&app.config, record.event_source_arn.as_deref());
        let result = match queue::decode(body) {
            Ok(msg) => attempt_on(app, &msg, Mode::Policy, lane, tally).await.map(|_| ()),
            Err(e) => {
                tracing::error!(message_id = %id, error = %e, "malformed attempt message");
                Err(ServiceError::Validation(format!("message body: {e}")))
            }
        };
        result.err().map(|e| {
            tracing::warn!(message_id = %id, error = %e, "message returned to the queue");
            id
        })
    });
    let failed = futures::future::join_all(work).await;
    tally.count_noted(app).await;
    let mut response = SqsBatchResponse::default();
    response.batch_item_failures = failed
        .into_iter()
        .flatten()
        .map(|id| {
            let mut f = BatchItemFailure::default();
            f.item_identifier = id;
            f
        })
        .collect();
    response
}

/// Makes attempt `msg.attempt` of a delivery under its retry policy, if it can claim it.
///
/// # Errors
/// [`ServiceError::Unavailable`] when a DynamoDB or SQS call failed. The delivery is then
/// left `sending` with a lease, or `scheduled` in the due index, and the sweeper recovers it.
pub async fn deliver_message(app: &App, msg: &AttemptMessage) -> Result<Handled, ServiceError> {
    attempt(app, msg, Mode::Policy).await
}

/// After an AWS call between a claim and its POST failed: nothing was sent, so the claim is
/// given back ([`lanes::give_back`]: `scheduled` again, the attempt number not spent) and the
/// same attempt queued on the message's lane after [`GIVE_BACK_AFTER_ERROR_SECONDS`]. The
/// message is done then (`Requeued`). Only for a failed AWS call
/// ([`ServiceError::Unavailable`], which a later try can get past): an error of ours (an item
/// that does not decode, a request DynamoDB refuses as malformed) would fail every try the
/// same way, so it takes the lease path as before (the message goes back to SQS, the sweeper
/// records the lapsed attempt, and the retry policy ends the delivery in time). When the
/// give-back fails or finds the claim moved on (a give-back inside whose send failed), the
/// error is returned and the message goes back to SQS.
///
/// # Errors
/// `error`, when it is not a failed AWS call or the claim could not be given back.
async fn give_back_after_error(
    app: &App,
    delivery: &Delivery,
    msg: &AttemptMessage,
    lane: Lane,
    error: ServiceError,
) -> Result<Handled, ServiceError> {
    if !matches!(error, ServiceError::Unavailable(_)) {
        return Err(error);
    }
    let payload = msg.payload.as_ref().map(|p| Bytes::from(p.clone()));
    let queue = lanes::queue_for(app, lane == Lane::Slow);
    match lanes::give_back(app, delivery, GIVE_BACK_AFTER_ERROR_SECONDS, payload.as_ref(), queue).await {
        Ok(true) => {
            tracing::warn!(delivery_id = %delivery.id, error = %error, "call before the POST failed; claim given back, nothing sent");
            Ok(Handled::Requeued)
        }
        Ok(false) => Err(error),
        Err(e) => {
            tracing::warn!(delivery_id = %delivery.id, error = %error, give_back = %e, "call before the POST failed and the claim could not be given back");
            Err(error)
        }
    }
}

/// Whether `payload`, carried in an attempt message, is the one stored at ingest: its digest
/// is the delivery's `payload_sha256`. A message anyone else sent to the queue (SQS does not
/// say who sent it) cannot make deliver sign another body: a payload that does not match is
/// logged and left, and the stored one is read (issue #34).
fn rides_along_intact(delivery: &Delivery, payload: &str) -> bool {
    let intact =
        delivery.payload_sha256.as_deref() == Some(crate::domain::signing::payload_digest(payload.as_bytes()).as_str());
    if !intact && delivery.payload_sha256.as_deref() != Some(crate::store::lifecycle::EXPUNGED_DIGEST) {
        tracing::warn!(delivery_id = %delivery.id, "a queue message carried a payload that is not the one stored; the stored payload is sent");
    }
    intact
}

/// What an attempt goes on with once claimed: the payload (`None`: retention removed it), the
/// endpoint as read last (`None`: deleted), and when its rate-limit slot was taken.
type Ready = (Option<Bytes>, Option<Endpoint>, Option<chrono::DateTime<chrono::Utc>>);

/// Seconds a claim given back after a failed AWS call waits before its attempt is tried
/// again: long enough that a throttled table is not asked again at once.
pub const GIVE_BACK_AFTER_ERROR_SECONDS: u32 = 5;

/// How many times a write guarded by the endpoint's version is decided again after the
/// endpoint changed under it, before the message goes back to SQS.
const ENDPOINT_TRIES: usize = 5;

/// Claims and makes one attempt; see [`Mode`].
///
/// The order is the guarantee: claim the delivery, read the payload if it did not ride
/// along, then read the endpoint (strongly consistent) as the last step before the POST. An
/// endpoint that does not accept this delivery (disabled, paused, or probing with another
/// delivery) gets it held, in a write conditional on the endpoint's version as read; a claim
/// whose lease has less left than the request timeout is given back instead of sent.
///
/// # Errors
/// As [`deliver_message`].
pub async fn attempt(app: &App, msg: &AttemptMessage, mode: Mode) -> Result<Handled, ServiceError> {
    attempt_in(app, msg, mode, Lane::Main).await
}

/// As [`attempt`], for a message that came from `lane`: on the main lane, a delivery of an
/// endpoint marked slow is given back and sent to the slow lane (see [`crate::domain::lane`]); on
/// either, an attempt over the endpoint's rate limit waits (see [`crate::domain::rate`]).
///
/// # Errors
/// As [`deliver_message`].
pub async fn attempt_in(app: &App, msg: &AttemptMessage, mode: Mode, lane: Lane) -> Result<Handled, ServiceError> {
    let tally = DeliveredInCall::default();
    let handled = attempt_on(app, msg, mode, lane, &tally).await;
    tally.count_noted(app).await;
    handled
}

/// As [`attempt_in`], noting a delivered delivery in `tally` instead of counting it at once.
async fn attempt_on(
    app: &App,
    msg: &AttemptMessage,
    mode: Mode,
    lane: Lane,
    tally: &DeliveredInCall,
) -> Result<Handled, ServiceError> {
    let cfg = &app.config;
    if let Some(owed) = &msg.owed {
        return counted::count_owed(app, owed).await;
    }
    if let Some(seen) = &msg.observed {
        return observed::record_observed(app, msg, seen, tally).await;
    }
    let claim = delivery_lifecycle::claim(cfg, app.clock.now(), msg);
    let delivery = match app.store.apply(&msg.delivery_id, &claim, true).await? {
        Applied::Done(Some(d)) => *d,
        Applied::Done(None) => return Err(ServiceError::Unavailable("claim returned no item".into())),
        Applied::Lost => {
            tracing::info!(delivery_id = %msg.delivery_id, attempt = msg.attempt, "claim lost (a duplicate, or a message ahead of its attempt's time); message dropped");
            return Ok(Handled::Duplicate);
        }
    };
    // Everything between the claim and the POST: any AWS call here that fails leaves nothing
    // sent, so the claim is given back (the attempt number not spent) rather than left
    // `sending` for the sweeper to record as `lease_expired`, an attempt that never reached
    // the receiver (issue #35).
    let ready: Result<Result<Ready, Handled>, ServiceError> = async {
        // From the message when it is the payload stored at ingest (its digest is the one the
        // delivery keeps), else the event's payload item; copied once into the body every send
        // and the next message share.
        let payload: Option<Bytes> = match msg.payload.as_ref() {
            Some(p) if rides_along_intact(&delivery, p) => Some(Bytes::from(p.clone())),
            _ => app.store.get_payload(&delivery.tenant_id, &delivery.event_id).await?.map(Bytes::from),
        };
        let endpoint = match current_endpoint(app, &delivery).await? {
            Current::Accepts(ep) => ep.map(|b| *b),
            Current::Settled(handled) => return Ok(Err(handled)),
        };
        // With a rate limit, the attempt starts when its slot was taken (the window it counts in).
        let mut slot_at = None;
        if let (Some(ep), Mode::Policy) = (&endpoint, mode) {
            if lane == Lane::Main && app.slow_queue.is_some() && lane::is_slow(ep, app.clock.now()) {
                let slow = lanes::queue_for(app, true);
                if !lanes::give_back(app, &delivery, 0, payload.as_ref(), slow).await? {
                    return Ok(Err(Handled::Duplicate));
                }
                tracing::info!(delivery_id = %delivery.id, endpoint_id = %ep.id, "endpoint is slow; attempt moved to the slow lane");
                return Ok(Err(Handled::Rerouted));
            }
            match throttle::admit(app, &delivery, ep, payload.as_ref()).await? {
                throttle::Admission::Go(at) => slot_at = at,
                throttle::Admission::Waits => return Ok(Err(Handled::RateLimited)),
                throttle::Admission::Lost => return Ok(Err(Handled::Duplicate)),
            }
        }
        // Taking the slot was an AWS call after the endpoint read: read it again, so the read the
        // POST goes on is still the last step before it (a disable or PATCH that answered while
        // the slot was taken is seen). Only endpoints with a rate limit pay this read.
        let endpoint = match (slot_at, endpoint) {
            (Some(_), Some(_)) => match current_endpoint(app, &delivery).await? {
                Current::Accepts(ep) => ep.map(|b| *b),
                Current::Settled(handled) => return Ok(Err(handled)),
            },
            (_, endpoint) => endpoint,
        };
        let lease_left =
            delivery.lease_until.map(|l| l - app.clock.now()).and_then(|d| d.to_std().ok()).unwrap_or_default();
        if lease_left < cfg.request_timeout {
            // The AWS calls since the claim ate into the lease: a POST started now could outlast it
            // and the sweeper would re-drive a second one. Give the claim back instead, to the
            // endpoint's lane (a slow endpoint's attempt stays in the slow lane).
            let slow = endpoint.as_ref().is_some_and(|ep| lane::is_slow(ep, app.clock.now()));
            if !lanes::give_back(app, &delivery, 0, payload.as_ref(), lanes::queue_for(app, slow)).await? {
                tracing::warn!(delivery_id = %delivery.id, "lease lost before the claim was given back");
                return Ok(Err(Handled::Duplicate));
            }
            tracing::warn!(delivery_id = %delivery.id, lease_left_ms = lease_left.as_millis() as u64, "lease too short to start the POST; claim given back");
            return Ok(Err(Handled::Requeued));
        }
        Ok(Ok((payload, endpoint, slot_at)))
    }
    .await;
    let (payload, endpoint, slot_at) = match ready {
        Ok(Ok(ready)) => ready,
        Ok(Err(handled)) => return Ok(handled),
        Err(e) => return give_back_after_error(app, &delivery, msg, lane, e).await,
    };
    let Some(current) = endpoint.as_ref() else {
        // Deleted: nothing is sent, so no attempt is recorded (the claim's number is given
        // back) and the retry policy has no say: a dead letter with reason `endpoint_deleted`,
        // not counted as exhausted (no `Exhausted` metric for the alarm). Issue #35 input 5.
        let t = delivery_lifecycle::end_claimed(cfg, app.clock.now(), &delivery, REASON_ENDPOINT_DELETED);
        if !apply_or_lost(app, &delivery, &t).await? {
            return Ok(Handled::Duplicate);
        }
        tracing::info!(delivery_id = %delivery.id, endpoint_id = %delivery.endpoint_id, "endpoint deleted; delivery ended, nothing sent");
        return Ok(Handled::Ended);
    };
    let probe = current.state() == EndpointState::Probing(&delivery.id);
    let started = slot_at.unwrap_or_else(|| app.clock.now());
    let (mut auth_used, mut token_fetch_ms) = (None, None);
    let result = match (&endpoint, &payload) {
        (None, _) => not_sent(REASON_ENDPOINT_DELETED),
        // The endpoint's event-type filter as it is now: a PATCH that dropped the type stops
        // the retries of deliveries accepted before it.
        (Some(ep), _) if !ep.subscribes_to(&delivery.event_type) => not_sent(REASON_UNSUBSCRIBED),
        (Some(_), None) => not_sent(PAYLOAD_EXPIRED),
        (Some(ep), Some(payload)) => {
            match ep.signing_secrets(started).into_iter().map(signing::secret_key).collect::<Result<Vec<_>, _>>() {
                Err(_) => not_sent(INVALID_SECRET),
                Ok(keys) => {
                    let p = post::post_signed(
                        app,
                        ep,
                        &delivery.event_id,
                        delivery.attempt_count,
                        payload.clone(),
                        &keys,
                        started.timestamp(),
                    )
                    .await;
                    (auth_used, token_fetch_ms) = (p.auth, p.token_fetch_ms);
                    p.result
                }
            }
        }
    };
    let made = Made {
        delivery,
        endpoint,
        payload,
        result,
        started,
        auth_used: auth_used.map(String::from),
        token_fetch_ms,
        probe,
        observed: false,
    };
    settle(app, made, mode, tally).await
}

/// A delivery transition and the message to send once it is written.
type Recorded = (Transition, Option<delivery_lifecycle::Enqueue>);

/// The endpoint as it is now, when it accepts this delivery (or is gone: `None`), or what
/// became of the delivery when it does not (held, in a write conditional on the version read).
enum Current {
    Accepts(Option<Box<Endpoint>>),
    Settled(Handled),
}

async fn current_endpoint(app: &App, delivery: &Delivery) -> Result<Current, ServiceError> {
    for _ in 0..ENDPOINT_TRIES {
        let ep = match app.store.read_endpoint(&delivery.tenant_id, &delivery.endpoint_id, &delivery.id).await? {
            Some(ep) if !ep.accepts(&delivery.id) => ep,
            other => return Ok(Current::Accepts(other.map(Box::new))),
        };
        let hold = delivery_lifecycle::hold_claimed(app.clock.now(), delivery, None);
        let check = EndpointWrite::Unchanged { tenant_id: &ep.tenant_id, id: &ep.id, version: ep.version };
        match app.store.commit(check, Some((&delivery.id, &hold))).await? {
            Committed::Done => {
                tracing::info!(delivery_id = %delivery.id, endpoint_id = %ep.id, "endpoint not accepting attempts; delivery held");
                return Ok(Current::Settled(Handled::Held));
            }
            Committed::DeliveryLost => return Ok(Current::Settled(Handled::Duplicate)),
            Committed::EndpointChanged => continue,
        }
    }
    Err(ServiceError::Unavailable(format!("endpoint {} kept changing while holding", delivery.endpoint_id)))
}

/// Applies a transition on a claimed delivery; false when the lease was lost meanwhile.
async fn apply_or_lost(app: &App, delivery: &Delivery, t: &Transition) -> Result<bool, ServiceError> {
    match app.store.apply(&delivery.id, t, false).await? {
        Applied::Done(_) => Ok(true),
        Applied::Lost => {
            // Our lease ran out and the sweeper moved the delivery on before we finished.
            tracing::warn!(delivery_id = %delivery.id, attempt = delivery.attempt_count, "lease lost before the attempt was recorded");
            Ok(false)
        }
    }
}

fn emit_metrics(app: &App, t: &Transition, duration_ms: u64) {
    let count = |s: DeliveryStatus| if t.status == s { 1.0 } else { 0.0 };
    metrics::emit(
        &app.config,
        t.now.timestamp_millis(),
        &[
            ("Delivered", count(DeliveryStatus::Delivered), "Count"),
            ("FailedAttempts", 1.0 - count(DeliveryStatus::Delivered), "Count"),
            ("Exhausted", count(DeliveryStatus::Exhausted), "Count"),
            ("AttemptDuration", duration_ms as f64, "Milliseconds"),
        ],
    );
}

fn not_sent(error: &str) -> SendResult {
    SendResult {
        outcome: Outcome::Refused,
        body: None,
        retry_after_seconds: None,
        duration_ms: 0,
        detail: Some(error.to_string()),
        cause: None,
    }
}

/// The attempt record's error class for an outcome (`None` for a 2xx).
pub fn error_class(outcome: Outcome) -> Option<&'static str> {
    match outcome {
        Outcome::Status(c) if (200..300).contains(&c) => None,
        Outcome::Status(_) => Some("http_status"),
        Outcome::Timeout => Some("timeout"),
        Outcome::Connection => Some("connection"),
        Outcome::Refused => Some("destination_not_allowed"),
        Outcome::AuthFailed => Some("auth_failed"),
    }
}

/// The attempt error when the endpoint's secret cannot be decoded.
const INVALID_SECRET: &str = "invalid_secret";
/// The attempt error when the event's payload item is gone (past `WEBHOOKS_EVENT_RETENTION_DAYS`).
const PAYLOAD_EXPIRED: &str = "payload_expired";
