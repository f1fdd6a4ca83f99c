//! Producers' API keys end to end (issue #39, part 1): the admin routes, `POST /v1/events`
//! with `Authorization: Bearer <key>` on the local runtime and on the ingest function's router
//! for a route IAM does not guard (`Caller::Anonymous`, as the Lambda builds it for the
//! `ApiKeyApi`), scope by tenant, revocation and expiry, and a key never stored or logged.

use aws_sdk_dynamodb::types::AttributeValue;
use reqwest::Method;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tower::ServiceExt;
use tracing::instrument::WithSubscriber;
use webhooks::service::api_keys::{self, Caller};
use webhooks_tests::{Receiver, Reply, Stack, eventually};

const WAIT: Duration = Duration::from_secs(20);

async fn create_key(stack: &Stack, body: Value) -> Value {
    let (status, created) = stack.call(Method::POST, "/v1/api-keys", Some(body)).await;
    assert_eq!(status, 201, "create API key: {created}");
    created
}

fn event(tenant: &str, id: &str) -> Value {
    json!({"tenant_id": tenant, "event_type": "order.paid", "id": id, "payload": {"order": id}})
}

/// `POST /v1/events` on the local runtime with `key` as a Bearer token.
async fn post_with(stack: &Stack, key: &str, body: &Value) -> (u16, Value) {
    let resp = stack
        .http
        .post(format!("{}/v1/events", stack.base))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .expect("post event");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// `POST /v1/events` through the ingest function's router for a route without an authorizer,
/// as the Lambda serves the `ApiKeyApi`; `authorization` is the header's value, if any.
async fn post_anonymous(stack: &Stack, authorization: Option<&str>, body: &Value) -> (u16, Value) {
    let router = webhooks::http::api::ingest_router(stack.app.clone(), Caller::Anonymous);
    let mut request = http::Request::post("/v1/events").header("content-type", "application/json");
    if let Some(a) = authorization {
        request = request.header("authorization", a);
    }
    let response = router.oneshot(request.body(axum::body::Body::from(body.to_string())).unwrap()).await.unwrap();
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// Every attribute value of every item of the stack's table, as text (a Scan).
async fn table_text(stack: &Stack) -> String {
    let ddb = aws_sdk_dynamodb::Client::new(&webhooks::app::aws_sdk_config().await);
    let mut text = String::new();
    let mut start = None;
    loop {
        let out =
            ddb.scan().table_name(&stack.app.config.table).set_exclusive_start_key(start).send().await.expect("scan");
        for item in out.items() {
            for v in item.values() {
                match v {
                    AttributeValue::S(s) => text.push_str(s),
                    AttributeValue::B(b) => text.push_str(&String::from_utf8_lossy(b.as_ref())),
                    other => text.push_str(&format!("{other:?}")),
                }
                text.push('\n');
            }
        }
        match out.last_evaluated_key {
            Some(k) if !k.is_empty() => start = Some(k),
            _ => return text,
        }
    }
}

/// A log sink: what the service logged while a future ran (`with_subscriber`).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// A dispatcher writing here. Made once and kept for the whole test: tracing caches each
    /// log line's interest against the dispatchers alive when the line is first hit.
    fn dispatch(&self) -> tracing::Dispatch {
        let sink = self.clone();
        tracing::Dispatch::new(
            tracing_subscriber::fmt()
                .with_max_level(tracing::Level::DEBUG)
                .with_ansi(false)
                .with_writer(move || sink.clone())
                .finish(),
        )
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_posts_for_its_tenants_only_and_is_never_stored_or_logged() {
    let logs = Logs::default();
    let dispatch = logs.dispatch();
    let stack = Stack::start(|_| {}).await;
    let receiver = Receiver::start(Reply::Status(200)).await;
    for tenant in ["acme", "globex"] {
        stack.endpoint(tenant, &receiver.url, Value::Null).await;
    }
    let created = create_key(&stack, json!({"name": "acme's billing", "tenant_ids": ["acme"]})).await;
    let key = created["key"].as_str().expect("the key, shown once").to_string();
    let (id, prefix) = (created["id"].as_str().unwrap().to_string(), created["prefix"].as_str().unwrap().to_string());
    assert!(
        key.starts_with(&format!("{prefix}_")) && prefix.starts_with("whk_") && id.starts_with("key_"),
        "{created}"
    );
    assert_eq!((created["tenant_ids"].clone(), created["name"].clone()), (json!(["acme"]), json!("acme's billing")));

    // Shown once: neither the key nor its hash is in any later answer.
    let (status, got) = stack.call(Method::GET, &format!("/v1/api-keys/{id}"), None).await;
    assert_eq!(status, 200, "{got}");
    let (status, listed) = stack.call(Method::GET, "/v1/api-keys", None).await;
    assert_eq!(status, 200, "{listed}");
    assert!(listed["data"].as_array().unwrap().iter().any(|k| k["id"] == id.as_str()), "{listed}");
    for answer in [&got, &listed] {
        let text = answer.to_string();
        assert!(!text.contains(&key) && !text.contains("secret_sha256") && !text.contains("\"key\""), "{text}");
    }

    // The key posts for its tenant, on the local runtime and on the route without IAM.
    let (status, accepted) = post_with(&stack, &key, &event("acme", "evt_k1")).await;
    assert_eq!(status, 202, "{accepted}");
    let bearer = format!("Bearer {key}");
    let (status, accepted2) =
        post_anonymous(&stack, Some(&bearer), &event("acme", "evt_k2")).with_subscriber(dispatch.clone()).await;
    assert_eq!(status, 202, "{accepted2}");
    let delivery = accepted["deliveries"][0]["id"].as_str().unwrap();
    stack.wait_status(delivery, "delivered", WAIT).await;

    // Not for another tenant: 403, and nothing of it stored.
    let (status, refused) =
        post_anonymous(&stack, Some(&bearer), &event("globex", "evt_k3")).with_subscriber(dispatch.clone()).await;
    assert_eq!((status, refused["error"]["code"].as_str()), (403, Some("tenant_not_allowed")), "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains(&prefix), "names the key by prefix: {refused}");
    let (status, _) = stack.call(Method::GET, "/v1/events/evt_k3?tenant_id=globex", None).await;
    assert_eq!(status, 404, "a refused event is not stored");

    // No key on the route without IAM, or not a key: 401.
    let (status, e) = post_anonymous(&stack, None, &event("acme", "evt_k4")).await;
    assert_eq!((status, e["error"]["code"].as_str()), (401, Some("api_key_required")), "{e}");
    let mut wrong = key.clone();
    wrong.replace_range(key.len() - 4.., "AAAA");
    for bad in [format!("Bearer {wrong}"), "Bearer whk_nope".into(), format!("Basic {key}")] {
        let (status, e) = post_anonymous(&stack, Some(&bad), &event("acme", "evt_k5")).await;
        let expected = if bad.starts_with("Basic") { "api_key_required" } else { "invalid_api_key" };
        assert_eq!((status, e["error"]["code"].as_str()), (401, Some(expected)), "{bad}: {e}");
    }
    let (status, e) = post_with(&stack, &wrong, &event("acme", "evt_k6")).await;
    assert_eq!((status, e["error"]["code"].as_str()), (401, Some("invalid_api_key")), "local runtime: {e}");

    // A key for every tenant is asked for (issue #54, item 6) and posts for any; a key that
    // forgot its tenants is refused, naming both fields.
    let (status, e) = stack.call(Method::POST, "/v1/api-keys", Some(json!({"name": "forgot"}))).await;
    assert_eq!((status, e["error"]["code"].as_str()), (422, Some("validation_error")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().starts_with("tenant_ids, all_tenants: "), "{e}");
    let (status, e) = stack.call(Method::POST, "/v1/api-keys", None).await;
    assert_eq!(status, 422, "no body at all is no widening either: {e}");
    let (status, e) =
        stack.call(Method::POST, "/v1/api-keys", Some(json!({"tenant_ids": ["acme"], "all_tenants": true}))).await;
    assert_eq!(status, 422, "both: {e}");
    assert_eq!(created["all_tenants"], false, "{created}");
    let all = create_key(&stack, json!({"all_tenants": true})).await;
    assert!(all["tenant_ids"].is_null() && all["all_tenants"] == true, "{all}");
    let (status, body) = post_with(&stack, all["key"].as_str().unwrap(), &event("globex", "evt_k7")).await;
    assert_eq!(status, 202, "{body}");

    // Stored as a hash: no item holds the key or its secret part; logged by prefix only.
    let secret = &key[prefix.len() + 1..];
    let stored = table_text(&stack).await;
    assert!(stored.contains(&id), "the key's item is in the table");
    assert!(!stored.contains(secret), "the key's secret is stored in clear");
    let logged = logs.text();
    let refusal = logged.lines().find(|l| l.contains("may not post for this tenant"));
    assert!(refusal.is_some_and(|l| l.contains(&prefix)), "the refusal is logged, naming the key's prefix: {logged}");
    assert!(!logged.contains(secret), "the key is logged in clear: {logged}");

    // Used: its last_used_at is set.
    let (_, got) = stack.call(Method::GET, &format!("/v1/api-keys/{id}"), None).await;
    assert!(got["last_used_at"].is_string(), "{got}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_or_expired_key_is_refused_within_the_cache_period() {
    const CACHE: Duration = Duration::from_secs(2);
    let stack = Stack::start(|c| c.api_key_cache = CACHE).await;
    let receiver = Receiver::start(Reply::Status(200)).await;
    stack.endpoint("acme", &receiver.url, Value::Null).await;
    let created = create_key(&stack, json!({"tenant_ids": ["acme"]})).await;
    let (id, key) = (created["id"].as_str().unwrap(), created["key"].as_str().unwrap());
    let bearer = format!("Bearer {key}");

    // Another ingest process: its own cache, warmed by a use.
    let mut other = stack.app.clone();
    other.api_keys = Arc::default();
    assert!(api_keys::authenticate(&other, Caller::Anonymous, Some(&bearer)).await.unwrap().is_some());

    // This process has it cached too.
    let (status, body) = post_with(&stack, key, &event("acme", "evt_r0")).await;
    assert_eq!(status, 202, "{body}");
    let (status, revoked) = stack.call(Method::DELETE, &format!("/v1/api-keys/{id}"), None).await;
    assert_eq!(status, 200, "{revoked}");
    assert!(revoked["revoked_at"].is_string(), "{revoked}");
    let revoked_at = Instant::now();
    // The process that revoked it refuses it at once.
    let (status, e) = post_with(&stack, key, &event("acme", "evt_r1")).await;
    assert_eq!((status, e["error"]["code"].as_str()), (401, Some("invalid_api_key")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().ends_with("revoked"), "{e}");
    // Every other within the cache period.
    eventually("the other process refuses the revoked key", WAIT, || async {
        api_keys::authenticate(&other, Caller::Anonymous, Some(&bearer)).await.is_err()
    })
    .await;
    let took = revoked_at.elapsed();
    assert!(took <= CACHE + Duration::from_secs(3), "refused after {took:?}, cache period {CACHE:?}");
    // Revoking again changes nothing.
    let (status, again) = stack.call(Method::DELETE, &format!("/v1/api-keys/{id}"), None).await;
    assert_eq!((status, &again["revoked_at"]), (200, &revoked["revoked_at"]), "{again}");

    // A key past its expires_at is refused.
    let soon = (chrono::Utc::now() + chrono::Duration::seconds(2)).to_rfc3339();
    let expiring = create_key(&stack, json!({"tenant_ids": ["acme"], "expires_at": soon})).await;
    let key = expiring["key"].as_str().unwrap();
    let (status, body) = post_with(&stack, key, &event("acme", "evt_x1")).await;
    assert_eq!(status, 202, "before its expiry: {body}");
    eventually("the expired key is refused", WAIT, || async {
        let (status, e) = post_with(&stack, key, &event("acme", "evt_x2")).await;
        status == 401 && e["error"]["message"].as_str().is_some_and(|m| m.ends_with("expired"))
    })
    .await;

    // Bad requests name the field.
    for (body, field) in [
        (json!({"tenant_ids": []}), "tenant_ids"),
        (json!({"tenant_ids": ["a b"]}), "tenant_ids[0]"),
        (json!({"all_tenants": true, "expires_at": "2020-01-01T00:00:00Z"}), "expires_at"),
        (json!({"all_tenants": true, "expires_at": "tomorrow"}), "expires_at"),
        (json!({"scope": "all"}), "scope"),
    ] {
        let (status, e) = stack.call(Method::POST, "/v1/api-keys", Some(body.clone())).await;
        assert_eq!((status, e["error"]["code"].as_str()), (422, Some("validation_error")), "{body}: {e}");
        assert!(e["error"]["message"].as_str().unwrap().contains(field), "{body}: {e}");
    }
    let (status, e) = stack.call(Method::DELETE, "/v1/api-keys/key_nope", None).await;
    assert_eq!((status, e["error"]["code"].as_str()), (404, Some("not_found")), "{e}");
    stack.stop().await;
}
