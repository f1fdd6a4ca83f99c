//! Retry policies and endpoint health end to end on the local stack. Preset schedules run
//! compressed through `wait_scale` (a test-only time scale); attempt records keep the
//! policy's own waits, so the order of waits is checked as the policy chose them.

use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;
use webhooks::service::sweep;
use webhooks_local::Options;
use webhooks_tests::{Receiver, Reply, Stack, eventually};

const WAIT: Duration = Duration::from_secs(30);
/// 24 h becomes 3 s; everything under 10 h becomes 1 s.
const SCALE: f64 = 1.0 / 36000.0;

fn delivery_id(accepted: &Value) -> String {
    accepted["deliveries"][0]["id"].as_str().expect("delivery id").to_string()
}

fn waits(d: &Value) -> Vec<u64> {
    d["attempts"].as_array().unwrap().iter().filter_map(|a| a["next_wait_seconds"].as_u64()).collect()
}

async fn endpoint(stack: &Stack, tenant: &str, url: &str, extra: Value) -> Value {
    let mut body = json!({"tenant_id": tenant, "url": url});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let (status, ep) = stack.call(Method::POST, "/v1/endpoints", Some(body)).await;
    assert_eq!(status, 201, "{ep}");
    ep
}

#[tokio::test(flavor = "multi_thread")]
async fn each_preset_makes_its_attempts_in_its_order_of_waits() {
    let stack = Stack::start(|c| c.wait_scale = SCALE).await;
    let failing = Receiver::start(Reply::Status(500)).await;
    let limited = Receiver::start(Reply::Status(429)).await;
    let cases = [
        ("standard", json!({"preset": "standard"}), &failing, 8usize),
        ("svix", json!({"preset": "svix"}), &failing, 8),
        ("frappe", json!({"preset": "frappe", "max_retries": 3}), &failing, 4),
        ("frappe0", json!({"preset": "frappe", "max_retries": 0}), &failing, 1),
        ("rate_limit_only", json!({"preset": "rate_limit_only"}), &limited, 7),
        ("rate_limit_only on 500", json!({"preset": "rate_limit_only"}), &failing, 1),
    ];
    let mut ids = Vec::new();
    for (i, (name, policy, rx, _)) in cases.iter().enumerate() {
        let tenant = format!("t{i}");
        endpoint(&stack, &tenant, &rx.url, json!({"retry_policy": policy})).await;
        ids.push((name, delivery_id(&stack.event(&tenant, "order.paid", json!({"case": name})).await)));
    }
    for ((name, id), (_, _, _, attempts)) in ids.iter().zip(cases.iter()) {
        let d = stack.wait_status(id, "exhausted", WAIT).await;
        assert_eq!(d["attempt_count"], *attempts as u64, "{name}: {d}");
        let w = waits(&d);
        match **name {
            "standard" => {
                let expected = [30u64, 120, 600, 3600, 10800, 28800, 86400];
                assert_eq!(w.len(), 7, "{w:?}");
                for (got, base) in w.iter().zip(expected) {
                    let (lo, hi) = ((base as f64 * 0.8).floor() as u64, (base as f64 * 1.2).ceil() as u64);
                    assert!((lo..=hi).contains(got), "standard wait {got} outside {lo}..={hi}");
                }
            }
            "svix" => assert_eq!(w, vec![5, 300, 1800, 7200, 18000, 36000, 36000]),
            "frappe" => assert_eq!(w, vec![300, 1800, 7200]),
            "rate_limit_only" => {
                assert_eq!(w.len(), 6);
                assert!(w.iter().all(|s| (540..=660).contains(s)), "{w:?}");
            }
            _ => assert!(w.is_empty(), "{name}: one attempt, final: {w:?}"),
        }
    }
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn retry_after_is_honoured_in_seconds_and_as_an_http_date() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    // The date form first, while "now + 5 s" is still ahead.
    rx.script([
        Reply::WithHeaders(503, vec![("retry-after", httpdate_in(5))]),
        Reply::WithHeaders(429, vec![("retry-after", "3".into())]),
        Reply::WithHeaders(429, vec![("retry-after", "soon".into())]),
    ]);
    endpoint(&stack, "acme", &rx.url, json!({"retry_policy": {"schedule_seconds": [1], "max_attempts": 5}})).await;
    let id = delivery_id(&stack.event("acme", "order.paid", json!({})).await);
    let d = stack.wait_status(&id, "delivered", WAIT).await;
    let a = d["attempts"].as_array().unwrap();
    assert_eq!(a.len(), 4, "{d}");
    assert_eq!(a[0]["wait_source"], "retry_after", "{}", a[0]);
    assert!(a[0]["next_wait_seconds"].as_u64().unwrap() >= 3, "{}", a[0]);
    assert_eq!((a[1]["next_wait_seconds"].as_u64(), a[1]["wait_source"].as_str()), (Some(3), Some("retry_after")));
    // An unparseable header is ignored: the schedule's wait is used.
    assert_eq!((a[2]["next_wait_seconds"].as_u64(), a[2]["wait_source"].as_str()), (Some(1), Some("schedule")));
    let hits = rx.hits();
    assert!(hits[1].at - hits[0].at >= Duration::from_millis(2900), "waited for the date");
    assert!(hits[2].at - hits[1].at >= Duration::from_millis(2900), "waited the header's 3 s");
    stack.stop().await;
}

fn httpdate_in(seconds: u64) -> String {
    let at = std::time::SystemTime::now() + Duration::from_secs(seconds);
    // IMF-fixdate, e.g. "Sun, 29 Nov 2026 19:00:00 GMT".
    chrono::DateTime::<chrono::Utc>::from(at).format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

async fn endpoint_state(stack: &Stack, id: &str) -> Value {
    let (status, ep) = stack.call(Method::GET, &format!("/v1/endpoints/{id}"), None).await;
    assert_eq!(status, 200, "{ep}");
    ep
}

#[tokio::test(flavor = "multi_thread")]
async fn gone_disables_and_holds_then_enable_releases_everything() {
    let stack = Stack::start(|c| c.wait_scale = SCALE).await;
    let rx = Receiver::start(Reply::Status(410)).await;
    let ep = endpoint(&stack, "acme", &rx.url, json!({})).await;
    let ep_id = ep["id"].as_str().unwrap();
    let first = delivery_id(&stack.event("acme", "order.paid", json!({"n": 1})).await);

    let d = stack.wait_status(&first, "held", WAIT).await;
    assert_eq!(d["attempts"][0]["status_code"], 410);
    assert!(d["next_attempt_at"].is_null());
    let state = endpoint_state(&stack, ep_id).await;
    assert_eq!(state["enabled"], false);
    assert_eq!(state["disabled"]["reason"], "gone");
    assert_eq!(state["disabled"]["status_code"], 410);

    // Events while disabled are kept, held as they come up, and not attempted.
    let second = delivery_id(&stack.event("acme", "order.paid", json!({"n": 2})).await);
    let d = stack.wait_status(&second, "held", WAIT).await;
    assert!(d["attempts"].as_array().unwrap().is_empty(), "held without an attempt: {d:#}");
    let (_, held) = stack.call(Method::GET, "/v1/deliveries?status=held", None).await;
    assert_eq!(held["data"].as_array().unwrap().len(), 2, "{held}");
    assert_eq!(rx.count(), 1);

    rx.set_default(Reply::Status(200));
    let (status, enabled) = stack.call(Method::POST, &format!("/v1/endpoints/{ep_id}/enable"), None).await;
    assert_eq!(status, 200, "{enabled}");
    assert_eq!(enabled["enabled"], true);
    let job_id = enabled["release_job"]["id"].as_str().unwrap().to_string();
    for id in [&first, &second] {
        let d = stack.wait_status(id, "delivered", WAIT).await;
        assert_eq!(d["attempts"].as_array().unwrap().last().unwrap()["status_code"], 200);
    }
    // The job ends once a step finds nothing left and the index has had time to settle.
    let job_path = format!("/v1/jobs/{job_id}");
    eventually("the release job done", WAIT, || async {
        stack.call(Method::GET, &job_path, None).await.1["status"] == "done"
    })
    .await;
    let (_, job) = stack.call(Method::GET, &job_path, None).await;
    assert_eq!(job["processed"].as_u64(), Some(2), "{job}");
    assert_eq!(rx.count(), 3);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_circuit_breaker_pauses_after_n_failures_in_a_row() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(500)).await;
    let ep = endpoint(
        &stack,
        "acme",
        &rx.url,
        json!({"retry_policy": {"schedule_seconds": [1], "max_attempts": 20}, "circuit_breaker_threshold": 3}),
    )
    .await;
    let id = delivery_id(&stack.event("acme", "order.paid", json!({})).await);
    let d = stack.wait_status(&id, "held", WAIT).await;
    assert_eq!(d["attempt_count"], 3, "paused after the 3rd failure: {d}");
    let state = endpoint_state(&stack, ep["id"].as_str().unwrap()).await;
    assert_eq!(state["disabled"]["reason"], "circuit_breaker");
    assert_eq!(state["consecutive_failures"], 3);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(rx.count(), 3, "no attempts while paused");
    stack.stop().await;
}

/// An endpoint of `acme` retried every second, paused after 2 failures in a row, and probed
/// `cool_down` seconds after that.
async fn probing_endpoint(stack: &Stack, url: &str, cool_down: u64) -> Value {
    let extra = json!({
        "retry_policy": {"schedule_seconds": [1], "max_attempts": 20},
        "circuit_breaker_threshold": 2, "auto_resume": true, "auto_resume_after_seconds": cool_down
    });
    endpoint(stack, "acme", url, extra).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_half_open_probe_resumes_a_paused_endpoint() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(500)).await;
    let ep = probing_endpoint(&stack, &rx.url, 2).await;
    let ep_id = ep["id"].as_str().unwrap();
    let first = delivery_id(&stack.event("acme", "order.paid", json!({"n": 1})).await);
    stack.wait_status(&first, "held", WAIT).await;
    let second = delivery_id(&stack.event("acme", "order.paid", json!({"n": 2})).await);
    stack.wait_status(&second, "held", WAIT).await;

    rx.set_default(Reply::Status(200));
    // After the cool-down one held delivery goes out as a probe; its 2xx resumes the endpoint
    // and the rest are released.
    stack.wait_status(&first, "delivered", WAIT).await;
    stack.wait_status(&second, "delivered", WAIT).await;
    let state = endpoint_state(&stack, ep_id).await;
    assert_eq!(state["enabled"], true, "{state}");
    assert!(state["disabled"].is_null());
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn held_deliveries_are_released_at_a_bounded_rate() {
    let stack = Stack::start_with(|c| c.release_per_tick = 2, Options { sweeper: false, ..Options::default() }).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let ep = endpoint(&stack, "acme", &rx.url, json!({})).await;
    let ep_id = ep["id"].as_str().unwrap();
    let (status, _) = stack.call(Method::POST, &format!("/v1/endpoints/{ep_id}/disable"), None).await;
    assert_eq!(status, 200);
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(delivery_id(&stack.event("acme", "order.paid", json!({"i": i})).await));
    }
    for id in &ids {
        stack.wait_status(id, "held", WAIT).await;
    }
    let (_, enabled) = stack.call(Method::POST, &format!("/v1/endpoints/{ep_id}/enable"), None).await;
    let job_id = enabled["release_job"]["id"].as_str().unwrap().to_string();

    let mut released_per_tick = Vec::new();
    for _ in 0..4 {
        sweep::sweep(&stack.app).await.unwrap();
        let (_, job) = stack.call(Method::GET, &format!("/v1/jobs/{job_id}"), None).await;
        released_per_tick.push(job["processed"].as_u64().unwrap());
        if job["processed"] == 5 {
            break;
        }
    }
    assert_eq!(released_per_tick, vec![2, 4, 5], "two per tick");
    for id in &ids {
        stack.wait_status(id, "delivered", WAIT).await;
    }
    assert_eq!(rx.count(), 5);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sync_mode_returns_the_receivers_outcome() {
    let stack = Stack::start_with(|_| {}, Options { pollers: 0, sweeper: false, ..Options::default() }).await;
    let ok = Receiver::start(Reply::Status(201)).await;
    let bad = Receiver::start(Reply::Status(500)).await;
    endpoint(&stack, "good", &ok.url, json!({})).await;
    endpoint(&stack, "bad", &bad.url, json!({})).await;
    let post =
        |tenant: &str| json!({"tenant_id": tenant, "event_type": "doc.submitted", "payload": {"d": 1}, "mode": "sync"});

    let (status, body) = stack.call(Method::POST, "/v1/events", Some(post("good"))).await;
    assert_eq!((status, body["status"].as_str(), body["status_code"].as_u64()), (200, Some("delivered"), Some(201)));
    assert_eq!(ok.count(), 1);

    let (status, body) = stack.call(Method::POST, "/v1/events", Some(post("bad"))).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["status"], "exhausted");
    assert_eq!(body["attempt"]["status_code"], 500);
    let id = body["delivery_id"].as_str().unwrap();
    let d = stack.delivery(id).await;
    assert_eq!((d["status"].as_str(), d["attempt_count"].as_u64()), (Some("exhausted"), Some(1)), "never deferred");
    assert_eq!(bad.count(), 1);

    endpoint(&stack, "good", &bad.url, json!({})).await;
    let (status, body) = stack.call(Method::POST, "/v1/events", Some(post("good"))).await;
    assert_eq!(status, 422, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("mode"));
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn retry_policy_can_be_changed_and_bad_policies_are_refused() {
    let stack = Stack::start_with(|_| {}, Options { pollers: 0, sweeper: false, ..Options::default() }).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let ep = endpoint(&stack, "acme", &rx.url, json!({})).await;
    let path = format!("/v1/endpoints/{}", ep["id"].as_str().unwrap());
    let (status, updated) =
        stack.call(Method::PATCH, &path, Some(json!({"retry_policy": {"preset": "frappe", "max_retries": 5}}))).await;
    assert_eq!(status, 200, "{updated}");
    assert_eq!(updated["retry_policy"]["max_attempts"], 6);
    assert!(updated.get("secret").is_none(), "the secret is shown only on create");
    for (policy, field) in [
        (json!({"schedule_seconds": []}), "retry_policy.schedule_seconds"),
        (json!({"schedule_seconds": [0]}), "retry_policy.schedule_seconds[0]"),
        (json!({"schedule_seconds": [604801]}), "retry_policy.schedule_seconds[0]"),
        (json!({"schedule_seconds": [1], "jitter": 0.6}), "retry_policy.jitter"),
        (json!({"schedule_seconds": [1], "retry_on": ["6xx"]}), "retry_policy.retry_on[0]"),
    ] {
        let (status, e) = stack.call(Method::PATCH, &path, Some(json!({"retry_policy": policy}))).await;
        assert_eq!(status, 422, "{e}");
        assert!(e["error"]["message"].as_str().unwrap().starts_with(field), "{e}");
    }
    let (status, _) = stack.call(Method::PATCH, "/v1/endpoints/ep_missing", Some(json!({"url": rx.url}))).await;
    assert_eq!(status, 404);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_disabled_endpoint_notifies_its_owner_through_sns() {
    // An SNS topic with an SQS subscription, to read what was published.
    webhooks_tests::emulator_url();
    let sdk = webhooks::app::aws_sdk_config().await;
    let sns = aws_sdk_sns::Client::new(&sdk);
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let suffix = chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default();
    let topic = sns.create_topic().name(format!("owners-{suffix}")).send().await.unwrap().topic_arn.unwrap();
    let inbox = sqs.create_queue().queue_name(format!("inbox-{suffix}")).send().await.unwrap().queue_url.unwrap();
    let inbox_arn = sqs
        .get_queue_attributes()
        .queue_url(&inbox)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()[&aws_sdk_sqs::types::QueueAttributeName::QueueArn]
        .clone();
    sns.subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint(&inbox_arn)
        .attributes("RawMessageDelivery", "true")
        .send()
        .await
        .unwrap();

    let stack = Stack::start(|c| c.notify_topic_arn = Some(topic.clone())).await;
    let rx = Receiver::start(Reply::Status(410)).await;
    let ep = endpoint(&stack, "acme", &rx.url, json!({})).await;
    let id = delivery_id(&stack.event("acme", "order.paid", json!({})).await);
    stack.wait_status(&id, "held", WAIT).await;

    let mut messages = Vec::new();
    for _ in 0..20 {
        let out = sqs.receive_message().queue_url(&inbox).wait_time_seconds(1).send().await.unwrap();
        messages.extend(out.messages.unwrap_or_default());
        if !messages.is_empty() {
            break;
        }
    }
    assert_eq!(messages.len(), 1, "one notification");
    let body: Value = serde_json::from_str(messages[0].body.as_deref().unwrap()).unwrap();
    assert_eq!(body["notification"], "endpoint_disabled");
    assert_eq!(body["endpoint_id"], ep["id"]);
    assert_eq!(body["reason"], "gone");
    assert_eq!(body["status_code"], 410);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_probe_whose_payload_expired_is_a_dead_letter_and_the_next_held_delivery_probes() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(500)).await;
    let ep = probing_endpoint(&stack, &rx.url, 4).await;
    let first_event = stack.event("acme", "order.paid", json!({"n": 1})).await;
    let first = delivery_id(&first_event);
    stack.wait_status(&first, "held", WAIT).await;
    let second = delivery_id(&stack.event("acme", "order.paid", json!({"n": 2})).await);
    // The oldest held delivery (the next probe) outlives its payload, as after
    // WEBHOOKS_EVENT_RETENTION_DAYS.
    stack.expire_payload("acme", first_event["event_id"].as_str().unwrap()).await;
    rx.set_default(Reply::Status(200));

    // It is not held again (it would be the probe forever): a dead letter saying why, and the
    // next held delivery probes and resumes the endpoint.
    let d = stack.wait_status(&first, "exhausted", WAIT).await;
    assert_eq!(d["attempts"].as_array().unwrap().last().unwrap()["error"], "payload_expired", "{d}");
    stack.wait_status(&second, "delivered", WAIT).await;
    let state = endpoint_state(&stack, ep["id"].as_str().unwrap()).await;
    assert_eq!(state["enabled"], true, "{state}");
    assert_eq!(rx.count(), 3, "two failures before the pause and the second event; nothing sent without a payload");
    stack.stop().await;
}

/// An attempt that got no answer says why, beside its class (`connection` or `timeout`):
/// nothing listening (`refused`), the receiver dropping the connection (`reset`), a name
/// that does not resolve (`dns`), a TLS handshake with something that does not speak TLS
/// (`tls`), no answer within the request timeout (`timeout`).
#[tokio::test(flavor = "multi_thread")]
async fn an_attempt_without_an_answer_records_its_cause() {
    let stack = Stack::start(|c| c.request_timeout = Duration::from_secs(1)).await;
    // Nothing listens on a port just freed.
    let freed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    // A listener that reads the request and resets the connection instead of answering
    // (SO_LINGER 0, then close), as a receiver that crashes on it does.
    let resetter = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let reset_port = resetter.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = resetter.accept().await {
            let mut request = [0u8; 1024];
            let _ = tokio::io::AsyncReadExt::read(&mut socket, &mut request).await;
            #[allow(deprecated)]
            let _ = socket.set_linger(Some(Duration::ZERO));
            drop(socket);
        }
    });
    let plain = Receiver::start(Reply::Status(200)).await;
    let hanging = Receiver::start(Reply::Hang(Duration::from_secs(5))).await;
    let plain_port = plain.url.trim_start_matches("http://127.0.0.1:").split('/').next().unwrap().to_string();
    let cases = [
        ("refused", "connection", format!("http://127.0.0.1:{freed}/hook")),
        ("reset", "connection", format!("http://127.0.0.1:{reset_port}/hook")),
        ("dns", "connection", "http://no-such-receiver.invalid/hook".to_string()),
        ("tls", "connection", format!("https://127.0.0.1:{plain_port}/hook")),
        ("timeout", "timeout", hanging.url.clone()),
    ];
    for (cause, class, url) in cases {
        let tenant = format!("cause-{cause}");
        stack.endpoint(&tenant, &url, Value::Null).await;
        let accepted = stack.event(&tenant, "order.paid", json!({})).await;
        let d = stack.wait_delivery(&delivery_id(&accepted), WAIT, |d| d["attempts"][0].is_object()).await;
        let first = &d["attempts"][0];
        assert_eq!((first["error"].as_str(), first["cause"].as_str()), (Some(class), Some(cause)), "{url}: {d:#}");
    }
    stack.stop().await;
}
