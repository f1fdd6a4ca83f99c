//! `openapi.yaml` against the running handlers: every operation in the spec is called on the
//! local stack, every answer is validated against the schema the spec gives for its status,
//! and every operation must have been seen answering 2xx. A route the handlers lack, a
//! status the spec does not list or a body that does not fit its schema fails the test.

use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;
use webhooks_tests::{Receiver, Reply, Stack};

struct Spec {
    doc: Value,
    seen: Mutex<BTreeSet<(String, String)>>,
}

impl Spec {
    fn load() -> Self {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../openapi.yaml")).expect("openapi.yaml");
        let doc: Value = serde_norway::from_str(&text).expect("openapi.yaml parses");
        Self { doc, seen: Mutex::new(BTreeSet::new()) }
    }

    fn operations(&self) -> BTreeSet<(String, String)> {
        let mut out = BTreeSet::new();
        for (path, item) in self.doc["paths"].as_object().expect("paths") {
            for method in ["get", "post", "patch", "delete", "put"] {
                if item.get(method).is_some() {
                    out.insert((method.to_string(), path.clone()));
                }
            }
        }
        out
    }

    fn deref<'a>(&'a self, v: &'a Value) -> &'a Value {
        match v.get("$ref").and_then(Value::as_str) {
            Some(r) => self.doc.pointer(r.trim_start_matches('#')).expect("ref resolves"),
            None => v,
        }
    }

    /// Checks one answer of `method template` against the spec.
    fn check(&self, method: &Method, template: &str, status: u16, body: &Value) {
        let m = method.as_str().to_lowercase();
        let op = &self.doc["paths"][template][&m];
        assert!(op.is_object(), "{m} {template} is not in openapi.yaml");
        let response = op["responses"]
            .get(status.to_string())
            .unwrap_or_else(|| panic!("{m} {template} answered {status}, which openapi.yaml does not list: {body}"));
        let response = self.deref(response);
        let mut schema = response["content"]["application/json"]["schema"].clone();
        assert!(schema.is_object(), "{m} {template} {status} has no JSON schema");
        schema["components"] = self.doc["components"].clone();
        let validator = jsonschema::validator_for(&schema).expect("schema compiles");
        let errors: Vec<String> =
            validator.iter_errors(body).map(|e| format!("{} at {}", e, e.instance_path())).collect();
        assert!(errors.is_empty(), "{m} {template} {status}: body does not fit openapi.yaml: {errors:?}\n{body:#}");
        if (200..300).contains(&status) {
            self.seen.lock().unwrap().insert((m, template.to_string()));
        }
    }
}

async fn call(
    stack: &Stack,
    spec: &Spec,
    method: Method,
    template: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let (status, value) = stack.call(method.clone(), path, body).await;
    spec.check(&method, template, status, &value);
    (status, value)
}

#[tokio::test(flavor = "multi_thread")]
async fn every_operation_in_openapi_yaml_answers_as_documented() {
    let spec = Spec::load();
    let stack = Stack::start(|c| c.release_per_tick = 10).await;
    let rx = Receiver::start(Reply::Status(500)).await;
    let s = &stack;
    let sp = &spec;

    // Endpoints.
    let (_, ep) = call(
        s,
        sp,
        Method::POST,
        "/v1/endpoints",
        "/v1/endpoints",
        Some(json!({
            "tenant_id": "acme", "url": rx.url, "retry_policy": {"schedule_seconds": [1], "max_attempts": 1}
        })),
    )
    .await;
    let id = ep["id"].as_str().unwrap().to_string();
    call(s, sp, Method::POST, "/v1/endpoints", "/v1/endpoints", Some(json!({"tenant_id": "acme", "url": "ftp://x"})))
        .await;
    call(s, sp, Method::GET, "/v1/endpoints", "/v1/endpoints?tenant_id=acme&limit=10", None).await;
    call(s, sp, Method::GET, "/v1/endpoints", "/v1/endpoints", None).await;
    call(s, sp, Method::GET, "/v1/endpoints/{id}", &format!("/v1/endpoints/{id}"), None).await;
    call(s, sp, Method::GET, "/v1/endpoints/{id}", "/v1/endpoints/ep_missing", None).await;
    call(
        s,
        sp,
        Method::PATCH,
        "/v1/endpoints/{id}",
        &format!("/v1/endpoints/{id}"),
        Some(json!({"event_types": ["order.*"]})),
    )
    .await;
    call(s, sp, Method::PATCH, "/v1/endpoints/{id}", &format!("/v1/endpoints/{id}"), Some(json!({"auto_resume": 3})))
        .await;

    // Events: async, sync, bad input, idempotent repeat.
    let since = chrono::Utc::now().to_rfc3339();
    let (_, accepted) = call(
        s,
        sp,
        Method::POST,
        "/v1/events",
        "/v1/events",
        Some(json!({
            "tenant_id": "acme", "event_type": "order.paid", "payload": {"n": 1}
        })),
    )
    .await;
    let dlv = accepted["deliveries"][0]["id"].as_str().unwrap().to_string();
    let event_id = accepted["event_id"].as_str().unwrap().to_string();
    call(s, sp, Method::POST, "/v1/events", "/v1/events", Some(json!({"tenant_id": "acme", "payload": {}}))).await;
    let (status, _) = stack.post_raw("/v1/events", "{not json").await;
    assert_eq!(status, 400);
    call(
        s,
        sp,
        Method::POST,
        "/v1/events",
        "/v1/events",
        Some(json!({
            "tenant_id": "acme", "event_type": "order.sync", "payload": {}, "mode": "sync"
        })),
    )
    .await;
    call(s, sp, Method::GET, "/v1/events/{id}", &format!("/v1/events/{event_id}"), None).await;
    call(s, sp, Method::GET, "/v1/events/{id}", &format!("/v1/events/{event_id}?tenant_id=acme"), None).await;
    // An Idempotency-Key: the first answer, then the same key with another request.
    for payload in [json!({"n": 1}), json!({"n": 2})] {
        let resp = stack
            .http
            .post(format!("{}/v1/events", stack.base))
            .header("idempotency-key", "openapi-key")
            .json(&json!({"tenant_id": "acme", "event_type": "order.paid", "payload": payload}))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let body: Value = resp.json().await.unwrap();
        sp.check(&Method::POST, "/v1/events", status, &body);
    }
    call(s, sp, Method::GET, "/v1/events/{id}", "/v1/events/evt_missing", None).await;

    // Deliveries: state, lists, dead letters, replay.
    stack.wait_status(&dlv, "exhausted", Duration::from_secs(20)).await;
    call(s, sp, Method::GET, "/v1/deliveries/{id}", &format!("/v1/deliveries/{dlv}"), None).await;
    call(s, sp, Method::GET, "/v1/deliveries/{id}", "/v1/deliveries/dlv_missing", None).await;
    call(s, sp, Method::GET, "/v1/deliveries", "/v1/deliveries?status=exhausted", None).await;
    call(s, sp, Method::GET, "/v1/deliveries", &format!("/v1/deliveries?endpoint_id={id}&limit=1"), None).await;
    call(s, sp, Method::GET, "/v1/deliveries", "/v1/deliveries?status=bogus", None).await;
    call(s, sp, Method::GET, "/v1/endpoints/{id}/stats", &format!("/v1/endpoints/{id}/stats"), None).await;
    rx.set_default(Reply::Status(200));
    call(s, sp, Method::POST, "/v1/deliveries/{id}/replay", &format!("/v1/deliveries/{dlv}/replay"), None).await;
    stack.wait_status(&dlv, "delivered", Duration::from_secs(20)).await;
    call(s, sp, Method::POST, "/v1/deliveries/{id}/replay", &format!("/v1/deliveries/{dlv}/replay"), None).await;

    // Health, rotation, recover, jobs, delete.
    call(s, sp, Method::POST, "/v1/endpoints/{id}/disable", &format!("/v1/endpoints/{id}/disable"), None).await;
    let (_, enabled) =
        call(s, sp, Method::POST, "/v1/endpoints/{id}/enable", &format!("/v1/endpoints/{id}/enable"), None).await;
    let job = enabled["release_job"]["id"].as_str().unwrap().to_string();
    call(s, sp, Method::GET, "/v1/jobs/{id}", &format!("/v1/jobs/{job}"), None).await;
    call(s, sp, Method::GET, "/v1/jobs/{id}", "/v1/jobs/job_missing", None).await;
    call(s, sp, Method::POST, "/v1/endpoints/{id}/rotate-secret", &format!("/v1/endpoints/{id}/rotate-secret"), None)
        .await;
    call(
        s,
        sp,
        Method::POST,
        "/v1/endpoints/{id}/recover",
        &format!("/v1/endpoints/{id}/recover"),
        Some(json!({"since": since})),
    )
    .await;
    call(s, sp, Method::POST, "/v1/endpoints/{id}/recover", &format!("/v1/endpoints/{id}/recover"), Some(json!({})))
        .await;
    let (_, held) = call(
        s,
        sp,
        Method::POST,
        "/v1/events",
        "/v1/events",
        Some(json!({
            "tenant_id": "acme", "event_type": "order.paid", "payload": {"n": 2}
        })),
    )
    .await;
    let _ = held;
    call(s, sp, Method::POST, "/v1/endpoints/{id}/disable", &format!("/v1/endpoints/{id}/disable"), None).await;
    call(s, sp, Method::DELETE, "/v1/endpoints/{id}", &format!("/v1/endpoints/{id}"), None).await;
    call(s, sp, Method::DELETE, "/v1/endpoints/{id}", &format!("/v1/endpoints/{id}?force=true"), None).await;
    call(s, sp, Method::DELETE, "/v1/endpoints/{id}", &format!("/v1/endpoints/{id}"), None).await;

    // Portal sessions.
    let (_, session) = call(
        s,
        sp,
        Method::POST,
        "/v1/tenants/{tenant_id}/portal-sessions",
        "/v1/tenants/acme/portal-sessions",
        Some(json!({"ttl_seconds": 600})),
    )
    .await;
    assert!(session["url"].as_str().unwrap().contains("/portal?token="), "{session}");
    call(
        s,
        sp,
        Method::POST,
        "/v1/tenants/{tenant_id}/portal-sessions",
        "/v1/tenants/acme/portal-sessions",
        Some(json!({"ttl_seconds": 5})),
    )
    .await;

    let seen = spec.seen.lock().unwrap().clone();
    let missing: Vec<_> = spec.operations().difference(&seen).cloned().collect();
    assert!(missing.is_empty(), "operations never seen answering 2xx: {missing:?}");
    stack.stop().await;
}
