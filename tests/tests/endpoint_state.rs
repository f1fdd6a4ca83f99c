//! Endpoint state you can trust: every attempt sees the endpoint as it is now, endpoint
//! changes are guarded transitions, their side effects survive a failed AWS call, and no step
//! reads an endpoint's history to find its held deliveries.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use reqwest::Method;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use webhooks::lifecycle::AttemptMessage;
use webhooks::service::{admin, deliver};
use webhooks::store::StoreError;
use webhooks_local::Options;
use webhooks_tests::{BoxFuture, Hook, HookedQueue, Receiver, RecordingNotifier, Reply, Serialized, Stack, eventually};

const WITHIN: Duration = Duration::from_secs(30);

fn no_pollers() -> Options {
    Options { pollers: 0, sweeper: false, ..Options::default() }
}

async fn endpoint(stack: &Stack, url: &str, extra: Value) -> Value {
    let mut body = json!({"tenant_id": "acme", "url": url});
    body.as_object_mut().unwrap().extend(extra.as_object().cloned().unwrap_or_default());
    let (status, ep) = stack.call(Method::POST, "/v1/endpoints", Some(body)).await;
    assert_eq!(status, 201, "{ep}");
    ep
}

async fn get_endpoint(stack: &Stack, id: &str) -> Value {
    stack.call(Method::GET, &format!("/v1/endpoints/{id}"), None).await.1
}

fn first_delivery(accepted: &Value) -> String {
    accepted["deliveries"][0]["id"].as_str().unwrap().to_string()
}

fn one_second_retries() -> Value {
    json!({"retry_policy": {"schedule_seconds": [1, 1, 1, 1, 1], "max_attempts": 6}})
}

#[tokio::test(flavor = "multi_thread")]
async fn no_attempt_starts_after_disable_has_answered_and_the_delivery_is_held_with_its_history() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::SlowStatus(Duration::from_millis(1200), 503)).await;
    let ep = endpoint(&stack, &rx.url, one_second_retries()).await;
    let id = first_delivery(&stack.event("acme", "order.paid", json!({"n": 1})).await);
    // Attempt 2 is in flight (it arrived; the receiver answers 1.2 s later).
    eventually("attempt 2 in flight", WITHIN, || async { rx.count() >= 2 }).await;
    let (status, _) =
        stack.call(Method::POST, &format!("/v1/endpoints/{}/disable", ep["id"].as_str().unwrap()), None).await;
    assert_eq!(status, 200);
    let answered = Instant::now();
    let d = stack.wait_status(&id, "held", WITHIN).await;
    let late: Vec<_> = rx.hits().into_iter().filter(|h| h.at > answered).map(|h| h.header("webhook-attempt")).collect();
    assert!(late.is_empty(), "attempts started after disable answered: {late:?}");
    assert_eq!(d["attempts"].as_array().unwrap().len(), 2, "the in-flight attempt finished and was recorded: {d:#}");
    assert_eq!(d["attempts"][1]["status_code"], 503);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_attempt_after_a_url_patch_answered_goes_to_the_new_url() {
    let stack = Stack::start(|_| {}).await;
    let old = Receiver::start(Reply::Status(503)).await;
    let new = Receiver::start(Reply::Status(200)).await;
    let ep = endpoint(&stack, &old.url, one_second_retries()).await;
    let id = first_delivery(&stack.event("acme", "order.paid", json!({"n": 1})).await);
    stack.wait_delivery(&id, WITHIN, |d| d["attempt_count"] == 2 && d["status"] == "scheduled").await;
    let path = format!("/v1/endpoints/{}", ep["id"].as_str().unwrap());
    let (status, body) = stack.call(Method::PATCH, &path, Some(json!({"url": new.url}))).await;
    assert_eq!(status, 200, "{body}");
    let d = stack.wait_status(&id, "delivered", WITHIN).await;
    assert_eq!((old.count(), new.count()), (2, 1), "{d:#}");
    assert_eq!(new.hits()[0].header("webhook-attempt"), "3");
    stack.stop().await;
}

/// A store hook that blocks the first `commit` after it is armed until released.
struct Gate {
    armed: AtomicBool,
    reached: AtomicBool,
    release: tokio::sync::Notify,
}

#[tokio::test(flavor = "multi_thread")]
async fn a_breaker_that_opens_while_a_patch_is_in_flight_is_not_lost_and_its_probe_still_runs() {
    let gate = Arc::new(Gate {
        armed: AtomicBool::new(false),
        reached: AtomicBool::new(false),
        release: tokio::sync::Notify::new(),
    });
    let g = gate.clone();
    let hook: Hook = Arc::new(move |call| {
        let g = g.clone();
        Box::pin(async move {
            if call == "commit" && g.armed.swap(false, Ordering::SeqCst) {
                g.reached.store(true, Ordering::SeqCst);
                g.release.notified().await;
            }
            Ok(())
        }) as BoxFuture<Result<(), StoreError>>
    });
    let stack = Stack::start_wrapped(|_| {}, Options::default(), |app| Serialized::hooked(&app, Some(hook))).await;
    let down = Receiver::start(Reply::Status(503)).await;
    let up = Receiver::start(Reply::Status(200)).await;
    let extra = json!({"retry_policy": {"schedule_seconds": [1], "max_attempts": 5},
        "circuit_breaker_threshold": 1, "auto_resume": true, "auto_resume_after_seconds": 1});
    let ep = endpoint(&stack, &down.url, extra).await;
    let ep_id = ep["id"].as_str().unwrap().to_string();

    // The PATCH reads the endpoint, then its write waits at the gate.
    gate.armed.store(true, Ordering::SeqCst);
    let patch = {
        let (http, url) = (stack.http.clone(), format!("{}/v1/endpoints/{ep_id}", stack.base));
        let body = json!({"url": up.url});
        tokio::spawn(async move { http.patch(url).json(&body).send().await.unwrap().status().as_u16() })
    };
    eventually("the PATCH at its write", WITHIN, || async { gate.reached.load(Ordering::SeqCst) }).await;
    // Meanwhile the breaker opens.
    let id = first_delivery(&stack.event("acme", "order.paid", json!({"n": 1})).await);
    eventually("the breaker open", WITHIN, || async { get_endpoint(&stack, &ep_id).await["enabled"] == false }).await;
    gate.release.notify_one();
    assert_eq!(patch.await.unwrap(), 200);

    let after = get_endpoint(&stack, &ep_id).await;
    assert_eq!(after["url"], up.url.as_str(), "the PATCH applied: {after:#}");
    // No lost update: the pause stands or its probe already resumed the endpoint through the
    // new URL; either way nothing is stuck.
    let d = stack.wait_status(&id, "delivered", WITHIN).await;
    assert_eq!(up.count(), 1, "{d:#}");
    eventually("the endpoint resumed", WITHIN, || async { get_endpoint(&stack, &ep_id).await["enabled"] == true })
        .await;
    stack.stop().await;
}

async fn paused_endpoint(stack: &Stack, rx: &Receiver, policy: Value) -> (String, String) {
    let extra = json!({"retry_policy": policy, "circuit_breaker_threshold": 1, "auto_resume": true,
        "auto_resume_after_seconds": 1});
    let ep = endpoint(stack, &rx.url, extra).await;
    let ep_id = ep["id"].as_str().unwrap().to_string();
    let id = first_delivery(&stack.event("acme", "order.paid", json!({"n": 1})).await);
    stack.wait_status(&id, "held", WITHIN).await;
    assert_eq!(get_endpoint(stack, &ep_id).await["disabled"]["reason"], "circuit_breaker");
    (ep_id, id)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_manual_disable_of_a_paused_endpoint_wins_and_no_probe_follows() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(503)).await;
    let (ep_id, id) = paused_endpoint(&stack, &rx, json!({"schedule_seconds": [1], "max_attempts": 5})).await;
    let (status, body) = stack.call(Method::POST, &format!("/v1/endpoints/{ep_id}/disable"), None).await;
    assert_eq!(status, 200);
    assert_eq!(body["disabled"]["reason"], "manual", "{body:#}");
    rx.set_default(Reply::Status(200));
    let hits = rx.count();
    // Absence can only be seen over time: three cool-downs (1 s) and sweeper ticks (1 s).
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(rx.count(), hits, "a probe went out after a manual disable");
    let ep = get_endpoint(&stack, &ep_id).await;
    assert_eq!((ep["enabled"].clone(), ep["disabled"]["reason"].clone()), (json!(false), json!("manual")));
    assert_eq!(stack.delivery(&id).await["status"], "held");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_probe_answered_with_a_disable_code_disables_the_endpoint_as_gone_and_tells_the_owner() {
    let notes = RecordingNotifier::default();
    let n = notes.clone();
    let stack = Stack::start_wrapped(|_| {}, Options::default(), move |app| app.with_notifier(Arc::new(n))).await;
    let rx = Receiver::start(Reply::Status(503)).await;
    let policy = json!({"schedule_seconds": [1], "max_attempts": 5, "disable_on": [410]});
    let (ep_id, id) = paused_endpoint(&stack, &rx, policy).await;
    rx.set_default(Reply::Status(410));
    eventually("disabled as gone", WITHIN, || async {
        get_endpoint(&stack, &ep_id).await["disabled"]["reason"] == "gone"
    })
    .await;
    let ep = get_endpoint(&stack, &ep_id).await;
    assert_eq!(ep["disabled"]["status_code"], 410);
    eventually("the owner told", WITHIN, || async { notes.sent().contains(&(ep_id.clone(), "gone".to_string())) })
        .await;
    let d = stack.delivery(&id).await;
    assert_eq!(d["status"], "held");
    assert_eq!(d["attempts"].as_array().unwrap().last().unwrap()["status_code"], 410);
    let hits = rx.count();
    tokio::time::sleep(Duration::from_secs(3)).await; // three cool-downs: no further probe
    assert_eq!(rx.count(), hits, "probing went on after the receiver answered 410");
    stack.stop().await;
}

/// Fails the first call named `name` once `armed` is set.
fn fail_once(name: &'static str, armed: Arc<AtomicBool>, failed: Arc<AtomicBool>) -> Hook {
    Arc::new(move |call| {
        let (armed, failed) = (armed.clone(), failed.clone());
        Box::pin(async move {
            if call == name && armed.load(Ordering::SeqCst) && !failed.swap(true, Ordering::SeqCst) {
                return Err(StoreError::Aws(format!("injected failure of {call}")));
            }
            Ok(())
        }) as BoxFuture<Result<(), StoreError>>
    })
}

const CALLS: [&str; 9] = [
    "apply",
    "get_payload",
    "get_endpoint",
    "commit",
    "claim_job",
    "get_job",
    "put_job",
    "list_deliveries",
    "queue_send",
];

/// A stack whose store and queue fail the first `call` once `armed` is set; with a recording
/// notifier.
async fn failing_stack(call: &'static str, armed: Arc<AtomicBool>) -> (Stack, RecordingNotifier, Arc<AtomicBool>) {
    let failed = Arc::new(AtomicBool::new(false));
    let notes = RecordingNotifier::default();
    let (n, hook) = (notes.clone(), fail_once(call, armed, failed.clone()));
    let tweak = |c: &mut webhooks::Config| c.redrive_after_seconds = 3;
    let stack = Stack::start_wrapped(tweak, Options::default(), move |app| {
        let app = Serialized::hooked(&app, Some(hook.clone())).with_notifier(Arc::new(n));
        HookedQueue::wrap(app, hook)
    })
    .await;
    (stack, notes, failed)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_410_disables_holds_and_notifies_whichever_single_aws_call_fails() {
    let runs = CALLS.iter().map(|&call| async move {
        let armed = Arc::new(AtomicBool::new(false));
        let (stack, notes, failed) = failing_stack(call, armed.clone()).await;
        let rx = Receiver::start(Reply::Status(410)).await;
        let ep = endpoint(&stack, &rx.url, json!({})).await;
        let ep_id = ep["id"].as_str().unwrap().to_string();
        armed.store(true, Ordering::SeqCst);
        let id = first_delivery(&stack.event("acme", "order.paid", json!({"n": 1})).await);
        let d = stack.wait_status(&id, "held", WITHIN).await;
        let e = get_endpoint(&stack, &ep_id).await;
        assert_eq!(
            (e["enabled"].clone(), e["disabled"]["reason"].clone()),
            (json!(false), json!("gone")),
            "{call}: {e:#}"
        );
        eventually(&format!("{call}: the owner told"), WITHIN, || async { !notes.sent().is_empty() }).await;
        assert_eq!(d["attempts"].as_array().unwrap().last().unwrap()["status_code"], 410, "{call}: {d:#}");
        stack.stop().await;
        (call, failed.load(Ordering::SeqCst))
    });
    let injected: Vec<_> = futures::future::join_all(runs).await;
    // Every call of the path was failed once in some run (get_payload is not on it: the
    // payload rides in the message).
    let missed: Vec<_> = injected.iter().filter(|(c, f)| !f && *c != "get_payload").collect();
    assert!(missed.is_empty(), "calls never made on the 410 path: {missed:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_successful_probe_resumes_and_releases_whichever_single_aws_call_fails() {
    let only = std::env::var("FAIL_ONLY").ok();
    let runs = CALLS.iter().filter(|c| only.as_deref().is_none_or(|o| o == **c)).map(|&call| async move {
        let armed = Arc::new(AtomicBool::new(false));
        let (stack, _notes, failed) = failing_stack(call, armed.clone()).await;
        let rx = Receiver::start(Reply::Status(503)).await;
        let (ep_id, first) = paused_endpoint(&stack, &rx, json!({"schedule_seconds": [1], "max_attempts": 5})).await;
        let second = first_delivery(&stack.event("acme", "order.paid", json!({"n": 2})).await);
        stack.wait_status(&second, "held", WITHIN).await;
        eprintln!("probe path, failing {call}: deliveries {first} {second}");
        armed.store(true, Ordering::SeqCst);
        rx.set_default(Reply::Status(200));
        for id in [&first, &second] {
            let d = stack.wait_delivery(id, WITHIN, |d| d["status"] == "delivered" || d["status"] == "exhausted").await;
            assert_eq!(d["status"], "delivered", "{call}: {d:#}");
        }
        let e = get_endpoint(&stack, &ep_id).await;
        assert_eq!(e["enabled"], true, "{call}: {e:#}");
        stack.stop().await;
        (call, failed.load(Ordering::SeqCst))
    });
    let injected: Vec<_> = futures::future::join_all(runs).await;
    let missed: Vec<_> = injected.iter().filter(|(_, f)| !f).collect();
    assert!(missed.is_empty(), "calls never made on the probe path: {missed:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_attempt_history_on_an_item_stays_bounded_however_many_attempts() {
    let stack = Stack::start_with(|_| {}, no_pollers()).await;
    // 1 KiB of bytes that are not UTF-8: read lossily, each becomes a 3-byte U+FFFD.
    let rx = Receiver::start(Reply::Body(500, vec![0xff; 1024])).await;
    endpoint(
        &stack,
        &rx.url,
        json!({"retry_policy": {"schedule_seconds": [1], "max_attempts": 50}, "circuit_breaker_threshold": 0}),
    )
    .await;
    let id = first_delivery(&stack.event("acme", "order.paid", json!({"n": 1})).await);
    for n in 1..=150u32 {
        if n > 1 && (n - 1) % 50 == 0 {
            admin::replay(&stack.app, &id).await.unwrap();
        }
        let msg = AttemptMessage::new(id.clone(), n);
        let mut handled = deliver::deliver_message(&stack.app, &msg).await;
        // A loaded emulator can eat the lease margin: the claim is given back, try it again.
        while matches!(handled, Ok(deliver::Handled::Requeued)) {
            handled = deliver::deliver_message(&stack.app, &msg).await;
        }
        assert!(matches!(handled, Ok(deliver::Handled::Attempted(..))), "attempt {n}: {handled:?}");
    }
    let d = stack.delivery(&id).await;
    let attempts = d["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), webhooks::lifecycle::MAX_KEPT_ATTEMPTS);
    assert_eq!(d["attempts_dropped"], 150 - webhooks::lifecycle::MAX_KEPT_ATTEMPTS);
    assert_eq!(attempts.last().unwrap()["attempt"], 150);
    assert!(attempts.iter().all(|a| a["response_body"].as_str().unwrap().len() <= 1024));
    assert!(d.to_string().len() < 64 * 1024, "{} bytes", d.to_string().len());
    stack.stop().await;
}

/// Counts Query requests and the index entries they read (`ScannedCount`).
#[derive(Clone, Default, Debug)]
struct QueryReads {
    queries: Arc<AtomicUsize>,
    scanned: Arc<AtomicUsize>,
}

impl aws_sdk_dynamodb::config::Intercept for QueryReads {
    fn name(&self) -> &'static str {
        "QueryReads"
    }

    fn read_after_execution(
        &self,
        context: &aws_sdk_dynamodb::config::interceptors::FinalizerInterceptorContextRef<'_>,
        _rc: &aws_sdk_dynamodb::config::RuntimeComponents,
        _cfg: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        if let Some(Ok(out)) = context.output_or_error()
            && let Some(q) = out.downcast_ref::<aws_sdk_dynamodb::operation::query::QueryOutput>()
        {
            self.queries.fetch_add(1, Ordering::SeqCst);
            self.scanned.fetch_add(usize::try_from(q.scanned_count()).unwrap_or(0), Ordering::SeqCst);
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_an_endpoints_held_deliveries_reads_none_of_its_history() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let ep = endpoint(&stack, &rx.url, json!({})).await;
    let ep_id = ep["id"].as_str().unwrap().to_string();
    let mut ids = Vec::new();
    for n in 0..150 {
        ids.push(first_delivery(&stack.event("acme", "order.paid", json!({"n": n})).await));
    }
    for id in &ids {
        stack.wait_status(id, "delivered", WITHIN).await;
    }
    // One held delivery behind those 150 delivered ones.
    let (status, _) = stack.call(Method::POST, &format!("/v1/endpoints/{ep_id}/disable"), None).await;
    assert_eq!(status, 200);
    let held = first_delivery(&stack.event("acme", "order.paid", json!({"n": "held"})).await);
    stack.wait_status(&held, "held", WITHIN).await;
    // The store as the stack configures it (its index splits included), on a client that
    // counts its Queries and the index entries they read.
    let reads = QueryReads::default();
    let sdk = webhooks::app::aws_sdk_config().await;
    let conf = aws_sdk_dynamodb::config::Builder::from(&sdk).interceptor(reads.clone()).build();
    let cfg = &stack.app.config;
    let store =
        webhooks::store::DynamoStore::new(aws_sdk_dynamodb::Client::from_conf(conf), &cfg.table, cfg.due_shards)
            .with_index_shards(cfg.endpoint_index_shards, cfg.status_index_shards);
    use webhooks::store::Store as _;
    let page = store
        .list_deliveries(&webhooks::store::DeliveryQuery {
            endpoint_id: Some(ep_id.clone()),
            status: Some(webhooks::model::DeliveryStatus::Held),
            oldest_first: true,
            limit: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    let found: Vec<_> = page.data.iter().map(|d| d.id.clone()).collect();
    assert_eq!(found, vec![held.clone()]);
    let partitions = webhooks::store::keys::partitions(&ep_id, cfg.endpoint_index_shards).len();
    let (queries, scanned) = (reads.queries.load(Ordering::SeqCst), reads.scanned.load(Ordering::SeqCst));
    assert!(queries <= partitions, "{queries} Queries over {partitions} index partitions");
    assert_eq!(scanned, 1, "index entries read to find 1 held delivery among 150 delivered");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn no_post_starts_when_the_claims_lease_has_less_left_than_the_request_timeout() {
    // The first endpoint read stalls past the whole lease (2 s timeout + 5 s margin): the
    // sweeper re-drives the delivery meanwhile, and the stalled worker must not POST too.
    let stalled = Arc::new(AtomicUsize::new(0));
    let s = stalled.clone();
    let hook: Hook = Arc::new(move |call| {
        let s = s.clone();
        Box::pin(async move {
            if call == "get_endpoint" && s.fetch_add(1, Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(8000)).await;
                s.store(100, Ordering::SeqCst);
            }
            Ok(())
        }) as BoxFuture<Result<(), StoreError>>
    });
    let stack = Stack::start_wrapped(|_| {}, Options::default(), |app| Serialized::hooked(&app, Some(hook))).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    endpoint(&stack, &rx.url, json!({})).await;
    let id = first_delivery(&stack.event("acme", "order.paid", json!({"n": 1})).await);
    let d = stack.wait_status(&id, "delivered", WITHIN).await;
    eventually("the stalled worker went on", WITHIN, || async { stalled.load(Ordering::SeqCst) >= 100 }).await;
    // What the stalled worker would have sent arrives within moments of its read: give it 1 s.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(rx.count(), 1, "two POSTs for one delivery: {d:#}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn retries_stop_once_a_patch_drops_the_event_type_from_the_filter() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(503)).await;
    let mut extra = one_second_retries();
    extra["event_types"] = json!(["order.*"]);
    let ep = endpoint(&stack, &rx.url, extra).await;
    let id = first_delivery(&stack.event("acme", "order.paid", json!({"n": 1})).await);
    stack.wait_delivery(&id, WITHIN, |d| d["attempt_count"] == 2 && d["status"] == "scheduled").await;
    let path = format!("/v1/endpoints/{}", ep["id"].as_str().unwrap());
    let (status, body) = stack.call(Method::PATCH, &path, Some(json!({"event_types": ["invoice.*"]}))).await;
    assert_eq!(status, 200, "{body}");
    let answered = Instant::now();
    let d = stack.wait_status(&id, "exhausted", WITHIN).await;
    let late: Vec<_> = rx.hits().into_iter().filter(|h| h.at > answered).map(|h| h.header("webhook-attempt")).collect();
    assert!(late.is_empty(), "attempts sent after the filter dropped the type: {late:?}");
    assert_eq!(rx.count(), 2, "{d:#}");
    let last = d["attempts"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["error"], "unsubscribed", "{d:#}");
    assert!(last.get("status_code").is_none(), "not sent, so no status: {d:#}");
    // Not the receiver's failure: the circuit breaker's count did not move for it.
    assert_eq!(get_endpoint(&stack, ep["id"].as_str().unwrap()).await["consecutive_failures"], 2);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_disable_that_answers_while_the_rate_slot_is_taken_stops_the_post() {
    // The endpoint was read (enabled), then deliver takes its rate-limit slot: the disable
    // answers while that call is held, so the POST that would follow must not start.
    let reached = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Notify::new());
    let (r, l) = (reached.clone(), release.clone());
    let first = Arc::new(AtomicBool::new(true));
    let hook: Hook = Arc::new(move |call| {
        let (r, l, first) = (r.clone(), l.clone(), first.clone());
        Box::pin(async move {
            if call == "take_rate_slot" && first.swap(false, Ordering::SeqCst) {
                r.notify_one();
                l.notified().await;
            }
            Ok(())
        }) as BoxFuture<Result<(), StoreError>>
    });
    let stack = Stack::start_wrapped(|_| {}, Options::default(), |app| Serialized::hooked(&app, Some(hook))).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let ep = endpoint(&stack, &rx.url, json!({"rate_limit_per_second": 10})).await;
    let id = first_delivery(&stack.event("acme", "order.paid", json!({"n": 1})).await);
    tokio::time::timeout(WITHIN, reached.notified()).await.expect("deliver reached the rate slot");
    let (status, _) =
        stack.call(Method::POST, &format!("/v1/endpoints/{}/disable", ep["id"].as_str().unwrap()), None).await;
    assert_eq!(status, 200);
    release.notify_one();
    let d = stack.wait_status(&id, "held", WITHIN).await;
    assert_eq!(rx.count(), 0, "a POST started after the disable answered: {d:#}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_backlog_of_due_job_steps_does_not_take_the_due_deliveries_turn() {
    // 40 job steps due an hour ago, a tick batch of 4 and no budget for job steps (each tick
    // defers them all, so they stay due): a delivery due now is still re-driven.
    let tweak = |c: &mut webhooks::Config| {
        c.sweep_batch = 4;
        c.sweep_budget = Duration::ZERO;
        c.redrive_after_seconds = 0;
    };
    let stack = Stack::start_with(tweak, no_pollers()).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    endpoint(&stack, &rx.url, json!({})).await;
    let long_ago = chrono::Utc::now() - chrono::Duration::hours(1);
    for n in 0..40 {
        let job = webhooks::model::Job {
            id: format!("job_backlog{n:02}"),
            kind: webhooks::model::JobKind::Notify,
            tenant_id: "acme".into(),
            endpoint_id: "ep_gone".into(),
            status: "running".into(),
            since: None,
            until: None,
            cursor: None,
            processed: 0,
            run_at: Some(long_ago),
            created_at: long_ago,
            updated_at: long_ago,
        };
        stack.app.store.put_job(&job).await.unwrap();
    }
    let id = first_delivery(&stack.event("acme", "order.paid", json!({"n": 1})).await);
    let report = webhooks::service::sweep::sweep(&stack.app).await.unwrap();
    assert_eq!(report.jobs_deferred, 4, "{report:?}");
    assert_eq!(report.enqueued, 1, "the due delivery {id} waited behind job steps: {report:?}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forced_delete_answers_after_a_bounded_number_and_its_job_ends_the_rest() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let ep = endpoint(&stack, &rx.url, json!({})).await;
    let ep_id = ep["id"].as_str().unwrap().to_string();
    let (status, _) = stack.call(Method::POST, &format!("/v1/endpoints/{ep_id}/disable"), None).await;
    assert_eq!(status, 200);
    let total = admin::DELETE_ENDS_INLINE + 20;
    let mut ids = Vec::new();
    for n in 0..total {
        ids.push(first_delivery(&stack.event("acme", "order.paid", json!({"n": n})).await));
    }
    for id in &ids {
        stack.wait_status(id, "held", WITHIN).await;
    }
    let path = format!("/v1/endpoints/{ep_id}");
    let (status, body) = stack.call(Method::DELETE, &path, None).await;
    assert_eq!(status, 409, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains(&format!("has {total} unfinished")), "{body}");
    let (status, body) = stack.call(Method::DELETE, &format!("{path}?force=true"), None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["deliveries_ended"], admin::DELETE_ENDS_INLINE, "{body}");
    for id in &ids {
        let d = stack.wait_status(id, "exhausted", WITHIN).await;
        assert_eq!(d["reason"], "endpoint_deleted", "{d:#}");
    }
    assert_eq!(rx.count(), 0);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoints_stats_read_none_of_its_delivered_history() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let ep = endpoint(&stack, &rx.url, json!({})).await;
    let ep_id = ep["id"].as_str().unwrap().to_string();
    // An endpoint as written before the delivered counters existed (no
    // `delivered_counted_from`): its stats count the index instead.
    let old = endpoint(&stack, &rx.url, json!({})).await;
    let old_id = old["id"].as_str().unwrap().to_string();
    let sdk = webhooks::app::aws_sdk_config().await;
    aws_sdk_dynamodb::Client::new(&sdk)
        .update_item()
        .table_name(&stack.app.config.table)
        .key("pk", aws_sdk_dynamodb::types::AttributeValue::S(webhooks::store::keys::tenant_pk("acme")))
        .key("sk", aws_sdk_dynamodb::types::AttributeValue::S(webhooks::store::keys::endpoint_key(&old_id)))
        .update_expression("REMOVE delivered_counted_from")
        .send()
        .await
        .unwrap();
    let accepted: Vec<Value> =
        futures::future::join_all((0..40).map(|n| stack.event("acme", "order.paid", json!({"n": n})))).await;
    for a in &accepted {
        for d in a["deliveries"].as_array().unwrap() {
            stack.wait_status(d["id"].as_str().unwrap(), "delivered", WITHIN).await;
        }
    }
    // The stats through a store whose client counts its Queries and the entries they read.
    let reads = QueryReads::default();
    let conf = aws_sdk_dynamodb::config::Builder::from(&sdk).interceptor(reads.clone()).build();
    let cfg = stack.app.config.clone();
    let mut app = stack.app.clone();
    app.store = Arc::new(
        webhooks::store::DynamoStore::new(aws_sdk_dynamodb::Client::from_conf(conf), &cfg.table, cfg.due_shards)
            .with_index_shards(cfg.endpoint_index_shards, cfg.status_index_shards),
    );
    let stats = admin::endpoint_stats(&app, &ep_id).await.unwrap();
    assert_eq!(stats.counts["delivered"], 40, "{stats:?}");
    assert_eq!(stats.counted, 40, "{stats:?}");
    assert!(stats.last_success_at.is_some());
    let scanned = reads.scanned.load(Ordering::SeqCst);
    assert!(scanned < 40, "{scanned} entries read for the stats of an endpoint with 40 delivered");
    let stats = admin::endpoint_stats(&app, &old_id).await.unwrap();
    assert_eq!(stats.counts["delivered"], 40, "an endpoint from before the counters: {stats:?}");
    let (status, body) = stack.call(Method::GET, &format!("/v1/endpoints/{ep_id}/stats"), None).await;
    assert_eq!((status, &body["counts"]["delivered"]), (200, &json!(40)), "{body}");
    stack.stop().await;
}
