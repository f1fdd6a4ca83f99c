//! webhooks-admin against the local runtime on the emulator.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // test helpers fail loudly

use serde_json::{Value, json};
use std::time::Duration;
use webhooks_tests::{Receiver, Reply, Stack};

async fn admin(stack: &Stack, args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_webhooks-admin"))
        .arg("--api")
        .arg(&stack.base)
        .args(args)
        .output()
        .await
        .expect("run webhooks-admin");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn admin_json(stack: &Stack, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let (ok, out, err) = admin(stack, &all).await;
    assert!(ok, "webhooks-admin {args:?} failed: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_creates_lists_inspects_replays_recovers_enables_and_rotates() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(500)).await;

    let ep = admin_json(
        &stack,
        &[
            "endpoints",
            "create",
            "--tenant",
            "acme",
            "--url",
            &rx.url,
            "--retry-policy",
            r#"{"schedule_seconds":[1],"max_attempts":1}"#,
        ],
    )
    .await;
    let ep_id = ep["id"].as_str().unwrap().to_string();
    assert!(ep["secret"].as_str().unwrap().starts_with("whsec_"));
    let (ok, table, _) = admin(&stack, &["endpoints", "list", "--tenant", "acme"]).await;
    assert!(ok && table.contains(&ep_id) && table.contains("custom"), "{table}");
    // Another tenant's two endpoints, a page of one at a time: the first page says where the
    // next starts, and each endpoint is on exactly one page.
    let mut paged = Vec::new();
    for _ in 0..2 {
        let e = admin_json(&stack, &["endpoints", "create", "--tenant", "paged", "--url", &rx.url]).await;
        paged.push(e["id"].as_str().unwrap().to_string());
    }
    let (ok, first, _) = admin(&stack, &["endpoints", "list", "--tenant", "paged", "--limit", "1"]).await;
    let cursor = first.lines().find_map(|l| l.strip_prefix("more: --cursor ")).map(str::to_string);
    assert!(ok && cursor.is_some(), "a page of 1 of 2 endpoints names the next: {first}");
    let (ok, second, _) =
        admin(&stack, &["endpoints", "list", "--tenant", "paged", "--limit", "1", "--cursor", &cursor.unwrap()]).await;
    assert!(ok, "{second}");
    for id in &paged {
        assert!(first.contains(id) != second.contains(id), "{id} on exactly one page: {first}\n{second}");
    }

    let since = chrono::Utc::now().to_rfc3339();
    let accepted = stack.event("acme", "order.paid", json!({"n": 1})).await;
    let id = accepted["deliveries"][0]["id"].as_str().unwrap().to_string();
    stack.wait_status(&id, "exhausted", Duration::from_secs(20)).await;

    let (ok, dead, _) = admin(&stack, &["dead-letters"]).await;
    assert!(ok && dead.contains(&id), "{dead}");
    let (ok, timeline, _) = admin(&stack, &["delivery", &id]).await;
    assert!(ok && timeline.contains("exhausted") && timeline.contains("500"), "{timeline}");

    rx.set_default(Reply::Status(200));
    let replayed = admin_json(&stack, &["replay", &id]).await;
    assert_eq!(replayed["status"], "scheduled");
    stack.wait_status(&id, "delivered", Duration::from_secs(20)).await;

    // A second dead letter, recovered through a job.
    rx.set_default(Reply::Status(500));
    let accepted = stack.event("acme", "order.paid", json!({"n": 2})).await;
    let id2 = accepted["deliveries"][0]["id"].as_str().unwrap().to_string();
    stack.wait_status(&id2, "exhausted", Duration::from_secs(20)).await;
    rx.set_default(Reply::Status(200));
    let job = admin_json(&stack, &["recover", &ep_id, "--since", &since]).await;
    stack.wait_status(&id2, "delivered", Duration::from_secs(20)).await;
    let (ok, line, _) = admin(&stack, &["job", job["id"].as_str().unwrap()]).await;
    assert!(ok && line.contains("recover"), "{line}");

    let disabled = admin_json(&stack, &["endpoints", "disable", &ep_id]).await;
    assert_eq!(disabled["enabled"], false);
    let enabled = admin_json(&stack, &["endpoints", "enable", &ep_id]).await;
    assert_eq!(enabled["enabled"], true);
    let rotated = admin_json(&stack, &["endpoints", "rotate", &ep_id]).await;
    assert_ne!(rotated["secret"], ep["secret"]);
    let (ok, stats, _) = admin(&stack, &["endpoints", "stats", &ep_id]).await;
    assert!(ok && stats.contains("delivered"), "{stats}");

    // Errors come back as a non-zero exit with the API's code and message.
    let (ok, _, err) = admin(&stack, &["delivery", "dlv_missing"]).await;
    assert!(!ok);
    assert!(err.contains("404 not_found"), "{err}");
    stack.stop().await;
}

/// `webhooks-admin dashboard` serves the dashboard on a local port, its pages calling the
/// admin API given with `--api` (in production signed with `--sigv4`); `portal-session`
/// prints a portal URL that opens the tenant's portal.
#[tokio::test(flavor = "multi_thread")]
async fn the_cli_serves_the_dashboard_and_mints_portal_urls() {
    use tokio::io::AsyncBufReadExt as _;
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let ep = stack.endpoint("dash-cli", &rx.url, Value::Null).await;
    let ep_id = ep["id"].as_str().unwrap().to_string();

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_webhooks-admin"))
        .args(["--api", &stack.base, "dashboard", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run webhooks-admin dashboard");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(20), lines.next_line()).await.unwrap().unwrap().unwrap();
    let url = first.split_whitespace().nth(1).unwrap_or_else(|| panic!("no URL in {first:?}")).to_string();
    assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/dashboard"), "{first}");
    let page = stack.http.get(format!("{url}?tenant=dash-cli")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["x-frame-options"], "DENY");
    let html = page.text().await.unwrap();
    assert!(html.contains(&ep_id) && html.contains("enabled"), "{html}");
    let missing = stack.http.get(format!("{url}/endpoints/ep_missing")).send().await.unwrap();
    assert_eq!(missing.status(), 404, "the API's 404 comes through as a page");
    let rebound = stack.http.get(&url).header("host", "evil.example:8300").send().await.unwrap();
    assert_eq!(rebound.status(), 421, "a request for another host name is refused");
    // The dead letters across endpoints, filtered by acceptance time on the page itself (the API
    // takes no window there).
    let failing = Receiver::start(Reply::Status(500)).await;
    stack.endpoint("dash-dead", &failing.url, json!({"schedule_seconds": [1], "max_attempts": 1})).await;
    let dead = stack.event("dash-dead", "order.paid", json!({"n": 1})).await;
    let dead = dead["deliveries"][0]["id"].as_str().unwrap().to_string();
    stack.wait_status(&dead, "exhausted", Duration::from_secs(20)).await;
    for (window, listed) in [("", true), ("&since=2099-01-01T00:00", false), ("&until=2099-01-01T00:00", true)] {
        let page = stack.http.get(format!("{url}/deliveries?status=exhausted{window}")).send().await.unwrap();
        assert_eq!(page.status(), 200, "{window}");
        let html = page.text().await.unwrap();
        assert_eq!(html.contains(&dead), listed, "dead letter listed with {window:?}: {html}");
    }
    child.kill().await.unwrap();

    let (ok, out, err) = admin(&stack, &["portal-session", "--tenant", "dash-cli"]).await;
    assert!(ok, "{err}");
    let portal = out.lines().next().unwrap().to_string();
    assert!(portal.starts_with(&format!("{}/portal?token=", stack.base)), "{out}");
    // The portal URL opens the tenant's page (the cookie is set on the redirect).
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let r = client.get(&portal).send().await.unwrap();
    assert_eq!(r.status(), 303);
    let cookie = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let home = client.get(format!("{}/portal", stack.base)).header("cookie", cookie).send().await.unwrap();
    assert_eq!(home.status(), 200);
    assert!(home.text().await.unwrap().contains(&rx.url));
    stack.stop().await;
}

/// Runs webhooks-admin with `args` and no running API needed; returns (success, stderr).
#[tokio::test(flavor = "multi_thread")]
async fn the_cli_keeps_the_event_type_catalog() {
    let stack = Stack::start(|_| {}).await;
    let schema = r#"{"type":"object","required":["amount"],"properties":{"amount":{"type":"integer"}}}"#;
    let created = admin_json(
        &stack,
        &[
            "event-types",
            "create",
            "order.paid",
            "--description",
            "Paid.",
            "--schema",
            schema,
            "--example",
            r#"{"amount":5}"#,
        ],
    )
    .await;
    assert_eq!((created["name"].as_str(), created["version"].as_u64()), (Some("order.paid"), Some(1)), "{created}");
    // An example that fails the schema: the API's 422 names it, pointer and keyword.
    let (ok, _, err) =
        admin(&stack, &["event-types", "create", "order.bad", "--schema", schema, "--example", r#"{"amount":"5"}"#])
            .await;
    assert!(!ok && err.contains("422 validation_error: examples[0]") && err.contains("/amount"), "{err}");
    admin_json(&stack, &["event-types", "create", "a/b"]).await;

    let (ok, list, _) = admin(&stack, &["event-types", "list"]).await;
    assert!(ok && list.contains("order.paid") && list.contains("a/b") && list.contains("Paid."), "{list}");
    let (ok, one, _) = admin(&stack, &["event-types", "get", "a/b"]).await;
    assert!(ok && one.contains("a/b"), "a name with / is encoded in the path: {one}");

    let updated = admin_json(
        &stack,
        &["event-types", "update", "order.paid", "--schema", r#"{"type":"object"}"#, "--deprecated", "true"],
    )
    .await;
    assert_eq!((updated["version"].as_u64(), updated["deprecated"].as_bool()), (Some(2), Some(true)), "{updated}");
    let old = admin_json(&stack, &["event-types", "get", "order.paid", "--version", "1"]).await;
    assert_eq!(old["schema"], serde_json::from_str::<Value>(schema).unwrap(), "{old}");
    let (ok, shown, _) = admin(&stack, &["event-types", "get", "order.paid", "--version", "1"]).await;
    assert!(ok && shown.contains("order.paid version 1") && shown.contains("\"required\""), "{shown}");

    let archived = admin_json(&stack, &["event-types", "archive", "order.paid"]).await;
    assert_eq!(archived["archived"], true, "{archived}");
    let (status, e) = stack
        .call(
            reqwest::Method::POST,
            "/v1/events",
            Some(json!({"tenant_id": "acme", "event_type": "order.paid", "payload": {}})),
        )
        .await;
    assert_eq!((status, e["error"]["code"].as_str()), (422, Some("event_type_archived")), "{e}");
    stack.stop().await;
}

fn admin_alone(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_webhooks-admin"))
        .args(args)
        .env_remove("WEBHOOKS_ADMIN_URL")
        .output()
        .expect("run webhooks-admin");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn without_a_running_api_the_cli_says_the_connection_was_refused_and_how_to_point_it() {
    // Nothing listens on a port just freed.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let api = format!("http://127.0.0.1:{port}");
    let (ok, err) = admin_alone(&["--api", &api, "endpoints", "list", "--tenant", "acme"]);
    assert!(!ok, "{err}");
    assert!(err.contains("the connection was refused"), "{err}");
    assert!(err.contains("--api") && err.contains("WEBHOOKS_ADMIN_URL") && err.contains("make run"), "{err}");
    assert_eq!(err.matches(&api).count(), 1, "the URL once: {err}");
    // An address without its scheme is named for what it is.
    let (ok, err) = admin_alone(&["--api", "127.0.0.1:3000", "endpoints", "list", "--tenant", "acme"]);
    assert!(!ok && err.contains("--api") && err.contains("not an http(s) URL"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_is_not_the_admin_api_is_named_as_such() {
    let other = Receiver::start(Reply::Body(404, b"<html>not here</html>".to_vec())).await;
    let api = other.url.trim_end_matches("/hook").to_string();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_webhooks-admin"))
        .args(["--api", &api, "endpoints", "list", "--tenant", "acme"])
        .output()
        .await
        .expect("run webhooks-admin");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("other than the webhooks admin API's error shape"), "{err}");
    // API Gateway's own refusal ({"message": "Forbidden"}) is shown as it is, with the way out.
    let gateway = Receiver::start(Reply::Body(403, br#"{"message":"Forbidden"}"#.to_vec())).await;
    let api = gateway.url.trim_end_matches("/hook").to_string();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_webhooks-admin"))
        .args(["--api", &api, "endpoints", "list", "--tenant", "acme"])
        .output()
        .await
        .expect("run webhooks-admin");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("403: Forbidden") && err.contains("--sigv4"), "{err}");
}

#[test]
fn a_top_level_command_that_lives_under_another_gets_a_tip() {
    let (ok, err) = admin_alone(&["stats", "ep_1"]);
    assert!(!ok, "{err}");
    assert!(err.contains("tip: did you mean `webhooks-admin endpoints stats`?"), "{err}");
    // clap's own suggestion still comes for a near miss.
    let (_, err) = admin_alone(&["dead-letter"]);
    assert!(err.contains("dead-letters"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_sets_headers_secret_headers_and_auth_from_flags_and_files() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let dir = std::env::temp_dir().join(format!("webhooks-cli-options-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let auth_file = dir.join("auth.json");
    std::fs::write(&auth_file, r#"{"type": "bearer", "token": "file-t0ken"}"#).unwrap();
    let key_file = dir.join("key");
    std::fs::write(&key_file, "k-from-file\n").unwrap();
    let ep = admin_json(
        &stack,
        &[
            "endpoints",
            "create",
            "--tenant",
            "opts",
            "--url",
            &rx.url,
            "--header",
            "X-Team=blue",
            "--header",
            "X-Env=prod",
        ],
    )
    .await;
    assert_eq!(ep["headers"], json!({"X-Team": "blue", "X-Env": "prod"}));
    let id = ep["id"].as_str().unwrap().to_string();
    let auth_arg = format!("@{}", auth_file.display());
    let key_arg = format!("X-Key=@{}", key_file.display());
    let ep = admin_json(&stack, &["endpoints", "options", &id, "--auth", &auth_arg, "--secret-header", &key_arg]).await;
    assert_eq!(ep["auth"], json!({"type": "bearer"}));
    assert_eq!(ep["secret_headers"], json!(["X-Key"]));
    assert_eq!(ep["headers"], json!({"X-Team": "blue", "X-Env": "prod"}), "what was not given stays");
    let accepted = stack.event("opts", "order.paid", json!({})).await;
    stack.wait_status(accepted["deliveries"][0]["id"].as_str().unwrap(), "delivered", Duration::from_secs(20)).await;
    let hit = &rx.hits()[0];
    assert_eq!(hit.header("authorization"), "Bearer file-t0ken");
    assert_eq!(hit.header("x-key"), "k-from-file");
    assert_eq!(hit.header("x-team"), "blue");
    let ep = admin_json(&stack, &["endpoints", "options", &id, "--no-auth", "--no-headers"]).await;
    assert!(ep.get("auth").is_none() && ep.get("headers").is_none(), "{ep}");
    let (ok, _, err) = admin(&stack, &["endpoints", "options", &id, "--header", "webhook-id=x"]).await;
    assert!(!ok && err.contains("headers.webhook-id"), "{err}");
    let (ok, _, err) = admin(&stack, &["endpoints", "options", &id, "--header", "no-equals-sign"]).await;
    assert!(!ok && err.contains("Name=value"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_makes_lists_and_revokes_api_keys() {
    let stack = Stack::start(|_| {}).await;
    let (ok, out, err) = admin(&stack, &["api-keys", "create", "--name", "billing", "--tenant", "acme"]).await;
    assert!(ok, "{err}");
    let key =
        out.lines().find_map(|l| l.strip_prefix("key (shown once, stored nowhere): ")).expect("the key").to_string();
    assert!(key.starts_with("whk_") && out.contains("acme"), "{out}");
    // Issue #54, item 6: a key for every tenant is asked for; forgetting --tenant is refused.
    let (ok, _, err) = admin(&stack, &["api-keys", "create", "--expires-at", "2099-01-01T00:00:00Z"]).await;
    assert!(!ok && err.contains("--all-tenants"), "{err}");
    let made =
        admin_json(&stack, &["api-keys", "create", "--all-tenants", "--expires-at", "2099-01-01T00:00:00Z"]).await;
    assert_eq!((made["tenant_ids"].is_null(), made["expires_at"].as_str()), (true, Some("2099-01-01T00:00:00Z")));
    assert_eq!(made["all_tenants"], true, "{made}");
    let (ok, list, _) = admin(&stack, &["api-keys", "list"]).await;
    assert!(ok && list.contains("every tenant") && list.contains("acme") && !list.contains(&key), "{list}");
    // The key posts for its tenant; revoked, it is refused.
    let post = |key: String| {
        let stack = &stack;
        async move {
            let body = json!({"tenant_id": "acme", "event_type": "order.paid", "payload": {}});
            let resp = stack.http.post(format!("{}/v1/events", stack.base)).bearer_auth(key).json(&body).send();
            resp.await.unwrap().status().as_u16()
        }
    };
    assert_eq!(post(key.clone()).await, 202);
    let id = key.split('_').nth(1).map(|ulid| format!("key_{ulid}")).unwrap();
    let (ok, revoked, err) = admin(&stack, &["api-keys", "revoke", &id]).await;
    assert!(ok && revoked.contains("revoked"), "{revoked} {err}");
    assert_eq!(post(key).await, 401);
    stack.stop().await;
}
