//! `openapi.yaml` against the running handlers: every operation in the spec is called on the
//! local stack, every answer is validated against the schema the spec gives for its status,
//! and every operation must have been seen answering 2xx. A route the handlers lack, a
//! status the spec does not list or a body that does not fit its schema fails the test.

use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;
use webhooks_tests::{FailNth, Fault, Receiver, Reply, Stack, faulty_api, faulty_api_with};

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

/// A call that must answer `status` with `code` (or, for a 2xx, any body), checked against
/// the spec; `base` is the API to call (the stack's, or a faulty one's).
#[allow(clippy::too_many_arguments)]
async fn expect(
    stack: &Stack,
    spec: &Spec,
    base: &str,
    (method, template, path): (Method, &str, &str),
    headers: &[(&str, &str)],
    body: Option<Value>,
    status: u16,
    code: &str,
) -> Value {
    let mut req = stack.http.request(method.clone(), format!("{base}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let got = resp.status().as_u16();
    let value: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap_or(Value::Null);
    assert_eq!(got, status, "{method} {path}: {value}");
    if !code.is_empty() {
        assert_eq!(value["error"]["code"], code, "{method} {path}: {value}");
    }
    spec.check(&method, template, got, &value);
    value
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
    call(s, sp, Method::GET, "/v1/endpoints", "/v1/endpoints?attention=broken", None).await;
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
    let keyed = [("idempotency-key", "openapi-key")];
    let post_events = (Method::POST, "/v1/events", "/v1/events");
    for (payload, status, code) in [(json!({"n": 1}), 202, ""), (json!({"n": 2}), 422, "idempotency_key_reused")] {
        let body = json!({"tenant_id": "acme", "event_type": "order.paid", "payload": payload});
        expect(s, sp, &s.base, post_events.clone(), &keyed, Some(body), status, code).await;
    }
    call(s, sp, Method::GET, "/v1/events/{id}", "/v1/events/evt_missing", None).await;

    // Sync answers: 202 `deferred` while the first request with the same key is in flight, and
    // when the inline attempt cannot be claimed (the claim is the first
    // UpdateItem of a sync event; this API fails it).
    let slow = Receiver::start(Reply::Hang(Duration::from_millis(1500))).await;
    let ok = Receiver::start(Reply::Status(200)).await;
    for (tenant, url) in [("slow", &slow.url), ("t2", &ok.url), ("t3", &ok.url)] {
        let (status, _) = s.call(Method::POST, "/v1/endpoints", Some(json!({"tenant_id": tenant, "url": url}))).await;
        assert_eq!(status, 201);
    }
    let sync = json!({"tenant_id": "slow", "event_type": "order.paid", "payload": {}, "mode": "sync"});
    let first = {
        let (http, base, body) = (s.http.clone(), s.base.clone(), sync.clone());
        tokio::spawn(async move {
            let r = http.post(format!("{base}/v1/events")).header("idempotency-key", "openapi-sync").json(&body);
            r.send().await.unwrap().status().as_u16()
        })
    };
    webhooks_tests::eventually("the first sync attempt in flight", Duration::from_secs(20), || async {
        slow.count() == 1
    })
    .await;
    let in_flight = [("idempotency-key", "openapi-sync")];
    let under_way = expect(s, sp, &s.base, post_events.clone(), &in_flight, Some(sync), 202, "").await;
    assert_eq!(under_way["deferred"], true, "{under_way}");
    assert_eq!(first.await.unwrap(), 200);
    let claim_fails = faulty_api(s, "UpdateItem", 1).await;
    let sync = json!({"tenant_id": "t2", "event_type": "order.paid", "payload": {}, "mode": "sync"});
    let deferred = expect(s, sp, &claim_fails, post_events.clone(), &[], Some(sync), 202, "").await;
    assert_eq!(deferred["deferred"], true, "{deferred}");
    // One event id in two tenants: a lookup without the tenant is 409 naming them.
    for tenant in ["t2", "t3"] {
        let body = json!({"tenant_id": tenant, "event_type": "order.paid", "payload": {}, "id": "shared-7"});
        expect(s, sp, &s.base, post_events.clone(), &[], Some(body), 202, "").await;
    }
    let get_event = (Method::GET, "/v1/events/{id}", "/v1/events/shared-7");
    let ambiguous = expect(s, sp, &s.base, get_event, &[], None, 409, "conflict").await;
    assert!(ambiguous["error"]["message"].as_str().unwrap().contains("t3"), "{ambiguous}");

    // Deliveries: state, lists, dead letters, replay.
    stack.wait_status(&dlv, "exhausted", Duration::from_secs(20)).await;
    call(s, sp, Method::GET, "/v1/deliveries/{id}", &format!("/v1/deliveries/{dlv}"), None).await;
    call(s, sp, Method::GET, "/v1/deliveries/{id}", "/v1/deliveries/dlv_missing", None).await;
    call(s, sp, Method::GET, "/v1/deliveries", "/v1/deliveries?status=exhausted", None).await;
    call(s, sp, Method::GET, "/v1/deliveries", &format!("/v1/deliveries?endpoint_id={id}&limit=1"), None).await;
    call(s, sp, Method::GET, "/v1/deliveries", "/v1/deliveries?status=bogus", None).await;
    let backwards = format!("/v1/deliveries?endpoint_id={id}&since=2025-02-01T00:00:00Z&until=2025-01-01T00:00:00Z");
    let list = (Method::GET, "/v1/deliveries", backwards.as_str());
    expect(s, sp, &s.base, list, &[], None, 422, "validation_error").await;
    let unknown = format!("/v1/endpoints/{id}?verbose=1");
    let get_ep = (Method::GET, "/v1/endpoints/{id}", unknown.as_str());
    expect(s, sp, &s.base, get_ep, &[], None, 422, "validation_error").await;
    // DynamoDB refusing a request the service built (a ValidationException): 500 `internal`.
    let refused = faulty_api_with(s, FailNth::new("GetItem", 0, Fault::ValidationException)).await;
    let get_dlv = format!("/v1/deliveries/{dlv}");
    let get_dlv = (Method::GET, "/v1/deliveries/{id}", get_dlv.as_str());
    expect(s, sp, &refused, get_dlv, &[], None, 500, "internal").await;
    call(s, sp, Method::GET, "/v1/endpoints/{id}/stats", &format!("/v1/endpoints/{id}/stats"), None).await;
    rx.set_default(Reply::Status(200));
    call(s, sp, Method::POST, "/v1/deliveries/{id}/replay", &format!("/v1/deliveries/{dlv}/replay"), None).await;
    stack.wait_status(&dlv, "delivered", Duration::from_secs(20)).await;
    call(s, sp, Method::POST, "/v1/deliveries/{id}/replay", &format!("/v1/deliveries/{dlv}/replay"), None).await;

    // Health, rotation, recover, jobs, delete.
    call(s, sp, Method::POST, "/v1/endpoints/{id}/disable", &format!("/v1/endpoints/{id}/disable"), None).await;
    // Disabled: listed among the endpoints needing attention (an index read; it may lag a moment).
    webhooks_tests::eventually("the disabled endpoint listed", std::time::Duration::from_secs(20), || async {
        let (_, page) =
            call(s, sp, Method::GET, "/v1/endpoints", "/v1/endpoints?attention=stopped&limit=10", None).await;
        page["data"].as_array().is_some_and(|d| !d.is_empty())
    })
    .await;
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

    // The event-type catalog, and ingest refusing what it refuses.
    let types = "/v1/event-types";
    let one = "/v1/event-types/{name}";
    let schema = json!({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}});
    let body = json!({"name": "order.counted", "description": "Counted.", "schema": schema, "examples": [{"n": 1}]});
    call(s, sp, Method::POST, types, types, Some(body)).await;
    call(s, sp, Method::POST, types, types, Some(json!({"name": "order.counted"}))).await;
    call(s, sp, Method::POST, types, types, Some(json!({"name": "x.y", "schema": {"type": 5}}))).await;
    call(s, sp, Method::GET, types, "/v1/event-types?limit=10", None).await;
    call(s, sp, Method::GET, one, "/v1/event-types/order.counted", None).await;
    call(s, sp, Method::GET, one, "/v1/event-types/order.counted?version=1", None).await;
    call(s, sp, Method::GET, one, "/v1/event-types/order.missing", None).await;
    let patch = Some(json!({"schema": {"type": "object"}, "deprecated": true}));
    call(s, sp, Method::PATCH, one, "/v1/event-types/order.counted", patch).await;
    let post_events = (Method::POST, "/v1/events", "/v1/events");
    let bad = json!({"tenant_id": "acme", "event_type": "order.counted", "payload": []});
    expect(s, sp, &s.base, post_events.clone(), &[], Some(bad.clone()), 422, "schema_mismatch").await;
    let example_to = json!({"tenant_id": "catalog", "url": ok.url});
    let (_, ep) = call(s, sp, Method::POST, "/v1/endpoints", "/v1/endpoints", Some(example_to)).await;
    let send = "/v1/endpoints/{id}/send-example";
    let sent_to = format!("/v1/endpoints/{}/send-example", ep["id"].as_str().unwrap());
    call(s, sp, Method::POST, send, &sent_to, Some(json!({"event_type": "order.counted"}))).await;
    call(s, sp, Method::POST, send, &sent_to, Some(json!({"event_type": "order.missing"}))).await;
    call(s, sp, Method::POST, send, &sent_to, Some(json!({}))).await;
    call(s, sp, Method::DELETE, one, "/v1/event-types/order.counted", None).await;
    expect(s, sp, &s.base, post_events.clone(), &[], Some(bad), 422, "event_type_archived").await;

    // Retention, expunge, purge (issue #39): t3 has one standard endpoint and event shared-7.
    let settings = "/v1/tenants/{tenant_id}/settings";
    call(s, sp, Method::GET, settings, "/v1/tenants/t3/settings", None).await;
    let too_short = Some(json!({"event_retention_days": 1}));
    expect(s, sp, &s.base, (Method::PUT, settings, "/v1/tenants/t3/settings"), &[], too_short, 422, "validation_error")
        .await;
    call(s, sp, Method::PUT, settings, "/v1/tenants/t3/settings", Some(json!({"delivered_retention_days": 7}))).await;
    let expunge = "/v1/events/{id}/expunge";
    expect(s, sp, &s.base, (Method::POST, expunge, "/v1/events/shared-7/expunge"), &[], None, 409, "conflict").await;
    call(s, sp, Method::POST, expunge, "/v1/events/shared-7/expunge?tenant_id=t3", None).await;
    let (_, ev) = call(s, sp, Method::GET, "/v1/events/{id}", "/v1/events/shared-7?tenant_id=t3", None).await;
    let replay = format!("/v1/deliveries/{}/replay", ev["deliveries"][0]["id"].as_str().unwrap());
    let replay = (Method::POST, "/v1/deliveries/{id}/replay", replay.as_str());
    expect(s, sp, &s.base, replay, &[], None, 410, "payload_expunged").await;
    let (_, purge) = call(s, sp, Method::DELETE, "/v1/tenants/{tenant_id}", "/v1/tenants/t3", None).await;
    call(s, sp, Method::GET, "/v1/jobs/{id}", &format!("/v1/jobs/{}", purge["id"].as_str().unwrap()), None).await;
    let refused = json!({"tenant_id": "t3", "event_type": "order.paid", "payload": {}});
    expect(s, sp, &s.base, post_events.clone(), &[], Some(refused), 409, "tenant_purging").await;

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

    // API keys: made (the key shown once), listed, read, used on POST /v1/events (401 for one
    // that is not a key, 403 for another tenant), revoked.
    let (_, made) =
        call(s, sp, Method::POST, "/v1/api-keys", "/v1/api-keys", Some(json!({"tenant_ids": ["acme"]}))).await;
    let key_id = made["id"].as_str().unwrap().to_string();
    let bearer = format!("Bearer {}", made["key"].as_str().unwrap());
    call(s, sp, Method::POST, "/v1/api-keys", "/v1/api-keys", Some(json!({"tenant_ids": []}))).await;
    call(s, sp, Method::GET, "/v1/api-keys", "/v1/api-keys?limit=10", None).await;
    call(s, sp, Method::GET, "/v1/api-keys/{id}", &format!("/v1/api-keys/{key_id}"), None).await;
    call(s, sp, Method::GET, "/v1/api-keys/{id}", "/v1/api-keys/key_missing", None).await;
    let other = json!({"tenant_id": "globex", "event_type": "order.paid", "payload": {}});
    let post = (Method::POST, "/v1/events", "/v1/events");
    expect(s, sp, &s.base, post.clone(), &[("authorization", &bearer)], Some(other), 403, "tenant_not_allowed").await;
    let mine = json!({"tenant_id": "acme", "event_type": "order.paid", "payload": {}});
    let not_a_key = [("authorization", "Bearer whk_nope")];
    expect(s, sp, &s.base, post.clone(), &not_a_key, Some(mine.clone()), 401, "invalid_api_key").await;
    expect(s, sp, &s.base, post, &[("authorization", &bearer)], Some(mine), 202, "").await;
    call(s, sp, Method::DELETE, "/v1/api-keys/{id}", &format!("/v1/api-keys/{key_id}"), None).await;

    let seen = spec.seen.lock().unwrap().clone();
    let missing: Vec<_> = spec.operations().difference(&seen).cloned().collect();
    assert!(missing.is_empty(), "operations never seen answering 2xx: {missing:?}");
    stack.stop().await;
}
