//! The tenant portal: `/portal`, one tenant's page, authenticated by a portal token
//! ([`super::token`]) instead of IAM.
//!
//! | route | what |
//! |---|---|
//! | `GET /portal?token=` | checks the token, sets it as the session cookie (`HttpOnly; SameSite=Lax; Path=/portal`), 303 to `/portal`; while a session of another tenant is open, 409: a page that asks first |
//! | `POST /portal/session` | `token`, with the open session's form token: replaces that session by the token's (the page above's button); 303 to `/portal` |
//! | `GET /portal` | the tenant's endpoints, a create form, recent deliveries |
//! | `POST /portal/endpoints` | create (`url`, `event_types`, `retry_preset`); the page shows the secret once |
//! | `GET /portal/endpoints/{id}` | the endpoint, its edit form, actions and deliveries |
//! | `POST /portal/endpoints/{id}` | edit `url` and `event_types`; 303 back |
//! | `POST /portal/endpoints/{id}/disable`, `/enable` | 303 back |
//! | `POST /portal/endpoints/{id}/rotate-secret` | the page shows the new secret once |
//! | `POST /portal/endpoints/{id}/test` | one signed test POST to the endpoint, now; the page shows its answer |
//! | `POST /portal/endpoints/{id}/options` | its custom headers, secret headers and receiver authentication; 303 back |
//! | `POST /portal/endpoints/{id}/event-types` | subscribe to the catalog types picked (none: every type); 303 back |
//! | `POST /portal/endpoints/{id}/send-example` | a catalog type's example, signed, POSTed now; the page shows its answer |
//! | `POST /portal/endpoints/{id}/filter` | `op=try`: whether a payload matches a filter (nothing saved); `op=save`: sets the payload filter, 303 back |
//! | `GET /portal/event-types` | the event-type catalog: descriptions, the schemas' fields, examples |
//! | `GET /portal/deliveries/{id}` | a delivery's attempt timeline (refreshed while in flight) |
//! | `POST /portal/deliveries/{id}/resend` | replays an exhausted or held delivery; 303 back |
//!
//! Every page says who may frame it: `frame-ancestors` from `WEBHOOKS_PORTAL_FRAME_ANCESTORS`
//! (default none: `'none'` and `X-Frame-Options: DENY`).
//!
//! Every handler takes the tenant from the verified session token only, and every endpoint or
//! delivery id it is given must belong to that tenant: another tenant's id answers the same
//! 404 page as a missing one. Every POST carries the session's form token (CSRF). A missing,
//! tampered or expired token gets a 401 page that shows no data; a token key that cannot be
//! read from Secrets Manager ([`crate::token_keys`]), a 503 page.

use super::token::{self, Claims, TokenError};
use super::{endpoint_badge, error_page, page, see_other, status_badge, text, time, timeline};
use crate::App;
use crate::domain::ids::EndpointId;
use crate::domain::model::{Delivery, Endpoint};
use crate::error::ServiceError;
use crate::service::{deliveries, endpoints};
use crate::store::DeliveryQuery;
use crate::token_keys::KeySet;
use axum::Router;
use axum::extract::rejection::{FormRejection, QueryRejection};
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::{Map, Value, json};

mod catalog_pages;
mod endpoint_pages;
use endpoint_pages::*;

/// The session cookie's name.
pub const COOKIE: &str = "webhooks_portal";
const SITE: (&str, &str) = ("Webhooks portal", "/portal");
/// Endpoints shown (and whose deliveries are gathered) on the portal's home page.
const MAX_ENDPOINTS: usize = 100;

/// The portal's routes under `/portal`.
pub fn router(app: App) -> Router {
    Router::new()
        .route("/portal", get(home))
        .route("/portal/", get(home))
        .route("/portal/session", post(switch_session))
        .route("/portal/endpoints", post(create))
        .route("/portal/endpoints/{id}", get(endpoint_page).post(edit))
        .route("/portal/endpoints/{id}/disable", post(disable))
        .route("/portal/endpoints/{id}/enable", post(enable))
        .route("/portal/endpoints/{id}/rotate-secret", post(rotate))
        .route("/portal/endpoints/{id}/test", post(test_event))
        .route("/portal/endpoints/{id}/options", post(save_endpoint_options))
        .route("/portal/endpoints/{id}/event-types", post(catalog_pages::pick_event_types))
        .route("/portal/endpoints/{id}/send-example", post(catalog_pages::send_example_page))
        .route("/portal/endpoints/{id}/filter", post(catalog_pages::try_or_save_filter))
        .route("/portal/event-types", get(catalog_pages::catalog_page))
        .route("/portal/deliveries/{id}", get(delivery_page))
        .route("/portal/deliveries/{id}/resend", post(resend))
        .layer(axum::middleware::map_response_with_state(app.clone(), framing))
        .with_state(app)
}

/// Who may frame the portal's pages (clickjacking): `Content-Security-Policy:
/// frame-ancestors` with `WEBHOOKS_PORTAL_FRAME_ANCESTORS`'s origins, or, by default (none
/// set), `frame-ancestors 'none'` and `X-Frame-Options: DENY` (for browsers without CSP; it
/// cannot name a list, so it is left out when origins are allowed).
async fn framing(State(app): State<App>, mut response: Response) -> Response {
    let allowed = &app.config.portal_frame_ancestors;
    let policy = if allowed.is_empty() { "'none'".to_string() } else { allowed.join(" ") };
    let h = response.headers_mut();
    if let Ok(v) = format!("frame-ancestors {policy}").parse() {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    if allowed.is_empty() {
        h.insert(header::X_FRAME_OPTIONS, axum::http::HeaderValue::from_static("DENY"));
    }
    response
}

/// The portal alone, with an HTML 404 page for any other path: what the portal function
/// serves on AWS.
pub fn standalone(app: App) -> Router {
    router(app).fallback(|| async {
        error_page(StatusCode::NOT_FOUND, SITE, "Not found", "There is no such page in the portal.")
    })
}

/// A verified session.
struct Session {
    claims: Claims,
    token: String,
    /// The form token every POST must carry.
    form: String,
    /// The token keys in force when the request came.
    keys: KeySet,
}

fn unauthorized(e: TokenError) -> Response {
    let title = match e {
        TokenError::Invalid => "This link is not valid",
        TokenError::Expired => "This link has expired",
    };
    error_page(
        StatusCode::UNAUTHORIZED,
        SITE,
        title,
        &format!("{e}. Portal links are short-lived: open the portal again from your provider's dashboard."),
    )
}

fn no_session() -> Response {
    error_page(
        StatusCode::UNAUTHORIZED,
        SITE,
        "No portal session",
        "Open the portal from the link your provider gave you (it carries a short-lived token).",
    )
}

/// The page of a refused request, with a way back.
fn problem(e: &ServiceError) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let title = match e {
        ServiceError::NotFound(_) => "Not found",
        ServiceError::Validation(_)
        | ServiceError::DestinationNotAllowed(_)
        | ServiceError::InvalidJson(_)
        | ServiceError::UnknownEventType(_) => "Please check the form",
        ServiceError::Conflict(_) => "Not possible right now",
        _ => "Something went wrong",
    };
    if status.is_server_error() {
        tracing::error!(error = %e, "portal request failed");
    }
    let message = match e {
        // The same words for a missing id and another tenant's id.
        ServiceError::NotFound(_) => "There is no such endpoint or delivery in your account.".to_string(),
        ServiceError::Unavailable(_) | ServiceError::Internal(_) => "Please try again in a moment.".to_string(),
        other => other.to_string(),
    };
    let body = html! {
        h1 { (title) }
        p.flash.bad role="alert" { (message) }
        p { a href="/portal" { "Back to your endpoints" } }
    };
    (status, Html(page(title, SITE, nav(), "", body).into_string())).into_response()
}

fn nav() -> Markup {
    html! { a href="/portal" { "Endpoints" } a href="/portal/event-types" { "Event types" } }
}

fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(cookie::Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == COOKIE)
        .map(|c| c.value().to_string())
}

/// The token keys in force, or the 503 page when their secret cannot be read.
async fn keys_in_force(app: &App) -> Result<KeySet, Box<Response>> {
    app.portal_keys.in_force(app.clock.now()).await.map_err(|e| Box::new(problem(&e)))
}

/// The verified session of a request, or the page that refuses it (boxed: a response is large).
async fn session(app: &App, headers: &HeaderMap) -> Result<Session, Box<Response>> {
    let token = cookie_token(headers).ok_or_else(|| Box::new(no_session()))?;
    let keys = keys_in_force(app).await?;
    let claims = token::verify_with(&keys, &token, app.clock.now()).map_err(|e| Box::new(unauthorized(e)))?;
    let form = token::form_token(keys.signing(), &token);
    Ok(Session { claims, token, form, keys })
}

/// A session whose POST carried its form token (under any key in force), or the page that
/// refuses it.
async fn posted(app: &App, headers: &HeaderMap, csrf: &str) -> Result<Session, Box<Response>> {
    let s = session(app, headers).await?;
    if token::form_token_ok_with(&s.keys, &s.token, csrf) {
        Ok(s)
    } else {
        Err(Box::new(error_page(
            StatusCode::FORBIDDEN,
            SITE,
            "Form expired",
            "This form was not sent from your current portal session. Go back, reload the page and try again.",
        )))
    }
}

fn render(s: &Session, title: &str, body: Markup) -> Response {
    let who = format!("{} · session ends {}", s.claims.tenant_id, s.claims.expires_at.format("%H:%M UTC"));
    let mut r = Html(page(title, SITE, nav(), &who, body).into_string()).into_response();
    r.headers_mut().insert(header::CACHE_CONTROL, axum::http::HeaderValue::from_static("no-store"));
    r
}

fn csrf_field(s: &Session) -> Markup {
    html! { input type="hidden" name="csrf" value=(s.form); }
}

/// A button that POSTs to `action` with the session's form token.
fn action(s: &Session, to: &str, label: &str, class: &str) -> Markup {
    html! { form.inline method="post" action=(to) { (csrf_field(s)) button type="submit" class=(class) { (label) } } }
}

/// The endpoint `id` when it is the session tenant's; otherwise (missing, or another
/// tenant's) [`ServiceError::NotFound`].
async fn owned_endpoint(app: &App, s: &Session, id: &str) -> Result<Endpoint, ServiceError> {
    let not_found = || ServiceError::NotFound(format!("endpoint {id}"));
    let id = EndpointId::lookup(id).map_err(|_| not_found())?;
    let ep = endpoints::find_endpoint(app, &id).await?;
    if ep.tenant_id == s.claims.tenant_id { Ok(ep) } else { Err(not_found()) }
}

/// The delivery `id` when it is the session tenant's; otherwise [`ServiceError::NotFound`].
async fn owned_delivery(app: &App, s: &Session, id: &str) -> Result<Delivery, ServiceError> {
    let not_found = || ServiceError::NotFound(format!("delivery {id}"));
    let id = crate::domain::ids::DeliveryId::lookup(id).map_err(|_| not_found())?;
    match app.store.get_delivery(&id).await? {
        Some(d) if d.tenant_id == s.claims.tenant_id => Ok(d),
        _ => Err(not_found()),
    }
}

fn json_of<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

#[derive(Deserialize)]
struct TokenParam {
    token: Option<String>,
}

async fn home(
    State(app): State<App>,
    query: Result<Query<TokenParam>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    let Ok(Query(q)) = query else { return unauthorized(TokenError::Invalid) };
    if let Some(t) = q.token {
        let keys = match keys_in_force(&app).await {
            Ok(k) => k,
            Err(r) => return *r,
        };
        let claims = match token::verify_with(&keys, &t, app.clock.now()) {
            Ok(claims) => claims,
            Err(e) => return unauthorized(e),
        };
        // A session of another tenant is open in this browser: a link (perhaps another
        // site's, with a token of the sender's own tenant) does not silently replace it.
        if let Ok(open) = session(&app, &headers).await
            && open.claims.tenant_id != claims.tenant_id
        {
            return switch_page(&open, &t, &claims);
        }
        return start_session(&app, t, &claims);
    }
    let s = match session(&app, &headers).await {
        Ok(s) => s,
        Err(r) => return *r,
    };
    match home_page(&app, &s).await {
        Ok(r) => r,
        Err(e) => problem(&e),
    }
}

/// Sets `token` as the session cookie and redirects to the portal's home page. The cookie is
/// `SameSite=Lax`, not `Strict`: a portal link opened from another site (a cross-site
/// navigation) then carries the session already open, so [`home`] can see it and ask before
/// replacing it; a cross-site POST still carries no cookie, and every POST needs the
/// session's form token besides.
fn start_session(app: &App, token: String, claims: &Claims) -> Response {
    let max_age = (claims.expires_at - app.clock.now()).num_seconds().max(0);
    let c = cookie::Cookie::build((COOKIE, token))
        .http_only(true)
        .same_site(cookie::SameSite::Lax)
        .secure(app.config.require_https)
        .path("/portal")
        .max_age(cookie::time::Duration::seconds(max_age))
        .build();
    let mut r = see_other("/portal");
    if let Ok(v) = c.to_string().parse() {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// The page a portal link for another tenant gets while a session is open (409): it names
/// both tenants and replaces the session only when its button is pressed (a POST with the
/// open session's form token, which another site cannot make).
fn switch_page(open: &Session, token: &str, claims: &Claims) -> Response {
    let body = html! {
        h1 { "Another account's portal is open" }
        p.flash.bad role="alert" {
            "You are signed in to the portal of " strong { (open.claims.tenant_id) } ". This link opens the portal of "
            strong { (claims.tenant_id) } " instead. If you did not expect that, stay where you are."
        }
        form.inline method="post" action="/portal/session" {
            (csrf_field(open))
            input type="hidden" name="token" value=(token);
            button type="submit" { "Sign out of " (open.claims.tenant_id) " and open " (claims.tenant_id) }
        }
        p { a href="/portal" { "Stay in " (open.claims.tenant_id) } }
    };
    let mut r = render(open, "Switch portal account?", body);
    *r.status_mut() = StatusCode::CONFLICT;
    r
}

#[derive(Deserialize)]
struct SwitchForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    token: String,
}

/// `POST /portal/session`: the switch page's button. The open session and its form token are
/// checked, then the new token; the session becomes the new token's.
async fn switch_session(
    State(app): State<App>,
    headers: HeaderMap,
    form: Result<Form<SwitchForm>, FormRejection>,
) -> Response {
    let Ok(Form(f)) = form else { return unauthorized(TokenError::Invalid) };
    let s = match posted(&app, &headers, &f.csrf).await {
        Ok(s) => s,
        Err(r) => return *r,
    };
    match token::verify_with(&s.keys, &f.token, app.clock.now()) {
        Ok(claims) => start_session(&app, f.token, &claims),
        Err(e) => unauthorized(e),
    }
}

async fn home_page(app: &App, s: &Session) -> Result<Response, ServiceError> {
    let endpoints = endpoints::list_endpoints(app, &s.claims.tenant_id, MAX_ENDPOINTS, None).await?.data;
    let mut recent = Vec::new();
    for ep in &endpoints {
        let q = DeliveryQuery { endpoint_id: Some(ep.id.clone()), limit: 10, ..DeliveryQuery::default() };
        recent.extend(deliveries::list_deliveries(app, q).await?.data);
    }
    recent.sort_by_key(|d| std::cmp::Reverse(d.created_at));
    recent.truncate(25);
    let body = html! {
        h1 { "Your webhook endpoints" }
        @if endpoints.is_empty() { p { "No endpoint yet: add one below to start receiving webhooks. Until then, events sent for you are not stored." } }
        @else {
            div.scroll { table {
                caption.muted { (endpoints.len()) @if endpoints.len() == 1 { " endpoint" } @else { " endpoints" } }
                thead { tr { th scope="col" { "URL" } th scope="col" { "Events" } th scope="col" { "State" } th scope="col" { "Failures in a row" } } }
                tbody { @for ep in &endpoints { @let v = json_of(ep); tr {
                    td { a href={"/portal/endpoints/" (ep.id)} { code { (ep.url) } } }
                    td { (event_types(&ep.event_types)) }
                    td { (endpoint_badge(&v)) }
                    td { (ep.consecutive_failures) }
                } } }
            } }
        }
        (create_form(s))
        h2 { "Recent deliveries" }
        (deliveries_table(&recent.iter().map(json_of).collect::<Vec<_>>(), true))
    };
    Ok(render(s, "Endpoints", body))
}

fn event_types(types: &Option<Vec<String>>) -> String {
    match types {
        None => "all events".into(),
        Some(t) => t.join(", "),
    }
}

fn create_form(s: &Session) -> Markup {
    html! {
        form.card method="post" action="/portal/endpoints" {
            h2 style="margin-top:0" { "Add an endpoint" }
            (csrf_field(s))
            label for="url" { "Endpoint URL" }
            input #url type="url" name="url" required placeholder="https://example.com/webhooks" autocomplete="url";
            label for="event_types" { "Event types" }
            input #event_types type="text" name="event_types" placeholder="order.paid, invoice.*" aria-describedby="event_types_hint";
            p.hint #event_types_hint { "Comma separated; a name ending in .* takes a prefix. Empty: every event." }
            label for="retry_preset" { "Retry schedule" }
            select #retry_preset name="retry_preset" {
                option value="standard" { "standard: 8 attempts over about 36 hours" }
                option value="svix" { "svix: 8 attempts over about 28 hours" }
                option value="frappe" { "frappe: 4 attempts over about 2.5 hours" }
                option value="rate_limit_only" { "rate_limit_only: retry 429 only" }
            }
            div { button.primary type="submit" { "Add endpoint" } }
        }
    }
}

fn deliveries_table(rows: &[Value], with_endpoint: bool) -> Markup {
    html! {
        @if rows.is_empty() { p.muted { "No delivery yet." } }
        @else { div.scroll { table {
            thead { tr {
                th scope="col" { "Delivery" } th scope="col" { "Event type" }
                @if with_endpoint { th scope="col" { "Endpoint" } }
                th scope="col" { "Status" } th scope="col" { "Attempts" } th scope="col" { "Accepted" }
            } }
            tbody { @for d in rows { tr {
                td { a href={"/portal/deliveries/" (text(&d["id"]))} { code { (text(&d["id"])) } } }
                td { (text(&d["event_type"])) }
                @if with_endpoint { td { a href={"/portal/endpoints/" (text(&d["endpoint_id"]))} { code { (text(&d["endpoint_id"])) } } } }
                td { (status_badge(d["status"].as_str().unwrap_or("?"))) }
                td { (text(&d["attempt_count"])) }
                td { (time(&d["created_at"])) }
            } } }
        } } }
    }
}

async fn delivery_page(State(app): State<App>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let s = match session(&app, &headers).await {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let d = match owned_delivery(&app, &s, &id).await {
        Ok(d) => d,
        Err(e) => return problem(&e),
    };
    let view = json_of(&deliveries::DeliveryView::of(d.clone(), &app.config));
    let live = matches!(
        d.status,
        crate::domain::model::DeliveryStatus::Scheduled | crate::domain::model::DeliveryStatus::Sending
    );
    let resendable = matches!(
        d.status,
        crate::domain::model::DeliveryStatus::Exhausted | crate::domain::model::DeliveryStatus::Held
    );
    let body = html! {
        h1 { "Delivery " code { (d.id) } }
        p { "To endpoint " a href={"/portal/endpoints/" (d.endpoint_id)} { code { (d.endpoint_id) } } }
        p { label style="display:inline;font-weight:400" { input #live-on type="checkbox" checked[live]; " Refresh every 2 seconds" } }
        section #live aria-live="polite" {
            div {
                @if resendable { (action(&s, &format!("/portal/deliveries/{}/resend", d.id), "Resend", "primary")) }
                @else { p.hint { "Resend is offered once a delivery has failed for good (or is held)." } }
            }
            (timeline(&view))
        }
    };
    render(&s, "Delivery", body)
}

async fn resend(
    State(app): State<App>,
    Path(id): Path<String>,
    headers: HeaderMap,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> Response {
    let s = match posted(&app, &headers, &csrf_of(form)).await {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let result = async {
        let d = owned_delivery(&app, &s, &id).await?;
        deliveries::replay(&app, &d.id).await
    }
    .await;
    match result {
        Ok(d) => see_other(&format!("/portal/deliveries/{}", d.id)),
        Err(e) => problem(&e),
    }
}
