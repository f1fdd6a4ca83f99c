//! SSRF refused at the door, and at every attempt (issue 12, part 3).
//!
//! A canary listener on loopback counts every connection it gets. The stacks here run with
//! private destinations refused (as on Lambda), so loopback receivers cannot be registered:
//! each spelling of a loopback or otherwise non-public address must be refused when it is
//! registered, and none may ever connect. No test points at a non-loopback address: those are
//! only registered and refused.

use reqwest::Method;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use webhooks_tests::Stack;

const WAIT: Duration = Duration::from_secs(20);

/// A TCP listener on 127.0.0.1 that accepts and counts connections, and never answers.
struct Canary {
    port: u16,
    connections: Arc<AtomicUsize>,
}

impl Canary {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind canary");
        let port = listener.local_addr().expect("canary address").port();
        let connections = Arc::new(AtomicUsize::new(0));
        let seen = connections.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                seen.fetch_add(1, Ordering::SeqCst);
                drop(socket);
            }
        });
        Self { port, connections }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// Every way we know to write a loopback address into a URL, on the canary's port.
fn loopback_spellings(port: u16) -> Vec<String> {
    [
        "127.0.0.1",
        "2130706433",         // decimal
        "0x7f000001",         // hex
        "0x7f.0.0.1",         // hex first part
        "0177.0.0.1",         // octal
        "017700000001",       // octal, one part
        "127.1",              // short form
        "127.0.1",            // short form
        "127.0.0.1.",         // trailing dot
        "127.255.255.254",    // anywhere in 127/8
        "[::1]",              // IPv6 loopback
        "[::ffff:127.0.0.1]", // IPv4-mapped
        "[::ffff:7f00:1]",    // IPv4-mapped, hex
        "[::127.0.0.1]",      // IPv4-compatible
        "[0:0:0:0:0:0:0:1]",  // long form
        "localhost",
        "LocalHost.",
        "api.localhost",
        "user:pass@127.0.0.1",    // userinfo
        "127.0.0.1:80@127.0.0.1", // userinfo that looks like a host
        "0.0.0.0",                // unspecified connects to loopback on Linux
        "0",                      // the same, one part
        "[::]",
    ]
    .iter()
    .flat_map(|host| [format!("http://{host}:{port}/hook"), format!("https://{host}:{port}/hook")])
    .collect()
}

/// Non-public ranges, never connected to: each is only registered and must be refused.
const NON_PUBLIC: &[&str] = &[
    "http://10.0.0.1/",
    "http://172.16.0.1/",
    "http://192.168.1.1/",
    "http://169.254.169.254/latest/meta-data/",
    "http://[fd00:ec2::254]/",
    "http://[fd00::1]/",
    "http://[fe80::1]/",
    "http://100.64.0.1/",
    "http://198.18.0.1/",
    "http://224.0.0.1/",
    "http://255.255.255.255/",
    "http://[ff02::1]/",
    "http://[::ffff:10.0.0.1]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[2002:a9fe:a9fe::]/",
    "http://[fec0::1]/",
];

fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread")]
async fn every_spelling_of_a_non_public_destination_is_refused_at_registration_and_nothing_connects() {
    let canary = Canary::start().await;
    let stack = Stack::start(|c| c.allow_private_destinations = false).await;
    let mut urls = loopback_spellings(canary.port);
    urls.extend(NON_PUBLIC.iter().map(|u| u.to_string()));

    for url in &urls {
        let (status, body) =
            stack.call(Method::POST, "/v1/endpoints", Some(json!({"tenant_id": "acme", "url": url}))).await;
        assert_eq!(status, 422, "create {url}: {body}");
        assert_eq!(code(&body), "destination_not_allowed", "create {url}: {body}");
        assert!(body["error"]["message"].as_str().unwrap_or("").starts_with("url: "), "{body}");
    }

    // An endpoint whose name does not resolve here is accepted (the connect-time check will
    // decide at each attempt); changing its URL to any of the above is refused the same way,
    // and the endpoint keeps its URL.
    let good = "https://hooks.example.invalid/in";
    let (status, ep) = stack.call(Method::POST, "/v1/endpoints", Some(json!({"tenant_id": "acme", "url": good}))).await;
    assert_eq!(status, 201, "{ep}");
    let path = format!("/v1/endpoints/{}", ep["id"].as_str().unwrap_or(""));
    for url in &urls {
        let (status, body) = stack.call(Method::PATCH, &path, Some(json!({"url": url}))).await;
        assert_eq!((status, code(&body)), (422, "destination_not_allowed"), "PATCH {url}: {body}");
    }
    let (_, now) = stack.call(Method::GET, &path, None).await;
    assert_eq!(now["url"], good);
    assert_eq!(now["updated_at"], ep["updated_at"], "a refused PATCH changes nothing");

    assert_eq!(canary.connections(), 0, "something connected to the canary");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_destination_that_turned_private_after_registration_is_refused_at_the_attempt() {
    let canary = Canary::start().await;
    let stack = Stack::start(|c| c.allow_private_destinations = false).await;
    // As if the name was public when registered and points at loopback now: the endpoint is
    // written to the store directly, past the registration check.
    let now = chrono::Utc::now();
    for (i, host) in ["localhost", "127.0.0.1", "[::ffff:127.0.0.1]", "2130706433"].iter().enumerate() {
        let ep = webhooks::domain::model::Endpoint::new(
            webhooks_tests::id(format!("ep_turned{i}")),
            webhooks_tests::id("acme"),
            format!("http://{host}:{}/hook", canary.port),
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            now,
        );
        stack.app.store.create_endpoint(&ep).await.expect("create endpoint");
    }
    let accepted = stack.event("acme", "order.paid", json!({"n": 1})).await;
    let ids: Vec<String> = accepted["deliveries"]
        .as_array()
        .map(|a| a.iter().filter_map(|d| d["id"].as_str().map(String::from)).collect())
        .unwrap_or_default();
    assert_eq!(ids.len(), 4, "{accepted}");
    for id in &ids {
        let d = stack.wait_status(id, "exhausted", WAIT).await;
        assert_eq!(d["attempt_count"], 1, "refused is final, never retried: {d}");
        assert_eq!(d["attempts"][0]["error"], "destination_not_allowed", "{d}");
    }
    assert_eq!(canary.connections(), 0, "something connected to the canary");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn require_https_refuses_http_urls_at_registration() {
    let stack = Stack::start(|c| c.require_https = true).await;
    let (status, body) = stack
        .call(Method::POST, "/v1/endpoints", Some(json!({"tenant_id": "acme", "url": "http://127.0.0.1:9/hook"})))
        .await;
    assert_eq!((status, code(&body)), (422, "validation_error"), "{body}");
    assert!(body["error"]["message"].as_str().unwrap_or("").contains("https"), "{body}");
    let (status, ep) = stack
        .call(Method::POST, "/v1/endpoints", Some(json!({"tenant_id": "acme", "url": "https://127.0.0.1:9/hook"})))
        .await;
    assert_eq!(status, 201, "{ep}");
    let path = format!("/v1/endpoints/{}", ep["id"].as_str().unwrap_or(""));
    let (status, body) = stack.call(Method::PATCH, &path, Some(json!({"url": "http://127.0.0.1:9/other"}))).await;
    assert_eq!((status, code(&body)), (422, "validation_error"), "{body}");
    stack.stop().await;
}
