//! The portal's endpoint pages: create, the endpoint's page (settings, secret, its newest
//! deliveries), edit, disable, enable, rotate the secret, and send a test event.

use super::*;
use crate::service::test_sends::{self, TEST_EVENT_TYPE};

#[derive(Deserialize)]
pub(super) struct EndpointForm {
    csrf: String,
    url: String,
    #[serde(default)]
    event_types: String,
    retry_preset: Option<String>,
}

/// `"order.paid, invoice.*"` as the API's `event_types`: a list, or null (every type) when empty.
pub(super) fn parse_types(field: &str) -> Value {
    let types: Vec<&str> = field.split([',', ' ', '\n']).map(str::trim).filter(|t| !t.is_empty()).collect();
    if types.is_empty() { Value::Null } else { json!(types) }
}

pub(super) fn form_problem(e: FormRejection) -> Response {
    problem(&ServiceError::Validation(format!("the form could not be read: {}", e.body_text())))
}

pub(super) async fn create(
    State(app): State<App>,
    headers: HeaderMap,
    form: Result<Form<EndpointForm>, FormRejection>,
) -> Response {
    let Form(f) = match form {
        Ok(f) => f,
        Err(e) => return form_problem(e),
    };
    let s = match posted(&app, &headers, &f.csrf).await {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let preset = f.retry_preset.as_deref().unwrap_or("standard");
    if !["standard", "svix", "frappe", "rate_limit_only"].contains(&preset) {
        return problem(&ServiceError::Validation(format!("retry schedule: {preset:?} is not one of the choices")));
    }
    let mut body = Map::new();
    body.insert("tenant_id".into(), json!(s.claims.tenant_id));
    body.insert("url".into(), json!(f.url.trim()));
    body.insert("retry_policy".into(), json!({"preset": preset}));
    if let Value::Array(t) = parse_types(&f.event_types) {
        body.insert("event_types".into(), Value::Array(t));
    }
    match endpoints::create_endpoint(&app, &body).await {
        Ok(ep) => {
            let body = html! {
                h1 { "Endpoint added" }
                p.flash role="status" { "Your endpoint " code { (ep.url) } " is ready." }
                (secret_box(ep.secret.as_deref().unwrap_or("")))
                p { a href={"/portal/endpoints/" (ep.id)} { "Open the endpoint" } " · " a href="/portal" { "All endpoints" } }
            };
            render(&s, "Endpoint added", body)
        }
        Err(e) => problem(&e),
    }
}

pub(super) fn secret_box(secret: &str) -> Markup {
    html! {
        section.card aria-labelledby="secret-h" {
            h2 #secret-h style="margin-top:0" { "Signing secret (shown once)" }
            p { "Copy it now: it verifies the " code { "webhook-signature" } " header of every request we send. "
                "It will not be shown again; rotate it to get a new one." }
            code.secret #secret { (secret) }
        }
    }
}

pub(super) async fn endpoint_page(State(app): State<App>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let s = match session(&app, &headers).await {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let result = async {
        let mut ep = owned_endpoint(&app, &s, &id).await?;
        ep.consecutive_failures = endpoints::failures_in_a_row(&app, &ep).await;
        let q = DeliveryQuery { endpoint_id: Some(ep.id.clone()), limit: 50, ..DeliveryQuery::default() };
        let deliveries = deliveries::list_deliveries(&app, q).await?.data;
        let catalog = super::catalog_pages::catalog(&app).await?;
        let rows = deliveries.iter().map(json_of).collect::<Vec<_>>();
        Ok::<_, ServiceError>(endpoint_body(&s, &ep, &rows, &app.config.egress_ips, &catalog))
    }
    .await;
    match result {
        Ok(body) => render(&s, "Endpoint", body),
        Err(e) => problem(&e),
    }
}

pub(super) fn endpoint_body(
    s: &Session,
    ep: &Endpoint,
    deliveries: &[Value],
    egress_ips: &[String],
    catalog: &[crate::domain::event_type::EventType],
) -> Markup {
    let v = json_of(&endpoints::EndpointView::of(ep.clone(), false));
    let base = format!("/portal/endpoints/{}", ep.id);
    let types = ep.event_types.as_ref().map(|t| t.join(", ")).unwrap_or_default();
    html! {
        h1 { "Endpoint" }
        dl.facts {
            dt { "URL" } dd { code { (ep.url) } }
            dt { "Id" } dd { code { (ep.id) } }
            dt { "State" } dd { (endpoint_badge(&v)) }
            dt { "Events" } dd { (event_types(&ep.event_types)) }
            dt { "Retry schedule" } dd { (ep.retry_policy.preset) }
            dt { "Failures in a row" } dd { (ep.consecutive_failures) }
            @if let Some(until) = ep.previous_secret_expires_at { dt { "Previous secret" } dd { "also signs until " (until.format("%Y-%m-%d %H:%M UTC")) } }
            dt { "Headers" } dd { (header_names(ep)) }
            dt { "Authentication" } dd { (auth_summary(ep)) }
        }
        div {
            @if ep.enabled { (action(s, &format!("{base}/disable"), "Disable", "danger")) }
            @else { (action(s, &format!("{base}/enable"), "Enable", "primary")) }
            (action(s, &format!("{base}/rotate-secret"), "Rotate secret", ""))
            (action(s, &format!("{base}/test"), "Send a test event", ""))
        }
        form.card method="post" action=(base) {
            h2 style="margin-top:0" { "Edit" }
            (csrf_field(s))
            label for="url" { "Endpoint URL" }
            input #url type="url" name="url" required value=(ep.url);
            label for="event_types" { "Event types" }
            input #event_types type="text" name="event_types" value=(types) aria-describedby="event_types_hint";
            p.hint #event_types_hint { "Comma separated; a name ending in .* takes a prefix. Empty: every event." }
            div { button.primary type="submit" { "Save" } }
        }
        (super::catalog_pages::endpoint_sections(s, ep, &base, catalog))
        (options_form(s, ep, &base, egress_ips))
        h2 { "Deliveries" }
        (deliveries_table(deliveries, false))
    }
}

/// The custom header names, secret ones marked, or "none".
fn header_names(ep: &Endpoint) -> String {
    let names: Vec<String> =
        ep.headers.keys().cloned().chain(ep.secret_headers.keys().map(|n| format!("{n} (secret)"))).collect();
    if names.is_empty() { "none".into() } else { names.join(", ") }
}

/// The auth type and what is not a credential, or "signature only".
fn auth_summary(ep: &Endpoint) -> String {
    use crate::domain::endpoint_options::ReceiverAuth;
    match &ep.auth {
        None => "signature only".into(),
        Some(ReceiverAuth::Bearer { .. }) => "bearer token".into(),
        Some(ReceiverAuth::Basic { username, .. }) => format!("basic, user {username}"),
        Some(ReceiverAuth::OAuth2ClientCredentials { token_url, client_id, .. }) => {
            format!(
                "OAuth 2.0 client credentials, client {client_id} at {}",
                crate::sender::destination::redact_url(token_url)
            )
        }
    }
}

/// The form for `headers`, `secret_headers` and `auth` (credentials write-only: the form
/// never holds them, and leaving them out keeps what is set).
fn options_form(s: &Session, ep: &Endpoint, base: &str, egress_ips: &[String]) -> Markup {
    let lines: String = ep.headers.iter().map(|(n, v)| format!("{n}: {v}\n")).collect();
    let secret_names = ep.secret_headers.keys().cloned().collect::<Vec<_>>().join(", ");
    let current = ep.auth.as_ref().map(|a| a.kind());
    html! {
        form.card method="post" action={(base) "/options"} {
            h2 style="margin-top:0" { "Headers and authentication" }
            @if !egress_ips.is_empty() {
                p #egress_ips { "Requests to your endpoint come from " strong { (egress_ips.join(", ")) } ": allow-list these addresses." }
            }
            (csrf_field(s))
            label for="headers" { "Custom headers" }
            textarea #headers name="headers" rows="3" aria-describedby="headers_hint" { (lines) }
            p.hint #headers_hint { "One " code { "Name: value" } " per line, sent with every request. Empty: none." }
            label for="secret_headers" { "Secret headers" }
            textarea #secret_headers name="secret_headers" rows="2" placeholder="X-Api-Key: ..." aria-describedby="secret_headers_hint" {}
            p.hint #secret_headers_hint {
                "Write-only: their values are never shown again. "
                @if secret_names.is_empty() { "None set." } @else { "Set now: " (secret_names) ". Leave empty to keep them." }
            }
            label { input type="checkbox" name="clear_secret_headers" value="on"; " Remove the secret headers" }
            label for="auth_type" { "Authentication" }
            select #auth_type name="auth_type" aria-describedby="auth_hint" {
                @if let Some(kind) = current { option value="keep" selected { "Keep (" (kind) ")" } }
                option value="none" selected[current.is_none()] { "Signature only" }
                option value="bearer" { "Bearer token" }
                option value="basic" { "Basic (user name and password)" }
                option value="oauth2_client_credentials" { "OAuth 2.0 client credentials" }
            }
            p.hint #auth_hint { "Credentials are write-only. Bearer: the token. Basic: user name and password. "
                "OAuth 2.0: token URL, client id and secret, scope and audience if your server wants them." }
            @for (name, label, kind) in [("auth_token", "Token", "password"), ("auth_username", "User name", "text"),
                ("auth_password", "Password", "password"), ("auth_token_url", "Token URL", "url"),
                ("auth_client_id", "Client id", "text"), ("auth_client_secret", "Client secret", "password"),
                ("auth_scope", "Scope", "text"), ("auth_audience", "Audience", "text")] {
                label for=(name) { (label) }
                input id=(name) name=(name) type=(kind) autocomplete="off";
            }
            div { button.primary type="submit" { "Save headers and authentication" } }
        }
    }
}

#[derive(Deserialize)]
pub(super) struct OptionsForm {
    csrf: String,
    #[serde(default)]
    headers: String,
    #[serde(default)]
    secret_headers: String,
    clear_secret_headers: Option<String>,
    #[serde(default)]
    auth_type: String,
    #[serde(default)]
    auth_token: String,
    #[serde(default)]
    auth_username: String,
    #[serde(default)]
    auth_password: String,
    #[serde(default)]
    auth_token_url: String,
    #[serde(default)]
    auth_client_id: String,
    #[serde(default)]
    auth_client_secret: String,
    #[serde(default)]
    auth_scope: String,
    #[serde(default)]
    auth_audience: String,
}

/// `Name: value` lines as the API's header object (null when there are none).
fn header_lines(field: &str, text: &str) -> Result<Value, ServiceError> {
    let mut out = Map::new();
    for (i, line) in text.lines().map(str::trim).enumerate().filter(|(_, l)| !l.is_empty()) {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| ServiceError::Validation(format!("{field}: line {} is not Name: value", i + 1)))?;
        out.insert(name.trim().to_string(), json!(value.trim()));
    }
    Ok(if out.is_empty() { Value::Null } else { Value::Object(out) })
}

impl OptionsForm {
    /// The PATCH body: `headers` always, `secret_headers` when given or cleared, `auth`
    /// unless kept.
    fn body(&self) -> Result<Map<String, Value>, ServiceError> {
        let mut body = Map::new();
        body.insert("headers".into(), header_lines("headers", &self.headers)?);
        if self.clear_secret_headers.is_some() {
            body.insert("secret_headers".into(), Value::Null);
        } else if !self.secret_headers.trim().is_empty() {
            body.insert("secret_headers".into(), header_lines("secret_headers", &self.secret_headers)?);
        }
        let given = |v: &str| (!v.trim().is_empty()).then(|| json!(v.trim()));
        let auth = match self.auth_type.as_str() {
            "" | "keep" => return Ok(body),
            "none" => Value::Null,
            "bearer" => json!({"type": "bearer", "token": self.auth_token.trim()}),
            "basic" => json!({"type": "basic", "username": self.auth_username.trim(), "password": self.auth_password}),
            kind => {
                let mut a = json!({"type": kind, "token_url": self.auth_token_url.trim(),
                    "client_id": self.auth_client_id.trim(), "client_secret": self.auth_client_secret.trim()});
                for (k, v) in [("scope", given(&self.auth_scope)), ("audience", given(&self.auth_audience))] {
                    if let Some(v) = v {
                        a[k] = v;
                    }
                }
                a
            }
        };
        body.insert("auth".into(), auth);
        Ok(body)
    }
}

pub(super) async fn save_endpoint_options(
    State(app): State<App>,
    Path(id): Path<String>,
    headers: HeaderMap,
    form: Result<Form<OptionsForm>, FormRejection>,
) -> Response {
    let Form(f) = match form {
        Ok(f) => f,
        Err(e) => return form_problem(e),
    };
    endpoint_action(&app, &headers, &id, &f.csrf.clone(), |app, _, ep| async move {
        endpoints::update_endpoint(&app, &ep.id, &f.body()?).await?;
        Ok(see_other(&format!("/portal/endpoints/{}", ep.id)))
    })
    .await
}

pub(super) async fn edit(
    State(app): State<App>,
    Path(id): Path<String>,
    headers: HeaderMap,
    form: Result<Form<EndpointForm>, FormRejection>,
) -> Response {
    let Form(f) = match form {
        Ok(f) => f,
        Err(e) => return form_problem(e),
    };
    let s = match posted(&app, &headers, &f.csrf).await {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let result = async {
        let ep = owned_endpoint(&app, &s, &id).await?;
        let mut body = Map::new();
        body.insert("url".into(), json!(f.url.trim()));
        body.insert("event_types".into(), parse_types(&f.event_types));
        endpoints::update_endpoint(&app, &ep.id, &body).await
    }
    .await;
    match result {
        Ok(ep) => see_other(&format!("/portal/endpoints/{}", ep.id)),
        Err(e) => problem(&e),
    }
}

#[derive(Deserialize)]
pub(super) struct CsrfForm {
    csrf: String,
}

/// Checks the session, its form token and that `id` is the tenant's endpoint, then runs `f`.
pub(super) async fn endpoint_action<F, Fut>(app: &App, headers: &HeaderMap, id: &str, csrf: &str, f: F) -> Response
where
    F: FnOnce(App, Session, Endpoint) -> Fut,
    Fut: std::future::Future<Output = Result<Response, ServiceError>>,
{
    let s = match posted(app, headers, csrf).await {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let ep = match owned_endpoint(app, &s, id).await {
        Ok(ep) => ep,
        Err(e) => return problem(&e),
    };
    f(app.clone(), s, ep).await.unwrap_or_else(|e| problem(&e))
}

pub(super) fn csrf_of(form: Result<Form<CsrfForm>, FormRejection>) -> String {
    form.map(|Form(f)| f.csrf).unwrap_or_default()
}

pub(super) async fn disable(
    State(app): State<App>,
    Path(id): Path<String>,
    headers: HeaderMap,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> Response {
    endpoint_action(&app, &headers, &id, &csrf_of(form), |app, _, ep| async move {
        endpoints::disable_endpoint(&app, &ep.id).await?;
        Ok(see_other(&format!("/portal/endpoints/{}", ep.id)))
    })
    .await
}

pub(super) async fn enable(
    State(app): State<App>,
    Path(id): Path<String>,
    headers: HeaderMap,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> Response {
    endpoint_action(&app, &headers, &id, &csrf_of(form), |app, _, ep| async move {
        endpoints::enable_endpoint(&app, &ep.id).await?;
        Ok(see_other(&format!("/portal/endpoints/{}", ep.id)))
    })
    .await
}

pub(super) async fn rotate(
    State(app): State<App>,
    Path(id): Path<String>,
    headers: HeaderMap,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> Response {
    endpoint_action(&app, &headers, &id, &csrf_of(form), |app, s, ep| async move {
        let view = endpoints::rotate_secret(&app, &ep.id, None).await?;
        let body = html! {
            h1 { "Secret rotated" }
            (secret_box(view.secret.as_deref().unwrap_or("")))
            @if let Some(until) = view.previous_secret_expires_at {
                p { "The previous secret also signs every request until " (until.format("%Y-%m-%d %H:%M UTC"))
                    ", so you can switch your receiver over without missing a webhook." }
            }
            p { a href={"/portal/endpoints/" (ep.id)} { "Back to the endpoint" } }
        };
        Ok(render(&s, "Secret rotated", body))
    })
    .await
}

pub(super) async fn test_event(
    State(app): State<App>,
    Path(id): Path<String>,
    headers: HeaderMap,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> Response {
    endpoint_action(&app, &headers, &id, &csrf_of(form), |app, s, ep| async move {
        let attempt = test_sends::send_test_event(&app, &ep).await?.attempt;
        let body = html! {
            h1 { "Test event sent" }
            p { "One signed " code { (TEST_EVENT_TYPE) } " request went to " code { (ep.url) } " just now (it is not retried and is not listed among deliveries)." }
            (attempt_result(&attempt))
            p { a href={"/portal/endpoints/" (ep.id)} { "Back to the endpoint" } }
        };
        Ok(render(&s, "Test event", body))
    })
    .await
}

/// A test send's attempt as one timeline entry: its result, duration and response excerpt.
pub(super) fn attempt_result(attempt: &crate::domain::model::Attempt) -> Markup {
    let a = json_of(attempt);
    html! {
            ol.timeline aria-label="Test attempt" { li class=(crate::http::ui::attempt_class(&a)) {
            strong { "Result: " }
            @match (attempt.status_code, attempt.error.as_deref()) {
                (Some(c), None) => { "HTTP " (c) " delivered" }
                (Some(c), Some(_)) => { "HTTP " (c) " failed" }
                (None, Some(e)) => { (e) @if let Some(c) = attempt.cause.as_deref() { " (" (c) ")" } }
                (None, None) => { "no answer" }
            }
            " · " (attempt.duration_ms) " ms"
            @if let Some(b) = attempt.response_body.as_deref().filter(|b| !b.is_empty()) { pre { (b) } }
        } }
    }
}
