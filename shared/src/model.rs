//! The domain: endpoints, deliveries and attempts, and how ids are made.
//!
//! Ids carry a prefix as Svix's do (`ep_`, `evt_`, `dlv_`) so a stray id in a log says what
//! it names.

use crate::policy::RetryPolicy;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// A receiver of webhooks, owned by a tenant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Endpoint {
    /// `ep_` + ULID.
    pub id: String,
    /// The tenant that owns it; events are fanned out within a tenant.
    pub tenant_id: String,
    /// Where attempts are POSTed (http or https).
    pub url: String,
    /// Event types it subscribes to; `None` means every type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_types: Option<Vec<String>>,
    /// How failed attempts are retried.
    pub retry_policy: RetryPolicy,
    /// The signing secret, `whsec_` + base64.
    pub secret: String,
    /// Whether new events fan out to it and its deliveries are attempted.
    pub enabled: bool,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

impl Endpoint {
    /// Whether an event of `event_type` goes to this endpoint.
    pub fn subscribes_to(&self, event_type: &str) -> bool {
        match &self.event_types {
            None => true,
            Some(types) => types.iter().any(|t| t == event_type),
        }
    }
}

/// Where a delivery is in its life. The transitions live in [`crate::lifecycle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Waiting for its next attempt; `next_attempt_at` is always set.
    Scheduled,
    /// Claimed by a worker; `lease_until` says when the claim lapses.
    Sending,
    /// A 2xx came back. Final.
    Delivered,
    /// Retries are used up or the failure was final: the dead letter. Replayable.
    Exhausted,
    /// Kept but not attempted while its endpoint is disabled or paused.
    Held,
}

impl DeliveryStatus {
    /// The name used in the API and in DynamoDB.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scheduled => "scheduled",
            Self::Sending => "sending",
            Self::Delivered => "delivered",
            Self::Exhausted => "exhausted",
            Self::Held => "held",
        }
    }

    /// Parses an API status name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "scheduled" => Self::Scheduled,
            "sending" => Self::Sending,
            "delivered" => Self::Delivered,
            "exhausted" => Self::Exhausted,
            "held" => Self::Held,
            _ => return None,
        })
    }
}

/// One try at POSTing a delivery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// 1-based attempt number, the `webhook-attempt` header that was sent.
    pub attempt: u32,
    /// When the request started.
    pub at: DateTime<Utc>,
    /// The receiver's HTTP status, when it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
    /// The error class when it did not answer with a 2xx: `timeout`, `connection`,
    /// `http_status`, `destination_not_allowed`, `lease_expired`, `endpoint_deleted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Wall time of the request in milliseconds.
    pub duration_ms: u64,
    /// The first 1 KiB of the response body (lossy UTF-8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_body: Option<String>,
    /// The wait chosen before the next attempt, in seconds, when one was scheduled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_wait_seconds: Option<u64>,
}

/// One event for one endpoint: the unit that is attempted, retried and replayed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    /// `dlv_` + a hash of (event id, endpoint id); see [`delivery_id`].
    pub id: String,
    /// The event id, sent as `webhook-id` on every attempt.
    pub event_id: String,
    /// The event type, e.g. `order.paid`.
    pub event_type: String,
    /// The tenant of the event and endpoint.
    pub tenant_id: String,
    /// The endpoint it goes to.
    pub endpoint_id: String,
    /// Where it is in its life.
    pub status: DeliveryStatus,
    /// Attempts started so far, over all cycles.
    pub attempt_count: u32,
    /// Attempts that do not count against the retry policy: those before the last replay,
    /// and attempts lost to a worker crash. The policy sees `attempt_count - attempts_base`.
    #[serde(default)]
    pub attempts_base: u32,
    /// When the next attempt is due (status `scheduled` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// When the current claim lapses (status `sending` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_until: Option<DateTime<Utc>>,
    /// The body, frozen at ingest and sent byte for byte on every attempt.
    pub payload: String,
    /// Every attempt, oldest first.
    #[serde(default)]
    pub attempts: Vec<Attempt>,
    /// When the event was accepted.
    pub created_at: DateTime<Utc>,
    /// When the delivery last changed.
    pub updated_at: DateTime<Utc>,
    /// When DynamoDB TTL will remove it, unix seconds (final states only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
}

/// The deterministic delivery id of an (event, endpoint) pair, so that ingesting the same
/// event twice writes the same items and the second write loses its condition.
///
/// Shape: `dlv_` + the first 16 bytes of SHA-256(`event_id` NUL `endpoint_id`) in hex.
pub fn delivery_id(event_id: &str, endpoint_id: &str) -> String {
    let mut h = Sha256::new();
    h.update(event_id.as_bytes());
    h.update([0u8]);
    h.update(endpoint_id.as_bytes());
    let digest = h.finalize();
    let mut out = String::with_capacity(36);
    out.push_str("dlv_");
    for b in &digest[..16] {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_ids_are_stable_and_distinct() {
        let a = delivery_id("evt_1", "ep_1");
        assert_eq!(a, delivery_id("evt_1", "ep_1"));
        assert_ne!(a, delivery_id("evt_1", "ep_2"));
        assert_ne!(delivery_id("a", "bc"), delivery_id("ab", "c"));
        assert_eq!(a.len(), 36);
    }

    #[test]
    fn status_names_round_trip() {
        for s in [
            DeliveryStatus::Scheduled,
            DeliveryStatus::Sending,
            DeliveryStatus::Delivered,
            DeliveryStatus::Exhausted,
            DeliveryStatus::Held,
        ] {
            assert_eq!(DeliveryStatus::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
    }
}
