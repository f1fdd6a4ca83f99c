//! The pieces every measurement builds on: SDK clients (counted or not), a fresh table and
//! queue on the emulator, an [`App`] over them, the HTTP API called in process, and a
//! loopback receiver.

use crate::count::{Counter, Counting, ServerErrors};
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Request, StatusCode};
use serde_json::Value;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tower::ServiceExt as _;
use webhooks::{App, Config, bootstrap};

/// Errors, as text with their cause.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
/// Results of this crate.
pub type Res<T> = Result<T, Error>;

/// An error from a message.
pub fn err(msg: impl Into<String>) -> Error {
    msg.into().into()
}

/// A DynamoDB client whose requests are counted under `label`.
pub fn counted_ddb(sdk: &aws_config::SdkConfig, label: &str, counter: &Arc<Counter>) -> aws_sdk_dynamodb::Client {
    let conf = aws_sdk_dynamodb::config::Builder::from(sdk).interceptor(Counting::new(label, counter)).build();
    aws_sdk_dynamodb::Client::from_conf(conf)
}

/// An SQS client whose requests are counted under `label`.
pub fn counted_sqs(sdk: &aws_config::SdkConfig, label: &str, counter: &Arc<Counter>) -> aws_sdk_sqs::Client {
    let conf = aws_sdk_sqs::config::Builder::from(sdk).interceptor(Counting::new(label, counter)).build();
    aws_sdk_sqs::Client::from_conf(conf)
}

/// Attempts the SDK makes per request in the concurrent measurements (its default is 3).
pub const EMULATOR_ATTEMPTS: u32 = 10;

/// DynamoDB and SQS clients for the measurements that run with concurrency (throughput, the
/// emulator's ceiling, latency): the SDK's standard retries with [`EMULATOR_ATTEMPTS`]
/// attempts and a 25 ms initial backoff, and every 5xx answer counted in `errors`. moto 5.2.5
/// deep-copies a table for every TransactWriteItems (its rollback copy) without a lock, so a
/// write to the same table meanwhile (another event's transaction, a claim, a record) makes
/// the copy fail and moto answer HTTP 500 ("dictionary changed size during iteration"); the
/// SDK's 3 attempts are not always enough under the measurements' concurrency. DynamoDB has
/// no such race; the report says how many answers it took.
pub fn retrying_clients(
    sdk: &aws_config::SdkConfig,
    errors: &ServerErrors,
) -> (aws_sdk_dynamodb::Client, aws_sdk_sqs::Client) {
    use aws_smithy_types::retry::RetryConfig;
    let retry = RetryConfig::standard()
        .with_max_attempts(EMULATOR_ATTEMPTS)
        .with_initial_backoff(std::time::Duration::from_millis(25));
    let ddb =
        aws_sdk_dynamodb::config::Builder::from(sdk).retry_config(retry.clone()).interceptor(errors.clone()).build();
    let sqs = aws_sdk_sqs::config::Builder::from(sdk).retry_config(retry).interceptor(errors.clone()).build();
    (aws_sdk_dynamodb::Client::from_conf(ddb), aws_sdk_sqs::Client::from_conf(sqs))
}

/// A unique name.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("bench-{prefix}-{nanos:x}")
}

/// Creates a table (as bootstrap does for `make run`) and a queue; returns (table, url).
///
/// # Errors
/// The bootstrap error.
pub async fn table_and_queue(
    ddb: &aws_sdk_dynamodb::Client,
    sqs: &aws_sdk_sqs::Client,
    prefix: &str,
) -> Res<(String, String)> {
    let table = unique(prefix);
    // One endpoint copy: the configuration's default, as [`config`] leaves it.
    bootstrap::create_table(ddb, &table, 1).await?;
    let url = bootstrap::create_queue(sqs, &unique(prefix), 60).await?;
    Ok((table, url))
}

/// The configuration the measurements use: defaults, loopback receivers allowed.
pub fn config(table: &str, queue_url: &str) -> Config {
    let mut c = Config::new(table, queue_url);
    c.allow_private_destinations = true;
    // Some scenarios give one tenant more endpoints than a tenant may have by default.
    c.max_endpoints_per_tenant = 10_000;
    c
}

/// An [`App`] over the given clients, wired as `App::from_aws` wires the real ones (it is
/// `App::from_clients`; owner notifications to the log).
///
/// # Errors
/// When the HTTP sender cannot be built.
pub fn app(config: Config, ddb: aws_sdk_dynamodb::Client, sqs: aws_sdk_sqs::Client) -> Res<App> {
    Ok(App::from_clients(config, ddb, sqs, None)?)
}

/// Calls the HTTP API in process (the same router the Lambdas and the local runtime serve).
///
/// # Errors
/// When the router fails or the answer is not JSON.
pub async fn call(app: &App, method: &str, path: &str, body: &Value) -> Res<(u16, Value)> {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))?;
    let resp = webhooks::http::api::router(app.clone()).oneshot(req).await?;
    let status = resp.status().as_u16();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await?;
    let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Ok((status, v))
}

/// Creates an endpoint through the API; returns its id.
///
/// # Errors
/// When the API does not answer 201.
pub async fn endpoint(app: &App, tenant: &str, url: &str, retry_policy: Value) -> Res<String> {
    let mut body = serde_json::json!({"tenant_id": tenant, "url": url});
    if !retry_policy.is_null() {
        body["retry_policy"] = retry_policy;
    }
    let (status, v) = call(app, "POST", "/v1/endpoints", &body).await?;
    if status != 201 {
        return Err(err(format!("create endpoint: {status} {v}")));
    }
    Ok(v["id"].as_str().unwrap_or_default().to_string())
}

/// Posts an event through the API with a payload given as raw JSON text; returns the body.
///
/// # Errors
/// When the API does not answer 202.
pub async fn event(app: &App, tenant: &str, id: &str, payload: &str) -> Res<Value> {
    let body = format!(
        r#"{{"tenant_id":{},"event_type":"bench.event","id":{},"payload":{payload}}}"#,
        Value::from(tenant),
        Value::from(id)
    );
    let req = Request::builder()
        .method("POST")
        .uri("/v1/events")
        .header("content-type", "application/json")
        .body(Body::from(body))?;
    let resp = webhooks::http::api::router(app.clone()).oneshot(req).await?;
    let status = resp.status().as_u16();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await?;
    let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if status != 202 {
        return Err(err(format!("post event: {status} {v}")));
    }
    Ok(v)
}

/// One request a receiver got.
#[derive(Debug, Clone)]
pub struct Hit {
    /// When it arrived.
    pub at: Instant,
    /// Body length.
    pub len: usize,
}

#[derive(Default)]
struct ReceiverState {
    fail_attempts: AtomicU32,
    count: AtomicU64,
    ok: AtomicU64,
    hits: Mutex<Vec<Hit>>,
    first: Mutex<HashMap<String, Instant>>,
}

/// A receiver on 127.0.0.1 that answers 500 to attempts up to `fail_attempts`, then 200.
#[derive(Clone)]
pub struct Receiver {
    /// `http://127.0.0.1:PORT/hook`.
    pub url: String,
    state: Arc<ReceiverState>,
    task: Arc<tokio::task::JoinHandle<()>>,
}

async fn receive(State(s): State<Arc<ReceiverState>>, headers: HeaderMap, body: bytes::Bytes) -> StatusCode {
    let at = Instant::now();
    let h = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let event_id = h("webhook-id");
    let attempt: u32 = h("webhook-attempt").parse().unwrap_or(0);
    s.count.fetch_add(1, Ordering::SeqCst);
    if let Ok(mut f) = s.first.lock() {
        f.entry(event_id).or_insert(at);
    }
    if let Ok(mut hits) = s.hits.lock() {
        hits.push(Hit { at, len: body.len() });
    }
    if attempt <= s.fail_attempts.load(Ordering::SeqCst) {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        s.ok.fetch_add(1, Ordering::SeqCst);
        StatusCode::OK
    }
}

impl Receiver {
    /// Starts a receiver that fails the first `fail_attempts` attempts of every event.
    ///
    /// # Errors
    /// When it cannot bind.
    pub async fn start(fail_attempts: u32) -> Res<Self> {
        let state = Arc::new(ReceiverState::default());
        state.fail_attempts.store(fail_attempts, Ordering::SeqCst);
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let router = Router::new()
            .fallback(receive)
            .with_state(state.clone())
            .layer(axum::extract::DefaultBodyLimit::max(1 << 20));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Self { url: format!("http://{addr}/hook"), state, task: Arc::new(task) })
    }

    /// Requests received.
    pub fn count(&self) -> u64 {
        self.state.count.load(Ordering::SeqCst)
    }

    /// Requests answered 200.
    pub fn ok(&self) -> u64 {
        self.state.ok.load(Ordering::SeqCst)
    }

    /// Every request so far.
    pub fn hits(&self) -> Vec<Hit> {
        self.state.hits.lock().map(|h| h.clone()).unwrap_or_default()
    }

    /// When each event id first arrived.
    pub fn first_arrivals(&self) -> HashMap<String, Instant> {
        self.state.first.lock().map(|h| h.clone()).unwrap_or_default()
    }

    /// Stops it.
    pub fn stop(&self) {
        self.task.abort();
    }
}
