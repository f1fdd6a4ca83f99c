//! Webhook delivery on AWS: the library every function binary and the local runtime share.
//!
//! The crate holds the domain ([`model`]), the one place that owns a delivery's state
//! transitions ([`lifecycle`]), retry policies ([`policy`]), Standard Webhooks signing
//! ([`signing`]), the DynamoDB store ([`store`]), the SQS queue ([`queue`]), the HTTP sender
//! ([`sender`]) and the services the Lambda handlers call ([`service`], [`api`]).
//!
//! Every service is a plain async function over an [`App`], which carries the store, the
//! queue, the sender, the clock and the random source as trait objects, so the Lambda
//! binaries, the local runtime and the tests call the same code.

pub mod api;
pub mod app;
pub mod bootstrap;
pub mod clock;
pub mod config;
pub mod destination;
pub mod endpoint_lifecycle;
pub mod error;
pub mod error_text;
pub mod lane;
pub mod lifecycle;
pub mod metrics;
pub mod model;
pub mod notify;
pub mod policy;
pub mod queue;
pub mod rate_limit;
pub mod sender;
pub mod service;
pub mod signing;
pub mod store;
pub mod trust;
pub mod ui;
pub mod validate;

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
