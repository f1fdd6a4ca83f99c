//! `webhooks-admin`: list, inspect and fix endpoints and deliveries through the admin API.
//!
//! Locally it talks to the local runtime (`--api http://127.0.0.1:3000`, the default). On AWS
//! the admin API sits behind IAM authorization: `--sigv4` signs every request with SigV4
//! (service `execute-api`) using the standard credential chain (environment, profile, SSO,
//! instance role) through `aws-config` and `aws-sigv4`.
//!
//! `webhooks-admin dashboard` serves the ops dashboard ([`webhooks::http::ui::dashboard`]) on a
//! loopback port, its pages calling the admin API through this client (signed with `--sigv4`),
//! as `kubectl proxy` does; `webhooks-admin portal-session --tenant T` prints a tenant portal URL.

use clap::{Args, Parser, Subcommand};
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use serde_json::{Value, json};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(name = "webhooks-admin", version, about = "Ops CLI for the webhook delivery service")]
struct Cli {
    /// Base URL of the admin API (the API Gateway URL on AWS).
    #[arg(long = "api", env = "WEBHOOKS_ADMIN_URL", default_value = "http://127.0.0.1:3000", global = true)]
    api: String,
    /// Print the API's JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    /// Sign requests with SigV4 (IAM-authorized API Gateway).
    #[arg(long, env = "WEBHOOKS_ADMIN_SIGV4", global = true)]
    sigv4: bool,
    /// Region for SigV4 (default: the SDK's region chain).
    #[arg(long, env = "AWS_REGION", global = true)]
    region: Option<String>,
    #[command(subcommand)]
    command: Command,
}

/// `tenants ...`: `GET/PUT /v1/tenants/{tenant_id}/settings`, `DELETE /v1/tenants/{tenant_id}`.
#[derive(Subcommand, Debug)]
enum TenantCmd {
    /// The tenant's retention: overrides, what applies, the least event retention accepted.
    Settings {
        /// Tenant id.
        tenant: String,
    },
    /// Set the tenant's retention overrides, in days; each one left out is the stack's.
    Retention {
        /// Tenant id.
        tenant: String,
        /// Days a delivered delivery is kept.
        #[arg(long)]
        delivered_days: Option<u32>,
        /// Days a dead letter is kept.
        #[arg(long)]
        exhausted_days: Option<u32>,
        /// Days an event's payload is kept from ingest.
        #[arg(long)]
        event_days: Option<u32>,
    },
    /// Purge every endpoint, event, delivery, counter and setting of the tenant (a job;
    /// `job <id>` follows it). Its events are refused from now on until the job ends.
    Purge {
        /// Tenant id.
        tenant: String,
        /// Required: the purge cannot be undone.
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Endpoints.
    #[command(subcommand)]
    Endpoints(EndpointCmd),
    /// The event-type catalog: each type's description, JSON Schema (draft 2020-12) and
    /// examples; ingest refuses a payload that fails its type's schema.
    #[command(subcommand)]
    EventTypes(EventTypeCmd),
    /// Producers' API keys: `Authorization: Bearer <key>` on `POST /v1/events` (the stack's
    /// `ApiKeyEventsUrl`), for producers without an IAM identity.
    #[command(subcommand)]
    ApiKeys(ApiKeyCmd),
    /// Dead letters: exhausted deliveries, newest first.
    DeadLetters {
        /// Only this endpoint's.
        #[arg(long)]
        endpoint: Option<String>,
        /// Page size (1 to 100).
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Continue from a previous page.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// A delivery's state and attempt timeline.
    Delivery {
        /// Delivery id (`dlv_...`).
        id: String,
    },
    /// An event and its deliveries.
    Event {
        /// Event id.
        id: String,
        /// The event's tenant (needed when two tenants used the same event id: the API
        /// answers 409 naming them).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Replay an exhausted or held delivery (a fresh retry cycle).
    Replay {
        /// Delivery id.
        id: String,
    },
    /// Replay every exhausted delivery of an endpoint accepted in a time window (a job).
    Recover {
        /// Endpoint id.
        endpoint: String,
        /// Window start, RFC 3339.
        #[arg(long)]
        since: String,
        /// Window end, RFC 3339 (default: now).
        #[arg(long)]
        until: Option<String>,
    },
    /// A background job's progress (release, probe, recover, hold, notify, end_deleted, purge).
    Job {
        /// Job id.
        id: String,
    },
    /// Serve the ops dashboard on a local port; its pages call the admin API (`--api`),
    /// signed with SigV4 when `--sigv4`. Prints the URL; Ctrl-C stops it.
    Dashboard {
        /// Where to listen (loopback; port 0 picks a free one).
        #[arg(long, default_value = "127.0.0.1:8300")]
        listen: std::net::SocketAddr,
    },
    /// A tenant's retention overrides and its purge (GDPR).
    #[command(subcommand)]
    Tenants(TenantCmd),
    /// Remove an event's payload (GDPR): its deliveries keep their history, cannot be
    /// replayed, and no later attempt sends it.
    Expunge {
        /// Event id.
        id: String,
        /// The event's tenant (needed when two tenants used the same event id).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// A tenant portal URL (signed, short-lived) for one tenant.
    PortalSession {
        /// Tenant id.
        #[arg(long)]
        tenant: String,
        /// Lifetime in seconds (60 to 86400; default 3600).
        #[arg(long)]
        ttl_seconds: Option<i64>,
    },
}

#[derive(Subcommand, Debug)]
enum EndpointCmd {
    /// A tenant's endpoints, a page at a time (the next page's `--cursor` is printed after it).
    List {
        /// Tenant id.
        #[arg(long)]
        tenant: String,
        /// Page size (1 to 100).
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Continue from a previous page.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// One endpoint.
    Get {
        /// Endpoint id.
        id: String,
    },
    /// Create an endpoint; prints its secret once.
    Create(CreateArgs),
    /// Enable it; its held deliveries are released gradually.
    Enable {
        /// Endpoint id.
        id: String,
    },
    /// Disable it; its unfinished deliveries are held.
    Disable {
        /// Endpoint id.
        id: String,
    },
    /// Start a secret rotation; prints the new secret once.
    Rotate {
        /// Endpoint id.
        id: String,
    },
    /// Delivery counts by status.
    Stats {
        /// Endpoint id.
        id: String,
    },
    /// Set what attempts carry besides the signed payload (PATCH `headers`, `secret_headers`,
    /// `auth`): each option given replaces that setting; the others stay.
    Options {
        /// Endpoint id.
        id: String,
        #[command(flatten)]
        options: OptionArgs,
        /// Remove every custom header (`headers`).
        #[arg(long, conflicts_with = "header")]
        no_headers: bool,
        /// Remove every secret header (`secret_headers`).
        #[arg(long, conflicts_with = "secret_header")]
        no_secret_headers: bool,
        /// Remove the receiver authentication (`auth`).
        #[arg(long, conflicts_with = "auth")]
        no_auth: bool,
    },
    /// Set or remove its rate limit (PATCH `rate_limit_per_second`, `rate_limit_adaptive`).
    RateLimit {
        /// Endpoint id.
        id: String,
        /// Most attempts started per second (1 to 10000).
        #[arg(long, conflicts_with = "none")]
        per_second: Option<u32>,
        /// Remove the limit.
        #[arg(long)]
        none: bool,
        /// Whether the limit adapts (AIMD) to 429s without Retry-After and runs of timeouts.
        #[arg(long)]
        adaptive: Option<bool>,
    },
}

#[derive(Subcommand, Debug)]
enum ApiKeyCmd {
    /// Make a key; it is printed this once and stored nowhere (only its SHA-256 is).
    #[command(group(clap::ArgGroup::new("scope").required(true).args(["tenants", "all_tenants"])))]
    Create {
        /// What it is for.
        #[arg(long)]
        name: Option<String>,
        /// A tenant it may post for (repeatable); give at least one, or --all-tenants.
        #[arg(long = "tenant")]
        tenants: Vec<String>,
        /// A key that may post for every tenant (instead of --tenant): asked for, never a
        /// default.
        #[arg(long)]
        all_tenants: bool,
        /// When it stops being accepted, RFC 3339 (default: never).
        #[arg(long)]
        expires_at: Option<String>,
    },
    /// The keys, oldest first (never a key).
    List {
        /// Page size (1 to 100).
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Continue from a previous page.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Revoke a key: refused by every ingest process within `WEBHOOKS_API_KEY_CACHE_SECONDS`.
    Revoke {
        /// Key id (`key_...`).
        id: String,
    },
}

#[derive(Subcommand, Debug)]
enum EventTypeCmd {
    /// The catalog by name, a page at a time (the next page's `--cursor` is printed after it).
    List {
        /// Page size (1 to 100).
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Continue from a previous page.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// One event type with its schema; `--version N` shows that version's schema.
    Get {
        /// The event type, e.g. `order.paid`.
        name: String,
        /// A version of its schema (1 to its current version).
        #[arg(long)]
        version: Option<u64>,
    },
    /// Add an event type to the catalog.
    Create {
        /// The event type, e.g. `order.paid`.
        name: String,
        /// What it means, for subscribers.
        #[arg(long)]
        description: Option<String>,
        /// Its JSON Schema (draft 2020-12): JSON text, or `@file.json`.
        #[arg(long)]
        schema: Option<String>,
        /// An example payload (JSON text or `@file.json`; repeatable), checked against the schema.
        #[arg(long = "example")]
        examples: Vec<String>,
        /// Mark it deprecated from the start.
        #[arg(long)]
        deprecated: bool,
    },
    /// Change the fields given; a new schema is a new version (the old ones stay readable).
    Update {
        /// The event type.
        name: String,
        /// A new description.
        #[arg(long)]
        description: Option<String>,
        /// A new JSON Schema: JSON text, or `@file.json`.
        #[arg(long, conflicts_with = "no_schema")]
        schema: Option<String>,
        /// Remove the schema (any payload goes).
        #[arg(long)]
        no_schema: bool,
        /// The examples, all of them (repeatable; JSON text or `@file.json`).
        #[arg(long = "example")]
        examples: Vec<String>,
        /// Deprecated or not.
        #[arg(long)]
        deprecated: Option<bool>,
        /// Archived or not (`--archived false` takes it back from the archive).
        #[arg(long)]
        archived: Option<bool>,
    },
    /// Archive it: ingest refuses the type (422 `event_type_archived`); it stays readable.
    Archive {
        /// The event type.
        name: String,
    },
}

#[derive(Args, Debug)]
struct CreateArgs {
    /// Tenant id.
    #[arg(long)]
    tenant: String,
    /// Receiver URL.
    #[arg(long)]
    url: String,
    /// Subscribe to this event type (repeatable; `order.*` for a prefix). None: all types.
    #[arg(long = "event-type")]
    event_types: Vec<String>,
    /// Retry policy as JSON, e.g. '{"preset":"svix"}'.
    #[arg(long)]
    retry_policy: Option<String>,
    /// Most attempts started per second (1 to 10000; default: no limit).
    #[arg(long)]
    rate_limit: Option<u32>,
    /// Keep the rate limit static (no AIMD back-off on 429s without Retry-After).
    #[arg(long)]
    no_adaptive_rate_limit: bool,
    #[command(flatten)]
    options: OptionArgs,
}

/// An endpoint's custom headers and receiver authentication (docs/api.md, "Endpoint
/// options"). Values given on a command line stay in the shell's history: pass secrets as
/// `@file`.
#[derive(Args, Debug)]
struct OptionArgs {
    /// A custom header sent with every attempt, `Name=value` (repeatable); the set replaces
    /// the endpoint's `headers`.
    #[arg(long, value_parser = header_pair)]
    header: Vec<(String, String)>,
    /// A write-only header, `Name=value` or `Name=@file` (repeatable); the set replaces the
    /// endpoint's `secret_headers`.
    #[arg(long, value_parser = header_pair)]
    secret_header: Vec<(String, String)>,
    /// The receiver authentication as JSON, or `@file` holding it, e.g.
    /// '{"type":"bearer","token":"..."}' (types: bearer, basic, oauth2_client_credentials).
    #[arg(long)]
    auth: Option<String>,
}

impl OptionArgs {
    /// Adds the options given to a create or PATCH body.
    fn apply(&self, body: &mut Value) -> Result<(), String> {
        let object = |pairs: &[(String, String)]| -> Result<Value, String> {
            let mut out = serde_json::Map::new();
            for (name, value) in pairs {
                out.insert(name.clone(), Value::String(read_at_file(value)?.trim_end_matches('\n').to_string()));
            }
            Ok(Value::Object(out))
        };
        if !self.header.is_empty() {
            body["headers"] = object(&self.header)?;
        }
        if !self.secret_header.is_empty() {
            body["secret_headers"] = object(&self.secret_header)?;
        }
        if let Some(auth) = &self.auth {
            body["auth"] = serde_json::from_str(&read_at_file(auth)?).map_err(|e| format!("--auth: {e}"))?;
        }
        Ok(())
    }
}

/// `Name=value` of `--header` and `--secret-header`.
fn header_pair(arg: &str) -> Result<(String, String), String> {
    arg.split_once('=').map(|(n, v)| (n.to_string(), v.to_string())).ok_or_else(|| format!("{arg:?} is not Name=value"))
}

/// `value`, or the contents of the file it names when it starts with `@`.
fn read_at_file(value: &str) -> Result<String, String> {
    match value.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}")),
        None => Ok(value.to_string()),
    }
}

/// Seconds the CLI waits for a TCP (and TLS) connection to the admin API.
const CONNECT_TIMEOUT_SECONDS: u64 = 10;
/// Seconds the CLI waits for a whole answer: API Gateway's own integration limit is 29 s, so
/// a deployed API has answered (or given up) by then.
const REQUEST_TIMEOUT_SECONDS: u64 = 35;

struct Client {
    http: reqwest::Client,
    base: String,
    /// SigV4: the credential chain (asked on every request, so refreshed credentials are
    /// used by a long-running dashboard) and the region.
    signer: Option<(aws_credential_types::provider::SharedCredentialsProvider, String)>,
}

impl Client {
    async fn new(cli: &Cli) -> Result<Self, String> {
        let signer = if cli.sigv4 {
            use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
            let https =
                aws_smithy_http_client::Builder::new().tls_provider(Provider::Rustls(CryptoMode::Ring)).build_https();
            let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(https).load().await;
            let provider = sdk.credentials_provider().ok_or("--sigv4: no AWS credentials found")?;
            let region = cli
                .region
                .clone()
                .or_else(|| sdk.region().map(|r| r.to_string()))
                .ok_or("--sigv4: set --region or AWS_REGION")?;
            Some((provider, region))
        } else {
            None
        };
        // reqwest is built without a crypto provider of its own (the service keeps aws-lc out
        // of its build): rustls on ring, as the service's sender; an error only says one is set.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // Bounded waits, so an address that swallows packets fails instead of hanging: a
        // connection in CONNECT_TIMEOUT_SECONDS, a whole answer in REQUEST_TIMEOUT_SECONDS.
        let http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(CONNECT_TIMEOUT_SECONDS))
            .timeout(std::time::Duration::from_secs(REQUEST_TIMEOUT_SECONDS))
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        let base = cli.api.trim_end_matches('/').to_string();
        match url::Url::parse(&base) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
            _ => {
                return Err(format!(
                    "--api (or WEBHOOKS_ADMIN_URL) {base:?} is not an http(s) URL: write it in full, e.g. http://127.0.0.1:3000"
                ));
            }
        }
        Ok(Self { http, base, signer })
    }

    /// One request: the status and the JSON answer (a JSON string when it is not JSON).
    async fn send(&self, method: http::Method, path: &str, body: Option<Value>) -> Result<(u16, Value), String> {
        let url = format!("{}{path}", self.base);
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let mut request = http::Request::builder()
            .method(method)
            .uri(&url)
            .header("content-type", "application/json")
            .body(bytes.clone())
            .map_err(|e| e.to_string())?;
        if let Some((provider, region)) = &self.signer {
            use aws_credential_types::provider::ProvideCredentials;
            let creds = provider.provide_credentials().await.map_err(|e| format!("--sigv4: credentials: {e}"))?;
            sign(&mut request, &creds, region, &bytes)?;
        }
        let request = reqwest::Request::try_from(request).map_err(|e| e.to_string())?;
        let response = self.http.execute(request).await.map_err(|e| unreachable_api(&self.base, &e))?;
        let status = response.status().as_u16();
        let text = response.text().await.map_err(|e| e.to_string())?;
        let value =
            if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
        Ok((status, value))
    }

    async fn call(&self, method: http::Method, path: &str, body: Option<Value>) -> Result<Value, String> {
        let (status, value) = self.send(method, path, body).await?;
        if (200..300).contains(&status) {
            Ok(value)
        } else {
            match (value["error"]["code"].as_str(), value["error"]["message"].as_str()) {
                (Some(code), Some(message)) => Err(format!("{status} {code}: {message}")),
                // API Gateway's own answers ({"message": ...}): IAM refused (403), throttled
                // (429), the function failed or timed out (5xx).
                _ if value["message"].is_string() => {
                    let tip = if status == 403 && self.signer.is_none() {
                        " (the deployed admin API takes IAM-signed requests: add --sigv4)"
                    } else {
                        ""
                    };
                    Err(format!("{status}: {}{tip}", value["message"].as_str().unwrap_or_default()))
                }
                // Not the error shape every answer of the admin API has.
                _ => Err(format!(
                    "{} answered {status} with something other than the webhooks admin API's error shape: is --api (or \
                     WEBHOOKS_ADMIN_URL) the admin API's address? ({})",
                    self.base,
                    value.to_string().chars().take(120).collect::<String>()
                )),
            }
        }
    }
}

/// The dashboard's view of the admin API: this client, signed when `--sigv4`.
struct HttpAdmin(Client);

#[async_trait::async_trait]
impl webhooks::http::ui::dashboard::AdminApi for HttpAdmin {
    async fn call(
        &self,
        method: http::Method,
        path_and_query: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value), String> {
        self.0.send(method, path_and_query, body).await
    }
}

/// Serves the dashboard on `listen` until Ctrl-C; prints its URL first.
async fn dashboard(client: Client, listen: std::net::SocketAddr) -> Result<String, String> {
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| format!("--listen {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let api = client.base.clone();
    // Only pages asked for by this address (or localhost): a page of another site that
    // rebinds its DNS name to 127.0.0.1 cannot read the dashboard with your credentials.
    let router = webhooks::http::ui::dashboard::router(std::sync::Arc::new(HttpAdmin(client))).layer(
        axum::middleware::from_fn(move |request: axum::extract::Request, next: axum::middleware::Next| {
            let host = request.headers().get(http::header::HOST).and_then(|h| h.to_str().ok());
            let host_ok = webhooks::http::local_host::is_local_host(host, addr);
            async move {
                if host_ok {
                    next.run(request).await
                } else {
                    axum::response::IntoResponse::into_response((
                        http::StatusCode::MISDIRECTED_REQUEST,
                        "the dashboard answers only requests to its own loopback address",
                    ))
                }
            }
        }),
    );
    println!("dashboard: http://{addr}/dashboard  (admin API {api}; Ctrl-C stops it)");
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| format!("dashboard server: {e}"))?;
    Ok("dashboard stopped".into())
}

fn sign(
    request: &mut http::Request<Vec<u8>>,
    creds: &aws_credential_types::Credentials,
    region: &str,
    body: &[u8],
) -> Result<(), String> {
    use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
    let identity = creds.clone().into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("execute-api")
        .time(std::time::SystemTime::now())
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| e.to_string())?
        .into();
    let uri = request.uri().to_string();
    let headers: Vec<(String, String)> = request
        .headers()
        .iter()
        .filter_map(|(k, v)| v.to_str().ok().map(|v| (k.as_str().to_string(), v.to_string())))
        .collect();
    let signable = SignableRequest::new(
        request.method().as_str(),
        uri,
        headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        SignableBody::Bytes(body),
    )
    .map_err(|e| e.to_string())?;
    let (instructions, _) = sign(signable, &params).map_err(|e| e.to_string())?.into_parts();
    instructions.apply_to_request_http1x(request);
    Ok(())
}

fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    if rows.is_empty() {
        return "none".to_string();
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(headers.to_vec());
    for r in rows {
        t.add_row(r);
    }
    t.to_string()
}

/// A listing's table, followed by `more: --cursor {next_cursor}` when the API says there is
/// a next page.
fn with_more(mut table: String, page: &Value) -> String {
    if let Some(c) = page["next_cursor"].as_str() {
        table.push_str(&format!("\nmore: --cursor {c}"));
    }
    table
}

fn endpoint_rows(eps: &[Value]) -> String {
    table(
        &["id", "tenant", "url", "enabled", "disabled reason", "policy", "event types"],
        eps.iter()
            .map(|e| {
                vec![
                    s(&e["id"]),
                    s(&e["tenant_id"]),
                    s(&e["url"]),
                    s(&e["enabled"]),
                    s(&e["disabled"]["reason"]),
                    s(&e["retry_policy"]["preset"]),
                    e["event_types"]
                        .as_array()
                        .map_or("(all)".into(), |t| t.iter().map(s).collect::<Vec<_>>().join(", ")),
                ]
            })
            .collect(),
    )
}

fn deliveries_rows(ds: &[Value]) -> String {
    table(
        &["id", "event", "type", "endpoint", "status", "attempts", "next attempt", "updated"],
        ds.iter()
            .map(|d| {
                vec![
                    s(&d["id"]),
                    s(&d["event_id"]),
                    s(&d["event_type"]),
                    s(&d["endpoint_id"]),
                    s(&d["status"]),
                    s(&d["attempt_count"]),
                    s(&d["next_attempt_at"]),
                    s(&d["updated_at"]),
                ]
            })
            .collect(),
    )
}

fn timeline(d: &Value) -> String {
    let mut out = format!(
        "delivery {}  event {} ({})  endpoint {}\nstatus {}  attempts {}  next attempt {}  expires {}\n",
        s(&d["id"]),
        s(&d["event_id"]),
        s(&d["event_type"]),
        s(&d["endpoint_id"]),
        s(&d["status"]),
        s(&d["attempt_count"]),
        s(&d["next_attempt_at"]),
        s(&d["expires_at"]),
    );
    let attempts = d["attempts"].as_array().cloned().unwrap_or_default();
    out.push_str(&table(
        &["#", "at", "status code", "error", "cause", "ms", "next wait s", "wait from"],
        attempts
            .iter()
            .map(|a| {
                vec![
                    s(&a["attempt"]),
                    s(&a["at"]),
                    s(&a["status_code"]),
                    s(&a["error"]),
                    s(&a["cause"]),
                    s(&a["duration_ms"]),
                    s(&a["next_wait_seconds"]),
                    s(&a["wait_source"]),
                ]
            })
            .collect(),
    ));
    out
}

fn job_line(j: &Value) -> String {
    format!(
        "job {}  {}  {}  endpoint {}  processed {}",
        s(&j["id"]),
        s(&j["kind"]),
        s(&j["status"]),
        s(&j["endpoint_id"]),
        s(&j["processed"])
    )
}

fn event_type_rows(types: &[Value]) -> String {
    table(
        &["name", "version", "schema", "examples", "deprecated", "archived", "description"],
        types
            .iter()
            .map(|t| {
                vec![
                    s(&t["name"]),
                    s(&t["version"]),
                    if t["schema"].is_null() { "-".into() } else { "yes".into() },
                    t["examples"].as_array().map_or(0, Vec::len).to_string(),
                    s(&t["deprecated"]),
                    s(&t["archived"]),
                    s(&t["description"]),
                ]
            })
            .collect(),
    )
}

/// An event type or one version of it: its row, then its schema and examples as JSON.
fn event_type_view(t: &Value) -> String {
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
    let head = if t.get("archived").is_some() {
        event_type_rows(std::slice::from_ref(t))
    } else {
        format!("{} version {} (made {})", s(&t["name"]), s(&t["version"]), s(&t["created_at"]))
    };
    format!(
        "{head}
schema: {}
examples: {}",
        pretty(&t["schema"]),
        pretty(&t["examples"])
    )
}

/// A JSON argument: JSON text, or `@path` for a file's.
fn json_arg(flag: &str, text: &str) -> Result<Value, String> {
    let text = match text.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).map_err(|e| format!("{flag} {text}: {e}"))?,
        None => text.to_string(),
    };
    serde_json::from_str(&text).map_err(|e| format!("{flag}: not JSON: {e}"))
}

fn json_args(flag: &str, texts: &[String]) -> Result<Vec<Value>, String> {
    texts.iter().map(|t| json_arg(flag, t)).collect()
}

/// The request an `event-types` subcommand makes: method, path and body.
fn event_type_request(cmd: &EventTypeCmd) -> Result<(http::Method, String, Option<Value>), String> {
    use http::Method as M;
    Ok(match cmd {
        EventTypeCmd::List { limit, cursor } => {
            let mut path = format!("/v1/event-types?limit={limit}");
            if let Some(c) = cursor {
                path.push_str(&format!("&cursor={}", enc(c)));
            }
            (M::GET, path, None)
        }
        EventTypeCmd::Get { name, version } => {
            let mut path = format!("/v1/event-types/{}", enc(name));
            if let Some(v) = version {
                path.push_str(&format!("?version={v}"));
            }
            (M::GET, path, None)
        }
        EventTypeCmd::Create { name, description, schema, examples, deprecated } => {
            let mut body = json!({"name": name});
            if let Some(d) = description {
                body["description"] = json!(d);
            }
            if let Some(text) = schema {
                body["schema"] = json_arg("--schema", text)?;
            }
            if !examples.is_empty() {
                body["examples"] = json!(json_args("--example", examples)?);
            }
            if *deprecated {
                body["deprecated"] = json!(true);
            }
            (M::POST, "/v1/event-types".into(), Some(body))
        }
        EventTypeCmd::Update { name, description, schema, no_schema, examples, deprecated, archived } => {
            let mut body = json!({});
            if let Some(d) = description {
                body["description"] = json!(d);
            }
            if *no_schema {
                body["schema"] = Value::Null;
            } else if let Some(text) = schema {
                body["schema"] = json_arg("--schema", text)?;
            }
            if !examples.is_empty() {
                body["examples"] = json!(json_args("--example", examples)?);
            }
            if let Some(d) = deprecated {
                body["deprecated"] = json!(d);
            }
            if let Some(a) = archived {
                body["archived"] = json!(a);
            }
            (M::PATCH, format!("/v1/event-types/{}", enc(name)), Some(body))
        }
        EventTypeCmd::Archive { name } => (M::DELETE, format!("/v1/event-types/{}", enc(name)), None),
    })
}

/// The request an `api-keys` subcommand makes: method, path and body.
fn api_key_request(cmd: &ApiKeyCmd) -> (http::Method, String, Option<Value>) {
    use http::Method as M;
    match cmd {
        ApiKeyCmd::Create { name, tenants, all_tenants, expires_at } => {
            let mut body = json!({});
            if let Some(n) = name {
                body["name"] = json!(n);
            }
            if !tenants.is_empty() {
                body["tenant_ids"] = json!(tenants);
            }
            if *all_tenants {
                body["all_tenants"] = json!(true);
            }
            if let Some(at) = expires_at {
                body["expires_at"] = json!(at);
            }
            (M::POST, "/v1/api-keys".into(), Some(body))
        }
        ApiKeyCmd::List { limit, cursor } => {
            let mut path = format!("/v1/api-keys?limit={limit}");
            if let Some(c) = cursor {
                path.push_str(&format!("&cursor={}", enc(c)));
            }
            (M::GET, path, None)
        }
        ApiKeyCmd::Revoke { id } => (M::DELETE, format!("/v1/api-keys/{}", enc(id)), None),
    }
}

/// A key's line: id, prefix, tenants, and when it ends or ended.
fn api_key_line(k: &Value) -> String {
    let tenants = match k["tenant_ids"].as_array() {
        Some(t) => t.iter().map(s).collect::<Vec<_>>().join(","),
        None => "every tenant".into(),
    };
    let state = if k["revoked_at"].is_string() {
        format!("revoked {}", s(&k["revoked_at"]))
    } else if k["expires_at"].is_string() {
        format!("expires {}", s(&k["expires_at"]))
    } else {
        "does not expire".into()
    };
    format!("{}  {}  {}  {}  last used {}", s(&k["id"]), s(&k["prefix"]), tenants, state, s(&k["last_used_at"]))
}

/// Turns an API answer into the human-readable output.
type Render = Box<dyn Fn(&Value) -> String>;

async fn run(cli: &Cli) -> Result<String, String> {
    use http::Method as M;
    let client = Client::new(cli).await?;
    let (value, human): (Value, Render) = match &cli.command {
        Command::Dashboard { listen } => return dashboard(client, *listen).await,
        Command::PortalSession { tenant, ttl_seconds } => {
            let body = ttl_seconds.map_or(json!({}), |t| json!({"ttl_seconds": t}));
            let v = client.call(M::POST, &format!("/v1/tenants/{}/portal-sessions", enc(tenant)), Some(body)).await?;
            (v, Box::new(|v| format!("{}\nvalid until {}", s(&v["url"]), s(&v["expires_at"]))))
        }
        Command::Endpoints(cmd) => match cmd {
            EndpointCmd::List { tenant, limit, cursor } => {
                let mut path = format!("/v1/endpoints?tenant_id={}&limit={limit}", enc(tenant));
                if let Some(c) = cursor {
                    path.push_str(&format!("&cursor={}", enc(c)));
                }
                let v = client.call(M::GET, &path, None).await?;
                (v, Box::new(|v| with_more(endpoint_rows(v["data"].as_array().map_or(&[], |a| a.as_slice())), v)))
            }
            EndpointCmd::Get { id } => {
                let v = client.call(M::GET, &format!("/v1/endpoints/{}", enc(id)), None).await?;
                (v, Box::new(|v| endpoint_rows(std::slice::from_ref(v))))
            }
            EndpointCmd::Create(a) => {
                let mut body = json!({"tenant_id": a.tenant, "url": a.url});
                if !a.event_types.is_empty() {
                    body["event_types"] = json!(a.event_types);
                }
                if let Some(p) = &a.retry_policy {
                    body["retry_policy"] = serde_json::from_str(p).map_err(|e| format!("--retry-policy: {e}"))?;
                }
                if let Some(n) = a.rate_limit {
                    body["rate_limit_per_second"] = json!(n);
                }
                if a.no_adaptive_rate_limit {
                    body["rate_limit_adaptive"] = json!(false);
                }
                a.options.apply(&mut body)?;
                let v = client.call(M::POST, "/v1/endpoints", Some(body)).await?;
                (
                    v,
                    Box::new(|v| {
                        format!("{}\nsecret (shown once): {}", endpoint_rows(std::slice::from_ref(v)), s(&v["secret"]))
                    }),
                )
            }
            EndpointCmd::Enable { id } => {
                let v = client.call(M::POST, &format!("/v1/endpoints/{}/enable", enc(id)), None).await?;
                (
                    v,
                    Box::new(|v| {
                        format!(
                            "{}\nreleasing held deliveries: {}",
                            endpoint_rows(std::slice::from_ref(v)),
                            job_line(&v["release_job"])
                        )
                    }),
                )
            }
            EndpointCmd::Options { id, options, no_headers, no_secret_headers, no_auth } => {
                let mut body = json!({});
                options.apply(&mut body)?;
                for (cleared, field) in
                    [(no_headers, "headers"), (no_secret_headers, "secret_headers"), (no_auth, "auth")]
                {
                    if *cleared {
                        body[field] = Value::Null;
                    }
                }
                let v = client.call(M::PATCH, &format!("/v1/endpoints/{}", enc(id)), Some(body)).await?;
                (
                    v,
                    Box::new(|v| {
                        format!(
                            "{}\nheaders {}, secret headers {}, auth {}",
                            endpoint_rows(std::slice::from_ref(v)),
                            v.get("headers").map_or("none".to_string(), Value::to_string),
                            v.get("secret_headers").map_or("none".to_string(), Value::to_string),
                            v.get("auth").map_or("none".to_string(), Value::to_string)
                        )
                    }),
                )
            }
            EndpointCmd::RateLimit { id, per_second, none, adaptive } => {
                let mut body = json!({});
                if *none {
                    body["rate_limit_per_second"] = Value::Null;
                } else if let Some(n) = per_second {
                    body["rate_limit_per_second"] = json!(n);
                }
                if let Some(a) = adaptive {
                    body["rate_limit_adaptive"] = json!(a);
                }
                let v = client.call(M::PATCH, &format!("/v1/endpoints/{}", enc(id)), Some(body)).await?;
                (
                    v,
                    Box::new(|v| {
                        format!(
                            "{}\nrate limit {} per second (adaptive {}), in force now {}",
                            endpoint_rows(std::slice::from_ref(v)),
                            s(&v["rate_limit_per_second"]),
                            s(&v["rate_limit_adaptive"]),
                            s(&v["effective_rate_per_second"])
                        )
                    }),
                )
            }
            EndpointCmd::Disable { id } => {
                let v = client.call(M::POST, &format!("/v1/endpoints/{}/disable", enc(id)), None).await?;
                (v, Box::new(|v| endpoint_rows(std::slice::from_ref(v))))
            }
            EndpointCmd::Rotate { id } => {
                let v = client.call(M::POST, &format!("/v1/endpoints/{}/rotate-secret", enc(id)), None).await?;
                (
                    v,
                    Box::new(|v| {
                        format!(
                            "new secret (shown once): {}\nthe old one also signs until {}",
                            s(&v["secret"]),
                            s(&v["previous_secret_expires_at"])
                        )
                    }),
                )
            }
            EndpointCmd::Stats { id } => {
                let v = client.call(M::GET, &format!("/v1/endpoints/{}/stats", enc(id)), None).await?;
                (
                    v,
                    Box::new(|v| {
                        let counts = v["counts"].as_object().cloned().unwrap_or_default();
                        format!(
                            "{}\nlast success {}  failures in a row {}",
                            table(
                                &["status", "deliveries"],
                                counts.iter().map(|(k, n)| vec![k.clone(), s(n)]).collect()
                            ),
                            s(&v["last_success_at"]),
                            s(&v["consecutive_failures"])
                        )
                    }),
                )
            }
        },
        Command::EventTypes(cmd) => {
            let (method, path, body) = event_type_request(cmd)?;
            let v = client.call(method, &path, body).await?;
            let render: Render = match cmd {
                EventTypeCmd::List { .. } => {
                    Box::new(|v| with_more(event_type_rows(v["data"].as_array().map_or(&[], |a| a.as_slice())), v))
                }
                _ => Box::new(event_type_view),
            };
            (v, render)
        }
        Command::ApiKeys(cmd) => {
            let (method, path, body) = api_key_request(cmd);
            let v = client.call(method, &path, body).await?;
            let render: Render = match cmd {
                ApiKeyCmd::Create { .. } => {
                    Box::new(|v| format!("{}\nkey (shown once, stored nowhere): {}", api_key_line(v), s(&v["key"])))
                }
                ApiKeyCmd::List { .. } => Box::new(|v| {
                    let lines: Vec<String> =
                        v["data"].as_array().map_or(&[][..], |a| a.as_slice()).iter().map(api_key_line).collect();
                    with_more(lines.join("\n"), v)
                }),
                ApiKeyCmd::Revoke { .. } => Box::new(api_key_line),
            };
            (v, render)
        }
        Command::DeadLetters { endpoint, limit, cursor } => {
            let mut path = format!("/v1/deliveries?status=exhausted&limit={limit}");
            if let Some(e) = endpoint {
                path.push_str(&format!("&endpoint_id={}", enc(e)));
            }
            if let Some(c) = cursor {
                path.push_str(&format!("&cursor={}", enc(c)));
            }
            let v = client.call(M::GET, &path, None).await?;
            (v, Box::new(|v| with_more(deliveries_rows(v["data"].as_array().map_or(&[], |a| a.as_slice())), v)))
        }
        Command::Delivery { id } => {
            (client.call(M::GET, &format!("/v1/deliveries/{}", enc(id)), None).await?, Box::new(timeline))
        }
        Command::Event { id, tenant } => {
            let mut path = format!("/v1/events/{}", enc(id));
            if let Some(t) = tenant {
                path.push_str(&format!("?tenant_id={}", enc(t)));
            }
            let v = client.call(M::GET, &path, None).await?;
            (
                v,
                Box::new(|v| {
                    format!(
                        "event {} ({}) tenant {}\n{}",
                        s(&v["id"]),
                        s(&v["event_type"]),
                        s(&v["tenant_id"]),
                        deliveries_rows(v["deliveries"].as_array().map_or(&[], |a| a.as_slice()))
                    )
                }),
            )
        }
        Command::Replay { id } => {
            let v = client.call(M::POST, &format!("/v1/deliveries/{}/replay", enc(id)), None).await?;
            (
                v,
                Box::new(|v| {
                    format!(
                        "replayed: {} is {}, next attempt {}",
                        s(&v["id"]),
                        s(&v["status"]),
                        s(&v["next_attempt_at"])
                    )
                }),
            )
        }
        Command::Recover { endpoint, since, until } => {
            let mut body = json!({"since": since});
            if let Some(u) = until {
                body["until"] = json!(u);
            }
            let v = client.call(M::POST, &format!("/v1/endpoints/{}/recover", enc(endpoint)), Some(body)).await?;
            (v, Box::new(|v| format!("{}\nfollow it with: webhooks-admin job {}", job_line(v), s(&v["id"]))))
        }
        Command::Job { id } => (client.call(M::GET, &format!("/v1/jobs/{}", enc(id)), None).await?, Box::new(job_line)),
        Command::Expunge { id, tenant } => {
            let query = tenant.as_ref().map(|t| format!("?tenant_id={}", enc(t))).unwrap_or_default();
            let v = client.call(M::POST, &format!("/v1/events/{}/expunge{query}", enc(id)), None).await?;
            let line = |v: &Value| {
                format!(
                    "expunged {} at {}; {} deliveries keep their history",
                    s(&v["id"]),
                    s(&v["expunged_at"]),
                    s(&v["deliveries"])
                )
            };
            (v, Box::new(line))
        }
        Command::Tenants(cmd) => {
            let (method, path, body) = match cmd {
                TenantCmd::Settings { tenant } => (M::GET, format!("/v1/tenants/{}/settings", enc(tenant)), None),
                TenantCmd::Retention { tenant, delivered_days, exhausted_days, event_days } => {
                    let body = json!({"delivered_retention_days": delivered_days, "exhausted_retention_days": exhausted_days, "event_retention_days": event_days});
                    (M::PUT, format!("/v1/tenants/{}/settings", enc(tenant)), Some(body))
                }
                TenantCmd::Purge { tenant, yes } => {
                    if !yes {
                        return Err(format!(
                            "tenants purge {tenant}: add --yes; a purge removes all of the tenant's data and cannot be undone"
                        ));
                    }
                    (M::DELETE, format!("/v1/tenants/{}", enc(tenant)), None)
                }
            };
            let v = client.call(method, &path, body).await?;
            let line = |v: &Value| match v.get("effective") {
                Some(e) => format!(
                    "tenant {}: delivered {} days, exhausted {} days, events {} days (least {}){}",
                    s(&v["tenant_id"]),
                    s(&e["delivered_days"]),
                    s(&e["exhausted_days"]),
                    s(&e["event_days"]),
                    s(&v["min_event_retention_days"]),
                    v.get("purge").map_or(String::new(), |p| format!("; purging: job {}", s(&p["job_id"])))
                ),
                None => job_line(v),
            };
            (v, Box::new(line))
        }
    };
    Ok(if cli.json { serde_json::to_string_pretty(&value).unwrap_or_default() } else { human(&value) })
}

/// What a request that got no answer from the admin API is told: why, in a word, and how to
/// point the CLI at a running API. The URL once (reqwest's own message repeats it).
fn unreachable_api(base: &str, e: &reqwest::Error) -> String {
    let mut reason = if e.is_timeout() {
        format!("no answer within {REQUEST_TIMEOUT_SECONDS} s (connection: {CONNECT_TIMEOUT_SECONDS} s)")
    } else {
        e.to_string()
    };
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            reason = match io.kind() {
                std::io::ErrorKind::ConnectionRefused => "the connection was refused: nothing listens there".into(),
                _ => io.to_string(),
            };
            break;
        }
        source = s.source();
    }
    format!(
        "cannot reach the admin API at {base} ({reason}). Start it locally with `make run`, or point the CLI \
         at it with --api URL or WEBHOOKS_ADMIN_URL (on AWS: the stack's ApiUrl output, with --sigv4)"
    )
}

/// For a subcommand that is not one at the top level but is one further down
/// (`stats` is `endpoints stats`), the full command to type instead.
fn nested_command(name: &str) -> Option<String> {
    use clap::CommandFactory;
    let top = Cli::command();
    top.get_subcommands().find_map(|group| {
        group
            .get_subcommands()
            .find(|sub| sub.get_name() == name || sub.get_all_aliases().any(|a| a == name))
            .map(|sub| format!("webhooks-admin {} {}", group.get_name(), sub.get_name()))
    })
}

/// Parses the command line; an unknown subcommand that names a nested one gets a tip.
fn parse() -> Cli {
    match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let invalid = e.get(clap::error::ContextKind::InvalidSubcommand).map(ToString::to_string);
            let _ = e.print();
            if let Some(hint) = invalid.as_deref().and_then(nested_command) {
                eprintln!("\n  tip: did you mean `{hint}`?");
            }
            std::process::exit(e.exit_code());
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = parse();
    match run(&cli).await {
        Ok(out) => {
            println!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("webhooks-admin: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `value` percent-encoded for a path segment or a query value (ids may hold `+`, which a
/// query would read as a space).
fn enc(value: &str) -> String {
    url::form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigv4_adds_an_execute_api_authorization() {
        let creds = aws_credential_types::Credentials::new("AKIDEXAMPLE", "secret", Some("token".into()), None, "test");
        let body = br#"{"a":1}"#.to_vec();
        let mut req = http::Request::builder()
            .method("POST")
            .uri("https://abc.execute-api.eu-west-1.amazonaws.com/v1/endpoints")
            .header("content-type", "application/json")
            .body(body.clone())
            .unwrap();
        sign(&mut req, &creds, "eu-west-1", &body).unwrap();
        let auth = req.headers()["authorization"].to_str().unwrap();
        assert!(auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"), "{auth}");
        assert!(auth.contains("/eu-west-1/execute-api/aws4_request"), "{auth}");
        assert!(req.headers().contains_key("x-amz-date"));
        assert_eq!(req.headers()["x-amz-security-token"], "token");
    }
}
