//! The domain: endpoints, deliveries and attempts, and how ids are made.
//!
//! Ids carry a prefix as Svix's do (`ep_`, `evt_`, `dlv_`) so a stray id in a log says what
//! it names.

use crate::domain::ids::{DeliveryId, EndpointId, EventId, JobId, TenantId};
use crate::domain::retry_policy::RetryPolicy;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// A receiver of webhooks, owned by a tenant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Endpoint {
    /// `ep_` + ULID.
    pub id: EndpointId,
    /// The tenant that owns it; events are fanned out within a tenant.
    pub tenant_id: TenantId,
    /// Where attempts are POSTed (http or https).
    pub url: String,
    /// Event types it subscribes to; `None` means every type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_types: Option<Vec<String>>,
    /// How failed attempts are retried.
    pub retry_policy: RetryPolicy,
    /// Custom headers sent with every attempt, shown back in answers (see
    /// [`crate::domain::endpoint_options`] for the names refused and the bounds).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Custom headers sent with every attempt, write-only: answers list their names only.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_headers: BTreeMap<String, String>,
    /// How the receiver authenticates us beyond the signature (`bearer`, `basic`,
    /// `oauth2_client_credentials`); its credentials are write-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<crate::domain::endpoint_options::ReceiverAuth>,
    /// A payload filter ([`crate::domain::payload_filter`]): an event whose payload it
    /// rejects makes no delivery for this endpoint. `None`: every payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<serde_json::Value>,
    /// The signing secret, `whsec_` + base64.
    pub secret: String,
    /// Whether its deliveries are attempted. Events for a disabled endpoint are stored `held`.
    pub enabled: bool,
    /// Why and when it was disabled (absent while enabled): the admin-visible record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<Disabled>,
    /// Failed attempts in a row (maintained by the store with an atomic add; 0 after a 2xx).
    /// With endpoint copies, each item (the endpoint's and each copy) holds the run of the
    /// attempts that read it, and the views show the runs summed (see the store's endpoint
    /// copies).
    #[serde(default)]
    pub consecutive_failures: u32,
    /// After this many failed attempts in a row the endpoint is paused (0 = never; default
    /// 100, from the payment provider's docs); with endpoint copies, when the copies' runs
    /// summed reach it.
    #[serde(default = "default_breaker")]
    pub circuit_breaker_threshold: u32,
    /// Whether a paused endpoint gets a half-open probe after `auto_resume_after_seconds`.
    #[serde(default)]
    pub auto_resume: bool,
    /// The probe's cool-down, seconds (default 300).
    #[serde(default = "default_cooldown")]
    pub auto_resume_after_seconds: u64,
    /// The secret before the last rotation, still used to sign (second signature) until
    /// `previous_secret_expires_at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_secret: Option<String>,
    /// When the rotation window ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
    /// The held delivery released as the half-open probe, while one is out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_delivery_id: Option<DeliveryId>,
    /// Most attempts started per second, across every deliver invocation (`None`: no
    /// limit). Attempts over it wait (not counted as attempts); see [`crate::domain::rate`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit_per_second: Option<u32>,
    /// Whether `rate_limit_per_second` adapts (AIMD) to 429s without `Retry-After` and runs
    /// of timeouts (default true).
    #[serde(default = "default_true")]
    pub rate_limit_adaptive: bool,
    /// The adaptive limit now, requests per second (absent: the configured limit). State
    /// written only by [`crate::domain::rate`], never by an endpoint transition, and without
    /// a version bump.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effective_rate_per_second: Option<f64>,
    /// When `effective_rate_per_second` last changed, unix milliseconds (its writes are
    /// conditional on this value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_changed_at_ms: Option<i64>,
    /// Until when its attempts go to the slow lane (set when an attempt took at least
    /// `WEBHOOKS_SLOW_LANE_THRESHOLD_MS`); state written only by [`crate::domain::lane`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slow_until: Option<DateTime<Utc>>,
    /// Bumped by every write of the endpoint's configuration or state; every such write is
    /// conditional on the version it read (see [`crate::domain::endpoint_lifecycle`]).
    pub version: u64,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

/// Endpoint attributes that are state kept beside the configuration, each written by its own
/// guarded update ([`crate::store::CounterStore::set_slow_until`],
/// [`crate::store::CounterStore::set_effective_rate`]) and never by an endpoint transition, so
/// they do not bump `version` (PATCH's optimistic concurrency) and a transition does not write
/// back a stale copy of them.
pub const UNVERSIONED_ENDPOINT_ATTRIBUTES: [&str; 3] =
    ["effective_rate_per_second", "rate_changed_at_ms", "slow_until"];

/// Default circuit breaker threshold: 100 failed attempts in a row (payment provider's docs).
pub const DEFAULT_BREAKER_THRESHOLD: u32 = 100;
/// Default half-open probe cool-down: 300 seconds.
pub const DEFAULT_COOLDOWN_SECONDS: u64 = 300;

fn default_breaker() -> u32 {
    DEFAULT_BREAKER_THRESHOLD
}

fn default_cooldown() -> u64 {
    DEFAULT_COOLDOWN_SECONDS
}

fn default_true() -> bool {
    true
}

/// `disabled.reason` of an endpoint an operator disabled.
pub const REASON_MANUAL: &str = "manual";
/// `disabled.reason` of an endpoint whose receiver answered a disable code (410 Gone).
pub const REASON_GONE: &str = "gone";
/// `disabled.reason` of an endpoint the circuit breaker paused.
pub const REASON_CIRCUIT_BREAKER: &str = "circuit_breaker";
/// A delivery's end (reason, and its attempt's error) when the endpoint's event-type filter
/// no longer takes its type (changed after the event was accepted): not sent, a dead letter.
pub const REASON_UNSUBSCRIBED: &str = "unsubscribed";
/// A delivery's end (reason, and its attempt's error) when its endpoint was deleted: not
/// sent, a dead letter.
pub const REASON_ENDPOINT_DELETED: &str = "endpoint_deleted";

/// Why an endpoint stopped receiving attempts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Disabled {
    /// `gone` (the receiver answered 410), `circuit_breaker` (too many failures in a row) or
    /// `manual` (an operator).
    pub reason: String,
    /// When.
    pub at: DateTime<Utc>,
    /// The status code that caused it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
    /// The delivery whose attempt caused it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_id: Option<DeliveryId>,
}

/// Where an endpoint is in its life; derived from `enabled`, `disabled` and
/// `probe_delivery_id`. The transitions live in [`crate::domain::endpoint_lifecycle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointState<'a> {
    /// Deliveries are attempted.
    Enabled,
    /// Stopped by an operator (`manual`) or by the receiver (`gone`, a disable code such as
    /// 410): nothing is attempted until someone enables it.
    Disabled,
    /// Stopped by the circuit breaker: nothing is attempted; with `auto_resume` a half-open
    /// probe is released after the cool-down.
    Paused,
    /// Paused, with this one held delivery out as the half-open probe: only it is attempted.
    Probing(&'a str),
}

impl Endpoint {
    /// A new endpoint as `POST /v1/endpoints` makes it before the request's settings apply:
    /// every event type, the `standard` retry policy, enabled, the circuit breaker at
    /// [`DEFAULT_BREAKER_THRESHOLD`] failures in a row without auto-resume (cool-down
    /// [`DEFAULT_COOLDOWN_SECONDS`]), version 1, created and updated `now`.
    pub fn new(
        id: EndpointId,
        tenant_id: TenantId,
        url: impl Into<String>,
        secret: impl Into<String>,
        now: DateTime<Utc>,
    ) -> Self {
        Self {
            id,
            tenant_id,
            url: url.into(),
            event_types: None,
            retry_policy: crate::domain::retry_policy::RetryPolicy::standard(),
            headers: BTreeMap::new(),
            secret_headers: BTreeMap::new(),
            auth: None,
            filter: None,
            secret: secret.into(),
            enabled: true,
            disabled: None,
            consecutive_failures: 0,
            circuit_breaker_threshold: DEFAULT_BREAKER_THRESHOLD,
            auto_resume: false,
            auto_resume_after_seconds: DEFAULT_COOLDOWN_SECONDS,
            previous_secret: None,
            previous_secret_expires_at: None,
            probe_delivery_id: None,
            rate_limit_per_second: None,
            rate_limit_adaptive: true,
            effective_rate_per_second: None,
            rate_changed_at_ms: None,
            slow_until: None,
            version: 1,
            created_at: now,
            updated_at: now,
        }
    }

    /// Its state (see [`EndpointState`]).
    pub fn state(&self) -> EndpointState<'_> {
        if self.enabled {
            return EndpointState::Enabled;
        }
        match (self.disabled.as_ref().map(|d| d.reason.as_str()), self.probe_delivery_id.as_deref()) {
            (Some(REASON_CIRCUIT_BREAKER), Some(probe)) => EndpointState::Probing(probe),
            (Some(REASON_CIRCUIT_BREAKER), None) => EndpointState::Paused,
            _ => EndpointState::Disabled,
        }
    }

    /// Whether an attempt of `delivery_id` may start now: the endpoint is enabled, or this
    /// delivery is its half-open probe.
    pub fn accepts(&self, delivery_id: &str) -> bool {
        match self.state() {
            EndpointState::Enabled => true,
            EndpointState::Probing(probe) => probe == delivery_id,
            EndpointState::Disabled | EndpointState::Paused => false,
        }
    }

    /// The secrets to sign with at `now`: the current one, and the previous one during a
    /// rotation window.
    pub fn signing_secrets(&self, now: DateTime<Utc>) -> Vec<&str> {
        let mut out = vec![self.secret.as_str()];
        if let (Some(prev), Some(until)) = (&self.previous_secret, self.previous_secret_expires_at)
            && now < until
        {
            out.push(prev);
        }
        out
    }

    /// Whether an event of `event_type` goes to this endpoint: no filter, an exact name, `*`,
    /// or a prefix wildcard (`order.*` matches `order.paid` and `order.refund.created`).
    pub fn subscribes_to(&self, event_type: &str) -> bool {
        match &self.event_types {
            None => true,
            Some(types) => types.iter().any(|t| type_matches(t, event_type)),
        }
    }
}

/// Whether an entry of an endpoint's `event_types` filter takes `event_type`: the same name,
/// `*` (every type), or a prefix ending in `.*` (`invoice.*` takes `invoice.paid`).
pub fn type_matches(pattern: &str, event_type: &str) -> bool {
    pattern == event_type
        || pattern == "*"
        || pattern.strip_suffix('*').is_some_and(|prefix| prefix.ends_with('.') && event_type.starts_with(prefix))
}

/// Where a delivery is in its life. The transitions live in [`crate::domain::delivery_lifecycle`].
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

/// One try at POSTing a delivery. (`Default`: attempt 0 at the Unix epoch with nothing
/// recorded, a base for records built field by field.)
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// 1-based attempt number, the `webhook-attempt` header that was sent.
    pub attempt: u32,
    /// When the request started.
    pub at: DateTime<Utc>,
    /// The receiver's HTTP status, when it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
    /// The error class when it did not answer with a 2xx: `timeout`, `connection`,
    /// `http_status`, `destination_not_allowed`, `lease_expired`, `endpoint_deleted`,
    /// `invalid_secret`, `auth_failed` (the OAuth token could not be fetched: nothing was
    /// sent to the receiver), `payload_expired` (the payload item outlived its retention),
    /// `unsubscribed` (the endpoint's event-type filter dropped the type after the event was
    /// accepted: not sent, a dead letter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// With `timeout` or `connection`: why no answer came, `refused`, `reset`, `dns`, `tls`,
    /// `timeout` or `other` ([`crate::sender::cause_of`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// Wall time of the request in milliseconds.
    pub duration_ms: u64,
    /// The first 1 KiB of the response body (lossy UTF-8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_body: Option<String>,
    /// The wait chosen before the next attempt, in seconds, when one was scheduled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_wait_seconds: Option<u64>,
    /// The receiver's `Retry-After`, in seconds, when it sent a valid one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u64>,
    /// Which rule chose `next_wait_seconds`: `schedule` or `retry_after`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_source: Option<crate::domain::retry_policy::WaitSource>,
    /// The endpoint's `auth` type the attempt used (`bearer`, `basic`,
    /// `oauth2_client_credentials`), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<String>,
    /// With `oauth2_client_credentials`: how long fetching the token took before this attempt,
    /// milliseconds (absent when a cached token was used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_fetch_ms: Option<u64>,
}

/// One event for one endpoint: the unit that is attempted, retried and replayed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    /// `dlv_` + a hash of (event id, endpoint id); see [`delivery_id`].
    pub id: DeliveryId,
    /// The event id, sent as `webhook-id` on every attempt.
    pub event_id: EventId,
    /// The event type, e.g. `order.paid`.
    pub event_type: String,
    /// The tenant of the event and endpoint.
    pub tenant_id: TenantId,
    /// The endpoint it goes to.
    pub endpoint_id: EndpointId,
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
    /// The most recent attempts, oldest first: at most
    /// [`crate::domain::delivery_lifecycle::MAX_KEPT_ATTEMPTS`] (older ones are counted in `attempts_dropped`),
    /// so an item never grows toward DynamoDB's 400 KB limit.
    #[serde(default)]
    pub attempts: Vec<Attempt>,
    /// How many older attempts were dropped from `attempts` (their number, not their record).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempts_dropped: u32,
    /// When the event was accepted.
    pub created_at: DateTime<Utc>,
    /// When the delivery last changed.
    pub updated_at: DateTime<Utc>,
    /// Why it was ended without the retry policy deciding (`endpoint_deleted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When DynamoDB TTL will remove it, unix seconds (final states only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
    /// The digest of the payload stored at ingest ([`crate::domain::signing::payload_digest`], 44
    /// characters): deliver signs a payload that rides in a queue message only when it
    /// matches, and otherwise reads the stored one, so a message sent to the queue by anyone
    /// else cannot choose what is signed (issue #34).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_sha256: Option<String>,
    /// Days it is kept once delivered, stamped at ingest from its tenant's override
    /// ([`crate::domain::tenant`]); absent: `WEBHOOKS_DELIVERED_RETENTION_DAYS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_retention_days: Option<u32>,
    /// Days it is kept once exhausted, stamped as `delivered_retention_days`; absent:
    /// `WEBHOOKS_EXHAUSTED_RETENTION_DAYS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exhausted_retention_days: Option<u32>,
}

impl Job {
    /// The endpoint it works on, parsed; `None` for a tenant's purge (whose `endpoint_id` is
    /// empty) or an item whose id breaks the id rule.
    pub fn endpoint(&self) -> Option<EndpointId> {
        EndpointId::try_from(self.endpoint_id.clone()).ok()
    }
}

impl Delivery {
    /// Days it is kept once `delivered` (true) or `exhausted`: its own stamp, else `cfg`'s.
    pub fn retention_days(&self, cfg: &crate::config::Config, delivered: bool) -> u32 {
        if delivered {
            self.delivered_retention_days.unwrap_or(cfg.delivered_retention_days)
        } else {
            self.exhausted_retention_days.unwrap_or(cfg.exhausted_retention_days)
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// An accepted event's body, stored once per event in its own item, however many endpoints
/// it goes to. It never changes, so a delivery's writes (claim, record; about 1 KB) do not
/// rewrite the payload (DynamoDB bills a write by the whole item's size, per started KB).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredEvent {
    /// The tenant that sent it.
    pub tenant_id: TenantId,
    /// The event id (`webhook-id`).
    pub event_id: EventId,
    /// The event type.
    pub event_type: String,
    /// The JSON body, frozen at ingest and sent byte for byte on every attempt.
    pub payload: String,
    /// When it was accepted.
    pub created_at: DateTime<Utc>,
    /// When DynamoDB TTL removes it, unix seconds: `created_at` + the payload retention
    /// (`WEBHOOKS_EVENT_RETENTION_DAYS`).
    pub expires_at: i64,
    /// With an `Idempotency-Key`: SHA-256 (hex) of the request it came with
    /// (`http::events::fingerprint`). A repeat of the event id whose request has another fingerprint is
    /// refused (`StoreError::RequestMismatch`) and writes nothing; without a key on either
    /// side a repeat keeps the first payload, as for any repeated id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_sha256: Option<String>,
}

/// What a background job does, one bounded step per sweeper tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    /// Give a re-enabled endpoint its held deliveries back, `release_per_tick` at a time.
    Release,
    /// Release one held delivery of a paused endpoint as a half-open probe.
    Probe,
    /// Replay an endpoint's exhausted deliveries accepted in a time window.
    Recover,
    /// Hold the scheduled deliveries of a disabled or paused endpoint, a page per step.
    Hold,
    /// Tell the owner that the endpoint was disabled or paused (log line, SNS), and publish
    /// the operational event written with the job ([`crate::domain::operational`]: an
    /// endpoint's transition, a dead letter, a failing endpoint, a job's end).
    Notify,
    /// After an endpoint's forced delete: end what the delete's listing missed (deliveries the
    /// `by_endpoint` index had not shown yet) as exhausted with reason `endpoint_deleted`, a
    /// page per step, until the index has settled.
    EndDeleted,
    /// Remove every item of a tenant (`DELETE /v1/tenants/{id}`), a bounded batch per step
    /// ([`crate::service::purge`]); its `endpoint_id` is empty.
    Purge,
}

/// A background job and its progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// `job_` + ULID.
    pub id: JobId,
    /// What it does.
    pub kind: JobKind,
    /// The endpoint's tenant.
    pub tenant_id: TenantId,
    /// The endpoint it works on.
    pub endpoint_id: String,
    /// `running`, `done` or `cancelled`.
    pub status: String,
    /// Recover: deliveries accepted at or after this time. End deleted: when a step first
    /// found the endpoint gone (the index settles from then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
    /// Recover: deliveries accepted before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
    /// Where the next step continues (a list cursor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Deliveries released or replayed so far.
    pub processed: u32,
    /// When the next step runs (while running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_at: Option<DateTime<Utc>>,
    /// Notify jobs: the operational event the transition that wrote the job causes, published
    /// by the job's step ([`crate::domain::operational`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<crate::domain::operational::OperationalEvent>,
    /// Created at.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

/// The deterministic delivery id of an (event, endpoint) pair, so that ingesting the same
/// event twice writes the same items and the second write loses its condition.
///
/// Shape: `dlv_` + the first 16 bytes of SHA-256(`event_id` NUL `endpoint_id`) in hex.
pub fn delivery_id(event_id: &EventId, endpoint_id: &EndpointId) -> DeliveryId {
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
    DeliveryId::made(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_ids_are_stable_and_distinct() {
        let dlv = |event: &str, endpoint: &str| {
            delivery_id(&crate::domain::ids::id(event), &crate::domain::ids::id(endpoint))
        };
        let a = dlv("evt_1", "ep_1");
        assert_eq!(a, dlv("evt_1", "ep_1"));
        assert_ne!(a, dlv("evt_1", "ep_2"));
        assert_ne!(dlv("a", "bc"), dlv("ab", "c"));
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
