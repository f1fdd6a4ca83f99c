//! Section 12: what a producer's API key costs at ingest (issue "producers outside AWS").
//!
//! `POST /v1/events` on the stack's `ApiKeyApi` reaches ingest without IAM; ingest checks the
//! `Authorization: Bearer` key (`service::api_keys::authenticate`): with the key in the
//! process's cache (`WEBHOOKS_API_KEY_CACHE_SECONDS`, 30 s by default) a SHA-256 of the key
//! and a constant-time compare; otherwise one GetItem of the key's item and one UpdateItem of
//! its `last_used_at` first.
//!
//! Two measurements on one App over a fresh table, its DynamoDB and SQS clients counted by
//! the interceptor of `bench/src/count.rs`:
//! - requests (after one event that warms the event-type catalog's cache): events posted through the ingest function's router as the Lambda builds it for
//!   the API-key route (`Caller::Anonymous`) with a key made through `POST /v1/api-keys`, the
//!   first (cold cache) apart from the next ones (warm), against the same events through the
//!   IAM route (`Caller::Iam`, no key);
//! - CPU: `authenticate` with the cache warm, timed in process (it makes no AWS request: the
//!   counter checks it).

use crate::cost::{LAMBDA_GBS, LAMBDA_MB};
use crate::count::Counter;
use crate::stack::{self, Res, err};
use crate::throughput::quantile;
use crate::validation::{ONE_VCPU_MB, PerEvent, dollars_per_million, f, per_event, requests_table};
use axum::body::Body;
use axum::http::Request;
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::time::Instant;
use tower::ServiceExt as _;
use webhooks::service::api_keys::{self, Caller};

/// Section 12's figures.
#[derive(Debug, Clone)]
pub struct Figures {
    /// The payload's bytes.
    pub payload_bytes: usize,
    /// (label, first event, next events) for the API-key route and the IAM route.
    pub requests: Vec<(String, PerEvent, PerEvent)>,
    /// `authenticate` with the key cached, microseconds, sorted.
    pub check_us: Vec<f64>,
    /// AWS calls the timed checks made (expected 0).
    pub timed_calls: u64,
}

/// Posts an event through the ingest router for `caller`, with `bearer` if any.
async fn post(app: &webhooks::App, caller: Caller, bearer: Option<&str>, payload: &str) -> Res<u16> {
    let body = format!(
        r#"{{"tenant_id":"t","event_type":"bench.key","id":{},"payload":{payload}}}"#,
        Value::from(stack::unique("evt"))
    );
    let mut req = Request::builder().method("POST").uri("/v1/events").header("content-type", "application/json");
    if let Some(b) = bearer {
        req = req.header("authorization", b);
    }
    let resp = webhooks::http::api::ingest_router(app.clone(), caller).oneshot(req.body(Body::from(body))?).await?;
    Ok(resp.status().as_u16())
}

async fn count(
    app: &webhooks::App,
    counter: &Counter,
    caller: Caller,
    bearer: Option<&str>,
    payload: &str,
    warm: u64,
) -> Res<(PerEvent, PerEvent)> {
    let _ = counter.take();
    let mut cold = PerEvent::default();
    for i in 0..=warm {
        let status = post(app, caller, bearer, payload).await?;
        if status != 202 {
            return Err(err(format!("api keys: an event answered {status}")));
        }
        if i == 0 {
            cold = per_event(counter, 1);
        }
    }
    Ok((cold, per_event(counter, warm)))
}

/// Runs section 12 with `payload` (the median GitHub sample).
///
/// # Errors
/// When a key cannot be made, an event is refused, or the emulator fails.
pub async fn measure(sdk: &aws_config::SdkConfig, quick: bool, payload: &str) -> Res<Figures> {
    let (warm, n) = if quick { (5, 2_000) } else { (20, 20_000) };
    let raw_ddb = aws_sdk_dynamodb::Client::new(sdk);
    let raw_sqs = aws_sdk_sqs::Client::new(sdk);
    let (table, url) = stack::table_and_queue(&raw_ddb, &raw_sqs, "apikeys").await?;
    let counter = Counter::new();
    let app = stack::app(
        stack::config(&table, &url),
        stack::counted_ddb(sdk, "app", &counter),
        stack::counted_sqs(sdk, "app", &counter),
    )?;
    let receiver = stack::Receiver::start(0).await?;
    let result = async {
        stack::endpoint(&app, "t", &receiver.url, Value::Null).await?;
        let (status, made) = stack::call(&app, "POST", "/v1/api-keys", &json!({"tenant_ids": ["t"]})).await?;
        let key = made["key"]
            .as_str()
            .filter(|_| status == 201)
            .ok_or_else(|| err(format!("api keys: create: {status} {made}")))?;
        let bearer = format!("Bearer {key}");
        // One event first, so that the event-type catalog's cache is warm for both routes.
        post(&app, Caller::Iam, None, payload).await?;
        let (k_cold, k_warm) = count(&app, &counter, Caller::Anonymous, Some(&bearer), payload, warm).await?;
        let (i_cold, i_warm) = count(&app, &counter, Caller::Iam, None, payload, warm).await?;
        let _ = counter.take();
        let mut check_us = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            let ok = api_keys::authenticate(&app, Caller::Anonymous, Some(&bearer)).await?;
            check_us.push(t.elapsed().as_secs_f64() * 1e6);
            if ok.is_none() {
                return Err(err("api keys: the key was not taken"));
            }
        }
        check_us.sort_by(f64::total_cmp);
        let timed_calls = counter.take().values().map(|o| o.calls).sum();
        Ok::<_, stack::Error>(Figures {
            payload_bytes: payload.len(),
            requests: vec![
                ("API-key route (`ApiKeyEventsUrl`), `Authorization: Bearer`".into(), k_cold, k_warm),
                ("IAM route (`ApiUrl`), no key".into(), i_cold, i_warm),
            ],
            check_us,
            timed_calls,
        })
    }
    .await;
    receiver.stop();
    result
}

/// Writes section 12 and its summary row.
pub fn section(body: &mut String, summary: &mut Vec<[String; 4]>, fig: &Figures) {
    let _ = writeln!(body, "## 12. API keys at ingest (producers outside AWS)\n");
    let _ = writeln!(
        body,
        "How: `bench/src/api_keys.rs`. Events of {} bytes (the median GitHub sample) through the ingest function's router as the Lambda builds it for each route, on one App (its key cache the process's), DynamoDB and SQS calls counted by section 1's interceptor; then `service::api_keys::authenticate` timed {} times with the key cached (those calls made {} AWS requests).\n",
        fig.payload_bytes,
        fig.check_us.len(),
        fig.timed_calls
    );
    requests_table(body, "route", ["first (key not cached)", "next ones (key cached)"], &fig.requests);
    let extra = |pick: fn(&(String, PerEvent, PerEvent)) -> &PerEvent| match (fig.requests.first(), fig.requests.get(1))
    {
        (Some(k), Some(i)) => {
            let (a, b) = (pick(k), pick(i));
            (a.reads - b.reads, a.writes - b.writes)
        }
        _ => (f64::NAN, f64::NAN),
    };
    let (warm_reads, warm_writes) = extra(|r| &r.2);
    let (cold_reads, cold_writes) = extra(|r| &r.1);
    let p50 = quantile(&fig.check_us, 0.5);
    let scale = ONE_VCPU_MB / LAMBDA_MB;
    let _ = writeln!(
        body,
        "Per event with the key cached: {} more DynamoDB reads and {} more writes than the IAM route, and {} µs (p50; p99 {} µs) of ingest's Lambda duration: ${} per million events at {LAMBDA_MB} MB and ${LAMBDA_GBS} per GB-second (${} at up to {scale:.1} times this machine's single-core time, Lambda's CPU share at {LAMBDA_MB} MB). Per process and key every `WEBHOOKS_API_KEY_CACHE_SECONDS` (30 s): {} reads and {} writes (the key's GetItem and its `last_used_at`), about $0.000002 a process-hour. The route itself is an HTTP API like the IAM one: API Gateway's $1.00 per million requests, the same as section 2's rows posted to the HTTP API. A Lambda authorizer instead would add an invocation per request when uncached ($0.20 per million and its duration) and a second place that reads keys.\n",
        f(warm_reads, 2),
        f(warm_writes, 2),
        f(p50, 1),
        f(quantile(&fig.check_us, 0.99), 1),
        f(dollars_per_million(p50), 5),
        f(dollars_per_million(p50 * scale), 5),
        f(cold_reads, 2),
        f(cold_writes, 2),
    );
    summary.push([
        "API key check at ingest, per event (section 12)".into(),
        format!(
            "{} extra DynamoDB requests per event with the key cached; p50 {} µs; ${} per million events (${} at Lambda's {LAMBDA_MB} MB CPU share); cold: {} GetItem + {} UpdateItem per process and key every 30 s",
            f(warm_reads + warm_writes, 2),
            f(p50, 1),
            f(dollars_per_million(p50), 5),
            f(dollars_per_million(p50 * scale), 5),
            f(cold_reads, 0),
            f(cold_writes, 0),
        ),
        "none set".into(),
        "reported".into(),
    ]);
}
