//! Endpoint state you can trust: every attempt sees the endpoint as it is now, endpoint
//! changes are guarded transitions, their side effects survive a failed AWS call, and no step
//! reads an endpoint's history to find its held deliveries.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use chrono::{DateTime, Utc};
use futures::StreamExt;
use reqwest::Method;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use webhooks::App;
use webhooks::domain::delivery_lifecycle::{self, AttemptMessage};
use webhooks::sender::{SendResult, Sender};
use webhooks::service::{deliver, deliveries, endpoints, sweep};
use webhooks::store::DeliveryStore;
use webhooks::store::{Applied, Due, StoreError};
use webhooks_local::Options;
use webhooks_tests::faults::Faults;
use webhooks_tests::{BoxFuture, Hook, QueryReads, Receiver, RecordingNotifier, Reply, Serialized, Stack, eventually};

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

/// Whether `hit` carries a valid Standard Webhooks signature made with `secret`.
fn signed_with(hit: &webhooks_tests::Hit, secret: &str) -> bool {
    standardwebhooks::Webhook::new(secret).unwrap().verify(&hit.body, &hit.headers).is_ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_attempt_after_a_secret_rotation_answered_is_signed_with_the_new_secret() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    rx.script([Reply::Status(503), Reply::Status(503), Reply::Status(503)]);
    let ep = endpoint(&stack, &rx.url, one_second_retries()).await;
    let old = ep["secret"].as_str().unwrap().to_string();
    let id = first_delivery(&stack.event("acme", "order.paid", json!({"n": 1})).await);
    stack.wait_delivery(&id, WITHIN, |d| d["attempt_count"] == 2 && d["status"] == "scheduled").await;
    let path = format!("/v1/endpoints/{}/rotate-secret", ep["id"].as_str().unwrap());
    let (status, rotated) = stack.call(Method::POST, &path, Some(json!({}))).await;
    assert_eq!(status, 200, "{rotated}");
    let answered = Instant::now();
    let new = rotated["secret"].as_str().unwrap().to_string();
    assert_ne!(new, old);
    let d = stack.wait_status(&id, "delivered", WITHIN).await;
    let (before, after): (Vec<_>, Vec<_>) = rx.hits().into_iter().partition(|h| h.at < answered);
    assert_eq!((before.len(), after.len()), (2, 2), "{d:#}");
    for hit in &before {
        assert!(signed_with(hit, &old) && !signed_with(hit, &new), "attempt {}", hit.header("webhook-attempt"));
    }
    for hit in &after {
        let attempt = hit.header("webhook-attempt");
        assert!(
            signed_with(hit, &new),
            "attempt {attempt} after the rotation answered is not signed with the new secret"
        );
        // docs/api.md: for 24 h after a rotation every attempt carries both signatures.
        assert!(
            signed_with(hit, &old),
            "attempt {attempt} lacks the old secret's signature inside the rotation window"
        );
        assert_eq!(hit.header("webhook-signature").split(' ').count(), 2);
    }
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_wait_after_a_retry_policy_patch_answered_follows_the_new_policy() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(503)).await;
    let ep = endpoint(&stack, &rx.url, one_second_retries()).await;
    let id = first_delivery(&stack.event("acme", "order.paid", json!({"n": 1})).await);
    stack.wait_delivery(&id, WITHIN, |d| d["attempt_count"] == 2 && d["status"] == "scheduled").await;
    let path = format!("/v1/endpoints/{}", ep["id"].as_str().unwrap());
    let policy = json!({"schedule_seconds": [2, 2, 2], "max_attempts": 4});
    let (status, body) = stack.call(Method::PATCH, &path, Some(json!({"retry_policy": policy}))).await;
    assert_eq!(status, 200, "{body}");
    let answered = Instant::now();
    let d = stack.wait_status(&id, "exhausted", WITHIN).await;
    // The old policy would have made 6 attempts, 1 s apart; the new one stops at 4, and the
    // wait after attempt 3 (the first to start after the PATCH) is its 2 s.
    let waits: Vec<_> = d["attempts"].as_array().unwrap().iter().map(|a| a["next_wait_seconds"].clone()).collect();
    assert_eq!(waits, [json!(1), json!(1), json!(2), Value::Null], "{d:#}");
    let hits = rx.hits();
    assert_eq!(hits.len(), 4, "{d:#}");
    assert!(hits[2].at > answered, "attempt 3 started before the PATCH answered: the test raced");
    let gap = hits[3].at - hits[2].at;
    assert!(gap >= Duration::from_secs(2), "attempt 4 came {gap:?} after attempt 3, not the new policy's 2 s");
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

/// Runs `first` as a PATCH of a new endpoint at `http://127.0.0.1:9/a` that reads it, then
/// holds its conditional write until `second` (another PATCH) has landed; answers the first
/// PATCH's status and body, and the endpoint as it is after both.
async fn racing_patches(first: Value, second: Value) -> (u16, Value, Value) {
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
    let stack = Stack::start_wrapped(|_| {}, no_pollers(), |app| Serialized::hooked(&app, Some(hook))).await;
    let ep = endpoint(&stack, "http://127.0.0.1:9/a", json!({})).await;
    let path = format!("/v1/endpoints/{}", ep["id"].as_str().unwrap());
    gate.armed.store(true, Ordering::SeqCst);
    let held = {
        let (http, url) = (stack.http.clone(), format!("{}{path}", stack.base));
        tokio::spawn(async move {
            let r = http.patch(url).json(&first).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        })
    };
    eventually("the first PATCH at its write", WITHIN, || async { gate.reached.load(Ordering::SeqCst) }).await;
    let (status, body) = stack.call(Method::PATCH, &path, Some(second)).await;
    assert_eq!(status, 200, "the second PATCH lands first: {body}");
    gate.release.notify_one();
    let (status, body) = held.await.unwrap();
    let after = stack.call(Method::GET, &path, None).await.1;
    stack.stop().await;
    (status, body, after)
}

/// Issue #54, item 4: a URL-only PATCH read the endpoint without credentials; a PATCH adding
/// `auth` landed before its write. Re-applied on the endpoint as re-read, the URL change must
/// meet the credential guard again, not carry the new token to the new origin.
#[tokio::test(flavor = "multi_thread")]
async fn a_url_patch_racing_one_that_adds_credentials_does_not_move_them() {
    let auth = json!({"type": "bearer", "token": "t0ken-for-a"});
    let (status, body, after) =
        racing_patches(json!({"url": "http://127.0.0.1:10/elsewhere"}), json!({"auth": auth})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (422, Some("validation_error")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("auth"), "{body}");
    assert_eq!(after["url"], "http://127.0.0.1:9/a", "the credentials stay with their origin: {after:#}");
    assert_eq!(after["auth"], json!({"type": "bearer"}), "{after:#}");
}

/// The other order: a PATCH giving `auth` (for the URL its caller saw) read the endpoint; a
/// URL-only PATCH moved it meanwhile. The credentials are not applied to the new origin.
#[tokio::test(flavor = "multi_thread")]
async fn credentials_given_for_one_url_are_not_applied_after_another_patch_moved_it() {
    let auth = json!({"type": "bearer", "token": "t0ken-for-a"});
    let (status, body, after) =
        racing_patches(json!({"auth": auth}), json!({"url": "http://127.0.0.1:10/elsewhere"})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("conflict")), "{body}");
    assert_eq!(after["url"], "http://127.0.0.1:10/elsewhere", "{after:#}");
    assert!(after.get("auth").is_none(), "no credentials went to the new origin: {after:#}");
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

/// A clock the test moves (deliver, the sweeper and the API all read it).
#[derive(Debug)]
struct ManualClock(Mutex<DateTime<Utc>>);

impl webhooks::clock::Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap()
    }
}

/// A sender that arms the faults once a POST has been answered: what follows is the record of
/// the attempt and the steps after it.
struct ArmAfterPost {
    inner: Arc<dyn Sender>,
    faults: Faults,
}

#[async_trait::async_trait]
impl Sender for ArmAfterPost {
    async fn post(&self, url: &str, headers: &[(String, String)], body: bytes::Bytes) -> SendResult {
        let sent = self.inner.post(url, headers, body).await;
        self.faults.arm();
        sent
    }
}

/// Clock time per driven tick: 3 s (a lease of 7 s runs out in 3 ticks, a job's index settle
/// time of 5 s in 2).
const TICK_SECONDS: i64 = 3;
/// Most ticks a driven scenario may take to reach its end state.
const MAX_TICKS: usize = 100;

/// A stack the test drives in steps, so that a scenario makes the same AWS calls in the same
/// order every run: no pollers and no sweeper of its own; each [`Driven::tick`] hands every
/// visible message to deliver (as the SQS event source does), runs one sweeper tick and moves
/// the clock on by [`TICK_SECONDS`]. Deliver and the sweeper run on an app whose store, queue
/// and notifier go through `faults`; the API (the test's setup and checks) does not. A message
/// whose handling failed comes back only after the queue's 30 s visibility timeout, longer
/// than a scenario: what recovers it is the sweeper (lease expiry, re-drive).
struct Driven {
    stack: Stack,
    app: App,
    clock: Arc<ManualClock>,
    notes: RecordingNotifier,
}

impl Driven {
    async fn start(faults: &Faults, arm_after_post: bool) -> Self {
        let clock = Arc::new(ManualClock(Mutex::new(Utc::now())));
        let notes = RecordingNotifier::default();
        let (c, n) = (clock.clone(), notes.clone());
        let tweak = |cfg: &mut webhooks::Config| {
            // One due shard: the sweeper's reads come in one order.
            cfg.due_shards = 1;
            cfg.redrive_after_seconds = 4;
        };
        let stack = Stack::start_wrapped(tweak, no_pollers(), move |mut app| {
            app.clock = c;
            app.with_notifier(Arc::new(n))
        })
        .await;
        let mut app = faults.wrap(stack.app.clone());
        if arm_after_post {
            app.sender = Arc::new(ArmAfterPost { inner: app.sender.clone(), faults: faults.clone() });
        }
        Self { stack, app, clock, notes }
    }

    async fn tick(&self) {
        for _ in 0..10 {
            match webhooks_local::poll_once(&self.app, &self.stack.sqs, 0).await {
                Ok(n) if n > 0 => {}
                _ => break,
            }
        }
        // A failed tick is the sweeper's own business: it runs again next tick.
        let _ = sweep::sweep(&self.app).await;
        self.advance(TICK_SECONDS);
    }

    fn advance(&self, seconds: i64) {
        *self.clock.0.lock().unwrap() += chrono::Duration::seconds(seconds);
    }

    /// Ticks until `check` is Ok; panics with its last Err (the state as the check saw it)
    /// after [`MAX_TICKS`].
    async fn until<F, Fut>(&self, what: &str, check: F)
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<(), String>>,
    {
        let mut last = String::new();
        for _ in 0..MAX_TICKS {
            match check().await {
                Ok(()) => return,
                Err(state) => last = state,
            }
            self.tick().await;
        }
        panic!("{what}: not reached in {MAX_TICKS} ticks; last seen: {last}");
    }

    /// What is left to do: each item of the due index (running jobs by kind, deliveries in
    /// flight by status), whenever it is due.
    async fn pending(&self) -> Vec<String> {
        let store = &self.stack.app.store;
        let mut out = Vec::new();
        let mut items = store.due(0, i64::MAX, 100, None).await.unwrap();
        items.extend(store.due(webhooks::store::keys::JOB_SHARD, i64::MAX, 100, None).await.unwrap());
        for item in items {
            out.push(match item {
                Due::Delivery(d) => format!("delivery {} {}", d.id, d.status.as_str()),
                Due::Job { id, .. } => match store.get_job(&id).await.unwrap() {
                    Some(job) => format!("{:?} job {}", job.kind, job.status),
                    None => format!("job {id} gone"),
                },
            });
        }
        out
    }

    async fn stop(self) {
        self.stack.stop().await;
    }
}

fn attempt_codes(d: &Value) -> Vec<Value> {
    d["attempts"].as_array().map(|a| a.iter().map(|a| a["status_code"].clone()).collect()).unwrap_or_default()
}

/// An endpoint under `standard` whose receiver answers 410, one event; armed once that POST
/// has been answered. Ends when the delivery is held with the 410 recorded, the endpoint is
/// disabled as `gone`, its owner told (about that, and nothing else) and nothing is left to
/// do. Returns the calls made after arming.
async fn gone_scenario(faults: Faults) -> Vec<&'static str> {
    let d = Driven::start(&faults, true).await;
    let rx = Receiver::start(Reply::Status(410)).await;
    let ep_id = endpoint(&d.stack, &rx.url, json!({})).await["id"].as_str().unwrap().to_string();
    let id = first_delivery(&d.stack.event("acme", "order.paid", json!({"n": 1})).await);
    d.until("the 410 recorded, the endpoint gone, its owner told, nothing left to do", || async {
        // The cheapest read that tells "not yet" first.
        let pending = d.pending().await;
        if !pending.is_empty() {
            return Err(format!("pending {pending:?}"));
        }
        let (dl, e, notes) = (d.stack.delivery(&id).await, get_endpoint(&d.stack, &ep_id).await, d.notes.sent());
        let done = dl["status"] == "held"
            && attempt_codes(&dl).last() == Some(&json!(410))
            && e["enabled"] == false
            && e["disabled"]["reason"] == "gone"
            && e["disabled"]["status_code"] == 410
            && !notes.is_empty();
        if done { Ok(()) } else { Err(format!("delivery {dl}, endpoint {e}, notified {notes:?}")) }
    })
    .await;
    let notes = d.notes.sent();
    assert!(notes.iter().all(|n| *n == (ep_id.clone(), "gone".to_string())), "{notes:?}");
    assert!(faults.armed(), "the POST was never answered");
    d.stop().await;
    faults.calls()
}

/// A paused endpoint (the breaker, threshold 1, `auto_resume` after 12 s) with two held
/// deliveries, nothing left to do but its probe job; armed before the probe job comes due,
/// with the receiver now answering `answer`. Returns the driven stack, the endpoint, the
/// deliveries (the oldest is the probe) and the receiver.
async fn paused_with_a_probe_due(faults: &Faults, answer: u16) -> (Driven, String, [String; 2], Receiver) {
    let d = Driven::start(faults, false).await;
    let rx = Receiver::start(Reply::Status(503)).await;
    let extra = json!({"retry_policy": {"schedule_seconds": [1], "max_attempts": 5},
        "circuit_breaker_threshold": 1, "auto_resume": true, "auto_resume_after_seconds": 12});
    let ep_id = endpoint(&d.stack, &rx.url, extra).await["id"].as_str().unwrap().to_string();
    let first = first_delivery(&d.stack.event("acme", "order.paid", json!({"n": 1})).await);
    d.until("the first delivery held", || async {
        let s = d.stack.delivery(&first).await["status"].clone();
        if s == "held" { Ok(()) } else { Err(s.to_string()) }
    })
    .await;
    let second = first_delivery(&d.stack.event("acme", "order.paid", json!({"n": 2})).await);
    d.until("the second delivery held and only the probe job left", || async {
        let (s, pending) = (d.stack.delivery(&second).await["status"].clone(), d.pending().await);
        if s == "held" && pending == ["Probe job running"] { Ok(()) } else { Err(format!("{s} {pending:?}")) }
    })
    .await;
    assert_eq!(get_endpoint(&d.stack, &ep_id).await["state"], "paused");
    faults.arm();
    rx.set_default(Reply::Status(answer));
    (d, ep_id, [first, second], rx)
}

/// The probe answered 200: ends when both deliveries are delivered, the endpoint is enabled
/// and nothing is left to do (no probe, no release job). Returns the calls made after arming.
async fn resume_scenario(faults: Faults) -> Vec<&'static str> {
    let (d, ep_id, ids, _rx) = paused_with_a_probe_due(&faults, 200).await;
    let told = d.notes.sent().len();
    d.until("both delivered, the endpoint enabled, nothing left to do", || async {
        let pending = d.pending().await;
        if !pending.is_empty() {
            return Err(format!("pending {pending:?}"));
        }
        let mut statuses = Vec::new();
        for id in &ids {
            statuses.push(d.stack.delivery(id).await["status"].clone());
        }
        let e = get_endpoint(&d.stack, &ep_id).await;
        let done = statuses.iter().all(|s| s == "delivered") && e["state"] == "enabled";
        if done { Ok(()) } else { Err(format!("deliveries {statuses:?}, endpoint {e}")) }
    })
    .await;
    assert_eq!(d.notes.sent().len(), told, "an owner notification for a resume: {:?}", d.notes.sent());
    d.stop().await;
    faults.calls()
}

/// The probe answered 503: ends when two probes after arming have failed and been recorded
/// (the first failure led to another probe), the endpoint is paused again with exactly one
/// probe job waiting, the other delivery still held, and no one was told anything new.
/// Returns the calls made after arming.
async fn probe_again_scenario(faults: Faults) -> Vec<&'static str> {
    let (d, ep_id, [probe, other], _rx) = paused_with_a_probe_due(&faults, 503).await;
    let told = d.notes.sent().len();
    let before = d.stack.delivery(&probe).await["attempt_count"].as_u64().unwrap();
    d.until("two probes failed and recorded, paused, the next probe job waiting", || async {
        let dl = d.stack.delivery(&probe).await;
        let failed_probes = dl["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["attempt"].as_u64().unwrap() > before && a["status_code"] == 503)
            .count();
        if failed_probes < 2 || dl["status"] != "held" {
            return Err(format!("probe {dl}"));
        }
        let (e, pending) = (get_endpoint(&d.stack, &ep_id).await, d.pending().await);
        let done =
            e["state"] == "paused" && e["disabled"]["reason"] == "circuit_breaker" && pending == ["Probe job running"];
        if done { Ok(()) } else { Err(format!("probe {dl}, endpoint {e}, pending {pending:?}")) }
    })
    .await;
    assert_eq!(d.stack.delivery(&other).await["status"], "held");
    assert_eq!(d.notes.sent().len(), told, "an owner notification for a failed probe: {:?}", d.notes.sent());
    d.stop().await;
    faults.calls()
}

/// Runs `scenario` once failing nothing, recording the calls it makes once armed; then once
/// per entry of [`Faults::plan`] (each call failed before it is made, each write also after
/// it landed), each run checking its own end state. Fails with every run that did not reach
/// it, or whose failure did not strike the call recorded at its position.
async fn whichever_single_call_fails<S, F>(scenario: S)
where
    S: Fn(Faults) -> F + Clone + Send + 'static,
    F: std::future::Future<Output = Vec<&'static str>> + Send + 'static,
{
    let recorded = scenario(Faults::recording()).await;
    eprintln!("{} calls after arming: {recorded:?}", recorded.len());
    let plan = Faults::plan(&recorded);
    let runs = plan.iter().map(|&(at, name, strike)| {
        let scenario = scenario.clone();
        async move {
            let faults = Faults::failing(at, strike);
            let run = tokio::spawn(scenario(faults.clone())).await;
            let mut problems = Vec::new();
            if let Err(e) = run {
                let panic = e.try_into_panic().ok();
                let text = panic
                    .as_ref()
                    .and_then(|p| {
                        p.downcast_ref::<String>().cloned().or(p.downcast_ref::<&str>().map(|s| s.to_string()))
                    })
                    .unwrap_or_else(|| "the run was cancelled".into());
                problems.push(text);
            }
            if faults.struck() != Some((at, name, strike)) {
                problems.push(format!("the failure struck {:?}; calls made: {:?}", faults.struck(), faults.calls()));
            }
            (at, name, strike, problems)
        }
    });
    let results: Vec<_> = futures::stream::iter(runs).buffer_unordered(6).collect().await;
    let failed: Vec<_> = results.iter().filter(|r| !r.3.is_empty()).collect();
    assert!(
        failed.is_empty(),
        "{} of {} runs went wrong:\n{}",
        failed.len(),
        plan.len(),
        failed
            .iter()
            .map(|(at, name, strike, p)| format!("call {at} ({name}) failed {strike:?}: {}", p.join("; ")))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_410_disables_holds_and_notifies_whichever_single_aws_call_fails() {
    whichever_single_call_fails(gone_scenario).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_successful_probe_resumes_and_releases_whichever_single_aws_call_fails() {
    whichever_single_call_fails(resume_scenario).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_probe_leads_to_another_probe_whichever_single_aws_call_fails() {
    whichever_single_call_fails(probe_again_scenario).await;
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
            deliveries::replay(&stack.app, &webhooks_tests::id(&id)).await.unwrap();
        }
        let msg = AttemptMessage::new(webhooks_tests::id(&id), n);
        let mut handled = deliver::deliver_message(&stack.app, &msg).await;
        // A loaded emulator can eat the lease margin: the claim is given back, try it again.
        while matches!(handled, Ok(deliver::Handled::Requeued)) {
            handled = deliver::deliver_message(&stack.app, &msg).await;
        }
        assert!(matches!(handled, Ok(deliver::Handled::Attempted(..))), "attempt {n}: {handled:?}");
    }
    let d = stack.delivery(&id).await;
    let attempts = d["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), webhooks::domain::delivery_lifecycle::MAX_KEPT_ATTEMPTS);
    assert_eq!(d["attempts_dropped"], 150 - webhooks::domain::delivery_lifecycle::MAX_KEPT_ATTEMPTS);
    assert_eq!(attempts.last().unwrap()["attempt"], 150);
    assert!(attempts.iter().all(|a| a["response_body"].as_str().unwrap().len() <= 1024));
    assert!(d.to_string().len() < 64 * 1024, "{} bytes", d.to_string().len());
    stack.stop().await;
}

/// Checks a delivery's history is bounded as lifecycle promises: the newest
/// `MAX_KEPT_ATTEMPTS` kept, up to attempt `attempt_count`, the rest counted.
fn assert_bounded(d: &Value) {
    let kept = d["attempts"].as_array().unwrap();
    let count = d["attempt_count"].as_u64().unwrap();
    let max = webhooks::domain::delivery_lifecycle::MAX_KEPT_ATTEMPTS;
    assert_eq!(kept.len(), max, "{d:#}");
    assert_eq!(d["attempts_dropped"].as_u64().unwrap(), count - max as u64, "{d:#}");
    assert_eq!(kept.last().unwrap()["attempt"].as_u64().unwrap(), count);
    assert!(kept.iter().all(|a| a["response_body"].as_str().unwrap_or("").len() <= 1024));
    assert!(d.to_string().len() < 64 * 1024, "{} bytes", d.to_string().len());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_held_delivery_probed_again_and_again_keeps_a_bounded_history() {
    let d = Driven::start(&Faults::recording(), false).await;
    // 1 KiB of bytes that are not UTF-8: read lossily, each becomes a 3-byte U+FFFD.
    let rx = Receiver::start(Reply::Body(503, vec![0xff; 1024])).await;
    let extra = json!({"retry_policy": {"schedule_seconds": [1], "max_attempts": 5},
        "circuit_breaker_threshold": 1, "auto_resume": true, "auto_resume_after_seconds": 1});
    let ep_id = endpoint(&d.stack, &rx.url, extra).await["id"].as_str().unwrap().to_string();
    let id = first_delivery(&d.stack.event("acme", "order.paid", json!({"n": 1})).await);
    // The breaker pauses the endpoint on the first failure; every attempt after it is a probe
    // of this one held delivery (a cool-down of 1 s: two driven ticks a probe).
    d.until("35 failed probes recorded", || async {
        let dl = d.stack.delivery(&id).await;
        if dl["attempt_count"].as_u64().unwrap() >= 36 && dl["status"] == "held" { Ok(()) } else { Err(dl.to_string()) }
    })
    .await;
    let dl = d.stack.delivery(&id).await;
    assert_bounded(&dl);
    assert_eq!(rx.count() as u64, dl["attempt_count"].as_u64().unwrap());
    assert_eq!(get_endpoint(&d.stack, &ep_id).await["disabled"]["reason"], "circuit_breaker");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_delivery_whose_worker_keeps_dying_keeps_a_bounded_history() {
    let d = Driven::start(&Faults::recording(), false).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    endpoint(&d.stack, &rx.url, json!({})).await;
    let id = first_delivery(&d.stack.event("acme", "order.paid", json!({"n": 1})).await);
    let app = &d.stack.app;
    // The claim keeps the due time it found (the message's redrive time), which is past the
    // lease here: one tick then finds the lease over.
    let (lease, redrive) = (app.config.lease().as_secs() as i64, i64::from(app.config.redrive_after_seconds));
    for n in 1..=30 {
        // A worker claims attempt n and dies before it records anything; past the lease and
        // the redrive time, one sweeper tick records the attempt lost and re-drives it.
        let claim =
            delivery_lifecycle::claim(&app.config, app.clock.now(), &AttemptMessage::new(webhooks_tests::id(&id), n));
        assert!(
            matches!(app.store.apply(&webhooks_tests::id(&id), &claim, false).await.unwrap(), Applied::Done(_)),
            "claim {n}"
        );
        d.advance(lease.max(redrive) + 1);
        assert_eq!(sweep::sweep(app).await.unwrap().recovered_leases, 1, "sweep after claim {n}");
        // The re-drive is due once the worker's outcome could no longer come.
        d.advance(delivery_lifecycle::OUTCOME_WAIT_SECONDS);
    }
    let dl = d.stack.delivery(&id).await;
    assert_eq!((dl["status"].clone(), dl["attempt_count"].clone()), (json!("scheduled"), json!(30)));
    assert_bounded(&dl);
    assert!(dl["attempts"].as_array().unwrap().iter().all(|a| a["error"] == "lease_expired"), "{dl:#}");
    assert_eq!(rx.count(), 0);
    d.stop().await;
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
            .with_index_shards(cfg.endpoint_index_shards, cfg.status_index_shards)
            .with_endpoint_copies(cfg.endpoint_copies);
    let page = store
        .list_deliveries(&webhooks::store::DeliveryQuery {
            endpoint_id: Some(webhooks_tests::id(&ep_id)),
            status: Some(webhooks::domain::model::DeliveryStatus::Held),
            oldest_first: true,
            limit: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    let found: Vec<_> = page.data.iter().map(|d| d.id.clone()).collect();
    assert_eq!(found, vec![held.clone()]);
    // Each partition of `by_endpoint`.
    let partitions = webhooks::store::keys::partitions(&ep_id, cfg.endpoint_index_shards).len();
    let (queries, scanned) = (reads.queries.load(Ordering::SeqCst), reads.scanned.load(Ordering::SeqCst));
    assert!(queries <= partitions, "{queries} Queries over {partitions} index partitions");
    assert_eq!(scanned, 1, "index entries read to find 1 held delivery among 150 delivered");
    let items = reads.items.load(Ordering::SeqCst);
    assert!(items <= 1, "{items} items read to list 1 held delivery among 150 delivered");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn no_post_starts_when_the_claims_lease_has_less_left_than_the_request_timeout() {
    // The claim of attempt 1 lands, and its answer comes back well after the whole lease (2 s
    // timeout + 5 s margin): the sweeper re-drives the delivery meanwhile, and the stalled
    // worker must not POST too. (The claim is a call every version of deliver makes between
    // its message and its POST.) The stall leaves the sweeper 7 s past the lease's end: with
    // 1 s to spare, a CI run's loaded machine once had the stalled worker wake first, find
    // its lease gone and give the claim back, so that the re-drive was not first.
    let faults = Faults::stalling("apply", Duration::from_millis(14_000));
    let f = faults.clone();
    // A redrive time shorter than the lease: the sweeper finds the claim due while its lease
    // runs, waits for the lease's end, then re-drives.
    let stack = Stack::start_wrapped(|c| c.redrive_after_seconds = 1, Options::default(), move |app| f.wrap(app)).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    endpoint(&stack, &rx.url, json!({})).await;
    faults.arm();
    let id = first_delivery(&stack.event("acme", "order.paid", json!({"n": 1})).await);
    let d = stack.wait_status(&id, "delivered", WITHIN).await;
    eventually("the stalled worker went on", WITHIN, || async { faults.stall_over() }).await;
    // What the stalled worker would have sent arrives within moments of its claim's answer:
    // give it 1 s.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(rx.count(), 1, "two POSTs for one delivery: {d:#}");
    assert_eq!(d["attempts"][0]["error"], "lease_expired", "the re-drive went first: {d:#}");
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
    assert_eq!(d["reason"], "unsubscribed", "{d:#}");
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
        let job = webhooks::domain::model::Job {
            id: webhooks_tests::id(format!("job_backlog{n:02}")),
            kind: webhooks::domain::model::JobKind::Notify,
            tenant_id: webhooks_tests::id("acme"),
            endpoint_id: "ep_gone".into(),
            status: "running".into(),
            since: None,
            until: None,
            cursor: None,
            processed: 0,
            run_at: Some(long_ago),
            event: None,
            created_at: long_ago,
            updated_at: long_ago,
        };
        stack.app.store.create_job(&job).await.unwrap();
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
    let total = endpoints::DELETE_ENDS_INLINE + 20;
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
    assert_eq!(body["deliveries_ended"], endpoints::DELETE_ENDS_INLINE, "{body}");
    for id in &ids {
        let d = stack.wait_status(id, "exhausted", WITHIN).await;
        assert_eq!(d["reason"], "endpoint_deleted", "{d:#}");
    }
    assert_eq!(rx.count(), 0);
    stack.stop().await;
}

/// The last success is the time of the latest delivery that succeeded, also when that is a
/// replay of one accepted before others that succeeded since.
#[tokio::test(flavor = "multi_thread")]
async fn the_last_success_is_the_latest_one_also_after_replaying_an_older_dead_letter() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    rx.script([Reply::Status(500)]);
    let ep = endpoint(&stack, &rx.url, json!({"retry_policy": {"schedule_seconds": [1], "max_attempts": 1}})).await;
    let ep_id: webhooks::domain::ids::EndpointId = webhooks_tests::id(ep["id"].as_str().unwrap());
    // The first event fails into a dead letter; the second is delivered.
    let older = first_delivery(&stack.event("acme", "order.paid", json!({"n": 1})).await);
    stack.wait_status(&older, "exhausted", WITHIN).await;
    let newer = first_delivery(&stack.event("acme", "order.paid", json!({"n": 2})).await);
    let delivered = stack.wait_status(&newer, "delivered", WITHIN).await;
    let stats = endpoints::endpoint_stats(&stack.app, &ep_id).await.unwrap();
    let at = |v: &Value| v.as_str().and_then(|t| DateTime::parse_from_rfc3339(t).ok()).map(|t| t.with_timezone(&Utc));
    assert_eq!(stats.last_success_at, at(&delivered["updated_at"]), "{stats:?}");
    // The older one replayed and delivered: its success is the latest.
    let (status, body) = stack.call(Method::POST, &format!("/v1/deliveries/{older}/replay"), None).await;
    assert_eq!(status, 202, "{body}");
    let replayed = stack.wait_status(&older, "delivered", WITHIN).await;
    // Deliver counts a delivery right after recording it: wait for that count to land.
    eventually("the replay counted", WITHIN, || async {
        endpoints::endpoint_stats(&stack.app, &ep_id).await.is_ok_and(|s| s.counts["delivered"] == 2)
    })
    .await;
    let stats = endpoints::endpoint_stats(&stack.app, &ep_id).await.unwrap();
    assert!(at(&replayed["updated_at"]) > at(&delivered["updated_at"]), "{replayed:#}");
    assert_eq!(stats.last_success_at, at(&replayed["updated_at"]), "{stats:?}");
    assert_eq!(stats.counts["delivered"], 2, "{stats:?}");
    let (status, body) = stack.call(Method::GET, &format!("/v1/endpoints/{ep_id}/stats"), None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(at(&body["last_success_at"]), at(&replayed["updated_at"]), "{body}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoints_stats_read_none_of_its_delivered_history() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let ep = endpoint(&stack, &rx.url, json!({})).await;
    let ep_id = ep["id"].as_str().unwrap().to_string();
    let sdk = webhooks::app::aws_sdk_config().await;
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
            .with_index_shards(cfg.endpoint_index_shards, cfg.status_index_shards)
            .with_endpoint_copies(cfg.endpoint_copies),
    );
    let stats = endpoints::endpoint_stats(&app, &webhooks_tests::id(&ep_id)).await.unwrap();
    assert_eq!(stats.counts["delivered"], 40, "{stats:?}");
    assert_eq!(stats.counted, 40, "{stats:?}");
    assert!(stats.last_success_at.is_some());
    let scanned = reads.scanned.load(Ordering::SeqCst);
    assert!(scanned < 40, "{scanned} entries read for the stats of an endpoint with 40 delivered");
    let (status, body) = stack.call(Method::GET, &format!("/v1/endpoints/{ep_id}/stats"), None).await;
    assert_eq!((status, &body["counts"]["delivered"]), (200, &json!(40)), "{body}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_probe_passes_over_held_deliveries_the_filter_no_longer_takes() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(503)).await;
    let extra = json!({"event_types": ["order.*", "invoice.*"], "retry_policy": {"schedule_seconds": [1], "max_attempts": 5},
        "circuit_breaker_threshold": 1, "auto_resume": true, "auto_resume_after_seconds": 30});
    let ep = endpoint(&stack, &rx.url, extra).await;
    let ep_id = ep["id"].as_str().unwrap().to_string();
    let order = first_delivery(&stack.event("acme", "order.paid", json!({"n": 1})).await);
    stack.wait_status(&order, "held", WITHIN).await;
    let invoice = first_delivery(&stack.event("acme", "invoice.paid", json!({"n": 2})).await);
    stack.wait_status(&invoice, "held", WITHIN).await;
    // The filter drops the oldest held delivery's type; the receiver is back; a short cool-down.
    let patch = json!({"event_types": ["invoice.*"], "auto_resume_after_seconds": 1});
    let (status, body) = stack.call(Method::PATCH, &format!("/v1/endpoints/{ep_id}"), Some(patch)).await;
    assert_eq!(status, 200, "{body}");
    rx.set_default(Reply::Status(200));
    let hits = rx.count();
    stack.wait_status(&invoice, "delivered", WITHIN).await;
    let o = stack.wait_status(&order, "exhausted", WITHIN).await;
    assert_eq!(o["reason"], "unsubscribed", "{o:#}");
    assert_eq!(rx.count(), hits + 1, "only the invoice was sent after the PATCH");
    assert_eq!(
        rx.hits().last().unwrap().header("webhook-id"),
        stack.delivery(&invoice).await["event_id"].as_str().unwrap()
    );
    eventually("the endpoint resumed", WITHIN, || async { get_endpoint(&stack, &ep_id).await["enabled"] == true })
        .await;
    stack.stop().await;
}

/// Issue #35, failing input 6: a probe's record met a changed endpoint on every try (a PATCH
/// or a rotation racing it, five times), its outcome was recorded without the endpoint's move,
/// and the endpoint stayed `probing` with every delivery held until someone enabled it by
/// hand. Now the probe's message goes back: its lease runs out, the sweeper re-drives it as
/// the probe again, and that record moves the endpoint.
#[tokio::test(flavor = "multi_thread")]
async fn a_probe_whose_record_keeps_meeting_a_changed_endpoint_is_not_left_probing() {
    // Armed: the next commits each find the endpoint's version moved (a raw write before them).
    let bumps = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let endpoint_id = Arc::new(Mutex::new(String::new()));
    let table = Arc::new(Mutex::new(String::new()));
    let (b, e, t) = (bumps.clone(), endpoint_id.clone(), table.clone());
    let hook: Hook = Arc::new(move |call| {
        let (b, e, t) = (b.clone(), e.clone(), t.clone());
        Box::pin(async move {
            if call == "commit" && b.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
                let ddb = aws_sdk_dynamodb::Client::new(&webhooks::app::aws_sdk_config().await);
                let (table, id) = (t.lock().unwrap().clone(), e.lock().unwrap().clone());
                ddb.update_item()
                    .table_name(table)
                    .key("pk", aws_sdk_dynamodb::types::AttributeValue::S(webhooks::store::keys::tenant_pk("acme")))
                    .key("sk", aws_sdk_dynamodb::types::AttributeValue::S(webhooks::store::keys::endpoint_key(&id)))
                    .update_expression("SET version = version + :one")
                    .expression_attribute_values(":one", aws_sdk_dynamodb::types::AttributeValue::N("1".into()))
                    .send()
                    .await
                    .expect("bump the endpoint's version");
            }
            Ok(())
        }) as BoxFuture<Result<(), StoreError>>
    });
    let stack = Stack::start_wrapped(
        |c| {
            c.request_timeout = Duration::from_millis(2000);
            c.lease_margin = Duration::from_millis(1000);
            // A claimed delivery's lease is looked at from its message's redrive time.
            c.redrive_after_seconds = 2;
        },
        Options::default(),
        |app| Serialized::hooked(&app, Some(hook)),
    )
    .await;
    *table.lock().unwrap() = stack.app.config.table.clone();
    let rx = Receiver::start(Reply::Status(503)).await;
    let (ep_id, id) = paused_endpoint(&stack, &rx, json!({"schedule_seconds": [1], "max_attempts": 5})).await;
    *endpoint_id.lock().unwrap() = ep_id.clone();
    // The probe's POST takes a second; its record's five tries each meet a moved endpoint.
    rx.set_default(Reply::Hang(Duration::from_millis(1000)));
    let hits = rx.count();
    eventually("the probe's POST", WITHIN, || async { rx.count() > hits }).await;
    bumps.store(5, Ordering::SeqCst);
    eventually("the endpoint enabled again", WITHIN, || async {
        get_endpoint(&stack, &ep_id).await["enabled"] == true
    })
    .await;
    let d = stack.wait_status(&id, "delivered", WITHIN).await;
    assert_eq!(bumps.load(Ordering::SeqCst), 0, "the record met a moved endpoint five times: {d:#}");
    stack.stop().await;
}
