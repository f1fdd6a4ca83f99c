//! Deliver: claim, sign, POST, record the attempt, schedule the next one.
//!
//! Only our own failures (an AWS call) are reported back to SQS as `batchItemFailures`. A
//! receiver's failure is recorded and rescheduled by us, never left to SQS redelivery, so the
//! wait between attempts is the policy's, not the queue's visibility timeout.
//!
//! Endpoint health lives here too: a 410 under `standard` disables the endpoint and holds the
//! delivery; N failed attempts in a row pause it (circuit breaker); a delivery that comes due
//! while its endpoint is disabled is held without an attempt; a half-open probe that succeeds
//! re-enables the endpoint.

use crate::App;
use crate::error::ServiceError;
use crate::lifecycle::{self, AttemptMessage, Next, Transition};
use crate::metrics;
use crate::model::{Attempt, Delivery, DeliveryStatus, Disabled, Endpoint};
use crate::policy::{Outcome, Verdict};
use crate::queue;
use crate::sender::{SendResult, Sender};
use crate::service::health;
use crate::signing;
use crate::store::Applied;
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use bytes::Bytes;

/// What handling one attempt message came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Handled {
    /// The attempt was made and recorded; the delivery is now in this status.
    Attempted(DeliveryStatus, Box<Attempt>),
    /// The endpoint is disabled: the delivery is held, no attempt was made.
    Held,
    /// The claim was lost: a duplicate message, or the attempt was already made.
    Duplicate,
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
    let work = event.records.into_iter().map(|record| async move {
        let id = record.message_id.clone().unwrap_or_default();
        let body = record.body.as_deref().unwrap_or("");
        let result = match queue::decode(body) {
            Ok(msg) => deliver_message(app, &msg).await.map(|_| ()),
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

/// Claims and makes one attempt; see [`Mode`].
///
/// # Errors
/// As [`deliver_message`].
pub async fn attempt(app: &App, msg: &AttemptMessage, mode: Mode) -> Result<Handled, ServiceError> {
    let cfg = &app.config;
    let claim = lifecycle::claim(cfg, app.clock.now(), msg);
    let delivery = match app.store.apply(&msg.delivery_id, &claim, true).await? {
        Applied::Done(Some(d)) => *d,
        Applied::Done(None) => return Err(ServiceError::Unavailable("claim returned no item".into())),
        Applied::Lost => {
            tracing::info!(delivery_id = %msg.delivery_id, attempt = msg.attempt, "claim lost; duplicate message dropped");
            return Ok(Handled::Duplicate);
        }
    };
    let mut endpoint = match fresh_snapshot(app, msg, &delivery) {
        Some(ep) => Some(ep),
        None => app.endpoint(&delivery.tenant_id, &delivery.endpoint_id).await?,
    };
    if endpoint.as_ref().is_some_and(|ep| !ep.enabled) {
        // Disabled in the (possibly stale) cache: make sure, and see the current probe.
        endpoint = app.endpoint_fresh(&delivery.tenant_id, &delivery.endpoint_id).await?;
    }
    let probe =
        endpoint.as_ref().is_some_and(|ep| !ep.enabled && ep.probe_delivery_id.as_deref() == Some(&delivery.id));
    if let Some(ep) = endpoint.as_ref().filter(|ep| !ep.enabled && !probe) {
        let t = lifecycle::hold_claimed(app.clock.now(), &delivery, None);
        apply_or_lost(app, &delivery, &t).await?;
        tracing::info!(delivery_id = %delivery.id, endpoint_id = %ep.id, "endpoint disabled; delivery held");
        return Ok(Handled::Held);
    }
    // From the message, else from a delivery written before payload items, else the event's
    // payload item; copied once into the body every send and the next message share.
    let payload: Option<Bytes> = match (&endpoint, msg.payload.as_ref().or(delivery.payload.as_ref())) {
        (None, _) => None,
        (Some(_), Some(p)) => Some(Bytes::from(p.clone())),
        (Some(_), None) => app.store.get_payload(&delivery.tenant_id, &delivery.event_id).await?.map(Bytes::from),
    };
    let started = app.clock.now();
    let result = match (&endpoint, &payload) {
        (None, _) => not_sent("endpoint_deleted"),
        (Some(_), None) => not_sent(PAYLOAD_EXPIRED),
        (Some(ep), Some(payload)) => {
            match ep.signing_secrets(started).into_iter().map(signing::secret_key).collect::<Result<Vec<_>, _>>() {
                Err(_) => not_sent(INVALID_SECRET),
                Ok(keys) => send(&*app.sender, &delivery, payload.clone(), &ep.url, &keys, started.timestamp()).await,
            }
        }
    };
    // Not sent for a reason of ours, not the receiver's: final, and not counted against the
    // endpoint's health (the circuit breaker counts the receiver's failures).
    let ours = result.detail.as_deref().filter(|d| matches!(*d, INVALID_SECRET | PAYLOAD_EXPIRED));
    let failures = delivery.attempt_count.saturating_sub(delivery.attempts_base);
    let verdict = match &endpoint {
        Some(ep) if ours.is_none() => ep.retry_policy.classify(result.outcome),
        _ => Verdict::Final,
    };
    let wait = match (verdict, &endpoint, mode) {
        (Verdict::Retry, Some(ep), Mode::Policy) => {
            ep.retry_policy.next_wait(failures, result.outcome, result.retry_after_seconds, &app.random)
        }
        _ => None,
    };
    let attempt = Attempt {
        attempt: delivery.attempt_count,
        at: started,
        status_code: match result.outcome {
            Outcome::Status(code) => Some(code),
            _ => None,
        },
        error: match &endpoint {
            None => Some("endpoint_deleted".into()),
            Some(_) if ours.is_some() => ours.map(String::from),
            Some(_) => error_class(result.outcome).map(String::from),
        },
        duration_ms: result.duration_ms,
        response_body: result.body.clone(),
        next_wait_seconds: wait.map(|w| w.seconds),
        retry_after_seconds: result.retry_after_seconds,
        wait_source: wait.map(|w| w.source),
    };
    let now = app.clock.now();
    let disable = |reason: &str| Disabled {
        reason: reason.into(),
        at: now,
        status_code: attempt.status_code,
        delivery_id: Some(delivery.id.clone()),
    };
    let expired = ours == Some(PAYLOAD_EXPIRED);
    let (transition, enqueue) = match (verdict, probe) {
        // Nothing left to send, ever: a dead letter, even as a probe (held, it would be
        // picked as the probe again and again).
        _ if expired => lifecycle::complete(cfg, now, &delivery, attempt.clone(), Next::Exhausted),
        // 410 Gone (or a failed probe): keep the delivery, held, with this attempt recorded.
        (Verdict::Disable, _) | (Verdict::Retry | Verdict::Final, true) => {
            (lifecycle::hold_claimed(now, &delivery, Some(attempt.clone())), None)
        }
        (Verdict::Success, _) => lifecycle::complete(cfg, now, &delivery, attempt.clone(), Next::Delivered),
        (Verdict::Retry, false) => {
            let scaled = |s: u64| ((s as f64) * cfg.wait_scale).ceil().max(1.0) as u64;
            let next = wait.map_or(Next::Exhausted, |w| Next::RetryIn(scaled(w.seconds)));
            lifecycle::complete(cfg, now, &delivery, attempt.clone(), next)
        }
        (Verdict::Final, false) => lifecycle::complete(cfg, now, &delivery, attempt.clone(), Next::Exhausted),
    };
    tracing::info!(
        delivery_id = %delivery.id,
        attempt = delivery.attempt_count,
        outcome = ?result.outcome,
        duration_ms = result.duration_ms,
        status = transition.status.as_str(),
        probe,
        "attempt made"
    );
    if !apply_or_lost(app, &delivery, &transition).await? {
        return Ok(Handled::Duplicate);
    }
    let status = transition.status;
    emit_metrics(app, &transition, result.duration_ms);
    if let Some(mut e) = enqueue {
        // The next attempt takes the payload along (when it fits), so it needs no read.
        e.message.payload = payload.and_then(|p| String::from_utf8(p.to_vec()).ok());
        app.queue.send(&[e]).await?;
    }
    if let Some(ep) = endpoint.as_ref().filter(|_| ours.is_none() || probe) {
        health_after_attempt(app, ep, verdict, probe, expired, disable).await?;
    }
    Ok(Handled::Attempted(status, Box::new(attempt)))
}

/// The endpoint's side of an attempt: failures in a row, the circuit breaker, 410, probes.
async fn health_after_attempt(
    app: &App,
    ep: &Endpoint,
    verdict: Verdict,
    probe: bool,
    payload_expired: bool,
    disable: impl Fn(&str) -> Disabled,
) -> Result<(), ServiceError> {
    match verdict {
        Verdict::Success if probe => {
            tracing::info!(endpoint_id = %ep.id, "half-open probe succeeded; resuming");
            health::enable(app, ep).await?;
        }
        Verdict::Success => {
            if ep.consecutive_failures > 0 {
                app.store.reset_failures(&ep.tenant_id, &ep.id).await?;
            }
        }
        Verdict::Disable => {
            health::disable(app, ep, disable("gone")).await?;
        }
        Verdict::Retry | Verdict::Final if probe => {
            app.store.set_probe(&ep.tenant_id, &ep.id, None).await?;
            // A probe that could not be sent says nothing of the receiver: probe again now.
            let cool_down = if payload_expired { 0 } else { ep.auto_resume_after_seconds };
            let at = app.clock.now() + chrono::Duration::seconds(i64::try_from(cool_down).unwrap_or(300));
            health::start_job(app, ep, crate::model::JobKind::Probe, at, None, None).await?;
        }
        Verdict::Retry | Verdict::Final => {
            let failures = app.store.count_failure(&ep.tenant_id, &ep.id).await?.unwrap_or(0);
            if ep.circuit_breaker_threshold > 0 && failures >= ep.circuit_breaker_threshold && ep.enabled {
                tracing::warn!(endpoint_id = %ep.id, failures, "circuit breaker opened");
                health::disable(app, ep, disable("circuit_breaker")).await?;
            }
        }
    }
    Ok(())
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
        app.config.emit_metrics,
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
    }
}

async fn send(
    sender: &dyn Sender,
    d: &Delivery,
    body: Bytes,
    url: &str,
    keys: &[Vec<u8>],
    timestamp: i64,
) -> SendResult {
    // During a secret rotation both signatures go out, space separated (Standard Webhooks).
    let signature = keys.iter().map(|k| signing::sign(k, &d.event_id, timestamp, &body)).collect::<Vec<_>>().join(" ");
    let headers = [
        (signing::HEADER_ID, d.event_id.clone()),
        (signing::HEADER_TIMESTAMP, timestamp.to_string()),
        (signing::HEADER_SIGNATURE, signature),
        (signing::HEADER_ATTEMPT, d.attempt_count.to_string()),
    ];
    sender.post(url, &headers, body).await
}

/// The attempt error when the endpoint's secret cannot be decoded.
const INVALID_SECRET: &str = "invalid_secret";
/// The attempt error when the event's payload item is gone (past `WEBHOOKS_EVENT_RETENTION_DAYS`).
const PAYLOAD_EXPIRED: &str = "payload_expired";

/// The endpoint that rode along in the message, when it is this delivery's and younger than
/// the endpoint cache's lifetime (the staleness deliver accepts from its cache anyway).
fn fresh_snapshot(app: &App, msg: &AttemptMessage, delivery: &Delivery) -> Option<Endpoint> {
    let snap = msg.endpoint.as_ref()?;
    let age = app.clock.now().signed_duration_since(snap.read_at).to_std().ok()?;
    (age < app.config.endpoint_cache
        && snap.endpoint.id == delivery.endpoint_id
        && snap.endpoint.tenant_id == delivery.tenant_id)
        .then(|| snap.endpoint.clone())
}
