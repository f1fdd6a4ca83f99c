//! Measurement 1: AWS requests per delivered event, counted on the real clients.
//!
//! Each scenario gets a fresh table and queue. The services run as in Lambda: events go in
//! through the HTTP API's router (in process), attempts are made by `webhooks_local::poll_once`
//! (the local stand-in for the SQS event source mapping), the sweeper is one call of
//! `service::sweep::sweep`. Three clients count separately:
//! - `app`: the DynamoDB and SQS clients inside the App (ingest and deliver: billed to us in
//!   Lambda too);
//! - `poller`: the SQS client of the local poller (ReceiveMessage, DeleteMessageBatch). In
//!   Lambda the event source mapping makes these calls; they are SQS requests on the bill, but
//!   how it batches and how often it polls an empty queue is Lambda's, not ours;
//! - `sweeper`: the App the sweeper tick runs on.

use crate::count::{Counter, OpKey, OpStats, Snapshotter, describe_gsis};
use crate::stack::{self, Receiver, Res, err};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use webhooks::Config;
use webhooks::service::sweep;

/// One scenario's result.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Short name.
    pub name: String,
    /// What it does.
    pub what: String,
    /// Events posted.
    pub events: u64,
    /// Deliveries that ended delivered (a 2xx at the receiver).
    pub delivered: u64,
    /// Attempts the receiver saw.
    pub attempts: u64,
    /// Everything counted.
    pub ops: BTreeMap<OpKey, OpStats>,
    /// Wall time of each ingest call (API router, in process), ms.
    pub ingest_ms: Vec<f64>,
    /// Wall time of each poll that handed deliver messages (receive + deliver + delete), ms.
    pub deliver_ms: Vec<f64>,
    /// Messages per such poll.
    pub batch_sizes: Vec<usize>,
    /// Sweeper ticks run.
    pub sweeps: u64,
}

impl Scenario {
    /// Sum of a field over (label, service, op) matching the filter.
    pub fn sum(&self, f: impl Fn(&OpKey) -> bool, v: impl Fn(&OpStats) -> f64) -> f64 {
        self.ops.iter().filter(|(k, _)| f(k)).map(|(_, s)| v(s)).sum()
    }

    /// Calls of `service` ops in `ops`, by `label` (any label when `None`).
    pub fn calls(&self, label: Option<&str>, service: &str, ops: &[&str]) -> f64 {
        self.sum(
            |(l, s, o)| label.is_none_or(|x| x == l) && s == service && ops.contains(&o.as_str()),
            |s| s.calls as f64,
        )
    }
}

/// DynamoDB operations that read.
pub const READS: [&str; 4] = ["GetItem", "Query", "Scan", "BatchGetItem"];
/// DynamoDB operations that write.
pub const WRITES: [&str; 5] = ["PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"];
/// Service names as the SDK's operation metadata gives them.
pub const DDB: &str = "DynamoDB";
/// SQS.
pub const SQS: &str = "SQS";

struct Setup {
    app: webhooks::App,
    sweeper: webhooks::App,
    poller: aws_sdk_sqs::Client,
    counter: Arc<Counter>,
}

async fn setup(sdk: &aws_config::SdkConfig, snap: &Arc<Snapshotter>, tweak: impl FnOnce(&mut Config)) -> Res<Setup> {
    let raw_ddb = aws_sdk_dynamodb::Client::new(sdk);
    let raw_sqs = aws_sdk_sqs::Client::new(sdk);
    let (table, url) = stack::table_and_queue(&raw_ddb, &raw_sqs, "count").await?;
    let counter = Counter::new();
    counter.set_gsis(&table, describe_gsis(&raw_ddb, &table).await?);
    counter.set_snapshots(Some(snap.clone()));
    let mut cfg = stack::config(&table, &url);
    tweak(&mut cfg);
    let app =
        stack::app(cfg.clone(), stack::counted_ddb(sdk, "app", &counter), stack::counted_sqs(sdk, "app", &counter))?;
    let sweeper =
        stack::app(cfg, stack::counted_ddb(sdk, "sweeper", &counter), stack::counted_sqs(sdk, "sweeper", &counter))?;
    Ok(Setup { app, sweeper, poller: stack::counted_sqs(sdk, "poller", &counter), counter })
}

/// Posts `events` events and plays the event source mapping (and, with `sweep_after`, one
/// sweeper tick that long after the first attempt) until `ok` deliveries succeeded.
#[allow(clippy::too_many_arguments)]
async fn drive(
    s: &Setup,
    name: &str,
    what: &str,
    tenant: &str,
    payload: &str,
    events: u64,
    receiver: &Receiver,
    ok: u64,
    sweep_after: Option<Duration>,
) -> Res<Scenario> {
    let _ = s.counter.take();
    let ok_before = receiver.ok();
    let count_before = receiver.count();
    let mut sc = Scenario {
        name: name.into(),
        what: what.into(),
        events,
        delivered: 0,
        attempts: 0,
        ops: BTreeMap::new(),
        ingest_ms: Vec::new(),
        deliver_ms: Vec::new(),
        batch_sizes: Vec::new(),
        sweeps: 0,
    };
    for _ in 0..events {
        let id = stack::unique("evt");
        let t = Instant::now();
        stack::event(&s.app, tenant, &id, payload).await?;
        sc.ingest_ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut first_attempt_at: Option<Instant> = None;
    let mut swept = sweep_after.is_none();
    while receiver.ok() - ok_before < ok {
        if Instant::now() > deadline {
            return Err(err(format!("scenario {name}: {} of {ok} deliveries in 40 s", receiver.ok() - ok_before)));
        }
        if first_attempt_at.is_none() && receiver.count() > count_before {
            first_attempt_at = Some(Instant::now());
        }
        if !swept
            && let (Some(at), Some(after)) = (first_attempt_at, sweep_after)
            && at.elapsed() >= after
        {
            let report = sweep::sweep(&s.sweeper).await?;
            sc.sweeps += 1;
            swept = report.enqueued > 0;
        }
        let t = Instant::now();
        let n = webhooks_local::poll_once(&s.app, &s.poller, 1).await.map_err(err)?;
        if n > 0 {
            sc.deliver_ms.push(t.elapsed().as_secs_f64() * 1000.0);
            sc.batch_sizes.push(n);
        }
    }
    sc.delivered = receiver.ok() - ok_before;
    sc.attempts = receiver.count() - count_before;
    sc.ops = s.counter.take();
    Ok(sc)
}

/// The name of the first-try scenario at load (100 events, deliver's batches of up to 10).
pub const AT_LOAD: &str = "first try at load, 1 endpoint (100 events, batches of 10)";

/// Runs the scenarios with `payload` (a GitHub sample) as every event's body.
///
/// # Errors
/// When a scenario does not complete.
pub async fn run(sdk: &aws_config::SdkConfig, payload: &str) -> Res<Vec<Scenario>> {
    let snap = Arc::new(Snapshotter::start());
    let mut out = Vec::new();

    // One endpoint, first try: the first event to a new endpoint, then a second one right
    // after (deliver reads the endpoint before every POST either way: no cache).
    let s = setup(sdk, &snap, |_| {}).await?;
    let r = Receiver::start(0).await?;
    stack::endpoint(&s.app, "t1", &r.url, serde_json::Value::Null).await?;
    out.push(
        drive(
            &s,
            "first try, 1 endpoint (first event)",
            "1 event, 1 endpoint answering 200, the endpoint's first",
            "t1",
            payload,
            1,
            &r,
            1,
            None,
        )
        .await?,
    );
    out.push(
        drive(
            &s,
            "first try, 1 endpoint (second event)",
            "the next event right after (the same calls: deliver reads the endpoint, strongly consistent, before every POST; there is no endpoint cache and the endpoint does not ride in the message)",
            "t1",
            payload,
            1,
            &r,
            1,
            None,
        )
        .await?,
    );
    // The same at load: 100 events posted, then deliver's batches of up to 10 (what the
    // event source mapping hands deliver when the queue has them: the template's
    // DeliverBatchSize), so one receive, one delete, one invocation and one delivered-counter
    // write serve up to 10 deliveries.
    out.push(
        drive(
            &s,
            AT_LOAD,
            "100 events posted one by one to 1 endpoint answering 200, then received in batches of up to 10 (the template's DeliverBatchSize)",
            "t1",
            payload,
            100,
            &r,
            100,
            None,
        )
        .await?,
    );
    r.stop();

    // Fan-out to 10 endpoints.
    let s = setup(sdk, &snap, |_| {}).await?;
    let r = Receiver::start(0).await?;
    for _ in 0..10 {
        stack::endpoint(&s.app, "t10", &r.url, serde_json::Value::Null).await?;
    }
    out.push(
        drive(
            &s,
            "fan-out, 10 endpoints",
            "1 event to a tenant with 10 endpoints answering 200 (10 deliveries)",
            "t10",
            payload,
            1,
            &r,
            10,
            None,
        )
        .await?,
    );
    r.stop();

    // Success on the third attempt: 500, 500, 200 with 1 s waits (SQS DelaySeconds).
    let s = setup(sdk, &snap, |_| {}).await?;
    let r = Receiver::start(2).await?;
    let policy = serde_json::json!({"schedule_seconds": [1], "max_attempts": 5, "jitter": 0});
    stack::endpoint(&s.app, "t3", &r.url, policy).await?;
    out.push(
        drive(
            &s,
            "3rd attempt succeeds",
            "1 endpoint answering 500, 500, 200; waits of 1 s ride on DelaySeconds",
            "t3",
            payload,
            1,
            &r,
            1,
            None,
        )
        .await?,
    );
    r.stop();

    // A wait longer than the SQS delay limit (set to 1 s here): attempt 1 fails, the 4 s wait
    // goes to the due index, one sweeper tick re-enqueues it with the remaining delay.
    let s = setup(sdk, &snap, |c| c.sqs_max_delay_seconds = 1).await?;
    let r = Receiver::start(1).await?;
    let policy = serde_json::json!({"schedule_seconds": [4], "max_attempts": 3, "jitter": 0});
    stack::endpoint(&s.app, "tw", &r.url, policy).await?;
    out.push(
        drive(
            &s,
            "wait via the sweeper",
            "1 endpoint answering 500 then 200; the 4 s wait is over WEBHOOKS_SQS_MAX_DELAY_SECONDS=1, so it waits in the due index and one sweeper tick (3.3 s after attempt 1) enqueues it",
            "tw",
            payload,
            1,
            &r,
            1,
            Some(Duration::from_millis(3300)),
        )
        .await?,
    );
    r.stop();
    Ok(out)
}

/// The first-try, one-endpoint scenario (a cold event, then the warm one it returns) with
/// `payload` as the body, named `first try, 1 endpoint (second event), {label}`: the cost at another
/// payload measured, not re-priced.
///
/// # Errors
/// When the scenario does not complete.
pub async fn first_try(sdk: &aws_config::SdkConfig, payload: &str, label: &str) -> Res<Scenario> {
    let snap = Arc::new(Snapshotter::start());
    let s = setup(sdk, &snap, |_| {}).await?;
    let r = Receiver::start(0).await?;
    stack::endpoint(&s.app, "tp", &r.url, serde_json::Value::Null).await?;
    drive(&s, "warm-up", "", "tp", payload, 1, &r, 1, None).await?;
    let warm = drive(
        &s,
        &format!("first try, 1 endpoint (second event), {label}"),
        &format!("as *first try, 1 endpoint (second event)* with the {label} GitHub sample as the payload"),
        "tp",
        payload,
        1,
        &r,
        1,
        None,
    )
    .await?;
    r.stop();
    Ok(warm)
}
