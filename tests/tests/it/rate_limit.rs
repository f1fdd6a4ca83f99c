//! Per-endpoint rate limits (docs/rate-limits.md, "Rate limits"): `rate_limit_per_second` holds across
//! concurrent pollers, attempts over it wait without counting as attempts, and the adaptive
//! limit halves on a 429 without `Retry-After` and recovers additively.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // test helpers fail loudly

use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use webhooks_local::Options;
use webhooks_tests::{Receiver, Reply, Stack};

async fn create(stack: &Stack, body: Value) -> (u16, Value) {
    stack.call(Method::POST, "/v1/endpoints", Some(body)).await
}

async fn get_endpoint(stack: &Stack, id: &str) -> Value {
    let (status, ep) = stack.call(Method::GET, &format!("/v1/endpoints/{id}"), None).await;
    assert_eq!(status, 200, "{ep}");
    ep
}

fn ids(accepted: &Value) -> String {
    accepted["deliveries"][0]["id"].as_str().expect("delivery id").to_string()
}

/// Requests per `webhook-timestamp` second (the second the attempt started in).
fn per_second(rx: &Receiver) -> BTreeMap<i64, usize> {
    let mut out = BTreeMap::new();
    for h in rx.hits() {
        *out.entry(h.header("webhook-timestamp").parse::<i64>().unwrap()).or_insert(0) += 1;
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn the_limit_holds_across_concurrent_pollers_and_waiting_is_not_an_attempt() {
    let stack = Stack::start_with(|_| {}, Options { pollers: 4, sweeper: false, ..Options::default() }).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    // One attempt only: a wait counted as an attempt would exhaust the delivery.
    let body = json!({"tenant_id": "acme", "url": rx.url, "rate_limit_per_second": 3, "rate_limit_adaptive": false,
        "retry_policy": {"schedule_seconds": [1], "max_attempts": 1}});
    let (status, ep) = create(&stack, body).await;
    assert_eq!(status, 201, "{ep}");
    assert_eq!((ep["rate_limit_per_second"].as_u64(), ep["effective_rate_per_second"].as_f64()), (Some(3), Some(3.0)));

    let events = 24;
    let mut deliveries = Vec::new();
    for i in 0..events {
        deliveries.push(ids(&stack.event("acme", "order.paid", json!({"i": i})).await));
    }
    for id in &deliveries {
        let d = stack.wait_status(id, "delivered", Duration::from_secs(90)).await;
        assert_eq!(d["attempt_count"], 1, "waiting is not an attempt: {d:#}");
        assert_eq!(d["attempts"].as_array().unwrap().len(), 1, "{d:#}");
    }
    assert_eq!(rx.count(), events, "every delivery sent once");
    let seconds = per_second(&rx);
    assert!(seconds.values().all(|n| *n <= 3), "at most 3 attempts started in any second: {seconds:?}");
    assert!(seconds.len() >= events / 3, "{events} attempts at 3 a second take at least 8 seconds: {seconds:?}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_429_without_retry_after_halves_the_effective_rate_and_successes_bring_it_back() {
    let stack = Stack::start_with(|_| {}, Options { pollers: 4, sweeper: false, ..Options::default() }).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    rx.script([Reply::Status(429)]);
    let body = json!({"tenant_id": "acme", "url": rx.url, "rate_limit_per_second": 8,
        "retry_policy": {"schedule_seconds": [1], "max_attempts": 1}});
    let (status, ep) = create(&stack, body).await;
    assert_eq!(status, 201, "{ep}");
    let id = ep["id"].as_str().unwrap().to_string();
    assert_eq!(ep["rate_limit_adaptive"], true, "adaptive by default");

    // A 429 without Retry-After: the rate in force halves (8 -> 4); the attempt itself is an
    // attempt (max_attempts 1: a dead letter).
    let first = ids(&stack.event("acme", "order.paid", json!({"i": 0})).await);
    let d = stack.wait_status(&first, "exhausted", Duration::from_secs(30)).await;
    assert_eq!(d["attempts"][0]["status_code"], 429);
    // Deliver moves the rate right after it records the attempt (the record answers first).
    webhooks_tests::eventually("the effective rate halved", Duration::from_secs(30), || async {
        get_endpoint(&stack, &id).await["effective_rate_per_second"].as_f64() == Some(4.0)
    })
    .await;
    let ep = get_endpoint(&stack, &id).await;
    assert_eq!(ep["effective_rate_per_second"].as_f64(), Some(4.0), "{ep:#}");
    assert_eq!(ep["rate_limit_per_second"], 8, "the configured limit stays");

    // A burst of 16 at 4 a second: most of them wait, none of them as an attempt (one attempt
    // allowed, and all are delivered). Posted together, so that they are a burst however long
    // one ingest takes on the emulator (posted one after another at 4 a second or slower,
    // none would have to wait).
    let posted = futures::future::join_all((0..16).map(|i| stack.event("acme", "order.paid", json!({"i": i})))).await;
    let burst: Vec<_> = posted.iter().map(ids).collect();
    let mut waited = 0;
    for d in &burst {
        let d = stack.wait_status(d, "delivered", Duration::from_secs(60)).await;
        assert_eq!(d["attempt_count"], 1, "{d:#}");
        let created = chrono::DateTime::parse_from_rfc3339(d["created_at"].as_str().unwrap()).unwrap();
        let at = chrono::DateTime::parse_from_rfc3339(d["attempts"][0]["at"].as_str().unwrap()).unwrap();
        if at - created >= chrono::Duration::seconds(1) {
            waited += 1;
        }
    }
    assert!(waited > 0, "some of the burst waited for the limit");

    // 2xx answers add 1 a second-step back, up to the configured 8.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    for n in 100.. {
        stack.event("acme", "order.paid", json!({"i": n})).await;
        if get_endpoint(&stack, &id).await["effective_rate_per_second"].as_f64() == Some(8.0) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the effective rate did not come back to 8: {:#}",
            get_endpoint(&stack, &id).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let seconds = per_second(&rx);
    assert!(seconds.values().all(|n| *n <= 8), "{seconds:?}");
    assert_eq!(rx.hits().iter().filter(|h| h.header("webhook-attempt") != "1").count(), 0, "no retries were needed");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn rate_limit_fields_are_validated_and_patchable() {
    let stack = Stack::start_with(|_| {}, Options { pollers: 0, sweeper: false, ..Options::default() }).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    for bad in [json!(0), json!(-1), json!(2.5), json!("5"), json!(10_001), json!(true)] {
        let (status, e) =
            create(&stack, json!({"tenant_id": "acme", "url": rx.url, "rate_limit_per_second": bad})).await;
        assert_eq!((status, e["error"]["code"].as_str()), (422, Some("validation_error")), "{bad}: {e}");
        assert!(e["error"]["message"].as_str().unwrap().contains("rate_limit_per_second"), "{e}");
    }
    let (status, e) = create(&stack, json!({"tenant_id": "acme", "url": rx.url, "rate_limit_adaptive": "no"})).await;
    assert_eq!((status, e["error"]["code"].as_str()), (422, Some("validation_error")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("rate_limit_adaptive"), "{e}");

    let (status, ep) = create(&stack, json!({"tenant_id": "acme", "url": rx.url})).await;
    assert_eq!(status, 201);
    assert_eq!((ep["rate_limit_per_second"].clone(), ep.get("effective_rate_per_second")), (Value::Null, None));
    let path = format!("/v1/endpoints/{}", ep["id"].as_str().unwrap());
    let (status, ep) = stack.call(Method::PATCH, &path, Some(json!({"rate_limit_per_second": 5}))).await;
    assert_eq!((status, ep["rate_limit_per_second"].as_u64()), (200, Some(5)), "{ep}");
    let (status, e) = stack.call(Method::PATCH, &path, Some(json!({"rate_limit_per_second": 0}))).await;
    assert_eq!(status, 422, "{e}");
    let (status, ep) = stack
        .call(Method::PATCH, &path, Some(json!({"rate_limit_per_second": null, "rate_limit_adaptive": false})))
        .await;
    assert_eq!(status, 200, "{ep}");
    assert_eq!((ep["rate_limit_per_second"].clone(), ep["rate_limit_adaptive"].clone()), (Value::Null, json!(false)));
    assert_eq!(get_endpoint(&stack, ep["id"].as_str().unwrap()).await["rate_limit_per_second"], Value::Null);
    stack.stop().await;
}
