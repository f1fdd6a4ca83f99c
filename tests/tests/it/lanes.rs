//! Noisy-neighbour isolation (docs/rate-limits.md, "Slow lane"): an endpoint whose attempts are slow has
//! them made from the slow lane's queue, so fast endpoints' deliveries are not held behind it.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // test helpers fail loudly

use reqwest::Method;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use webhooks::domain::delivery_lifecycle::Enqueue;
use webhooks::domain::lane::Lane;
use webhooks::queue::{Queue, QueueError};
use webhooks::service::ingest::{self, NewEvent};
use webhooks_local::Options;
use webhooks_tests::{Receiver, Reply, Stack, eventually};

async fn endpoint(stack: &Stack, url: &str, types: &[&str]) -> String {
    let body = json!({"tenant_id": "acme", "url": url, "event_types": types});
    let (status, ep) = stack.call(Method::POST, "/v1/endpoints", Some(body)).await;
    assert_eq!(status, 201, "{ep}");
    ep["id"].as_str().unwrap().to_string()
}

async fn get_endpoint(stack: &Stack, id: &str) -> Value {
    let (status, ep) = stack.call(Method::GET, &format!("/v1/endpoints/{id}"), None).await;
    assert_eq!(status, 200, "{ep}");
    ep
}

fn delivery_id(accepted: &Value) -> String {
    accepted["deliveries"][0]["id"].as_str().expect("delivery id").to_string()
}

async fn visible(stack: &Stack, url: &str) -> u64 {
    let out = stack
        .sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .expect("queue attributes");
    out.attributes
        .and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages).cloned())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// An endpoint for `slow.*` events whose receiver answers after 1.5 s, marked slow by its first
/// attempt (made on the main lane; the stack's threshold is 1 s): its receiver (1 request so
/// far) and id.
async fn marked_slow(stack: &Stack) -> (Receiver, String) {
    let rx = Receiver::start(Reply::Hang(Duration::from_millis(1500))).await;
    let ep = endpoint(stack, &rx.url, &["slow.*"]).await;
    let first = delivery_id(&stack.event("acme", "slow.a", json!({})).await);
    stack.wait_status(&first, "delivered", Duration::from_secs(30)).await;
    eventually("marked slow", Duration::from_secs(10), || async {
        get_endpoint(stack, &ep).await["slow_until"].is_string()
    })
    .await;
    (rx, ep)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_endpoint_moves_to_the_slow_lane_and_fast_deliveries_are_not_held_behind_it() {
    // One main-lane poller, so a batch held by a slow POST would hold every delivery; the
    // slow lane is polled by the test itself, to see its message there and hold it in flight.
    let options = Options { pollers: 1, slow_pollers: 0, sweeper: false, ..Options::default() };
    let stack = Stack::start_with_slow_lane(
        |c| {
            c.request_timeout = Duration::from_secs(15);
            c.slow_lane_threshold = Duration::from_millis(1000);
        },
        options,
    )
    .await;
    let slow_queue = stack.app.config.slow_queue_url.clone().unwrap();
    let slow_rx = Receiver::start(Reply::Hang(Duration::from_millis(1500))).await;
    let fast_rx = Receiver::start(Reply::Status(200)).await;
    let slow = endpoint(&stack, &slow_rx.url, &["slow.*"]).await;
    endpoint(&stack, &fast_rx.url, &["fast.*"]).await;
    let created = get_endpoint(&stack, &slow).await;

    // Its first attempt (main lane) takes 1.5 s, over the 1 s threshold: the endpoint is
    // marked slow, and the API shows until when.
    let first = delivery_id(&stack.event("acme", "slow.a", json!({"n": 1})).await);
    stack.wait_status(&first, "delivered", Duration::from_secs(30)).await;
    eventually("the endpoint marked slow", Duration::from_secs(10), || async {
        get_endpoint(&stack, &slow).await["slow_until"].is_string()
    })
    .await;
    assert_eq!(
        get_endpoint(&stack, &slow).await["updated_at"],
        created["updated_at"],
        "the marker is state beside the configuration: no versioned write"
    );

    // The next delivery to it: ingest, which reads the endpoint before it writes, sends
    // attempt 1 to the slow queue directly. The main lane never claims it: it is as ingest
    // wrote it (a give-back would have changed it before the message reached the slow queue).
    slow_rx.set_default(Reply::Hang(Duration::from_secs(6)));
    let second = delivery_id(&stack.event("acme", "slow.b", json!({"n": 2})).await);
    eventually("the slow endpoint's message in the slow queue", Duration::from_secs(20), || async {
        visible(&stack, &slow_queue).await >= 1
    })
    .await;
    let d = stack.delivery(&second).await;
    assert_eq!(d["status"], "scheduled", "{d:#}");
    assert_eq!(d["attempt_count"], 0, "{d:#}");
    assert_eq!(d["updated_at"], d["created_at"], "routed at ingest, never claimed on the main lane: {d:#}");

    // A message of a slow endpoint that arrives on the main lane (the sweeper's re-drives,
    // replays; here one from an ingest without the slow queue, as from a release before) is
    // given back there without an attempt and sent on to the slow queue.
    let mut old_ingest = stack.app.clone();
    old_ingest.slow_queue = None;
    let event = NewEvent {
        tenant_id: webhooks_tests::id("acme"),
        event_type: "slow.c".into(),
        payload: json!({"n": 3}).to_string(),
        id: None,
        sync: false,
        request_sha256: None,
    };
    let third = ingest::ingest(&old_ingest, event).await.expect("ingest").deliveries[0].id.to_string();
    eventually("the forwarded message in the slow queue", Duration::from_secs(20), || async {
        visible(&stack, &slow_queue).await >= 2
    })
    .await;
    let d = stack.delivery(&third).await;
    assert_eq!(d["status"], "scheduled", "{d:#}");
    assert_eq!(d["attempt_count"], 0, "moving lanes is not an attempt: {d:#}");
    assert_ne!(d["updated_at"], d["created_at"], "claimed and given back on the main lane: {d:#}");
    assert_eq!(slow_rx.count(), 1);

    // The slow lane attempts them (6 s each); while a slow POST is in flight, a fast
    // endpoint's new delivery goes through the main lane to the end.
    let (app, sqs) = (stack.app.clone(), stack.sqs.clone());
    let slow_lane = tokio::spawn(async move { webhooks_local::poll_lane(&app, &sqs, Lane::Slow, 1).await });
    eventually("a slow attempt in flight", Duration::from_secs(20), || async { slow_rx.count() >= 2 }).await;
    let fast = delivery_id(&stack.event("acme", "fast.c", json!({"n": 4})).await);
    stack.wait_status(&fast, "delivered", Duration::from_secs(20)).await;
    assert!(!slow_lane.is_finished(), "the fast delivery finished while the slow POST was in flight");
    let statuses = [stack.delivery(&second).await["status"].clone(), stack.delivery(&third).await["status"].clone()];
    assert!(statuses.contains(&json!("sending")), "{statuses:?}");

    // One receive may hand over one message or both: poll the slow lane until both are done.
    let mut attempted = slow_lane.await.unwrap().expect("slow lane poll");
    for _ in 0..20 {
        if attempted >= 2 {
            break;
        }
        attempted += webhooks_local::poll_lane(&stack.app, &stack.sqs, Lane::Slow, 1).await.expect("slow lane poll");
    }
    for id in [&second, &third] {
        let d = stack.wait_status(id, "delivered", Duration::from_secs(20)).await;
        assert_eq!(d["attempt_count"], 1, "{d:#}");
    }
    assert_eq!(slow_rx.count(), 3, "one attempt each, sent once");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_endpoint_that_turns_fast_leaves_the_slow_lane() {
    let options = Options { pollers: 1, slow_pollers: 1, sweeper: false, ..Options::default() };
    let stack = Stack::start_with_slow_lane(|c| c.slow_lane_threshold = Duration::from_millis(1000), options).await;
    let (rx, ep) = marked_slow(&stack).await;
    // Fast now: the slow lane's attempt clears the marker.
    rx.set_default(Reply::Status(200));
    let second = delivery_id(&stack.event("acme", "slow.b", json!({})).await);
    stack.wait_status(&second, "delivered", Duration::from_secs(30)).await;
    eventually("back on the main lane", Duration::from_secs(10), || async {
        get_endpoint(&stack, &ep).await.get("slow_until").is_none()
    })
    .await;
    assert_eq!(rx.count(), 2);
    stack.stop().await;
}

/// A slow lane that refuses every send (as SQS does when it is unreachable).
struct Refusing;

#[async_trait::async_trait]
impl Queue for Refusing {
    async fn send(&self, _: &[Enqueue]) -> Result<(), QueueError> {
        Err(QueueError("the slow lane is unreachable (test)".into()))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_attempt_whose_send_to_the_slow_lane_failed_at_ingest_is_re_driven_and_delivered() {
    let options = Options { pollers: 1, slow_pollers: 1, sweeper: true, ..Options::default() };
    let stack = Stack::start_with_slow_lane(
        |c| {
            c.slow_lane_threshold = Duration::from_millis(1000);
            c.redrive_after_seconds = 1;
        },
        options,
    )
    .await;
    let (rx, _) = marked_slow(&stack).await;
    // An ingest whose send to the slow lane fails: the event is accepted all the same (its
    // delivery is written, in the due index) ...
    let mut refusing = stack.app.clone();
    refusing.slow_queue = Some(Arc::new(Refusing));
    let event = NewEvent {
        tenant_id: webhooks_tests::id("acme"),
        event_type: "slow.b".into(),
        payload: json!({"n": 2}).to_string(),
        id: None,
        sync: false,
        request_sha256: None,
    };
    let accepted = ingest::ingest(&refusing, event).await.expect("accepted, though the send failed");
    let id = accepted.deliveries[0].id.clone();
    assert_eq!(stack.delivery(&id).await["status"], "scheduled");
    // ... and the sweeper re-drives it (to the main queue, whose deliver forwards it to the slow
    // lane): delivered, attempted once.
    let d = stack.wait_status(&id, "delivered", Duration::from_secs(30)).await;
    assert_eq!(d["attempt_count"], 1, "{d:#}");
    assert_eq!(rx.count(), 2);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sync_event_to_an_endpoint_marked_slow_is_attempted_inline() {
    let options = Options { pollers: 1, slow_pollers: 0, sweeper: false, ..Options::default() };
    let stack = Stack::start_with_slow_lane(|c| c.slow_lane_threshold = Duration::from_millis(1000), options).await;
    let (rx, ep) = marked_slow(&stack).await;
    // No slow-lane poller runs: an attempt sent to the slow lane would not be made. The sync
    // event is attempted in the request, and its fast answer clears the mark.
    rx.set_default(Reply::Status(200));
    let body = json!({"tenant_id": "acme", "event_type": "slow.b", "payload": {"n": 2}, "mode": "sync"});
    let (status, answer) = stack.call(Method::POST, "/v1/events", Some(body)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["status"], "delivered", "{answer}");
    assert_eq!(rx.count(), 2);
    assert!(get_endpoint(&stack, &ep).await.get("slow_until").is_none(), "a fast attempt ends the mark");
    stack.stop().await;
}
