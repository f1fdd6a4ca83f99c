//! The attempt queue: the [`Queue`] trait and its SQS implementation.

use crate::domain::delivery_lifecycle::{AttemptMessage, Enqueue};
use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;

/// A send to the queue that failed (after the SDK's own retries).
#[derive(Debug, thiserror::Error)]
#[error("sqs: {0}")]
pub struct QueueError(pub String);

/// Where attempt messages go.
#[async_trait]
pub trait Queue: Send + Sync {
    /// Sends every message with its `DelaySeconds`, in batches of up to 10 messages and
    /// 256 KiB.
    ///
    /// # Errors
    /// [`QueueError`] when a batch or any entry of it failed; entries before it were sent.
    async fn send(&self, messages: &[Enqueue]) -> Result<(), QueueError>;
}

/// [`Queue`] on one SQS queue.
#[derive(Debug, Clone)]
pub struct SqsQueue {
    client: Client,
    url: String,
}

impl SqsQueue {
    /// The queue at `url`.
    pub fn new(client: Client, url: impl Into<String>) -> Self {
        Self { client, url: url.into() }
    }
}

/// SQS's largest message, and largest SendMessageBatch, in bytes (256 KiB).
pub const MAX_MESSAGE_BYTES: usize = 262_144;

/// The body of an attempt message (JSON). What rides along (the payload) is left out when
/// the message would not fit [`MAX_MESSAGE_BYTES`], or holds U+FFFE or U+FFFF (JSON leaves
/// them unescaped and SQS refuses them); deliver then reads it. An observed outcome and an
/// owed count are kept (small: a response excerpt is at most 1 KiB, an owed count at most 10
/// ids), the excerpt's U+FFFE and U+FFFF replaced by U+FFFD.
pub fn encode(message: &AttemptMessage) -> String {
    let body = serde_json::to_string(message).unwrap_or_default();
    if body.len() <= MAX_MESSAGE_BYTES && !body.contains(['\u{FFFE}', '\u{FFFF}']) {
        return body;
    }
    let mut lean = AttemptMessage { payload: None, ..message.clone() };
    if let Some(body) = lean.observed.as_mut().and_then(|a| a.response_body.as_mut()) {
        *body = body.replace(['\u{FFFE}', '\u{FFFF}'], "\u{FFFD}");
    }
    serde_json::to_string(&lean).unwrap_or_default()
}

/// Groups message bodies into SendMessageBatch calls: at most 10 entries and
/// [`MAX_MESSAGE_BYTES`] in all per call, in order.
pub fn batches(bodies: &[String]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, body) in bodies.iter().enumerate() {
        if i > start && (i - start == 10 || bytes + body.len() > MAX_MESSAGE_BYTES) {
            out.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += body.len();
    }
    if start < bodies.len() {
        out.push(start..bodies.len());
    }
    out
}

/// Reads an attempt message's body.
///
/// # Errors
/// The JSON error when the body is not an [`AttemptMessage`].
pub fn decode(body: &str) -> Result<AttemptMessage, serde_json::Error> {
    serde_json::from_str(body)
}

#[async_trait]
impl Queue for SqsQueue {
    async fn send(&self, messages: &[Enqueue]) -> Result<(), QueueError> {
        let bodies: Vec<String> = messages.iter().map(|m| encode(&m.message)).collect();
        for range in batches(&bodies) {
            let chunk = &messages[range.clone()];
            let entries = chunk
                .iter()
                .zip(&bodies[range])
                .enumerate()
                .map(|(i, (m, body))| {
                    SendMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .message_body(body)
                        .delay_seconds(i32::try_from(m.delay_seconds).unwrap_or(900).min(900))
                        .build()
                        .map_err(|e| QueueError(e.to_string()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let out = self
                .client
                .send_message_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| {
                    QueueError(crate::error_text::aws_detail_logged("SQS", &DisplayErrorContext(e).to_string(), false))
                })?;
            if let Some(f) = out.failed.first() {
                // The entry's code and message can name AWS internals (a KMS key's ARN): logged
                // under an error id, not answered.
                let detail = format!("{} {}", f.code, f.message.as_deref().unwrap_or(""));
                let what = format!("{} of {} messages failed; SQS", out.failed.len(), chunk.len());
                return Err(QueueError(crate::error_text::aws_detail_logged(&what, &detail, false)));
            }
        }
        Ok(())
    }
}

/// A queue failure answers 503: worth retrying.
impl From<QueueError> for crate::error::ServiceError {
    fn from(e: QueueError) -> Self {
        Self::Unavailable(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::id;

    #[test]
    fn batches_hold_at_most_ten_messages_and_256_kib() {
        let small: Vec<String> = (0..23).map(|i| format!("m{i}")).collect();
        assert_eq!(batches(&small), vec![0..10, 10..20, 20..23]);
        let big = vec!["x".repeat(100_000); 5];
        assert_eq!(batches(&big), vec![0..2, 2..4, 4..5]);
        assert!(batches(&[]).is_empty());
    }

    #[test]
    fn a_message_too_big_for_sqs_leaves_the_payload_behind() {
        let mut m = AttemptMessage::new(id("dlv_1"), 2);
        m.payload = Some("y".repeat(1000));
        assert_eq!(decode(&encode(&m)).ok(), Some(m.clone()));
        m.payload = Some("y".repeat(MAX_MESSAGE_BYTES));
        let sent = decode(&encode(&m)).ok();
        assert_eq!(sent, Some(AttemptMessage::new(id("dlv_1"), 2)));
        m.payload = Some("{\"s\": \"\u{FFFF}\"}".into());
        assert_eq!(decode(&encode(&m)).ok(), Some(AttemptMessage::new(id("dlv_1"), 2)), "SQS refuses U+FFFF");
    }

    #[test]
    fn an_observed_outcome_survives_a_message_too_big_and_old_messages_still_decode() {
        let mut m = AttemptMessage::new(id("dlv_1"), 3);
        m.payload = Some("y".repeat(MAX_MESSAGE_BYTES));
        let seen = crate::domain::model::Attempt {
            attempt: 3,
            status_code: Some(200),
            response_body: Some("ok \u{FFFF}".into()),
            ..Default::default()
        };
        m.observed = Some(Box::new(seen));
        let sent = decode(&encode(&m)).expect("decodes");
        assert_eq!(sent.payload, None);
        let kept = sent.observed.expect("the outcome is kept");
        assert_eq!((kept.attempt, kept.status_code), (3, Some(200)));
        assert_eq!(kept.response_body.as_deref(), Some("ok \u{FFFD}"));
        // A message from before `observed` and `owed` existed.
        let old = decode(r#"{"delivery_id":"dlv_1","attempt":2}"#).expect("decodes");
        assert_eq!(old, AttemptMessage::new(id("dlv_1"), 2));
        assert!(!encode(&old).contains("observed"), "nothing new on the wire for a plain message");
    }
}
