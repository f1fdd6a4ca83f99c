//! Test support: a stack on the AWS emulator (its own table and queue per test, the local
//! runtime on a free port) and scripted HTTP receivers on 127.0.0.1.
//!
//! The emulator comes from `AWS_ENDPOINT_URL` (`make test` starts LocalStack, or moto with
//! `EMULATOR=moto`, and sets it). A test run without it fails; it does not skip.
//! `WEBHOOKS_TEST_EMULATOR` names the emulator (see [`emulator_has_atomic_writes`]).

pub mod conformance;
pub mod faults;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use webhooks::domain::api_key::ApiKey;
use webhooks::domain::delivery_lifecycle::Transition;
use webhooks::domain::event_type::{EventType, EventTypeVersion};
use webhooks::domain::ids::{DeliveryId, EndpointId, EventId, JobId, TenantId};
use webhooks::domain::model::{Delivery, Endpoint, Job, StoredEvent};
use webhooks::store::{ApiKeyStore, CounterStore, DeliveryStore, EndpointStore, EventStore, EventTypeStore, JobStore};
use webhooks::store::{
    Applied, Committed, DeliveryQuery, DeliverySummary, Due, EndpointWrite, Page, Store, StoreError,
};
use webhooks::{App, Config, bootstrap};
use webhooks_local::{Options, Running};

/// An id for a test, parsed from text that meets the id rule (`id::<EndpointId>("ep_1")`, or
/// typed by where it goes); panics naming the text when it does not, the test's own mistake.
pub fn id<T: std::str::FromStr>(value: impl AsRef<str>) -> T
where
    T::Err: std::fmt::Debug,
{
    let value = value.as_ref();
    value.parse().unwrap_or_else(|e| panic!("test id {value:?}: {e:?}"))
}

/// The emulator's URL, or a panic that says how to run the tests.
pub fn emulator_url() -> String {
    match std::env::var("AWS_ENDPOINT_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => panic!("AWS_ENDPOINT_URL is not set: run the tests with `make test`, which starts the emulator"),
    }
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", ulid::Ulid::new().to_string().to_lowercase())
}

/// A test's own table, queue and local runtime.
pub struct Stack {
    /// The services' context, for calling them directly.
    pub app: App,
    /// The local runtime's base URL, `http://127.0.0.1:PORT`.
    pub base: String,
    /// An HTTP client for the API.
    pub http: reqwest::Client,
    /// The SQS client (to play duplicate or lost messages).
    pub sqs: aws_sdk_sqs::Client,
    running: Option<Running>,
}

/// The configuration tests start from: a 2 s request timeout, a 5 s lease margin (the
/// default: room for a loaded emulator between a claim and its POST), the
/// sweeper every second, loopback receivers allowed, the `by_endpoint` and `by_status`
/// indexes split in 2 (so every suite reads listings merged over shards; production's
/// default is 1), and 3 copies of every endpoint item (so every suite's events and attempts
/// read endpoint copies and count failures split; production's default is 1).
pub fn test_config(table: &str, queue_url: &str) -> Config {
    let mut c = Config::new(table, queue_url);
    c.request_timeout = Duration::from_millis(2000);
    c.lease_margin = Duration::from_millis(5000);
    c.sweep_interval = Duration::from_secs(1);
    c.allow_private_destinations = true;
    c.redrive_after_seconds = 60;
    c.due_shards = 2;
    c.endpoint_index_shards = 2;
    c.status_index_shards = 2;
    c.endpoint_copies = 3;
    c.sweep_budget = Duration::from_secs(5);
    c
}

impl Stack {
    /// A stack with [`test_config`] changed by `tweak`, the runtime running with defaults.
    pub async fn start(tweak: impl FnOnce(&mut Config)) -> Self {
        Self::start_with(tweak, Options::default()).await
    }

    /// As [`Stack::start`], with the runtime's options (port is always a free one).
    pub async fn start_with(tweak: impl FnOnce(&mut Config), options: Options) -> Self {
        Self::start_wrapped(tweak, options, |app| app).await
    }

    /// As [`Stack::start_with`], the runtime and `self.app` using the app `wrap` makes of the
    /// real one (a store that injects failures or runs hooks, say).
    pub async fn start_wrapped(
        tweak: impl FnOnce(&mut Config),
        options: Options,
        wrap: impl FnOnce(App) -> App,
    ) -> Self {
        Self::start_inner(tweak, options, wrap, false).await
    }

    /// As [`Stack::start_with`], with a slow lane: a second queue as
    /// `config.slow_queue_url` (see `webhooks::domain::lane`), polled by `options.slow_pollers`.
    pub async fn start_with_slow_lane(tweak: impl FnOnce(&mut Config), options: Options) -> Self {
        Self::start_inner(tweak, options, |app| app, true).await
    }

    async fn start_inner(
        tweak: impl FnOnce(&mut Config),
        options: Options,
        wrap: impl FnOnce(App) -> App,
        slow_lane: bool,
    ) -> Self {
        let _ = emulator_url();
        let sdk = webhooks::app::aws_sdk_config().await;
        let ddb = aws_sdk_dynamodb::Client::new(&sdk);
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let table = unique("t");
        let queue_url = bootstrap::create_queue(&sqs, &unique("q"), 30).await.expect("create queue");
        let mut config = test_config(&table, &queue_url);
        if slow_lane {
            config.slow_queue_url =
                Some(bootstrap::create_queue(&sqs, &unique("slow"), 30).await.expect("create slow queue"));
        }
        tweak(&mut config);
        // The table keeps the copy count the (tweaked) configuration names.
        bootstrap::create_table(&ddb, &table, config.endpoint_copies).await.expect("create table");
        let app = wrap(App::from_aws(config).await.expect("app"));
        let options = Options { listen: SocketAddr::from(([127, 0, 0, 1], 0)), ..options };
        let running = webhooks_local::start(app.clone(), sqs.clone(), options).await.expect("start");
        Self {
            app,
            base: format!("http://{}", running.addr),
            http: {
                webhooks::sender::install_tls_provider();
                reqwest::Client::new()
            },
            sqs,
            running: Some(running),
        }
    }

    /// Stops the runtime.
    /// Stops the runtime and deletes the test's table and queue, so that the emulator, shared
    /// by every test of a run, does not slow down as the run goes on.
    pub async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.stop().await;
        }
        let ddb = aws_sdk_dynamodb::Client::new(&webhooks::app::aws_sdk_config().await);
        let _ = ddb.delete_table().table_name(&self.app.config.table).send().await;
        let _ = self.sqs.delete_queue().queue_url(&self.app.config.queue_url).send().await;
        if let Some(slow) = &self.app.config.slow_queue_url {
            let _ = self.sqs.delete_queue().queue_url(slow).send().await;
        }
    }

    /// A request to the API; returns the status and the JSON body (`null` when empty).
    pub async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        call_at(&self.http, &self.base, method, path, body).await
    }

    /// POSTs raw bytes as JSON.
    pub async fn post_raw(&self, path: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
        let resp = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("api request");
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// Creates an endpoint and returns its JSON (with the secret).
    pub async fn endpoint(&self, tenant: &str, url: &str, retry_policy: Value) -> Value {
        let mut body = json!({"tenant_id": tenant, "url": url});
        if !retry_policy.is_null() {
            body["retry_policy"] = retry_policy;
        }
        let (status, ep) = self.call(reqwest::Method::POST, "/v1/endpoints", Some(body)).await;
        assert_eq!(status, 201, "create endpoint: {ep}");
        ep
    }

    /// Posts an event and returns the 202 body.
    pub async fn event(&self, tenant: &str, event_type: &str, payload: Value) -> Value {
        let body = json!({"tenant_id": tenant, "event_type": event_type, "payload": payload});
        let (status, accepted) = self.call(reqwest::Method::POST, "/v1/events", Some(body)).await;
        assert_eq!(status, 202, "post event: {accepted}");
        accepted
    }

    /// `GET /v1/deliveries/{id}`.
    pub async fn delivery(&self, id: &str) -> Value {
        let (status, d) = self.call(reqwest::Method::GET, &format!("/v1/deliveries/{id}"), None).await;
        assert_eq!(status, 200, "get delivery: {d}");
        d
    }

    /// Polls the delivery until `done` holds, or panics with its last state after `within`.
    pub async fn wait_delivery(&self, id: &str, within: Duration, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let d = self.delivery(id).await;
            if done(&d) {
                return d;
            }
            assert!(Instant::now() < deadline, "delivery {id} did not reach the expected state in {within:?}: {d:#}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Polls until the delivery has `status`.
    pub async fn wait_status(&self, id: &str, status: &str, within: Duration) -> Value {
        self.wait_delivery(id, within, |d| d["status"] == status).await
    }

    /// Deletes an event's payload item, as DynamoDB TTL does after
    /// `WEBHOOKS_EVENT_RETENTION_DAYS`.
    pub async fn expire_payload(&self, tenant: &str, event_id: &str) {
        use aws_sdk_dynamodb::types::AttributeValue;
        use webhooks::store::keys;
        let client = aws_sdk_dynamodb::Client::new(&webhooks::app::aws_sdk_config().await);
        let (pk, sk) = keys::event_key(tenant, event_id);
        client
            .delete_item()
            .table_name(&self.app.config.table)
            .key(keys::PK, AttributeValue::S(pk))
            .key(keys::SK, AttributeValue::S(sk))
            .send()
            .await
            .expect("delete the payload item");
    }
}

/// Polls `check` every 50 ms until it returns true, or panics with `what` after `within`.
pub async fn eventually<F, Fut>(what: &str, within: Duration, check: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out after {within:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What a receiver answers.
#[derive(Debug, Clone)]
pub enum Reply {
    /// This status, empty body.
    Status(u16),
    /// This status with these headers.
    WithHeaders(u16, Vec<(&'static str, String)>),
    /// Sleep this long, then 200.
    Hang(Duration),
    /// Sleep this long, then answer this status.
    SlowStatus(Duration, u16),
    /// This status with this body, byte for byte.
    Body(u16, Vec<u8>),
}

/// A request a receiver got.
#[derive(Debug, Clone)]
pub struct Hit {
    /// Its headers.
    pub headers: HeaderMap,
    /// Its body, byte for byte.
    pub body: Bytes,
    /// When it arrived.
    pub at: Instant,
}

impl Hit {
    /// A header as text.
    pub fn header(&self, name: &str) -> String {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string()
    }
}

#[derive(Default)]
struct Script {
    next: VecDeque<Reply>,
    default: Option<Reply>,
    hits: Vec<Hit>,
}

/// An HTTP receiver on 127.0.0.1 that answers from a script and records every request.
#[derive(Clone)]
pub struct Receiver {
    /// Its URL (`http://127.0.0.1:PORT/hook`).
    pub url: String,
    /// Its address.
    pub addr: SocketAddr,
    script: Arc<Mutex<Script>>,
}

async fn receive(State(script): State<Arc<Mutex<Script>>>, headers: HeaderMap, body: Bytes) -> Response {
    let reply = {
        let mut s = script.lock().expect("script");
        s.hits.push(Hit { headers, body, at: Instant::now() });
        s.next.pop_front().or_else(|| s.default.clone()).unwrap_or(Reply::Status(200))
    };
    match reply {
        Reply::Status(code) => StatusCode::from_u16(code).expect("status").into_response(),
        Reply::WithHeaders(code, headers) => {
            let mut r = StatusCode::from_u16(code).expect("status").into_response();
            for (k, v) in headers {
                r.headers_mut().insert(k, v.parse().expect("header"));
            }
            r
        }
        Reply::Hang(d) => {
            tokio::time::sleep(d).await;
            StatusCode::OK.into_response()
        }
        Reply::SlowStatus(d, code) => {
            tokio::time::sleep(d).await;
            StatusCode::from_u16(code).expect("status").into_response()
        }
        Reply::Body(code, body) => (StatusCode::from_u16(code).expect("status"), body).into_response(),
    }
}

impl Receiver {
    /// A receiver answering `default` to every request (after any scripted replies).
    pub async fn start(default: Reply) -> Self {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), default).await
    }

    /// A receiver on a given address (to bring a "down" receiver up on its old port).
    pub async fn start_on(addr: SocketAddr, default: Reply) -> Self {
        let script = Arc::new(Mutex::new(Script { default: Some(default), ..Script::default() }));
        let listener = tokio::net::TcpListener::bind(addr).await.expect("bind receiver");
        let addr = listener.local_addr().expect("addr");
        let app = Router::new().fallback(receive).with_state(script.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { url: format!("http://{addr}/hook"), addr, script }
    }

    /// A URL on 127.0.0.1 where nothing listens (yet): connection refused.
    pub async fn down() -> (String, SocketAddr) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        drop(l);
        (format!("http://{addr}/hook"), addr)
    }

    /// Queues replies to give before the default.
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.script.lock().expect("script").next.extend(replies);
    }

    /// Changes the default reply.
    pub fn set_default(&self, reply: Reply) {
        self.script.lock().expect("script").default = Some(reply);
    }

    /// Every request so far.
    pub fn hits(&self) -> Vec<Hit> {
        self.script.lock().expect("script").hits.clone()
    }

    /// How many requests so far.
    pub fn count(&self) -> usize {
        self.script.lock().expect("script").hits.len()
    }
}

/// A [`webhooks::notify::Notifier`] that keeps what it was told: (endpoint id, reason).
#[derive(Default, Clone)]
pub struct RecordingNotifier(pub Arc<Mutex<Vec<(String, String)>>>);

impl RecordingNotifier {
    /// Every notification so far.
    pub fn sent(&self) -> Vec<(String, String)> {
        self.0.lock().expect("notifications").clone()
    }
}

#[async_trait::async_trait]
impl webhooks::notify::Notifier for RecordingNotifier {
    async fn endpoint_disabled(
        &self,
        endpoint: &Endpoint,
        disabled: &webhooks::domain::model::Disabled,
    ) -> Result<(), String> {
        self.0.lock().expect("notifications").push((endpoint.id.to_string(), disabled.reason.clone()));
        Ok(())
    }
}

/// Counts the DynamoDB Query requests a client makes and the index or table entries they
/// read (`ScannedCount`), and the items its BatchGetItems return: an SDK interceptor, added with
/// `aws_sdk_dynamodb::config::Builder::interceptor`.
#[derive(Clone, Default, Debug)]
pub struct QueryReads {
    /// Query requests answered.
    pub queries: Arc<std::sync::atomic::AtomicUsize>,
    /// Entries they read, summed.
    pub scanned: Arc<std::sync::atomic::AtomicUsize>,
    /// Items BatchGetItem requests returned, summed (each billed as a whole item).
    pub items: Arc<std::sync::atomic::AtomicUsize>,
}

impl aws_sdk_dynamodb::config::Intercept for QueryReads {
    fn name(&self) -> &'static str {
        "QueryReads"
    }

    fn read_after_execution(
        &self,
        context: &aws_sdk_dynamodb::config::interceptors::FinalizerInterceptorContextRef<'_>,
        _rc: &aws_sdk_dynamodb::config::RuntimeComponents,
        _cfg: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        use std::sync::atomic::Ordering;
        if let Some(Ok(out)) = context.output_or_error()
            && let Some(q) = out.downcast_ref::<aws_sdk_dynamodb::operation::query::QueryOutput>()
        {
            self.queries.fetch_add(1, Ordering::SeqCst);
            self.scanned.fetch_add(usize::try_from(q.scanned_count()).unwrap_or(0), Ordering::SeqCst);
        }
        if let Some(Ok(out)) = context.output_or_error()
            && let Some(b) = out.downcast_ref::<aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemOutput>()
        {
            let n: usize = b.responses().map(|r| r.values().map(Vec::len).sum()).unwrap_or(0);
            self.items.fetch_add(n, Ordering::SeqCst);
        }
        Ok(())
    }
}

/// How [`FailNth`] fails the call it picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Before it is sent: nothing is written, the caller sees an error.
    BeforeSend,
    /// After DynamoDB has answered: the write happened, the caller sees an error (as after a
    /// timeout).
    LoseAnswer,
    /// After DynamoDB has answered: the write happened, and its answer is replaced by a 500
    /// `InternalServerError`, which the SDK retries: the retry meets the first try's effect
    /// (a guarded write then fails its condition).
    LoseAnswerRetried,
    /// DynamoDB's answer is replaced by a 400 `ValidationException`, as DynamoDB answers a
    /// request it refuses as malformed (an oversized key, a bad expression).
    ValidationException,
    /// DynamoDB's answer is replaced by a 400 `AccessDeniedException` naming an account, a role
    /// ARN and a table ARN ([`INJECTED_ACCESS_DENIED_MESSAGE`]), as IAM answers a call the
    /// role may not make.
    AccessDenied,
}

/// The message of the `AccessDeniedException` [`Fault::AccessDenied`] answers.
pub const INJECTED_ACCESS_DENIED_MESSAGE: &str = "User: arn:aws:sts::123456789012:assumed-role/webhooks-AdminRole-1A2B/webhooks-admin is not authorized to perform: dynamodb:GetItem on resource: arn:aws:dynamodb:eu-west-1:123456789012:table/webhooks-Table-XYZ";

/// The message of the `ValidationException` [`Fault::ValidationException`] answers.
pub const INJECTED_VALIDATION_MESSAGE: &str = "1 validation error detected: injected by the test";

/// An SDK interceptor that fails the `nth` (1-based; 0 = every) call of one DynamoDB
/// operation (its SDK name, `PutItem`, `UpdateItem`, ...; empty = every operation), as
/// `fault` says.
#[derive(Debug)]
pub struct FailNth {
    operation: &'static str,
    nth: usize,
    fault: Fault,
    seen: std::sync::atomic::AtomicUsize,
}

impl FailNth {
    /// Fails the `nth` call of `operation` (see the type's docs) with `fault`.
    pub fn new(operation: &'static str, nth: usize, fault: Fault) -> Self {
        Self { operation, nth, fault, seen: std::sync::atomic::AtomicUsize::new(0) }
    }

    fn hit(&self, cfg: &aws_smithy_types::config_bag::ConfigBag) -> bool {
        use aws_smithy_runtime_api::client::orchestrator::Metadata;
        let ours = cfg.load::<Metadata>().is_some_and(|m| self.operation.is_empty() || m.name() == self.operation);
        ours && (self.nth == 0 || self.seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == self.nth)
    }

    fn operation_name(&self) -> &'static str {
        if self.operation.is_empty() { "any operation" } else { self.operation }
    }

    fn injected(&self) -> aws_smithy_runtime_api::box_error::BoxError {
        format!("injected failure of {} call {}", self.operation_name(), self.nth).into()
    }
}

impl aws_smithy_runtime_api::client::interceptors::Intercept for FailNth {
    fn name(&self) -> &'static str {
        "fail the nth call of an operation"
    }

    fn modify_before_serialization(
        &self,
        _context: &mut aws_smithy_runtime_api::client::interceptors::context::BeforeSerializationInterceptorContextMut<
            '_,
        >,
        _rc: &aws_smithy_runtime_api::client::runtime_components::RuntimeComponents,
        cfg: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        if self.fault == Fault::BeforeSend && self.hit(cfg) { Err(self.injected()) } else { Ok(()) }
    }

    fn modify_before_deserialization(
        &self,
        context: &mut aws_smithy_runtime_api::client::interceptors::context::BeforeDeserializationInterceptorContextMut<
            '_,
        >,
        _rc: &aws_smithy_runtime_api::client::runtime_components::RuntimeComponents,
        cfg: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        match self.fault {
            Fault::LoseAnswer if self.hit(cfg) => Err(self.injected()),
            Fault::LoseAnswerRetried if self.hit(cfg) => {
                *context.response_mut() = injected_answer(
                    500,
                    "com.amazonaws.dynamodb.v20120810#InternalServerError",
                    "injected: the answer was lost",
                )?;
                Ok(())
            }
            Fault::ValidationException | Fault::AccessDenied if self.hit(cfg) => {
                let (kind, message) = match self.fault {
                    Fault::AccessDenied => ("AccessDeniedException", INJECTED_ACCESS_DENIED_MESSAGE),
                    _ => ("ValidationException", INJECTED_VALIDATION_MESSAGE),
                };
                let mut answer = injected_answer(400, &format!("com.amazon.coral.validate#{kind}"), message)?;
                answer.headers_mut().insert("x-amzn-errortype", kind);
                *context.response_mut() = answer;
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// An answer in the AWS JSON protocol DynamoDB and SQS speak: `status` with the error `kind`
/// (its `__type`, also in `x-amzn-query-error` for SQS) and `message`, as an interceptor puts
/// in place of the service's.
///
/// # Errors
/// Never in practice: `status` is a valid HTTP status.
pub fn injected_answer(
    status: u16,
    kind: &str,
    message: &str,
) -> Result<aws_smithy_runtime_api::http::Response, aws_smithy_runtime_api::box_error::BoxError> {
    let body = json!({"__type": kind, "message": message});
    let mut answer = aws_smithy_runtime_api::http::Response::new(
        aws_smithy_runtime_api::http::StatusCode::try_from(status)?,
        aws_smithy_types::body::SdkBody::from(body.to_string()),
    );
    answer.headers_mut().insert("content-type", "application/x-amz-json-1.0");
    answer.headers_mut().insert("x-amzn-query-error", format!("{kind};Sender"));
    Ok(answer)
}

/// Turns a signed request into a harmless read of the same service (DynamoDB's
/// `DescribeLimits`, SQS's `ListQueues`), so that a try an interceptor fails never reaches
/// the table or the queue.
fn neutralize(request: &mut aws_smithy_runtime_api::http::Request, service: &str) {
    let target = if service.to_lowercase().contains("sqs") {
        "AmazonSQS.ListQueues"
    } else {
        "DynamoDB_20120810.DescribeLimits"
    };
    request.headers_mut().insert("x-amz-target", target);
    *request.body_mut() = aws_smithy_types::body::SdkBody::from("{}");
    request.headers_mut().insert("content-length", "2");
}

/// An SDK interceptor that answers DynamoDB's `ThrottlingException` (HTTP 400, which the SDK
/// retries) to the first `times` tries of `operation` calls whose request body contains
/// `needle` (e.g. `attempts = :attempts`, a delivery's record), every try of the SDK's retries
/// counted. Nothing it throttles reaches the emulator. Clones share the count.
#[derive(Debug, Clone)]
pub struct Throttle {
    operation: &'static str,
    needle: &'static str,
    left: Arc<std::sync::atomic::AtomicUsize>,
}

/// What [`Throttle`] decided for one try, kept in the try's configuration bag.
#[derive(Debug, Clone)]
struct Throttled;

impl aws_smithy_types::config_bag::Storable for Throttled {
    type Storer = aws_smithy_types::config_bag::StoreReplace<Self>;
}

impl Throttle {
    /// Throttles the first `times` tries of `operation` calls whose body contains `needle`.
    pub fn new(operation: &'static str, needle: &'static str, times: usize) -> Self {
        Self { operation, needle, left: Arc::new(std::sync::atomic::AtomicUsize::new(times)) }
    }

    /// Tries still to throttle.
    pub fn left(&self) -> usize {
        self.left.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl aws_smithy_runtime_api::client::interceptors::Intercept for Throttle {
    fn name(&self) -> &'static str {
        "throttle matching calls"
    }

    fn modify_before_transmit(
        &self,
        context: &mut aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextMut<'_>,
        _rc: &aws_smithy_runtime_api::client::runtime_components::RuntimeComponents,
        cfg: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        use aws_smithy_runtime_api::client::orchestrator::Metadata;
        let ours = cfg.load::<Metadata>().is_some_and(|m| m.name() == self.operation);
        let body = context.request().body().bytes().unwrap_or_default();
        let matches = body.windows(self.needle.len()).any(|w| w == self.needle.as_bytes());
        let take = ours
            && matches
            && self
                .left
                .fetch_update(std::sync::atomic::Ordering::SeqCst, std::sync::atomic::Ordering::SeqCst, |n| {
                    n.checked_sub(1)
                })
                .is_ok();
        if take {
            neutralize(context.request_mut(), "DynamoDB");
            cfg.interceptor_state().store_put(Throttled);
        } else {
            cfg.interceptor_state().unset::<Throttled>();
        }
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut aws_smithy_runtime_api::client::interceptors::context::BeforeDeserializationInterceptorContextMut<
            '_,
        >,
        _rc: &aws_smithy_runtime_api::client::runtime_components::RuntimeComponents,
        cfg: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        if cfg.load::<Throttled>().is_some() {
            *context.response_mut() = injected_answer(400, "ThrottlingException", "injected: throttled")?;
        }
        Ok(())
    }
}

/// What [`Chaos`] did to one try of an AWS call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ChaosFault {
    /// Never reached the service (it went as a harmless read); answered a throttling error
    /// (HTTP 400 `ThrottlingException`, which the SDK retries).
    Throttled,
    /// Never reached the service; answered HTTP 500 (retried by the SDK).
    ServerError,
    /// Reached the service and took effect; its answer replaced by HTTP 500, as when the
    /// connection drops after the write (the SDK retries the same request).
    AnswerLost,
}

impl aws_smithy_types::config_bag::Storable for ChaosFault {
    type Storer = aws_smithy_types::config_bag::StoreReplace<Self>;
}

/// An SDK interceptor for DynamoDB and SQS clients (the AWS JSON protocol both speak) that,
/// while switched on, strikes each try of every operation with probability `rate`: a
/// throttle or a 500 before the request reaches the service, or an answer lost after it took
/// effect (see [`ChaosFault`]). The SDK's own retries meet it too, so a call can fail on all
/// its tries. Clones share the switch, the random source and the tally.
#[derive(Debug, Clone)]
pub struct Chaos {
    rate: f64,
    on: Arc<std::sync::atomic::AtomicBool>,
    rng: Arc<Mutex<rand::rngs::StdRng>>,
    tally: Arc<Mutex<std::collections::BTreeMap<(String, ChaosFault), usize>>>,
}

impl Chaos {
    /// Strikes a try with probability `rate` (0 to 1) once switched on; `seed` makes the
    /// choices repeatable for one order of calls.
    pub fn new(rate: f64, seed: u64) -> Self {
        use rand::SeedableRng as _;
        Self {
            rate,
            on: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            rng: Arc::new(Mutex::new(rand::rngs::StdRng::seed_from_u64(seed))),
            tally: Arc::default(),
        }
    }

    /// Switches the faults on or off.
    pub fn set(&self, on: bool) {
        self.on.store(on, std::sync::atomic::Ordering::SeqCst);
    }

    /// How many tries of each operation met each fault so far.
    pub fn tally(&self) -> std::collections::BTreeMap<(String, ChaosFault), usize> {
        self.tally.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl aws_smithy_runtime_api::client::interceptors::Intercept for Chaos {
    fn name(&self) -> &'static str {
        "fault harness"
    }

    fn modify_before_transmit(
        &self,
        context: &mut aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextMut<'_>,
        _rc: &aws_smithy_runtime_api::client::runtime_components::RuntimeComponents,
        cfg: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        use aws_smithy_runtime_api::client::orchestrator::Metadata;
        use rand::Rng as _;
        cfg.interceptor_state().unset::<ChaosFault>();
        if !self.on.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        let fault = {
            let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
            if !rng.random_bool(self.rate) {
                return Ok(());
            }
            match rng.random_range(0..3) {
                0 => ChaosFault::Throttled,
                1 => ChaosFault::ServerError,
                _ => ChaosFault::AnswerLost,
            }
        };
        let (operation, service) =
            cfg.load::<Metadata>().map(|m| (m.name().to_string(), m.service().to_string())).unwrap_or_default();
        if fault != ChaosFault::AnswerLost {
            neutralize(context.request_mut(), &service);
        }
        *self.tally.lock().unwrap_or_else(|e| e.into_inner()).entry((operation, fault)).or_default() += 1;
        cfg.interceptor_state().store_put(fault);
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut aws_smithy_runtime_api::client::interceptors::context::BeforeDeserializationInterceptorContextMut<
            '_,
        >,
        _rc: &aws_smithy_runtime_api::client::runtime_components::RuntimeComponents,
        cfg: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        let answer = match cfg.load::<ChaosFault>() {
            None => return Ok(()),
            Some(ChaosFault::Throttled) => injected_answer(400, "ThrottlingException", "injected: throttled")?,
            Some(_) => injected_answer(500, "InternalServerError", "injected by the fault harness")?,
        };
        *context.response_mut() = answer;
        Ok(())
    }
}

/// The API of `stack`'s table and queue, served on its own port by an app whose DynamoDB
/// client fails the `nth` call of `operation` once, before it is sent (see [`FailNth`]).
/// Returns its base URL (`http://127.0.0.1:PORT`).
pub async fn faulty_api(stack: &Stack, operation: &'static str, nth: usize) -> String {
    faulty_api_with(stack, FailNth::new(operation, nth, Fault::BeforeSend)).await
}

/// As [`faulty_api`], with the fault given: a [`FailNth`], or any other SDK interceptor that
/// changes what the app's DynamoDB calls meet.
pub async fn faulty_api_with(
    stack: &Stack,
    fault: impl aws_smithy_runtime_api::client::interceptors::Intercept + 'static,
) -> String {
    let sdk = webhooks::app::aws_sdk_config().await;
    let conf = aws_sdk_dynamodb::config::Builder::from(&sdk).interceptor(fault).build();
    let ddb = aws_sdk_dynamodb::Client::from_conf(conf);
    let app =
        webhooks::App::from_clients((*stack.app.config).clone(), ddb, stack.sqs.clone(), None).expect("faulty app");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind faulty api");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, webhooks::http::api::router(app)).await;
    });
    format!("http://{addr}")
}

/// A request to the API at `base`; returns the status and the JSON body (`null` when empty).
pub async fn call_at(
    http: &reqwest::Client,
    base: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = http.request(method, format!("{base}{path}"));
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.expect("api request");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("api body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Called before every store call with the call's name (`apply`, `commit`, `get_endpoint`,
/// ...): it may delay it, run something else first, or fail it (an injected AWS error).
pub type Hook = Arc<dyn Fn(&'static str) -> BoxFuture<Result<(), StoreError>> + Send + Sync>;

/// A boxed future, as hooks return.
pub type BoxFuture<T> = std::pin::Pin<Box<dyn Future<Output = T> + Send>>;

/// Whether the emulator applies a conditional write atomically, as DynamoDB does: true when
/// `WEBHOOKS_TEST_EMULATOR` is `localstack` (its DynamoDB is AWS's DynamoDB Local) or `aws`,
/// which `make test` sets for LocalStack; false for `moto`, when unset, or anything else.
pub fn emulator_has_atomic_writes() -> bool {
    matches!(std::env::var("WEBHOOKS_TEST_EMULATOR").as_deref(), Ok("localstack" | "aws"))
}

/// A [`Store`] that lets one conditional write run at a time on moto, and runs a [`Hook`]
/// before every call when given one.
///
/// DynamoDB evaluates a condition and applies the write atomically per item. moto's server
/// does not: two truly simultaneous conditional updates of one item can both pass their
/// condition (measured here: about 1 race in 50 with two threads). Tests that race two
/// writers on purpose wrap the store in this so they check our guards, not moto's locking;
/// the reads and the guards themselves still run against the emulator.
///
/// On an emulator with atomic conditional writes ([`emulator_has_atomic_writes`]: LocalStack,
/// the default of `make test`) it serializes nothing and only runs the hook, so the racing
/// writers meet DynamoDB Local's real conditional writes.
pub struct Serialized {
    inner: Arc<dyn Store>,
    /// `None` when the emulator's conditional writes are atomic.
    lock: Option<tokio::sync::Mutex<()>>,
    hook: Option<Hook>,
}

impl Serialized {
    /// `app` with its store wrapped.
    pub fn wrap(app: &App) -> App {
        Self::hooked(app, None)
    }

    /// `app` with its store wrapped, `hook` running before every call.
    pub fn hooked(app: &App, hook: Option<Hook>) -> App {
        let mut app = app.clone();
        let lock = (!emulator_has_atomic_writes()).then(|| tokio::sync::Mutex::new(()));
        app.store = Arc::new(Self { inner: app.store.clone(), lock, hook });
        app
    }

    /// Holds the one-writer lock on moto; nothing on an emulator with atomic writes.
    async fn one(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        match &self.lock {
            Some(lock) => Some(lock.lock().await),
            None => None,
        }
    }

    async fn before(&self, call: &'static str) -> Result<(), StoreError> {
        match &self.hook {
            Some(h) => h(call).await,
            None => Ok(()),
        }
    }
}

#[async_trait::async_trait]
impl EndpointStore for Serialized {
    async fn attention_endpoints(
        &self,
        why: webhooks::store::Attention,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<Page<webhooks::store::AttentionMark>, StoreError> {
        self.before("attention_endpoints").await?;
        self.inner.attention_endpoints(why, limit, cursor).await
    }
    async fn create_endpoint(&self, endpoint: &Endpoint) -> Result<(), StoreError> {
        self.before("create_endpoint").await?;
        self.inner.create_endpoint(endpoint).await
    }

    async fn get_endpoint(&self, tenant_id: &TenantId, id: &EndpointId) -> Result<Option<Endpoint>, StoreError> {
        self.before("get_endpoint").await?;
        self.inner.get_endpoint(tenant_id, id).await
    }

    async fn find_endpoint(&self, id: &EndpointId) -> Result<Option<Endpoint>, StoreError> {
        self.before("find_endpoint").await?;
        self.inner.find_endpoint(id).await
    }

    async fn read_endpoint(
        &self,
        tenant_id: &TenantId,
        id: &EndpointId,
        key: &str,
    ) -> Result<Option<Endpoint>, StoreError> {
        self.before("read_endpoint").await?;
        self.inner.read_endpoint(tenant_id, id, key).await
    }

    async fn tenant_endpoints(&self, tenant_id: &TenantId, key: &str) -> Result<Vec<Endpoint>, StoreError> {
        self.before("tenant_endpoints").await?;
        self.inner.tenant_endpoints(tenant_id, key).await
    }

    async fn commit(
        &self,
        endpoint: EndpointWrite<'_>,
        delivery: Option<(&DeliveryId, &Transition)>,
    ) -> Result<Committed, StoreError> {
        self.before("commit").await?;
        let _one = self.one().await;
        self.inner.commit(endpoint, delivery).await
    }

    async fn delete_endpoint(&self, deleted: &webhooks::store::DeletedEndpoint) -> Result<(), StoreError> {
        self.before("delete_endpoint").await?;
        let _one = self.one().await;
        self.inner.delete_endpoint(deleted).await
    }

    async fn list_endpoints(
        &self,
        tenant_id: &TenantId,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<Page<Endpoint>, StoreError> {
        self.before("list_endpoints").await?;
        self.inner.list_endpoints(tenant_id, limit, cursor).await
    }
}

#[async_trait::async_trait]
impl CounterStore for Serialized {
    async fn failures_in_a_row(&self, endpoint: &Endpoint) -> Result<u32, StoreError> {
        self.before("failures_in_a_row").await?;
        self.inner.failures_in_a_row(endpoint).await
    }

    async fn listed_failures_in_a_row(&self, endpoints: &[Endpoint]) -> Result<Vec<u32>, StoreError> {
        self.before("listed_failures_in_a_row").await?;
        self.inner.listed_failures_in_a_row(endpoints).await
    }

    async fn announce_failing(&self, tenant_id: &TenantId, id: &EndpointId, notify: &Job) -> Result<bool, StoreError> {
        self.before("announce_failing").await?;
        let _one = self.one().await;
        self.inner.announce_failing(tenant_id, id, notify).await
    }

    async fn count_failure(
        &self,
        tenant_id: &TenantId,
        id: &EndpointId,
        key: &str,
        attempt: u32,
        threshold: u32,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<webhooks::store::FailureCount>, StoreError> {
        self.before("count_failure").await?;
        let _one = self.one().await;
        self.inner.count_failure(tenant_id, id, key, attempt, threshold, at).await
    }

    async fn count_delivered(
        &self,
        endpoint_id: &EndpointId,
        delivery_ids: &[DeliveryId],
        at: chrono::DateTime<chrono::Utc>,
        expires_at: i64,
    ) -> Result<(), StoreError> {
        self.before("count_delivered").await?;
        self.inner.count_delivered(endpoint_id, delivery_ids, at, expires_at).await
    }

    async fn delivered_tally(
        &self,
        endpoint_id: &EndpointId,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<webhooks::store::DeliveredTally, StoreError> {
        self.before("delivered_tally").await?;
        self.inner.delivered_tally(endpoint_id, since).await
    }

    async fn reset_failures(&self, tenant_id: &TenantId, id: &EndpointId, key: &str) -> Result<(), StoreError> {
        self.before("reset_failures").await?;
        let _one = self.one().await;
        self.inner.reset_failures(tenant_id, id, key).await
    }

    async fn set_slow_until(
        &self,
        tenant_id: &TenantId,
        id: &EndpointId,
        until: Option<DateTime<Utc>>,
    ) -> Result<(), StoreError> {
        self.before("set_slow_until").await?;
        let _one = self.one().await;
        self.inner.set_slow_until(tenant_id, id, until).await
    }

    async fn take_rate_slot(&self, endpoint_id: &str, second: i64) -> Result<u64, StoreError> {
        self.before("take_rate_slot").await?;
        let _one = self.one().await;
        self.inner.take_rate_slot(endpoint_id, second).await
    }

    async fn set_effective_rate(
        &self,
        tenant_id: &TenantId,
        id: &EndpointId,
        expected_ms: Option<i64>,
        rate: f64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        self.before("set_effective_rate").await?;
        let _one = self.one().await;
        self.inner.set_effective_rate(tenant_id, id, expected_ms, rate, now_ms).await
    }
}

#[async_trait::async_trait]
impl EventStore for Serialized {
    async fn insert_event(
        &self,
        event: &StoredEvent,
        deliveries: &[(&Delivery, Option<i64>)],
    ) -> Result<webhooks::store::Inserted, StoreError> {
        self.before("insert_event").await?;
        let _one = self.one().await;
        self.inner.insert_event(event, deliveries).await
    }

    async fn get_payload(&self, tenant_id: &TenantId, event_id: &EventId) -> Result<Option<String>, StoreError> {
        self.before("get_payload").await?;
        self.inner.get_payload(tenant_id, event_id).await
    }
}

#[async_trait::async_trait]
impl DeliveryStore for Serialized {
    async fn get_delivery(&self, id: &DeliveryId) -> Result<Option<Delivery>, StoreError> {
        self.before("get_delivery").await?;
        self.inner.get_delivery(id).await
    }

    async fn apply(&self, id: &DeliveryId, transition: &Transition, return_new: bool) -> Result<Applied, StoreError> {
        self.before("apply").await?;
        let _one = self.one().await;
        self.inner.apply(id, transition, return_new).await
    }

    async fn due(&self, shard: u32, until_ms: i64, limit: usize, after: Option<&Due>) -> Result<Vec<Due>, StoreError> {
        self.before("due").await?;
        self.inner.due(shard, until_ms, limit, after).await
    }

    async fn event_deliveries(&self, event_id: &EventId) -> Result<Vec<DeliverySummary>, StoreError> {
        self.before("event_deliveries").await?;
        self.inner.event_deliveries(event_id).await
    }

    async fn list_deliveries(&self, query: &DeliveryQuery) -> Result<Page<DeliverySummary>, StoreError> {
        self.before("list_deliveries").await?;
        self.inner.list_deliveries(query).await
    }

    async fn count_deliveries(
        &self,
        endpoint_id: &EndpointId,
        status: webhooks::domain::model::DeliveryStatus,
    ) -> Result<u64, StoreError> {
        self.before("count_deliveries").await?;
        self.inner.count_deliveries(endpoint_id, status).await
    }

    async fn count_deliveries_in(
        &self,
        endpoint_id: &EndpointId,
        statuses: &[webhooks::domain::model::DeliveryStatus],
    ) -> Result<Vec<webhooks::store::Counted>, StoreError> {
        self.before("count_deliveries").await?;
        self.inner.count_deliveries_in(endpoint_id, statuses).await
    }
}

#[async_trait::async_trait]
impl webhooks::store::LifecycleStore for Serialized {
    async fn tenant_snapshot(
        &self,
        tenant_id: &TenantId,
        key: &str,
    ) -> Result<webhooks::store::TenantSnapshot, StoreError> {
        self.before("tenant_snapshot").await?;
        self.inner.tenant_snapshot(tenant_id, key).await
    }

    async fn get_settings(
        &self,
        tenant_id: &TenantId,
    ) -> Result<Option<webhooks::domain::tenant::TenantSettings>, StoreError> {
        self.before("get_settings").await?;
        self.inner.get_settings(tenant_id).await
    }

    async fn save_settings(
        &self,
        settings: &webhooks::domain::tenant::TenantSettings,
        expected_version: u64,
        job: Option<&Job>,
    ) -> Result<bool, StoreError> {
        self.before("save_settings").await?;
        let _one = self.one().await;
        self.inner.save_settings(settings, expected_version, job).await
    }

    async fn event_record(
        &self,
        tenant_id: &TenantId,
        event_id: &EventId,
    ) -> Result<Option<webhooks::store::lifecycle::EventRecord>, StoreError> {
        self.before("event_record").await?;
        self.inner.event_record(tenant_id, event_id).await
    }

    async fn expunge_payload(
        &self,
        tenant_id: &TenantId,
        event_id: &EventId,
        delivery_ids: &[DeliveryId],
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<bool, StoreError> {
        self.before("expunge_payload").await?;
        let _one = self.one().await;
        self.inner.expunge_payload(tenant_id, event_id, delivery_ids, at).await
    }

    async fn endpoint_counters(
        &self,
        endpoint_id: &EndpointId,
        rate_limit_per_second: Option<u32>,
        limit: usize,
    ) -> Result<Vec<webhooks::store::Purgeable>, StoreError> {
        self.before("endpoint_counters").await?;
        self.inner.endpoint_counters(endpoint_id, rate_limit_per_second, limit).await
    }

    async fn deleted_endpoints(
        &self,
        tenant_id: &TenantId,
    ) -> Result<Vec<webhooks::store::DeletedEndpoint>, StoreError> {
        self.before("deleted_endpoints").await?;
        self.inner.deleted_endpoints(tenant_id).await
    }

    async fn scan_tenant(
        &self,
        tenant_id: &TenantId,
        cursor: Option<&str>,
        pages: usize,
    ) -> Result<webhooks::store::ScanPage, StoreError> {
        self.before("scan_tenant").await?;
        self.inner.scan_tenant(tenant_id, cursor, pages).await
    }

    async fn purge(
        &self,
        job_id: &JobId,
        lease_due_at: i64,
        items: &[webhooks::store::Purgeable],
    ) -> Result<bool, StoreError> {
        self.before("purge").await?;
        let _one = self.one().await;
        self.inner.purge(job_id, lease_due_at, items).await
    }
}

#[async_trait::async_trait]
impl JobStore for Serialized {
    async fn create_job(&self, job: &Job) -> Result<(), StoreError> {
        self.before("create_job").await?;
        let _one = self.one().await;
        self.inner.create_job(job).await
    }

    async fn save_job(&self, job: &Job, lease_due_at: i64) -> Result<bool, StoreError> {
        self.before("save_job").await?;
        let _one = self.one().await;
        self.inner.save_job(job, lease_due_at).await
    }

    async fn finish_job(&self, job: &Job, lease_due_at: i64, notify: &Job) -> Result<bool, StoreError> {
        self.before("finish_job").await?;
        let _one = self.one().await;
        self.inner.finish_job(job, lease_due_at, notify).await
    }

    async fn get_job(&self, id: &JobId) -> Result<Option<Job>, StoreError> {
        self.before("get_job").await?;
        self.inner.get_job(id).await
    }

    async fn claim_job(&self, id: &JobId, expected_due_at: i64, lease_due_at: i64) -> Result<bool, StoreError> {
        self.before("claim_job").await?;
        let _one = self.one().await;
        self.inner.claim_job(id, expected_due_at, lease_due_at).await
    }
}

#[async_trait::async_trait]
impl ApiKeyStore for Serialized {
    async fn create_api_key(&self, key: &ApiKey) -> Result<(), StoreError> {
        self.before("create_api_key").await?;
        let _one = self.one().await;
        self.inner.create_api_key(key).await
    }

    async fn get_api_key(&self, id: &str) -> Result<Option<ApiKey>, StoreError> {
        self.before("get_api_key").await?;
        self.inner.get_api_key(id).await
    }

    async fn list_api_keys(&self, limit: usize, cursor: Option<&str>) -> Result<Page<ApiKey>, StoreError> {
        self.before("list_api_keys").await?;
        self.inner.list_api_keys(limit, cursor).await
    }

    async fn revoke_api_key(&self, id: &str, at: DateTime<Utc>) -> Result<Option<ApiKey>, StoreError> {
        self.before("revoke_api_key").await?;
        let _one = self.one().await;
        self.inner.revoke_api_key(id, at).await
    }

    async fn remove_api_key_tenant(&self, id: &str, tenant_id: &str) -> Result<Option<ApiKey>, StoreError> {
        self.before("remove_api_key_tenant").await?;
        let _one = self.one().await;
        self.inner.remove_api_key_tenant(id, tenant_id).await
    }

    async fn touch_api_key(&self, id: &str, at: DateTime<Utc>) -> Result<(), StoreError> {
        self.before("touch_api_key").await?;
        let _one = self.one().await;
        self.inner.touch_api_key(id, at).await
    }
}

#[async_trait::async_trait]
impl EventTypeStore for Serialized {
    async fn create_event_type(&self, event_type: &EventType) -> Result<(), StoreError> {
        self.before("create_event_type").await?;
        let _one = self.one().await;
        self.inner.create_event_type(event_type).await
    }

    async fn get_event_type(&self, name: &str) -> Result<Option<EventType>, StoreError> {
        self.before("get_event_type").await?;
        self.inner.get_event_type(name).await
    }

    async fn event_type_version(&self, name: &str, version: u64) -> Result<Option<EventTypeVersion>, StoreError> {
        self.before("event_type_version").await?;
        self.inner.event_type_version(name, version).await
    }

    async fn save_event_type(
        &self,
        event_type: &EventType,
        expected_revision: u64,
        new_version: bool,
    ) -> Result<bool, StoreError> {
        self.before("save_event_type").await?;
        let _one = self.one().await;
        self.inner.save_event_type(event_type, expected_revision, new_version).await
    }

    async fn list_event_types(&self, limit: usize, cursor: Option<&str>) -> Result<Page<EventType>, StoreError> {
        self.before("list_event_types").await?;
        self.inner.list_event_types(limit, cursor).await
    }
}
