//! What receivers ask of a sender (issue #38): custom headers (`headers`, write-only
//! `secret_headers`) and receiver authentication (`auth`: bearer, basic, OAuth 2.0 client
//! credentials), end to end with loopback receivers that demand them.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine;
use reqwest::Method;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use webhooks_tests::{Receiver, Reply, Stack, eventually};

const WAIT: Duration = Duration::from_secs(20);

/// A receiver that answers 200 only to the `Authorization` value it demands (401 otherwise),
/// and records every `Authorization` it got.
#[derive(Clone)]
struct Demanding {
    url: String,
    demand: Arc<Mutex<String>>,
    seen: Arc<Mutex<Vec<String>>>,
}

async fn demanding(State(d): State<Demanding>, headers: HeaderMap) -> StatusCode {
    let got = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    d.seen.lock().unwrap().push(got.clone());
    if got == *d.demand.lock().unwrap() { StatusCode::OK } else { StatusCode::UNAUTHORIZED }
}

impl Demanding {
    async fn start(demand: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let d = Self { url, demand: Arc::new(Mutex::new(demand.to_string())), seen: Arc::default() };
        let app = Router::new().fallback(demanding).with_state(d.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        d
    }

    fn demand(&self, value: &str) {
        *self.demand.lock().unwrap() = value.to_string();
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

fn token_answer(token: &str, expires_in: u64) -> Reply {
    let body = json!({"access_token": token, "token_type": "Bearer", "expires_in": expires_in});
    Reply::Body(200, body.to_string().into_bytes())
}

async fn create(stack: &Stack, body: Value) -> (u16, Value) {
    stack.call(Method::POST, "/v1/endpoints", Some(body)).await
}

fn first_delivery(accepted: &Value) -> String {
    accepted["deliveries"][0]["id"].as_str().unwrap().to_string()
}

fn error_code(answer: &Value) -> &str {
    answer["error"]["code"].as_str().unwrap_or("")
}

fn error_message(answer: &Value) -> &str {
    answer["error"]["message"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread")]
async fn custom_headers_arrive_and_names_we_set_are_refused() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let (status, ep) = create(
        &stack,
        json!({"tenant_id": "acme", "url": rx.url, "headers": {"X-Team": "blue"},
               "secret_headers": {"X-Api-Key": "k-s3cret-value"}}),
    )
    .await;
    assert_eq!(status, 201, "{ep}");
    assert_eq!(ep["headers"], json!({"X-Team": "blue"}));
    assert_eq!(ep["secret_headers"], json!(["X-Api-Key"]), "secret headers are listed by name");
    assert!(!ep.to_string().contains("k-s3cret-value"), "a secret header's value is shown: {ep}");
    let id = ep["id"].as_str().unwrap().to_string();

    let accepted = stack.event("acme", "order.paid", json!({"n": 1})).await;
    stack.wait_status(&first_delivery(&accepted), "delivered", WAIT).await;
    let hit = &rx.hits()[0];
    assert_eq!(hit.header("x-team"), "blue");
    assert_eq!(hit.header("x-api-key"), "k-s3cret-value");
    assert!(hit.header("webhook-signature").starts_with("v1,"), "still signed");
    assert_eq!(hit.header("content-type"), "application/json");

    for (name, value) in [
        ("webhook-id", "spoofed"),
        ("Webhook-Signature", "v1,x"),
        ("Content-Type", "text/plain"),
        ("content-length", "1"),
        ("Host", "elsewhere"),
        ("Authorization", "Bearer x"),
        ("User-Agent", "me"),
    ] {
        for field in ["headers", "secret_headers"] {
            let body = json!({ field: { name: value } });
            let (status, answer) = stack.call(Method::PATCH, &format!("/v1/endpoints/{id}"), Some(body)).await;
            assert_eq!((status, error_code(&answer)), (422, "validation_error"), "{field}.{name}: {answer}");
            assert!(error_message(&answer).contains(&format!("{field}.{name}")), "{answer}");
        }
    }
    let too_many: serde_json::Map<String, Value> = (0..21).map(|i| (format!("X-H{i}"), json!("v"))).collect();
    let (status, answer) =
        stack.call(Method::PATCH, &format!("/v1/endpoints/{id}"), Some(json!({"headers": too_many}))).await;
    assert_eq!(status, 422, "{answer}");
    assert!(error_message(&answer).contains("at most 20"), "{answer}");
    // Nothing refused changed the endpoint; null clears.
    let (_, shown) = stack.call(Method::GET, &format!("/v1/endpoints/{id}"), None).await;
    assert_eq!(shown["headers"], json!({"X-Team": "blue"}));
    let (status, cleared) =
        stack.call(Method::PATCH, &format!("/v1/endpoints/{id}"), Some(json!({"headers": null}))).await;
    assert_eq!(status, 200, "{cleared}");
    assert!(cleared.get("headers").is_none(), "{cleared}");
    assert_eq!(cleared["secret_headers"], json!(["X-Api-Key"]));
    let (_, read_again) = stack.call(Method::GET, &format!("/v1/endpoints/{id}"), None).await;
    assert!(read_again.get("headers").is_none(), "the stored headers are gone: {read_again}");
    let accepted = stack.event("acme", "order.paid", json!({"n": 2})).await;
    stack.wait_status(&first_delivery(&accepted), "delivered", WAIT).await;
    let hit = rx.hits().last().cloned().unwrap();
    assert_eq!(hit.header("x-team"), "", "a cleared header is no longer sent");
    assert_eq!(hit.header("x-api-key"), "k-s3cret-value");

    // Review finding M1: moving the endpoint to another host must not carry its credentials
    // along unasked (whoever may change the URL could collect them).
    let elsewhere = Receiver::start(Reply::Status(200)).await;
    let path = format!("/v1/endpoints/{id}");
    let (status, answer) = stack.call(Method::PATCH, &path, Some(json!({"url": elsewhere.url}))).await;
    assert_eq!((status, error_code(&answer)), (422, "validation_error"), "{answer}");
    assert!(error_message(&answer).contains("secret_headers"), "{answer}");
    let (status, answer) =
        stack.call(Method::PATCH, &path, Some(json!({"url": elsewhere.url, "secret_headers": null}))).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.get("secret_headers").is_none(), "{answer}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bearer_and_basic_are_accepted_by_receivers_that_demand_them() {
    let stack = Stack::start(|_| {}).await;
    let bearer_rx = Demanding::start("Bearer b-t0ken").await;
    let basic = base64::engine::general_purpose::STANDARD.encode("hooks:pa55word");
    let basic_rx = Demanding::start(&format!("Basic {basic}")).await;
    let (status, ep) = create(
        &stack,
        json!({"tenant_id": "bearer", "url": bearer_rx.url, "auth": {"type": "bearer", "token": "b-t0ken"}}),
    )
    .await;
    assert_eq!(status, 201, "{ep}");
    assert_eq!(ep["auth"], json!({"type": "bearer"}), "the token is write-only");
    let (status, ep) = create(
        &stack,
        json!({"tenant_id": "basic", "url": basic_rx.url,
               "auth": {"type": "basic", "username": "hooks", "password": "pa55word"}}),
    )
    .await;
    assert_eq!(status, 201, "{ep}");
    assert_eq!(ep["auth"], json!({"type": "basic", "username": "hooks"}), "the password is write-only");

    for tenant in ["bearer", "basic"] {
        let accepted = stack.event(tenant, "order.paid", json!({})).await;
        let d = stack.wait_status(&first_delivery(&accepted), "delivered", WAIT).await;
        assert_eq!(d["attempts"][0]["auth"], tenant, "{d}");
        assert_eq!(d["attempts"][0]["status_code"], 200, "{d}");
    }
    assert_eq!(bearer_rx.seen(), vec!["Bearer b-t0ken".to_string()]);
    assert_eq!(basic_rx.seen(), vec![format!("Basic {basic}")]);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_oauth_token_is_fetched_once_for_many_attempts_and_again_after_a_401_or_its_expiry() {
    let stack = Stack::start(|_| {}).await;
    let tokens = Receiver::start(token_answer("tok-1", 3600)).await;
    let rx = Demanding::start("Bearer tok-1").await;
    let (status, ep) = create(
        &stack,
        json!({"tenant_id": "acme", "url": rx.url, "auth": {"type": "oauth2_client_credentials",
               "token_url": tokens.url, "client_id": "hooks client", "client_secret": "c-s3cret",
               "scope": "webhooks:write", "audience": "https://api.example.com"}}),
    )
    .await;
    assert_eq!(status, 201, "{ep}");
    assert_eq!(ep["auth"]["client_id"], "hooks client");
    assert!(!ep.to_string().contains("c-s3cret"), "{ep}");

    // Five events: one token fetch between them.
    let mut fetched_on = 0;
    for n in 0..5 {
        let accepted = stack.event("acme", "order.paid", json!({"n": n})).await;
        let d = stack.wait_status(&first_delivery(&accepted), "delivered", WAIT).await;
        assert_eq!(d["attempts"][0]["auth"], "oauth2_client_credentials");
        if d["attempts"][0]["token_fetch_ms"].is_u64() {
            fetched_on += 1;
        }
    }
    assert_eq!(tokens.count(), 1, "one token for five attempts");
    assert_eq!(fetched_on, 1, "the attempt that fetched says so, the others used the cached token");
    let request = &tokens.hits()[0];
    let client = base64::engine::general_purpose::STANDARD.encode("hooks+client:c-s3cret");
    assert_eq!(request.header("authorization"), format!("Basic {client}"), "RFC 6749 2.3.1");
    assert_eq!(request.header("content-type"), "application/x-www-form-urlencoded");
    let form = String::from_utf8_lossy(&request.body).into_owned();
    assert!(form.contains("grant_type=client_credentials") && form.contains("scope=webhooks%3Awrite"), "{form}");
    assert!(form.contains("audience=https%3A%2F%2Fapi.example.com"), "{form}");

    // The receiver stops taking the cached token: a 401, one fresh token, the same attempt
    // sent again with it.
    tokens.set_default(token_answer("tok-2", 3600));
    rx.demand("Bearer tok-2");
    let accepted = stack.event("acme", "order.paid", json!({"n": "rotated"})).await;
    let d = stack.wait_status(&first_delivery(&accepted), "delivered", WAIT).await;
    assert_eq!(d["attempt_count"], 1, "one attempt: {d}");
    assert_eq!(tokens.count(), 2);
    assert!(d["attempts"][0]["token_fetch_ms"].is_u64(), "{d}");
    assert_eq!(rx.seen().iter().rev().take(2).cloned().collect::<Vec<_>>(), ["Bearer tok-2", "Bearer tok-1"]);

    // A token of one second is fetched again once it has expired.
    tokens.set_default(token_answer("tok-3", 1));
    rx.demand("Bearer tok-3");
    let accepted = stack.event("acme", "order.paid", json!({"n": "short"})).await;
    stack.wait_status(&first_delivery(&accepted), "delivered", WAIT).await;
    assert_eq!(tokens.count(), 3);
    // The token's own lifetime (1 s, from its answer) must pass: there is no clock to move.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let accepted = stack.event("acme", "order.paid", json!({"n": "after expiry"})).await;
    stack.wait_status(&first_delivery(&accepted), "delivered", WAIT).await;
    assert_eq!(tokens.count(), 4, "fetched again after expiry");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_failure_is_an_auth_failed_attempt_under_the_retry_policy_and_nothing_reaches_the_receiver() {
    let stack = Stack::start(|_| {}).await;
    let tokens = Receiver::start(Reply::Body(401, json!({"error": "invalid_client"}).to_string().into_bytes())).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let (status, ep) = create(
        &stack,
        json!({"tenant_id": "acme", "url": rx.url,
               "retry_policy": {"schedule_seconds": [1], "max_attempts": 2, "retry_on": ["connection"]},
               "auth": {"type": "oauth2_client_credentials", "token_url": tokens.url,
                        "client_id": "c", "client_secret": "wrong-s3cret"}}),
    )
    .await;
    assert_eq!(status, 201, "{ep}");
    let accepted = stack.event("acme", "order.paid", json!({})).await;
    let d = stack.wait_status(&first_delivery(&accepted), "exhausted", WAIT).await;
    let attempts = d["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "retried as a connection failure is: {d}");
    for a in attempts {
        assert_eq!(a["error"], "auth_failed", "{d}");
        assert!(a.get("status_code").is_none(), "{d}");
    }
    assert_eq!(rx.count(), 0, "nothing is sent without a token");
    // Issue #54, item 15: a failed fetch is remembered for FAILURE_HOLD_SECONDS (10 s), so
    // the retry a second later does not ask the failing token endpoint again.
    assert_eq!(tokens.count(), 1, "a failed fetch is remembered, not asked again by the retry");
    assert!(!d.to_string().contains("wrong-s3cret"), "{d}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_url_at_a_private_address_is_refused_like_an_endpoint_url() {
    let stack = Stack::start(|c| c.allow_private_destinations = false).await;
    let auth = |url: &str| json!({"type": "oauth2_client_credentials", "token_url": url, "client_id": "c", "client_secret": "s"});
    for token_url in ["http://127.0.0.1:9/token", "http://169.254.169.254/latest/meta-data", "http://localhost/token"] {
        let (status, answer) = create(
            &stack,
            json!({"tenant_id": "acme", "url": "https://hooks.example.com/in", "auth": auth(token_url)}),
        )
        .await;
        assert_eq!((status, error_code(&answer)), (422, "destination_not_allowed"), "{token_url}: {answer}");
        assert!(error_message(&answer).starts_with("auth.token_url"), "{answer}");
    }
    let (status, ep) = create(&stack, json!({"tenant_id": "acme", "url": "https://hooks.example.com/in"})).await;
    assert_eq!(status, 201, "{ep}");
    let path = format!("/v1/endpoints/{}", ep["id"].as_str().unwrap());
    let (status, answer) = stack.call(Method::PATCH, &path, Some(json!({"auth": auth("http://10.0.0.8/token")}))).await;
    assert_eq!((status, error_code(&answer)), (422, "destination_not_allowed"), "{answer}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn credentials_never_appear_in_an_answer_or_a_log_line() {
    let logs = crate::contract::captured_logs();
    let stack = Stack::start(|_| {}).await;
    let tokens = Receiver::start(Reply::Body(400, b"{\"error\": \"invalid_grant\"}".to_vec())).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let secrets = ["hdr-s3cret", "oauth-s3cret", "bearer-s3cret", "basic-s3cret"];
    let (status, ep) = create(
        &stack,
        json!({"tenant_id": "quiet", "url": rx.url, "secret_headers": {"X-Key": "hdr-s3cret"},
               "retry_policy": {"schedule_seconds": [1], "max_attempts": 1},
               "auth": {"type": "oauth2_client_credentials", "token_url": tokens.url,
                        "client_id": "c", "client_secret": "oauth-s3cret"}}),
    )
    .await;
    assert_eq!(status, 201, "{ep}");
    let id = ep["id"].as_str().unwrap().to_string();
    let accepted = stack.event("quiet", "order.paid", json!({})).await;
    let failed = stack.wait_status(&first_delivery(&accepted), "exhausted", WAIT).await;
    let mut answers = vec![ep.clone(), failed];
    for auth in [
        json!({"type": "bearer", "token": "bearer-s3cret"}),
        json!({"type": "basic", "username": "u", "password": "basic-s3cret"}),
    ] {
        let (status, patched) =
            stack.call(Method::PATCH, &format!("/v1/endpoints/{id}"), Some(json!({"auth": auth}))).await;
        assert_eq!(status, 200, "{patched}");
        answers.push(patched);
        let accepted = stack.event("quiet", "order.paid", json!({})).await;
        answers.push(stack.wait_status(&first_delivery(&accepted), "delivered", WAIT).await);
    }
    answers.push(stack.call(Method::GET, &format!("/v1/endpoints/{id}"), None).await.1);
    answers.push(stack.call(Method::GET, "/v1/endpoints?tenant_id=quiet", None).await.1);
    let text = |v: &Value| v.to_string();
    for answer in &answers {
        for s in secrets {
            assert!(!text(answer).contains(s), "{s} in an answer: {answer}");
        }
    }
    // Deliver logged the token failure; no credential in any line.
    // (The log is the whole test binary's: this endpoint's line, not another test's.)
    let ours = |l: &str| l.contains("OAuth token not fetched") && l.contains(id.as_str());
    eventually("the token failure's log line", WAIT, || async {
        String::from_utf8_lossy(&logs.lock().unwrap()).lines().any(ours)
    })
    .await;
    let all = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    let line = all.lines().find(|l| ours(l)).unwrap();
    assert!(line.contains("invalid_grant"), "the token endpoint's error code is logged: {line}");
    for s in secrets {
        assert!(!all.contains(s), "{s} in the logs");
    }
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn payload_filters_route_events_as_the_docs_say() {
    let stack = Stack::start(|_| {}).await;
    let (big, all) = (Receiver::start(Reply::Status(200)).await, Receiver::start(Reply::Status(200)).await);
    let filter = json!({"amount": {"$gte": 100}, "currency": {"$in": ["EUR", "USD"]},
                        "customer": {"tier": {"$neq": "test"}}});
    let (status, filtered) = create(&stack, json!({"tenant_id": "shop", "url": big.url, "filter": filter})).await;
    assert_eq!(status, 201, "{filtered}");
    let (_, shown) =
        stack.call(Method::GET, &format!("/v1/endpoints/{}", filtered["id"].as_str().unwrap()), None).await;
    assert_eq!(shown["filter"], filter, "the filter reads back as it was given");
    let every = stack.endpoint("shop", &all.url, Value::Null).await;
    let endpoints_of = |accepted: &Value| -> Vec<String> {
        let mut ids: Vec<String> = accepted["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["endpoint_id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    };
    let mut both = vec![filtered["id"].as_str().unwrap().to_string(), every["id"].as_str().unwrap().to_string()];
    both.sort();
    let only_every = vec![every["id"].as_str().unwrap().to_string()];
    let cases = [
        (json!({"amount": 150, "currency": "EUR", "customer": {"tier": "pro"}}), &both),
        (json!({"amount": 100.0, "currency": "USD", "customer": {}}), &both),
        (json!({"amount": 99, "currency": "EUR", "customer": {}}), &only_every),
        (json!({"amount": 500, "currency": "GBP", "customer": {}}), &only_every),
        (json!({"amount": 500, "currency": "EUR", "customer": {"tier": "test"}}), &only_every),
        (json!({"amount": 500, "currency": "EUR"}), &only_every),
    ];
    let mut to_big = 0;
    for (payload, want) in cases {
        let accepted = stack.event("shop", "order.paid", payload.clone()).await;
        assert_eq!(&endpoints_of(&accepted), want, "{payload}");
        to_big += usize::from(want.len() == 2);
        for d in accepted["deliveries"].as_array().unwrap() {
            stack.wait_status(d["id"].as_str().unwrap(), "delivered", WAIT).await;
        }
    }
    assert_eq!(big.count(), to_big, "the filtered endpoint got only the events its filter takes");
    assert_eq!(all.count(), 6);
    let (_, stats) =
        stack.call(Method::GET, &format!("/v1/endpoints/{}/stats", filtered["id"].as_str().unwrap()), None).await;
    assert_eq!(stats["consecutive_failures"].as_u64().unwrap_or(0), 0, "a filtered-out event counts nothing: {stats}");

    // Refused filters name the part; null takes every payload again.
    let path = format!("/v1/endpoints/{}", filtered["id"].as_str().unwrap());
    for (bad, part) in [
        (json!({"amount": {"$gte": "a", "$between": [1, 2]}}), "filter.amount.$between"),
        (json!({"$or": []}), "filter.$or"),
        (json!("amount > 100"), "filter"),
    ] {
        let (status, answer) = stack.call(Method::PATCH, &path, Some(json!({"filter": bad}))).await;
        assert_eq!((status, error_code(&answer)), (422, "validation_error"), "{answer}");
        assert!(error_message(&answer).starts_with(part), "{part}: {answer}");
    }
    let (status, cleared) = stack.call(Method::PATCH, &path, Some(json!({"filter": null}))).await;
    assert_eq!(status, 200, "{cleared}");
    let accepted = stack.event("shop", "order.paid", json!({"amount": 1})).await;
    assert_eq!(endpoints_of(&accepted), both);
    stack.stop().await;
}

/// Issue #54, item 17: header values with non-ASCII characters were accepted and sent as raw
/// UTF-8 (mojibake at the receiver); docs/api.md says visible ASCII. Refused now, 422 naming
/// the header, in `headers` and `secret_headers`, on create and PATCH.
#[tokio::test(flavor = "multi_thread")]
async fn header_values_that_are_not_visible_ascii_are_refused_naming_the_header() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    for field in ["headers", "secret_headers"] {
        let (status, answer) = create(&stack, json!({"tenant_id": "hv", "url": rx.url, field: {"X-V": "café"}})).await;
        assert_eq!((status, error_code(&answer)), (422, "validation_error"), "{answer}");
        assert!(error_message(&answer).starts_with(&format!("{field}.X-V: ")), "{answer}");
    }
    let ep = stack.endpoint("hv", &rx.url, Value::Null).await;
    let path = format!("/v1/endpoints/{}", ep["id"].as_str().unwrap());
    let (status, answer) = stack.call(Method::PATCH, &path, Some(json!({"headers": {"X-V": "naïve"}}))).await;
    assert_eq!((status, error_code(&answer)), (422, "validation_error"), "{answer}");
    assert!(error_message(&answer).starts_with("headers.X-V: "), "{answer}");
    stack.stop().await;
}

/// Issue #54, item 18: a URL carrying `user:pass@` and an `auth` sent two `Authorization`
/// headers (the URL's Basic, then the configured one). The pair is refused, 422 naming the
/// field the request set, and nothing of the credentials shows in the answer.
#[tokio::test(flavor = "multi_thread")]
async fn a_url_with_credentials_and_an_auth_are_refused_together() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let with_userinfo = rx.url.replacen("http://", "http://user:s3cret@", 1);
    let bearer = json!({"type": "bearer", "token": "tok_1"});
    let (status, answer) = create(&stack, json!({"tenant_id": "ua", "url": with_userinfo, "auth": bearer})).await;
    assert_eq!((status, error_code(&answer)), (422, "validation_error"), "{answer}");
    assert!(error_message(&answer).starts_with("auth: ") && error_message(&answer).contains("two"), "{answer}");
    assert!(!answer.to_string().contains("s3cret"), "{answer}");
    // Either alone is taken; a PATCH that brings the other is refused, naming its field.
    let (status, plain) = create(&stack, json!({"tenant_id": "ua", "url": rx.url, "auth": bearer})).await;
    assert_eq!(status, 201, "{plain}");
    let path = format!("/v1/endpoints/{}", plain["id"].as_str().unwrap());
    let (status, answer) = stack.call(Method::PATCH, &path, Some(json!({"url": with_userinfo}))).await;
    assert_eq!((status, error_code(&answer)), (422, "validation_error"), "{answer}");
    assert!(error_message(&answer).starts_with("url: "), "{answer}");
    let (status, userinfo) = create(&stack, json!({"tenant_id": "ua", "url": with_userinfo})).await;
    assert_eq!(status, 201, "{userinfo}");
    let path = format!("/v1/endpoints/{}", userinfo["id"].as_str().unwrap());
    let (status, answer) = stack.call(Method::PATCH, &path, Some(json!({"auth": bearer}))).await;
    assert_eq!((status, error_code(&answer)), (422, "validation_error"), "{answer}");
    assert!(error_message(&answer).starts_with("auth: "), "{answer}");
    // One attempt sends one Authorization: the URL's.
    let accepted = stack.event("ua", "order.paid", json!({"n": 1})).await;
    for d in accepted["deliveries"].as_array().unwrap() {
        stack.wait_status(d["id"].as_str().unwrap(), "delivered", WAIT).await;
    }
    let hits = rx.hits();
    let userinfo_hit = hits.iter().find(|h| h.header("authorization").starts_with("Basic ")).expect("the URL's Basic");
    assert_eq!(userinfo_hit.headers.get_all("authorization").iter().count(), 1);
    stack.stop().await;
}
