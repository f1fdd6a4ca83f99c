//! Deliver: claim, sign, POST, record the attempt, schedule the next one.
//!
//! Only our own failures (an AWS call) are reported back to SQS as `batchItemFailures`. A
//! receiver's failure is recorded and rescheduled by us, never left to SQS redelivery, so the
//! wait between attempts is the policy's, not the queue's visibility timeout.

use crate::App;
use crate::error::ServiceError;
use crate::lifecycle::{self, AttemptMessage, Next};
use crate::metrics;
use crate::model::{Attempt, Delivery, DeliveryStatus};
use crate::policy::{Outcome, Verdict};
use crate::queue;
use crate::sender::SendResult;
use crate::signing;
use crate::store::Applied;
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use bytes::Bytes;

/// What handling one attempt message came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled {
    /// The attempt was made and recorded; the delivery is now in this status.
    Attempted(crate::model::DeliveryStatus),
    /// The claim was lost: a duplicate message, or the attempt was already made.
    Duplicate,
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

/// Makes attempt `msg.attempt` of a delivery, if it can claim it.
///
/// # Errors
/// [`ServiceError::Unavailable`] when a DynamoDB or SQS call failed. The delivery is then
/// left `sending` with a lease, or `scheduled` in the due index, and the sweeper recovers it.
pub async fn deliver_message(app: &App, msg: &AttemptMessage) -> Result<Handled, ServiceError> {
    let cfg = &app.config;
    let claim = lifecycle::claim(cfg, app.clock.now(), msg);
    let delivery = match app.store.apply(&msg.delivery_id, &claim, true).await? {
        Applied::Done(Some(d)) => *d,
        Applied::Done(None) => {
            return Err(ServiceError::Unavailable("claim returned no item".into()));
        }
        Applied::Lost => {
            tracing::info!(delivery_id = %msg.delivery_id, attempt = msg.attempt, "claim lost; duplicate message dropped");
            return Ok(Handled::Duplicate);
        }
    };
    let started = app.clock.now();
    let endpoint = app
        .endpoint(&delivery.tenant_id, &delivery.endpoint_id)
        .await?;
    let (result, policy) = match &endpoint {
        None => (not_sent("endpoint_deleted"), None),
        Some(ep) => match signing::secret_key(&ep.secret) {
            Err(_) => (not_sent("invalid_secret"), None),
            Ok(key) => (
                send(app, &delivery, &ep.url, &key, started.timestamp()).await,
                Some(&ep.retry_policy),
            ),
        },
    };
    let failures = delivery
        .attempt_count
        .saturating_sub(delivery.attempts_base);
    let (next, error) = match policy {
        None => (Next::Exhausted, result.detail.clone()),
        Some(policy) => {
            let verdict = policy.classify(result.outcome);
            let next = match verdict {
                Verdict::Success => Next::Delivered,
                Verdict::Retry => policy
                    .next_wait(
                        failures,
                        result.outcome,
                        result.retry_after_seconds,
                        &app.random,
                    )
                    .map_or(Next::Exhausted, Next::RetryIn),
                Verdict::Final | Verdict::Disable => Next::Exhausted,
            };
            (next, error_class(result.outcome).map(String::from))
        }
    };
    let attempt = Attempt {
        attempt: delivery.attempt_count,
        at: started,
        status_code: match result.outcome {
            Outcome::Status(code) => Some(code),
            _ => None,
        },
        error,
        duration_ms: result.duration_ms,
        response_body: result.body.clone(),
        next_wait_seconds: match next {
            Next::RetryIn(s) => Some(s),
            _ => None,
        },
    };
    let (transition, enqueue) = lifecycle::complete(cfg, app.clock.now(), &delivery, attempt, next);
    tracing::info!(
        delivery_id = %delivery.id,
        attempt = delivery.attempt_count,
        outcome = ?result.outcome,
        duration_ms = result.duration_ms,
        status = transition.status.as_str(),
        "attempt made"
    );
    match app.store.apply(&delivery.id, &transition, false).await? {
        Applied::Done(_) => {}
        Applied::Lost => {
            // Our lease ran out and the sweeper moved the delivery on before we finished.
            tracing::warn!(delivery_id = %delivery.id, attempt = delivery.attempt_count, "lease lost before the attempt was recorded");
            return Ok(Handled::Duplicate);
        }
    }
    let status = transition.status;
    let count = |s: DeliveryStatus| if status == s { 1.0 } else { 0.0 };
    metrics::emit(
        cfg.emit_metrics,
        transition.now.timestamp_millis(),
        &[
            ("Delivered", count(DeliveryStatus::Delivered), "Count"),
            (
                "FailedAttempts",
                1.0 - count(DeliveryStatus::Delivered),
                "Count",
            ),
            ("Exhausted", count(DeliveryStatus::Exhausted), "Count"),
            ("AttemptDuration", result.duration_ms as f64, "Milliseconds"),
        ],
    );
    if let Some(e) = enqueue {
        app.queue.send(&[e]).await?;
    }
    Ok(Handled::Attempted(status))
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

async fn send(app: &App, d: &Delivery, url: &str, key: &[u8], timestamp: i64) -> SendResult {
    let body = Bytes::from(d.payload.clone());
    let headers = [
        (signing::HEADER_ID, d.event_id.clone()),
        (signing::HEADER_TIMESTAMP, timestamp.to_string()),
        (
            signing::HEADER_SIGNATURE,
            signing::sign(key, &d.event_id, timestamp, &body),
        ),
        (signing::HEADER_ATTEMPT, d.attempt_count.to_string()),
    ];
    app.sender.post(url, &headers, body).await
}
