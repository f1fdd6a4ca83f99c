//! The two screens, server-rendered HTML (maud) with a little progressive enhancement:
//!
//! - [`portal`]: `/portal`, one tenant's own page (endpoints, deliveries, resend, rotate, test
//!   event), authenticated by a signed, short-lived token ([`token`]) instead of IAM;
//! - [`dashboard`]: `/dashboard`, the ops view of every tenant, over the admin API through an
//!   [`dashboard::AdminApi`] (in process under `make run`, SigV4-signed HTTP from
//!   `webhooks-admin dashboard` against the deployed API).
//!
//! Every page works without JavaScript (plain forms, POST then redirect); one inline script
//! refreshes a delivery's timeline while it is in flight. Charts are inline SVG drawn here.

pub mod dashboard;
pub mod portal;
pub mod token;

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use chrono::{DateTime, Utc};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use serde_json::Value;

/// Both screens on one router, the dashboard talking to the admin API in process: what the
/// local runtime mounts next to the API.
pub fn routes(app: crate::App) -> axum::Router {
    let api = dashboard::InProcess::new(crate::http::api::admin_router(app.clone()));
    portal::router(app).merge(dashboard::router(std::sync::Arc::new(api)))
}

const CSS: &str = r#"
:root{--fg:#1b1f24;--muted:#57606a;--line:#d0d7de;--bg:#fff;--soft:#f6f8fa;--ok:#1a7f37;--warn:#9a6700;--bad:#cf222e;--info:#0969da}
*{box-sizing:border-box}
body{margin:0;font:15px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;color:var(--fg);background:var(--bg)}
a{color:var(--info)}
a:focus,button:focus,input:focus,select:focus,summary:focus{outline:3px solid #f0b400;outline-offset:2px}
.skip{position:absolute;left:-999px}.skip:focus{left:8px;top:8px;background:#fff;padding:4px 8px;z-index:9}
header{background:#24292f;color:#fff;padding:10px 16px;display:flex;flex-wrap:wrap;gap:8px 20px;align-items:center}
header a{color:#fff;text-decoration:none;font-weight:600}header nav a{font-weight:400;margin-right:14px}
header .who{margin-left:auto;font-size:13px;opacity:.85}
main{max-width:1100px;margin:0 auto;padding:16px}
h1{font-size:22px;margin:8px 0 12px}h2{font-size:18px;margin:24px 0 8px}
.scroll{overflow-x:auto;-webkit-overflow-scrolling:touch}
table{border-collapse:collapse;width:100%;font-size:14px}
th,td{border-bottom:1px solid var(--line);padding:6px 8px;text-align:left;vertical-align:top}
th{background:var(--soft);font-weight:600;white-space:nowrap}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:13px;word-break:break-all}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;border:1px solid currentColor;white-space:nowrap}
.ok{color:var(--ok)}.warn{color:var(--warn)}.bad{color:var(--bad)}.info{color:var(--info)}.muted{color:var(--muted)}
form.inline{display:inline}
form.card,section.card{border:1px solid var(--line);border-radius:6px;padding:12px;margin:12px 0;background:var(--soft)}
label{display:block;font-weight:600;margin:8px 0 2px}
input[type=text],input[type=url],input[type=password],input[type=datetime-local],select,textarea{width:100%;max-width:520px;padding:7px;border:1px solid var(--line);border-radius:4px;font:inherit}
.hint{font-size:13px;color:var(--muted);margin:2px 0}
button{font:inherit;padding:6px 14px;border-radius:6px;border:1px solid var(--line);background:#fff;cursor:pointer;margin:6px 6px 0 0;min-height:36px}
button.primary{background:#1f883d;color:#fff;border-color:#1a7f37}button.danger{color:var(--bad)}
.flash{border-left:4px solid var(--info);background:#ddf4ff;padding:8px 12px;margin:12px 0}
.flash.bad{border-color:var(--bad);background:#ffebe9;color:var(--fg)}
.secret{font-size:15px;background:#fff8c5;border:1px solid #d4a72c;padding:8px;display:block;margin:6px 0}
ol.timeline{list-style:none;padding:0;margin:0}
ol.timeline>li{border-left:4px solid var(--line);padding:6px 12px;margin:0 0 10px}
ol.timeline>li.ok{border-color:var(--ok)}ol.timeline>li.bad{border-color:var(--bad)}ol.timeline>li.warn{border-color:var(--warn)}
ol.timeline>li{color:var(--fg)}
pre{white-space:pre-wrap;word-break:break-all;background:var(--soft);padding:6px;margin:4px 0;max-height:12em;overflow:auto;font-size:12px}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:4px 12px;margin:0}dl.facts dt{font-weight:600}dl.facts dd{margin:0}
.filters{display:flex;flex-wrap:wrap;gap:8px 16px;align-items:flex-end}.filters>div{flex:1 1 160px}
.legend span{margin-right:12px;font-size:13px}.legend i{display:inline-block;width:10px;height:10px;margin-right:4px}
svg.chart{width:100%;height:auto;max-width:720px;display:block}
@media (max-width:600px){main{padding:10px}th,td{padding:5px}header nav a{margin-right:8px}}
"#;

/// The inline script of pages with a live section: while the "refresh" box is ticked, it
/// reloads the element `#live` from the same URL every 2 s.
const LIVE_JS: &str = r#"(function(){var box=document.getElementById('live-on');if(!box)return;
setInterval(function(){if(!box.checked)return;fetch(location.href,{credentials:'same-origin'}).then(function(r){return r.text()}).then(function(t){
var n=new DOMParser().parseFromString(t,'text/html').getElementById('live');var o=document.getElementById('live');if(n&&o){o.innerHTML=n.innerHTML}}).catch(function(){})},2000)})();"#;

/// A whole page: `title`, the site name and nav in the header, `who` at its right, `body`.
pub fn page(title: &str, site: (&str, &str), nav: Markup, who: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="referrer" content="no-referrer";
                title { (title) " · " (site.0) }
                style { (PreEscaped(CSS)) }
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header {
                    a href=(site.1) { (site.0) }
                    nav aria-label="Main" { (nav) }
                    span.who { (who) }
                }
                main #main tabindex="-1" { (body) }
                script { (PreEscaped(LIVE_JS)) }
            }
        }
    }
}

/// An HTML error page with `status`: a title and what to do, no data.
pub fn error_page(status: StatusCode, site: (&str, &str), title: &str, message: &str) -> Response {
    let body = html! {
        h1 { (title) }
        p.flash.bad role="alert" { (message) }
    };
    (status, Html(page(title, site, html! {}, "", body).into_string())).into_response()
}

/// A 303 See Other to `to` (POST, then redirect).
pub fn see_other(to: &str) -> Response {
    (StatusCode::SEE_OTHER, [(axum::http::header::LOCATION, to.to_string())]).into_response()
}

/// A time as `2026-11-30 18:04:05 UTC`, from an RFC 3339 string (`-` when absent).
pub fn time(v: &Value) -> String {
    v.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc).format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| "-".into())
}

/// A JSON value as short text (`-` for null).
pub fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A delivery status as a coloured badge.
pub fn status_badge(status: &str) -> Markup {
    let class = match status {
        "delivered" => "ok",
        "exhausted" => "bad",
        "held" => "warn",
        _ => "info",
    };
    html! { span class={"badge " (class)} { (status) } }
}

/// An endpoint's health as a badge: its state, and for a disabled or paused one the reason.
pub fn endpoint_badge(ep: &Value) -> Markup {
    let state = ep["state"].as_str().unwrap_or("?");
    let class = match state {
        "enabled" => "ok",
        "paused" | "probing" => "warn",
        _ => "bad",
    };
    let reason = ep["disabled"]["reason"].as_str();
    html! {
        span class={"badge " (class)} { (state) }
        @if let Some(r) = reason {
            " " span.muted { "(" (r) @if let Some(code) = ep["disabled"]["status_code"].as_u64() { " " (code) } ")" }
        }
    }
}

/// How an attempt ended: `ok` (2xx), `warn` (failed, another attempt scheduled) or `bad`
/// (failed, no more attempts in this cycle).
pub fn attempt_class(a: &Value) -> &'static str {
    if a["error"].is_null() && a["status_code"].as_u64().is_some_and(|c| (200..300).contains(&c)) {
        "ok"
    } else if a["next_wait_seconds"].is_u64() {
        "warn"
    } else {
        "bad"
    }
}

/// A delivery's facts and attempt timeline (newest last): status code, error, duration,
/// response body excerpt, the wait chosen and its source. `delivery` is the API's
/// `DeliveryView` JSON.
pub fn timeline(delivery: &Value) -> Markup {
    let attempts = delivery["attempts"].as_array().cloned().unwrap_or_default();
    html! {
        dl.facts {
            dt { "Status" } dd { (status_badge(delivery["status"].as_str().unwrap_or("?"))) }
            dt { "Event" } dd { code { (text(&delivery["event_id"])) } " (" (text(&delivery["event_type"])) ")" }
            dt { "Attempts" } dd { (text(&delivery["attempt_count"])) }
            dt { "Next attempt" } dd { (time(&delivery["next_attempt_at"])) }
            dt { "Accepted" } dd { (time(&delivery["created_at"])) }
            @if let Some(r) = delivery["reason"].as_str() { dt { "Reason" } dd { (r) } }
        }
        h2 { "Attempts" }
        @if let Some(n) = delivery["attempts_dropped"].as_u64() { p.hint { (n) " older attempts are no longer listed." } }
        @if attempts.is_empty() { p.muted { "No attempt yet." } }
        ol.timeline aria-label="Attempt timeline" {
            @for a in &attempts {
                @let class = attempt_class(a);
                li class=(class) {
                    strong { "Attempt " (text(&a["attempt"])) } " · " (time(&a["at"])) " · "
                    span class=(class) {
                        @match (a["status_code"].as_u64(), a["error"].as_str()) {
                            (Some(code), _) if class == "ok" => { "HTTP " (code) " delivered" }
                            (Some(code), _) => { "HTTP " (code) " failed" }
                            (None, Some(e)) => { (e) @if let Some(c) = a["cause"].as_str() { " (" (c) ")" } }
                            (None, None) => { "no answer" }
                        }
                    }
                    " · " (text(&a["duration_ms"])) " ms"
                    @if let Some(w) = a["next_wait_seconds"].as_u64() {
                        div.hint { "Next attempt after " (w) " s, chosen by "
                            (a["wait_source"].as_str().unwrap_or("schedule"))
                            @if let Some(ra) = a["retry_after_seconds"].as_u64() { " (Retry-After " (ra) " s)" } }
                    }
                    @if let Some(body) = a["response_body"].as_str().filter(|b| !b.is_empty()) {
                        details { summary { "Response body (excerpt)" } pre { (body) } }
                    }
                }
            }
        }
    }
}

/// One hour of a chart: attempts that were delivered, failed for good, or failed and retried.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    /// 2xx.
    pub delivered: u32,
    /// Failed, another attempt scheduled.
    pub retried: u32,
    /// Failed, no more attempts in its cycle.
    pub failed: u32,
}

/// Counts the attempts of `deliveries` (the API's `DeliveryView` JSON) made in the 24 hours
/// before `now`, per hour (index 0 is the oldest hour), by outcome ([`attempt_class`]).
pub fn hourly(deliveries: &[Value], now: DateTime<Utc>) -> [Bucket; 24] {
    let mut out = [Bucket::default(); 24];
    for d in deliveries {
        for a in d["attempts"].as_array().map_or(&[][..], |v| v.as_slice()) {
            let Some(at) = a["at"].as_str().and_then(|s| DateTime::parse_from_rfc3339(s).ok()) else { continue };
            let age = (now - at.with_timezone(&Utc)).num_seconds();
            if !(0..24 * 3600).contains(&age) {
                continue;
            }
            let i = 23 - usize::try_from(age / 3600).unwrap_or(0).min(23);
            match attempt_class(a) {
                "ok" => out[i].delivered += 1,
                "warn" => out[i].retried += 1,
                _ => out[i].failed += 1,
            }
        }
    }
    out
}

/// A stacked bar chart (inline SVG) of [`hourly`] buckets, with a text summary for screen
/// readers and a legend.
pub fn chart(id: &str, buckets: &[Bucket; 24], now: DateTime<Utc>) -> Markup {
    let total = |f: fn(&Bucket) -> u32| buckets.iter().map(f).sum::<u32>();
    let (ok, retried, failed) = (total(|b| b.delivered), total(|b| b.retried), total(|b| b.failed));
    let max = buckets.iter().map(|b| b.delivered + b.retried + b.failed).max().unwrap_or(0).max(1);
    let (w, h, left, bottom) = (720.0_f64, 180.0_f64, 36.0_f64, 22.0_f64);
    let bar = (w - left) / 24.0;
    let scale = (h - bottom - 8.0) / f64::from(max);
    let summary =
        format!("Attempts in the last 24 hours: {ok} delivered, {retried} failed and retried, {failed} failed");
    html! {
        figure {
            svg.chart viewBox={"0 0 " (w) " " (h)} role="img" aria-labelledby={(id) "-t"} {
                title id={(id) "-t"} { (summary) }
                line x1=(left) y1=(h - bottom) x2=(w) y2=(h - bottom) stroke="#d0d7de" {}
                text x="2" y="14" font-size="11" fill="#57606a" { (max) }
                text x="2" y=(h - bottom) font-size="11" fill="#57606a" { "0" }
                @for (i, b) in buckets.iter().enumerate() {
                    @let x = left + bar * (i as f64) + 2.0;
                    @let h_ok = f64::from(b.delivered) * scale;
                    @let h_retry = f64::from(b.retried) * scale;
                    @let h_fail = f64::from(b.failed) * scale;
                    @let base = h - bottom;
                    rect x=(x) y=(base - h_ok) width=(bar - 4.0) height=(h_ok) fill="#1a7f37" {
                        title { (b.delivered) " delivered" } }
                    rect x=(x) y=(base - h_ok - h_retry) width=(bar - 4.0) height=(h_retry) fill="#d4a72c" {
                        title { (b.retried) " retried" } }
                    rect x=(x) y=(base - h_ok - h_retry - h_fail) width=(bar - 4.0) height=(h_fail) fill="#cf222e" {
                        title { (b.failed) " failed" } }
                    @if i % 6 == 0 {
                        @let hour = now - chrono::Duration::hours(23 - i as i64);
                        text x=(x) y=(h - 6.0) font-size="11" fill="#57606a" { (hour.format("%H:00")) }
                    }
                }
            }
            figcaption.legend {
                span { i style="background:#1a7f37" {} "delivered " (ok) }
                span { i style="background:#d4a72c" {} "retried " (retried) }
                span { i style="background:#cf222e" {} "failed " (failed) }
                span.muted { "(UTC hours)" }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn attempts_are_bucketed_by_hour_and_outcome() {
        let now = DateTime::parse_from_rfc3339("2026-01-02T12:30:00Z").unwrap().with_timezone(&Utc);
        let d = json!({"attempts": [
            {"at": "2026-01-02T12:10:00Z", "status_code": 500, "error": "http_status", "next_wait_seconds": 5},
            {"at": "2026-01-02T12:20:00Z", "status_code": 200},
            {"at": "2026-01-02T10:00:00Z", "error": "connection"},
            {"at": "2025-12-31T10:00:00Z", "status_code": 200},
        ]});
        let b = hourly(&[d], now);
        assert_eq!(b[23], Bucket { delivered: 1, retried: 1, failed: 0 });
        assert_eq!(b[21], Bucket { delivered: 0, retried: 0, failed: 1 });
        assert_eq!(b.iter().map(|b| b.delivered + b.retried + b.failed).sum::<u32>(), 3);
        let svg = chart("c", &b, now).into_string();
        assert!(svg.contains("1 delivered, 1 failed and retried, 1 failed"), "{svg}");
    }
}
