//! Owner notifications: an endpoint was disabled (410 Gone) or paused (circuit breaker).
//!
//! Every notification is a structured log line (`"notification": "endpoint_disabled"`); with
//! `WEBHOOKS_NOTIFY_TOPIC_ARN` set it is also published to that SNS topic. The endpoint's
//! `disabled` field is the admin-visible record.

use crate::domain::model::{Disabled, Endpoint};
use crate::domain::operational::OperationalEvent;
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

    /// Publishes an operational event ([`crate::domain::operational`]). This default writes
    /// the log line only (`"operational_event"`); [`EventBusNotifier`] also puts it on the
    /// stack's operational EventBridge bus.
    ///
    /// # Errors
    /// Why it could not be published; the notify job runs again.
    async fn operational(&self, event: &OperationalEvent) -> Result<(), String> {
        log_operational(event);
        Ok(())
    }
}

fn log_operational(event: &OperationalEvent) {
    let line = serde_json::to_string(event).unwrap_or_default();
    tracing::info!(operational_event = %line, event_type = %event.event_type, "operational event");
}

/// Another notifier's notifications, and operational events put on an EventBridge bus
/// (`WEBHOOKS_OPERATIONAL_EVENT_BUS`): `source` [`crate::domain::operational::SOURCE`],
/// `detail-type` the event type, `detail` the event.
#[derive(Clone)]
pub struct EventBusNotifier {
    inner: std::sync::Arc<dyn Notifier>,
    client: aws_sdk_eventbridge::Client,
    bus: String,
}

impl EventBusNotifier {
    /// Puts operational events on `bus` and passes owner notifications to `inner`.
    pub fn new(
        inner: std::sync::Arc<dyn Notifier>,
        client: aws_sdk_eventbridge::Client,
        bus: impl Into<String>,
    ) -> Self {
        Self { inner, client, bus: bus.into() }
    }
}

#[async_trait]
impl Notifier for EventBusNotifier {
    async fn endpoint_disabled(&self, endpoint: &Endpoint, disabled: &Disabled) -> Result<(), String> {
        self.inner.endpoint_disabled(endpoint, disabled).await
    }

    async fn operational(&self, event: &OperationalEvent) -> Result<(), String> {
        log_operational(event);
        let detail = serde_json::to_string(event).map_err(|e| e.to_string())?;
        let entry = aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
            .event_bus_name(&self.bus)
            .source(crate::domain::operational::SOURCE)
            .detail_type(&event.event_type)
            .detail(detail)
            .time(aws_sdk_eventbridge::primitives::DateTime::from_millis(event.at.timestamp_millis()))
            .build();
        let failed = |why: String| {
            let e = crate::error_text::aws_detail_logged("EventBridge", &why, false);
            tracing::error!(error = %e, "operational event not published; the notify job runs again");
            e.to_string()
        };
        match self.client.put_events().entries(entry).send().await {
            Ok(out) if out.failed_entry_count() == 0 => Ok(()),
            Ok(out) => Err(failed(format!(
                "entry refused: {}",
                out.entries().first().and_then(|e| e.error_code()).unwrap_or("unknown")
            ))),
            Err(e) => Err(failed(aws_sdk_eventbridge::error::DisplayErrorContext(e).to_string())),
        }
    }
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
    use crate::domain::ids::id;

    #[test]
    fn the_owner_notification_carries_no_credentials_or_secrets() {
        let now = chrono::Utc::now();
        let ep = Endpoint {
            enabled: false,
            previous_secret: Some("whsec_cHJldmlvdXNwcmV2aW91c3ByZXZpb3Vz".into()),
            ..Endpoint::new(
                id("ep_1"),
                id("acme"),
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
