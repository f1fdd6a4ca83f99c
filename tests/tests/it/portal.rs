//! The portal as the deployed PortalFunction serves it (`WEBHOOKS_SERVE=portal`: the admin
//! binary with the portal's routes only), with the token key from the Secrets Manager secret
//! `WEBHOOKS_PORTAL_SECRET_ARN` names, read by the process that mints (admin) and the one
//! that checks (portal), each with its own copy.

use serde_json::json;
use std::time::{Duration, Instant};
use webhooks::App;
use webhooks_tests::Stack;

const KEY: &str = "a-portal-token-key-of-at-least-32-characters";
const NEW_KEY: &str = "the-rotated-portal-token-key-also-32-characters-or-more";

/// The emulator's Secrets Manager.
async fn secrets() -> aws_sdk_secretsmanager::Client {
    aws_sdk_secretsmanager::Client::new(&webhooks::app::aws_sdk_config().await)
}

/// A secret holding `key` on the emulator, as the template's PortalTokenKey; returns its ARN.
async fn secret(name: &str, key: &str) -> String {
    let answer = secrets().await.create_secret().name(name).secret_string(key).send().await.expect("create secret");
    answer.arn().expect("the secret's ARN").to_string()
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", ulid::Ulid::new().to_string().to_lowercase())
}

/// The portal function: the portal's routes over an app of its own (another Lambda, so its
/// own copy of the keys), on a free port; returns its base URL.
async fn portal_function(stack: &Stack) -> String {
    let app = App::from_aws((*stack.app.config).clone()).await.expect("the portal's app");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let portal = format!("http://{}", listener.local_addr().unwrap());
    let router = webhooks::http::ui::portal::standalone(app);
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    portal
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

/// A portal session token minted by the admin API.
async fn mint(stack: &Stack) -> String {
    let (status, session) =
        stack.call(reqwest::Method::POST, "/v1/tenants/acme/portal-sessions", Some(json!({"ttl_seconds": 600}))).await;
    assert_eq!(status, 201, "{session}");
    session["token"].as_str().unwrap().to_string()
}

/// The status the portal answers `GET /portal?token=`: 303 into a session, or 401.
async fn open(portal: &str, token: &str) -> u16 {
    client().get(format!("{portal}/portal?token={token}")).send().await.unwrap().status().as_u16()
}

/// Whether `token` is signed with `key`.
fn signed_with(key: &str, token: &str) -> bool {
    webhooks::http::ui::token::verify(key.as_bytes(), token, chrono::Utc::now()).is_ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_portal_function_serves_the_portal_only_and_checks_tokens_with_the_key_from_secrets_manager() {
    let arn = secret(&unique("portal-key"), KEY).await;
    let stack = Stack::start(|c| c.portal_secret_arn = Some(arn.clone())).await;
    // The functions' configuration names the secret, never the key.
    let config = format!("{:?}", stack.app.config);
    assert!(config.contains(&arn) && !config.contains(KEY), "{config}");
    let portal = portal_function(&stack).await;
    let client = client();

    // A token minted by the admin API is one of the configured key.
    let (status, session) =
        stack.call(reqwest::Method::POST, "/v1/tenants/acme/portal-sessions", Some(json!({"ttl_seconds": 120}))).await;
    assert_eq!(status, 201, "{session}");
    let token = session["token"].as_str().unwrap();
    let claims = webhooks::http::ui::token::verify(KEY.as_bytes(), token, chrono::Utc::now()).unwrap();
    assert_eq!(claims.tenant_id, "acme");
    let ttl = (claims.expires_at - chrono::Utc::now()).num_seconds();
    assert!((100..=120).contains(&ttl), "{ttl}");

    // The portal function accepts it and sets the session cookie.
    let r = client.get(format!("{portal}/portal?token={token}")).send().await.unwrap();
    assert_eq!(r.status(), 303);
    let set_cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    for attr in ["HttpOnly", "SameSite=Lax", "Path=/portal"] {
        assert!(set_cookie.contains(attr), "{set_cookie}");
    }
    let cookie = set_cookie.split(';').next().unwrap().to_string();
    let home = client.get(format!("{portal}/portal")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(home.status(), 200);
    assert_eq!(home.headers()["cache-control"], "no-store");
    assert!(home.text().await.unwrap().contains("Your webhook endpoints"));

    // Nothing else: not the admin API, not the dashboard, even with a session.
    for path in ["/v1/endpoints?tenant_id=acme", "/dashboard", "/portal-admin"] {
        let r = client.get(format!("{portal}{path}")).header("cookie", &cookie).send().await.unwrap();
        assert_eq!(r.status(), 404, "{path}");
        assert!(r.text().await.unwrap().contains("There is no such page"), "{path}");
    }
    // A token of another key (a stack's dev key, or a guess) is refused, with no data.
    let foreign =
        webhooks::http::ui::token::sign(&[7u8; 32], "acme", chrono::Utc::now() + chrono::Duration::hours(1), b"n");
    let r = client.get(format!("{portal}/portal?token={foreign}")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.text().await.unwrap().contains("not valid"));
    // A TTL outside 60 s to 24 h is refused.
    for ttl in [59, 86_401] {
        let (status, body) = stack
            .call(reqwest::Method::POST, "/v1/tenants/acme/portal-sessions", Some(json!({"ttl_seconds": ttl})))
            .await;
        assert_eq!((status, body["error"]["code"].as_str()), (422, Some("validation_error")), "{body}");
    }
    let (status, _) =
        stack.call(reqwest::Method::POST, "/v1/tenants/bad%20tenant/portal-sessions", Some(json!({}))).await;
    assert_eq!(status, 422);
    stack.stop().await;
    forget(&arn).await;
}

async fn forget(secret: &str) {
    let _ = secrets().await.delete_secret().secret_id(secret).force_delete_without_recovery(true).send().await;
}

/// The status of the portal's home page for the session `cookie`.
async fn home(portal: &str, cookie: &str) -> u16 {
    client().get(format!("{portal}/portal")).header("cookie", cookie).send().await.unwrap().status().as_u16()
}

/// The status of a portal form's POST to `path` with the form token `csrf`.
async fn post(portal: &str, cookie: &str, path: &str, csrf: &str) -> u16 {
    let r = client().post(format!("{portal}{path}")).header("cookie", cookie).form(&[("csrf", csrf)]).send().await;
    r.unwrap().status().as_u16()
}

/// Issue #34 input 2: the portal token key is rotated in Secrets Manager, with no redeploy.
/// Time is compressed through the configuration: processes re-read the secret every 2 s
/// (deployed: 300 s), and the old key verifies until 10 s after the new version's creation
/// (deployed: 4200 s).
#[tokio::test(flavor = "multi_thread")]
async fn a_rotated_portal_key_takes_effect_without_a_redeploy_and_the_old_one_stops_after_the_overlap() {
    let (refresh, overlap) = (Duration::from_secs(2), Duration::from_secs(10));
    let arn = secret(&unique("portal-key"), KEY).await;
    let stack = Stack::start(|c| {
        c.portal_secret_arn = Some(arn.clone());
        c.portal_key_refresh = refresh;
        c.portal_key_overlap = overlap;
    })
    .await;
    let portal = portal_function(&stack).await;

    // A tenant's session under the first key, and the form token of its page.
    let old = mint(&stack).await;
    assert!(signed_with(KEY, &old));
    let r = client().get(format!("{portal}/portal?token={old}")).send().await.unwrap();
    assert_eq!(r.status(), 303);
    let cookie = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let page = client().get(format!("{portal}/portal")).header("cookie", &cookie).send().await.unwrap();
    let page = page.text().await.unwrap();
    let csrf = page.split(r#"name="csrf" value=""#).nth(1).and_then(|rest| rest.split('"').next()).unwrap().to_string();

    // The secret is rotated (what a rotation Lambda or `aws secretsmanager put-secret-value`
    // does); nothing is redeployed or restarted.
    let rotated = Instant::now();
    secrets().await.put_secret_value().secret_id(&arn).secret_string(NEW_KEY).send().await.unwrap();

    // New sessions come signed with the new key; every one minted on the way, with either
    // key, opens at the portal (no process refuses a token for holding older keys).
    let new = loop {
        let token = mint(&stack).await;
        assert!(signed_with(KEY, &token) || signed_with(NEW_KEY, &token), "{token}");
        assert_eq!(
            open(&portal, &token).await,
            303,
            "a fresh session refused {:?} after the rotation",
            rotated.elapsed()
        );
        if signed_with(NEW_KEY, &token) {
            break token;
        }
        assert!(rotated.elapsed() < Duration::from_secs(30), "new sessions are still signed with the old key");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The new key signs from two refresh intervals after the new version's creation (a
    // CreatedDate in whole seconds can start that a second early).
    assert!(rotated.elapsed() >= refresh * 2 - Duration::from_secs(1), "{:?}", rotated.elapsed());

    // Within the overlap the old session still works, and so do the forms of its pages (the
    // missing endpoint's 404 page, not the 403 of a form token refused).
    assert!(rotated.elapsed() < overlap - Duration::from_secs(2), "too slow for the test's overlap");
    assert_eq!(home(&portal, &cookie).await, 200);
    assert_eq!(post(&portal, &cookie, "/portal/endpoints/ep_missing/disable", &csrf).await, 404);
    assert_eq!(post(&portal, &cookie, "/portal/endpoints/ep_missing/disable", "forged").await, 403);

    // After the overlap the old key stops: its session gets the 401 page; the new one opens.
    while home(&portal, &cookie).await == 200 {
        assert!(rotated.elapsed() < overlap + Duration::from_secs(30), "the old key still works");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(rotated.elapsed() >= overlap - Duration::from_secs(1), "stopped early: {:?}", rotated.elapsed());
    assert_eq!(home(&portal, &cookie).await, 401);
    let r = client().get(format!("{portal}/portal?token={old}")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.text().await.unwrap().contains("not valid"));
    assert_eq!(post(&portal, &cookie, "/portal/endpoints/ep_missing/disable", &csrf).await, 401);
    assert_eq!(open(&portal, &new).await, 303);
    assert!(signed_with(NEW_KEY, &mint(&stack).await));
    stack.stop().await;
    forget(&arn).await;
}

/// A secret that cannot be read (missing here; AccessDenied deployed) is a 503 in the API's
/// error shape at admin and a 503 page at the portal, naming no secret; a failed read is not
/// kept, so the next request reads again.
#[tokio::test(flavor = "multi_thread")]
async fn an_unreadable_portal_key_answers_503_naming_no_secret_and_is_read_again_by_the_next_request() {
    let name = unique("portal-key-not-yet");
    let stack = Stack::start(|c| c.portal_secret_arn = Some(name.clone())).await;
    let portal = portal_function(&stack).await;
    let (status, body) = stack.call(reqwest::Method::POST, "/v1/tenants/acme/portal-sessions", Some(json!({}))).await;
    assert_eq!((status, body["error"]["code"].as_str()), (503, Some("unavailable")), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("error id") && !message.contains(&name), "{message}");
    for (path, cookie) in [("/portal?token=x", ""), ("/portal", "webhooks_portal=x")] {
        let r = client().get(format!("{portal}{path}")).header("cookie", cookie).send().await.unwrap();
        assert_eq!(r.status(), 503, "{path}");
        let text = r.text().await.unwrap();
        assert!(text.contains("try again") && !text.contains(&name), "{path}: {text}");
    }

    secret(&name, KEY).await;
    let token = mint(&stack).await;
    assert!(signed_with(KEY, &token));
    assert_eq!(open(&portal, &token).await, 303);
    stack.stop().await;
    forget(&name).await;
}

/// A portal token for `tenant`, minted by the admin API.
async fn mint_for(stack: &Stack, tenant: &str) -> String {
    let path = format!("/v1/tenants/{tenant}/portal-sessions");
    let (status, session) = stack.call(reqwest::Method::POST, &path, Some(json!({"ttl_seconds": 600}))).await;
    assert_eq!(status, 201, "{session}");
    session["token"].as_str().unwrap().to_string()
}

/// `GET /portal?token=` in a browser holding the session cookie `cookie` (if any): the status,
/// the session cookie it sets (`name=value`, if any) with its attributes, and the page.
async fn open_with(base: &str, token: &str, cookie: Option<&str>) -> (u16, Option<String>, String) {
    let mut req = client().get(format!("{base}/portal?token={token}"));
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    let answer = req.send().await.unwrap();
    let set = answer.headers().get("set-cookie").map(|v| v.to_str().unwrap().to_string());
    (answer.status().as_u16(), set, answer.text().await.unwrap())
}

fn cookie_of(set_cookie: &str) -> String {
    set_cookie.split(';').next().unwrap().to_string()
}

/// Issue #54, item 10: `GET /portal?token=` replaced a live session with any valid token, so
/// a link from another site (with a token of the sender's own tenant) could swap a user into
/// the sender's portal unnoticed. Another tenant's link now asks first; the same tenant's
/// refreshes the session.
#[tokio::test(flavor = "multi_thread")]
async fn a_portal_link_for_another_tenant_does_not_replace_an_open_session_without_asking() {
    let stack = Stack::start(|_| {}).await;
    let (status, set, _) = open_with(&stack.base, &mint_for(&stack, "acme").await, None).await;
    let set = set.expect("a session cookie");
    assert_eq!(status, 303);
    assert!(set.contains("SameSite=Lax") && set.contains("HttpOnly"), "{set}");
    let acme = cookie_of(&set);

    // Another tenant's link: a page that asks, and the session stays acme's.
    let globex_token = mint_for(&stack, "globex").await;
    let (status, set, page) = open_with(&stack.base, &globex_token, Some(&acme)).await;
    assert_eq!((status, set), (409, None), "{page}");
    assert!(page.contains("acme") && page.contains("globex"), "{page}");
    let home = client().get(format!("{}/portal", stack.base)).header("cookie", &acme).send().await.unwrap();
    assert!(home.text().await.unwrap().contains("acme ·"), "still acme's session");

    // The same tenant's new link refreshes the session.
    let (status, set, _) = open_with(&stack.base, &mint_for(&stack, "acme").await, Some(&acme)).await;
    assert_eq!(status, 303);
    assert!(set.is_some(), "the same tenant's link refreshes the cookie");

    // The switch happens only by the page's button: a POST with the open session's form token.
    let form = |csrf: &str| vec![("csrf", csrf.to_string()), ("token", globex_token.clone())];
    let switch = format!("{}/portal/session", stack.base);
    let refused = client().post(&switch).header("cookie", &acme).form(&form("forged")).send().await.unwrap();
    assert_eq!(refused.status().as_u16(), 403);
    let csrf = page.split("name=\"csrf\" value=\"").nth(1).and_then(|r| r.split('"').next()).expect("the form token");
    let switched = client().post(&switch).header("cookie", &acme).form(&form(csrf)).send().await.unwrap();
    assert_eq!(switched.status().as_u16(), 303);
    let globex = cookie_of(switched.headers().get("set-cookie").unwrap().to_str().unwrap());
    let home = client().get(format!("{}/portal", stack.base)).header("cookie", &globex).send().await.unwrap();
    assert!(home.text().await.unwrap().contains("globex ·"), "now globex's session");
    stack.stop().await;
}

/// Issue #54, item 9: the portal sent no `frame-ancestors` nor `X-Frame-Options`, so any site
/// could frame it (clickjacking). No site may by default; `WEBHOOKS_PORTAL_FRAME_ANCESTORS`
/// names those that may.
#[tokio::test(flavor = "multi_thread")]
async fn the_portal_may_be_framed_only_by_the_configured_origins() {
    for (allowed, csp, xfo) in [
        (vec![], "frame-ancestors 'none'", Some("DENY")),
        (vec!["https://app.example.com".to_string()], "frame-ancestors https://app.example.com", None),
    ] {
        let stack = Stack::start(|c| c.portal_frame_ancestors = allowed.clone()).await;
        let (_, set, _) = open_with(&stack.base, &mint_for(&stack, "acme").await, None).await;
        let cookie = cookie_of(&set.expect("a session cookie"));
        for path in ["/portal", "/portal/event-types"] {
            let page = client().get(format!("{}{path}", stack.base)).header("cookie", &cookie).send().await.unwrap();
            assert_eq!(page.status().as_u16(), 200, "{path}");
            let header = |name: &str| page.headers().get(name).map(|v| v.to_str().unwrap().to_string());
            assert_eq!(header("content-security-policy").as_deref(), Some(csp), "{path}");
            assert_eq!(header("x-frame-options").as_deref(), xfo, "{path}");
        }
        stack.stop().await;
    }
}
