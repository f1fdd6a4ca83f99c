//! Configuration from the environment, read and validated once at cold start.

use std::time::Duration;

/// Everything the services need to know about their surroundings.
///
/// Built by [`Config::from_env`] in the Lambda binaries and the local runtime; tests build it
/// directly (the process environment is shared between parallel tests).
#[derive(Debug, Clone)]
pub struct Config {
    /// DynamoDB table name (`WEBHOOKS_TABLE`, required).
    pub table: String,
    /// SQS queue URL the deliver function consumes (`WEBHOOKS_QUEUE_URL`, required).
    pub queue_url: String,
    /// Per-attempt HTTP timeout (`WEBHOOKS_REQUEST_TIMEOUT_MS`, milliseconds, default 10000:
    /// "2xx within 10 s" from the payment provider's retry docs).
    pub request_timeout: Duration,
    /// The longest wait sent to SQS as `DelaySeconds` (`WEBHOOKS_SQS_MAX_DELAY_SECONDS`,
    /// seconds, default 900 = SQS's own limit). Longer waits go through the sweeper's due index.
    pub sqs_max_delay_seconds: u32,
    /// Local runtime only: seconds between sweeper ticks (`WEBHOOKS_SWEEP_INTERVAL_SECONDS`,
    /// default 60, the one-minute schedule of the deployed sweeper).
    pub sweep_interval: Duration,
    /// Whether the HTTP sender may connect to loopback, private and link-local addresses
    /// (`WEBHOOKS_ALLOW_PRIVATE_DESTINATIONS`, default false). Only the local runtime sets it.
    pub allow_private_destinations: bool,
    /// Whether endpoint URLs must be `https://` (`WEBHOOKS_REQUIRE_HTTPS`, default true in
    /// Lambda, i.e. when `AWS_LAMBDA_FUNCTION_NAME` is set, false elsewhere, as under `make
    /// run`). On: `http://` is refused at registration (422) and at each attempt.
    pub require_https: bool,
    /// Added to the request timeout to form a claim's lease (`WEBHOOKS_LEASE_MARGIN_MS`,
    /// milliseconds, default 5000).
    pub lease_margin: Duration,
    /// How long past its due time a scheduled delivery whose SQS message is already out may
    /// stay unclaimed before the sweeper sends another message (`WEBHOOKS_REDRIVE_AFTER_SECONDS`,
    /// seconds, default 300). Covers a lost message or a crash between write and send.
    pub redrive_after_seconds: u32,
    /// Most items one sweeper tick handles (`WEBHOOKS_SWEEP_BATCH`, default 1000).
    pub sweep_batch: usize,
    /// Number of partitions of the due index (`WEBHOOKS_DUE_SHARDS`, default 8). A sweeper
    /// tick queries each one.
    pub due_shards: u32,
    /// Partitions each endpoint's entries of the `by_endpoint` index are split over
    /// (`WEBHOOKS_ENDPOINT_INDEX_SHARDS`, default 1: unsplit). One hot endpoint writes about 4
    /// index write units per delivery to its partition, against DynamoDB's 1,000 a second per
    /// partition: bench/report.md's capacity model derives the setting for a rate (80 at
    /// 10,000 deliveries a second). A listing by endpoint reads every shard. Never lower it.
    pub endpoint_index_shards: u32,
    /// Partitions each status of the `by_status` index (dead letters, held) is split over
    /// (`WEBHOOKS_STATUS_INDEX_SHARDS`, default 1), as `endpoint_index_shards` (20 at 10,000
    /// dead letters a second). Never lower it.
    pub status_index_shards: u32,
    /// How many copies of each endpoint item the table keeps (`WEBHOOKS_ENDPOINT_COPIES`,
    /// default 1: the endpoint item alone; at most [`MAX_ENDPOINT_COPIES`]): every endpoint
    /// write keeps them in step in its own TransactWriteItems, and the per-event and
    /// per-attempt reads of a tenant's endpoints, and the failures-in-a-row counter, spread
    /// over them. A property of the table, fixed when it is created: the storage version item
    /// holds it, and a function configured with another count refuses to start (changing it
    /// is a migration, see the store's endpoint copies). bench/report.md's capacity model
    /// derives 20 for one hot tenant at 10,000 deliveries a second.
    pub endpoint_copies: u32,
    /// How long one sweeper tick may work (`WEBHOOKS_SWEEP_BUDGET_SECONDS`, seconds, default
    /// 40, under the sweeper function's 60 s timeout): due deliveries first, then job steps
    /// while time is left; what is left runs on the next tick.
    pub sweep_budget: Duration,
    /// The field of an EventBridge event's `detail` that names the tenant
    /// (`WEBHOOKS_EVENTBRIDGE_TENANT_FIELD`, default `tenant_id`).
    pub eventbridge_tenant_field: String,
    /// Days a delivered delivery is kept before DynamoDB TTL removes it
    /// (`WEBHOOKS_DELIVERED_RETENTION_DAYS`, default 30).
    pub delivered_retention_days: u32,
    /// Days an exhausted delivery (a dead letter) is kept (`WEBHOOKS_EXHAUSTED_RETENTION_DAYS`,
    /// default 14, from the payment provider's docs).
    pub exhausted_retention_days: u32,
    /// Days an event's payload item is kept, counted from ingest
    /// (`WEBHOOKS_EVENT_RETENTION_DAYS`, default 90, Svix's default payload retention). Keep
    /// it above the longest schedule (3 days under `standard`) plus
    /// `WEBHOOKS_EXHAUSTED_RETENTION_DAYS` (the replay window). A delivery attempted after it
    /// is gone (held that long, or replayed that late) ends `exhausted` with the error
    /// `payload_expired`; it is not sent.
    pub event_retention_days: u32,
    /// Whether to print CloudWatch Embedded Metric Format lines (on when
    /// `AWS_LAMBDA_FUNCTION_NAME` is set, i.e. in Lambda, or `WEBHOOKS_METRICS=emf`).
    pub emit_metrics: bool,
    /// The `Stack` dimension of every metric (`WEBHOOKS_STACK_NAME`, default `local`; the SAM
    /// template sets it to the CloudFormation stack's name), so two stacks in one account and
    /// region keep separate series.
    pub stack_name: String,
    /// SNS topic for owner notifications (`WEBHOOKS_NOTIFY_TOPIC_ARN`, optional). A structured
    /// log line is written either way.
    pub notify_topic_arn: Option<String>,
    /// Held deliveries one endpoint gets back per sweeper tick after it is re-enabled, and
    /// exhausted deliveries one recover job replays per tick (`WEBHOOKS_RELEASE_PER_TICK`,
    /// default 100).
    pub release_per_tick: usize,
    /// Most endpoints one tenant may have (`WEBHOOKS_MAX_ENDPOINTS_PER_TENANT`, default
    /// [`DEFAULT_MAX_ENDPOINTS_PER_TENANT`]): every event of a tenant reads and fans out to
    /// all of its endpoints, so without a bound one portal session could turn each event
    /// into thousands of signed POSTs at one victim URL.
    pub max_endpoints_per_tenant: u32,
    /// Whether an event for a tenant with no endpoint at all is refused, 422 `unknown_tenant`
    /// (`WEBHOOKS_REJECT_UNKNOWN_TENANTS`, default false: it is answered 202 with a
    /// `no_subscribed_endpoint` warning, nothing stored). Catches a typo'd tenant id at once,
    /// for stacks whose tenants always have an endpoint before they send.
    pub reject_unknown_tenants: bool,
    /// The addresses attempts leave from with the template's `StaticEgressIps=enabled`
    /// (`WEBHOOKS_EGRESS_IPS`, comma separated; empty: Lambda's own, not fixed), shown on the
    /// portal's endpoint page so receivers can allow-list them.
    pub egress_ips: Vec<String>,
    /// The origins that may embed the portal in a frame (`WEBHOOKS_PORTAL_FRAME_ANCESTORS`,
    /// space separated, each `https://host[:port]`, `http://...` or `'self'`; default empty:
    /// none, `frame-ancestors 'none'` and `X-Frame-Options: DENY`). See
    /// [`crate::http::ui::portal`].
    pub portal_frame_ancestors: Vec<String>,
    /// The EventBridge bus operational events are put on (`WEBHOOKS_OPERATIONAL_EVENT_BUS`;
    /// unset: they are log lines only). See [`crate::domain::operational`].
    pub operational_event_bus: Option<String>,
    /// Multiplies every retry wait before it is scheduled (`WEBHOOKS_WAIT_SCALE`, default 1).
    /// For tests and demos only: `0.0001` runs the 36-hour `standard` schedule in seconds.
    /// Attempt records keep the unscaled wait the policy chose.
    pub wait_scale: f64,
    /// How long after a rotation the previous secret still signs (`WEBHOOKS_SECRET_ROTATION_HOURS`,
    /// hours, default 24, as Standard Webhooks suggests).
    pub secret_rotation: std::time::Duration,
    /// The Secrets Manager secret holding the key that signs tenant portal tokens
    /// (`WEBHOOKS_PORTAL_SECRET_ARN`, an ARN or name; the SAM template passes its
    /// `PortalTokenKey` to admin and portal). The key itself is never in the environment: the
    /// functions read it at cold start and again every `portal_key_refresh` (see
    /// [`crate::token_keys`]). Unset: a random key made once per process, enough where one
    /// process mints and checks tokens (the local runtime, tests).
    pub portal_secret_arn: Option<String>,
    /// How long a process uses its copy of the portal token keys before reading the secret
    /// again (`WEBHOOKS_PORTAL_KEY_REFRESH_SECONDS`, seconds, default
    /// [`DEFAULT_PORTAL_KEY_REFRESH_SECONDS`]): a rotation reaches every process within it.
    pub portal_key_refresh: Duration,
    /// How long after the secret's current version was created (its `CreatedDate`) the
    /// previous version still verifies portal tokens and forms
    /// (`WEBHOOKS_PORTAL_KEY_OVERLAP_SECONDS`, seconds, default
    /// [`DEFAULT_PORTAL_KEY_OVERLAP_SECONDS`]; more than twice `portal_key_refresh`, the time
    /// the previous version still signs). After it the old key stops.
    pub portal_key_overlap: Duration,
    /// The slow lane's SQS queue URL (`WEBHOOKS_SLOW_QUEUE_URL`, optional; without it there
    /// is no slow lane and every attempt goes through `queue_url`). See [`crate::domain::lane`].
    pub slow_queue_url: Option<String>,
    /// An attempt that took at least this long sends its endpoint's attempts to the slow lane
    /// (`WEBHOOKS_SLOW_LANE_THRESHOLD_MS`, milliseconds, default 2000: a fifth of the 10 s
    /// request timeout, so a main-lane batch is held at most about 2 s by any receiver).
    pub slow_lane_threshold: Duration,
    /// How long an endpoint stays in the slow lane after its last slow attempt
    /// (`WEBHOOKS_SLOW_LANE_HOLD_SECONDS`, seconds, default 600). A fast attempt in the slow
    /// lane takes it back to the main lane sooner.
    pub slow_lane_hold: Duration,
    /// Which event types ingest takes (`WEBHOOKS_EVENT_TYPES`, `open` or `registered`, default
    /// `open`): see [`EventTypesMode`]. Either way a type in the catalog has its schema and
    /// its archived flag enforced.
    pub event_types: EventTypesMode,
    /// How long a process uses what it read of an event type from the catalog
    /// (`WEBHOOKS_EVENT_TYPE_CACHE_SECONDS`, seconds, default 60): a catalog change reaches
    /// every ingest process within it (at once in the process that made it).
    pub event_type_cache: Duration,
    /// How long a process uses what it read of a producer's API key
    /// (`WEBHOOKS_API_KEY_CACHE_SECONDS`, seconds, default 30, at most
    /// [`MAX_API_KEY_CACHE_SECONDS`]): a revocation is refused by every ingest process within
    /// it (at once by the process that revoked it), and a key's `last_used_at` is written at
    /// most once per process within it (0: a GetItem and an UpdateItem per event).
    pub api_key_cache: Duration,
}

/// The longest `WEBHOOKS_API_KEY_CACHE_SECONDS` taken (seconds): the bound on how long a
/// revoked key may still be taken by a process that read it before.
pub const MAX_API_KEY_CACHE_SECONDS: u64 = 300;

/// `WEBHOOKS_EVENT_TYPES`: whether ingest takes event types the catalog does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EventTypesMode {
    /// Any event type, as before the catalog (`open`, the default).
    #[default]
    Open,
    /// Only event types in the catalog; any other is refused, 422 `unknown_event_type`
    /// (`registered`).
    Registered,
}

impl std::str::FromStr for EventTypesMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "open" => Ok(Self::Open),
            "registered" => Ok(Self::Registered),
            _ => Err("must be open or registered".into()),
        }
    }
}

/// Which routes the admin binary serves (`WEBHOOKS_SERVE`): `portal` for the tenant portal
/// alone ([`crate::http::ui::portal::standalone`], the SAM template's PortalFunction, behind routes
/// without IAM auth), anything else or unset for the admin API.
pub const SERVE_VAR: &str = "WEBHOOKS_SERVE";

/// Most copies of an endpoint item (`WEBHOOKS_ENDPOINT_COPIES`): an endpoint change writes
/// them in one TransactWriteItems with its delivery and jobs, and DynamoDB takes at most 100
/// items in one.
pub const MAX_ENDPOINT_COPIES: u32 = 50;

/// The smallest `WEBHOOKS_LEASE_MARGIN_MS`: 1000 milliseconds, room for the AWS calls between
/// a claim and its POST and for the record after it.
pub const MIN_LEASE_MARGIN_MS: u64 = 1_000;

/// The default `WEBHOOKS_PORTAL_KEY_REFRESH_SECONDS`: 300 seconds. Every process verifies with
/// a rotated portal token key within 5 minutes of the rotation and signs with it from 10
/// minutes on ([`crate::token_keys`]), for 12 to 24 Secrets Manager reads an hour per warm
/// admin or portal instance.
pub const DEFAULT_PORTAL_KEY_REFRESH_SECONDS: u64 = 300;

/// The default `WEBHOOKS_PORTAL_KEY_OVERLAP_SECONDS`: 4200 seconds (70 minutes), the default
/// portal session lifetime (3600 s, [`crate::http::ui::token::DEFAULT_TTL_SECONDS`]) plus two refresh
/// intervals (600 s), during which processes still sign with the previous key: a session
/// minted with it just before the switch lives its whole default hour. A longer session
/// signed with it ends at the overlap.
pub const DEFAULT_PORTAL_KEY_OVERLAP_SECONDS: u64 = 4_200;

/// Largest accepted event payload in bytes (256 KiB, SQS's and EventBridge's own limit).
pub const MAX_PAYLOAD_BYTES: usize = 256 * 1024;

/// A configuration variable that is missing or does not parse.
#[derive(Debug, thiserror::Error)]
#[error("configuration: {name}: {problem}")]
pub struct ConfigError {
    /// The environment variable's name.
    pub name: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

/// The default most endpoints per tenant: 50. Stripe allows 16 webhook endpoints per account
/// and GitHub 20 webhooks per repository (their docs); 50 leaves a SaaS's tenants room for
/// staging, production and a few integrations, while one event fans out to at most 50 POSTs.
pub const DEFAULT_MAX_ENDPOINTS_PER_TENANT: u32 = 50;

impl Config {
    /// A configuration with every default, for the given table and queue.
    pub fn new(table: impl Into<String>, queue_url: impl Into<String>) -> Self {
        Self {
            table: table.into(),
            queue_url: queue_url.into(),
            request_timeout: Duration::from_millis(10_000),
            sqs_max_delay_seconds: 900,
            sweep_interval: Duration::from_secs(60),
            allow_private_destinations: false,
            require_https: false,
            lease_margin: Duration::from_millis(5_000),
            redrive_after_seconds: 300,
            sweep_batch: 1000,
            due_shards: 8,
            endpoint_index_shards: 1,
            status_index_shards: 1,
            endpoint_copies: 1,
            sweep_budget: Duration::from_secs(40),
            eventbridge_tenant_field: "tenant_id".to_string(),
            delivered_retention_days: 30,
            exhausted_retention_days: 14,
            event_retention_days: 90,
            emit_metrics: false,
            stack_name: "local".to_string(),
            notify_topic_arn: None,
            release_per_tick: 100,
            max_endpoints_per_tenant: DEFAULT_MAX_ENDPOINTS_PER_TENANT,
            reject_unknown_tenants: false,
            egress_ips: Vec::new(),
            portal_frame_ancestors: Vec::new(),
            operational_event_bus: None,
            wait_scale: 1.0,
            secret_rotation: Duration::from_secs(24 * 3600),
            portal_secret_arn: None,
            portal_key_refresh: Duration::from_secs(DEFAULT_PORTAL_KEY_REFRESH_SECONDS),
            portal_key_overlap: Duration::from_secs(DEFAULT_PORTAL_KEY_OVERLAP_SECONDS),
            slow_queue_url: None,
            slow_lane_threshold: Duration::from_millis(2_000),
            slow_lane_hold: Duration::from_secs(600),
            event_types: EventTypesMode::Open,
            event_type_cache: Duration::from_secs(60),
            api_key_cache: Duration::from_secs(30),
        }
    }

    /// Reads the `WEBHOOKS_*` variables.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first variable that is missing (table and queue URL only)
    /// or fails to parse.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Like [`Config::from_env`], reading variables through `get`.
    ///
    /// # Errors
    /// As [`Config::from_env`].
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let required = |name: &'static str| {
            get(name).filter(|v| !v.is_empty()).ok_or(ConfigError { name, problem: "is required".into() })
        };
        let mut c = Self::new(required("WEBHOOKS_TABLE")?, required("WEBHOOKS_QUEUE_URL")?);
        c.request_timeout = Duration::from_millis(parse(&get, "WEBHOOKS_REQUEST_TIMEOUT_MS", 10_000)?);
        c.sqs_max_delay_seconds = parse(&get, "WEBHOOKS_SQS_MAX_DELAY_SECONDS", 900)?;
        if c.sqs_max_delay_seconds > 900 {
            return Err(ConfigError {
                name: "WEBHOOKS_SQS_MAX_DELAY_SECONDS",
                problem: "must be at most 900 (the SQS DelaySeconds limit)".into(),
            });
        }
        c.sweep_interval = Duration::from_secs(parse(&get, "WEBHOOKS_SWEEP_INTERVAL_SECONDS", 60)?);
        c.allow_private_destinations = parse(&get, "WEBHOOKS_ALLOW_PRIVATE_DESTINATIONS", false)?;
        let in_lambda = get("AWS_LAMBDA_FUNCTION_NAME").is_some_and(|v| !v.is_empty());
        c.require_https = parse(&get, "WEBHOOKS_REQUIRE_HTTPS", in_lambda)?;
        c.lease_margin = Duration::from_millis(parse(&get, "WEBHOOKS_LEASE_MARGIN_MS", 5_000)?);
        if c.lease_margin < Duration::from_millis(MIN_LEASE_MARGIN_MS) {
            // Deliver starts a POST only with a whole request timeout left on its lease: the
            // margin must cover the reads between claim and POST and the record after it.
            return Err(ConfigError {
                name: "WEBHOOKS_LEASE_MARGIN_MS",
                problem: format!("must be at least {MIN_LEASE_MARGIN_MS} (the AWS calls around a POST)"),
            });
        }
        c.redrive_after_seconds = parse(&get, "WEBHOOKS_REDRIVE_AFTER_SECONDS", 300)?;
        c.sweep_batch = parse(&get, "WEBHOOKS_SWEEP_BATCH", 1000)?;
        c.due_shards = parse(&get, "WEBHOOKS_DUE_SHARDS", 8)?;
        if c.due_shards == 0 {
            return Err(ConfigError { name: "WEBHOOKS_DUE_SHARDS", problem: "must be at least 1".into() });
        }
        c.endpoint_index_shards = parse(&get, "WEBHOOKS_ENDPOINT_INDEX_SHARDS", 1)?;
        c.status_index_shards = parse(&get, "WEBHOOKS_STATUS_INDEX_SHARDS", 1)?;
        for (name, v) in [
            ("WEBHOOKS_ENDPOINT_INDEX_SHARDS", c.endpoint_index_shards),
            ("WEBHOOKS_STATUS_INDEX_SHARDS", c.status_index_shards),
        ] {
            if !(1..=1000).contains(&v) {
                return Err(ConfigError { name, problem: "must be from 1 to 1000".into() });
            }
        }
        c.endpoint_copies = parse(&get, "WEBHOOKS_ENDPOINT_COPIES", 1)?;
        if !(1..=MAX_ENDPOINT_COPIES).contains(&c.endpoint_copies) {
            return Err(ConfigError {
                name: "WEBHOOKS_ENDPOINT_COPIES",
                problem: format!("must be from 1 to {MAX_ENDPOINT_COPIES}"),
            });
        }
        c.sweep_budget = Duration::from_secs(parse(&get, "WEBHOOKS_SWEEP_BUDGET_SECONDS", 40)?);
        if let Some(field) = get("WEBHOOKS_EVENTBRIDGE_TENANT_FIELD").filter(|v| !v.is_empty()) {
            c.eventbridge_tenant_field = field;
        }
        c.delivered_retention_days = parse(&get, "WEBHOOKS_DELIVERED_RETENTION_DAYS", 30)?;
        c.exhausted_retention_days = parse(&get, "WEBHOOKS_EXHAUSTED_RETENTION_DAYS", 14)?;
        c.event_retention_days = parse(&get, "WEBHOOKS_EVENT_RETENTION_DAYS", 90)?;
        if let Some(stack) = get("WEBHOOKS_STACK_NAME").filter(|v| !v.is_empty()) {
            c.stack_name = stack;
        }
        c.notify_topic_arn = get("WEBHOOKS_NOTIFY_TOPIC_ARN").filter(|v| !v.is_empty());
        c.release_per_tick = parse(&get, "WEBHOOKS_RELEASE_PER_TICK", 100)?;
        c.max_endpoints_per_tenant =
            parse(&get, "WEBHOOKS_MAX_ENDPOINTS_PER_TENANT", DEFAULT_MAX_ENDPOINTS_PER_TENANT)?;
        if c.max_endpoints_per_tenant == 0 {
            return Err(ConfigError {
                name: "WEBHOOKS_MAX_ENDPOINTS_PER_TENANT",
                problem: "must be at least 1".into(),
            });
        }
        c.reject_unknown_tenants = parse(&get, "WEBHOOKS_REJECT_UNKNOWN_TENANTS", false)?;
        c.operational_event_bus = get("WEBHOOKS_OPERATIONAL_EVENT_BUS").filter(|v| !v.is_empty());
        c.egress_ips = get("WEBHOOKS_EGRESS_IPS")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|ip| !ip.is_empty())
            .map(String::from)
            .collect();
        c.portal_frame_ancestors = frame_ancestors(&get("WEBHOOKS_PORTAL_FRAME_ANCESTORS").unwrap_or_default())?;
        c.wait_scale = parse(&get, "WEBHOOKS_WAIT_SCALE", 1.0)?;
        if !(c.wait_scale > 0.0 && c.wait_scale <= 1.0) {
            return Err(ConfigError { name: "WEBHOOKS_WAIT_SCALE", problem: "must be above 0 and at most 1".into() });
        }
        c.secret_rotation = Duration::from_secs(3600 * parse::<u64>(&get, "WEBHOOKS_SECRET_ROTATION_HOURS", 24)?);
        c.portal_secret_arn = get("WEBHOOKS_PORTAL_SECRET_ARN").filter(|v| !v.is_empty());
        c.portal_key_refresh = Duration::from_secs(parse(
            &get,
            "WEBHOOKS_PORTAL_KEY_REFRESH_SECONDS",
            DEFAULT_PORTAL_KEY_REFRESH_SECONDS,
        )?);
        c.portal_key_overlap = Duration::from_secs(parse(
            &get,
            "WEBHOOKS_PORTAL_KEY_OVERLAP_SECONDS",
            DEFAULT_PORTAL_KEY_OVERLAP_SECONDS,
        )?);
        if c.portal_key_overlap <= c.portal_key_refresh.saturating_mul(2) {
            // Processes sign with the previous key until the current one is two refresh
            // intervals old (so each has read it first): the previous key must verify longer.
            return Err(ConfigError {
                name: "WEBHOOKS_PORTAL_KEY_OVERLAP_SECONDS",
                problem: "must be more than twice WEBHOOKS_PORTAL_KEY_REFRESH_SECONDS".into(),
            });
        }
        c.slow_queue_url = get("WEBHOOKS_SLOW_QUEUE_URL").filter(|v| !v.is_empty());
        // The lane of a record is told by the queue name in its eventSourceARN: a URL whose
        // name is empty (a trailing `/`) would never match, and the slow lane would loop.
        if c.slow_queue_url.as_deref().is_some_and(|u| queue_name(u).is_empty()) {
            return Err(ConfigError {
                name: "WEBHOOKS_SLOW_QUEUE_URL",
                problem: "must end with the queue's name (no trailing /)".into(),
            });
        }
        c.slow_lane_threshold = Duration::from_millis(parse(&get, "WEBHOOKS_SLOW_LANE_THRESHOLD_MS", 2_000)?);
        c.slow_lane_hold = Duration::from_secs(parse(&get, "WEBHOOKS_SLOW_LANE_HOLD_SECONDS", 600)?);
        c.event_types = parse(&get, "WEBHOOKS_EVENT_TYPES", EventTypesMode::Open)?;
        c.event_type_cache = Duration::from_secs(parse(&get, "WEBHOOKS_EVENT_TYPE_CACHE_SECONDS", 60)?);
        let api_key_cache: u64 = parse(&get, "WEBHOOKS_API_KEY_CACHE_SECONDS", 30)?;
        if api_key_cache > MAX_API_KEY_CACHE_SECONDS {
            return Err(ConfigError {
                name: "WEBHOOKS_API_KEY_CACHE_SECONDS",
                problem: format!(
                    "{api_key_cache} is over {MAX_API_KEY_CACHE_SECONDS}: a revoked key would keep working that long"
                ),
            });
        }
        c.api_key_cache = Duration::from_secs(api_key_cache);
        c.emit_metrics = in_lambda || get("WEBHOOKS_METRICS").is_some_and(|v| v == "emf");
        Ok(c)
    }

    /// A claim's lease: the request timeout plus the margin.
    pub fn lease(&self) -> Duration {
        self.request_timeout + self.lease_margin
    }
}

fn parse<T: std::str::FromStr>(
    get: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    default: T,
) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    match get(name).filter(|v| !v.is_empty()) {
        None => Ok(default),
        Some(v) => {
            v.trim().parse().map_err(|e: T::Err| ConfigError { name, problem: format!("{v:?} does not parse: {e}") })
        }
    }
}

/// The name of a queue from its URL (`https://.../{account}/{name}`) or ARN
/// (`arn:aws:sqs:{region}:{account}:{name}`).
pub fn queue_name(url_or_arn: &str) -> &str {
    url_or_arn.rsplit(['/', ':']).next().unwrap_or(url_or_arn)
}

/// `WEBHOOKS_PORTAL_FRAME_ANCESTORS`: space-separated origins (`https://host[:port]`,
/// `http://...`) or `'self'`, each as the `frame-ancestors` directive takes it (a trailing
/// `/` is dropped).
///
/// # Errors
/// [`ConfigError`] naming an entry that is neither (a path, a query, a wildcard or a
/// character that would end the directive, such as `;`, is refused: the value goes into a
/// response header).
fn frame_ancestors(value: &str) -> Result<Vec<String>, ConfigError> {
    value
        .split_whitespace()
        .map(|entry| {
            if entry == "'self'" {
                return Ok(entry.to_string());
            }
            let origin = url::Url::parse(entry)
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
                .map(|u| u.origin().ascii_serialization())
                .filter(|o| o == entry.trim_end_matches('/'));
            origin.ok_or_else(|| ConfigError {
                name: "WEBHOOKS_PORTAL_FRAME_ANCESTORS",
                problem: format!("{entry:?} is not an origin (https://host[:port]) or 'self'"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_and_overrides() {
        let c = Config::from_lookup(lookup(&[
            ("WEBHOOKS_TABLE", "t"),
            ("WEBHOOKS_QUEUE_URL", "q"),
            ("WEBHOOKS_SQS_MAX_DELAY_SECONDS", "3"),
        ]))
        .unwrap();
        assert_eq!(c.request_timeout, Duration::from_secs(10));
        assert_eq!(c.sqs_max_delay_seconds, 3);
        assert!(!c.allow_private_destinations);
        assert_eq!((c.event_types, c.event_type_cache), (EventTypesMode::Open, Duration::from_secs(60)));
        let c = Config::from_lookup(lookup(&[
            ("WEBHOOKS_TABLE", "t"),
            ("WEBHOOKS_QUEUE_URL", "q"),
            ("WEBHOOKS_EVENT_TYPES", "registered"),
        ]))
        .unwrap();
        assert_eq!(c.event_types, EventTypesMode::Registered);
        let e = Config::from_lookup(lookup(&[
            ("WEBHOOKS_TABLE", "t"),
            ("WEBHOOKS_QUEUE_URL", "q"),
            ("WEBHOOKS_EVENT_TYPES", "closed"),
        ]))
        .unwrap_err();
        assert_eq!(e.name, "WEBHOOKS_EVENT_TYPES");
    }

    #[test]
    fn endpoint_copies_are_one_setting_from_1_to_50() {
        let with = |pairs: &[(&str, &str)]| {
            let mut all = vec![("WEBHOOKS_TABLE", "t"), ("WEBHOOKS_QUEUE_URL", "q")];
            all.extend_from_slice(pairs);
            Config::from_lookup(lookup(&all))
        };
        assert_eq!(with(&[]).unwrap().endpoint_copies, 1);
        assert_eq!(with(&[("WEBHOOKS_ENDPOINT_COPIES", "20")]).unwrap().endpoint_copies, 20);
        for bad in ["0", "51"] {
            assert_eq!(with(&[("WEBHOOKS_ENDPOINT_COPIES", bad)]).unwrap_err().name, "WEBHOOKS_ENDPOINT_COPIES");
        }
    }

    #[test]
    fn the_portal_key_is_named_by_its_secret_and_its_overlap_outlasts_two_refreshes() {
        let with = |pairs: &[(&str, &str)]| {
            let mut all = vec![("WEBHOOKS_TABLE", "t"), ("WEBHOOKS_QUEUE_URL", "q")];
            all.extend_from_slice(pairs);
            Config::from_lookup(lookup(&all))
        };
        let c = with(&[]).unwrap();
        assert_eq!(c.portal_secret_arn, None);
        assert_eq!((c.portal_key_refresh, c.portal_key_overlap), (Duration::from_secs(300), Duration::from_secs(4200)));
        let arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:portal-AbCdEf";
        let c = with(&[
            ("WEBHOOKS_PORTAL_SECRET_ARN", arn),
            ("WEBHOOKS_PORTAL_KEY_REFRESH_SECONDS", "2"),
            ("WEBHOOKS_PORTAL_KEY_OVERLAP_SECONDS", "5"),
        ])
        .unwrap();
        assert_eq!(c.portal_secret_arn.as_deref(), Some(arn));
        assert_eq!((c.portal_key_refresh, c.portal_key_overlap), (Duration::from_secs(2), Duration::from_secs(5)));
        let e = with(&[("WEBHOOKS_PORTAL_KEY_REFRESH_SECONDS", "300"), ("WEBHOOKS_PORTAL_KEY_OVERLAP_SECONDS", "600")])
            .unwrap_err();
        assert_eq!(e.name, "WEBHOOKS_PORTAL_KEY_OVERLAP_SECONDS");
    }

    #[test]
    fn missing_table_and_bad_numbers_are_named() {
        let e = Config::from_lookup(lookup(&[("WEBHOOKS_QUEUE_URL", "q")])).unwrap_err();
        assert_eq!(e.name, "WEBHOOKS_TABLE");
        let e = Config::from_lookup(lookup(&[
            ("WEBHOOKS_TABLE", "t"),
            ("WEBHOOKS_QUEUE_URL", "q"),
            ("WEBHOOKS_REQUEST_TIMEOUT_MS", "ten"),
        ]))
        .unwrap_err();
        assert_eq!(e.name, "WEBHOOKS_REQUEST_TIMEOUT_MS");
        let e = Config::from_lookup(lookup(&[
            ("WEBHOOKS_TABLE", "t"),
            ("WEBHOOKS_QUEUE_URL", "q"),
            ("WEBHOOKS_SQS_MAX_DELAY_SECONDS", "901"),
        ]))
        .unwrap_err();
        assert_eq!(e.name, "WEBHOOKS_SQS_MAX_DELAY_SECONDS");
        let e = Config::from_lookup(lookup(&[
            ("WEBHOOKS_TABLE", "t"),
            ("WEBHOOKS_QUEUE_URL", "q"),
            ("WEBHOOKS_SLOW_QUEUE_URL", "https://sqs.us-east-1.amazonaws.com/1/slow/"),
        ]))
        .unwrap_err();
        assert_eq!(e.name, "WEBHOOKS_SLOW_QUEUE_URL");
    }

    #[test]
    fn portal_frame_ancestors_are_origins_or_self() {
        let ok = frame_ancestors(" https://app.example.com  'self' http://127.0.0.1:3000/ ").unwrap();
        assert_eq!(ok, ["https://app.example.com", "'self'", "http://127.0.0.1:3000"]);
        for bad in ["https://a.example/path", "https://a.example?x", "a.example", "'none'; script-src *"] {
            assert!(frame_ancestors(bad).is_err(), "{bad}");
        }
    }
}
