//! The shapes of a delivery's transitions: what [`super`] builds and the store applies (a
//! [`Transition`] with its [`Guard`]), the attempt message deliver receives
//! ([`AttemptMessage`]) and a send with its `DelaySeconds` ([`Enqueue`]). Building them is
//! [`super`]'s job alone; this file holds only the types.

use crate::domain::ids::{DeliveryId, EndpointId};
use crate::domain::model::{Attempt, Delivery, DeliveryStatus, Job};
use chrono::{DateTime, Utc};

/// A change to one attribute.
#[derive(Debug, Clone, PartialEq)]
pub enum Field<T> {
    /// Leave as it is.
    Keep,
    /// Set to a value.
    Set(T),
    /// Remove the attribute.
    Remove,
}

/// The state an item must be in for a transition to apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Guard {
    /// Any of these statuses.
    pub status: Vec<DeliveryStatus>,
    /// `attempt_count` equal to this.
    pub attempt_count: u32,
    /// `due_at` equal to this (milliseconds), when set: the sweeper acts only on what it read.
    pub due_at: Option<i64>,
    /// `next_attempt_at` at or before this, when set: a claim never starts an attempt before
    /// its time, whatever message asks for it (see [`CLAIM_CLOCK_ALLOWANCE_SECONDS`]).
    pub next_attempt_by: Option<DateTime<Utc>>,
}

/// How long before its `next_attempt_at` a claim may still start an attempt, in seconds: an
/// allowance for the clocks of the function that scheduled the attempt and the one that
/// claims it (Lambda hosts keep NTP time, milliseconds apart). DynamoDB compares the stored
/// time as text against this bound cut to whole seconds, which can admit up to one second
/// more: an attempt starts at most 2 seconds early. A message that comes earlier (one sent to
/// the queue by hand, issue #34) loses its claim and is dropped; the delivery's own message
/// or the sweeper's re-drive makes the attempt on time.
pub const CLAIM_CLOCK_ALLOWANCE_SECONDS: i64 = 1;

/// What a delivery's entry in its endpoint's index is built from (see
/// [`crate::store::keys::endpoint_partition`] and [`crate::store::keys::endpoint_sk`]): its
/// endpoint and when it was accepted. Neither ever changes.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointEntry {
    /// The delivery's endpoint.
    pub endpoint_id: EndpointId,
    /// When the delivery was accepted.
    pub created_at: DateTime<Utc>,
}

impl EndpointEntry {
    /// The entry of a delivery of `endpoint_id` accepted at `created_at`.
    pub fn new(endpoint_id: &EndpointId, created_at: DateTime<Utc>) -> Self {
        Self { endpoint_id: endpoint_id.clone(), created_at }
    }

    /// The entry of delivery `d`.
    pub fn of(d: &Delivery) -> Self {
        Self { endpoint_id: d.endpoint_id.clone(), created_at: d.created_at }
    }
}

/// A guarded change of a delivery's state.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// What must hold before.
    pub guard: Guard,
    /// The new status.
    pub status: DeliveryStatus,
    /// The new `attempt_count`.
    pub attempt_count: Option<u32>,
    /// The new `attempts_base`.
    pub attempts_base: Field<u32>,
    /// Add one to `attempts_base` (a lost attempt does not count against the policy).
    pub forgive_attempt: bool,
    /// The new `next_attempt_at`.
    pub next_attempt_at: Field<DateTime<Utc>>,
    /// The new `lease_until`.
    pub lease_until: Field<DateTime<Utc>>,
    /// The new due-index time (milliseconds since the epoch); `Remove` takes it out of the
    /// index.
    pub due_at: Field<i64>,
    /// The whole attempt history, replacing the stored one: the claimed item's history plus
    /// the new attempt (deliver's record, or the sweeper's record of a lost one), trimmed to
    /// [`super::MAX_KEPT_ATTEMPTS`] (see [`super::history`]).
    pub attempts: Field<Vec<Attempt>>,
    /// How many attempts were trimmed from the history so far.
    pub attempts_dropped: Field<u32>,
    /// The new TTL (unix seconds).
    pub expires_at: Field<i64>,
    /// Why a delivery was ended without the policy deciding (`endpoint_deleted`).
    pub reason: Field<String>,
    /// The delivery's entry in its endpoint's index, given when the new status may be in
    /// another bucket than the old one (deliver's record of an attempt, a retry's too; a hold,
    /// release or end): the store writes the entry with it to `by_endpoint` (no index write
    /// when its key is unchanged).
    pub entry: Option<EndpointEntry>,
    /// Written with it in one TransactWriteItems: a dead letter's `delivery.exhausted` job.
    pub jobs: Vec<Job>,
    /// When the change happens (`updated_at`).
    pub now: DateTime<Utc>,
}

/// The SQS message that asks deliver to make attempt `attempt` of a delivery, or to finish
/// what a worker could not write (`observed`, `owed`).
///
/// Shape (JSON): `{"delivery_id", "attempt", "payload"?, "observed"?, "owed"?}`; a message
/// without the optional fields (every message sent before they existed) decodes as before. `payload` is the event's body when
/// the message still fits SQS's 256 KiB limit with it (ingest and deliver's own retries add
/// it; the sweeper does not, and deliver then reads the event item), saving deliver a read.
/// The endpoint never rides along: deliver reads it, strongly consistent, before every
/// attempt, so no attempt starts on a configuration older than the last change that answered.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AttemptMessage {
    /// The delivery to attempt (a message whose id breaks the id rule does not decode).
    pub delivery_id: DeliveryId,
    /// The attempt number to make (the item's `attempt_count` + 1 when it is claimed).
    pub attempt: u32,
    /// The event's payload, byte for byte, when it rides along.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
    /// Attempt `attempt` was made and this is its record as the worker that made it saw it
    /// (the receiver's answer, or the timeout or connection error), sent because writing it
    /// failed on every try: deliver records it on receipt, with no POST (see
    /// [`super::reclaim_lapsed`] for a record that comes after the sweeper's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<Box<Attempt>>,
    /// Deliveries recorded delivered whose count in their endpoint's stats failed on every
    /// try: deliver counts them on receipt. `delivery_id` is then the smallest of them and
    /// `attempt` 0 (no attempt is asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owed: Option<OwedCount>,
}

/// Deliveries of one endpoint to count in its per-day delivered counter (the arguments of
/// [`crate::store::CounterStore::count_delivered`], sent again as they were, so a write that
/// landed on its last try and is sent again is refused by the counter's `last_counted` check
/// unless another count came between).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OwedCount {
    /// The endpoint whose counter is owed.
    pub endpoint_id: EndpointId,
    /// The deliveries to count (at most an SQS batch's, 10).
    pub delivery_ids: Vec<DeliveryId>,
    /// When the latest of them was recorded delivered: the counter's day.
    pub at: DateTime<Utc>,
    /// The counter item's TTL, unix seconds.
    pub expires_at: i64,
}

impl AttemptMessage {
    /// A message for attempt `attempt` of delivery `delivery_id`, with nothing riding along.
    pub fn new(delivery_id: DeliveryId, attempt: u32) -> Self {
        Self { delivery_id, attempt, payload: None, observed: None, owed: None }
    }
}

/// A message to send, with its `DelaySeconds`.
#[derive(Debug, Clone, PartialEq)]
pub struct Enqueue {
    /// The message.
    pub message: AttemptMessage,
    /// `DelaySeconds`, 0 to the configured maximum.
    pub delay_seconds: u32,
}
