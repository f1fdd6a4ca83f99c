//! The local runtime plays the parts AWS plays around the Lambda functions: API Gateway (an
//! HTTP server on the same axum router), the SQS event source mapping (pollers that feed
//! deliver batches of up to 10 with partial-batch semantics; the slow lane's queue has its own
//! pollers) and the one-minute schedule (the
//! sweeper on an interval), and [`eventbridge`], an EventBridge rule's asynchronous invocation
//! of ingest with its on-failure destination. Everything else is the same code the Lambdas run.

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageSystemAttributeName};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use webhooks::App;
use webhooks::domain::lane::Lane;
use webhooks::service::{deliver, sweep};

/// How the local runtime runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where the HTTP API listens (port 0 picks a free one).
    pub listen: SocketAddr,
    /// Concurrent SQS pollers, like the event source mapping's concurrency (0: none, for
    /// tests that play the event source mapping themselves).
    pub pollers: usize,
    /// Concurrent pollers of the slow lane (`WEBHOOKS_SLOW_QUEUE_URL`, when the config has
    /// one), like its own event source mapping's concurrency (see `webhooks::domain::lane`).
    pub slow_pollers: usize,
    /// Long-poll wait of each ReceiveMessage, seconds (0 to 20).
    pub poll_wait_seconds: i32,
    /// Whether to run the sweeper on `config.sweep_interval`.
    pub sweeper: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 3000)),
            pollers: 4,
            slow_pollers: 2,
            poll_wait_seconds: 1,
            sweeper: true,
        }
    }
}

/// A running local runtime. Dropping it does not stop it; call [`Running::stop`].
pub struct Running {
    /// Where the HTTP API listens.
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    /// Stops every task and waits for them.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// A local runtime could not start.
#[derive(Debug)]
pub struct StartError(pub String);

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "local runtime: {}", self.0)
    }
}

impl std::error::Error for StartError {}

/// Adds `Connection: close` to a 413 answer.
///
/// The router answers 413 as soon as a body passes its limit
/// ([`webhooks::http::api::MAX_BODY_BYTES`]), without reading the rest. hyper (1.12) then closes the
/// connection when it cannot drain the rest, but says nothing in the response, so a client
/// that sent its whole body puts the connection back in its pool and its next request fails
/// (IncompleteMessage or broken pipe; seen about 1 run in 5 of the pipeline test's 2 MiB
/// body on LocalStack). The header tells the client not to reuse it. API Gateway, in front
/// of the Lambda, owns its connections, so this belongs to the local runtime only.
async fn close_after_413(mut response: axum::response::Response) -> axum::response::Response {
    if response.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
        response.headers_mut().insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
    }
    response
}

/// Starts the HTTP API, the pollers (on SQS, through `sqs`) and the sweeper.
///
/// # Errors
/// [`StartError`] when the listen address cannot be bound.
pub async fn start(app: App, sqs: aws_sdk_sqs::Client, options: Options) -> Result<Running, StartError> {
    start_with(app, Arc::new(SqsInbox::new(sqs)), options).await
}

/// As [`start`], with the pollers receiving from `inbox` (the queues named by
/// `config.queue_url` and `config.slow_queue_url`, as [`Inbox`] finds them).
///
/// # Errors
/// [`StartError`] when the listen address cannot be bound.
pub async fn start_with(app: App, inbox: Arc<dyn Inbox>, options: Options) -> Result<Running, StartError> {
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|e| StartError(format!("bind {}: {e}", options.listen)))?;
    let addr = listener.local_addr().map_err(|e| StartError(e.to_string()))?;
    let (stop, stopped) = watch::channel(false);
    let mut tasks = Vec::new();

    // The API, and the two screens (`/portal`, `/dashboard`) on the same port, answering only
    // requests addressed to this server by a loopback name: the local API has no auth, so a
    // page of another site that rebinds its DNS name to 127.0.0.1 must not reach it; and
    // taking requests other than GET only from its own pages' origin (a cross-site POST
    // carries an allowed Host).
    let router = webhooks::http::api::router(app.clone())
        .merge(webhooks::http::ui::routes(app.clone()))
        .layer(axum::middleware::map_response(close_after_413))
        .layer(axum::middleware::from_fn(move |request: axum::extract::Request, next: axum::middleware::Next| {
            use webhooks::http::local_host::{cross_origin, is_local_host, is_local_origin, misdirected};
            let header = |name| request.headers().get(name).map(|h| h.to_str().unwrap_or("?"));
            let local = is_local_host(header(axum::http::header::HOST), addr);
            // A page of another site may not POST to the API here (its requests carry its
            // Origin). The screens' forms are not checked by Origin: their pages send
            // `Origin: null` (no-referrer), and every form of theirs carries a form token.
            let reading = matches!(*request.method(), axum::http::Method::GET | axum::http::Method::HEAD);
            let api = request.uri().path().starts_with("/v1/");
            let same_origin = reading || !api || is_local_origin(header(axum::http::header::ORIGIN), addr);
            async move {
                match (local, same_origin) {
                    (false, _) => misdirected(addr),
                    (true, false) => cross_origin(addr),
                    (true, true) => next.run(request).await,
                }
            }
        }));
    let mut rx = stopped.clone();
    tasks.push(tokio::spawn(async move {
        let shutdown = async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        if let Err(e) = axum::serve(listener, router).with_graceful_shutdown(shutdown).await {
            tracing::error!(error = %e, "http server stopped");
        }
    }));

    let slow_pollers = if app.config.slow_queue_url.is_some() { options.slow_pollers } else { 0 };
    let lanes = std::iter::repeat_n(Lane::Main, options.pollers).chain(std::iter::repeat_n(Lane::Slow, slow_pollers));
    for lane in lanes {
        let (app, inbox, mut rx) = (app.clone(), inbox.clone(), stopped.clone());
        let wait = options.poll_wait_seconds;
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stopped_signal(&mut rx) => break,
                    r = poll_inbox(&app, inbox.as_ref(), lane, wait) => if let Err(e) = r {
                        tracing::warn!(error = %e, "poll failed");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    },
                }
            }
        }));
    }

    if options.sweeper {
        let (app, mut rx) = (app.clone(), stopped.clone());
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(app.config.sweep_interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = stopped_signal(&mut rx) => break,
                    _ = tick.tick() => if let Err(e) = sweep::sweep(&app).await {
                        tracing::warn!(error = %e, "sweep failed");
                    },
                }
            }
        }));
    }
    Ok(Running { addr, stop, tasks })
}

async fn stopped_signal(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// One ReceiveMessage (up to 10) handed to deliver as a Lambda SQS event; messages deliver
/// did not report as failed are deleted, failed ones come back after the visibility timeout.
/// Returns the number of messages received.
///
/// # Errors
/// The SQS error, as text.
pub async fn poll_once(app: &App, sqs: &aws_sdk_sqs::Client, wait_seconds: i32) -> Result<usize, String> {
    poll_lane(app, sqs, Lane::Main, wait_seconds).await
}

/// As [`poll_once`], on the queue of `lane` (the slow lane: `config.slow_queue_url`; none
/// configured: nothing received). Each record carries an `eventSourceARN` naming its queue,
/// as Lambda's do, which is how deliver tells the lanes apart.
///
/// # Errors
/// The SQS error, as text.
pub async fn poll_lane(app: &App, sqs: &aws_sdk_sqs::Client, lane: Lane, wait_seconds: i32) -> Result<usize, String> {
    poll_inbox(app, &SqsInbox::new(sqs.clone()), lane, wait_seconds).await
}

/// One message as a poller received it.
#[derive(Debug, Clone, Default)]
pub struct Received {
    /// The queue's message id.
    pub message_id: String,
    /// The handle that deletes this receipt of it.
    pub receipt_handle: String,
    /// The body (an attempt message's JSON).
    pub body: String,
}

/// Where the pollers receive attempt messages and delete them once handled: SQS
/// ([`SqsInbox`]), or any queue with SQS's receive/delete semantics (the bench's
/// noisy-neighbour part runs the runtime over an in-memory queue).
#[async_trait::async_trait]
pub trait Inbox: Send + Sync {
    /// Receives up to `max` messages from the queue at `url`, waiting up to `wait_seconds`
    /// (0 to 20) for the first one (SQS's long poll); each one received is hidden from other
    /// receives for the queue's visibility timeout.
    ///
    /// # Errors
    /// The queue's error, as text.
    async fn receive(&self, url: &str, max: i32, wait_seconds: i32) -> Result<Vec<Received>, String>;

    /// Deletes received messages by their receipt handles.
    ///
    /// # Errors
    /// The queue's error, as text.
    async fn delete(&self, url: &str, receipt_handles: Vec<String>) -> Result<(), String>;
}

/// [`Inbox`] on SQS.
#[derive(Debug, Clone)]
pub struct SqsInbox {
    sqs: aws_sdk_sqs::Client,
}

impl SqsInbox {
    /// Over this client.
    pub fn new(sqs: aws_sdk_sqs::Client) -> Self {
        Self { sqs }
    }
}

#[async_trait::async_trait]
impl Inbox for SqsInbox {
    async fn receive(&self, url: &str, max: i32, wait_seconds: i32) -> Result<Vec<Received>, String> {
        let out = self
            .sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(max)
            .wait_time_seconds(wait_seconds)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .map_err(|e| aws_sdk_sqs::error::DisplayErrorContext(e).to_string())?;
        Ok(out
            .messages
            .unwrap_or_default()
            .into_iter()
            .map(|m| Received {
                message_id: m.message_id.unwrap_or_default(),
                receipt_handle: m.receipt_handle.unwrap_or_default(),
                body: m.body.unwrap_or_default(),
            })
            .collect())
    }

    async fn delete(&self, url: &str, receipt_handles: Vec<String>) -> Result<(), String> {
        for chunk in receipt_handles.chunks(10) {
            let entries: Vec<_> = chunk
                .iter()
                .enumerate()
                .filter_map(|(i, receipt)| {
                    DeleteMessageBatchRequestEntry::builder().id(i.to_string()).receipt_handle(receipt).build().ok()
                })
                .collect();
            self.sqs
                .delete_message_batch()
                .queue_url(url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| aws_sdk_sqs::error::DisplayErrorContext(e).to_string())?;
        }
        Ok(())
    }
}

/// As [`poll_lane`], receiving from `inbox`.
///
/// # Errors
/// The queue's error, as text.
pub async fn poll_inbox(app: &App, inbox: &dyn Inbox, lane: Lane, wait_seconds: i32) -> Result<usize, String> {
    let url = match lane {
        Lane::Main => app.config.queue_url.as_str(),
        Lane::Slow => match &app.config.slow_queue_url {
            Some(url) => url.as_str(),
            None => return Ok(0),
        },
    };
    let source_arn = format!("arn:aws:sqs:local:000000000000:{}", webhooks::config::queue_name(url));
    let messages = inbox.receive(url, 10, wait_seconds).await?;
    if messages.is_empty() {
        return Ok(0);
    }
    let mut event = SqsEvent::default();
    let mut receipts = Vec::new();
    for m in &messages {
        let mut record = SqsMessage::default();
        record.message_id = Some(m.message_id.clone());
        record.receipt_handle = Some(m.receipt_handle.clone());
        record.body = Some(m.body.clone());
        record.event_source = Some("aws:sqs".into());
        record.event_source_arn = Some(source_arn.clone());
        event.records.push(record);
        receipts.push((m.message_id.clone(), m.receipt_handle.clone()));
    }
    let response = deliver::deliver_batch(app, event).await;
    let failed: HashSet<String> = response.batch_item_failures.into_iter().map(|f| f.item_identifier).collect();
    let handled: Vec<String> =
        receipts.into_iter().filter(|(id, _)| !failed.contains(id)).map(|(_, receipt)| receipt).collect();
    if !handled.is_empty() {
        inbox.delete(url, handled).await?;
    }
    Ok(messages.len())
}

/// Tries of an asynchronous invocation of ingest: the first and the SAM template's
/// `EventInvokeConfig.MaximumRetryAttempts` (2).
pub const EVENTBRIDGE_TRIES: u32 = 3;

/// Plays an EventBridge rule's asynchronous invocation of the ingest function with the
/// stack's on-failure destination: the same handler the Lambda runs
/// ([`webhooks::service::ingest::handle_eventbridge`]), tried up to [`EVENTBRIDGE_TRIES`]
/// times (without Lambda's waits) while it fails; an event it still fails is sent to
/// `dead_letter_queue_url` as Lambda's destination record (`requestContext.condition`
/// `RetriesExhausted`, `requestPayload` the event, `responsePayload.errorMessage` the
/// refusal's `{code}: {message}`). Returns the accepted event, or the refusal once it is in
/// the queue.
///
/// # Errors
/// The SQS error when the record could not be sent.
pub async fn eventbridge(
    app: &App,
    sqs: &aws_sdk_sqs::Client,
    dead_letter_queue_url: &str,
    event: aws_lambda_events::eventbridge::EventBridgeEvent<serde_json::Value>,
) -> Result<Result<webhooks::service::ingest::Accepted, webhooks::service::ingest::EventBridgeRefusal>, String> {
    let mut refusal = None;
    for _ in 0..EVENTBRIDGE_TRIES {
        match webhooks::service::ingest::handle_eventbridge(app, event.clone()).await {
            Ok(accepted) => return Ok(Ok(accepted)),
            Err(e) => refusal = Some(e),
        }
    }
    let Some(refusal) = refusal else { return Err("no invocation was made".into()) };
    let record = serde_json::json!({
        "version": "1.0",
        "timestamp": app.clock.now().to_rfc3339(),
        "requestContext": {
            "requestId": event.id,
            "functionArn": "local:ingest",
            "condition": "RetriesExhausted",
            "approximateInvokeCount": EVENTBRIDGE_TRIES,
        },
        "requestPayload": event,
        "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
        "responsePayload": {
            "errorType": "webhooks::service::ingest::EventBridgeRefusal",
            "errorMessage": refusal.to_string(),
        },
    });
    sqs.send_message()
        .queue_url(dead_letter_queue_url)
        .message_body(record.to_string())
        .send()
        .await
        .map_err(|e| format!("send to the events dead-letter queue: {}", aws_sdk_sqs::error::DisplayErrorContext(e)))?;
    tracing::warn!(event_id = ?event.id, reason = %refusal, "EventBridge event refused; sent to the events dead-letter queue");
    Ok(Err(refusal))
}
