//! Property tests over every parser and the delivery state machine (issue 12, part 4).
//!
//! For each input a client, EventBridge, SQS or a receiver controls: no panic, and every
//! refusal is a 4xx with a stable code (the API's `{"error": {"code", "message"}}`); for the
//! retry policy and the delivery transitions: every accepted policy's waits stay within its
//! bounds, and every transition keeps the guarantees the sweeper and deliver rely on.
//! `PROPTEST_CASES` sets the cases per property (default here: 2,000).

/// An id for a test from a literal that meets the id rule (a test's own mistake otherwise).
#[allow(clippy::expect_used)]
fn id<T: std::str::FromStr>(value: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    value.parse().expect("a test id meets the id rule")
}

use chrono::{DateTime, Duration, TimeZone, Utc};
use proptest::prelude::*;
use serde_json::{Value, json};
use webhooks::clock::Random;
use webhooks::config::Config;
use webhooks::domain::delivery_lifecycle::{self, DueItem, Field, MAX_KEPT_ATTEMPTS, Next};
use webhooks::domain::model::{Attempt, Delivery, DeliveryStatus};
use webhooks::domain::retry_policy::{MAX_RETRY_AFTER_SECONDS, MAX_WAIT_SECONDS, Outcome, RetryPolicy, WaitSource};
use webhooks::error::ServiceError;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(2_000);
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

/// A refusal as the API would answer it: a 4xx with one of the stable codes.
fn is_client_error(e: &ServiceError) -> bool {
    (400..500).contains(&e.status())
        && ["invalid_json", "validation_error", "payload_too_large", "destination_not_allowed"].contains(&e.code())
}

/// Any JSON value, nested a few levels, with strings that include control characters and
/// non-ASCII.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A `POST /v1/events` body: mostly the right fields with any values, sometimes extra ones.
fn event_body() -> impl Strategy<Value = Value> {
    let field = |name: &'static str| {
        prop::option::of(prop_oneof![any_json(), "[a-zA-Z0-9._:-]{1,40}".prop_map(Value::String)])
            .prop_map(move |v| (name, v))
    };
    (
        field("tenant_id"),
        field("event_type"),
        field("payload"),
        field("id"),
        field("mode"),
        prop::option::of(("[a-z_]{1,8}", any_json())),
    )
        .prop_map(|(a, b, c, d, e, extra)| {
            let mut m = serde_json::Map::new();
            for (k, v) in [a, b, c, d, e] {
                if let Some(v) = v {
                    m.insert(k.to_string(), v);
                }
            }
            if let Some((k, v)) = extra {
                m.insert(k, v);
            }
            Value::Object(m)
        })
}

fn at(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_else(Utc::now)
}

fn attempt(n: u32, now: DateTime<Utc>) -> Attempt {
    Attempt {
        attempt: n,
        at: now,
        status_code: Some(503),
        error: Some("http_status".into()),
        cause: None,
        duration_ms: 1,
        response_body: None,
        next_wait_seconds: None,
        retry_after_seconds: None,
        wait_source: None,
        auth: None,
        token_fetch_ms: None,
    }
}

fn claimed(attempt_count: u32, kept: usize, dropped: u32, now: DateTime<Utc>) -> Delivery {
    Delivery {
        id: id("dlv_1"),
        event_id: id("evt_1"),
        event_type: "order.paid".into(),
        tenant_id: id("acme"),
        endpoint_id: id("ep_1"),
        status: DeliveryStatus::Sending,
        attempt_count,
        attempts_base: 0,
        next_attempt_at: None,
        lease_until: Some(now + Duration::seconds(15)),
        attempts: (1..=kept).map(|n| attempt(u32::try_from(n).unwrap_or(0), now)).collect(),
        attempts_dropped: dropped,
        created_at: now - Duration::hours(1),
        updated_at: now,
        reason: None,
        expires_at: None,
        payload_sha256: None,
        delivered_retention_days: None,
        exhausted_retention_days: None,
    }
}

proptest! {
    #![proptest_config(config())]

    /// Any bytes as an event body: accepted, or refused with 400/413/422 naming a code.
    #[test]
    fn any_bytes_as_an_event_body_is_accepted_or_a_4xx(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        if let Err(e) = webhooks::http::events::event_request(&bytes) {
            prop_assert!(is_client_error(&e), "{e:?}");
        }
    }

    /// Any JSON object shaped like an event body: accepted only when every rule holds.
    #[test]
    fn any_event_body_is_accepted_or_a_4xx_naming_the_field(body in event_body()) {
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        match webhooks::http::events::event_request(&bytes) {
            Ok(event) => {
                prop_assert!(webhooks::domain::ids::is_client_id(&event.tenant_id));
                prop_assert!(webhooks::domain::ids::is_client_id(&event.event_type));
                prop_assert!(event.id.as_deref().is_none_or(webhooks::domain::ids::is_client_id));
                let sent = body.get("payload").and_then(|p| serde_json::to_string(p).ok());
                prop_assert_eq!(Some(event.payload), sent);
            }
            Err(e) => {
                prop_assert!(is_client_error(&e), "{e:?}");
                prop_assert!(e.to_string().contains(':'), "the message names the field: {e}");
            }
        }
    }

    /// A well-formed event with any payload is accepted, the payload kept as sent.
    #[test]
    fn a_well_formed_event_is_accepted_with_its_payload(
        tenant in "[a-zA-Z0-9][a-zA-Z0-9._:-]{0,40}",
        event_type in "[a-z][a-z0-9._-]{0,40}",
        id in prop::option::of("[a-zA-Z0-9][a-zA-Z0-9._:-]{0,40}"),
        mode in prop_oneof![Just(None), Just(Some("async")), Just(Some("sync"))],
        // `"payload": null` reads as no payload (422 `payload: is required`).
        payload in any_json().prop_filter("null is no payload", |p| !p.is_null()),
    ) {
        let body = json!({"tenant_id": tenant, "event_type": event_type, "id": id, "mode": mode, "payload": payload});
        let event = webhooks::http::events::event_request(&serde_json::to_vec(&body).unwrap_or_default());
        prop_assert!(event.is_ok(), "{:?}", event);
        let event = event.unwrap_or_else(|_| unreachable!());
        // Byte for byte as sent (the text of the body's `payload`, never re-serialized).
        prop_assert_eq!(event.payload, serde_json::to_string(&payload).unwrap_or_default());
        prop_assert_eq!(event.sync, mode == Some("sync"));
    }

    /// Any EventBridge envelope the Lambda runtime could hand over: an event, or a 4xx.
    #[test]
    fn any_eventbridge_envelope_is_an_event_or_a_4xx(
        detail in any_json(),
        detail_type in ".{0,20}",
        id in prop::option::of(".{0,20}"),
        tenant in prop::option::of(any_json()),
    ) {
        let mut detail = detail;
        if let (Some(t), Value::Object(m)) = (tenant, &mut detail) {
            m.insert("tenant_id".into(), t);
        }
        let envelope = json!({
            "version": "0", "id": id, "detail-type": detail_type, "source": "app",
            "account": "123456789012", "time": "2026-11-30T00:00:00Z", "region": "us-east-1",
            "resources": [], "detail": detail,
        });
        if let Ok(event) = serde_json::from_value(envelope) {
            match webhooks::service::ingest::eventbridge_event("tenant_id", event) {
                Ok(e) => prop_assert!(webhooks::domain::ids::is_client_id(&e.tenant_id)),
                Err(e) => prop_assert!(is_client_error(&e), "{e:?}"),
            }
        }
    }

    /// Any SQS message body: decodes or is refused (deliver drops it), never a panic; what we
    /// encode decodes to itself, less a payload holding U+FFFE or U+FFFF (SQS refuses those
    /// characters, so the payload stays out of the message and deliver reads it from the
    /// table; found by a CI run on `payload = "\u{fffe}"`).
    #[test]
    fn sqs_message_bodies_round_trip_and_garbage_is_refused(
        raw in ".{0,200}",
        id in "[a-zA-Z0-9_]{1,40}",
        n in 1u32..1000,
        payload in prop::option::of(".{0,100}"),
    ) {
        // Anything but a JSON object is refused (deliver drops the message, never panics).
        if !raw.trim_start().starts_with('{') {
            prop_assert!(webhooks::queue::decode(&raw).is_err(), "{:?}", raw);
        }
        let refused = payload.as_deref().is_some_and(|p| p.contains(['\u{FFFE}', '\u{FFFF}']));
        let mut msg = webhooks::domain::delivery_lifecycle::AttemptMessage::new(id.parse().expect("the strategy makes valid ids"), n);
        msg.payload = payload;
        let mut expected = msg.clone();
        if refused {
            expected.payload = None;
        }
        prop_assert_eq!(webhooks::queue::decode(&webhooks::queue::encode(&msg)).ok(), Some(expected));
    }

    /// Any `Retry-After` value: seconds or a future HTTP date, else ignored.
    #[test]
    fn retry_after_is_seconds_a_date_or_ignored(raw in ".{0,40}", secs in 0u64..10_000_000, ahead in 0u64..100_000) {
        let now = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        let _ = webhooks::sender::parse_retry_after(Some(&raw), now);
        prop_assert_eq!(webhooks::sender::parse_retry_after(Some(&secs.to_string()), now), Some(secs));
        let date = httpdate::fmt_http_date(now + std::time::Duration::from_secs(ahead));
        prop_assert_eq!(webhooks::sender::parse_retry_after(Some(&date), now), Some(ahead));
    }

    /// Any retry policy a client sends: refused with a 422 naming a field, or accepted, and
    /// then it round-trips through its own JSON and every wait it gives is within its bounds.
    #[test]
    fn retry_policies_round_trip_and_their_waits_stay_in_bounds(
        raw in any_json(),
        schedule in prop::collection::vec(0u64..(MAX_WAIT_SECONDS + 10), 0..8),
        max_attempts in 0u32..60,
        jitter in 0.0f64..0.7,
        failures in 0u32..60,
        status in 100u16..600,
        retry_after in prop::option::of(0u64..(3 * MAX_RETRY_AFTER_SECONDS)),
        seed in any::<u64>(),
    ) {
        let custom = json!({"schedule_seconds": schedule, "max_attempts": max_attempts, "jitter": jitter});
        for candidate in [raw, custom] {
            match RetryPolicy::from_request(Some(&candidate)) {
                Err(e) => {
                    let e = ServiceError::Validation(e.to_string());
                    prop_assert!(is_client_error(&e));
                }
                Ok(p) => {
                    let again = RetryPolicy::from_request(Some(&serde_json::to_value(&p).unwrap_or_default()));
                    prop_assert_eq!(again.as_ref().ok(), Some(&p), "{:?}", again);
                    prop_assert!(!p.schedule_seconds.is_empty());
                    prop_assert!(p.schedule_seconds.iter().all(|w| (1..=MAX_WAIT_SECONDS).contains(w)));
                    let longest = p.schedule_seconds.iter().copied().max().unwrap_or(0) as f64;
                    let rng = Random::seeded(seed);
                    match p.next_wait(failures, Outcome::Status(status), retry_after, &rng) {
                        None => prop_assert!(failures == 0 || failures >= p.max_attempts),
                        Some(w) => {
                            prop_assert!(failures >= 1 && failures < p.max_attempts);
                            prop_assert!(w.seconds >= 1);
                            match w.source {
                                WaitSource::Schedule => prop_assert!(w.seconds as f64 <= (longest * (1.0 + p.jitter)).round().max(1.0)),
                                WaitSource::RetryAfter => prop_assert!(w.seconds <= MAX_RETRY_AFTER_SECONDS),
                            }
                        }
                    }
                }
            }
        }
    }

    /// Any cursor a client sends: a key we can use, or the API's 422; ours round-trip.
    #[test]
    fn cursors_round_trip_and_garbage_is_a_422(raw in ".{0,120}", pk in "[a-zA-Z0-9#_]{1,40}", n in any::<i64>()) {
        if let Err(e) = webhooks::store::dynamo::decode_cursor(&raw) {
            let e = ServiceError::from(e);
            prop_assert_eq!((e.status(), e.code()), (422, "validation_error"));
        }
        let key: webhooks::store::dynamo::Item = [
            ("pk".to_string(), aws_sdk_dynamodb::types::AttributeValue::S(pk)),
            ("due_at".to_string(), aws_sdk_dynamodb::types::AttributeValue::N(n.to_string())),
        ].into_iter().collect();
        let cursor = webhooks::store::dynamo::encode_cursor(key.clone());
        prop_assert!(cursor.is_ok());
        let back = webhooks::store::dynamo::decode_cursor(&cursor.unwrap_or_default());
        prop_assert_eq!(back.ok(), Some(key));
    }

    /// A recorded attempt: guarded on the claim it read; a retry is scheduled where the sweeper
    /// or SQS will bring it back at its time (never earlier, never unreachable); the history
    /// stays bounded and its count exact.
    #[test]
    fn recording_an_attempt_keeps_the_delivery_reachable_and_bounded(
        now_ms in 1_600_000_000_000i64..2_000_000_000_000,
        attempt_count in 1u32..200,
        kept in 0usize..=MAX_KEPT_ATTEMPTS,
        dropped in 0u32..1000,
        next in prop_oneof![Just(None), Just(Some(0u64)), (1u64..=MAX_WAIT_SECONDS).prop_map(Some)],
        sqs_max in 1u32..=900,
        redrive in 1u32..3600,
    ) {
        let now = at(now_ms);
        let mut cfg = Config::new("t", "q");
        cfg.sqs_max_delay_seconds = sqs_max;
        cfg.redrive_after_seconds = redrive;
        let d = claimed(attempt_count, kept, dropped, now);
        let next = match next { None => Next::Delivered, Some(0) => Next::Exhausted, Some(s) => Next::RetryIn(s) };
        let (t, enqueue) = delivery_lifecycle::complete(&cfg, now, &d, attempt(attempt_count, now), next);
        prop_assert_eq!(&t.guard.status, &vec![DeliveryStatus::Sending]);
        prop_assert_eq!(t.guard.attempt_count, attempt_count);
        match (&t.attempts, &t.attempts_dropped) {
            (Field::Set(list), Field::Set(new_dropped)) => {
                prop_assert!(list.len() <= MAX_KEPT_ATTEMPTS);
                prop_assert_eq!(list.len() as u64 + u64::from(*new_dropped), kept as u64 + u64::from(dropped) + 1);
                prop_assert_eq!(list.last().map(|a| a.attempt), Some(attempt_count));
            }
            other => prop_assert!(false, "history not written: {:?}", other),
        }
        match next {
            Next::RetryIn(s) => {
                prop_assert_eq!(t.status, DeliveryStatus::Scheduled);
                let due_at = at(now_ms + i64::try_from(s).unwrap_or(0) * 1000);
                prop_assert_eq!(&t.next_attempt_at, &Field::Set(due_at));
                let Field::Set(due) = t.due_at else { return Err(TestCaseError::fail("no due time")) };
                match enqueue {
                    // Within SQS's delay: sent now with the whole wait; the due index holds a
                    // re-drive time after it.
                    Some(e) => {
                        prop_assert!(s <= u64::from(sqs_max));
                        prop_assert_eq!(u64::from(e.delay_seconds), s);
                        prop_assert_eq!(e.message.attempt, attempt_count + 1);
                        prop_assert!(due > due_at.timestamp_millis());
                    }
                    // Longer: the sweeper finds it with at most SQS's delay left.
                    None => {
                        prop_assert!(s > u64::from(sqs_max));
                        prop_assert!(due >= now_ms && due <= due_at.timestamp_millis());
                        prop_assert!(due_at.timestamp_millis() - due <= i64::from(sqs_max) * 1000);
                    }
                }
            }
            Next::Delivered => prop_assert_eq!((t.status, enqueue.is_none()), (DeliveryStatus::Delivered, true)),
            Next::Exhausted | Next::Ended(_) => {
                prop_assert_eq!((t.status, enqueue.is_none()), (DeliveryStatus::Exhausted, true))
            }
        }
    }

    /// A due item the sweeper reads: acted on only when due, guarded on what it read, sent
    /// with a delay SQS accepts and never before its attempt's time, and given a new due time
    /// after now (a lost message is re-driven later, not in a loop).
    #[test]
    fn the_sweeper_sends_due_items_on_time_and_reschedules_a_redrive(
        now_ms in 1_600_000_000_000i64..2_000_000_000_000,
        due_offset in -100_000_000i64..100_000_000,
        next_offset in prop::option::of(-100_000_000i64..100_000_000),
        attempt_count in 0u32..100,
        sending in any::<bool>(),
        lease_offset in -100_000i64..100_000,
        sqs_max in 1u32..=900,
        redrive in 1u32..3600,
    ) {
        let now = at(now_ms);
        let mut cfg = Config::new("t", "q");
        cfg.sqs_max_delay_seconds = sqs_max;
        cfg.redrive_after_seconds = redrive;
        let item = DueItem {
            id: id("dlv_1"),
            status: if sending { DeliveryStatus::Sending } else { DeliveryStatus::Scheduled },
            attempt_count,
            due_at: now_ms + due_offset,
            next_attempt_at: next_offset.map(|o| at(now_ms + o)),
            lease_until: sending.then(|| at(now_ms + due_offset)),
        };
        // An expired lease is written on the item as read (sending: the claim the index showed).
        let (mut read, _, _) = delivery_lifecycle::new_delivery(&cfg, now, id("dlv_1"), &id("evt_1"), "t", &id("acme"), &id("ep_1"), false);
        read.status = item.status;
        read.attempt_count = attempt_count;
        read.lease_until = sending.then(|| at(now_ms + lease_offset));
        match delivery_lifecycle::sweep(&cfg, now, &item, Some(&read)) {
            None => prop_assert!(item.due_at > now_ms, "a due item was left alone: {:?}", item),
            Some((t, None)) => {
                // Only a lease not over yet is left without a message: looked at again at
                // its end, with nothing sent and nothing recorded.
                prop_assert!(item.due_at <= now_ms);
                prop_assert!(sending && lease_offset > 0, "a due item got no message: {:?}", item);
                prop_assert_eq!(t.due_at, Field::Set(now_ms + lease_offset));
                prop_assert_eq!(t.status, DeliveryStatus::Sending);
                prop_assert_eq!(t.attempts, Field::Keep);
                prop_assert_eq!(t.guard.due_at, Some(item.due_at));
            }
            Some((t, Some(e))) => {
                prop_assert!(item.due_at <= now_ms);
                prop_assert!(!(sending && lease_offset > 0), "a live lease was re-driven: {:?}", item);
                prop_assert_eq!(t.guard.due_at, Some(item.due_at));
                prop_assert_eq!(t.guard.attempt_count, attempt_count);
                prop_assert!(e.delay_seconds <= sqs_max);
                let Field::Set(due) = t.due_at else { return Err(TestCaseError::fail("no due time")) };
                prop_assert!(due > now_ms);
                if let (false, Some(next)) = (sending, item.next_attempt_at) {
                    // Never sent before the attempt's time (whole seconds, rounded up).
                    prop_assert!(now_ms + i64::from(e.delay_seconds) * 1000 >= next.timestamp_millis().min(now_ms + i64::from(sqs_max) * 1000) - 999);
                }
            }
        }
    }
}
