//! Per-endpoint rate limits: a static ceiling (`rate_limit_per_second`, as Svix and Convoy
//! have) enforced across every concurrent deliver invocation, and an adaptive limit under it
//! (AIMD) that backs off when the receiver says it is overloaded.
//!
//! **Enforcement.** Before the POST (after the claim and the strongly consistent endpoint
//! read deliver makes anyway), an attempt of a limited endpoint takes a slot in the current
//! one-second window: one atomic `ADD` on a counter item (`RATE#{endpoint}`, `S#{unix
//! second}`, TTL two minutes; see [`crate::store::CounterStore::take_rate_slot`]). A count within the
//! limit goes ahead. Above [`SLOTS_PER_COUNTER`] attempts a second the window is split over
//! several counters, each its own partition key with its share of the slots ([`counter`]), so
//! no counter item takes more writes than a partition allows. Over it, the attempt waits: the claim is given back without an attempt
//! (the attempt number not spent, so waiting never counts toward the retry schedule,
//! `max_attempts` or the circuit breaker) and the message sent again with `DelaySeconds` =
//! the window its place in line falls into (`ceil((count - limit) / limit)` seconds), so a
//! backlog of N messages spreads over N / limit seconds and each waits about once, instead of
//! all of them retrying every second. Windows are calendar seconds of our clock: at most
//! `limit` attempts start in any one of them, so a receiver counting over a sliding second
//! can see up to twice the limit across a boundary (the adaptive limit below answers a
//! receiver that complains).
//!
//! **Adaptive (AIMD).** With `rate_limit_adaptive` (default true), the limit in force is
//! `effective_rate_per_second` (shown on `GET /v1/endpoints/{id}`), at most the configured
//! one: a 429 without `Retry-After`, or a timeout with [`TIMEOUT_RUN`] or more failures in a
//! row, multiplies it by [`DECREASE_FACTOR`] (not below [`MIN_RATE`]); a 2xx adds
//! [`INCREASE_PER_STEP`] back, up to the configured limit; each at most once per
//! [`STEP_MS`] (the first of many concurrent 429s wins; the others lose the condition). The
//! state is two attributes of the endpoint item written by a conditional UpdateItem on
//! `rate_changed_at_ms`, not by an endpoint transition: no version bump (PATCH keeps its
//! optimistic concurrency) and a transition never writes back a stale copy. Other endpoint
//! changes (a PATCH, a secret rotation, the breaker's pause and resume) leave it as it is:
//! it is clamped to the configured limit when read, and recovers by itself, so a receiver that
//! was shedding load is not hit at the full rate again because someone rotated a secret. A 429 *with* `Retry-After` is the receiver naming its own wait, which the retry
//! policy honours; it does not move the rate.
//!
//! **Cost.** An endpoint without a limit pays nothing. A limited one pays one UpdateItem per
//! attempt (the slot), one claim, one give-back write and one SendMessage per wait, and at
//! most one UpdateItem per [`STEP_MS`] for the adaptive rate. Synchronous attempts
//! (`mode: sync`) are not limited: they cannot wait.

use crate::domain::model::Endpoint;
use crate::domain::retry_policy::Outcome;

/// The factor a 429 without `Retry-After` (or a run of timeouts) multiplies the adaptive rate
/// by: 0.5, TCP's multiplicative decrease.
pub const DECREASE_FACTOR: f64 = 0.5;
/// Requests per second a 2xx adds back to the adaptive rate, at most once per [`STEP_MS`]
/// (TCP's additive increase of one unit per round).
pub const INCREASE_PER_STEP: f64 = 1.0;
/// The shortest time between two changes of the adaptive rate, milliseconds (2000: one
/// window for the new rate to take effect and one to see its answers).
pub const STEP_MS: i64 = 2_000;
/// The adaptive rate's floor, requests per second.
pub const MIN_RATE: f64 = 1.0;
/// Failures in a row, the last a timeout, that count as a run of timeouts (3).
pub const TIMEOUT_RUN: u32 = 3;
/// Largest `rate_limit_per_second` accepted (10000).
pub const MAX_RATE_LIMIT: u64 = 10_000;

/// The adaptive rate as stored, when it applies (the endpoint is adaptive).
fn adapted(ep: &Endpoint) -> Option<f64> {
    if !ep.rate_limit_adaptive {
        return None;
    }
    match (ep.effective_rate_per_second, ep.rate_changed_at_ms) {
        (Some(r), Some(_)) if r.is_finite() => Some(r),
        _ => None,
    }
}

/// The rate in force, requests per second: `None` without a limit; else the adaptive rate
/// (when it applies) within [`MIN_RATE`] and the configured limit, or the configured limit.
pub fn effective(ep: &Endpoint) -> Option<f64> {
    let limit = f64::from(ep.rate_limit_per_second?);
    Some(adapted(ep).map_or(limit, |r| r.clamp(MIN_RATE.min(limit), limit)))
}

/// Attempts that may start in one second: the rate in force, rounded down, at least 1.
pub fn slots(ep: &Endpoint) -> Option<u64> {
    effective(ep).map(|r| (r.floor() as u64).max(1))
}

/// Attempts a second one counter item takes at most: 500, half of the 1,000 write units a
/// second DynamoDB takes on one partition key value (developer guide, "partition key design"),
/// the 50% the capacity model (`make bench`, section 2b) keeps every key under.
pub const SLOTS_PER_COUNTER: u64 = 500;

/// The counter an attempt of `delivery_id` on endpoint `endpoint_id` takes its slot on, and
/// that counter's share of a window of `slots`: with at most [`SLOTS_PER_COUNTER`] slots, one
/// counter (the endpoint id); above, `n = ceil(slots / SLOTS_PER_COUNTER)` counters
/// `{endpoint_id}#{k}`, `k` from the delivery id's hash, splitting `slots` between them (the
/// first `slots % n` one more each), so their shares add up to `slots` exactly and none takes
/// more than [`SLOTS_PER_COUNTER`] admitted attempts a second: at the highest limit accepted
/// ([`MAX_RATE_LIMIT`], 10,000) 20 counters. Each counter is its own partition key
/// (`RATE#{counter}`), so the limiter's writes spread like the attempts.
pub fn counter(endpoint_id: &str, delivery_id: &str, slots: u64) -> (String, u64) {
    let n = slots.div_ceil(SLOTS_PER_COUNTER).max(1);
    if n == 1 {
        return (endpoint_id.to_string(), slots);
    }
    let k = u64::from(crate::domain::ids::shard_of(delivery_id, u32::try_from(n).unwrap_or(u32::MAX)));
    let share = slots / n + u64::from(k < slots % n);
    (format!("{endpoint_id}#{k}"), share)
}

/// Seconds an attempt that got place `count` in a window of `slots` waits: the window its
/// place falls into (`ceil((count - slots) / slots)`), 0 within the limit.
pub fn wait_seconds(count: u64, slots: u64) -> u64 {
    if count <= slots || slots == 0 { 0 } else { (count - slots).div_ceil(slots) }
}

/// What an attempt's outcome does to the adaptive rate: the new rate, or `None` (no change
/// due). `failures_in_a_row` counts this attempt when it failed.
pub fn next_rate(
    ep: &Endpoint,
    outcome: Outcome,
    retry_after: Option<u64>,
    failures_in_a_row: u32,
    now_ms: i64,
) -> Option<f64> {
    let limit = f64::from(ep.rate_limit_per_second?);
    if !ep.rate_limit_adaptive {
        return None;
    }
    let current = effective(ep)?;
    let since = ep.rate_changed_at_ms.map_or(i64::MAX, |at| now_ms.saturating_sub(at));
    if since < STEP_MS {
        return None;
    }
    let overloaded = match outcome {
        Outcome::Status(429) => retry_after.is_none(),
        Outcome::Timeout => failures_in_a_row >= TIMEOUT_RUN,
        _ => false,
    };
    let success = matches!(outcome, Outcome::Status(c) if (200..300).contains(&c));
    if overloaded {
        let next = (current * DECREASE_FACTOR).max(MIN_RATE.min(limit));
        (next < current).then_some(next)
    } else if success && current < limit {
        Some((current + INCREASE_PER_STEP).min(limit))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::id;

    #[test]
    fn the_limiters_counters_each_take_at_most_half_a_partitions_writes_and_add_up_to_the_limit() {
        for slots in [1, 499, 500, 501, 1001, 2000, 9_999, MAX_RATE_LIMIT] {
            let n = slots.div_ceil(SLOTS_PER_COUNTER);
            let mut shares = std::collections::BTreeMap::new();
            for i in 0..20_000 {
                let (counter, share) = counter("ep_1", &format!("dlv_{i}"), slots);
                assert!(share <= SLOTS_PER_COUNTER, "{slots}: {counter} takes {share}");
                shares.insert(counter, share);
            }
            assert_eq!(shares.len() as u64, n, "{slots} slots: {shares:?}");
            assert_eq!(shares.values().sum::<u64>(), slots, "{slots}: the shares add up to the limit");
        }
        assert_eq!(counter("ep_1", "dlv_1", 500), ("ep_1".to_string(), 500), "one counter up to 500");
    }
    use chrono::{TimeZone, Utc};

    fn ep(limit: Option<u32>, rate: Option<f64>, at: Option<i64>) -> Endpoint {
        let created = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).single().unwrap_or_default();
        Endpoint {
            rate_limit_per_second: limit,
            effective_rate_per_second: rate,
            rate_changed_at_ms: at,
            ..Endpoint::new(id("ep_1"), id("t"), "http://x", "whsec_x", created)
        }
    }

    #[test]
    fn waits_spread_a_backlog_over_the_windows_after_this_one() {
        assert_eq!(wait_seconds(1, 5), 0);
        assert_eq!(wait_seconds(5, 5), 0);
        assert_eq!(wait_seconds(6, 5), 1);
        assert_eq!(wait_seconds(10, 5), 1);
        assert_eq!(wait_seconds(11, 5), 2);
        assert_eq!(wait_seconds(600, 5), 119);
    }

    #[test]
    fn no_limit_means_no_slot_and_no_adaptation() {
        let e = ep(None, None, None);
        assert_eq!(slots(&e), None);
        assert_eq!(next_rate(&e, Outcome::Status(429), None, 1, 10_000_000_000_000), None);
    }

    #[test]
    fn a_429_without_retry_after_halves_the_rate_and_successes_add_one_per_step() {
        let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).single().unwrap_or_default().timestamp_millis();
        let e = ep(Some(20), None, None);
        assert_eq!(slots(&e), Some(20));
        assert_eq!(next_rate(&e, Outcome::Status(429), None, 1, t0 + 1), Some(10.0));
        // With Retry-After the receiver names its wait; the rate stays.
        assert_eq!(next_rate(&e, Outcome::Status(429), Some(3), 1, t0 + 1), None);
        let e = ep(Some(20), Some(10.0), Some(t0 + 1));
        assert_eq!(slots(&e), Some(10));
        // Within the step nothing moves; after it a 2xx adds one.
        assert_eq!(next_rate(&e, Outcome::Status(200), None, 0, t0 + 1000), None);
        assert_eq!(next_rate(&e, Outcome::Status(200), None, 0, t0 + 1 + STEP_MS), Some(11.0));
        // One timeout is not a run; three in a row are.
        assert_eq!(next_rate(&e, Outcome::Timeout, None, 1, t0 + 1 + STEP_MS), None);
        assert_eq!(next_rate(&e, Outcome::Timeout, None, 3, t0 + 1 + STEP_MS), Some(5.0));
        // Never below the floor, never above the configured limit.
        let low = ep(Some(20), Some(1.0), Some(t0 + 1));
        assert_eq!(next_rate(&low, Outcome::Status(429), None, 1, t0 + 1 + STEP_MS), None);
        let top = ep(Some(20), Some(20.0), Some(t0 + 1));
        assert_eq!(next_rate(&top, Outcome::Status(200), None, 0, t0 + 1 + STEP_MS), None);
    }

    #[test]
    fn the_adaptive_rate_outlives_other_endpoint_changes_and_adaptive_off_uses_the_limit() {
        let created = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).single().unwrap_or_default().timestamp_millis();
        // Adapted before the endpoint's last change (a rotation, the breaker): still in force.
        let e = ep(Some(20), Some(2.0), Some(created - 1));
        assert_eq!(effective(&e), Some(2.0));
        // A lower limit set since caps it.
        let e = ep(Some(1), Some(2.0), Some(created - 1));
        assert_eq!(effective(&e), Some(1.0));
        let mut e = ep(Some(20), Some(2.0), Some(created + 1));
        assert_eq!(effective(&e), Some(2.0));
        e.rate_limit_adaptive = false;
        assert_eq!(effective(&e), Some(20.0));
        assert_eq!(next_rate(&e, Outcome::Status(429), None, 1, created + 10 * STEP_MS), None);
    }
}
