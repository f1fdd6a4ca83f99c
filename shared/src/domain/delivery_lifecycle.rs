//! The one place that owns a delivery's state transitions.
//!
//! ```text
//! scheduled --claim--> sending --2xx--> delivered
//!     ^                   |--retryable failure, attempts left--> scheduled (next_attempt_at set)
//!     |                   |--final failure / attempts used up--> exhausted (dead letter)
//!     |                   '--lease expired (worker lost)--> scheduled, due now
//!     '---- replay ---- exhausted, held
//! ```
//!
//! Each function here returns a [`Transition`]: the state the item must be in (a guard the
//! store turns into a DynamoDB condition) and what changes. A transition whose guard no longer
//! holds is lost by whoever came second, which is how a duplicate SQS message, two sweeper
//! ticks at once or a retried Lambda batch are turned away: "what can now happen twice" has
//! one answer, the guard.
//!
//! The due index (`due_at`, milliseconds since the epoch) says when the sweeper must next look
//! at an in-flight item:
//! - `scheduled`, message already in SQS: `next_attempt_at + redrive_after` (a lost message is
//!   re-driven then);
//! - `scheduled`, wait longer than SQS's delay limit: `next_attempt_at - sqs_max_delay` (the
//!   sweeper then sends it with the exact remaining delay);
//! - `sending`: the time it had when claimed (the claim does not move the entry: a re-key is a
//!   delete and a put in the index, two write units, on every attempt). That time is the
//!   redrive time of the message the claim came from, normally after the lease's end
//!   (`redrive_after` 300 s from the send, the lease about 35 s from the claim), so a worker
//!   lost mid-attempt is found then, not at its lease's end (its message, redelivered after
//!   the visibility timeout, finds the delivery `sending` and loses the claim's guard). When
//!   the sweeper finds a `sending` item whose lease is not over yet (a message that waited
//!   in the queue past its redrive time), it moves the entry to the lease's end and looks
//!   again then;
//! - final and held states are not in the index.

use crate::config::Config;
use crate::domain::ids::{DeliveryId, EndpointId, EventId, TenantId};
use crate::domain::model::{Attempt, Delivery, DeliveryStatus};
use chrono::{DateTime, Duration, Utc};

mod transition;
pub use transition::{
    AttemptMessage, CLAIM_CLOCK_ALLOWANCE_SECONDS, EndpointEntry, Enqueue, Field, Guard, OwedCount, Transition,
};

/// How long after a lapsed lease's end its attempt is re-driven, in seconds: the time a live
/// worker whose record failed on every try still needs to send its outcome to the queue
/// ([`AttemptMessage::observed`]), so that outcome is recorded before the re-drive can claim
/// the next attempt. A record is tried 10 times with backoffs of 0.2 s doubling to at most
/// 2 s (`RECORD_MAX_ATTEMPTS` and `retry_for_record` in the DynamoDB store): at most 13 s of
/// waits; the outcome's SendMessage, 3 tries with the SDK's standard backoff (1 s doubling):
/// at most 3 s more. 20 leaves 4 s for the calls themselves. A worker that dies is re-driven
/// this much later than before; the sweeper finds a lapsed lease no earlier than the claim's
/// redrive time anyway (300 s by default).
pub const OUTCOME_WAIT_SECONDS: i64 = 20;

/// Most attempts kept on a delivery item: the newest 20. Older ones are counted in
/// `attempts_dropped`. With a response body excerpt of at most 1 KiB an attempt record is
/// under 1.5 KB, so the history stays under 30 KB, far from DynamoDB's 400 KB item limit,
/// however many probes or replays a delivery sees.
pub const MAX_KEPT_ATTEMPTS: usize = 20;

/// The claimed delivery's history with `attempt` appended, trimmed to the newest
/// [`MAX_KEPT_ATTEMPTS`]: the new list and the new dropped count.
pub fn history(claimed: &Delivery, attempt: Attempt) -> (Vec<Attempt>, u32) {
    let mut list = claimed.attempts.clone();
    list.push(attempt);
    let extra = list.len().saturating_sub(MAX_KEPT_ATTEMPTS);
    list.drain(..extra);
    (list, claimed.attempts_dropped + u32::try_from(extra).unwrap_or(0))
}

/// The fields of a transition that records `attempt` on the claimed delivery.
fn record(claimed: &Delivery, attempt: Attempt) -> (Field<Vec<Attempt>>, Field<u32>) {
    let (list, dropped) = history(claimed, attempt);
    (Field::Set(list), Field::Set(dropped))
}

fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn seconds_until(now: DateTime<Utc>, at: DateTime<Utc>) -> i64 {
    // Round up so an attempt never starts before its due time.
    let ms = (at - now).num_milliseconds();
    if ms <= 0 { 0 } else { (ms + 999) / 1000 }
}

/// Where a delivery due at `next` waits: the due-index time and, when the wait fits in SQS's
/// delay, the message to send now.
fn wait_for(
    cfg: &Config,
    now: DateTime<Utc>,
    next: DateTime<Utc>,
    id: &DeliveryId,
    attempt: u32,
) -> (i64, Option<Enqueue>) {
    let wait = seconds_until(now, next);
    if wait <= i64::from(cfg.sqs_max_delay_seconds) {
        let due = ms(next) + i64::from(cfg.redrive_after_seconds) * 1000;
        let enqueue = Enqueue {
            message: AttemptMessage::new(id.clone(), attempt),
            delay_seconds: u32::try_from(wait).unwrap_or(0),
        };
        (due, Some(enqueue))
    } else {
        (ms(next) - i64::from(cfg.sqs_max_delay_seconds) * 1000, None)
    }
}

/// A new delivery accepted at `now`: due at once with the message for attempt 1, or, for a
/// disabled endpoint (`held`), kept out of the due index with no message.
#[allow(clippy::too_many_arguments)]
pub fn new_delivery(
    cfg: &Config,
    now: DateTime<Utc>,
    id: DeliveryId,
    event_id: &EventId,
    event_type: &str,
    tenant_id: &TenantId,
    endpoint_id: &EndpointId,
    held: bool,
) -> (Delivery, Option<i64>, Option<Enqueue>) {
    let d = Delivery {
        id: id.clone(),
        event_id: event_id.clone(),
        event_type: event_type.to_string(),
        tenant_id: tenant_id.clone(),
        endpoint_id: endpoint_id.clone(),
        status: if held { DeliveryStatus::Held } else { DeliveryStatus::Scheduled },
        attempt_count: 0,
        attempts_base: 0,
        next_attempt_at: (!held).then_some(now),
        lease_until: None,
        attempts: Vec::new(),
        attempts_dropped: 0,
        created_at: now,
        updated_at: now,
        reason: None,
        expires_at: None,
        payload_sha256: None,
        delivered_retention_days: None,
        exhausted_retention_days: None,
    };
    if held {
        return (d, None, None);
    }
    let due = ms(now) + i64::from(cfg.redrive_after_seconds) * 1000;
    let enqueue = Enqueue { message: AttemptMessage::new(id, 1), delay_seconds: 0 };
    (d, Some(due), Some(enqueue))
}

/// Claim a scheduled delivery for attempt `msg.attempt`, leasing it until `now + lease`.
pub fn claim(cfg: &Config, now: DateTime<Utc>, msg: &AttemptMessage) -> Transition {
    let lease_until = now + Duration::from_std(cfg.lease()).unwrap_or(Duration::seconds(15));
    let guard = Guard {
        status: vec![DeliveryStatus::Scheduled],
        attempt_count: msg.attempt.saturating_sub(1),
        due_at: None,
        next_attempt_by: Some(now + Duration::seconds(CLAIM_CLOCK_ALLOWANCE_SECONDS)),
    };
    // The due entry stays where it is (see the module docs): no re-key on the hot path.
    Transition {
        attempt_count: Some(msg.attempt),
        next_attempt_at: Field::Remove,
        lease_until: Field::Set(lease_until),
        ..kept(guard, DeliveryStatus::Sending, now)
    }
}

/// What the attempt's outcome asks for, decided by the retry policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Delivered.
    Delivered,
    /// Try again after this many seconds.
    RetryIn(u64),
    /// Final failure or attempts used up: the dead letter.
    Exhausted,
    /// Not sent for a reason of ours, not the receiver's (`unsubscribed`, `endpoint_deleted`):
    /// the dead letter, with that `reason`.
    Ended(&'static str),
}

fn finished(claimed: &Delivery) -> Guard {
    Guard {
        status: vec![DeliveryStatus::Sending],
        attempt_count: claimed.attempt_count,
        due_at: None,
        next_attempt_by: None,
    }
}

/// Record the attempt on a claimed delivery and move it on.
pub fn complete(
    cfg: &Config,
    now: DateTime<Utc>,
    claimed: &Delivery,
    attempt: Attempt,
    next: Next,
) -> (Transition, Option<Enqueue>) {
    let days =
        |delivered: bool| Field::Set(now.timestamp() + i64::from(claimed.retention_days(cfg, delivered)) * 86_400);
    // Only a dead letter of the policy has a job (see [`Transition::jobs`]).
    let dead = (next == Next::Exhausted).then(|| super::endpoint_lifecycle::exhausted_job(claimed, &attempt, now));
    let (attempts, attempts_dropped) = record(claimed, attempt);
    let base = Transition {
        attempts,
        attempts_dropped,
        entry: Some(EndpointEntry::of(claimed)),
        jobs: dead.into_iter().collect(),
        ..settled(finished(claimed), DeliveryStatus::Delivered, now)
    };
    match next {
        Next::Delivered => (Transition { expires_at: days(true), ..base }, None),
        Next::Exhausted => (Transition { status: DeliveryStatus::Exhausted, expires_at: days(false), ..base }, None),
        Next::Ended(reason) => (
            Transition {
                status: DeliveryStatus::Exhausted,
                expires_at: days(false),
                reason: Field::Set(reason.to_string()),
                ..base
            },
            None,
        ),
        Next::RetryIn(seconds) => {
            let at = now + Duration::seconds(i64::try_from(seconds).unwrap_or(i64::MAX / 2_000_000));
            let (due, enqueue) = wait_for(cfg, now, at, &claimed.id, claimed.attempt_count + 1);
            let t = Transition {
                status: DeliveryStatus::Scheduled,
                next_attempt_at: Field::Set(at),
                due_at: Field::Set(due),
                ..base
            };
            (t, enqueue)
        }
    }
}

/// What the sweeper read from the due index for one item.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct DueItem {
    /// Delivery id.
    pub id: DeliveryId,
    /// Its status when read.
    pub status: DeliveryStatus,
    /// Its `attempt_count` when read.
    pub attempt_count: u32,
    /// Its due-index time when read, milliseconds.
    pub due_at: i64,
    /// Its next attempt time (scheduled items).
    #[serde(default)]
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// Its lease (sending items).
    #[serde(default)]
    pub lease_until: Option<DateTime<Utc>>,
}

/// What the sweeper does with an item that has come due: the guarded change and the message
/// to send once the change is written. `None` when the item needs nothing (not yet due, or
/// in a state the index should not hold).
///
/// A `sending` item whose lease (as `read` shows it) is not over yet gets a change with no
/// message: its due time moves to the lease's end, and the sweeper looks again then (the
/// claim keeps the due time it found, which can be earlier than its lease when the message
/// waited in the queue past its redrive time).
///
/// An expired lease (`sending`) is recorded as a lost attempt on the item's history, trimmed
/// as every record is ([`history`]), so a delivery whose worker keeps dying stays as bounded
/// as any other: the sweeper reads the item first and passes it as `read` (strongly
/// consistent, after the due read). `None` for an expired lease without `read`, or when
/// `read` is no longer the claim the index showed (it moved on: nothing to do). The guard
/// still holds the write to the claim read: every change of the history also moves the
/// status, or the attempt count and the lease.
pub fn sweep(
    cfg: &Config,
    now: DateTime<Utc>,
    item: &DueItem,
    read: Option<&Delivery>,
) -> Option<(Transition, Option<Enqueue>)> {
    if item.due_at > ms(now) {
        return None;
    }
    let guard = Guard {
        status: vec![item.status],
        attempt_count: item.attempt_count,
        due_at: Some(item.due_at),
        next_attempt_by: None,
    };
    let redrive_due = ms(now) + i64::from(cfg.redrive_after_seconds) * 1000;
    match item.status {
        DeliveryStatus::Scheduled => {
            // Either a long wait that now fits in SQS's delay (send with the exact remaining
            // delay), or an overdue item whose message was lost (send now).
            let next = item.next_attempt_at.unwrap_or(now);
            let delay = u32::try_from(seconds_until(now, next)).unwrap_or(0).min(cfg.sqs_max_delay_seconds);
            let t = Transition {
                due_at: Field::Set(ms(next).max(ms(now)) + i64::from(cfg.redrive_after_seconds) * 1000),
                ..kept(guard, DeliveryStatus::Scheduled, now)
            };
            let msg = AttemptMessage::new(item.id.clone(), item.attempt_count + 1);
            Some((t, Some(Enqueue { message: msg, delay_seconds: delay })))
        }
        DeliveryStatus::Sending => {
            let claimed =
                read.filter(|d| d.id == item.id && d.status == item.status && d.attempt_count == item.attempt_count)?;
            if let Some(lease) = claimed.lease_until.filter(|l| *l > now) {
                // The worker may still be sending: look again when its lease is over.
                let t = Transition { due_at: Field::Set(ms(lease)), ..kept(guard, DeliveryStatus::Sending, now) };
                return Some((t, None));
            }
            // The worker holding the lease is gone. Its attempt may or may not have reached
            // the receiver, so that attempt number is spent; it is recorded as lost and not
            // counted against the retry policy (the failure was ours, not the receiver's).
            let lost = Attempt {
                attempt: item.attempt_count,
                at: item.lease_until.unwrap_or(now),
                error: Some("lease_expired".into()),
                next_wait_seconds: Some(0),
                ..Attempt::default()
            };
            let (attempts, attempts_dropped) = record(claimed, lost);
            // The next attempt waits for an outcome the worker may still send (see
            // [`OUTCOME_WAIT_SECONDS`]); its claim's guard holds it to that time too.
            // The message carries the whole wait, so it is held to SQS's delay limit
            // (`sqs_max_delay_seconds`: 900 on AWS, far over the wait; less only where tests
            // compress time).
            let lapsed = claimed.lease_until.unwrap_or(now);
            let most = now + Duration::seconds(i64::from(cfg.sqs_max_delay_seconds));
            let at = (lapsed + Duration::seconds(OUTCOME_WAIT_SECONDS)).max(now).min(most);
            let t = Transition {
                forgive_attempt: true,
                next_attempt_at: Field::Set(at),
                lease_until: Field::Remove,
                due_at: Field::Set(redrive_due.max(ms(at) + i64::from(cfg.redrive_after_seconds) * 1000)),
                attempts,
                attempts_dropped,
                ..kept(guard, DeliveryStatus::Scheduled, now)
            };
            let msg = AttemptMessage::new(item.id.clone(), item.attempt_count + 1);
            let delay_seconds = u32::try_from(seconds_until(now, at)).unwrap_or(0);
            Some((t, Some(Enqueue { message: msg, delay_seconds })))
        }
        DeliveryStatus::Delivered | DeliveryStatus::Exhausted | DeliveryStatus::Held => None,
    }
}

/// Take back a claim the sweeper recorded as lapsed, to record the outcome its worker observed
/// ([`AttemptMessage::observed`]) in place of the lapse: `read` is `scheduled` with
/// `attempt_count` equal to `attempt` and its newest record that attempt's `lease_expired`
/// (the re-drive not claimed yet). The delivery is `sending` again with a fresh lease, the
/// lapse taken off its history and counted against the retry policy again (the sweeper had
/// forgiven it); the caller then records the outcome as any attempt's. `None` from any other
/// state. Guarded on (`scheduled`, `attempt`): a claim of the next attempt moves the count, and
/// nothing else changes the history without moving the status or the count.
pub fn reclaim_lapsed(cfg: &Config, now: DateTime<Utc>, read: &Delivery, attempt: u32) -> Option<Transition> {
    let lapsed = read.attempts.last().filter(|a| a.attempt == attempt && a.error.as_deref() == Some("lease_expired"));
    if read.status != DeliveryStatus::Scheduled || read.attempt_count != attempt || lapsed.is_none() {
        return None;
    }
    let mut attempts = read.attempts.clone();
    attempts.pop();
    let guard =
        Guard { status: vec![DeliveryStatus::Scheduled], attempt_count: attempt, due_at: None, next_attempt_by: None };
    Some(Transition {
        attempts_base: Field::Set(read.attempts_base.saturating_sub(1)),
        next_attempt_at: Field::Remove,
        lease_until: Field::Set(now + Duration::from_std(cfg.lease()).unwrap_or(Duration::seconds(15))),
        attempts: Field::Set(attempts),
        ..kept(guard, DeliveryStatus::Sending, now)
    })
}

/// Release an exhausted or held delivery (`status`, `attempt_count` as read) for a fresh cycle
/// of its retry policy with the first attempt at `at`: replay, re-enable, recover and the
/// half-open probe all come through here. `None` from any other state.
pub fn release(
    cfg: &Config,
    now: DateTime<Utc>,
    id: &DeliveryId,
    status: DeliveryStatus,
    attempt_count: u32,
    entry: EndpointEntry,
    at: DateTime<Utc>,
) -> Option<(Transition, Option<Enqueue>)> {
    if !matches!(status, DeliveryStatus::Exhausted | DeliveryStatus::Held) {
        return None;
    }
    let at = at.max(now);
    let (due, enqueue) = wait_for(cfg, now, at, id, attempt_count + 1);
    let t = Transition {
        attempts_base: Field::Set(attempt_count),
        next_attempt_at: Field::Set(at),
        lease_until: Field::Remove,
        due_at: Field::Set(due),
        expires_at: Field::Remove,
        reason: Field::Remove,
        entry: Some(entry),
        ..kept(
            Guard { status: vec![status], attempt_count, due_at: None, next_attempt_by: None },
            DeliveryStatus::Scheduled,
            now,
        )
    };
    Some((t, enqueue))
}

/// Replay an exhausted or held delivery now (see [`release`]).
pub fn replay(cfg: &Config, now: DateTime<Utc>, d: &Delivery) -> Option<(Transition, Enqueue)> {
    let (t, e) = release(cfg, now, &d.id, d.status, d.attempt_count, EndpointEntry::of(d), now)?;
    e.map(|e| (t, e))
}

/// A move to `status` that changes nothing else (but `updated_at`): the base every other
/// transition states its changes on.
fn kept(guard: Guard, status: DeliveryStatus, now: DateTime<Utc>) -> Transition {
    Transition {
        guard,
        status,
        attempt_count: None,
        attempts_base: Field::Keep,
        forgive_attempt: false,
        next_attempt_at: Field::Keep,
        lease_until: Field::Keep,
        due_at: Field::Keep,
        attempts: Field::Keep,
        attempts_dropped: Field::Keep,
        expires_at: Field::Keep,
        reason: Field::Keep,
        entry: None,
        jobs: Vec::new(),
        now,
    }
}

/// A move to `status` that takes the delivery out of the due index (no next attempt, no
/// lease); every other field is kept.
fn settled(guard: Guard, status: DeliveryStatus, now: DateTime<Utc>) -> Transition {
    Transition {
        next_attempt_at: Field::Remove,
        lease_until: Field::Remove,
        due_at: Field::Remove,
        ..kept(guard, status, now)
    }
}

/// End an unfinished delivery (`scheduled`, `sending` or `held`, as read) without another
/// attempt: `exhausted` with `reason`, e.g. `endpoint_deleted`. Nothing vanishes: it stays a
/// dead letter until retention removes it.
/// `retention_days` is the delivery's own exhausted retention when it has one
/// ([`Delivery::exhausted_retention_days`]; `None`: `cfg`'s).
pub fn abandon(
    cfg: &Config,
    now: DateTime<Utc>,
    status: DeliveryStatus,
    attempt_count: u32,
    entry: EndpointEntry,
    reason: &str,
    retention_days: Option<u32>,
) -> Transition {
    let days = retention_days.unwrap_or(cfg.exhausted_retention_days);
    Transition {
        entry: Some(entry),
        expires_at: Field::Set(now.timestamp() + i64::from(days) * 86_400),
        reason: Field::Set(reason.to_string()),
        ..settled(
            Guard { status: vec![status], attempt_count, due_at: None, next_attempt_by: None },
            DeliveryStatus::Exhausted,
            now,
        )
    }
}

/// Hold a scheduled delivery of a disabled or paused endpoint: kept, not attempted, out of
/// the due index.
pub fn hold_scheduled(now: DateTime<Utc>, attempt_count: u32, entry: EndpointEntry) -> Transition {
    let guard = Guard { status: vec![DeliveryStatus::Scheduled], attempt_count, due_at: None, next_attempt_by: None };
    Transition { entry: Some(entry), ..settled(guard, DeliveryStatus::Held, now) }
}

/// Hold a claimed delivery. With `attempt` (the 410 that disabled the endpoint, or a failed
/// probe) the attempt is recorded; without (the endpoint was found disabled at claim time) the
/// claim is undone and no attempt is counted.
pub fn hold_claimed(now: DateTime<Utc>, claimed: &Delivery, attempt: Option<Attempt>) -> Transition {
    let guard = Guard {
        status: vec![DeliveryStatus::Sending],
        attempt_count: claimed.attempt_count,
        due_at: None,
        next_attempt_by: None,
    };
    let undo = attempt.is_none();
    let (attempts, attempts_dropped) = match attempt {
        Some(a) => record(claimed, a),
        None => (Field::Keep, Field::Keep),
    };
    Transition {
        attempt_count: undo.then(|| claimed.attempt_count.saturating_sub(1)),
        attempts,
        attempts_dropped,
        entry: Some(EndpointEntry::of(claimed)),
        ..settled(guard, DeliveryStatus::Held, now)
    }
}

/// End a claimed delivery without an attempt (deliver found its endpoint deleted before the
/// POST): `exhausted` with `reason`, the claim's attempt number given back and nothing added
/// to the history, since nothing was sent.
pub fn end_claimed(cfg: &Config, now: DateTime<Utc>, claimed: &Delivery, reason: &str) -> Transition {
    Transition {
        attempt_count: Some(claimed.attempt_count.saturating_sub(1)),
        entry: Some(EndpointEntry::of(claimed)),
        expires_at: Field::Set(now.timestamp() + i64::from(claimed.retention_days(cfg, false)) * 86_400),
        reason: Field::Set(reason.to_string()),
        ..settled(finished(claimed), DeliveryStatus::Exhausted, now)
    }
}

/// Give back a claim without an attempt (deliver found its lease too short to start the POST
/// within it): `scheduled` again, due now, the attempt number not spent; with the message
/// for that same attempt.
pub fn unclaim(cfg: &Config, now: DateTime<Utc>, claimed: &Delivery) -> (Transition, Option<Enqueue>) {
    let count = claimed.attempt_count.saturating_sub(1);
    let (due, enqueue) = wait_for(cfg, now, now, &claimed.id, claimed.attempt_count);
    let t = Transition {
        attempt_count: Some(count),
        next_attempt_at: Field::Set(now),
        due_at: Field::Set(due),
        ..settled(finished(claimed), DeliveryStatus::Scheduled, now)
    };
    (t, enqueue)
}

#[cfg(test)]
mod tests;
