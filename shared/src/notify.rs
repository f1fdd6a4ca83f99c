//! Owner notifications: an endpoint was disabled (410 Gone) or paused (circuit breaker).
//!
//! Every notification is a structured log line (`"notification": "endpoint_disabled"`); with
//! `WEBHOOKS_NOTIFY_TOPIC_ARN` set it is also published to that SNS topic. The endpoint's
//! `disabled` field is the admin-visible record.

use crate::model::{Disabled, Endpoint};
use async_trait::async_trait;

/// Tells an endpoint's owner what happened to it.
#[async_trait]
pub trait Notifier: Send + Sync {
    /// The endpoint stopped receiving attempts.
    async fn endpoint_disabled(&self, endpoint: &Endpoint, disabled: &Disabled);
}

/// The message body of a notification (JSON).
pub fn message(endpoint: &Endpoint, disabled: &Disabled) -> serde_json::Value {
    serde_json::json!({
        "notification": "endpoint_disabled",
        "endpoint_id": endpoint.id,
        "tenant_id": endpoint.tenant_id,
        "url": endpoint.url,
        "reason": disabled.reason,
        "status_code": disabled.status_code,
        "delivery_id": disabled.delivery_id,
        "at": disabled.at,
        "action": format!("fix the receiver, then POST /v1/endpoints/{}/enable; held deliveries are kept until then", endpoint.id),
    })
}

/// Log line only.
#[derive(Debug, Default, Clone, Copy)]
pub struct LogNotifier;

#[async_trait]
impl Notifier for LogNotifier {
    async fn endpoint_disabled(&self, endpoint: &Endpoint, disabled: &Disabled) {
        tracing::warn!(notification = %message(endpoint, disabled), "endpoint disabled");
    }
}

/// Log line and an SNS publish.
#[derive(Debug, Clone)]
pub struct SnsNotifier {
    client: aws_sdk_sns::Client,
    topic_arn: String,
}

impl SnsNotifier {
    /// Publishes to `topic_arn`.
    pub fn new(client: aws_sdk_sns::Client, topic_arn: impl Into<String>) -> Self {
        Self { client, topic_arn: topic_arn.into() }
    }
}

#[async_trait]
impl Notifier for SnsNotifier {
    async fn endpoint_disabled(&self, endpoint: &Endpoint, disabled: &Disabled) {
        LogNotifier.endpoint_disabled(endpoint, disabled).await;
        let subject = format!("Webhook endpoint {} disabled: {}", endpoint.id, disabled.reason);
        let result = self
            .client
            .publish()
            .topic_arn(&self.topic_arn)
            .subject(subject.chars().take(100).collect::<String>())
            .message(message(endpoint, disabled).to_string())
            .send()
            .await;
        if let Err(e) = result {
            tracing::error!(error = %aws_sdk_sns::error::DisplayErrorContext(e), "notification publish failed");
        }
    }
}
