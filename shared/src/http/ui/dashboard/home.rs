//! The dashboard's landing page: what needs attention across tenants (endpoints stopped or
//! failing, dead letters, held deliveries), newest change first, and one tenant's endpoints.

use super::*;

#[derive(Deserialize, Default)]
pub(super) struct HomeParams {
    tenant: Option<String>,
}

pub(super) async fn home(
    State(d): State<Dash>,
    q: Result<Query<HomeParams>, QueryRejection>,
) -> Result<Response, Failure> {
    let p = query(q)?;
    let tenant = p.tenant.filter(|t| !t.trim().is_empty()).map(|t| t.trim().to_string());
    // Tenants with something to look at: dead letters and held deliveries, across tenants.
    let mut tenants = std::collections::BTreeSet::new();
    let mut dead = Vec::new();
    // Endpoints that need attention: those of the newest dead letters and held deliveries
    // (held: disabled or paused), with how many of each those pages hold.
    let mut attention: std::collections::BTreeMap<String, Attention> = std::collections::BTreeMap::new();
    for status in ["exhausted", "held"] {
        let page = d.get(&format!("/v1/deliveries?status={status}&limit={ATTENTION_PAGE}")).await?;
        for r in rows(&page) {
            if let Some(t) = r["tenant_id"].as_str() {
                tenants.insert(t.to_string());
            }
            if let Some(ep) = r["endpoint_id"].as_str() {
                let a = attention.entry(ep.to_string()).or_default();
                a.tenant = text(&r["tenant_id"]);
                if status == "exhausted" {
                    a.dead += 1
                } else {
                    a.held += 1
                }
                let changed = r["updated_at"].as_str().and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
                a.last_change = a.last_change.max(changed.map(|t| t.to_utc()));
            }
            if status == "exhausted" {
                dead.push(r);
            }
        }
    }
    // And the endpoints stopped (paused, probing, disabled) or failing (retries under way)
    // across tenants, newest first, whether or not anything is held or dead yet.
    for why in ["stopped", "failing"] {
        for ep in rows(&d.get(&format!("/v1/endpoints?attention={why}&limit={ATTENTION_ROWS}")).await?) {
            let Some(id) = ep["id"].as_str() else { continue };
            let since = ep["attention_since"].as_str().and_then(|t| DateTime::parse_from_rfc3339(t).ok());
            let a = attention.entry(id.to_string()).or_default();
            a.tenant = text(&ep["tenant_id"]);
            tenants.insert(a.tenant.clone());
            a.since = since.map(|t| t.to_utc());
            a.last_change = a.last_change.max(a.since);
            a.endpoint = ep;
        }
    }
    let mut attention: Vec<(String, Attention)> = attention.into_iter().collect();
    attention.sort_by_key(|e| std::cmp::Reverse(e.1.last_change));
    attention.truncate(ATTENTION_ROWS);
    for (id, a) in &mut attention {
        if a.endpoint.is_null() {
            a.endpoint = d.get(&format!("/v1/endpoints/{}", enc(id))).await.unwrap_or(Value::Null);
        }
        // Failing: how many of its newest scheduled deliveries wait for a retry.
        if a.endpoint["enabled"].as_bool() == Some(true) && a.endpoint["consecutive_failures"].as_u64() > Some(0) {
            let path = format!("/v1/deliveries?endpoint_id={}&status=scheduled&limit={RETRYING_PAGE}", enc(id));
            a.retrying =
                d.get(&path).await.ok().map(|page| {
                    rows(&page).iter().filter(|r| r["attempt_count"].as_u64().is_some_and(|n| n > 0)).count()
                });
        }
    }
    let mut endpoints = Vec::new();
    if let Some(t) = &tenant {
        for ep in rows(&d.get(&format!("/v1/endpoints?tenant_id={}&limit=100", enc(t))).await?) {
            let id = ep["id"].as_str().unwrap_or_default().to_string();
            let stats = d.get(&format!("/v1/endpoints/{}/stats", enc(&id))).await.unwrap_or(Value::Null);
            endpoints.push((ep, stats));
        }
    }
    let body = html! {
        h1 { "Endpoints" }
        h2 { "Needs attention" }
        @if attention.is_empty() {
            p.muted { "Nothing: no endpoint stopped or failing, no dead letter and no held delivery in any tenant." }
        } @else {
            p.hint { "Endpoints stopped (paused, probing, disabled), failing (failed attempts in a row, retries under way), or with dead letters or held deliveries, in any tenant; newest change first, at most "
                (ATTENTION_ROWS) ". Dead letters and held counted among the newest " (ATTENTION_PAGE)
                " of each; retrying among the endpoint's newest " (RETRYING_PAGE) " scheduled deliveries." }
            div.scroll { table {
                thead { tr {
                    th scope="col" { "Endpoint" } th scope="col" { "Tenant" } th scope="col" { "State" }
                    th scope="col" { "Why" } th scope="col" { "Last change" }
                } }
                tbody { @for (id, a) in &attention { tr {
                    td { a href={"/dashboard/endpoints/" (id)} { code { (id) } } }
                    td { a href={"/dashboard?tenant=" (enc(&a.tenant))} { (a.tenant) } }
                    td { @if a.endpoint.is_null() { span.muted { "deleted" } } @else { (endpoint_badge(&a.endpoint)) } }
                    td { (why(a)) }
                    td { (time(&a.last_change.map_or(Value::Null, |t| Value::String(t.to_rfc3339())))) }
                } } }
            } }
        }
        form.card method="get" action="/dashboard" role="search" {
            label for="tenant" { "Tenant" }
            input #tenant type="text" name="tenant" value=(tenant.clone().unwrap_or_default()) placeholder="acme" required;
            div { button.primary type="submit" { "Show endpoints" } }
            @if !tenants.is_empty() {
                p.hint { "Tenants that need attention: "
                    @for (i, t) in tenants.iter().enumerate() { @if i > 0 { ", " } a href={"/dashboard?tenant=" (enc(t))} { (t) } } }
            }
        }
        @if let Some(t) = &tenant {
            h2 { "Endpoints of " (t) }
            @if endpoints.is_empty() { p.muted { "This tenant has no endpoint: events posted for it are answered with a "
                code { "no_subscribed_endpoint" } " warning and not stored. Tenant ids are case-sensitive: check the spelling." } }
            @else { div.scroll { table {
                thead { tr {
                    th scope="col" { "Endpoint" } th scope="col" { "URL" } th scope="col" { "Health" }
                    th scope="col" { "Failures in a row" } th scope="col" { "Last success" }
                    th scope="col" { "Dead letters" } th scope="col" { "Held" }
                } }
                tbody { @for (ep, stats) in &endpoints { tr {
                    td { a href={"/dashboard/endpoints/" (text(&ep["id"]))} { code { (text(&ep["id"])) } } }
                    td { code { (text(&ep["url"])) } }
                    td { (endpoint_badge(ep)) }
                    td { (text(&ep["consecutive_failures"])) }
                    td { (time(&stats["last_success_at"])) }
                    td { (counted(stats, "exhausted")) }
                    td { (counted(stats, "held")) }
                } } }
            } } }
        }
        h2 { "Newest dead letters, every tenant" }
        (table(&dead.into_iter().take(20).collect::<Vec<_>>()))
    };
    Ok(render("Endpoints", body))
}

/// How many of the newest dead letters, and of the newest held deliveries, the home page reads
/// to find the endpoints that need attention.
pub(super) const ATTENTION_PAGE: usize = 100;

/// How many of those endpoints the home page lists (one endpoint read each).
pub(super) const ATTENTION_ROWS: usize = 20;

/// How many of a failing endpoint's newest scheduled deliveries the home page reads to count
/// those waiting for a retry (one listing per failing endpoint shown).
pub(super) const RETRYING_PAGE: usize = 20;

/// An endpoint on the home page's "Needs attention" list.
#[derive(Default)]
pub(super) struct Attention {
    tenant: String,
    dead: usize,
    held: usize,
    /// Of its newest [`RETRYING_PAGE`] scheduled deliveries, those with a failed attempt
    /// (read for an enabled endpoint with failures in a row).
    retrying: Option<usize>,
    /// When it stopped, or its run of failures began (`attention_since`).
    since: Option<chrono::DateTime<chrono::Utc>>,
    /// The newest `updated_at` among its rows.
    last_change: Option<chrono::DateTime<chrono::Utc>>,
    /// `GET /v1/endpoints/{id}`, or null when it could not be read (deleted).
    endpoint: Value,
}

/// Why an endpoint needs attention: stopped or failing since when, retries waiting, dead
/// letters and held deliveries.
pub(super) fn why(a: &Attention) -> Markup {
    let at =
        |t: &Option<chrono::DateTime<chrono::Utc>>| time(&t.map_or(Value::Null, |t| Value::String(t.to_rfc3339())));
    let state = a.endpoint["state"].as_str().unwrap_or("");
    let failures = a.endpoint["consecutive_failures"].as_u64().unwrap_or(0);
    let mut parts: Vec<Markup> = Vec::new();
    match state {
        "paused" | "probing" | "disabled" if a.since.is_some() => {
            parts.push(html! { (state) " since " (at(&a.since)) })
        }
        "enabled" if failures > 0 => parts.push(html! {
            "failing" @if a.since.is_some() { " since " (at(&a.since)) } "; failures in a row " (failures)
        }),
        _ => {}
    }
    if let Some(n) = a.retrying.filter(|n| *n > 0) {
        parts.push(html! { "retrying " (n) });
    }
    if a.dead > 0 {
        parts.push(html! { "dead letters " (a.dead) });
    }
    if a.held > 0 {
        parts.push(html! { "held " (a.held) });
    }
    html! { @for (i, p) in parts.iter().enumerate() { @if i > 0 { "; " } (p) } }
}
