//! The dependencies every service takes: store, queue, sender, clock, randomness, config.

use crate::clock::{Clock, Random, SystemClock};
use crate::config::Config;
use crate::notify::{LogNotifier, Notifier, SnsNotifier};
use crate::queue::{Queue, SqsQueue};
use crate::sender::{HttpSender, Sender};
use crate::store::{DynamoStore, Store, version};
use crate::token_keys::{PortalKeys, Rotation};
use std::sync::Arc;

/// The service context. Cheap to clone (every field is shared).
#[derive(Clone)]
pub struct App {
    /// Configuration.
    pub config: Arc<Config>,
    /// Endpoints and deliveries.
    pub store: Arc<dyn Store>,
    /// The attempt queue.
    pub queue: Arc<dyn Queue>,
    /// The HTTP sender.
    pub sender: Arc<dyn Sender>,
    /// Now.
    pub clock: Arc<dyn Clock>,
    /// Jitter, ids and secrets.
    pub random: Arc<Random>,
    /// Owner notifications (log only unless set with [`App::with_notifier`]).
    pub notifier: Arc<dyn Notifier>,
    /// The slow lane's queue, when there is one (see [`crate::domain::lane`]; set with
    /// [`App::with_slow_queue`], or by [`App::from_clients`] from `config.slow_queue_url`).
    pub slow_queue: Option<Arc<dyn Queue>>,
    /// The keys of tenant portal tokens: the Secrets Manager secret of
    /// `config.portal_secret_arn` ([`App::from_aws`]), else a random key per process.
    pub portal_keys: Arc<PortalKeys>,
    /// OAuth tokens of the endpoints whose `auth` is `oauth2_client_credentials`, cached for
    /// the process ([`crate::sender::oauth`]).
    pub tokens: Arc<crate::sender::oauth::TokenCache>,
    /// The event types this process read from the catalog, with their compiled schemas
    /// (kept `config.event_type_cache`; see [`crate::service::event_types::enforce`]).
    pub catalog: Arc<crate::domain::event_type::Catalog>,
    /// The producers' API keys this process read (kept `config.api_key_cache`; see
    /// [`crate::service::api_keys::authenticate`]).
    pub api_keys: Arc<crate::domain::api_key::KeyCache>,
}

/// The AWS clients could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("setup: {0}")]
pub struct SetupError(pub String);

impl App {
    /// An app over the given parts.
    pub fn new(
        config: Config,
        store: Arc<dyn Store>,
        queue: Arc<dyn Queue>,
        sender: Arc<dyn Sender>,
        clock: Arc<dyn Clock>,
        random: Arc<Random>,
    ) -> Self {
        Self {
            config: Arc::new(config),
            store,
            queue,
            sender,
            clock,
            random,
            notifier: Arc::new(LogNotifier),
            slow_queue: None,
            portal_keys: Arc::new(PortalKeys::process()),
            tokens: Arc::new(crate::sender::oauth::TokenCache::new()),
            catalog: Arc::default(),
            api_keys: Arc::default(),
        }
    }

    fn with_slow(mut self, queue: Option<Arc<dyn Queue>>) -> Self {
        self.slow_queue = queue;
        self
    }

    /// The same app with a slow lane queue.
    pub fn with_slow_queue(mut self, queue: Arc<dyn Queue>) -> Self {
        self.slow_queue = Some(queue);
        self
    }

    /// The same app with other portal token keys.
    pub fn with_portal_keys(mut self, keys: PortalKeys) -> Self {
        self.portal_keys = Arc::new(keys);
        self
    }

    /// The same app, also putting operational events on EventBridge `bus` (its notifier
    /// wrapped in [`crate::notify::EventBusNotifier`]).
    pub fn with_operational_bus(mut self, client: aws_sdk_eventbridge::Client, bus: impl Into<String>) -> Self {
        self.notifier = Arc::new(crate::notify::EventBusNotifier::new(self.notifier.clone(), client, bus));
        self
    }

    /// The same app with another notifier.
    pub fn with_notifier(mut self, notifier: Arc<dyn Notifier>) -> Self {
        self.notifier = notifier;
        self
    }

    /// The real thing: DynamoDB, SQS and HTTP clients from the SDK's standard configuration
    /// (region, credentials and `AWS_ENDPOINT_URL` from the environment), the system clock
    /// and an OS-seeded random source, the portal token keys from the Secrets Manager secret
    /// `config.portal_secret_arn` names (read on first use, see [`crate::token_keys`]),
    /// once the table's storage version is this release's and its count of endpoint copies is
    /// `config.endpoint_copies` ([`version::ensure`]: read, or written on a table without
    /// them). Every Lambda and the local runtime start through here, so none starts on a table
    /// of another storage version or copy count.
    ///
    /// # Errors
    /// [`SetupError`] when the HTTP client cannot be built, or with [`version::ensure`]'s
    /// message when the table holds another storage version or copy count (naming both) or
    /// its version cannot be read or written.
    pub async fn from_aws(config: Config) -> Result<Self, SetupError> {
        let sdk = aws_sdk_config().await;
        let sns = config.notify_topic_arn.as_ref().map(|_| aws_sdk_sns::Client::new(&sdk));
        let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
        version::ensure(&dynamodb, &config.table, config.endpoint_copies)
            .await
            .map_err(|e| SetupError(e.to_string()))?;
        let rotation = Rotation { refresh: config.portal_key_refresh, overlap: config.portal_key_overlap };
        let portal_keys = config
            .portal_secret_arn
            .clone()
            .map(|arn| PortalKeys::secret(aws_sdk_secretsmanager::Client::new(&sdk), arn, rotation));
        let bus = config.operational_event_bus.clone();
        let mut app = Self::from_clients(config, dynamodb, aws_sdk_sqs::Client::new(&sdk), sns)?;
        if let Some(bus) = bus {
            app = app.with_operational_bus(aws_sdk_eventbridge::Client::new(&sdk), bus);
        }
        Ok(match portal_keys {
            Some(keys) => app.with_portal_keys(keys),
            None => app,
        })
    }

    /// As [`App::from_aws`], over the given SDK clients (the bench passes clients that count
    /// their requests). Owner notifications go to SNS when both `config.notify_topic_arn` and
    /// `sns` are given, else to the log only.
    ///
    /// # Errors
    /// [`SetupError`] when the HTTP client cannot be built.
    pub fn from_clients(
        config: Config,
        dynamodb: aws_sdk_dynamodb::Client,
        sqs: aws_sdk_sqs::Client,
        sns: Option<aws_sdk_sns::Client>,
    ) -> Result<Self, SetupError> {
        let store = DynamoStore::new(dynamodb, &config.table, config.due_shards)
            .with_index_shards(config.endpoint_index_shards, config.status_index_shards)
            .with_endpoint_copies(config.endpoint_copies);
        let slow: Option<Arc<dyn Queue>> =
            config.slow_queue_url.as_ref().map(|url| Arc::new(SqsQueue::new(sqs.clone(), url)) as Arc<dyn Queue>);
        let queue = SqsQueue::new(sqs, &config.queue_url);
        let sender = HttpSender::new(config.request_timeout, config.allow_private_destinations, config.require_https)
            .map_err(|e| SetupError(e.to_string()))?;
        let notifier: Arc<dyn Notifier> = match (&config.notify_topic_arn, sns) {
            (Some(arn), Some(sns)) => Arc::new(SnsNotifier::new(sns, arn)),
            _ => Arc::new(LogNotifier),
        };
        Ok(Self::new(
            config,
            Arc::new(store),
            Arc::new(queue),
            Arc::new(sender),
            Arc::new(SystemClock),
            Arc::new(Random::from_os()),
        )
        .with_notifier(notifier)
        .with_slow(slow))
    }
}

/// The SDK's standard configuration (region, credentials and `AWS_ENDPOINT_URL` from the
/// environment) with one HTTPS client: hyper + rustls on the `ring` provider, the stack
/// reqwest already links, so a function carries one TLS implementation instead of three
/// (`make bench` reports the binary sizes).
///
/// Every AWS call has a deadline: [`AWS_ATTEMPT_TIMEOUT`] per try and
/// [`AWS_OPERATION_TIMEOUT`] over the SDK's retries, so a stalled call cannot hold a claim's
/// lease (deliver also re-checks the lease before it starts a POST) or a sweeper tick.
pub async fn aws_sdk_config() -> aws_config::SdkConfig {
    sdk_loader().load().await
}

/// What [`aws_sdk_config`] loads: the SDK's defaults with our HTTP client and deadlines.
fn sdk_loader() -> aws_config::ConfigLoader {
    let tls = aws_smithy_http_client::tls::TlsContext::builder()
        .with_trust_store(crate::sender::tls_roots::aws_trust_store())
        .build()
        .unwrap_or_default();
    let http = https_client(tls);
    let timeouts = aws_config::timeout::TimeoutConfig::builder()
        .operation_attempt_timeout(AWS_ATTEMPT_TIMEOUT)
        .operation_timeout(AWS_OPERATION_TIMEOUT)
        .build();
    aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(http).timeout_config(timeouts)
}

/// The AWS clients' HTTPS client: rustls (ring) with `tls` (its trust store).
pub(crate) fn https_client(tls: aws_smithy_http_client::tls::TlsContext) -> aws_sdk_dynamodb::config::SharedHttpClient {
    use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
    aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .tls_context(tls)
        .build_https()
}

/// Deadline of one try of an AWS call: 10 seconds. DynamoDB and SQS answer in milliseconds,
/// but a try cut short can still have been applied (a transaction of 100 items on an
/// emulator takes seconds), so the deadline is far from the normal case.
pub const AWS_ATTEMPT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Deadline of an AWS call over all its tries: 25 seconds, under the sweeper's 40 s budget
/// and far under deliver's 120 s Lambda timeout.
pub const AWS_OPERATION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(25);

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_aws_client_the_app_builds_has_a_deadline_per_try_and_per_call() {
        // The region given here, not looked up: the lookup may ask the EC2 metadata service.
        let sdk = sdk_loader().region(aws_config::Region::new("us-east-1")).load().await;
        let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let sns = aws_sdk_sns::Client::new(&sdk);
        let secrets = aws_sdk_secretsmanager::Client::new(&sdk);
        let events = aws_sdk_eventbridge::Client::new(&sdk);
        let clients = [
            ("eventbridge", events.config().timeout_config()),
            ("sdk config", sdk.timeout_config()),
            ("dynamodb", dynamodb.config().timeout_config()),
            ("sqs", sqs.config().timeout_config()),
            ("sns", sns.config().timeout_config()),
            ("secretsmanager", secrets.config().timeout_config()),
        ];
        for (name, timeouts) in clients {
            let timeouts = timeouts.unwrap_or_else(|| panic!("{name}: no timeout config"));
            assert_eq!(timeouts.operation_timeout(), Some(AWS_OPERATION_TIMEOUT), "{name}");
            assert_eq!(timeouts.operation_attempt_timeout(), Some(AWS_ATTEMPT_TIMEOUT), "{name}");
        }
        // A stalled call can hold neither a claim's lease nor a sweeper tick for long.
        assert!(AWS_ATTEMPT_TIMEOUT <= AWS_OPERATION_TIMEOUT);
        assert!(AWS_OPERATION_TIMEOUT < crate::config::Config::new("t", "q").sweep_budget);
    }
}
