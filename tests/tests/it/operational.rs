//! Operational events (issue #37): `endpoint.disabled`, `endpoint.paused`, `endpoint.enabled`,
//! `endpoint.failing`, `delivery.exhausted` and `job.finished` put on the operational
//! EventBridge bus, observed as a user would: on an SQS queue that a rule on the bus targets.
//! Each is published at least once, even when the process fails right after the transition
//! (the notify job written with it publishes later).

use reqwest::Method;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use webhooks::App;
use webhooks::domain::model::{Disabled, Endpoint};
use webhooks::domain::operational::OperationalEvent;
use webhooks::notify::Notifier;
use webhooks_local::Options;
use webhooks_tests::{Receiver, Reply, Stack};

const WAIT: Duration = Duration::from_secs(30);

/// A bus with a rule that sends every operational event to a fresh queue, as the docs'
/// example rule does.
struct Observed {
    bus: String,
    queue_url: String,
    sqs: aws_sdk_sqs::Client,
    events: aws_sdk_eventbridge::Client,
}

impl Observed {
    async fn start() -> Self {
        let sdk = webhooks::app::aws_sdk_config().await;
        let (events, sqs) = (aws_sdk_eventbridge::Client::new(&sdk), aws_sdk_sqs::Client::new(&sdk));
        let name = format!("ops-{}", ulid::Ulid::new().to_string().to_lowercase());
        events.create_event_bus().name(&name).send().await.expect("create bus");
        let queue_url = sqs.create_queue().queue_name(&name).send().await.expect("queue").queue_url.unwrap_or_default();
        let attrs = sqs
            .get_queue_attributes()
            .queue_url(&queue_url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
            .send()
            .await
            .expect("queue arn");
        let arn = attrs.attributes().and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn)).cloned();
        events
            .put_rule()
            .name(&name)
            .event_bus_name(&name)
            .event_pattern(json!({"source": [webhooks::domain::operational::SOURCE]}).to_string())
            .send()
            .await
            .expect("rule");
        let target =
            aws_sdk_eventbridge::types::Target::builder().id("queue").arn(arn.unwrap_or_default()).build().unwrap();
        events.put_targets().rule(&name).event_bus_name(&name).targets(target).send().await.expect("target");
        Self { bus: name, queue_url, sqs, events }
    }

    /// Waits until the queue has received an event of `event_type` for `endpoint_id`; returns
    /// its EventBridge envelope.
    async fn wait_for(&self, event_type: &str, endpoint_id: &str, seen: &mut Vec<Value>) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(e) =
                seen.iter().find(|e| e["detail-type"] == event_type && e["detail"]["endpoint_id"] == endpoint_id)
            {
                return e.clone();
            }
            assert!(Instant::now() < deadline, "no {event_type} for {endpoint_id} on the queue; saw {seen:#?}");
            self.receive(seen).await;
        }
    }

    /// Receives what the queue holds now (waiting up to a second), into `seen`.
    async fn receive(&self, seen: &mut Vec<Value>) {
        let got = self
            .sqs
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await
            .expect("receive");
        for m in got.messages() {
            seen.push(serde_json::from_str(m.body().unwrap_or("null")).unwrap_or(Value::Null));
            if let Some(h) = m.receipt_handle() {
                let _ = self.sqs.delete_message().queue_url(&self.queue_url).receipt_handle(h).send().await;
            }
        }
    }

    async fn stop(self) {
        let _ = self.events.remove_targets().rule(&self.bus).event_bus_name(&self.bus).ids("queue").send().await;
        let _ = self.events.delete_rule().name(&self.bus).event_bus_name(&self.bus).send().await;
        let _ = self.events.delete_event_bus().name(&self.bus).send().await;
        let _ = self.sqs.delete_queue().queue_url(&self.queue_url).send().await;
    }
}

/// Fails the first `n` publishes, as a process that dies between the transition and the
/// publish would leave it: the notify job is written, its first step does not publish.
struct FailFirst {
    inner: Arc<dyn Notifier>,
    left: AtomicUsize,
    failed: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl Notifier for FailFirst {
    async fn endpoint_disabled(&self, endpoint: &Endpoint, disabled: &Disabled) -> Result<(), String> {
        self.inner.endpoint_disabled(endpoint, disabled).await
    }

    async fn operational(&self, event: &OperationalEvent) -> Result<(), String> {
        if self.left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            self.failed.fetch_add(1, Ordering::SeqCst);
            return Err("the process died before publishing".into());
        }
        self.inner.operational(event).await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn each_endpoint_transition_reaches_a_queue_that_a_bus_rule_targets() {
    let observed = Observed::start().await;
    let bus = observed.bus.clone();
    let stack = Stack::start(|c| c.operational_event_bus = Some(bus)).await;
    let mut seen = Vec::new();

    // 410: endpoint.disabled (gone), then an operator enables it: endpoint.enabled (manual).
    let gone = Receiver::start(Reply::Status(410)).await;
    let ep = stack.endpoint("ops-a", &gone.url, Value::Null).await;
    let id = ep["id"].as_str().unwrap().to_string();
    let accepted = stack.event("ops-a", "order.paid", json!({})).await;
    stack.wait_status(accepted["deliveries"][0]["id"].as_str().unwrap(), "held", WAIT).await;
    let disabled = observed.wait_for("endpoint.disabled", &id, &mut seen).await;
    assert_eq!(disabled["source"], "webhooks.operational");
    assert_eq!(disabled["detail"]["reason"], "gone");
    assert_eq!(disabled["detail"]["status_code"], 410);
    assert_eq!(disabled["detail"]["tenant_id"], "ops-a");
    assert!(disabled["detail"]["id"].as_str().unwrap_or("").starts_with("job_"), "an id to deduplicate on");
    gone.set_default(Reply::Status(200));
    let (status, _) = stack.call(Method::POST, &format!("/v1/endpoints/{id}/enable"), None).await;
    assert_eq!(status, 200);
    let enabled = observed.wait_for("endpoint.enabled", &id, &mut seen).await;
    assert_eq!(enabled["detail"]["reason"], "manual");
    assert_ne!(enabled["detail"]["id"], disabled["detail"]["id"]);

    // The circuit breaker: endpoint.paused.
    let failing = Receiver::start(Reply::Status(500)).await;
    let (status, ep) = stack
        .call(
            Method::POST,
            "/v1/endpoints",
            Some(json!({"tenant_id": "ops-b", "url": failing.url,
            "circuit_breaker_threshold": 1, "retry_policy": {"schedule_seconds": [1], "max_attempts": 3}})),
        )
        .await;
    assert_eq!(status, 201, "{ep}");
    let paused_id = ep["id"].as_str().unwrap().to_string();
    stack.event("ops-b", "order.paid", json!({})).await;
    let paused = observed.wait_for("endpoint.paused", &paused_id, &mut seen).await;
    assert_eq!(paused["detail"]["reason"], "circuit_breaker");
    // A manual disable of an enabled endpoint: endpoint.disabled (manual); nothing for the
    // endpoints that did not change.
    let quiet = stack.endpoint("ops-c", &failing.url, Value::Null).await;
    let quiet_id = quiet["id"].as_str().unwrap().to_string();
    stack.call(Method::POST, &format!("/v1/endpoints/{quiet_id}/disable"), None).await;
    let manual = observed.wait_for("endpoint.disabled", &quiet_id, &mut seen).await;
    assert_eq!(manual["detail"]["reason"], "manual");
    // The first endpoint's transitions (not its jobs' ends: the hold job its disable started
    // may report `job.finished` too), each once by its `detail.id` (published at least once: a
    // notify step that runs again publishes the same event; consumers deduplicate on it).
    let transition = |e: &&Value| {
        e["detail"]["endpoint_id"] == id && e["detail-type"].as_str().is_some_and(|t| t.starts_with("endpoint."))
    };
    let mut ids: Vec<&Value> = seen.iter().filter(transition).map(|e| &e["detail"]["id"]).collect();
    ids.sort_by_key(|v| v.to_string());
    ids.dedup();
    assert_eq!(ids.len(), 2, "{seen:#?}");
    stack.stop().await;
    observed.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_event_whose_publish_failed_after_the_transition_is_published_by_the_notify_job() {
    let observed = Observed::start().await;
    let bus = observed.bus.clone();
    let failed = Arc::new(AtomicUsize::new(0));
    let counter = failed.clone();
    let stack = Stack::start_wrapped(
        |c| c.operational_event_bus = Some(bus),
        Options::default(),
        move |app: App| {
            let inner = app.notifier.clone();
            app.with_notifier(Arc::new(FailFirst { inner, left: AtomicUsize::new(1), failed: counter }))
        },
    )
    .await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let ep = stack.endpoint("ops-crash", &rx.url, Value::Null).await;
    let id = ep["id"].as_str().unwrap().to_string();
    let (status, _) = stack.call(Method::POST, &format!("/v1/endpoints/{id}/disable"), None).await;
    assert_eq!(status, 200, "the disable answered though its publish failed");
    assert_eq!(failed.load(Ordering::SeqCst), 1, "the inline publish failed");
    // The sweeper runs the notify job the disable wrote.
    let mut seen = Vec::new();
    let deadline = Instant::now() + WAIT;
    let event = loop {
        webhooks::service::sweep::sweep(&stack.app).await.unwrap();
        let got =
            tokio::time::timeout(Duration::from_secs(3), observed.wait_for("endpoint.disabled", &id, &mut seen)).await;
        if let Ok(e) = got {
            break e;
        }
        assert!(Instant::now() < deadline, "never published");
    };
    assert_eq!(event["detail"]["reason"], "manual");
    stack.stop().await;
    observed.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operational_endpoint_receives_the_event_as_a_signed_webhook_and_producers_cannot_post_there() {
    // No bus configured: the operational endpoints get the events all the same.
    let stack = Stack::start(|_| {}).await;
    let ops_rx = Receiver::start(Reply::Status(200)).await;
    let (status, ops) = stack
        .call(
            Method::POST,
            "/v1/endpoints",
            Some(json!({"tenant_id": webhooks::domain::operational::TENANT, "url": ops_rx.url,
                "event_types": ["endpoint.*"]})),
        )
        .await;
    assert_eq!(status, 201, "{ops}");
    let secret = ops["secret"].as_str().unwrap().to_string();

    let rx = Receiver::start(Reply::Status(200)).await;
    let ep = stack.endpoint("ops-hook", &rx.url, Value::Null).await;
    let id = ep["id"].as_str().unwrap().to_string();
    let (status, _) = stack.call(Method::POST, &format!("/v1/endpoints/{id}/disable"), None).await;
    assert_eq!(status, 200);
    let deadline = Instant::now() + WAIT;
    while ops_rx.count() == 0 {
        assert!(Instant::now() < deadline, "no operational webhook");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let hit = &ops_rx.hits()[0];
    let body: Value = serde_json::from_slice(&hit.body).unwrap();
    assert_eq!(body["event_type"], "endpoint.disabled", "{body}");
    assert_eq!(body["endpoint_id"], id.as_str());
    assert_eq!(body["tenant_id"], "ops-hook");
    assert_eq!(body["reason"], "manual");
    assert_eq!(hit.header("webhook-id"), body["id"].as_str().unwrap(), "the event's id is the webhook-id");
    standardwebhooks::Webhook::new(&secret).unwrap().verify(&hit.body, &hit.headers).expect("signed");
    // Listed like any event of the operational tenant's endpoint.
    let (status, listed) =
        stack.call(Method::GET, &format!("/v1/deliveries?endpoint_id={}", ops["id"].as_str().unwrap()), None).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(1), "{listed}");

    // A producer cannot forge one.
    let (status, e) = stack
        .call(
            Method::POST,
            "/v1/events",
            Some(json!({"tenant_id": webhooks::domain::operational::TENANT, "event_type": "endpoint.disabled",
                "payload": {"endpoint_id": id}})),
        )
        .await;
    assert_eq!((status, e["error"]["code"].as_str()), (403, Some("reserved_tenant")), "{e}");
    assert_eq!(ops_rx.count(), 1, "nothing more reached the operational endpoint");
    stack.stop().await;
}

/// `delivery_id` of an ingest answer's first delivery.
fn first_delivery(accepted: &Value) -> String {
    accepted["deliveries"][0]["id"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_letter_and_the_end_of_a_recover_or_hold_job_reach_the_queue() {
    let observed = Observed::start().await;
    let bus = observed.bus.clone();
    let stack = Stack::start(|c| c.operational_event_bus = Some(bus)).await;
    let mut seen = Vec::new();

    // One attempt allowed, answered 503: a dead letter, and delivery.exhausted with what a
    // user needs to find it and act on it.
    let rx = Receiver::start(Reply::Status(503)).await;
    let ep = stack.endpoint("ops-x", &rx.url, json!({"schedule_seconds": [1], "max_attempts": 1})).await;
    let id = ep["id"].as_str().unwrap().to_string();
    let since = chrono::Utc::now() - chrono::Duration::seconds(1);
    let accepted = stack.event("ops-x", "order.paid", json!({"n": 1})).await;
    let delivery = first_delivery(&accepted);
    stack.wait_status(&delivery, "exhausted", WAIT).await;
    let exhausted = observed.wait_for("delivery.exhausted", &id, &mut seen).await;
    let d = &exhausted["detail"];
    assert_eq!(exhausted["source"], "webhooks.operational");
    assert_eq!(d["delivery_id"], delivery.as_str());
    assert_eq!(d["event_id"], accepted["event_id"], "{exhausted:#}");
    assert_eq!(d["delivery_event_type"], "order.paid");
    assert_eq!((d["tenant_id"].as_str(), d["attempt_count"].as_u64()), (Some("ops-x"), Some(1)));
    assert_eq!((d["status_code"].as_u64(), d["error"].as_str()), (Some(503), Some("http_status")));
    assert_eq!(d["reason"], "retry_policy");
    assert!(d["at"].is_string() && d["id"].as_str().unwrap_or("").starts_with("job_"), "{exhausted:#}");

    // The receiver is fixed; a recover job replays the dead letter: job.finished with its count.
    rx.set_default(Reply::Status(200));
    let (status, job) = stack
        .call(Method::POST, &format!("/v1/endpoints/{id}/recover"), Some(json!({"since": since.to_rfc3339()})))
        .await;
    assert_eq!(status, 202, "{job}");
    stack.wait_status(&delivery, "delivered", WAIT).await;
    let finished = observed.wait_for("job.finished", &id, &mut seen).await;
    let f = &finished["detail"];
    assert_eq!((f["job_id"].as_str(), f["job_kind"].as_str()), (job["id"].as_str(), Some("recover")), "{finished:#}");
    assert_eq!((f["processed"].as_u64(), f["reason"].as_str()), (Some(1), Some("done")));

    // A disable's hold job ends too (nothing scheduled to hold: processed 0).
    let quiet = stack.endpoint("ops-y", &rx.url, Value::Null).await;
    let quiet_id = quiet["id"].as_str().unwrap().to_string();
    let (status, _) = stack.call(Method::POST, &format!("/v1/endpoints/{quiet_id}/disable"), None).await;
    assert_eq!(status, 200);
    let finished = observed.wait_for("job.finished", &quiet_id, &mut seen).await;
    assert_eq!(
        (finished["detail"]["job_kind"].as_str(), finished["detail"]["processed"].as_u64()),
        (Some("hold"), Some(0))
    );
    // Only one delivery.exhausted for the one dead letter (its publish did not fail).
    let dead = seen.iter().filter(|e| e["detail-type"] == "delivery.exhausted").count();
    assert_eq!(dead, 1, "{seen:#?}");
    stack.stop().await;
    observed.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_letter_whose_publish_failed_after_the_record_is_published_by_its_notify_job() {
    let observed = Observed::start().await;
    let bus = observed.bus.clone();
    let failed = Arc::new(AtomicUsize::new(0));
    let counter = failed.clone();
    let stack = Stack::start_wrapped(
        |c| c.operational_event_bus = Some(bus),
        Options::default(),
        move |app: App| {
            let inner = app.notifier.clone();
            app.with_notifier(Arc::new(FailFirst { inner, left: AtomicUsize::new(1), failed: counter }))
        },
    )
    .await;
    let rx = Receiver::start(Reply::Status(500)).await;
    let ep = stack.endpoint("ops-dead", &rx.url, json!({"schedule_seconds": [1], "max_attempts": 1})).await;
    let id = ep["id"].as_str().unwrap().to_string();
    let delivery = first_delivery(&stack.event("ops-dead", "order.paid", json!({})).await);
    stack.wait_status(&delivery, "exhausted", WAIT).await;
    // The record is written and the publish right after it failed, as if deliver had died
    // there; the sweeper runs the notify job written with the record.
    let mut seen = Vec::new();
    let event = observed.wait_for("delivery.exhausted", &id, &mut seen).await;
    assert_eq!(failed.load(Ordering::SeqCst), 1, "the inline publish failed");
    assert_eq!(event["detail"]["delivery_id"], delivery.as_str());
    assert_eq!(event["detail"]["status_code"], 500);
    stack.stop().await;
    observed.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_failing_half_its_breaker_threshold_is_announced_once_per_run() {
    let observed = Observed::start().await;
    let bus = observed.bus.clone();
    let stack = Stack::start(|c| c.operational_event_bus = Some(bus)).await;
    let mut seen = Vec::new();
    // Breaker at 10: announced at 5 failures in a row. One delivery, retried every second.
    let rx = Receiver::start(Reply::Status(500)).await;
    let (status, ep) = stack
        .call(
            Method::POST,
            "/v1/endpoints",
            Some(json!({"tenant_id": "ops-f", "url": rx.url, "circuit_breaker_threshold": 10,
                "retry_policy": {"schedule_seconds": [1], "max_attempts": 30}})),
        )
        .await;
    assert_eq!(status, 201, "{ep}");
    let id = ep["id"].as_str().unwrap().to_string();
    let first = first_delivery(&stack.event("ops-f", "order.paid", json!({})).await);
    let failing = observed.wait_for("endpoint.failing", &id, &mut seen).await;
    let f = &failing["detail"];
    assert_eq!((f["reason"].as_str(), f["threshold"].as_u64()), (Some("failures_in_a_row"), Some(10)), "{failing:#}");
    assert_eq!((f["consecutive_failures"].as_u64(), f["status_code"].as_u64()), (Some(5), Some(500)));
    assert!(rx.count() >= 5, "announced at the fifth failure, not before: {}", rx.count());
    // Two more failures of the same run: no second announcement.
    webhooks_tests::eventually("two more failures", WAIT, || async { rx.count() >= 7 }).await;
    // The receiver recovers (the run ends), then fails again: a new run, announced again.
    rx.set_default(Reply::Status(200));
    stack.wait_status(&first, "delivered", WAIT).await;
    let runs = |seen: &[Value]| {
        seen.iter()
            .filter(|e| e["detail-type"] == "endpoint.failing" && e["detail"]["endpoint_id"] == id.as_str())
            .count()
    };
    assert_eq!(runs(&seen), 1, "one announcement for the first run: {seen:#?}");
    rx.set_default(Reply::Status(500));
    stack.event("ops-f", "order.paid", json!({"n": 3})).await;
    let deadline = Instant::now() + WAIT;
    while runs(&seen) < 2 {
        assert!(Instant::now() < deadline, "the second run was not announced: {seen:#?}");
        observed.receive(&mut seen).await;
    }
    stack.stop().await;
    observed.stop().await;
}
