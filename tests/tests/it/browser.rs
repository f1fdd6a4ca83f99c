//! The portal and the dashboard in a real browser: headless Chromium driven over WebDriver
//! (Debian's `chromium` and `chromium-driver`; `CHROMEDRIVER` and `CHROMIUM` name other
//! binaries). Without them the tests fail and say how to install them; they never download a
//! browser.
//!
//! A screenshot of each screen is written to `$CARGO_TARGET_DIR/screenshots/` (default
//! `target/screenshots/`), which CI keeps as an artefact.

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use webhooks_tests::{Receiver, Reply, Stack};

/// A chromedriver process and a headless Chromium session on it.
struct Browser {
    client: Client,
    driver: Child,
    _profile: TempDir,
}

/// A fresh folder removed on drop (the browser's `--user-data-dir`).
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn binary(var: &str, default: &str) -> String {
    let path = std::env::var(var).unwrap_or_else(|_| default.to_string());
    assert!(
        std::path::Path::new(&path).exists(),
        "{path} is missing: the browser tests need Debian's chromium and chromium-driver \
         (apt-get install -y chromium chromium-driver; scripts/test.sh installs them), or {var} set to the binary"
    );
    path
}

impl Browser {
    async fn start() -> Self {
        let driver_bin = binary("CHROMEDRIVER", "/usr/bin/chromedriver");
        let chromium = binary("CHROMIUM", "/usr/bin/chromium");
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let driver = Command::new(driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let profile = TempDir(std::env::temp_dir().join(format!("webhooks-chromium-{}", ulid::Ulid::new())));
        std::fs::create_dir_all(&profile.0).unwrap();
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--window-size=1000,1200",
            &format!("--user-data-dir={}", profile.0.display()),
        ];
        let mut caps = serde_json::Map::new();
        caps.insert("goog:chromeOptions".into(), json!({"binary": chromium, "args": args}));
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector).capabilities(caps.clone()).connect(&url).await {
                Ok(c) => break c,
                Err(e) => {
                    assert!(Instant::now() < deadline, "chromedriver on {url} did not start a session: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        Self { client, driver, _profile: profile }
    }

    async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    /// The visible text of the page's `<main>` (empty while a new page loads).
    async fn text(&self) -> String {
        match self.client.find(Locator::Css("main")).await {
            Ok(main) => main.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    async fn source(&self) -> String {
        self.client.source().await.unwrap()
    }

    /// Waits until `<main>` shows `want` (the page refreshes itself, or `reload`), or fails
    /// with what it shows.
    async fn wait_text(&self, want: &str, within: Duration, reload: bool) -> String {
        let deadline = Instant::now() + within;
        loop {
            let t = self.text().await;
            if t.contains(want) {
                return t;
            }
            assert!(Instant::now() < deadline, "the page never showed {want:?} in {within:?}; it shows:\n{t}");
            if reload {
                self.client.refresh().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn fill(&self, css: &str, value: &str) {
        let e = self.client.find(Locator::Css(css)).await.unwrap();
        e.clear().await.unwrap();
        e.send_keys(value).await.unwrap();
    }

    async fn click_button(&self, label: &str) {
        let xpath = format!("//button[normalize-space()='{label}']");
        self.client.find(Locator::XPath(&xpath)).await.unwrap().click().await.unwrap();
    }

    async fn click_link(&self, text: &str) {
        self.client.find(Locator::LinkText(text)).await.unwrap().click().await.unwrap();
    }

    /// Saves the viewport as `screenshots/{name}.png` under the target folder.
    async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    /// Whether the page fits `width` CSS pixels without scrolling sideways.
    async fn fits(&self, width: u32) -> bool {
        self.client.set_window_size(width, 900).await.unwrap();
        let v = self
            .client
            .execute("return document.documentElement.scrollWidth <= window.innerWidth + 1;", vec![])
            .await
            .unwrap();
        self.client.set_window_size(1000, 1200).await.unwrap();
        v == Value::Bool(true)
    }

    /// POSTs a form from inside the page (its cookies, its origin) and returns the status.
    async fn post_from_page(&self, path: &str, fields: Value) -> u64 {
        let script = "const [path, fields] = arguments; \
                      const r = await fetch(path, {method: 'POST', body: new URLSearchParams(fields), redirect: 'manual'}); \
                      return r.status;";
        let v =
            self.client.execute(&format!("return (async () => {{ {script} }})();"), vec![json!(path), fields]).await;
        v.unwrap().as_u64().unwrap()
    }

    /// Ends the browser session (chromedriver stops on drop).
    async fn stop(self) {
        let _ = self.client.clone().close().await;
    }
}

/// A failed test stops chromedriver too (and with it the browser it started).
impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn screenshot_dir() -> PathBuf {
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target")));
    target.join("screenshots")
}

fn tenant(name: &str) -> String {
    format!("{name}-{}", ulid::Ulid::new().to_string().to_lowercase())
}

/// A tenant's endpoints through the admin API.
async fn endpoints(stack: &Stack, tenant: &str) -> Vec<Value> {
    let (status, page) = stack.call(reqwest::Method::GET, &format!("/v1/endpoints?tenant_id={tenant}"), None).await;
    assert_eq!(status, 200, "{page}");
    page["data"].as_array().cloned().unwrap_or_default()
}

async fn portal_url(stack: &Stack, tenant: &str) -> String {
    let (status, s) =
        stack.call(reqwest::Method::POST, &format!("/v1/tenants/{tenant}/portal-sessions"), Some(json!({}))).await;
    assert_eq!(status, 201, "{s}");
    assert_eq!(s["tenant_id"], tenant);
    s["url"].as_str().unwrap().to_string()
}

/// The issue's scenario: create an endpoint in the portal, post an event through the API,
/// watch it fail and retry on the timeline, resend from the portal, see it delivered; then
/// edit, disable, enable, rotate (the secret shown once verifies what is sent) and a test
/// event.
#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_manages_its_endpoint_and_resends_a_failed_delivery_in_the_portal() {
    // frappe's 5 min, 30 min, 2 h waits become 0.15 s, 0.9 s, 3.6 s.
    let stack = Stack::start(|c| c.wait_scale = 0.0005).await;
    let rx = Receiver::start(Reply::Body(500, b"{\"error\":\"database down\"}".to_vec())).await;
    let t = tenant("acme");
    let url = portal_url(&stack, &t).await;
    let b = Browser::start().await;

    b.goto(&url).await;
    let current = b.client.current_url().await.unwrap();
    assert_eq!(current.path(), "/portal");
    assert!(current.query().is_none(), "the token is stripped from the address bar: {current}");
    b.wait_text("No endpoint yet", Duration::from_secs(20), false).await;
    assert!(b.fits(375).await, "the portal scrolls sideways at 375 px");

    // Create the endpoint in the portal; the secret is shown once.
    b.fill("#url", &rx.url).await;
    b.fill("#event_types", "order.*").await;
    b.client.find(Locator::Css("#retry_preset")).await.unwrap().select_by_value("frappe").await.unwrap();
    b.click_button("Add endpoint").await;
    b.wait_text("Endpoint added", Duration::from_secs(20), false).await;
    let secret = b.client.find(Locator::Css("#secret")).await.unwrap().text().await.unwrap();
    assert!(secret.starts_with("whsec_"), "{secret}");
    b.screenshot("portal-secret").await;
    b.click_link("Open the endpoint").await;
    let page = b.wait_text("frappe", Duration::from_secs(20), false).await;
    assert!(page.contains(&rx.url) && page.contains("order.*"), "{page}");

    // An event through the API; its delivery fails and is retried on the timeline.
    let accepted = stack.event(&t, "order.paid", json!({"order": "o_1"})).await;
    let dlv = accepted["deliveries"][0]["id"].as_str().unwrap().to_string();
    b.wait_text(&dlv, Duration::from_secs(30), true).await;
    b.click_link(&dlv).await;
    let timeline = b.wait_text("Next attempt after 300 s", Duration::from_secs(20), false).await;
    assert!(timeline.contains("HTTP 500 failed"), "{timeline}");
    b.screenshot("portal-timeline-retrying").await;
    b.wait_text("exhausted", Duration::from_secs(40), false).await;
    b.wait_text("Attempt 4", Duration::from_secs(20), false).await;
    // The response body excerpt is on the timeline.
    assert!(b.source().await.contains("database down"));

    // The receiver is fixed; resend from the portal and see it delivered.
    rx.set_default(Reply::Status(200));
    b.click_button("Resend").await;
    let done = b.wait_text("HTTP 200 delivered", Duration::from_secs(30), false).await;
    assert!(done.contains("delivered"), "{done}");
    b.screenshot("portal-timeline-delivered").await;
    let hit = rx.hits().last().cloned().unwrap();
    assert_eq!(hit.header("webhook-id"), accepted["event_id"].as_str().unwrap());
    let wh = standardwebhooks::Webhook::new(&secret).unwrap();
    wh.verify(&hit.body, &hit.headers).expect("the secret the portal showed verifies the delivery");

    // Edit, disable, enable, rotate, test event.
    let ep_id = endpoints(&stack, &t).await[0]["id"].as_str().unwrap().to_string();
    b.click_link(&ep_id).await;
    b.fill("#event_types", "order.*, invoice.*").await;
    b.click_button("Save").await;
    b.wait_text("order.*, invoice.*", Duration::from_secs(20), false).await;
    b.click_button("Disable").await;
    b.wait_text("disabled (manual)", Duration::from_secs(20), false).await;
    let ep = &endpoints(&stack, &t).await[0];
    assert_eq!(ep["state"], "disabled");
    assert_eq!(ep["event_types"], json!(["order.*", "invoice.*"]));
    b.click_button("Enable").await;
    b.wait_text("Disable", Duration::from_secs(20), false).await;
    assert_eq!(endpoints(&stack, &t).await[0]["state"], "enabled");
    b.screenshot("portal-endpoint").await;
    b.click_button("Rotate secret").await;
    b.wait_text("Secret rotated", Duration::from_secs(20), false).await;
    let rotated = b.client.find(Locator::Css("#secret")).await.unwrap().text().await.unwrap();
    assert!(rotated.starts_with("whsec_") && rotated != secret);
    b.client.back().await.unwrap();
    b.client.refresh().await.unwrap();
    assert!(!b.source().await.contains(&rotated), "the new secret is shown once, not on the endpoint page");
    let before = rx.count();
    b.click_button("Send a test event").await;
    b.wait_text("HTTP 200 delivered", Duration::from_secs(20), false).await;
    assert_eq!(rx.count(), before + 1);
    let test_hit = rx.hits().last().cloned().unwrap();
    standardwebhooks::Webhook::new(&rotated).unwrap().verify(&test_hit.body, &test_hit.headers).unwrap();
    assert!(String::from_utf8_lossy(&test_hit.body).contains("webhooks.test"));

    b.goto(&format!("{}/portal", stack.base)).await;
    b.wait_text("Recent deliveries", Duration::from_secs(20), false).await;
    assert!(b.fits(375).await, "the portal home scrolls sideways at 375 px");
    b.screenshot("portal-home").await;
    b.stop().await;
    stack.stop().await;
}

/// Issue #38: a tenant sets custom headers, a secret header and a bearer token on its
/// endpoint in the portal; the test event carries them, the page never shows a secret back,
/// and a header name we set is refused with the field named.
#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_sets_headers_and_authentication_in_the_portal() {
    // As WEBHOOKS_EGRESS_IPS sets it with StaticEgressIps=enabled (documentation addresses).
    let stack = Stack::start(|c| c.egress_ips = vec!["203.0.113.7".into(), "198.51.100.9".into()]).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let t = tenant("opts");
    let ep = stack.endpoint(&t, &rx.url, Value::Null).await;
    let ep_id = ep["id"].as_str().unwrap().to_string();
    let url = portal_url(&stack, &t).await;
    let b = Browser::start().await;
    b.goto(&url).await;
    b.wait_text("Your webhook endpoints", Duration::from_secs(20), false).await;
    b.goto(&format!("{}/portal/endpoints/{ep_id}", stack.base)).await;
    let page = b.wait_text("Headers and authentication", Duration::from_secs(20), false).await;
    assert!(page.contains("come from 203.0.113.7, 198.51.100.9"), "the egress addresses to allow-list: {page}");
    b.fill("#headers", "X-Team: blue\nX-Env: prod").await;
    b.fill("#secret_headers", "X-Api-Key: hdr-s3cret").await;
    b.client.find(Locator::Css("#auth_type")).await.unwrap().select_by_value("bearer").await.unwrap();
    b.fill("#auth_token", "portal-t0ken").await;
    b.click_button("Save headers and authentication").await;
    let page = b.wait_text("bearer token", Duration::from_secs(20), false).await;
    assert!(page.contains("X-Team, X-Env") || page.contains("X-Env, X-Team"), "{page}");
    assert!(page.contains("X-Api-Key (secret)"), "{page}");
    let source = b.source().await;
    assert!(!source.contains("hdr-s3cret") && !source.contains("portal-t0ken"), "a secret is on the page");
    b.screenshot("portal-endpoint-options").await;

    b.click_button("Send a test event").await;
    b.wait_text("HTTP 200 delivered", Duration::from_secs(20), false).await;
    let hit = rx.hits().last().cloned().unwrap();
    assert_eq!(hit.header("x-team"), "blue");
    assert_eq!(hit.header("x-api-key"), "hdr-s3cret");
    assert_eq!(hit.header("authorization"), "Bearer portal-t0ken");

    // Saving again without retyping the credentials keeps them; a reserved name is refused.
    b.client.back().await.unwrap();
    b.client.refresh().await.unwrap();
    b.wait_text("Headers and authentication", Duration::from_secs(20), false).await;
    b.fill("#headers", "webhook-id: spoofed").await;
    b.click_button("Save headers and authentication").await;
    b.wait_text("headers.webhook-id", Duration::from_secs(20), false).await;
    let shown = &endpoints(&stack, &t).await[0];
    assert_eq!(shown["auth"], json!({"type": "bearer"}), "{shown}");
    assert_eq!(shown["secret_headers"], json!(["X-Api-Key"]), "{shown}");
    assert_eq!(shown["headers"], json!({"X-Team": "blue", "X-Env": "prod"}), "the refused save changed nothing");
    b.stop().await;
    stack.stop().await;
}

/// Issue #37 and #38 in the portal: a tenant reads the event-type catalog, subscribes its
/// endpoint by picking types, sends a type's example (signed with the endpoint's secret), and
/// tries a payload filter on an example before saving it.
#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_reads_the_catalog_picks_types_sends_an_example_and_tries_a_filter() {
    let stack = Stack::start(|_| {}).await;
    let schema = json!({"type": "object", "required": ["amount"], "properties": {
        "amount": {"type": "integer", "description": "In cents"}, "currency": {"type": "string"}}});
    let example = json!({"amount": 1200, "currency": "EUR"});
    for body in [
        json!({"name": "order.paid", "description": "An order was paid.", "schema": schema, "examples": [example]}),
        json!({"name": "invoice.sent", "description": "An invoice went out.", "examples": [{"invoice": "in_1"}]}),
        json!({"name": "customer.deleted", "description": "A customer was deleted."}),
    ] {
        let (status, created) = stack.call(reqwest::Method::POST, "/v1/event-types", Some(body)).await;
        assert_eq!(status, 201, "{created}");
    }
    let rx = Receiver::start(Reply::Status(200)).await;
    let t = tenant("catalog");
    let ep = stack.endpoint(&t, &rx.url, Value::Null).await;
    let (ep_id, secret) = (ep["id"].as_str().unwrap().to_string(), ep["secret"].as_str().unwrap().to_string());
    let url = portal_url(&stack, &t).await;
    let b = Browser::start().await;
    b.goto(&url).await;
    b.wait_text("Your webhook endpoints", Duration::from_secs(20), false).await;

    // The catalog, readable: description, the schema's fields, the example.
    b.click_link("Event types").await;
    let page = b.wait_text("An order was paid.", Duration::from_secs(20), false).await;
    assert!(page.contains("amount") && page.contains("integer") && page.contains("In cents"), "{page}");
    assert!(page.contains("\"currency\": \"EUR\""), "the example is shown: {page}");
    b.screenshot("portal-event-types").await;

    // Pick two types for the endpoint.
    b.goto(&format!("{}/portal/endpoints/{ep_id}", stack.base)).await;
    b.wait_text("Subscribed types", Duration::from_secs(20), false).await;
    for name in ["order.paid", "invoice.sent"] {
        let css = format!("input[name=event_type][value='{name}']");
        b.client.find(Locator::Css(&css)).await.unwrap().click().await.unwrap();
    }
    b.click_button("Save event types").await;
    b.wait_text("invoice.sent, order.paid", Duration::from_secs(20), false).await;
    assert_eq!(endpoints(&stack, &t).await[0]["event_types"], json!(["invoice.sent", "order.paid"]));

    // Send order.paid's example: the catalog's payload, signed with the endpoint's secret.
    b.client.find(Locator::Css("#example_type")).await.unwrap().select_by_value("order.paid").await.unwrap();
    b.click_button("Send example").await;
    b.wait_text("HTTP 200 delivered", Duration::from_secs(20), false).await;
    let hit = rx.hits().last().cloned().unwrap();
    assert!(hit.header("webhook-id").starts_with("msg_example_"), "{}", hit.header("webhook-id"));
    assert_eq!(serde_json::from_slice::<Value>(&hit.body).unwrap(), example);
    standardwebhooks::Webhook::new(&secret).unwrap().verify(&hit.body, &hit.headers).expect("signed as deliveries are");

    // Try a filter on the example, then save it.
    b.goto(&format!("{}/portal/endpoints/{ep_id}", stack.base)).await;
    b.wait_text("Payload filter", Duration::from_secs(20), false).await;
    b.fill("#filter", r#"{"amount": {"$gte": 5000}}"#).await;
    b.fill("#sample", &example.to_string()).await;
    b.click_button("Try filter").await;
    b.wait_text("Does not match", Duration::from_secs(20), false).await;
    b.fill("#filter", r#"{"amount": {"$gte": 1000}, "currency": {"$in": ["EUR", "USD"]}}"#).await;
    b.click_button("Try filter").await;
    b.wait_text("Matches: this payload would be sent", Duration::from_secs(20), false).await;
    b.screenshot("portal-filter-try").await;
    assert!(endpoints(&stack, &t).await[0].get("filter").is_none(), "trying saves nothing");
    b.click_button("Save filter").await;
    b.wait_text("Subscribed types", Duration::from_secs(20), false).await;
    assert_eq!(
        endpoints(&stack, &t).await[0]["filter"],
        json!({"amount": {"$gte": 1000}, "currency": {"$in": ["EUR", "USD"]}})
    );
    // Ops see the endpoint's options on the dashboard, without a credential.
    let options = json!({"secret_headers": {"X-Key": "k-s3cret"}, "auth": {"type": "bearer", "token": "t-s3cret"}});
    let (status, _) = stack.call(reqwest::Method::PATCH, &format!("/v1/endpoints/{ep_id}"), Some(options)).await;
    assert_eq!(status, 200);
    b.goto(&format!("{}/dashboard/endpoints/{ep_id}", stack.base)).await;
    let dash = b.wait_text("Payload filter", Duration::from_secs(20), false).await;
    assert!(dash.contains("X-Key (secret)") && dash.contains("bearer") && dash.contains("$gte"), "{dash}");
    assert!(!b.source().await.contains("s3cret"), "no credential on the dashboard");
    b.stop().await;
    stack.stop().await;
}

/// A token for tenant A never reads or changes tenant B, and a tampered, forged or expired
/// token gets a page with no data.
#[tokio::test(flavor = "multi_thread")]
async fn a_portal_token_reads_and_changes_only_its_own_tenant() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(500)).await;
    let (ta, tb) = (tenant("alpha"), tenant("beta"));
    let a_ep = stack.endpoint(&ta, &format!("{}?a", rx.url), json!({"schedule_seconds": [1], "max_attempts": 1})).await;
    let b_url = format!("{}?beta-secret-path", rx.url);
    let b_ep = stack.endpoint(&tb, &b_url, json!({"schedule_seconds": [1], "max_attempts": 1})).await;
    let b_id = b_ep["id"].as_str().unwrap().to_string();
    let accepted = stack.event(&tb, "order.paid", json!({"n": 1})).await;
    let b_dlv = accepted["deliveries"][0]["id"].as_str().unwrap().to_string();
    stack.wait_status(&b_dlv, "exhausted", Duration::from_secs(20)).await;

    let url = portal_url(&stack, &ta).await;
    let b = Browser::start().await;

    // No token: no data.
    b.goto(&format!("{}/portal", stack.base)).await;
    b.wait_text("No portal session", Duration::from_secs(20), false).await;

    b.goto(&url).await;
    let home = b.wait_text("Your webhook endpoints", Duration::from_secs(20), false).await;
    // Keyboard: the first Tab reaches "Skip to content", Enter moves focus to the page's
    // content; more Tabs reach the add form's fields, each with its label.
    let body = b.client.find(Locator::Css("body")).await.unwrap();
    body.send_keys(&fantoccini::key::Key::Tab.to_string()).await.unwrap();
    let first = b.client.active_element().await.unwrap();
    assert_eq!(first.text().await.unwrap(), "Skip to content");
    first.send_keys(&fantoccini::key::Key::Enter.to_string()).await.unwrap();
    assert_eq!(b.client.active_element().await.unwrap().attr("id").await.unwrap().as_deref(), Some("main"));
    let mut reached = Vec::new();
    for _ in 0..12 {
        let focused = b.client.active_element().await.unwrap();
        focused.send_keys(&fantoccini::key::Key::Tab.to_string()).await.unwrap();
        if let Some(id) = b.client.active_element().await.unwrap().attr("id").await.unwrap() {
            reached.push(id);
        }
    }
    for id in ["url", "event_types", "retry_preset"] {
        assert!(reached.iter().any(|r| r == id), "Tab never reached #{id}: {reached:?}");
        let label = b.client.find(Locator::Css(&format!("label[for={id}]"))).await.unwrap();
        assert!(!label.text().await.unwrap().is_empty());
    }
    assert!(home.contains(a_ep["url"].as_str().unwrap()));
    assert!(!b.source().await.contains(&b_id) && !b.source().await.contains("beta-secret-path"));

    // Reading B's endpoint and delivery: the same 404 page as a missing id.
    for path in
        [format!("/portal/endpoints/{b_id}"), format!("/portal/deliveries/{b_dlv}"), "/portal/endpoints/ep_nope".into()]
    {
        b.goto(&format!("{}{path}", stack.base)).await;
        let t = b.wait_text("Not found", Duration::from_secs(20), false).await;
        assert!(!t.contains(&tb) && !b.source().await.contains("beta-secret-path"), "{path}: {t}");
    }
    b.screenshot("portal-not-found").await;

    // Changing B's endpoint and delivery from A's page, with A's valid form token: 404, and
    // nothing changes.
    b.goto(&format!("{}/portal", stack.base)).await;
    let csrf = b.client.find(Locator::Css("input[name=csrf]")).await.unwrap().attr("value").await.unwrap().unwrap();
    for (path, fields) in [
        (format!("/portal/endpoints/{b_id}/disable"), json!({"csrf": csrf})),
        (format!("/portal/endpoints/{b_id}/rotate-secret"), json!({"csrf": csrf})),
        (format!("/portal/endpoints/{b_id}/test"), json!({"csrf": csrf})),
        (
            format!("/portal/endpoints/{b_id}"),
            json!({"csrf": csrf, "url": "https://evil.example/x", "event_types": ""}),
        ),
        (format!("/portal/deliveries/{b_dlv}/resend"), json!({"csrf": csrf})),
    ] {
        assert_eq!(b.post_from_page(&path, fields).await, 404, "{path}");
    }
    // A form without A's form token is refused before anything is looked up.
    let a_id = a_ep["id"].as_str().unwrap();
    assert_eq!(b.post_from_page(&format!("/portal/endpoints/{a_id}/disable"), json!({"csrf": "x"})).await, 403);
    let after = &endpoints(&stack, &tb).await[0];
    assert_eq!((&after["state"], &after["url"]), (&json!("enabled"), &json!(b_url)));
    assert!(after.get("previous_secret_expires_at").is_none(), "B's secret was not rotated: {after}");
    assert_eq!(stack.delivery(&b_dlv).await["status"], "exhausted");
    assert_eq!(rx.count(), 1, "no test event or resend reached B's endpoint");
    assert_eq!(endpoints(&stack, &ta).await[0]["state"], "enabled");

    // A tampered token, a forged tenant, an expired token: a clear page, no data.
    let token = url.split_once("token=").unwrap().1.to_string();
    let mut tampered = token.clone();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    let (_, sig) = token.split_once('.').unwrap();
    use base64::Engine as _;
    let forged_payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(format!("v1\n{tb}\n{}\n00", chrono::Utc::now().timestamp() + 3600));
    let forged = format!("{forged_payload}.{sig}");
    let keys = stack.app.portal_keys.in_force(chrono::Utc::now()).await.unwrap();
    let expired =
        webhooks::http::ui::token::sign(keys.signing(), &ta, chrono::Utc::now() - chrono::Duration::seconds(1), b"n");
    for (bad, want) in [(&tampered, "not valid"), (&forged, "not valid"), (&expired, "expired")] {
        b.goto(&format!("{}/portal?token={bad}", stack.base)).await;
        let t = b.wait_text(want, Duration::from_secs(20), false).await;
        assert!(!t.contains(&ta) && !t.contains(&tb), "{t}");
        assert!(!b.source().await.contains("beta-secret-path"));
    }
    b.screenshot("portal-expired").await;
    b.stop().await;
    stack.stop().await;
}

/// The ops dashboard: health, the dead-letter list and its filters, a timeline, replay, the
/// 24 h chart, disable and enable.
#[tokio::test(flavor = "multi_thread")]
async fn ops_see_health_filter_deliveries_replay_and_toggle_in_the_dashboard() {
    let stack = Stack::start(|_| {}).await;
    let rx = Receiver::start(Reply::Status(503)).await;
    let t = tenant("ops");
    let ep = stack.endpoint(&t, &rx.url, json!({"schedule_seconds": [1], "max_attempts": 2})).await;
    let ep_id = ep["id"].as_str().unwrap().to_string();
    let accepted = stack.event(&t, "order.paid", json!({"n": 1})).await;
    let dlv = accepted["deliveries"][0]["id"].as_str().unwrap().to_string();
    stack.wait_status(&dlv, "exhausted", Duration::from_secs(20)).await;
    // In other tenants: an endpoint failing (its first attempt failed, the retry waits ten
    // minutes: no dead letter yet) and one disabled with nothing held.
    let t_failing = tenant("failing");
    let failing_rx = Receiver::start(Reply::Status(500)).await;
    let failing =
        stack.endpoint(&t_failing, &failing_rx.url, json!({"schedule_seconds": [600], "max_attempts": 3})).await;
    let failing_id = failing["id"].as_str().unwrap().to_string();
    let retried = stack.event(&t_failing, "order.paid", json!({"n": 2})).await;
    let retried = retried["deliveries"][0]["id"].as_str().unwrap().to_string();
    stack
        .wait_delivery(&retried, Duration::from_secs(20), |d| d["attempt_count"] == 1 && d["status"] == "scheduled")
        .await;
    let t_off = tenant("off");
    let off = stack.endpoint(&t_off, &failing_rx.url, serde_json::Value::Null).await;
    let off_id = off["id"].as_str().unwrap().to_string();
    let (status, _) = stack.call(reqwest::Method::POST, &format!("/v1/endpoints/{off_id}/disable"), None).await;
    assert_eq!(status, 200);

    let b = Browser::start().await;
    // The landing page opens on what needs attention: the endpoint with the dead letter, the
    // failing one and the disabled one, each with its tenant and why (polled: the listing
    // is read through an index that can lag a moment).
    let start = Instant::now();
    let (landing, attention) = loop {
        b.goto(&format!("{}/dashboard", stack.base)).await;
        let landing = b.wait_text("Newest dead letters", Duration::from_secs(20), false).await;
        let attention = landing.split("Needs attention").nth(1).unwrap_or_default().to_string();
        if [&ep_id, &failing_id, &off_id].iter().all(|id| attention.contains(id.as_str()))
            || start.elapsed() > Duration::from_secs(20)
        {
            break (landing, attention);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(attention.contains(&ep_id) && attention.contains(&t) && attention.contains("enabled"), "{landing}");
    assert!(attention.contains("dead letters 1"), "{landing}");
    let row = |id: &str| attention.lines().find(|l| l.contains(id)).unwrap_or_default().to_string();
    let failing_row = row(&failing_id);
    assert!(
        failing_row.contains(&t_failing)
            && failing_row.contains("enabled")
            && failing_row.contains("failing since")
            && failing_row.contains("failures in a row 1")
            && failing_row.contains("retrying 1"),
        "{landing}"
    );
    let off_row = row(&off_id);
    assert!(
        off_row.contains(&t_off) && off_row.contains("disabled (manual)") && off_row.contains("disabled since"),
        "{landing}"
    );
    assert!(!landing.contains("shows on its tenant's page"), "{landing}");
    // Each row links to the endpoint's page and the tenant's.
    b.click_link(&off_id).await;
    b.wait_text(&format!("Endpoint {off_id}"), Duration::from_secs(20), false).await;
    b.goto(&format!("{}/dashboard", stack.base)).await;
    b.wait_text("Newest dead letters", Duration::from_secs(20), false).await;
    b.click_link(&t).await;
    let home = b.wait_text(&format!("Endpoints of {t}"), Duration::from_secs(20), false).await;
    assert!(home.contains(&ep_id) && home.contains("enabled"), "{home}");
    b.screenshot("dashboard-home").await;
    assert!(b.fits(375).await, "the dashboard scrolls sideways at 375 px");

    // The delivery list, filtered by tenant and status.
    b.click_link("Dead letters").await;
    b.fill("#f-tenant", &t).await;
    b.click_button("Filter").await;
    let list = b.wait_text(&dlv, Duration::from_secs(20), false).await;
    assert!(list.contains("1 deliveries"), "{list}");
    b.fill("#f-tenant", "nobody-here").await;
    b.click_button("Filter").await;
    b.wait_text("0 deliveries", Duration::from_secs(20), false).await;
    b.client.back().await.unwrap();
    b.wait_text(&dlv, Duration::from_secs(20), false).await;
    b.screenshot("dashboard-deliveries").await;

    // The timeline, then replay once the receiver is fixed.
    b.click_link(&dlv).await;
    let timeline = b.wait_text("Attempt 2", Duration::from_secs(20), false).await;
    assert!(timeline.contains("HTTP 503 failed") && timeline.contains("Next attempt after 1 s"), "{timeline}");
    rx.set_default(Reply::Status(200));
    b.click_button("Replay").await;
    b.wait_text("HTTP 200 delivered", Duration::from_secs(30), false).await;
    b.screenshot("dashboard-timeline").await;

    // The endpoint: chart, disable, enable.
    b.click_link(&ep_id).await;
    b.wait_text("Attempts, last 24 hours", Duration::from_secs(20), false).await;
    let svg_title = b.client.find(Locator::Css("svg.chart title")).await.unwrap().html(true).await.unwrap();
    assert!(svg_title.contains("1 delivered, 1 failed and retried, 1 failed"), "{svg_title}");
    b.screenshot("dashboard-endpoint").await;
    b.click_button("Disable").await;
    b.wait_text("disabled (manual)", Duration::from_secs(20), false).await;
    assert_eq!(stack.call(reqwest::Method::GET, &format!("/v1/endpoints/{ep_id}"), None).await.1["state"], "disabled");
    b.click_button("Enable").await;
    b.wait_text("Disable", Duration::from_secs(20), false).await;
    assert_eq!(stack.call(reqwest::Method::GET, &format!("/v1/endpoints/{ep_id}"), None).await.1["state"], "enabled");

    // Recover a window: the job starts and the page says so.
    b.client.execute("document.getElementById('r-since').value = '2020-01-01T00:00';", vec![]).await.unwrap();
    b.click_button("Recover").await;
    let flash = b.wait_text("recover job", Duration::from_secs(20), false).await;
    assert!(flash.contains("job_"), "{flash}");

    // A form from elsewhere (no form token) changes nothing.
    assert_eq!(b.post_from_page(&format!("/dashboard/endpoints/{ep_id}/disable"), json!({"csrf": "x"})).await, 403);
    assert_eq!(stack.call(reqwest::Method::GET, &format!("/v1/endpoints/{ep_id}"), None).await.1["state"], "enabled");
    b.stop().await;
    stack.stop().await;
}
