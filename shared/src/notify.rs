//! Owner notifications: an endpoint was disabled (410 Gone) or paused (circuit breaker).
//!
//! Every notification is a structured log line (`"notification": "endpoint_disabled"`); with
//! `WEBHOOKS_NOTIFY_TOPIC_ARN` set it is also published to that SNS topic. The endpoint's
//! `disabled` field is the admin-visible record.

use crate::domain::model::{Disabled, Endpoint};
use async_trait::async_trait;

/// Tells an endpoint's owner what happened to it.
#[async_trait]
pub trait Notifier: Send + Sync {
    /// The endpoint stopped receiving attempts.
    ///
    /// # Errors
    /// A description of why the notification could not be sent; the notify job that calls
    /// this runs again, so an owner is told at least once.
    async fn endpoint_disabled(&self, endpoint: &Endpoint, disabled: &Disabled) -> Result<(), String>;
}

/// The message body of a notification (JSON): the endpoint's id, tenant, URL with any
/// userinfo redacted ([`crate::sender::destination::redact_url`]; never a password or a signing secret),
/// the reason and what to do.
pub fn message(endpoint: &Endpoint, disabled: &Disabled) -> serde_json::Value {
    serde_json::json!({
        "notification": "endpoint_disabled",
        "endpoint_id": endpoint.id,
        "tenant_id": endpoint.tenant_id,
        "url": crate::sender::destination::redact_url(&endpoint.url),
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
    async fn endpoint_disabled(&self, endpoint: &Endpoint, disabled: &Disabled) -> Result<(), String> {
        tracing::warn!(notification = %message(endpoint, disabled), "endpoint disabled");
        Ok(())
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
    async fn endpoint_disabled(&self, endpoint: &Endpoint, disabled: &Disabled) -> Result<(), String> {
        LogNotifier.endpoint_disabled(endpoint, disabled).await?;
        let subject = format!("Webhook endpoint {} disabled: {}", endpoint.id, disabled.reason);
        let result = self
            .client
            .publish()
            .topic_arn(&self.topic_arn)
            .subject(subject.chars().take(100).collect::<String>())
            .message(message(endpoint, disabled).to_string())
            .send()
            .await;
        result.map(|_| ()).map_err(|e| {
            let detail = aws_sdk_sns::error::DisplayErrorContext(e).to_string();
            let e = crate::error_text::aws_detail_logged("SNS", &detail, false);
            tracing::error!(error = %e, "notification publish failed; the notify job runs again");
            e
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_notification_carries_no_credentials_or_secrets() {
        let now = chrono::Utc::now();
        let ep = Endpoint {
            enabled: false,
            previous_secret: Some("whsec_cHJldmlvdXNwcmV2aW91c3ByZXZpb3Vz".into()),
            ..Endpoint::new(
                "ep_1",
                "acme",
                "https://hookuser:hookpass@example.com/hook",
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                now,
            )
        };
        let d = Disabled { reason: "gone".into(), at: now, status_code: Some(410), delivery_id: None };
        let text = message(&ep, &d).to_string();
        assert!(text.contains("example.com/hook"), "{text}");
        for secret in ["hookpass", "hookuser", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "cHJldmlvdXNwcmV2aW91c3ByZXZpb3Vz"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
    }
}
