//! The portal as the deployed PortalFunction serves it (`WEBHOOKS_SERVE=portal`: the admin
//! binary with the portal's routes only), with the token key from `WEBHOOKS_PORTAL_SECRET`
//! shared by the process that mints (admin) and the one that checks (portal).

use serde_json::json;
use webhooks_tests::Stack;

const KEY: &str = "a-portal-token-key-of-at-least-32-characters";

#[tokio::test(flavor = "multi_thread")]
async fn the_portal_function_serves_the_portal_only_and_checks_tokens_with_the_configured_key() {
    let stack = Stack::start(|c| c.portal_secret = Some(KEY.into())).await;
    // The portal function: another router over the same configuration (another Lambda).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let portal = format!("http://{}", listener.local_addr().unwrap());
    let router = webhooks::ui::portal::standalone(stack.app.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();

    // A token minted by the admin API is one of the configured key.
    let (status, session) =
        stack.call(reqwest::Method::POST, "/v1/tenants/acme/portal-sessions", Some(json!({"ttl_seconds": 120}))).await;
    assert_eq!(status, 201, "{session}");
    let token = session["token"].as_str().unwrap();
    let claims = webhooks::ui::token::verify(KEY.as_bytes(), token, chrono::Utc::now()).unwrap();
    assert_eq!(claims.tenant_id, "acme");
    let ttl = (claims.expires_at - chrono::Utc::now()).num_seconds();
    assert!((100..=120).contains(&ttl), "{ttl}");

    // The portal function accepts it and sets the session cookie.
    let r = client.get(format!("{portal}/portal?token={token}")).send().await.unwrap();
    assert_eq!(r.status(), 303);
    let set_cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/portal"] {
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
    let foreign = webhooks::ui::token::sign(&[7u8; 32], "acme", chrono::Utc::now() + chrono::Duration::hours(1), b"n");
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
}
