//! The ops dashboard: `/dashboard`, every tenant, over the admin API.
//!
//! The pages call the admin API's JSON routes through an [`AdminApi`], never the store, so
//! the same pages run in two places: in the local runtime ([`InProcess`]: the admin router,
//! called with tower's `oneshot`) and in `webhooks-admin dashboard` on an operator's machine
//! (the CLI's SigV4-signed HTTP client against the deployed, IAM-authorized API).
//!
//! | route | what |
//! |---|---|
//! | `GET /dashboard?tenant=` | what needs attention across tenants (endpoints stopped, failing, with dead letters or held deliveries); a tenant's endpoints with their health |
//! | `GET /dashboard/deliveries?status=&endpoint_id=&tenant=&since=&until=` | deliveries, filtered |
//! | `GET /dashboard/deliveries/{id}` | a delivery's attempt timeline |
//! | `POST /dashboard/deliveries/{id}/replay` | replay; 303 back |
//! | `GET /dashboard/endpoints/{id}` | health, counts, 24 h chart, deliveries, actions |
//! | `POST /dashboard/endpoints/{id}/disable`, `/enable`, `/recover` | 303 back |
//!
//! Every POST carries a form token made from a per-process random key, so another site open
//! in the operator's browser cannot make the dashboard act (it listens on loopback with the
//! operator's credentials behind it).

use super::{chart, endpoint_badge, error_page, hourly, page, see_other, status_badge, text, time, timeline, token};
use async_trait::async_trait;
use axum::Router;
use axum::extract::rejection::{FormRejection, QueryRejection};
use axum::extract::{Form, Path, Query, State};
use axum::http::{Method, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use chrono::{DateTime, NaiveDateTime, Utc};
use futures::StreamExt as _;
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

mod home;
use home::*;

const SITE: (&str, &str) = ("Webhooks dashboard", "/dashboard");
/// Deliveries whose attempts the 24 h chart reads (the newest of the last 24 h).
pub const CHART_DELIVERIES: usize = 50;

/// The admin API as the dashboard calls it.
#[async_trait]
pub trait AdminApi: Send + Sync {
    /// Calls `method path_and_query` (e.g. `GET /v1/deliveries?status=exhausted`) with an
    /// optional JSON body; returns the HTTP status and the JSON answer (`null` when empty).
    ///
    /// # Errors
    /// A description when no answer came (connection, signing).
    async fn call(&self, method: Method, path_and_query: &str, body: Option<Value>) -> Result<(u16, Value), String>;
}

/// The admin API in the same process: requests go to the router with tower's `oneshot`.
#[derive(Clone)]
pub struct InProcess {
    router: Router,
}

impl InProcess {
    /// Over `router` (normally [`crate::http::api::admin_router`]).
    pub fn new(router: Router) -> Self {
        Self { router }
    }
}

#[async_trait]
impl AdminApi for InProcess {
    async fn call(&self, method: Method, path_and_query: &str, body: Option<Value>) -> Result<(u16, Value), String> {
        use tower::ServiceExt as _;
        let bytes = body.map(|b| b.to_string()).unwrap_or_default();
        let request = axum::http::Request::builder()
            .method(method)
            .uri(path_and_query)
            .header("content-type", "application/json")
            .body(axum::body::Body::from(bytes))
            .map_err(|e| e.to_string())?;
        let response = self.router.clone().oneshot(request).await.map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), crate::http::api::MAX_BODY_BYTES * 4)
            .await
            .map_err(|e| e.to_string())?;
        Ok((status, serde_json::from_slice(&body).unwrap_or(Value::Null)))
    }
}

#[derive(Clone)]
struct Dash {
    api: Arc<dyn AdminApi>,
    /// The form token of this process's pages.
    form: String,
    key: Vec<u8>,
}

/// The dashboard's routes under `/dashboard`, over `api`.
pub fn router(api: Arc<dyn AdminApi>) -> Router {
    let mut key = vec![0u8; 32];
    crate::clock::Random::from_os().fill(&mut key);
    let form = token::form_token(&key, "dashboard");
    Router::new()
        .route("/dashboard", get(home))
        .route("/dashboard/", get(home))
        .route("/dashboard/deliveries", get(deliveries))
        .route("/dashboard/deliveries/{id}", get(delivery))
        .route("/dashboard/deliveries/{id}/replay", post(replay))
        .route("/dashboard/endpoints/{id}", get(endpoint))
        .route("/dashboard/endpoints/{id}/disable", post(disable))
        .route("/dashboard/endpoints/{id}/enable", post(enable))
        .route("/dashboard/endpoints/{id}/recover", post(recover))
        .with_state(Dash { api, form, key })
        .layer(axum::middleware::map_response(no_framing))
}

/// The dashboard acts with the operator's credentials: no other page may frame it
/// (clickjacking).
async fn no_framing(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(axum::http::header::X_FRAME_OPTIONS, axum::http::HeaderValue::from_static("DENY"));
    h.insert(
        axum::http::header::CONTENT_SECURITY_POLICY,
        axum::http::HeaderValue::from_static("frame-ancestors 'none'"),
    );
    h.insert(axum::http::header::CACHE_CONTROL, axum::http::HeaderValue::from_static("no-store"));
    response
}

/// A failed page: the API's status and message, or 502 when the API gave no answer.
#[derive(Debug)]
struct Failure(StatusCode, String);

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let title = if self.0 == StatusCode::NOT_FOUND { "Not found" } else { "The admin API refused this" };
        error_page(self.0, SITE, title, &self.1)
    }
}

/// A status's count from an endpoint's stats answer, `~` before it when the answer names the
/// status `approximate` (reading stopped at a cap).
fn counted(stats: &Value, status: &str) -> String {
    let approximate = stats["approximate"].as_array().is_some_and(|a| a.iter().any(|s| s == status));
    let n = text(&stats["counts"][status]);
    if approximate { format!("~{n}") } else { n }
}

fn enc(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

impl Dash {
    async fn get(&self, path: &str) -> Result<Value, Failure> {
        self.send(Method::GET, path, None).await
    }

    async fn send(&self, method: Method, path: &str, body: Option<Value>) -> Result<Value, Failure> {
        match self.api.call(method, path, body).await {
            Ok((status, v)) if (200..300).contains(&status) => Ok(v),
            Ok((status, v)) => Err(Failure(
                StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
                format!(
                    "{}: {}",
                    v["error"]["code"].as_str().unwrap_or("error"),
                    v["error"]["message"].as_str().map(String::from).unwrap_or_else(|| v.to_string())
                ),
            )),
            Err(e) => Err(Failure(StatusCode::BAD_GATEWAY, format!("the admin API did not answer: {e}"))),
        }
    }

    fn checked(&self, csrf: &str) -> Result<(), Failure> {
        if token::form_token_ok(&self.key, "dashboard", csrf) {
            Ok(())
        } else {
            Err(Failure(StatusCode::FORBIDDEN, "this form did not come from this dashboard; reload the page".into()))
        }
    }

    fn action(&self, to: &str, label: &str, class: &str) -> Markup {
        html! { form.inline method="post" action=(to) {
            input type="hidden" name="csrf" value=(self.form);
            button type="submit" class=(class) { (label) }
        } }
    }
}

fn nav() -> Markup {
    html! {
        a href="/dashboard" { "Endpoints" }
        a href="/dashboard/deliveries?status=exhausted" { "Dead letters" }
        a href="/dashboard/deliveries?status=held" { "Held" }
    }
}

fn render(title: &str, body: Markup) -> Response {
    Html(page(title, SITE, nav(), "ops", body).into_string()).into_response()
}

fn rows(v: &Value) -> Vec<Value> {
    v["data"].as_array().cloned().unwrap_or_default()
}

/// The query of a page, or a 422 page naming the problem.
fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, Failure> {
    q.map(|Query(p)| p).map_err(|e| Failure(StatusCode::UNPROCESSABLE_ENTITY, e.body_text()))
}

fn table(rows: &[Value]) -> Markup {
    html! {
        @if rows.is_empty() { p.muted { "None." } }
        @else { div.scroll { table {
            thead { tr {
                th scope="col" { "Delivery" } th scope="col" { "Tenant" } th scope="col" { "Event type" }
                th scope="col" { "Endpoint" } th scope="col" { "Status" } th scope="col" { "Attempts" }
                th scope="col" { "Accepted" } th scope="col" { "Last change" }
            } }
            tbody { @for r in rows { tr {
                td { a href={"/dashboard/deliveries/" (text(&r["id"]))} { code { (text(&r["id"])) } } }
                td { a href={"/dashboard?tenant=" (enc(&text(&r["tenant_id"])))} { (text(&r["tenant_id"])) } }
                td { (text(&r["event_type"])) }
                td { a href={"/dashboard/endpoints/" (text(&r["endpoint_id"]))} { code { (text(&r["endpoint_id"])) } } }
                td { (status_badge(r["status"].as_str().unwrap_or("?"))) }
                td { (text(&r["attempt_count"])) }
                td { (time(&r["created_at"])) }
                td { (time(&r["updated_at"])) }
            } } }
        } } }
    }
}

#[derive(Deserialize, Default)]
struct ListParams {
    status: Option<String>,
    endpoint_id: Option<String>,
    tenant: Option<String>,
    since: Option<String>,
    until: Option<String>,
}

/// A time field of the filter form as RFC 3339: RFC 3339 as given, or a `datetime-local`
/// value (`2026-11-30T18:00`, read as UTC).
fn form_time(v: Option<&str>) -> Result<Option<String>, Failure> {
    let Some(v) = v.map(str::trim).filter(|v| !v.is_empty()) else { return Ok(None) };
    if let Ok(t) = DateTime::parse_from_rfc3339(v) {
        return Ok(Some(t.with_timezone(&Utc).to_rfc3339()));
    }
    for fmt in ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(v, fmt) {
            return Ok(Some(t.and_utc().to_rfc3339()));
        }
    }
    Err(Failure(StatusCode::UNPROCESSABLE_ENTITY, format!("{v:?} is not a time (2026-11-30T18:00, UTC)")))
}

fn some(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

async fn deliveries(State(d): State<Dash>, q: Result<Query<ListParams>, QueryRejection>) -> Result<Response, Failure> {
    let p = query(q)?;
    let since = form_time(some(&p.since))?;
    let until = form_time(some(&p.until))?;
    let status = some(&p.status);
    let tenant = some(&p.tenant);
    let mut query = String::new();
    if let Some(s) = status {
        query.push_str(&format!("&status={}", enc(s)));
    }
    if let Some(s) = &since {
        query.push_str(&format!("&since={}", enc(s)));
    }
    if let Some(u) = &until {
        query.push_str(&format!("&until={}", enc(u)));
    }
    // The API lists by endpoint, or by status exhausted/held across tenants: a tenant filter
    // without an endpoint reads each of the tenant's endpoints.
    let endpoints: Vec<String> = match (some(&p.endpoint_id), tenant) {
        (Some(e), _) => vec![e.to_string()],
        (None, Some(t)) => rows(&d.get(&format!("/v1/endpoints?tenant_id={}&limit=100", enc(t))).await?)
            .iter()
            .filter_map(|e| e["id"].as_str().map(String::from))
            .collect(),
        (None, None) => vec![],
    };
    let mut found = Vec::new();
    if endpoints.is_empty() && some(&p.endpoint_id).is_none() && tenant.is_none() {
        let status = status.unwrap_or("exhausted");
        found = rows(&d.get(&format!("/v1/deliveries?limit=100&status={}", enc(status))).await?);
        // The API takes no window without an endpoint (that listing is ordered by when each
        // delivery ended): the page's dead letters are filtered by acceptance time here.
        let at = |v: &Option<String>| v.as_deref().and_then(|t| DateTime::parse_from_rfc3339(t).ok());
        let (from, to) = (at(&since), at(&until));
        if from.is_some() || to.is_some() {
            found.retain(|r| {
                let accepted = r["created_at"].as_str().and_then(|t| DateTime::parse_from_rfc3339(t).ok());
                accepted.is_some_and(|a| from.is_none_or(|f| a >= f) && to.is_none_or(|u| a < u))
            });
        }
    } else {
        for e in &endpoints {
            found.extend(rows(&d.get(&format!("/v1/deliveries?limit=100&endpoint_id={}{query}", enc(e))).await?));
        }
    }
    if let Some(t) = tenant {
        found.retain(|r| r["tenant_id"] == t);
    }
    found.sort_by(|a, b| text(&b["created_at"]).cmp(&text(&a["created_at"])));
    let shown_status = status.unwrap_or(if endpoints.is_empty() { "exhausted" } else { "" });
    let local = |v: &Option<String>| v.as_deref().map(|s| s.get(..16).unwrap_or(s).to_string()).unwrap_or_default();
    let body = html! {
        h1 { "Deliveries" }
        form.card.filters method="get" action="/dashboard/deliveries" role="search" {
            div { label for="f-status" { "Status" }
                select #f-status name="status" {
                    @for s in ["", "scheduled", "sending", "delivered", "exhausted", "held"] {
                        option value=(s) selected[s == shown_status] { @if s.is_empty() { "any (needs an endpoint or tenant)" } @else { (s) } }
                    }
                } }
            div { label for="f-tenant" { "Tenant" } input #f-tenant type="text" name="tenant" value=(tenant.unwrap_or("")); }
            div { label for="f-endpoint" { "Endpoint id" } input #f-endpoint type="text" name="endpoint_id" value=(some(&p.endpoint_id).unwrap_or("")); }
            div { label for="f-since" { "Accepted from (UTC)" } input #f-since type="datetime-local" name="since" value=(local(&since)); }
            div { label for="f-until" { "until (UTC)" } input #f-until type="datetime-local" name="until" value=(local(&until)); }
            div { button.primary type="submit" { "Filter" } }
        }
        p.hint { (found.len()) " deliveries (at most 100 per endpoint, newest first; without an endpoint or tenant, of the 100 that ended last, filtered by when they were accepted)." }
        (table(&found))
    };
    Ok(render("Deliveries", body))
}

async fn delivery(State(d): State<Dash>, Path(id): Path<String>) -> Result<Response, Failure> {
    let v = d.get(&format!("/v1/deliveries/{}", enc(&id))).await?;
    let status = v["status"].as_str().unwrap_or("");
    let live = matches!(status, "scheduled" | "sending");
    let body = html! {
        h1 { "Delivery " code { (id) } }
        p { "Tenant " a href={"/dashboard?tenant=" (enc(&text(&v["tenant_id"])))} { (text(&v["tenant_id"])) }
            " · endpoint " a href={"/dashboard/endpoints/" (text(&v["endpoint_id"]))} { code { (text(&v["endpoint_id"])) } } }
        p { label style="display:inline;font-weight:400" { input #live-on type="checkbox" checked[live]; " Refresh every 2 seconds" } }
        section #live aria-live="polite" {
            @if matches!(status, "exhausted" | "held") { div { (d.action(&format!("/dashboard/deliveries/{}/replay", enc(&id)), "Replay", "primary")) } }
            (timeline(&v))
        }
    };
    Ok(render("Delivery", body))
}

#[derive(Deserialize)]
struct CsrfForm {
    csrf: String,
}

#[derive(Deserialize)]
struct RecoverForm {
    csrf: String,
    since: String,
    #[serde(default)]
    until: String,
}

fn csrf_of(form: Result<Form<CsrfForm>, FormRejection>) -> String {
    form.map(|Form(f)| f.csrf).unwrap_or_default()
}

async fn replay(
    State(d): State<Dash>,
    Path(id): Path<String>,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> Result<Response, Failure> {
    d.checked(&csrf_of(form))?;
    d.send(Method::POST, &format!("/v1/deliveries/{}/replay", enc(&id)), None).await?;
    Ok(see_other(&format!("/dashboard/deliveries/{}", enc(&id))))
}

#[derive(Deserialize, Default)]
struct JobParam {
    job: Option<String>,
}

async fn endpoint(
    State(d): State<Dash>,
    Path(id): Path<String>,
    q: Result<Query<JobParam>, QueryRejection>,
) -> Result<Response, Failure> {
    let q = query(q)?;
    let ep = d.get(&format!("/v1/endpoints/{}", enc(&id))).await?;
    // After enable or recover: the job started, and its progress so far.
    let job = match q.job.as_deref().filter(|j| !j.is_empty()) {
        Some(j) => d.get(&format!("/v1/jobs/{}", enc(j))).await.ok(),
        None => None,
    };
    let stats = d.get(&format!("/v1/endpoints/{}/stats", enc(&id))).await?;
    let now = Utc::now();
    let since = (now - chrono::Duration::hours(24)).to_rfc3339();
    let list = rows(&d.get(&format!("/v1/deliveries?limit=100&endpoint_id={}&since={}", enc(&id), enc(&since))).await?);
    // The chart needs each delivery's attempts: the newest CHART_DELIVERIES, 8 at a time.
    let ids: Vec<String> =
        list.iter().take(CHART_DELIVERIES).filter_map(|r| r["id"].as_str().map(String::from)).collect();
    let full: Vec<Value> = futures::stream::iter(ids.into_iter().map(|i| {
        let d = d.clone();
        async move { d.get(&format!("/v1/deliveries/{}", enc(&i))).await.ok() }
    }))
    .buffer_unordered(8)
    .filter_map(|r| async move { r })
    .collect()
    .await;
    let buckets = hourly(&full, now);
    let base = format!("/dashboard/endpoints/{}", enc(&id));
    let counts = stats["counts"].as_object().cloned().unwrap_or_default();
    let body = html! {
        h1 { "Endpoint " code { (id) } }
        @if let Some(j) = &job {
            p.flash role="status" { (text(&j["kind"])) " job " code { (text(&j["id"])) } " is " (text(&j["status"]))
                ": " (text(&j["processed"])) " deliveries so far (reload to follow it)." }
        }
        dl.facts {
            dt { "Tenant" } dd { a href={"/dashboard?tenant=" (enc(&text(&ep["tenant_id"])))} { (text(&ep["tenant_id"])) } }
            dt { "URL" } dd { code { (text(&ep["url"])) } }
            dt { "Health" } dd { (endpoint_badge(&ep)) @if ep["disabled"].is_object() { " since " (time(&ep["disabled"]["at"])) } }
            dt { "Failures in a row" } dd { (text(&ep["consecutive_failures"])) " (pauses at " (text(&ep["circuit_breaker_threshold"])) ")" }
            dt { "Last success" } dd { (time(&stats["last_success_at"])) }
            dt { "Retry policy" } dd { (text(&ep["retry_policy"]["preset"])) }
            dt { "Headers" } dd { (header_names(&ep)) }
            dt { "Authentication" } dd { @if ep["auth"].is_object() { (text(&ep["auth"]["type"])) } @else { "signature only" } }
            dt { "Payload filter" } dd { @if ep["filter"].is_object() { code { (ep["filter"].to_string()) } } @else { "none" } }
            dt { "Deliveries" } dd { @for (i, k) in counts.keys().enumerate() { @if i > 0 { ", " } (k) " " (counted(&stats, k)) } }
        }
        div {
            @if ep["enabled"].as_bool().unwrap_or(false) { (d.action(&format!("{base}/disable"), "Disable", "danger")) }
            @else { (d.action(&format!("{base}/enable"), "Enable", "primary")) }
        }
        h2 { "Attempts, last 24 hours" }
        (chart("attempts", &buckets, now))
        p.hint { "From the newest " (full.len()) " deliveries accepted in the last 24 hours." }
        form.card method="post" action={(base) "/recover"} {
            h2 style="margin-top:0" { "Recover a window" }
            p.hint { "Replays every dead letter of this endpoint accepted in the window, as a background job." }
            input type="hidden" name="csrf" value=(d.form);
            label for="r-since" { "Accepted from (UTC)" } input #r-since type="datetime-local" name="since" required;
            label for="r-until" { "until (UTC, empty: now)" } input #r-until type="datetime-local" name="until";
            div { button.primary type="submit" { "Recover" } }
        }
        h2 { "Deliveries, last 24 hours" }
        (table(&list))
        p { a href={"/dashboard/deliveries?endpoint_id=" (enc(&id))} { "Filter this endpoint's deliveries" } }
    };
    Ok(render("Endpoint", body))
}

async fn endpoint_post(d: &Dash, id: &str, what: &str, csrf: &str, body: Option<Value>) -> Result<Response, Failure> {
    d.checked(csrf)?;
    let v = d.send(Method::POST, &format!("/v1/endpoints/{}/{what}", enc(id)), body).await?;
    let mut to = format!("/dashboard/endpoints/{}", enc(id));
    let job = v["release_job"]["id"].as_str().or(v["id"].as_str()).filter(|j| j.starts_with("job_"));
    if let Some(job) = job {
        to.push_str(&format!("?job={}", enc(job)));
    }
    Ok(see_other(&to))
}

async fn disable(
    State(d): State<Dash>,
    Path(id): Path<String>,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> Result<Response, Failure> {
    endpoint_post(&d, &id, "disable", &csrf_of(form), None).await
}

async fn enable(
    State(d): State<Dash>,
    Path(id): Path<String>,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> Result<Response, Failure> {
    endpoint_post(&d, &id, "enable", &csrf_of(form), None).await
}

async fn recover(
    State(d): State<Dash>,
    Path(id): Path<String>,
    form: Result<Form<RecoverForm>, FormRejection>,
) -> Result<Response, Failure> {
    let Form(f) = form.map_err(|e| Failure(StatusCode::UNPROCESSABLE_ENTITY, e.body_text()))?;
    let since = form_time(Some(&f.since))?
        .ok_or_else(|| Failure(StatusCode::UNPROCESSABLE_ENTITY, "since: is required".into()))?;
    let mut body = json!({"since": since});
    if let Some(u) = form_time(Some(&f.until))? {
        body["until"] = json!(u);
    }
    endpoint_post(&d, &id, "recover", &f.csrf, Some(body)).await
}

/// The endpoint's custom header names from its API view, secret ones marked, or "none".
fn header_names(ep: &Value) -> String {
    let shown = ep["headers"].as_object().map(|h| h.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
    let secret = ep["secret_headers"]
        .as_array()
        .map(|h| h.iter().filter_map(Value::as_str).map(|n| format!("{n} (secret)")).collect::<Vec<_>>())
        .unwrap_or_default();
    let all = [shown, secret].concat();
    if all.is_empty() { "none".into() } else { all.join(", ") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_times_read_as_utc() {
        assert_eq!(form_time(Some("2026-11-30T18:00")).ok().flatten().unwrap(), "2026-11-30T18:00:00+00:00");
        assert_eq!(form_time(Some("2026-11-30T18:00:00Z")).ok().flatten().unwrap(), "2026-11-30T18:00:00+00:00");
        assert!(form_time(Some("")).unwrap().is_none());
        assert!(form_time(Some("yesterday")).is_err());
    }
}
