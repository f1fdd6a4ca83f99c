//! The delivery pipeline end to end: the local runtime against the AWS emulator, with real
//! receivers on 127.0.0.1. Time is compressed with custom schedules of a few seconds.

use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;
use webhooks::domain::delivery_lifecycle::{self, AttemptMessage};
use webhooks::service::{deliver, ingest, sweep};
use webhooks::store::Applied;
use webhooks_local::Options;
use webhooks_tests::{Receiver, Reply, Serialized, Stack, eventually};

const WAIT: Duration = Duration::from_secs(20);

fn delivery_id(accepted: &Value, i: usize) -> String {
    accepted["deliveries"][i]["id"].as_str().expect("delivery id").to_string()
}

fn no_pollers() -> Options {
    Options { pollers: 0, sweeper: false, ..Options::default() }
}

#[tokio::test(flavor = "multi_thread")]
async fn happy_path_is_delivered_once_and_signed_per_standard_webhooks() {
    // The default endpoint cache (5 s), so attempt 1 signs with the endpoint that rode in
    // its message rather than one read by deliver.
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let ep = stack.endpoint("acme", &rx.url, Value::Null).await;
    let secret = ep["secret"].as_str().unwrap().to_string();
    assert!(secret.starts_with("whsec_"));
    assert_eq!(ep["retry_policy"]["preset"], "standard");

    let accepted = stack.event("acme", "order.paid", json!({"order": "o_1", "amount": 1200})).await;
    let event_id = accepted["event_id"].as_str().unwrap().to_string();
    assert_eq!(accepted["deliveries"][0]["endpoint_id"], ep["id"]);
    let id = delivery_id(&accepted, 0);

    let d = stack.wait_status(&id, "delivered", WAIT).await;
    assert_eq!(d["attempt_count"], 1);
    assert_eq!(d["attempts"][0]["attempt"], 1);
    assert_eq!(d["attempts"][0]["status_code"], 200);
    assert!(d["next_attempt_at"].is_null());
    assert!(d["expires_at"].is_string(), "delivered items get a retention time: {d}");

    let hits = rx.hits();
    assert_eq!(hits.len(), 1);
    let hit = &hits[0];
    assert_eq!(hit.header("webhook-id"), event_id);
    assert_eq!(hit.header("webhook-attempt"), "1");
    assert_eq!(hit.header("content-type"), "application/json");
    assert_eq!(serde_json::from_slice::<Value>(&hit.body).unwrap(), json!({"order": "o_1", "amount": 1200}));
    // A verifier we did not write accepts it.
    let verifier = standardwebhooks::Webhook::new(&secret).unwrap();
    verifier.verify(&hit.body, &hit.headers).expect("signature verifies");
    // And rejects it under another secret.
    let other = standardwebhooks::Webhook::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
    assert!(other.verify(&hit.body, &hit.headers).is_err());
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn receiver_down_then_up_is_delivered_on_a_later_attempt() {
    let stack = Stack::start(|_| {}).await;
    let (url, addr) = Receiver::down().await;
    stack.endpoint("acme", &url, json!({"schedule_seconds": [1], "max_attempts": 10})).await;
    let id = delivery_id(&stack.event("acme", "order.paid", json!({"n": 1})).await, 0);

    // At least two attempts fail against a closed port...
    let d = stack
        .wait_delivery(&id, WAIT, |d| {
            d["attempts"].as_array().is_some_and(|a| a.len() >= 2) && d["status"] == "scheduled"
        })
        .await;
    assert_eq!(d["status"], "scheduled", "still going to be delivered: {d}");
    assert!(d["next_attempt_at"].is_string());
    let rx = Receiver::start_on(addr, Reply::Status(200)).await;

    // ...then the receiver comes up and a later attempt lands.
    let d = stack.wait_status(&id, "delivered", WAIT).await;
    let attempts = d["attempts"].as_array().unwrap();
    let n = attempts.len();
    assert!(n >= 3, "{d}");
    for (i, a) in attempts.iter().enumerate() {
        assert_eq!(a["attempt"], i as u64 + 1);
    }
    for a in &attempts[..n - 1] {
        assert_eq!(a["error"], "connection", "{a}");
        assert!(a["status_code"].is_null());
        assert_eq!(a["next_wait_seconds"], 1);
    }
    assert_eq!(attempts[n - 1]["status_code"], 200);
    assert_eq!(rx.count(), 1);
    assert_eq!(rx.hits()[0].header("webhook-attempt"), n.to_string());
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn exhausted_delivery_is_listed_as_a_dead_letter_and_replays_byte_for_byte() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(500)).await;
    let ep = stack.endpoint("acme", &rx.url, json!({"schedule_seconds": [1], "max_attempts": 2})).await;
    // Odd spacing and key order: the payload is frozen as sent, not re-serialised.
    let body = r#"{"tenant_id":"acme","event_type":"invoice.sent","payload":{"z": 1,  "a" : [1, 2.50, "é"]}}"#;
    let (status, accepted) = stack.post_raw("/v1/events", body).await;
    assert_eq!(status, 202, "{accepted}");
    let id = delivery_id(&accepted, 0);

    let d = stack.wait_status(&id, "exhausted", WAIT).await;
    assert_eq!(d["attempt_count"], 2);
    assert_eq!(d["attempts"][1]["status_code"], 500);
    assert!(d["expires_at"].is_string());
    let (status, dead) = stack.call(Method::GET, "/v1/deliveries?status=exhausted", None).await;
    assert_eq!(status, 200);
    assert!(dead["data"].as_array().unwrap().iter().any(|x| x["id"] == id.as_str()), "{dead}");
    let by_ep = format!("/v1/deliveries?status=exhausted&endpoint_id={}", ep["id"].as_str().unwrap());
    let (_, dead) = stack.call(Method::GET, &by_ep, None).await;
    assert_eq!(dead["data"].as_array().unwrap().len(), 1);

    rx.set_default(Reply::Status(204));
    let (status, replayed) = stack.call(Method::POST, &format!("/v1/deliveries/{id}/replay"), None).await;
    assert_eq!(status, 202, "{replayed}");
    let d = stack.wait_status(&id, "delivered", WAIT).await;
    assert_eq!(d["attempt_count"], 3);
    assert!(d["expires_at"].is_string());

    let hits = rx.hits();
    assert_eq!(hits.len(), 3);
    let frozen = r#"{"z": 1,  "a" : [1, 2.50, "é"]}"#.as_bytes();
    for h in &hits {
        assert_eq!(&h.body[..], frozen);
        assert_eq!(h.header("webhook-id"), hits[0].header("webhook-id"));
    }
    // Replaying a delivered delivery is a conflict.
    let (status, e) = stack.call(Method::POST, &format!("/v1/deliveries/{id}/replay"), None).await;
    assert_eq!(status, 409);
    assert_eq!(e["error"]["code"], "conflict");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wait_longer_than_the_sqs_limit_goes_through_the_sweeper_on_time() {
    let stack = Stack::start(|c| c.sqs_max_delay_seconds = 2).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    rx.script([Reply::Status(503)]);
    stack.endpoint("acme", &rx.url, json!({"schedule_seconds": [6], "max_attempts": 2})).await;
    let id = delivery_id(&stack.event("acme", "order.paid", json!({})).await, 0);

    let d = stack.wait_status(&id, "delivered", WAIT).await;
    assert_eq!(d["attempts"][0]["next_wait_seconds"], 6);
    let hits = rx.hits();
    assert_eq!(hits.len(), 2);
    let gap = hits[1].at - hits[0].at;
    // Due 6 s after the first attempt ended; SQS can only hold 2 s, so the sweeper (every
    // second) enqueued it with the remaining delay. The bounds tell the mechanism, not a
    // latency: never before the wait (the sweeper must not send early), and well before the
    // 60 s re-drive that would deliver it if the sweeper had not. Alone the gap is ~7.6 s; in
    // a full `make test` on 2 cores, with 18 stacks sweeping one emulator, 11 s has been seen,
    // so the upper bound is half the re-drive (speed belongs to `make bench`).
    assert!(gap >= Duration::from_millis(5900), "too early: {gap:?}");
    let redrive = Duration::from_secs(60);
    assert!(gap < redrive / 2, "too late: {gap:?}; the attempts as recorded: {}", d["attempts"]);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn duplicate_messages_and_concurrent_sweeps_reach_the_receiver_once_per_attempt() {
    let stack = Stack::start_with(|c| c.redrive_after_seconds = 1, no_pollers()).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    stack.endpoint("acme", &rx.url, Value::Null).await;
    let id = delivery_id(&stack.event("acme", "order.paid", json!({"dup": true})).await, 0);
    let msg = AttemptMessage::new(webhooks_tests::id(&id), 1);
    let app = Serialized::wrap(&stack.app);

    // The same message three times, concurrently and again after.
    let (a, b) = tokio::join!(deliver::deliver_message(&app, &msg), deliver::deliver_message(&app, &msg));
    let again = deliver::deliver_message(&app, &msg).await.unwrap();
    let outcomes = [a.unwrap(), b.unwrap(), again];
    let attempted = outcomes
        .iter()
        .filter(|o| matches!(o, deliver::Handled::Attempted(webhooks::domain::model::DeliveryStatus::Delivered, _)))
        .count();
    let duplicates = outcomes.iter().filter(|o| **o == deliver::Handled::Duplicate).count();
    assert_eq!((attempted, duplicates), (1, 2), "{outcomes:?}");
    assert_eq!(rx.count(), 1);

    // A second event whose message is "lost": once overdue, two sweeper ticks at once send one
    // message between them, and with the original still queued the receiver still gets it once.
    let id2 = delivery_id(&stack.event("acme", "order.paid", json!({"dup": 2})).await, 0);
    tokio::time::sleep(Duration::from_millis(1100)).await; // overdue by redrive_after (1 s)
    let (s1, s2) = tokio::join!(sweep::sweep(&app), sweep::sweep(&app));
    let (s1, s2) = (s1.unwrap(), s2.unwrap());
    assert_eq!(s1.enqueued + s2.enqueued, 1, "{s1:?} {s2:?}");
    let mut received = 0;
    for _ in 0..10 {
        received += webhooks_local::poll_once(&app, &stack.sqs, 1).await.unwrap();
        if received >= 3 {
            break;
        }
    }
    // The first event's own message (a duplicate of what was delivered above), the second
    // event's original message and the sweeper's re-drive of it.
    assert_eq!(received, 3);
    let d = stack.wait_status(&id2, "delivered", WAIT).await;
    assert_eq!(d["attempt_count"], 1);
    assert_eq!(rx.count(), 2, "one request per event");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_that_dies_after_its_claim_is_recovered_when_the_lease_expires() {
    let stack = Stack::start_with(
        |c| {
            c.request_timeout = Duration::from_millis(1000);
            c.lease_margin = Duration::from_millis(1000);
            // Due (the message's redrive time) before the 2 s lease is over: the sweeper
            // must wait for the lease's end.
            c.redrive_after_seconds = 1;
        },
        no_pollers(),
    )
    .await;
    let rx = Receiver::start(Reply::Status(200)).await;
    stack.endpoint("acme", &rx.url, Value::Null).await;
    let id = delivery_id(&stack.event("acme", "order.paid", json!({"crash": true})).await, 0);

    // The worker claims attempt 1 and dies: no request, no record, message consumed.
    let claim = delivery_lifecycle::claim(
        &stack.app.config,
        chrono::Utc::now(),
        &AttemptMessage::new(webhooks_tests::id(&id), 1),
    );
    assert!(matches!(stack.app.store.apply(&webhooks_tests::id(&id), &claim, false).await.unwrap(), Applied::Done(_)));
    let d = stack.delivery(&id).await;
    assert_eq!(d["status"], "sending");
    let webhooks::domain::delivery_lifecycle::Field::Set(lease_until) = claim.lease_until else {
        panic!("a claim without a lease")
    };

    // The sweeper finds the expired lease (not before) and re-drives; deliver makes attempt 2.
    let recovered = std::sync::atomic::AtomicUsize::new(0);
    eventually("the sweeper to recover the lease", WAIT, || async {
        let r = sweep::sweep(&stack.app).await.unwrap();
        if r.recovered_leases > 0 {
            assert!(chrono::Utc::now() >= lease_until, "a lease recovered before its end ({lease_until})");
        }
        recovered.fetch_add(r.recovered_leases, std::sync::atomic::Ordering::SeqCst);
        recovered.load(std::sync::atomic::Ordering::SeqCst) > 0
    })
    .await;
    // The re-drive waits OUTCOME_WAIT_SECONDS past the lease for an outcome the worker could
    // still send (a live worker whose record failed on every try).
    let redrive = WAIT + Duration::from_secs(delivery_lifecycle::OUTCOME_WAIT_SECONDS as u64);
    eventually("the re-driven attempt", redrive, || async {
        webhooks_local::poll_once(&stack.app, &stack.sqs, 1).await.unwrap();
        stack.delivery(&id).await["status"] == "delivered"
    })
    .await;
    let d = stack.delivery(&id).await;
    assert!(
        chrono::Utc::now() >= lease_until + chrono::Duration::seconds(delivery_lifecycle::OUTCOME_WAIT_SECONDS),
        "re-driven before the outcome wait was over"
    );
    assert_eq!(d["attempts"][0]["attempt"], 1);
    assert_eq!(d["attempts"][0]["error"], "lease_expired");
    assert_eq!(d["attempts"][1]["attempt"], 2);
    assert_eq!(d["attempts"][1]["status_code"], 200);
    assert_eq!(rx.count(), 1);
    assert_eq!(rx.hits()[0].header("webhook-attempt"), "2");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_receiver_that_hangs_past_the_timeout_fails_and_the_next_attempt_waits_its_delay() {
    let stack = Stack::start(|c| c.request_timeout = Duration::from_millis(1000)).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    rx.script([Reply::Hang(Duration::from_secs(5))]);
    stack.endpoint("acme", &rx.url, json!({"schedule_seconds": [2], "max_attempts": 3})).await;
    let id = delivery_id(&stack.event("acme", "order.paid", json!({})).await, 0);

    let d = stack.wait_status(&id, "delivered", WAIT).await;
    let first = &d["attempts"][0];
    assert_eq!(first["error"], "timeout");
    assert!(first["duration_ms"].as_u64().unwrap() >= 1000, "{first}");
    assert_eq!(first["next_wait_seconds"], 2);
    let hits = rx.hits();
    assert_eq!(hits.len(), 2, "no back-to-back retries");
    // 1 s timeout, then the scheduled 2 s.
    let gap = hits[1].at - hits[0].at;
    assert!(gap >= Duration::from_millis(2900), "retried too soon: {gap:?}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn fan_out_to_three_endpoints_where_one_fails() {
    let stack = Stack::start(|_| {}).await;
    let ok1 = Receiver::start(Reply::Status(200)).await;
    let ok2 = Receiver::start(Reply::Status(202)).await;
    let bad = Receiver::start(Reply::Status(500)).await;
    let policy = json!({"schedule_seconds": [1], "max_attempts": 2});
    let mut ids = Vec::new();
    for rx in [&ok1, &ok2, &bad] {
        ids.push(stack.endpoint("acme", &rx.url, policy.clone()).await["id"].as_str().unwrap().to_string());
    }
    // Another tenant's endpoint gets nothing.
    let other = Receiver::start(Reply::Status(200)).await;
    stack.endpoint("globex", &other.url, Value::Null).await;

    let accepted = stack.event("acme", "order.paid", json!({"fan": "out"})).await;
    let deliveries = accepted["deliveries"].as_array().unwrap();
    assert_eq!(deliveries.len(), 3);
    for (i, ep) in ids.iter().enumerate() {
        let d = deliveries.iter().find(|d| d["endpoint_id"] == ep.as_str()).expect("a delivery per endpoint");
        let expected = if i == 2 { "exhausted" } else { "delivered" };
        stack.wait_status(d["id"].as_str().unwrap(), expected, WAIT).await;
    }
    assert_eq!(ok1.count(), 1);
    assert_eq!(ok2.count(), 1);
    assert_eq!(bad.count(), 2);
    assert_eq!(other.count(), 0);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ingest_is_idempotent_on_the_event_id_and_filters_on_event_type() {
    let stack = Stack::start(|_| {}).await;
    let paid = Receiver::start(Reply::Status(200)).await;
    let all = Receiver::start(Reply::Status(200)).await;
    let (status, _) = stack
        .call(
            Method::POST,
            "/v1/endpoints",
            Some(json!({"tenant_id": "acme", "url": paid.url, "event_types": ["order.paid"]})),
        )
        .await;
    assert_eq!(status, 201);
    stack.endpoint("acme", &all.url, Value::Null).await;

    let body = json!({"tenant_id": "acme", "event_type": "order.paid", "payload": {"a": 1}, "id": "evt_fixed_1"});
    let (s1, first) = stack.call(Method::POST, "/v1/events", Some(body.clone())).await;
    assert_eq!(s1, 202);
    for d in first["deliveries"].as_array().unwrap() {
        stack.wait_status(d["id"].as_str().unwrap(), "delivered", WAIT).await;
    }
    // Posted again once the first is delivered (its puts all find their items existing).
    let (s2, second) = stack.call(Method::POST, "/v1/events", Some(body)).await;
    assert_eq!(s2, 202);
    assert_eq!(first["event_id"], "evt_fixed_1");
    assert_eq!(first, second, "the same event id answers with the same deliveries");
    let refunded = stack.event("acme", "order.refunded", json!({"a": 2})).await;
    assert_eq!(refunded["deliveries"].as_array().unwrap().len(), 1);
    stack.wait_status(&delivery_id(&refunded, 0), "delivered", WAIT).await;
    assert_eq!(paid.count(), 1);
    assert_eq!(all.count(), 2);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_eventbridge_event_is_delivered() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    stack.endpoint("acme", &rx.url, Value::Null).await;
    let event: aws_lambda_events::eventbridge::EventBridgeEvent<Value> = serde_json::from_value(json!({
        "version": "0", "id": "eb-6a7e8feb", "detail-type": "document.submitted", "source": "erp",
        "account": "123456789012", "time": "2026-11-29T12:00:00Z", "region": "us-east-1", "resources": [],
        "detail": {"tenant_id": "acme", "doc": "INV-1"}
    }))
    .unwrap();
    let accepted = ingest::ingest_eventbridge(&stack.app, event).await.unwrap();
    assert_eq!(accepted.event_id, "eb-6a7e8feb");
    stack.wait_status(&accepted.deliveries[0].id, "delivered", WAIT).await;
    let hit = &rx.hits()[0];
    assert_eq!(hit.header("webhook-id"), "eb-6a7e8feb");
    assert_eq!(serde_json::from_slice::<Value>(&hit.body).unwrap(), json!({"tenant_id": "acme", "doc": "INV-1"}));
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_gets_a_clear_error_and_changes_nothing() {
    let stack = Stack::start_with(|_| {}, no_pollers()).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let ep = stack.endpoint("acme", &rx.url, Value::Null).await;
    let ep_id = ep["id"].as_str().unwrap();

    let cases: Vec<(&str, String, u16, &str, &str)> = vec![
        ("malformed", r#"{"tenant_id": "acme", "#.into(), 400, "invalid_json", "JSON"),
        (
            "no event_type",
            json!({"tenant_id": "acme", "payload": {}}).to_string(),
            422,
            "validation_error",
            "event_type",
        ),
        ("no tenant_id", json!({"event_type": "a.b", "payload": {}}).to_string(), 422, "validation_error", "tenant_id"),
        (
            "no payload",
            json!({"tenant_id": "acme", "event_type": "a.b"}).to_string(),
            422,
            "validation_error",
            "payload",
        ),
        (
            "wrong type",
            json!({"tenant_id": 7, "event_type": "a.b", "payload": {}}).to_string(),
            422,
            "validation_error",
            "tenant_id",
        ),
        (
            "payload over 256 KiB",
            json!({"tenant_id": "acme", "event_type": "a.b", "payload": {"blob": "x".repeat(256 * 1024)}}).to_string(),
            413,
            "payload_too_large",
            "payload",
        ),
    ];
    for (what, body, status, code, mentions) in cases {
        let (got, e) = stack.post_raw("/v1/events", body).await;
        assert_eq!(got, status, "{what}: {e}");
        assert_eq!(e["error"]["code"], code, "{what}: {e}");
        assert!(e["error"]["message"].as_str().unwrap().contains(mentions), "{what}: {e}");
    }
    // The rest of a body over the limit is not read, so the answer says the connection
    // closes and the client does not send its next request on it. A raw client reads the
    // answer while it uploads: the server closes with the body unread, and an HTTP client
    // library may report that as a failed upload (broken pipe) instead of the answer.
    let body = json!({"tenant_id": "acme", "event_type": "a.b", "payload": {"blob": "x".repeat(2 * 1024 * 1024)}});
    let (got, connection, e) = answer_to_an_oversized_upload(&stack.base, body.to_string().into_bytes()).await;
    assert_eq!((got.as_str(), connection.as_deref()), ("413", Some("close")), "{e}");
    assert_eq!(e["error"]["code"], "payload_too_large", "{e}");
    assert!(e["error"]["message"].as_str().unwrap_or_default().contains("limit"), "{e}");
    let (got, connection, _) = answer_to_an_oversized_upload(&stack.base, vec![b' '; 2 * 1024 * 1024]).await;
    assert_eq!((got.as_str(), connection.as_deref()), ("413", Some("close")));
    for (url, mentions) in [("ftp://example.com/x", "url"), ("not a url", "url")] {
        let (got, e) = stack.call(Method::POST, "/v1/endpoints", Some(json!({"tenant_id": "acme", "url": url}))).await;
        assert_eq!(got, 422, "{e}");
        assert!(e["error"]["message"].as_str().unwrap().contains(mentions), "{e}");
    }
    let (got, e) = stack
        .call(
            Method::POST,
            "/v1/endpoints",
            Some(json!({"tenant_id": "acme", "url": rx.url, "retry_policy": {"schedule_seconds": [1], "jitter": 2}})),
        )
        .await;
    assert_eq!(got, 422);
    assert!(e["error"]["message"].as_str().unwrap().contains("retry_policy.jitter"), "{e}");
    let (got, e) = stack.call(Method::GET, "/v1/deliveries/dlv_nope", None).await;
    assert_eq!((got, e["error"]["code"].as_str()), (404, Some("not_found")));
    let (got, _) = stack.call(Method::GET, "/v1/nowhere", None).await;
    assert_eq!(got, 404);
    let (got, e) = stack.call(Method::GET, "/v1/deliveries?status=delivered", None).await;
    assert_eq!(got, 422, "{e}");
    let (got, _) = stack.call(Method::GET, "/v1/deliveries?status=exhausted&cursor=garbage", None).await;
    assert_eq!(got, 422);

    // Nothing was written or queued.
    let (_, list) = stack.call(Method::GET, &format!("/v1/deliveries?endpoint_id={ep_id}"), None).await;
    assert_eq!(list["data"], json!([]));
    assert_eq!(webhooks_local::poll_once(&stack.app, &stack.sqs, 0).await.unwrap(), 0);

    // A tenant with no endpoints: accepted, nothing to deliver.
    let accepted = stack.event("nobody", "order.paid", json!({})).await;
    assert_eq!(accepted["deliveries"], json!([]));
    assert_eq!(rx.count(), 0);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn listing_by_endpoint_pages_through_every_delivery_once() {
    let stack = Stack::start_with(|_| {}, no_pollers()).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let ep = stack.endpoint("acme", &rx.url, Value::Null).await;
    let mut created = std::collections::BTreeSet::new();
    for i in 0..7 {
        created.insert(delivery_id(&stack.event("acme", "order.paid", json!({"i": i})).await, 0));
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut path = format!("/v1/deliveries?endpoint_id={}&limit=3", ep["id"].as_str().unwrap());
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let (status, page) = stack.call(Method::GET, &path, None).await;
        assert_eq!(status, 200, "{page}");
        pages += 1;
        for d in page["data"].as_array().unwrap() {
            assert_eq!(d["status"], "scheduled");
            assert!(seen.insert(d["id"].as_str().unwrap().to_string()), "seen twice: {d}");
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(seen, created);
    assert!(pages >= 3);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_repeated_event_id_reaches_only_endpoints_added_since_with_the_first_payload() {
    let stack = Stack::start(|_| {}).await;
    let first = Receiver::start(Reply::Status(200)).await;
    let later = Receiver::start(Reply::Status(200)).await;
    stack.endpoint("acme", &first.url, Value::Null).await;
    let event =
        |v: u32| json!({"tenant_id": "acme", "event_type": "order.paid", "payload": {"v": v}, "id": "evt_again"});
    let (status, accepted) = stack.call(Method::POST, "/v1/events", Some(event(1))).await;
    assert_eq!(status, 202, "{accepted}");
    stack.wait_status(&delivery_id(&accepted, 0), "delivered", WAIT).await;

    // A producer retries the same id (with a body that changed meanwhile) after an endpoint
    // was added: the new endpoint gets the event as first accepted, the old one nothing more.
    stack.endpoint("acme", &later.url, Value::Null).await;
    let (status, again) = stack.call(Method::POST, "/v1/events", Some(event(2))).await;
    assert_eq!(status, 202, "{again}");
    assert_eq!(again["deliveries"].as_array().unwrap().len(), 2, "{again}");
    for i in 0..2 {
        stack.wait_status(&delivery_id(&again, i), "delivered", WAIT).await;
    }
    assert_eq!(first.count(), 1);
    let hits = later.hits();
    assert_eq!(hits.len(), 1);
    assert_eq!(serde_json::from_slice::<Value>(&hits[0].body).unwrap(), json!({"v": 1}));
    assert_eq!(hits[0].header("webhook-id"), "evt_again");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_event_for_more_endpoints_than_one_transaction_holds_reaches_them_all() {
    // 105 endpoints for one tenant: above the default limit (50).
    let stack = Stack::start(|c| c.max_endpoints_per_tenant = 1_000).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    // 105 deliveries and the payload item: 106 conditional PutItems, 16 in flight at a time.
    for _ in 0..105 {
        stack.endpoint("acme", &rx.url, Value::Null).await;
    }
    let accepted = stack.event("acme", "order.paid", json!({"big": "fan-out"})).await;
    let ids: Vec<String> = (0..105).map(|i| delivery_id(&accepted, i)).collect();
    eventually("every endpoint got the event", Duration::from_secs(60), || async { rx.count() >= 105 }).await;
    for id in &ids {
        stack.wait_status(id, "delivered", WAIT).await;
    }
    assert_eq!(rx.count(), 105, "one request per endpoint");
    let (status, event) =
        stack.call(Method::GET, &format!("/v1/events/{}", accepted["event_id"].as_str().unwrap()), None).await;
    assert_eq!(status, 200);
    assert_eq!(event["deliveries"].as_array().unwrap().len(), 105);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replay_after_the_payload_retention_ends_exhausted_as_payload_expired() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(500)).await;
    stack.endpoint("acme", &rx.url, json!({"schedule_seconds": [1], "max_attempts": 1})).await;
    let accepted = stack.event("acme", "order.paid", json!({"n": 1})).await;
    let id = delivery_id(&accepted, 0);
    stack.wait_status(&id, "exhausted", WAIT).await;

    // What DynamoDB TTL does after WEBHOOKS_EVENT_RETENTION_DAYS: the payload item goes.
    stack.expire_payload("acme", accepted["event_id"].as_str().unwrap()).await;
    rx.set_default(Reply::Status(200));
    let (status, _) = stack.call(Method::POST, &format!("/v1/deliveries/{id}/replay"), None).await;
    assert_eq!(status, 202);
    let d = stack.wait_delivery(&id, WAIT, |d| d["attempt_count"] == 2 && d["status"] == "exhausted").await;
    assert_eq!(d["attempts"][1]["error"], "payload_expired", "{d}");
    assert_eq!(rx.count(), 1, "nothing was sent without its payload");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn one_sweeper_tick_takes_its_whole_cap_however_the_shards_fill() {
    // Messages "lost" (no pollers) and re-drive due at once: every delivery is due in the
    // index. 4 shards, 12 due and a cap of 12: an even split would take 3 a shard, and hashing
    // fills the shards unevenly (all four at exactly 3 is a 2% chance).
    let stack = Stack::start_with(
        |c| {
            c.redrive_after_seconds = 0;
            c.due_shards = 4;
            c.sweep_batch = 12;
        },
        no_pollers(),
    )
    .await;
    let rx = Receiver::start(Reply::Status(200)).await;
    stack.endpoint("acme", &rx.url, Value::Null).await;
    for i in 0..12 {
        stack.event("acme", "order.paid", json!({"i": i})).await;
    }
    let tick = sweep::sweep(&stack.app).await.unwrap();
    assert_eq!((tick.examined, tick.enqueued), (12, 12), "{tick:?}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn one_sweeper_tick_never_reads_more_than_its_cap() {
    // A cap of 5 on 4 shards: a share of 1 each leaves 1 for one shard, not for all four (the
    // simulation found ticks reading up to 3 past the cap this way: `make sim SEED=388`).
    let stack = Stack::start_with(
        |c| {
            c.redrive_after_seconds = 0;
            c.due_shards = 4;
            c.sweep_batch = 5;
        },
        no_pollers(),
    )
    .await;
    let rx = Receiver::start(Reply::Status(200)).await;
    stack.endpoint("acme", &rx.url, Value::Null).await;
    for i in 0..12 {
        stack.event("acme", "order.paid", json!({"i": i})).await;
    }
    let tick = sweep::sweep(&stack.app).await.unwrap();
    assert_eq!((tick.examined, tick.enqueued), (5, 5), "{tick:?}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn attempt_one_carries_the_payload_and_never_the_endpoint_or_its_secret() {
    let stack = Stack::start_with(|_| {}, no_pollers()).await;
    let ep = stack.endpoint("acme", "http://127.0.0.1:9/hook", Value::Null).await;
    let accepted = stack.event("acme", "order.paid", json!({"n": 1})).await;
    let out =
        stack.sqs.receive_message().queue_url(&stack.app.config.queue_url).wait_time_seconds(2).send().await.unwrap();
    let body = out.messages()[0].body().unwrap();
    let msg: AttemptMessage = serde_json::from_str(body).unwrap();
    assert_eq!(msg.delivery_id, delivery_id(&accepted, 0));
    assert_eq!(msg.payload.as_deref(), Some(r#"{"n":1}"#));
    assert!(!body.contains(ep["secret"].as_str().unwrap()), "no signing secret in a queue message: {body}");
    assert!(!body.contains("127.0.0.1:9"), "no endpoint URL in a queue message: {body}");
    stack.stop().await;
}

/// The next attempt message on the stack's queue (for tests without pollers).
async fn next_message(stack: &Stack) -> AttemptMessage {
    let out =
        stack.sqs.receive_message().queue_url(&stack.app.config.queue_url).wait_time_seconds(2).send().await.unwrap();
    webhooks::queue::decode(out.messages()[0].body().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_url_changed_after_ingest_is_the_one_attempt_one_uses() {
    let stack = Stack::start_with(|_| {}, no_pollers()).await;
    let old = Receiver::start(Reply::Status(200)).await;
    let new = Receiver::start(Reply::Status(200)).await;
    let ep = stack.endpoint("acme", &old.url, Value::Null).await;
    let path = format!("/v1/endpoints/{}", ep["id"].as_str().unwrap());
    stack.event("acme", "order.paid", json!({"n": 1})).await;
    let (status, _) = stack.call(Method::PATCH, &path, Some(json!({"url": new.url}))).await;
    assert_eq!(status, 200);
    deliver::deliver_message(&stack.app, &next_message(&stack).await).await.unwrap();
    assert_eq!((old.count(), new.count()), (0, 1), "the attempt started after the PATCH answered");
    stack.stop().await;
}

/// POSTs `body` to `{base}/v1/events` over a raw connection, reading the answer while the
/// body goes out (and stopping the upload if the server closes); returns the status code, the
/// `connection` header and the JSON body of the answer (null if none came).
async fn answer_to_an_oversized_upload(base: &str, body: Vec<u8>) -> (String, Option<String>, Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://").to_string();
    let sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut rd, mut wr) = sock.into_split();
    let head = format!(
        "POST /v1/events HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let upload = tokio::spawn(async move {
        if wr.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        for chunk in body.chunks(64 * 1024) {
            if wr.write_all(chunk).await.is_err() {
                return;
            }
        }
    });
    // The answer says `connection: close`: it ends where the server closes.
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    upload.abort();
    let text = String::from_utf8_lossy(&answer).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((text.as_str(), ""));
    let status = head.split_whitespace().nth(1).unwrap_or_default().to_string();
    let connection =
        head.lines().find_map(|l| l.to_ascii_lowercase().strip_prefix("connection:").map(|v| v.trim().to_string()));
    (status, connection, serde_json::from_str(body.trim()).unwrap_or(Value::Null))
}

/// Issue #35, failing input 4 (and #33's rate slot): an AWS call that fails between the
/// claim and the POST (here the endpoint read, once) left the delivery `sending`; the sweeper
/// later recorded attempt 1 as `lease_expired` ("may have reached the receiver") although
/// nothing was sent, and the receiver's first request said `webhook-attempt: 2`. The claim is
/// now given back: the receiver's first request is attempt 1, and the history holds no
/// attempt that never happened.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_call_between_claim_and_post_gives_the_claim_back_and_records_no_attempt() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use webhooks::store::StoreError;
    use webhooks_tests::{BoxFuture, Hook};
    let armed = Arc::new(AtomicBool::new(false));
    let hook: Hook = {
        let armed = armed.clone();
        Arc::new(move |call: &'static str| {
            let armed = armed.clone();
            Box::pin(async move {
                if call == "read_endpoint" && armed.swap(false, Ordering::SeqCst) {
                    return Err(StoreError::Aws("ThrottlingException (injected)".into()));
                }
                Ok(())
            }) as BoxFuture<Result<(), StoreError>>
        })
    };
    let stack = Stack::start_wrapped(|_| {}, Options::default(), |app| Serialized::hooked(&app, Some(hook))).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    stack.endpoint("acme", &rx.url, Value::Null).await;
    armed.store(true, Ordering::SeqCst);
    let accepted = stack.event("acme", "order.paid", json!({"n": 1})).await;
    let id = accepted["deliveries"][0]["id"].as_str().unwrap().to_string();
    let done = stack.wait_status(&id, "delivered", Duration::from_secs(30)).await;
    assert!(!armed.load(Ordering::SeqCst), "the endpoint read failed once");
    assert_eq!(done["attempt_count"], 1, "no attempt was spent on the failed call: {done:#}");
    let attempts = done["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{done:#}");
    assert!(attempts[0]["error"].is_null(), "no lease_expired record of an attempt never made: {done:#}");
    assert_eq!(rx.count(), 1);
    assert_eq!(rx.hits()[0].header("webhook-attempt"), "1");
    stack.stop().await;
}

/// The next attempt message on the stack's queue, waiting for it to become visible (its
/// delay), left invisible for the queue's visibility timeout (30 s).
async fn eventually_message(stack: &Stack) -> AttemptMessage {
    for _ in 0..10 {
        let out = stack
            .sqs
            .receive_message()
            .queue_url(&stack.app.config.queue_url)
            .wait_time_seconds(2)
            .send()
            .await
            .unwrap();
        if let Some(m) = out.messages().first() {
            return webhooks::queue::decode(m.body().unwrap()).unwrap();
        }
    }
    panic!("no message on the queue within 20 s")
}

/// Sends `body` to the stack's attempt queue as anyone with `sqs:SendMessage` could.
async fn send_to_queue(stack: &Stack, body: &Value) {
    stack
        .sqs
        .send_message()
        .queue_url(&stack.app.config.queue_url)
        .message_body(body.to_string())
        .send()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_queue_message_cannot_start_an_attempt_before_its_scheduled_time() {
    let stack = Stack::start_with(|_| {}, no_pollers()).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    rx.script([Reply::Status(500)]);
    // Attempt 2 waits an hour (longer than SQS's delay: the sweeper would send its message then).
    stack.endpoint("acme", &rx.url, json!({"schedule_seconds": [3600], "max_attempts": 3})).await;
    let id = delivery_id(&stack.event("acme", "order.paid", json!({"n": 1})).await, 0);
    deliver::deliver_message(&stack.app, &next_message(&stack).await).await.unwrap();
    let d = stack.delivery(&id).await;
    assert_eq!((d["status"].as_str(), d["attempt_count"].as_u64()), (Some("scheduled"), Some(1)), "{d}");

    // A message for attempt 2, sent to the queue now, with a payload of its own.
    send_to_queue(&stack, &json!({"delivery_id": id, "attempt": 2, "payload": "{\"forged\":true}"})).await;
    eventually("the message to be taken", WAIT, || async {
        webhooks_local::poll_once(&stack.app, &stack.sqs, 1).await.unwrap() > 0
    })
    .await;
    assert_eq!(rx.count(), 1, "no request before the attempt's time");
    let after = stack.delivery(&id).await;
    assert_eq!(after["status"], "scheduled", "{after}");
    assert_eq!(after["attempt_count"], 1, "{after}");
    assert_eq!(after["next_attempt_at"], d["next_attempt_at"], "the schedule stands");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_queue_message_cannot_choose_the_payload_that_is_signed() {
    let stack = Stack::start_with(|_| {}, no_pollers()).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    rx.script([Reply::Status(500)]);
    let ep = stack.endpoint("acme", &rx.url, json!({"schedule_seconds": [1], "max_attempts": 3})).await;
    let id = delivery_id(&stack.event("acme", "order.paid", json!({"n": 1})).await, 0);
    deliver::deliver_message(&stack.app, &next_message(&stack).await).await.unwrap();

    // Attempt 2 is due in a second. Its own message is taken off the queue (and left
    // invisible), then a message for it with another payload is sent: that one makes attempt 2,
    // and what is signed and sent is the stored payload.
    let own = eventually_message(&stack).await;
    assert_eq!((own.delivery_id.as_str(), own.attempt), (id.as_str(), 2));
    send_to_queue(&stack, &json!({"delivery_id": id, "attempt": 2, "payload": "{\"forged\":true}"})).await;
    eventually("attempt 2", WAIT, || async {
        webhooks_local::poll_once(&stack.app, &stack.sqs, 1).await.unwrap();
        rx.count() >= 2
    })
    .await;
    let d = stack.wait_status(&id, "delivered", WAIT).await;
    assert_eq!(d["attempt_count"], 2, "{d}");
    let hits = rx.hits();
    assert_eq!(hits.len(), 2);
    assert_eq!(&hits[1].body[..], br#"{"n":1}"#, "the stored payload, byte for byte");
    let key = webhooks::domain::signing::secret_key(ep["secret"].as_str().unwrap()).unwrap();
    let timestamp: i64 = hits[1].header("webhook-timestamp").parse().unwrap();
    let expected = webhooks::domain::signing::sign(&key, &hits[1].header("webhook-id"), timestamp, br#"{"n":1}"#);
    assert!(hits[1].header("webhook-signature").contains(&expected), "signed over the stored payload");
    stack.stop().await;
}

/// Issue #35, failing input 2: the receiver answered 200, the record of that attempt was
/// throttled on every one of the SDK's default 3 tries, deliver returned the message, and the
/// sweeper later recorded the attempt as `lease_expired` and sent the event again. A record
/// is now tried for longer (`RECORD_MAX_ATTEMPTS`); its guard keeps a late one right.
#[tokio::test(flavor = "multi_thread")]
async fn a_2xx_whose_record_is_throttled_past_the_sdk_default_tries_is_still_recorded_delivered() {
    let stack = Stack::start_with(|_| {}, no_pollers()).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    stack.endpoint("acme", &rx.url, Value::Null).await;
    let id = delivery_id(&stack.event("acme", "order.paid", json!({"n": 1})).await, 0);
    let msg = next_message(&stack).await;
    // The record's first 4 tries throttled (the SDK's default makes 3).
    let throttle = webhooks_tests::Throttle::new("UpdateItem", "attempts = :attempts", 4);
    let sdk = webhooks::app::aws_sdk_config().await;
    let conf = aws_sdk_dynamodb::config::Builder::from(&sdk).interceptor(throttle.clone()).build();
    let app = webhooks::App::from_clients(
        (*stack.app.config).clone(),
        aws_sdk_dynamodb::Client::from_conf(conf),
        stack.sqs.clone(),
        None,
    )
    .unwrap();
    let handled = deliver::deliver_message(&app, &msg).await.unwrap();
    assert!(
        matches!(handled, deliver::Handled::Attempted(webhooks::domain::model::DeliveryStatus::Delivered, _)),
        "{handled:?}"
    );
    assert_eq!(throttle.left(), 0, "the record was throttled 4 times");
    let d = stack.delivery(&id).await;
    assert_eq!(d["status"], "delivered", "{d}");
    assert_eq!(d["attempts"][0]["status_code"], 200);
    assert_eq!(rx.count(), 1);
    stack.stop().await;
}

/// Issue #35, failing input 5 (deliver's side): a delivery claimed after its endpoint was
/// deleted recorded a synthetic `endpoint_deleted` attempt, raised `attempt_count`, left
/// `reason` empty and counted as exhausted. Nothing was sent, so nothing is recorded now: the
/// delivery ends with reason `endpoint_deleted` and its attempt number given back.
#[tokio::test(flavor = "multi_thread")]
async fn a_delivery_whose_endpoint_is_gone_ends_with_reason_endpoint_deleted_and_no_attempt() {
    let stack = Stack::start_with(|_| {}, no_pollers()).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let ep = stack.endpoint("acme", &rx.url, Value::Null).await;
    let id = delivery_id(&stack.event("acme", "order.paid", json!({"n": 1})).await, 0);
    // Gone from the table (as after a delete whose clean-up has not reached this delivery).
    let deleted = webhooks::store::DeletedEndpoint {
        tenant_id: webhooks_tests::id("acme"),
        endpoint_id: webhooks_tests::id(ep["id"].as_str().unwrap()),
        rate_limit_per_second: None,
        deleted_at: chrono::Utc::now(),
        expires_at: chrono::Utc::now().timestamp() + 86_400,
    };
    stack.app.store.delete_endpoint(&deleted).await.unwrap();
    let handled = deliver::deliver_message(&stack.app, &next_message(&stack).await).await.unwrap();
    assert_eq!(handled, deliver::Handled::Ended);
    let d = stack.delivery(&id).await;
    assert_eq!((d["status"].as_str(), d["reason"].as_str()), (Some("exhausted"), Some("endpoint_deleted")), "{d}");
    assert_eq!(d["attempt_count"], 0, "{d}");
    assert_eq!(d["attempts"].as_array().map(Vec::len), Some(0), "no attempt was made: {d}");
    assert_eq!(rx.count(), 0);
    stack.stop().await;
}

/// Issue #35, failing input 5 (the delete's side): a forced delete ended a `sending` delivery
/// while its POST was in flight, so the API said exhausted while the receiver logged 200. Now
/// the worker's record stands: the delivery is delivered, as the receiver saw it.
#[tokio::test(flavor = "multi_thread")]
async fn a_forced_delete_during_a_post_leaves_the_attempt_to_its_record() {
    let stack = Stack::start_with(|_| {}, no_pollers()).await;
    let rx = Receiver::start(Reply::Hang(Duration::from_millis(1500))).await;
    let ep = stack.endpoint("acme", &rx.url, Value::Null).await;
    let id = delivery_id(&stack.event("acme", "order.paid", json!({"n": 1})).await, 0);
    let msg = next_message(&stack).await;
    let app = stack.app.clone();
    let worker = tokio::spawn(async move { deliver::deliver_message(&app, &msg).await });
    eventually("the POST to be in flight", WAIT, || async { rx.count() > 0 }).await;
    let path = format!("/v1/endpoints/{}?force=true", ep["id"].as_str().unwrap());
    let (status, body) = stack.call(Method::DELETE, &path, None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(stack.delivery(&id).await["status"], "sending", "not ended while its POST is in flight");
    let handled = worker.await.unwrap().unwrap();
    assert!(
        matches!(handled, deliver::Handled::Attempted(webhooks::domain::model::DeliveryStatus::Delivered, _)),
        "{handled:?}"
    );
    let d = stack.delivery(&id).await;
    assert_eq!(d["status"], "delivered", "as the receiver saw it: {d}");
    assert_eq!(d["attempts"][0]["status_code"], 200);
    stack.stop().await;
}

/// Issue #35's fault harness: events flow through the local runtime (pollers and sweeper)
/// while a share of every DynamoDB and SQS try of the app fails (`Chaos`: a throttle or a 500
/// before the request reaches the emulator, or the answer lost after the write took effect;
/// the SDK's retries meet the same odds, so some calls fail on every try), to receivers that
/// answer 200, flap between 500 and 200, answer 429 with `Retry-After: 1`, or answer slowly.
/// Producers retry a 503 with the same event id. Then the faults stop, every delivery is
/// waited for, and each is reconciled with what its receiver saw: nothing lost or stuck, no
/// attempt number sent twice, every recorded answer seen by the receiver, every `delivered`
/// answered 2xx. `WEBHOOKS_FAULT_EVENTS` sets the size (40 events to 4 endpoints in
/// `make test`; `make faults` runs 300) and `WEBHOOKS_FAULT_RATE` the share of tries struck
/// (0.05).
///
/// Writes that outlast every SDK retry (`WEBHOOKS_FAULT_OUTLAST`, 3% of record and counter
/// writes) are reconciled too: an attempt sent again after its receiver answered 2xx, and an
/// endpoint whose stats disagree with its deliveries, are counted and printed always, and fail
/// the run only with `WEBHOOKS_FAULT_STRICT=1` (`make faults`). At 300 events and 10% they are
/// not yet 0 (issue #54, item 19: docs/guarantees.md, "An answer seen is kept", names the
/// windows left), so at `make test`'s size they would fail CI by chance, not by a change;
/// `pipeline::a_2xx_whose_record_and_count_fail_on_every_try_is_kept_counted_and_not_sent_again`
/// holds the mechanism to them deterministically.
#[tokio::test(flavor = "multi_thread")]
async fn under_aws_faults_nothing_is_lost_stuck_doubled_or_misreported() {
    let events: usize = std::env::var("WEBHOOKS_FAULT_EVENTS").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    let rate: f64 = std::env::var("WEBHOOKS_FAULT_RATE").ok().and_then(|v| v.parse().ok()).unwrap_or(0.05);
    let outlast: f64 = std::env::var("WEBHOOKS_FAULT_OUTLAST").ok().and_then(|v| v.parse().ok()).unwrap_or(0.03);
    let chaos = webhooks_tests::Chaos::new(rate, 35);
    let outlasting = webhooks_tests::faults::Outlasting::new(outlast, 36);
    let sdk = webhooks::app::aws_sdk_config().await;
    let ddb = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&sdk)
            .interceptor(chaos.clone())
            .interceptor(outlasting.clone())
            .build(),
    );
    let sqs =
        aws_sdk_sqs::Client::from_conf(aws_sdk_sqs::config::Builder::from(&sdk).interceptor(chaos.clone()).build());
    let stack = Stack::start_wrapped(
        |c| {
            c.request_timeout = Duration::from_millis(2000);
            c.lease_margin = Duration::from_millis(2000);
            // A lost message or a lapsed lease is found 3 s after it was due.
            c.redrive_after_seconds = 3;
            c.max_endpoints_per_tenant = 10;
        },
        Options { pollers: 4, ..Options::default() },
        move |app| webhooks::App::from_clients((*app.config).clone(), ddb, sqs, None).expect("the faulty app"),
    )
    .await;
    let ok = Receiver::start(Reply::Status(200)).await;
    let flapping = Receiver::start(Reply::Status(200)).await;
    flapping.script((0..events * 4).map(|i| Reply::Status(if i % 2 == 0 { 500 } else { 200 })));
    let limited = Receiver::start(Reply::Status(200)).await;
    limited.script((0..events).map(|_| Reply::WithHeaders(429, vec![("retry-after", "1".to_string())])));
    let slow = Receiver::start(Reply::SlowStatus(Duration::from_millis(700), 200)).await;
    let mut endpoints = Vec::new();
    for rx in [&ok, &flapping, &limited, &slow] {
        // No circuit breaker: a paused endpoint's deliveries would wait, held, for its probe.
        let body = json!({"tenant_id": "acme", "url": rx.url, "circuit_breaker_threshold": 0,
            "retry_policy": {"schedule_seconds": [1, 1, 2], "max_attempts": 8}});
        let (status, ep) = stack.call(Method::POST, "/v1/endpoints", Some(body)).await;
        assert_eq!(status, 201, "{ep}");
        endpoints.push((ep["id"].as_str().unwrap().to_string(), rx));
    }

    chaos.set(true);
    outlasting.set(true);
    let mut refused = 0;
    for n in 0..events {
        let body = json!({"tenant_id": "acme", "event_type": "order.paid", "id": format!("evt_fault_{n}"),
            "payload": {"n": n}});
        loop {
            let (status, answer) = stack.call(Method::POST, "/v1/events", Some(body.clone())).await;
            match status {
                202 => break,
                503 => refused += 1,
                other => panic!("event {n}: {other} {answer}"),
            }
        }
    }
    // Faults go on while the first attempts and retries run, then stop.
    tokio::time::sleep(Duration::from_secs(5)).await;
    chaos.set(false);
    outlasting.set(false);
    let tally = chaos.tally();
    let doomed = outlasting.doomed();

    let ids: Vec<(String, String, usize)> = (0..events)
        .flat_map(|n| {
            endpoints.iter().enumerate().map(move |(k, (ep, _))| {
                (
                    webhooks::domain::model::delivery_id(
                        &webhooks_tests::id(format!("evt_fault_{n}")),
                        &webhooks_tests::id(ep),
                    )
                    .into_string(),
                    format!("evt_fault_{n}"),
                    k,
                )
            })
        })
        .collect();
    // Every delivery reaches delivered or exhausted; one that does not within the wait (long
    // enough for the whole retry schedule twice over) is stuck, and named.
    let mut finals = std::collections::HashMap::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60 + 2 * events as u64);
    loop {
        let mut pending = Vec::new();
        let open: Vec<&String> = ids.iter().map(|(id, _, _)| id).filter(|id| !finals.contains_key(*id)).collect();
        for id in open {
            let d = stack.delivery(id).await;
            if d["status"] == "delivered" || d["status"] == "exhausted" {
                finals.insert(id.clone(), d);
            } else {
                pending.push(d);
            }
        }
        if pending.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} deliveries stuck, e.g. {}",
            pending.len(),
            pending.iter().take(3).map(|d| d.to_string()).collect::<Vec<_>>().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Reconcile with what each receiver saw: (webhook-id, webhook-attempt) -> answers seen.
    let mut problems = Vec::new();
    // What writes outlasting every retry can still cause (see above): strict in `make faults`.
    let mut outlasted = Vec::new();
    let strict = std::env::var("WEBHOOKS_FAULT_STRICT").is_ok_and(|v| v == "1");
    let (mut lease_expired, mut resent_after_2xx) = (0, 0);
    // Whether a receiver answered its `i`th request 2xx (its script, then its default).
    let answered_2xx = |k: usize, i: usize| match k {
        1 => i >= events * 4 || i % 2 == 1,
        2 => i >= events,
        _ => true,
    };
    for (k, (_, rx)) in endpoints.iter().enumerate() {
        let mut seen: std::collections::HashMap<(String, String), usize> = std::collections::HashMap::new();
        let mut got_2xx: std::collections::HashSet<String> = std::collections::HashSet::new();
        for (i, hit) in rx.hits().iter().enumerate() {
            *seen.entry((hit.header("webhook-id"), hit.header("webhook-attempt"))).or_default() += 1;
            let event = hit.header("webhook-id");
            if got_2xx.contains(&event) {
                resent_after_2xx += 1;
                outlasted
                    .push(format!("endpoint {k}: {event} attempt {} sent after a 2xx", hit.header("webhook-attempt")));
            }
            if answered_2xx(k, i) {
                got_2xx.insert(event);
            }
        }
        for ((event, attempt), n) in &seen {
            if *n > 1 {
                problems.push(format!("endpoint {k}: {event} attempt {attempt} sent {n} times"));
            }
        }
        for (id, event, _) in ids.iter().filter(|(_, _, e)| *e == k) {
            let d = &finals[id];
            let attempts = d["attempts"].as_array().cloned().unwrap_or_default();
            for a in &attempts {
                let number = a["attempt"].to_string();
                if a["error"] == "lease_expired" {
                    lease_expired += 1;
                } else if a["status_code"].is_u64() && !seen.contains_key(&(event.clone(), number.clone())) {
                    problems.push(format!("{id}: attempt {number} recorded {} but never seen", a["status_code"]));
                }
            }
            if d["status"] == "delivered" {
                let last = attempts.last().cloned().unwrap_or_default();
                let code = last["status_code"].as_u64().unwrap_or(0);
                if !(200..300).contains(&code) {
                    problems.push(format!("{id}: delivered, but its last attempt is {last}"));
                }
            }
        }
    }
    // Each endpoint's stats count its delivered deliveries (a count that failed on every try
    // is sent to the queue and counted a few seconds later: waited for).
    let mut stats_disagree = 0;
    for (k, (ep, _)) in endpoints.iter().enumerate() {
        let delivered = ids.iter().filter(|(id, _, e)| *e == k && finals[id]["status"] == "delivered").count();
        let path = format!("/v1/endpoints/{ep}/stats");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let counted = loop {
            let (status, stats) = stack.call(Method::GET, &path, None).await;
            assert_eq!(status, 200, "{stats}");
            let counted = stats["counts"]["delivered"].as_u64().unwrap_or(0) as usize;
            if counted == delivered || std::time::Instant::now() > deadline {
                break counted;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        if counted != delivered {
            stats_disagree += 1;
            outlasted.push(format!("endpoint {k}: stats count {counted} delivered, {delivered} were"));
        }
    }
    let struck: usize = tally.values().sum();
    println!(
        "fault harness: {events} events x {} endpoints, {struck} tries struck ({tally:?}), {} record writes and {} counter writes failed on every try, {refused} posts answered 503 and retried, {lease_expired} lease_expired records, {resent_after_2xx} re-sent after a 2xx, {stats_disagree} endpoints whose stats disagree",
        endpoints.len(),
        doomed.0,
        doomed.1,
    );
    if !outlasted.is_empty() {
        println!("after writes that outlasted their retries ({}):\n{}", outlasted.len(), outlasted.join("\n"));
    }
    if strict {
        assert!(doomed.0 > 0 && doomed.1 > 0, "no write outlasted its retries: {doomed:?}");
        problems.extend(outlasted);
    }
    assert!(struck > 0, "the harness struck nothing");
    assert!(problems.is_empty(), "{} problems:\n{}", problems.len(), problems.join("\n"));
    stack.stop().await;
}

/// Issue #54 item 19: an attempt answered 200 whose record fails on every try (the SDK's
/// retries included), and the sweeper comes first and records it `lease_expired`: the 200 is
/// what the delivery says in the end, the event is not sent again, and the endpoint's stats
/// count the delivery although their counter write failed on every try too.
#[tokio::test(flavor = "multi_thread")]
async fn a_2xx_whose_record_and_count_fail_on_every_try_is_kept_counted_and_not_sent_again() {
    let faults = webhooks_tests::faults::Faults::outlasting(1, 1);
    let f = faults.clone();
    let stack = Stack::start_wrapped(
        |c| {
            c.request_timeout = Duration::from_millis(1000);
            c.lease_margin = Duration::from_millis(1000);
            c.redrive_after_seconds = 1;
        },
        no_pollers(),
        move |app| f.wrap(app),
    )
    .await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let ep = stack.endpoint("acme", &rx.url, Value::Null).await["id"].as_str().unwrap().to_string();
    let id = delivery_id(&stack.event("acme", "order.paid", json!({"n": 1})).await, 0);
    faults.arm();
    // Attempt 1: answered 200, its record fails.
    eventually("attempt 1 to be made", WAIT, || async {
        webhooks_local::poll_once(&stack.app, &stack.sqs, 1).await.unwrap();
        rx.count() > 0
    })
    .await;
    // The lease runs out first: the sweeper records the attempt lapsed.
    eventually("the sweeper to find the lease lapsed", WAIT, || async {
        sweep::sweep(&stack.app).await.unwrap().recovered_leases > 0
    })
    .await;
    // Then the queue is worked until the delivery is settled and counted.
    let stats = format!("/v1/endpoints/{ep}/stats");
    eventually("the delivery delivered and counted", Duration::from_secs(60), || async {
        webhooks_local::poll_once(&stack.app, &stack.sqs, 1).await.unwrap();
        sweep::sweep(&stack.app).await.unwrap();
        let d = stack.delivery(&id).await;
        let (_, s) = stack.call(Method::GET, &stats, None).await;
        d["status"] == "delivered" && s["counts"]["delivered"] == 1
    })
    .await;
    let d = stack.delivery(&id).await;
    assert_eq!(rx.count(), 1, "the event was sent again after its 200: {d:#}");
    let attempts = d["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{d:#}");
    assert_eq!((attempts[0]["attempt"].clone(), attempts[0]["status_code"].clone()), (json!(1), json!(200)), "{d:#}");
    assert!(attempts[0]["error"].is_null(), "{d:#}");
    stack.stop().await;
}

/// The code block of `lang` under the heading `## {heading}` in docs/receivers.md: the
/// receiver exactly as the page shows it.
fn receiver_snippet(heading: &str, lang: &str) -> String {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/receivers.md"))
        .expect("docs/receivers.md");
    let section = page.split(&format!("\n## {heading}\n")).nth(1).expect("the heading");
    let block = section.split(&format!("```{lang}\n")).nth(1).expect("the code block");
    block.split("\n```").next().expect("the block's end").to_string()
}

/// Where `make test` installs the receivers' Standard Webhooks libraries (scripts/test.sh).
fn receivers_dir() -> std::path::PathBuf {
    std::env::var_os("WEBHOOKS_TEST_RECEIVERS")
        .map_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.local/receivers"), Into::into)
}

/// Starts `program script` with the receiver's PORT and WEBHOOK_SECRET, registers nothing:
/// the caller made the endpoint whose secret it verifies with.
async fn start_receiver(
    program: &std::path::Path,
    script: &std::path::Path,
    port: u16,
    secret: &str,
    envs: &[(&str, std::ffi::OsString)],
) -> Running {
    assert!(
        program.exists(),
        "{} is missing: run `make test` (scripts/test.sh installs the receivers' libraries into .local/receivers)",
        program.display()
    );
    let mut cmd = std::process::Command::new(program);
    cmd.arg(script).env("PORT", port.to_string()).env("WEBHOOK_SECRET", secret);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let child = Running(cmd.spawn().expect("start the receiver"));
    eventually("the receiver to listen", WAIT, || async move {
        tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok()
    })
    .await;
    child
}

#[tokio::test(flavor = "multi_thread")]
async fn a_receiver_in_python_or_node_verifies_our_signature() {
    let stack = Stack::start(|_| {}).await;
    let dir = receivers_dir();
    let scripts = std::env::temp_dir().join(format!("webhooks-receivers-{}", std::process::id()));
    std::fs::create_dir_all(&scripts).unwrap();
    let node_path = dir.join("node_modules").into_os_string();
    let languages = [
        ("Python", "python", "receiver.py", dir.join("venv/bin/python"), vec![]),
        ("Node.js", "js", "receiver.js", std::path::PathBuf::from("node"), vec![("NODE_PATH", node_path)]),
    ];
    for (heading, lang, file, program, envs) in languages {
        let script = scripts.join(file);
        std::fs::write(&script, receiver_snippet(heading, lang)).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let tenant = format!("rx-{lang}");
        let ep = stack.endpoint(&tenant, &format!("http://127.0.0.1:{port}/webhook"), Value::Null).await;
        let secret = ep["secret"].as_str().unwrap();
        let program = if program.is_absolute() { program } else { which(&program) };
        let _receiver = start_receiver(&program, &script, port, secret, &envs).await;
        // A real delivery: the receiver verifies it and answers 204.
        let accepted = stack.event(&tenant, "order.paid", json!({"order": "o_1", "note": "naïve café"})).await;
        let d = stack.wait_status(&delivery_id(&accepted, 0), "delivered", WAIT).await;
        assert_eq!(d["attempts"][0]["status_code"], 204, "{heading}: {d:#}");
        // A forged request: refused.
        let now = chrono::Utc::now().timestamp().to_string();
        let forged = stack
            .http
            .post(format!("http://127.0.0.1:{port}/webhook"))
            .header("webhook-id", "evt_forged")
            .header("webhook-timestamp", now)
            .header("webhook-signature", "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
            .body(r#"{"order":"o_1"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(forged.status().as_u16(), 400, "{heading} refuses a forged signature");
    }
    let _ = std::fs::remove_dir_all(&scripts);
    stack.stop().await;
}

/// A receiver process, killed when dropped.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `name` found on PATH.
fn which(name: &std::path::Path) -> std::path::PathBuf {
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|p| p.join(name)).find(|p| p.exists()))
        .unwrap_or_else(|| name.to_path_buf())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_of_deliveries_is_counted_in_each_endpoints_stats_once() {
    // Deliver counts a batch's deliveries with one counter write per endpoint (bench section
    // 1, "at load"): the stats still count each delivery once.
    let stack = Stack::start_with(|_| {}, no_pollers()).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let a = stack.endpoint("acme", &rx.url, Value::Null).await["id"].as_str().unwrap().to_string();
    let b = stack.endpoint("acme", &rx.url, Value::Null).await["id"].as_str().unwrap().to_string();
    for i in 0..4 {
        stack.event("acme", "order.paid", json!({"n": i})).await;
    }
    let mut received = 0;
    for _ in 0..20 {
        received += webhooks_local::poll_once(&stack.app, &stack.sqs, 1).await.unwrap();
        if received >= 8 {
            break;
        }
    }
    assert_eq!((received, rx.count()), (8, 8));
    for ep in [&a, &b] {
        let (status, stats) = stack.call(Method::GET, &format!("/v1/endpoints/{ep}/stats"), None).await;
        assert_eq!(status, 200, "{stats}");
        assert_eq!(stats["counts"]["delivered"], 4, "{stats}");
    }
    stack.stop().await;
}
