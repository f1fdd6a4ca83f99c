//! Noisy-neighbour isolation: the slow lane.
//!
//! Deliver runs a batch's messages concurrently, but a Lambda invocation (and a local poller)
//! ends only when its slowest POST does, so one receiver that answers after 9 s holds every
//! batch it is in for 9 s, and with the event source mapping's concurrency fixed, everyone's
//! throughput with it. Deliver cannot return early while a POST is in flight (Lambda freezes
//! the process), so isolation comes from routing: an endpoint whose attempts are slow has
//! them made from a second queue, the slow lane (`WEBHOOKS_SLOW_QUEUE_URL`), consumed by its
//! own event source mapping with its own concurrency. The main lane's batches then hold only
//! fast receivers.
//!
//! - **Marker.** An attempt that took at least `WEBHOOKS_SLOW_LANE_THRESHOLD_MS` (default
//!   2000 ms; timeouts included) sets `slow_until` = now + `WEBHOOKS_SLOW_LANE_HOLD_SECONDS`
//!   (default 600 s) on the endpoint item; a fast attempt removes it. The write is made only
//!   when the marker changes (or is in the last half of its hold), so a fast receiver's
//!   deliveries pay nothing, and it is a plain UpdateItem beside the versioned configuration
//!   ([`crate::domain::model::UNVERSIONED_ENDPOINT_ATTRIBUTES`]): no version bump, no conflict with
//!   PATCH.
//! - **Routing at ingest.** Ingest reads the tenant's endpoints (strongly consistent) before
//!   it writes the deliveries, `slow_until` included, so attempt 1 for an endpoint marked
//!   slow is sent to the slow lane directly (`WEBHOOKS_SLOW_QUEUE_URL` is set on the ingest
//!   function too): the main lane never sees it. An endpoint that turns slow after the read
//!   has its attempt forwarded by the consumer, below.
//! - **Routing at the consumer.** The sweeper's re-drives, replay, release and probe jobs (and
//!   an ingest without `WEBHOOKS_SLOW_QUEUE_URL`, such as one from a release before) send to
//!   the main queue. Deliver reads the endpoint (strongly consistent) before every POST
//!   anyway; on the main lane, a delivery of a slow endpoint is given back without an attempt
//!   (the same guarded write as a claim whose lease is too short: `scheduled` again, the
//!   attempt number not spent, in the due index) and its message sent to the slow lane. That
//!   takes milliseconds, so the main lane's batch is not held. A next attempt scheduled by
//!   deliver for a slow endpoint goes to the slow lane directly. The slow lane's deliver
//!   attempts whatever comes (an endpoint that turned fast meanwhile is attempted there once
//!   and its next attempts go back to the main lane).
//! - **Nothing lost when the lane changes mid-flight.** A forward is a give-back then a send:
//!   if the send fails, the delivery is `scheduled` in the due index and the sweeper re-drives
//!   it (to the main queue, which forwards it again). A duplicate of the forwarded message
//!   loses its claim like any duplicate.
//!
//! Cost: nothing for an attempt that is sent to its lane (attempt 1 from ingest, a next
//! attempt from deliver), but for an event that fans out to endpoints in both lanes, which
//! ingest sends in two SendMessageBatch calls (one per queue) instead of one; per attempt of a slow endpoint that arrives on the main lane (a
//! re-drive, a replay, an endpoint that turned slow after ingest read it), one extra claim
//! write, one give-back write and one SendMessage; per lane change, one UpdateItem. Nothing
//! for an endpoint that stays fast.

use crate::domain::model::Endpoint;
use chrono::{DateTime, Utc};

/// Which queue an SQS message came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// The attempt queue (`WEBHOOKS_QUEUE_URL`).
    Main,
    /// The slow lane (`WEBHOOKS_SLOW_QUEUE_URL`).
    Slow,
}

/// The lane of an SQS record, from its `eventSourceARN`: the slow lane when it names the
/// queue of `WEBHOOKS_SLOW_QUEUE_URL`, else the main lane.
pub fn of_source(cfg: &crate::Config, event_source_arn: Option<&str>) -> Lane {
    match (&cfg.slow_queue_url, event_source_arn) {
        (Some(slow), Some(arn)) if crate::config::queue_name(arn) == crate::config::queue_name(slow) => Lane::Slow,
        _ => Lane::Main,
    }
}

/// Whether `ep`'s attempts go to the slow lane at `now`.
pub fn is_slow(ep: &Endpoint, now: DateTime<Utc>) -> bool {
    ep.slow_until.is_some_and(|t| t > now)
}

/// The marker write an attempt that took `duration_ms` asks for, decided on `ep` as read
/// before it: `Some(Some(t))` sets `slow_until` to `t`, `Some(None)` removes it, `None`
/// writes nothing (the common case: a fast endpoint stays fast, a slow one whose marker has
/// more than half of its hold left stays slow).
pub fn marker_after(
    cfg: &crate::Config,
    ep: &Endpoint,
    now: DateTime<Utc>,
    duration_ms: u64,
) -> Option<Option<DateTime<Utc>>> {
    let hold = chrono::Duration::from_std(cfg.slow_lane_hold).unwrap_or(chrono::Duration::seconds(600));
    if u128::from(duration_ms) >= cfg.slow_lane_threshold.as_millis() {
        let renew = ep.slow_until.is_none_or(|t| t < now + hold / 2);
        renew.then_some(Some(now + hold))
    } else {
        ep.slow_until.is_some().then_some(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::id;
    use chrono::TimeZone;

    fn ep(slow_until: Option<DateTime<Utc>>) -> Endpoint {
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).single().unwrap_or_default();
        Endpoint { slow_until, ..Endpoint::new(id("ep_1"), id("t"), "http://x", "whsec_x", now) }
    }

    #[test]
    fn the_marker_is_written_only_when_the_lane_changes() {
        let cfg = crate::Config::new("t", "q");
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).single().unwrap_or_default();
        let hold = chrono::Duration::seconds(600);
        // Fast and not marked: nothing to write.
        assert_eq!(marker_after(&cfg, &ep(None), now, 150), None);
        // Slow: marked for the hold.
        assert_eq!(marker_after(&cfg, &ep(None), now, 9_000), Some(Some(now + hold)));
        // Slow again with most of the hold left: nothing; in its last half: renewed.
        assert_eq!(marker_after(&cfg, &ep(Some(now + hold)), now, 9_000), None);
        assert_eq!(marker_after(&cfg, &ep(Some(now + hold / 4)), now, 9_000), Some(Some(now + hold)));
        // Fast while marked: removed.
        assert_eq!(marker_after(&cfg, &ep(Some(now + hold)), now, 20), Some(None));
    }

    #[test]
    fn the_lane_comes_from_the_event_source_arn() {
        let mut cfg = crate::Config::new("t", "http://127.0.0.1:4566/000000000000/main");
        assert_eq!(of_source(&cfg, Some("arn:aws:sqs:us-east-1:000000000000:slow")), Lane::Main);
        cfg.slow_queue_url = Some("https://sqs.us-east-1.amazonaws.com/000000000000/slow".into());
        assert_eq!(of_source(&cfg, Some("arn:aws:sqs:us-east-1:000000000000:slow")), Lane::Slow);
        assert_eq!(of_source(&cfg, Some("arn:aws:sqs:us-east-1:000000000000:main")), Lane::Main);
        assert_eq!(of_source(&cfg, None), Lane::Main);
    }
}
