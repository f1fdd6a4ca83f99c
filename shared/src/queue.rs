//! The attempt queue: the [`Queue`] trait and its SQS implementation.

use crate::lifecycle::{AttemptMessage, Enqueue};
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
    /// Sends every message with its `DelaySeconds`, in batches of up to 10.
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

/// The body of an attempt message (JSON).
pub fn encode(message: &AttemptMessage) -> String {
    serde_json::to_string(message).unwrap_or_default()
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
        for chunk in messages.chunks(10) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    SendMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .message_body(encode(&m.message))
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
                .map_err(|e| QueueError(DisplayErrorContext(e).to_string()))?;
            if let Some(f) = out.failed.first() {
                return Err(QueueError(format!(
                    "{} of {} messages failed, first: {} {}",
                    out.failed.len(),
                    chunk.len(),
                    f.code,
                    f.message.as_deref().unwrap_or("")
                )));
            }
        }
        Ok(())
    }
}
