//! The event-type catalog end to end (issue #37): the admin routes, and ingest enforcing the
//! catalog (schemas, archived types, `WEBHOOKS_EVENT_TYPES=registered`) on the HTTP and the
//! EventBridge paths, before anything is written.

use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;
use webhooks::config::EventTypesMode;
use webhooks_tests::{Receiver, Reply, Stack, eventually};

const WAIT: Duration = Duration::from_secs(20);

fn amount_schema() -> Value {
    json!({
        "type": "object",
        "required": ["order", "amount"],
        "properties": {"order": {"type": "string"}, "amount": {"type": "integer", "minimum": 0}},
    })
}

async fn create_type(stack: &Stack, body: Value) -> Value {
    let (status, created) = stack.call(Method::POST, "/v1/event-types", Some(body)).await;
    assert_eq!(status, 201, "create event type: {created}");
    created
}

fn event(tenant: &str, event_type: &str, id: &str, payload: Value) -> Value {
    json!({"tenant_id": tenant, "event_type": event_type, "id": id, "payload": payload})
}

/// Whether `GET /v1/events/{id}` finds the event (false on 404).
async fn event_exists(stack: &Stack, id: &str) -> bool {
    let (status, body) = stack.call(Method::GET, &format!("/v1/events/{id}"), None).await;
    assert!(status == 200 || status == 404, "get event: {status} {body}");
    status == 200
}

#[tokio::test(flavor = "multi_thread")]
async fn the_catalog_round_trips_pages_and_keeps_every_schema_version() {
    let stack = Stack::start(|_| {}).await;
    let created = create_type(
        &stack,
        json!({"name": "order.paid", "description": "An order was paid.", "schema": amount_schema(),
               "examples": [{"order": "o_1", "amount": 1200}]}),
    )
    .await;
    assert_eq!(created["name"], "order.paid");
    assert_eq!((created["version"].as_u64(), created["archived"].as_bool()), (Some(1), Some(false)));
    assert_eq!(created["deprecated"], false);
    assert!(created.get("revision").is_none(), "{created}");
    for name in ["invoice.sent", "a/b.c"] {
        create_type(&stack, json!({"name": name})).await;
    }
    let (status, again) = stack.call(Method::POST, "/v1/event-types", Some(json!({"name": "order.paid"}))).await;
    assert_eq!((status, again["error"]["code"].as_str()), (409, Some("conflict")), "{again}");

    let (status, got) = stack.call(Method::GET, "/v1/event-types/order.paid", None).await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(
        (got["schema"].clone(), got["examples"].clone()),
        (amount_schema(), json!([{"order": "o_1", "amount": 1200}]))
    );
    let (status, got) = stack.call(Method::GET, "/v1/event-types/a%2Fb.c", None).await;
    assert_eq!((status, got["name"].as_str()), (200, Some("a/b.c")), "a name with / is percent-encoded");
    let (status, e) = stack.call(Method::GET, "/v1/event-types/nope.nope", None).await;
    assert_eq!((status, e["error"]["code"].as_str()), (404, Some("not_found")), "{e}");

    // Paged like the other listings: every type once.
    let (mut seen, mut cursor) = (BTreeSet::new(), None::<String>);
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/event-types?limit=1&cursor={c}"),
            None => "/v1/event-types?limit=1".to_string(),
        };
        let (status, page) = stack.call(Method::GET, &path, None).await;
        assert_eq!(status, 200, "{page}");
        for t in page["data"].as_array().unwrap() {
            assert!(seen.insert(t["name"].as_str().unwrap().to_string()), "listed twice: {t}");
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(seen, BTreeSet::from(["a/b.c".to_string(), "invoice.sent".into(), "order.paid".into()]));
    let (status, e) = stack.call(Method::GET, "/v1/event-types?cursor=bm9wZQ", None).await;
    assert_eq!((status, e["error"]["code"].as_str()), (422, Some("validation_error")), "{e}");

    // A description is no new version; a schema is, and the old one stays readable.
    let path = "/v1/event-types/order.paid";
    let (status, t) =
        stack.call(Method::PATCH, path, Some(json!({"description": "Paid in full.", "deprecated": true}))).await;
    assert_eq!(status, 200, "{t}");
    assert_eq!(
        (t["version"].as_u64(), t["description"].as_str(), t["deprecated"].as_bool()),
        (Some(1), Some("Paid in full."), Some(true))
    );
    let mut v2 = amount_schema();
    v2["properties"]["currency"] = json!({"type": "string", "minLength": 3, "maxLength": 3});
    let (status, t) = stack.call(Method::PATCH, path, Some(json!({"schema": v2}))).await;
    assert_eq!((status, t["version"].as_u64()), (200, Some(2)), "{t}");
    let (status, old) = stack.call(Method::GET, &format!("{path}?version=1"), None).await;
    assert_eq!((status, old["version"].as_u64()), (200, Some(1)), "{old}");
    assert_eq!(old["schema"], amount_schema());
    let (status, new) = stack.call(Method::GET, &format!("{path}?version=2"), None).await;
    assert_eq!((status, new["schema"].clone()), (200, v2.clone()), "{new}");
    let (status, e) = stack.call(Method::GET, &format!("{path}?version=3"), None).await;
    assert_eq!((status, e["error"]["code"].as_str()), (404, Some("not_found")), "{e}");
    let (status, e) = stack.call(Method::GET, &format!("{path}?version=two"), None).await;
    assert_eq!((status, e["error"]["code"].as_str()), (422, Some("validation_error")), "{e}");

    // DELETE archives; the entry stays readable.
    let (status, t) = stack.call(Method::DELETE, path, None).await;
    assert_eq!((status, t["archived"].as_bool()), (200, Some(true)), "{t}");
    let (status, t) = stack.call(Method::GET, path, None).await;
    assert_eq!((status, t["archived"].as_bool(), t["version"].as_u64()), (200, Some(true), Some(2)), "{t}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_schema_that_does_not_compile_or_an_example_that_fails_it_is_refused_naming_where() {
    let stack = Stack::start(|_| {}).await;
    let (status, e) = stack
        .call(Method::POST, "/v1/event-types", Some(json!({"name": "order.paid", "schema": {"type": "nope"}})))
        .await;
    assert_eq!((status, e["error"]["code"].as_str()), (422, Some("validation_error")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().starts_with("schema: "), "{e}");

    let body = json!({"name": "order.paid", "schema": amount_schema(),
        "examples": [{"order": "o_1", "amount": 1}, {"order": "o_2", "amount": "12"}]});
    let (status, e) = stack.call(Method::POST, "/v1/event-types", Some(body)).await;
    assert_eq!((status, e["error"]["code"].as_str()), (422, Some("validation_error")), "{e}");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("examples[1]: "), "names the example: {message}");
    assert!(message.contains("\"/amount\"") && message.contains("\"type\""), "pointer and keyword: {message}");
    let (status, _) = stack.call(Method::GET, "/v1/event-types/order.paid", None).await;
    assert_eq!(status, 404, "nothing was created");

    // A change whose examples fail the schema is refused too, and changes nothing.
    create_type(&stack, json!({"name": "order.paid", "schema": amount_schema()})).await;
    let (status, e) =
        stack.call(Method::PATCH, "/v1/event-types/order.paid", Some(json!({"examples": [{"order": "o_1"}]}))).await;
    assert_eq!((status, e["error"]["code"].as_str()), (422, Some("validation_error")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("\"required\""), "{e}");
    let (_, t) = stack.call(Method::GET, "/v1/event-types/order.paid", None).await;
    assert_eq!(t["examples"], json!([]));
    let (status, e) =
        stack.call(Method::POST, "/v1/event-types", Some(json!({"name": "bad name", "schema": true}))).await;
    assert_eq!((status, e["error"]["code"].as_str()), (422, Some("validation_error")), "{e}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ingest_refuses_a_payload_that_fails_its_schema_and_writes_nothing() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    stack.endpoint("acme", &rx.url, Value::Null).await;
    create_type(&stack, json!({"name": "order.paid", "schema": amount_schema()})).await;

    let (status, e) = stack
        .call(
            Method::POST,
            "/v1/events",
            Some(event("acme", "order.paid", "evt_bad", json!({"order": "o_1", "amount": -5}))),
        )
        .await;
    assert_eq!((status, e["error"]["code"].as_str()), (422, Some("schema_mismatch")), "{e}");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(message.contains("\"/amount\"") && message.contains("\"minimum\""), "pointer and keyword: {message}");
    let (status, e) = stack
        .call(Method::POST, "/v1/events", Some(event("acme", "order.paid", "evt_bad2", json!({"order": "o_1"}))))
        .await;
    assert_eq!((status, e["error"]["code"].as_str()), (422, Some("schema_mismatch")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("\"required\""), "{e}");

    // A payload that fits is delivered, and it is the only request the receiver ever gets.
    let accepted = stack.event("acme", "order.paid", json!({"order": "o_2", "amount": 1200})).await;
    let dlv = accepted["deliveries"][0]["id"].as_str().unwrap();
    stack.wait_status(dlv, "delivered", WAIT).await;
    assert_eq!(rx.count(), 1);
    let body: Value = serde_json::from_slice(&rx.hits()[0].body).unwrap();
    assert_eq!(body, json!({"order": "o_2", "amount": 1200}));
    assert!(!event_exists(&stack, "evt_bad").await && !event_exists(&stack, "evt_bad2").await);
    // Another type without a schema takes any payload.
    create_type(&stack, json!({"name": "order.note"})).await;
    stack.event("acme", "order.note", json!(["anything"])).await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_archived_type_is_refused_at_ingest() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    stack.endpoint("acme", &rx.url, Value::Null).await;
    create_type(&stack, json!({"name": "order.paid"})).await;
    stack.event("acme", "order.paid", json!({"order": "o_1"})).await;
    let (status, _) = stack.call(Method::DELETE, "/v1/event-types/order.paid", None).await;
    assert_eq!(status, 200);
    let (status, e) = stack
        .call(Method::POST, "/v1/events", Some(event("acme", "order.paid", "evt_late", json!({"order": "o_2"}))))
        .await;
    assert_eq!((status, e["error"]["code"].as_str()), (422, Some("event_type_archived")), "{e}");
    assert!(!event_exists(&stack, "evt_late").await);
    // Taken back from the archive, it is accepted again.
    let (status, _) = stack.call(Method::PATCH, "/v1/event-types/order.paid", Some(json!({"archived": false}))).await;
    assert_eq!(status, 200);
    stack.event("acme", "order.paid", json!({"order": "o_3"})).await;
    eventually("both accepted events delivered", WAIT, || async { rx.count() == 2 }).await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn registered_mode_refuses_a_type_the_catalog_does_not_have() {
    let stack = Stack::start(|c| c.event_types = EventTypesMode::Registered).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    stack.endpoint("acme", &rx.url, Value::Null).await;
    let (status, e) =
        stack.call(Method::POST, "/v1/events", Some(event("acme", "order.paid", "evt_unknown", json!({})))).await;
    assert_eq!((status, e["error"]["code"].as_str()), (422, Some("unknown_event_type")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("order.paid"), "{e}");
    assert!(!event_exists(&stack, "evt_unknown").await);
    create_type(&stack, json!({"name": "order.paid"})).await;
    let accepted = stack.event("acme", "order.paid", json!({})).await;
    stack.wait_status(accepted["deliveries"][0]["id"].as_str().unwrap(), "delivered", WAIT).await;
    assert_eq!(rx.count(), 1);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_process_reads_a_type_once_per_cache_period_and_sees_another_process_change_within_it() {
    let stack = Stack::start(|c| c.event_type_cache = Duration::from_secs(5)).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    stack.endpoint("acme", &rx.url, Value::Null).await;
    // This process reads `order.paid` (not in the catalog) and keeps that.
    stack.event("acme", "order.paid", json!({"amount": "x"})).await;
    // Another process (the admin function on AWS) adds it with a schema: written to the
    // table directly, so this process is not told.
    let now = chrono::Utc::now();
    let draft = webhooks::domain::event_type::Draft {
        name: "order.paid".into(),
        schema: Some(amount_schema()),
        ..Default::default()
    };
    let entry = webhooks::domain::event_type::create(draft, now).unwrap();
    webhooks::store::EventTypeStore::create_event_type(stack.app.store.as_ref(), &entry).await.unwrap();
    let bad = event("acme", "order.paid", "evt_cached", json!({"amount": "x"}));
    let (status, _) = stack.call(Method::POST, "/v1/events", Some(bad.clone())).await;
    assert_eq!(status, 202, "within the cache period the process still takes it as it read it");
    // Once the period (5 s) is over, the schema holds here too.
    eventually("the schema enforced once the cache period is over", WAIT, || async {
        let body = json!({"tenant_id": "acme", "event_type": "order.paid", "payload": {"amount": "y"}});
        stack.call(Method::POST, "/v1/events", Some(body)).await.0 == 422
    })
    .await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn open_mode_without_a_catalog_takes_any_type_as_before() {
    let stack = Stack::start(|_| {}).await;
    assert_eq!(stack.app.config.event_types, EventTypesMode::Open, "open is the default");
    let rx = Receiver::start(Reply::Status(200)).await;
    stack.endpoint("acme", &rx.url, Value::Null).await;
    for (event_type, payload) in [("order.paid", json!({"amount": "any"})), ("whatever.else", json!(7))] {
        let accepted = stack.event("acme", event_type, payload).await;
        stack.wait_status(accepted["deliveries"][0]["id"].as_str().unwrap(), "delivered", WAIT).await;
    }
    assert_eq!(rx.count(), 2);
    let (status, page) = stack.call(Method::GET, "/v1/event-types", None).await;
    assert_eq!((status, page["data"].clone()), (200, json!([])));
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_eventbridge_event_that_fails_its_schema_lands_in_the_events_dead_letter_queue_with_the_reason() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    stack.endpoint("acme", &rx.url, Value::Null).await;
    create_type(&stack, json!({"name": "order.paid", "schema": amount_schema()})).await;
    let dlq = webhooks::bootstrap::create_queue(&stack.sqs, &format!("events-dlq-{}", ulid::Ulid::new()), 30)
        .await
        .expect("create the events dead-letter queue");
    let envelope = |id: &str, detail: Value| -> aws_lambda_events::eventbridge::EventBridgeEvent<Value> {
        serde_json::from_value(json!({
            "version": "0", "id": id, "detail-type": "order.paid", "source": "shop",
            "account": "123456789012", "time": "2026-12-05T06:00:00Z", "region": "us-east-1", "resources": [],
            "detail": detail,
        }))
        .unwrap()
    };

    let bad = envelope("eb-bad-1", json!({"tenant_id": "acme", "order": "o_1", "amount": "12"}));
    let refused = webhooks_local::eventbridge(&stack.app, &stack.sqs, &dlq, bad).await.unwrap();
    assert_eq!(refused.as_ref().err().map(|r| r.code), Some("schema_mismatch"), "{refused:?}");

    // The dead-letter queue holds Lambda's on-failure record: the event and the reason.
    let deadline = std::time::Instant::now() + WAIT;
    let record: Value = loop {
        let out = stack.sqs.receive_message().queue_url(&dlq).wait_time_seconds(1).send().await.unwrap();
        if let Some(m) = out.messages.unwrap_or_default().into_iter().next() {
            let handle = m.receipt_handle.unwrap_or_default();
            stack.sqs.delete_message().queue_url(&dlq).receipt_handle(handle).send().await.unwrap();
            break serde_json::from_str(&m.body.unwrap_or_default()).unwrap();
        }
        assert!(std::time::Instant::now() < deadline, "the refused event never reached the dead-letter queue");
    };
    assert_eq!(record["requestPayload"]["id"], "eb-bad-1");
    assert_eq!(record["requestContext"]["condition"], "RetriesExhausted");
    let reason = record["responsePayload"]["errorMessage"].as_str().unwrap();
    assert!(reason.starts_with("schema_mismatch: "), "{reason}");
    assert!(reason.contains("\"/amount\"") && reason.contains("\"type\""), "pointer and keyword: {reason}");
    assert!(!event_exists(&stack, "eb-bad-1").await, "nothing written");

    // A fitting event goes through the same path and is delivered; the queue gets nothing more.
    let good = envelope("eb-good-1", json!({"tenant_id": "acme", "order": "o_2", "amount": 12}));
    let accepted = webhooks_local::eventbridge(&stack.app, &stack.sqs, &dlq, good).await.unwrap().unwrap();
    stack.wait_status(&accepted.deliveries[0].id, "delivered", WAIT).await;
    assert_eq!(rx.count(), 1);
    let out = stack.sqs.receive_message().queue_url(&dlq).wait_time_seconds(1).send().await.unwrap();
    assert!(out.messages.unwrap_or_default().is_empty());
    let _ = stack.sqs.delete_queue().queue_url(&dlq).send().await;
    stack.stop().await;
}

/// Svix's send-example: the type's first catalog example, signed with the endpoint's secret
/// (and its headers and auth), POSTed now; refused, naming `event_type`, for a type the
/// endpoint does not take, one without an example, or an archived one; 404 for an unknown one.
#[tokio::test(flavor = "multi_thread")]
async fn send_example_posts_the_catalog_example_signed_to_the_endpoint() {
    let stack = Stack::start(|_| {}).await;
    let example = json!({"order": "o_9", "amount": 4200});
    create_type(&stack, json!({"name": "order.shipped", "schema": amount_schema(), "examples": [example]})).await;
    create_type(&stack, json!({"name": "order.noted"})).await;
    create_type(&stack, json!({"name": "refund.made", "examples": [{"r": 1}]})).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let (status, ep) = stack
        .call(
            Method::POST,
            "/v1/endpoints",
            Some(json!({"tenant_id": "ex", "url": rx.url,
            "event_types": ["order.*"], "headers": {"X-Team": "blue"}})),
        )
        .await;
    assert_eq!(status, 201, "{ep}");
    let path = format!("/v1/endpoints/{}/send-example", ep["id"].as_str().unwrap());
    let (status, sent) = stack.call(Method::POST, &path, Some(json!({"event_type": "order.shipped"}))).await;
    assert_eq!(status, 200, "{sent}");
    assert_eq!(sent["attempt"]["status_code"], 200, "{sent}");
    assert_eq!(sent["event_type"], "order.shipped");
    let hit = rx.hits().last().cloned().unwrap();
    assert_eq!(hit.header("webhook-id"), sent["message_id"].as_str().unwrap());
    assert_eq!(hit.header("x-team"), "blue", "the endpoint's headers go along");
    assert_eq!(serde_json::from_slice::<Value>(&hit.body).unwrap(), example);
    standardwebhooks::Webhook::new(ep["secret"].as_str().unwrap()).unwrap().verify(&hit.body, &hit.headers).unwrap();

    for (event_type, status, words) in [
        ("refund.made", 422, "does not subscribe"),
        ("order.noted", 422, "no example"),
        ("order.unknown", 404, "order.unknown"),
    ] {
        let (got, answer) = stack.call(Method::POST, &path, Some(json!({"event_type": event_type}))).await;
        assert_eq!(got, status, "{event_type}: {answer}");
        assert!(answer["error"]["message"].as_str().unwrap_or("").contains(words), "{answer}");
    }
    stack.call(Method::DELETE, "/v1/event-types/order.shipped", None).await;
    let (got, answer) = stack.call(Method::POST, &path, Some(json!({"event_type": "order.shipped"}))).await;
    assert_eq!(got, 422, "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap_or("").contains("archived"), "{answer}");
    assert_eq!(rx.count(), 1, "nothing else was sent");
    let (_, listed) =
        stack.call(Method::GET, &format!("/v1/deliveries?endpoint_id={}", ep["id"].as_str().unwrap()), None).await;
    assert_eq!(listed["data"], json!([]), "a sent example is not a delivery");
    stack.stop().await;
}

/// A reqwest client that does not follow redirects (the portal answers a token with a 303).
fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn registered_mode_refuses_a_subscription_that_matches_no_catalog_type() {
    let stack = Stack::start(|c| c.event_types = EventTypesMode::Registered).await;
    create_type(&stack, json!({"name": "order.paid"})).await;
    create_type(&stack, json!({"name": "invoice.sent"})).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let endpoint = |types: Value| json!({"tenant_id": "acme", "url": rx.url, "event_types": types});

    // Create: an entry that matches nothing is refused, naming it; nothing is created.
    let (status, e) =
        stack.call(Method::POST, "/v1/endpoints", Some(endpoint(json!(["order.paid", "order.shipped"])))).await;
    assert_eq!((status, e["error"]["code"].as_str()), (422, Some("unknown_event_type")), "{e}");
    let message = e["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("event_types[1]") && message.contains("order.shipped"), "{e}");
    let (_, listed) = stack.call(Method::GET, "/v1/endpoints?tenant_id=acme", None).await;
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(0), "{listed}");
    let (status, e) = stack.call(Method::POST, "/v1/endpoints", Some(endpoint(json!(["refund.*"])))).await;
    assert_eq!(status, 422, "a prefix that matches no type: {e}");
    // Names, prefixes and `*` that match a type are taken, and so is no filter at all.
    for types in [json!(["order.paid"]), json!(["invoice.*", "order.paid"]), json!(["*"]), Value::Null] {
        let (status, created) = stack.call(Method::POST, "/v1/endpoints", Some(endpoint(types.clone()))).await;
        assert_eq!(status, 201, "{types}: {created}");
    }

    // PATCH: the same rule for a filter it changes.
    let ep = stack.call(Method::POST, "/v1/endpoints", Some(endpoint(json!(["order.paid"])))).await.1;
    let path = format!("/v1/endpoints/{}", ep["id"].as_str().unwrap());
    let (status, e) = stack.call(Method::PATCH, &path, Some(json!({"event_types": ["ordr.paid"]}))).await;
    assert_eq!((status, e["error"]["code"].as_str()), (422, Some("unknown_event_type")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap_or_default().contains("ordr.paid"), "{e}");
    assert_eq!(stack.call(Method::GET, &path, None).await.1["event_types"], json!(["order.paid"]), "unchanged");
    let (status, e) = stack.call(Method::PATCH, &path, Some(json!({"event_types": ["invoice.*"]}))).await;
    assert_eq!(status, 200, "{e}");
    // An archived type matches nothing any more: its events are refused at ingest.
    let (status, _) = stack.call(Method::DELETE, "/v1/event-types/order.paid", None).await;
    assert_eq!(status, 200);
    let (status, e) = stack.call(Method::PATCH, &path, Some(json!({"event_types": ["order.paid"]}))).await;
    assert_eq!(status, 422, "{e}");

    // The portal's form shows the refusal.
    let (status, session) =
        stack.call(Method::POST, "/v1/tenants/acme/portal-sessions", Some(json!({"ttl_seconds": 600}))).await;
    assert_eq!(status, 201, "{session}");
    let token = session["token"].as_str().unwrap();
    let r = no_redirects().get(format!("{}/portal?token={token}", stack.base)).send().await.unwrap();
    assert_eq!(r.status(), 303);
    let cookie = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let page = no_redirects().get(format!("{}/portal", stack.base)).header("cookie", &cookie).send().await.unwrap();
    let page = page.text().await.unwrap();
    let csrf = page.split(r#"name="csrf" value=""#).nth(1).and_then(|rest| rest.split('"').next()).unwrap();
    let form =
        [("csrf", csrf), ("url", rx.url.as_str()), ("retry_preset", "standard"), ("event_types", "order.shipped")];
    let r = no_redirects()
        .post(format!("{}/portal/endpoints", stack.base))
        .header("cookie", &cookie)
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let shown = r.text().await.unwrap();
    assert!(shown.contains("Please check the form") && shown.contains("order.shipped"), "{shown}");
    stack.stop().await;
}

fn nested(levels: usize) -> Value {
    (0..levels).fold(json!(1), |inner, _| json!({ "a": inner }))
}

/// Issue #54, item 16: a catalog type's schema check answered 422 "not JSON: recursion limit
/// exceeded" for a payload an untyped event was accepted with. Now both are the one
/// `payload_too_deep` at the door, and the EventBridge path refuses it the same way, to the
/// events dead-letter queue with that code; nothing is stored.
#[tokio::test(flavor = "multi_thread")]
async fn a_payload_past_the_depth_limit_is_payload_too_deep_for_typed_untyped_and_eventbridge_events() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    stack.endpoint("acme", &rx.url, Value::Null).await;
    create_type(&stack, json!({"name": "order.paid", "schema": {"type": "object"}})).await;
    let limit = webhooks::domain::payload::MAX_PAYLOAD_DEPTH;
    for (event_type, id) in [("order.paid", "evt_typed_deep"), ("order.untyped", "evt_untyped_deep")] {
        for levels in [limit + 1, 200] {
            let (status, e) =
                stack.call(Method::POST, "/v1/events", Some(event("acme", event_type, id, nested(levels)))).await;
            assert_eq!((status, e["error"]["code"].as_str()), (422, Some("payload_too_deep")), "{event_type}: {e}");
        }
        assert!(!event_exists(&stack, id).await, "nothing stored for {id}");
    }

    let dlq = webhooks::bootstrap::create_queue(&stack.sqs, &format!("events-dlq-{}", ulid::Ulid::new()), 30)
        .await
        .expect("create the events dead-letter queue");
    let mut detail = json!({"tenant_id": "acme"});
    detail["x"] = nested(limit);
    let deep: aws_lambda_events::eventbridge::EventBridgeEvent<Value> = serde_json::from_value(json!({
        "version": "0", "id": "eb-deep-1", "detail-type": "order.paid", "source": "shop",
        "account": "123456789012", "time": "2026-12-05T06:00:00Z", "region": "us-east-1", "resources": [],
        "detail": detail,
    }))
    .unwrap();
    let refused = webhooks_local::eventbridge(&stack.app, &stack.sqs, &dlq, deep).await.unwrap();
    assert_eq!(refused.as_ref().err().map(|r| r.code), Some("payload_too_deep"), "{refused:?}");
    let deadline = std::time::Instant::now() + WAIT;
    let record: Value = loop {
        let out = stack.sqs.receive_message().queue_url(&dlq).wait_time_seconds(1).send().await.unwrap();
        if let Some(m) = out.messages.unwrap_or_default().into_iter().next() {
            break serde_json::from_str(&m.body.unwrap_or_default()).unwrap();
        }
        assert!(std::time::Instant::now() < deadline, "the refused event never reached the dead-letter queue");
    };
    let reason = record["responsePayload"]["errorMessage"].as_str().unwrap_or_default();
    assert!(reason.starts_with("payload_too_deep: "), "{reason}");
    assert!(!event_exists(&stack, "eb-deep-1").await, "nothing written");
    assert_eq!(rx.count(), 0);
    let _ = stack.sqs.delete_queue().queue_url(&dlq).send().await;
    stack.stop().await;
}

/// Issue #54, item 15: send-example ignored the endpoint's payload filter, so it sent an
/// example no real event like it would ever bring. Now an example the filter rejects is
/// refused, naming `event_type` and the filter, and nothing is sent.
#[tokio::test(flavor = "multi_thread")]
async fn send_example_holds_the_example_to_the_endpoints_payload_filter() {
    let stack = Stack::start(|_| {}).await;
    create_type(&stack, json!({"name": "order.shipped", "examples": [{"order": "o_9", "amount": 4200}]})).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let (status, ep) = stack
        .call(
            Method::POST,
            "/v1/endpoints",
            Some(json!({"tenant_id": "ex", "url": rx.url, "filter": {"amount": {"$lt": 100}}})),
        )
        .await;
    assert_eq!(status, 201, "{ep}");
    let id = ep["id"].as_str().unwrap();
    let path = format!("/v1/endpoints/{id}/send-example");
    let (status, answer) = stack.call(Method::POST, &path, Some(json!({"event_type": "order.shipped"}))).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (422, Some("validation_error")), "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("event_type: ") && message.contains("filter"), "{answer}");
    assert_eq!(rx.count(), 0, "nothing sent");
    // A filter the example passes: sent.
    let (status, _) = stack
        .call(Method::PATCH, &format!("/v1/endpoints/{id}"), Some(json!({"filter": {"amount": {"$gte": 100}}})))
        .await;
    assert_eq!(status, 200);
    let (status, sent) = stack.call(Method::POST, &path, Some(json!({"event_type": "order.shipped"}))).await;
    assert_eq!((status, sent["attempt"]["status_code"].as_u64()), (200, Some(200)), "{sent}");
    assert_eq!(rx.count(), 1);
    stack.stop().await;
}
