//! Section 10: what an endpoint with `auth: {"type": "oauth2_client_credentials", ..}` costs
//! per attempt beside a plain endpoint (issue "endpoint options").
//!
//! A loopback server on 127.0.0.1 plays both the authorization server and the receiver:
//! `POST /token` is an RFC 6749 4.4 token endpoint (it checks the client's HTTP Basic
//! credentials and `grant_type=client_credentials`, counts every request and issues a new
//! token each time, with the `expires_in` the run asks for); `POST /oauth` answers 200 only
//! to `Authorization: Bearer {a token it issued}`, else 401; `POST /plain` answers 200.
//!
//! Two measurements:
//! - requests and dollars: as in section 1 (`bench/src/requests.rs`), a fresh table and queue
//!   per run, the App's and the poller's DynamoDB and SQS clients counted by the interceptor
//!   of `bench/src/count.rs` (with before/after snapshots, so the units follow the real item
//!   sizes), events posted through the HTTP API's router and each delivered by
//!   `webhooks_local::poll_once` before the next is posted; priced by `cost::price`;
//! - time per attempt: `service::deliver::post::post_signed` (the code every attempt goes
//!   through) called directly on the three endpoints in turn, microseconds of wall time,
//!   the loopback POST included.

use crate::cost;
use crate::count::{Counter, Snapshotter, describe_gsis};
use crate::requests::{DDB, READS, SQS, Scenario, WRITES};
use crate::stack::{self, Res, err};
use crate::throughput::quantile;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Form, Json, Router};
use base64::Engine as _;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The OAuth client the endpoints are given.
const CLIENT_ID: &str = "bench-client";
/// Its secret.
const CLIENT_SECRET: &str = "bench-secret";
/// `expires_in` of the cached-token run's tokens, seconds (an hour, a common lifetime).
const LONG_LIFETIME_SECONDS: u64 = 3600;

#[derive(Default)]
struct ServerState {
    /// `expires_in` answered with each token, seconds.
    expires_in: AtomicU64,
    token_requests: AtomicU64,
    /// Token requests refused (wrong client credentials or grant type): expected 0.
    token_refused: AtomicU64,
    issued: Mutex<HashSet<String>>,
    oauth_ok: AtomicU64,
    oauth_unauthorized: AtomicU64,
    plain_ok: AtomicU64,
}

/// The loopback token endpoint and receiver.
struct AuthServer {
    base: String,
    state: Arc<ServerState>,
    task: tokio::task::JoinHandle<()>,
}

async fn token(
    State(s): State<Arc<ServerState>>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> (StatusCode, Json<serde_json::Value>) {
    let n = s.token_requests.fetch_add(1, Ordering::SeqCst) + 1;
    let basic =
        format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{CLIENT_ID}:{CLIENT_SECRET}")));
    let authorized = headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(basic.as_str());
    if !authorized || form.get("grant_type").map(String::as_str) != Some("client_credentials") {
        s.token_refused.fetch_add(1, Ordering::SeqCst);
        return (StatusCode::UNAUTHORIZED, Json(serde_json::json!({"error": "invalid_client"})));
    }
    let value = format!("bench-token-{n}");
    if let Ok(mut issued) = s.issued.lock() {
        issued.insert(value.clone());
    }
    let answer = serde_json::json!({
        "access_token": value,
        "token_type": "Bearer",
        "expires_in": s.expires_in.load(Ordering::SeqCst),
    });
    (StatusCode::OK, Json(answer))
}

async fn oauth_hook(State(s): State<Arc<ServerState>>, headers: HeaderMap) -> StatusCode {
    let bearer = headers.get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    let known = bearer.is_some_and(|t| s.issued.lock().is_ok_and(|issued| issued.contains(t)));
    if known {
        s.oauth_ok.fetch_add(1, Ordering::SeqCst);
        StatusCode::OK
    } else {
        s.oauth_unauthorized.fetch_add(1, Ordering::SeqCst);
        StatusCode::UNAUTHORIZED
    }
}

async fn plain_hook(State(s): State<Arc<ServerState>>) -> StatusCode {
    s.plain_ok.fetch_add(1, Ordering::SeqCst);
    StatusCode::OK
}

impl AuthServer {
    async fn start(expires_in: u64) -> Res<Self> {
        let state = Arc::new(ServerState::default());
        state.expires_in.store(expires_in, Ordering::SeqCst);
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let router = Router::new()
            .route("/token", post(token))
            .route("/oauth", post(oauth_hook))
            .route("/plain", post(plain_hook))
            .with_state(state.clone())
            .layer(axum::extract::DefaultBodyLimit::max(1 << 20));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Self { base: format!("http://{addr}"), state, task })
    }

    fn token_requests(&self) -> u64 {
        self.state.token_requests.load(Ordering::SeqCst)
    }

    /// 200s answered on the route of `kind`.
    fn ok(&self, kind: Kind) -> u64 {
        match kind {
            Kind::Plain => self.state.plain_ok.load(Ordering::SeqCst),
            Kind::Cached | Kind::Expired => self.state.oauth_ok.load(Ordering::SeqCst),
        }
    }

    fn stop(&self) {
        self.task.abort();
    }
}

/// The three endpoints compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// No `auth`.
    Plain,
    /// OAuth, tokens valid an hour: one fetch, then the cache.
    Cached,
    /// OAuth, tokens answered with `expires_in: 0`: a fetch before every attempt.
    Expired,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Self::Plain => "plain endpoint (no auth)",
            Self::Cached => "OAuth endpoint, token cached (expires_in 3600 s)",
            Self::Expired => "OAuth endpoint, token expired every attempt (expires_in 0)",
        }
    }

    fn expires_in(self) -> u64 {
        if self == Self::Expired { 0 } else { LONG_LIFETIME_SECONDS }
    }

    /// The `POST /v1/endpoints` body for this kind against `server`.
    fn endpoint_body(self, tenant: &str, server: &AuthServer) -> serde_json::Value {
        match self {
            Self::Plain => serde_json::json!({"tenant_id": tenant, "url": format!("{}/plain", server.base)}),
            Self::Cached | Self::Expired => serde_json::json!({
                "tenant_id": tenant,
                "url": format!("{}/oauth", server.base),
                "auth": {
                    "type": "oauth2_client_credentials",
                    "token_url": format!("{}/token", server.base),
                    "client_id": CLIENT_ID,
                    "client_secret": CLIENT_SECRET,
                    "scope": "webhooks:receive",
                },
            }),
        }
    }
}

/// One counted run: `events` events to one endpoint of `kind`, each delivered before the next.
#[derive(Debug, Clone)]
pub struct Run {
    /// Which endpoint.
    pub kind: Kind,
    /// Counted requests, timings and deliveries (the shape section 1 prices).
    pub scenario: Scenario,
    /// Requests at the token endpoint during the counted events.
    pub token_requests: u64,
    /// Token requests the server refused (expected 0).
    pub token_refused: u64,
    /// 401s the receiver answered (expected 0: every attempt carried a token it issued).
    pub unauthorized: u64,
}

/// Wall time of `post_signed` per attempt, microseconds, sorted, by kind.
#[derive(Debug, Clone, Default)]
pub struct PostTimes {
    /// (kind, sorted microseconds, attempts answered other than 200).
    pub by_kind: Vec<(Kind, Vec<f64>, usize)>,
    /// Token requests during the timed attempts of the cached endpoint (expected 0: it was
    /// fetched in the warm-up).
    pub cached_fetches: u64,
}

impl PostTimes {
    /// Median microseconds of `kind`.
    pub fn median(&self, kind: Kind) -> f64 {
        self.by_kind.iter().find(|k| k.0 == kind).map_or(f64::NAN, |k| quantile(&k.1, 0.5))
    }
}

/// Section 10's figures.
#[derive(Debug, Clone)]
pub struct Figures {
    /// The counted runs, plain first.
    pub runs: Vec<Run>,
    /// The timed attempts.
    pub post: PostTimes,
}

struct Counted {
    app: webhooks::App,
    poller: aws_sdk_sqs::Client,
    counter: Arc<Counter>,
}

async fn counted(sdk: &aws_config::SdkConfig, snap: &Arc<Snapshotter>) -> Res<Counted> {
    let raw_ddb = aws_sdk_dynamodb::Client::new(sdk);
    let raw_sqs = aws_sdk_sqs::Client::new(sdk);
    let (table, url) = stack::table_and_queue(&raw_ddb, &raw_sqs, "oauth").await?;
    let counter = Counter::new();
    counter.set_gsis(&table, describe_gsis(&raw_ddb, &table).await?);
    counter.set_snapshots(Some(snap.clone()));
    let app = stack::app(
        stack::config(&table, &url),
        stack::counted_ddb(sdk, "app", &counter),
        stack::counted_sqs(sdk, "app", &counter),
    )?;
    Ok(Counted { app, poller: stack::counted_sqs(sdk, "poller", &counter), counter })
}

async fn create_endpoint(app: &webhooks::App, body: &serde_json::Value) -> Res<String> {
    let (status, v) = stack::call(app, "POST", "/v1/endpoints", body).await?;
    if status != 201 {
        return Err(err(format!("create endpoint: {status} {v}")));
    }
    v["id"].as_str().map(String::from).ok_or_else(|| err(format!("create endpoint: no id in {v}")))
}

/// Posts one event to `tenant` and polls until the route of `kind` has answered one more 200.
async fn deliver_one(
    c: &Counted,
    server: &AuthServer,
    kind: Kind,
    tenant: &str,
    payload: &str,
    sc: &mut Scenario,
) -> Res<()> {
    let before = server.ok(kind);
    let t = Instant::now();
    stack::event(&c.app, tenant, &stack::unique("evt"), payload).await?;
    sc.ingest_ms.push(t.elapsed().as_secs_f64() * 1000.0);
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.ok(kind) == before {
        if Instant::now() > deadline {
            return Err(err(format!("oauth: {}: an event not delivered in 20 s", kind.label())));
        }
        let t = Instant::now();
        let n = webhooks_local::poll_once(&c.app, &c.poller, 1).await.map_err(err)?;
        if n > 0 {
            sc.deliver_ms.push(t.elapsed().as_secs_f64() * 1000.0);
            sc.batch_sizes.push(n);
        }
    }
    Ok(())
}

async fn run_one(
    sdk: &aws_config::SdkConfig,
    snap: &Arc<Snapshotter>,
    kind: Kind,
    events: u64,
    payload: &str,
) -> Res<Run> {
    let server = AuthServer::start(kind.expires_in()).await?;
    let result = async {
        let c = counted(sdk, snap).await?;
        create_endpoint(&c.app, &Kind::Plain.endpoint_body("warm", &server)).await?;
        create_endpoint(&c.app, &kind.endpoint_body("t", &server)).await?;
        let mut sc = Scenario {
            name: kind.label().into(),
            what: String::new(),
            events,
            delivered: 0,
            attempts: 0,
            ops: BTreeMap::new(),
            ingest_ms: Vec::new(),
            deliver_ms: Vec::new(),
            batch_sizes: Vec::new(),
            sweeps: 0,
        };
        // A warm-up event to another tenant's plain endpoint: the App's event-type cache
        // holds `bench.event` from then on, as in a warm ingest process, for every kind alike.
        // Nothing about the endpoint under test is warmed (its token is not fetched).
        deliver_one(&c, &server, Kind::Plain, "warm", payload, &mut sc).await?;
        sc.ingest_ms.clear();
        sc.deliver_ms.clear();
        sc.batch_sizes.clear();
        let _ = c.counter.take();
        let tokens_before = server.token_requests();
        let ok_before = server.ok(kind);
        for _ in 0..events {
            deliver_one(&c, &server, kind, "t", payload, &mut sc).await?;
        }
        sc.ops = c.counter.take();
        sc.delivered = server.ok(kind) - ok_before;
        sc.attempts = sc.delivered + server.state.oauth_unauthorized.load(Ordering::SeqCst);
        Ok::<_, stack::Error>(Run {
            kind,
            scenario: sc,
            token_requests: server.token_requests() - tokens_before,
            token_refused: server.state.token_refused.load(Ordering::SeqCst),
            unauthorized: server.state.oauth_unauthorized.load(Ordering::SeqCst),
        })
    }
    .await;
    server.stop();
    result
}

/// `n` attempts per endpoint kind through `post_signed`, the kinds in turn (so the machine's
/// load falls on each alike), after one untimed attempt each.
async fn time_posts(sdk: &aws_config::SdkConfig, n: usize, payload: &str) -> Res<PostTimes> {
    let cached = AuthServer::start(LONG_LIFETIME_SECONDS).await?;
    let expired = AuthServer::start(0).await?;
    let result = async {
        let ddb = aws_sdk_dynamodb::Client::new(sdk);
        let sqs = aws_sdk_sqs::Client::new(sdk);
        let (table, url) = stack::table_and_queue(&ddb, &sqs, "oauth-post").await?;
        let app = stack::app(stack::config(&table, &url), ddb, sqs)?;
        let mut eps = Vec::new();
        for (kind, server) in [(Kind::Plain, &cached), (Kind::Cached, &cached), (Kind::Expired, &expired)] {
            let id = create_endpoint(&app, &kind.endpoint_body("tp", server)).await?;
            let ep = app
                .store
                .get_endpoint(&"tp".parse()?, &id.parse()?)
                .await?
                .ok_or_else(|| err("oauth: endpoint not found"))?;
            eps.push((kind, ep));
        }
        let now = app.clock.now();
        let body = bytes::Bytes::from(payload.to_string());
        let mut times: Vec<(Kind, Vec<f64>, usize)> = eps.iter().map(|(k, _)| (*k, Vec::new(), 0)).collect();
        let mut cached_fetches = 0;
        for round in 0..=n {
            if round == 1 {
                cached_fetches = cached.token_requests();
            }
            for (i, (_, ep)) in eps.iter().enumerate() {
                let keys = ep
                    .signing_secrets(now)
                    .into_iter()
                    .map(webhooks::domain::signing::secret_key)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| err("oauth: the endpoint's secret does not decode"))?;
                let message_id = stack::unique("msg");
                let t = Instant::now();
                let posted = webhooks::service::deliver::post::post_signed(
                    &app,
                    ep,
                    &message_id,
                    1,
                    body.clone(),
                    &keys,
                    now.timestamp(),
                )
                .await;
                let us = t.elapsed().as_secs_f64() * 1e6;
                // Round 0 is the untimed warm-up (connections opened, the cached token fetched).
                if round > 0 {
                    times[i].1.push(us);
                    if posted.result.outcome != webhooks::domain::retry_policy::Outcome::Status(200) {
                        times[i].2 += 1;
                    }
                }
            }
        }
        for t in &mut times {
            t.1.sort_by(f64::total_cmp);
        }
        Ok::<_, stack::Error>(PostTimes { by_kind: times, cached_fetches: cached.token_requests() - cached_fetches })
    }
    .await;
    cached.stop();
    expired.stop();
    result
}

/// Runs section 10: `events` counted events per endpoint kind, and the timed attempts.
///
/// # Errors
/// When an event is not delivered, or the emulator fails.
pub async fn measure(sdk: &aws_config::SdkConfig, quick: bool, payload: &str) -> Res<Figures> {
    let (events, expired_events, posts) = if quick { (40, 20, 100) } else { (200, 50, 500) };
    let snap = Arc::new(Snapshotter::start());
    let mut runs = Vec::new();
    for (kind, n) in [(Kind::Plain, events), (Kind::Cached, events), (Kind::Expired, expired_events)] {
        eprintln!("bench: 10. oauth: {} ({n} events)", kind.label());
        runs.push(run_one(sdk, &snap, kind, n, payload).await?);
    }
    eprintln!("bench: 10. oauth: {posts} timed attempts per endpoint");
    let post = time_posts(sdk, posts, payload).await?;
    Ok(Figures { runs, post })
}

/// The largest item deliver's GetItems read in a run, bytes (DynamoDB's size rules): the
/// endpoint, read before every POST (a first try's payload rides in the message).
fn endpoint_item_bytes(s: &Scenario) -> usize {
    s.ops
        .iter()
        .filter(|(k, _)| k.0 == "app" && k.1 == DDB && k.2 == "GetItem")
        .flat_map(|(_, o)| o.reads.iter().map(|r| r.bytes))
        .max()
        .unwrap_or(0)
}

fn f(v: f64, digits: usize) -> String {
    format!("{:.digits$}", v + 0.0)
}

/// Writes section 10 and its summary row.
pub fn section(body: &mut String, summary: &mut Vec<[String; 4]>, fig: &Figures, payload_label: &str) {
    let _ = writeln!(body, "## 10. OAuth endpoint: cost per attempt with a cached token\n");
    let n = fig.runs.first().map_or(0, |r| r.scenario.events);
    let _ = writeln!(
        body,
        "How: `bench/src/oauth.rs`. One loopback server on 127.0.0.1 is both the authorization server and the receiver: `POST /token` is an OAuth 2.0 client-credentials token endpoint (RFC 6749 4.4: it checks the client's HTTP Basic credentials and `grant_type`, counts every request, and issues a new token each time with the run's `expires_in`), `POST /oauth` answers 200 only to `Authorization: Bearer` with a token it issued (else 401), `POST /plain` answers 200. Each run has a fresh table, queue and App (so a fresh token cache, as a new deliver instance) with one endpoint, created through the API: plain, or with `auth: {{\"type\": \"oauth2_client_credentials\", \"token_url\", \"client_id\", \"client_secret\", \"scope\"}}`. One warm-up event to another tenant's plain endpoint first (so the event-type cache is warm for every run alike; nothing of the endpoint under test is warmed), then {n} events (fewer where stated) posted one at a time through the HTTP API's router, each delivered by `webhooks_local::poll_once` (batches of 1, as at low traffic) before the next. The DynamoDB and SQS calls are counted and priced exactly as in sections 1 and 2 (the interceptor, with item snapshots; `cost::price`), per delivered event. Payload: {payload_label}.\n"
    );
    let _ = writeln!(
        body,
        "| run | events | delivered | token requests | 401s | DynamoDB reads (app) | DynamoDB writes (app) | SQS sends (app) | receives + deletes (poller) | endpoint item read by deliver, bytes | RRU | WRU + GSI WRU | deliver poll p50, ms | $ DynamoDB | $ SQS | $ Lambda | $ API Gateway | **$ total per million** |"
    );
    let _ = writeln!(body, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &fig.runs {
        let s = &r.scenario;
        let per = s.delivered.max(1) as f64;
        let p = cost::price(s);
        let mut deliver_ms = s.deliver_ms.clone();
        deliver_ms.sort_by(f64::total_cmp);
        let _ = writeln!(
            body,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | **{}** |",
            r.kind.label(),
            s.events,
            s.delivered,
            r.token_requests,
            r.unauthorized,
            f(s.calls(Some("app"), DDB, &READS) / per, 2),
            f(s.calls(Some("app"), DDB, &WRITES) / per, 2),
            f(s.calls(Some("app"), SQS, &["SendMessage", "SendMessageBatch"]) / per, 2),
            f(s.calls(Some("poller"), SQS, &["ReceiveMessage", "DeleteMessageBatch"]) / per, 2),
            endpoint_item_bytes(s),
            f(p.rru, 2),
            f(p.wru + p.gsi_wru, 2),
            f(quantile(&deliver_ms, 0.5), 1),
            f(p.dollars[0], 2),
            f(p.dollars[1], 2),
            f(p.dollars[2], 2),
            f(p.dollars[3], 2),
            f(p.total(), 2),
        );
    }
    body.push('\n');
    let refused: u64 = fig.runs.iter().map(|r| r.token_refused).sum();
    if refused > 0 {
        let _ = writeln!(
            body,
            "**Note**: the token endpoint refused {refused} token requests (wrong credentials or grant type).\n"
        );
    }
    let same = match (fig.runs.iter().find(|r| r.kind == Kind::Plain), fig.runs.iter().find(|r| r.kind == Kind::Cached))
    {
        (Some(a), Some(b)) => {
            let calls = |s: &Scenario, label: &str, svc: &str| {
                s.ops.iter().filter(|(k, _)| k.0 == label && k.1 == svc).map(|(_, o)| o.calls).sum::<u64>() as f64
                    / s.delivered.max(1) as f64
            };
            let (pa, pb) = (cost::price(&a.scenario), cost::price(&b.scenario));
            let same_requests = ["app", "poller"]
                .iter()
                .all(|l| [DDB, SQS].iter().all(|svc| calls(&a.scenario, l, svc) == calls(&b.scenario, l, svc)));
            let same_units = pa.rru == pb.rru && pa.wru + pa.gsi_wru == pb.wru + pb.gsi_wru;
            Some((same_requests, same_units, pa, pb, b.token_requests))
        }
        _ => None,
    };
    let post = &fig.post;
    let (plain, cached, expired) = (post.median(Kind::Plain), post.median(Kind::Cached), post.median(Kind::Expired));
    let attempts = post.by_kind.first().map_or(0, |k| k.1.len());
    let failed: usize = post.by_kind.iter().map(|k| k.2).sum();
    let _ = writeln!(
        body,
        "Time per attempt: `service::deliver::post::post_signed` (headers, signature, the token from the cache or fetched, the POST over loopback and its answer), called directly {attempts} times on each endpoint, the three in turn, after one untimed attempt each (which fetched the cached endpoint's token: {} token requests during its timed attempts); microseconds of wall time on this machine, a reported figure, not a target{}.\n",
        post.cached_fetches,
        if failed > 0 { format!("; **{failed} attempts were answered other than 200**") } else { String::new() }
    );
    let _ =
        writeln!(body, "| endpoint | attempts | p50, µs | p95, µs | p99, µs | added to the plain endpoint's p50, µs |");
    let _ = writeln!(body, "|---|---|---|---|---|---|");
    for (kind, us, _) in &post.by_kind {
        let _ = writeln!(
            body,
            "| {} | {} | {} | {} | {} | {} |",
            kind.label(),
            us.len(),
            f(quantile(us, 0.5), 0),
            f(quantile(us, 0.95), 0),
            f(quantile(us, 0.99), 0),
            if *kind == Kind::Plain { "-".to_string() } else { f(quantile(us, 0.5) - plain, 0) }
        );
    }
    body.push('\n');
    let _ = writeln!(
        body,
        "What an OAuth endpoint adds with a cached token: one token request per endpoint and process per token lifetime (`shared/src/sender/oauth.rs`: a token is kept until 30 s, or a tenth of its lifetime, before it expires; one more after a 401 to a cached token), and per attempt a cache lookup (a SHA-256 of the origin and credentials, a lock) and one header. The token request is not an AWS request: DynamoDB, SQS and Lambda see the same calls. The OAuth endpoint's item is larger (its `auth` with the credentials: the bytes column), read by deliver's GetItem before every POST; a read unit is 4 KB, so it costs the same while the item stays under that. Moto's times make the Lambda column (durations measured against the emulator) move between runs by a few cents; the request and unit columns are exact. With `expires_in` 0 every attempt fetches a token first: the time column shows what that costs on loopback (a real authorization server adds its own round trip).\n"
    );
    let result = match &same {
        Some((same_requests, same_units, pa, pb, tokens)) => format!(
            "{tokens} token request{} for {n} attempts; AWS requests per delivered event {} the plain endpoint's{}; ${} vs ${} per million (plain){}; +{} µs per attempt (p50; {} µs with a token fetched every attempt)",
            if *tokens == 1 { "" } else { "s" },
            if *same_requests { "identical to" } else { "**differ from**" },
            if *same_units { " (and the same units)" } else { " (units differ)" },
            f(pb.total(), 2),
            f(pa.total(), 2),
            if pa.dollars[0] == pb.dollars[0] && pa.dollars[1] == pb.dollars[1] && pa.dollars[3] == pb.dollars[3] {
                ": DynamoDB, SQS and API Gateway the same, Lambda's durations measured against moto"
            } else {
                ""
            },
            f(cached - plain, 0),
            f(expired - plain, 0)
        ),
        None => "not measured".into(),
    };
    summary.push([
        format!("OAuth endpoint, token cached ({n} attempts, section 10): token requests, AWS requests and dollars per delivered event vs a plain endpoint, added time per attempt"),
        result,
        "none set".into(),
        "reported".into(),
    ]);
}
