//! Webhook delivery on AWS: the library every function binary and the local runtime share.
//!
//! Every service is a plain async function over an [`App`], which carries the store, the
//! queue, the sender, the clock and the random source as trait objects, so the Lambda
//! binaries, the local runtime and the tests call the same code.
//!
//! # A tour, layer by layer
//!
//! Each layer uses only itself and the ones above it in this table; `tests/tests/it/iam.rs`
//! fails on an arrow up a layer (`the_library_imports_only_downward`) and on any import
//! cycle (`the_library_has_no_import_cycle`).
//!
//! | layer | modules | what they hold |
//! |---|---|---|
//! | base | [`config`], [`clock`], [`error`], [`error_text`] | the environment read once; time and randomness; the errors services answer with (HTTP status and code); how an error chain is shown |
//! | domain | [`domain`]: [`model`](domain::model), [`delivery_lifecycle`](domain::delivery_lifecycle), [`endpoint_lifecycle`](domain::endpoint_lifecycle), [`retry_policy`](domain::retry_policy), [`signing`](domain::signing), [`ids`](domain::ids), [`lane`](domain::lane), [`rate`](domain::rate), [`event_type`](domain::event_type) | the entities, their state machines, retry schedules, Standard Webhooks signing, the id rule and the id newtypes (`TenantId`, `EndpointId`, `EventId`, `DeliveryId`, `JobId`: parsed once where an id comes in, typed from there to the store), the slow-lane and rate decisions, the event-type catalog's entries and schemas: no async, no AWS call |
//! | adapters | [`store`] (DynamoDB; its shape in `docs/storage.md`), [`queue`] (SQS), [`sender`] with [`destination`](sender::destination) and [`tls_roots`](sender::tls_roots) (the HTTP POST, where it may go, TLS roots), [`notify`] (SNS), [`token_keys`] (Secrets Manager), [`metrics`], [`bootstrap`] | AWS and HTTP behind traits |
//! | app | [`app`] | the [`App`] every service takes: store, queues, sender, clock, random source |
//! | services | [`service`]: ingest, deliver, sweep, endpoints (with endpoint_settings), deliveries, endpoint_state, attention, lanes, throttle, event_types (the catalog), tenant_settings and purge (the data's lifecycle) | what a Lambda handler calls |
//! | HTTP | [`http`]: [`api`](http::api) (with its extractors and the event-type catalog's routes), [`local_host`](http::local_host) (the local server's Host guard), [`ui`](http::ui) (dashboard, portal, session tokens) | routers and pages over the services |
//!
//! Who may change an entity's state, in one file each:
//! - a **delivery**: [`domain::delivery_lifecycle`] builds every transition (claim, record,
//!   re-drive, lease recovery, hold, release, replay, end), each a guarded, versioned
//!   conditional write the store applies;
//! - an **endpoint**: [`domain::endpoint_lifecycle`] (enabled, paused, probing, disabled;
//!   every change one transaction guarded on the endpoint's version, with the jobs it needs);
//! - a **job**: [`service::endpoint_state`] runs each step under the job's lease and writes
//!   its progress only while the lease holds ([`store::JobStore::save_job`]); a tenant's purge
//!   job's steps are [`service::purge`]'s, each delete guarded by the same lease;
//! - a **tenant's settings** (retention overrides, purge mark; [`domain::tenant`]):
//!   [`service::tenant_settings`] and [`service::purge`], each write guarded on their version.

pub mod app;
pub mod bootstrap;
pub mod clock;
pub mod config;
pub mod domain;
pub mod error;
pub mod error_text;
pub mod http;
pub mod metrics;
pub mod notify;
pub mod queue;
pub mod sender;
pub mod service;
pub mod store;
pub mod token_keys;

pub use app::App;
pub use config::Config;

/// Installs the log subscriber: JSON lines (CloudWatch-friendly) unless `WEBHOOKS_LOG_FORMAT`
/// is `text` (coloured only when standard output is a terminal, so a log file holds plain
/// text); level from `RUST_LOG`, default `info`.
pub fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(false);
    let result = if std::env::var("WEBHOOKS_LOG_FORMAT").is_ok_and(|v| v == "text") {
        builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout())).try_init()
    } else {
        builder.json().without_time().try_init()
    };
    // A subscriber already installed (tests) is fine.
    let _ = result;
}
