//! One simulated run: the world a seed builds, the driver that steps it, and the invariants
//! checked after every step and at quiescence.

use crate::queue::MemQueue;
use crate::sched::{Fault, Gate};
use crate::store::{MemStore, Tables};
use async_trait::async_trait;
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use bytes::Bytes;
use chrono::{DateTime, TimeZone, Utc};
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use webhooks::clock::{Clock, Random};
use webhooks::domain::delivery_lifecycle::Transition;
use webhooks::domain::ids::{DeliveryId, EndpointId, EventId, TenantId};
use webhooks::domain::model::{Delivery, DeliveryStatus, Endpoint, EndpointState, JobKind, REASON_MANUAL};
use webhooks::domain::retry_policy::{Outcome, RetryPolicy};
use webhooks::sender::{SendResult, Sender};
use webhooks::service::{deliver, deliveries, endpoints, ingest, sweep};
use webhooks::{App, Config};

/// What the services' hooks and the receivers report to the driver.
#[derive(Debug, Default)]
struct SharedInner {
    violations: Vec<String>,
    /// Per task, the (delivery, attempt) it POSTed and has not recorded yet.
    task_sent: BTreeMap<usize, Vec<(DeliveryId, u32)>>,
    /// POSTs received per (delivery, attempt).
    sends: BTreeMap<(DeliveryId, u32), u32>,
    /// Deliveries a receiver answered with a 2xx.
    acknowledged: BTreeSet<DeliveryId>,
    /// POSTs whose attempt was never recorded by the task that made it (it crashed, failed or
    /// lost its lease in between): each may be sent again.
    unrecorded: u32,
    /// Deliveries created.
    accepted: u32,
    /// Deliveries an ingest answered as accepted (202): each must exist at the end.
    promised: Vec<DeliveryId>,
}

/// State the store, queue and sender share with the driver.
#[derive(Debug, Default)]
pub struct Shared {
    gate: Gate,
    inner: Mutex<SharedInner>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, SharedInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An invariant broke.
    pub fn violation(&self, message: String) {
        self.lock().violations.push(message);
    }

    /// A delivery transition was written by the current task: an attempt it POSTed is on
    /// record now.
    pub fn recorded(&self, d: &Delivery, t: &Transition) {
        let records = matches!(t.attempts, webhooks::domain::delivery_lifecycle::Field::Set(_));
        if !records {
            return;
        }
        let task = self.gate.lock().current;
        if let Some(sent) = self.lock().task_sent.get_mut(&task) {
            sent.retain(|(id, _)| id != &d.id);
        }
    }

    /// A delivery was created.
    pub fn accepted(&self, _id: &str) {
        self.lock().accepted += 1;
    }

    /// An ingest answered 202 with these deliveries.
    pub fn promised(&self, ids: impl IntoIterator<Item = DeliveryId>) {
        self.lock().promised.extend(ids);
    }

    fn task_ended(&self, task: usize) {
        let mut s = self.lock();
        let left = s.task_sent.remove(&task).map_or(0, |v| v.len());
        s.unrecorded += u32::try_from(left).unwrap_or(u32::MAX);
    }
}

/// The virtual clock (milliseconds since the epoch).
#[derive(Debug, Clone)]
pub struct SimClock(Arc<Mutex<i64>>);

impl SimClock {
    fn ms(&self) -> i64 {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn set(&self, ms: i64) {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *g = (*g).max(ms);
    }
}

impl Clock for SimClock {
    fn now(&self) -> DateTime<Utc> {
        Utc.timestamp_millis_opt(self.ms()).single().unwrap_or_default()
    }
}

/// How a receiver behaves for a while.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mood {
    Healthy,
    Flaky,
    Down,
    Gone,
    RateLimited,
    Rejecting,
}

const MOODS: [Mood; 6] = [Mood::Healthy, Mood::Flaky, Mood::Down, Mood::Gone, Mood::RateLimited, Mood::Rejecting];

/// The receivers: every POST is checked against the endpoint as stored at that moment, counted,
/// and answered as the endpoint's receiver's mood says.
struct Receivers {
    shared: Arc<Shared>,
    tables: Arc<Mutex<Tables>>,
    clock: SimClock,
    rng: Mutex<StdRng>,
    moods: Mutex<BTreeMap<EndpointId, Mood>>,
    timeout_ms: i64,
}

/// The URL of an endpoint's receiver (a literal public address: nothing resolves or connects).
fn receiver_url(endpoint_id: &str, version: u32) -> String {
    format!("https://93.184.216.34/hooks/{endpoint_id}/v{version}")
}

fn endpoint_of(url: &str) -> Option<&str> {
    url.split('/').nth(4)
}

#[async_trait]
impl Sender for Receivers {
    async fn post(&self, url: &str, headers: &[(String, String)], body: Bytes) -> SendResult {
        let header = |name: &str| headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str()).unwrap_or("");
        // Every URL the sim gives an endpoint names it, and every POST carries its event's id
        // as webhook-id; a POST anywhere else, or without an event id, is a violation.
        let event_id = header(webhooks::domain::signing::HEADER_ID);
        let ids = endpoint_of(url).and_then(|s| s.parse::<EndpointId>().ok()).zip(event_id.parse::<EventId>().ok());
        let Some((ep_id, event_id)) = ids else {
            self.shared
                .violation(format!("POST to {url} with webhook-id {event_id:?}: no endpoint's URL or no event id"));
            let detail = Some("not an endpoint's URL or not an event id".to_string());
            return SendResult {
                outcome: Outcome::Connection,
                body: None,
                retry_after_seconds: None,
                duration_ms: 0,
                detail,
                cause: None,
            };
        };
        let attempt: u32 = header(webhooks::domain::signing::HEADER_ATTEMPT).parse().unwrap_or(0);
        let timestamp: i64 = header(webhooks::domain::signing::HEADER_TIMESTAMP).parse().unwrap_or(0);
        let did = webhooks::domain::model::delivery_id(&event_id, &ep_id);
        // The endpoint as it stands when the POST starts: it must accept this delivery, and the
        // POST must go to its current URL signed with its current secret.
        {
            let t = self.tables.lock().unwrap_or_else(|e| e.into_inner());
            let ep = t.pointers.get(&ep_id).and_then(|tenant| t.endpoints.get(&(tenant.clone(), ep_id.clone())));
            let problem = match ep {
                None => Some("endpoint deleted".to_string()),
                Some(ep) if !ep.accepts(&did) => Some(format!("endpoint is {:?}", ep.state())),
                Some(ep) if ep.url != url => Some(format!("stale URL {url}, endpoint has {}", ep.url)),
                Some(ep) => {
                    let key = webhooks::domain::signing::secret_key(&ep.secret).unwrap_or_default();
                    let expected = webhooks::domain::signing::sign(&key, &event_id, timestamp, &body);
                    (!header(webhooks::domain::signing::HEADER_SIGNATURE).split(' ').any(|s| s == expected))
                        .then(|| "not signed with the current secret".to_string())
                }
            };
            if let Some(p) = problem {
                self.shared.violation(format!("POST of {did} attempt {attempt} to {ep_id}: {p}"));
            }
        }
        let task = self.shared.gate.lock().current;
        let mood = self.moods.lock().unwrap_or_else(|e| e.into_inner()).get(&ep_id).copied().unwrap_or(Mood::Healthy);
        let roll: f64 = self.rng.lock().unwrap_or_else(|e| e.into_inner()).random();
        let retry_after: u64 = self.rng.lock().unwrap_or_else(|e| e.into_inner()).random_range(0..180);
        let (outcome, retry_after) = match mood {
            Mood::Healthy if roll < 0.9 => (Outcome::Status(200), None),
            Mood::Healthy if roll < 0.95 => (Outcome::Status(500), None),
            Mood::Healthy => (Outcome::Timeout, None),
            Mood::Flaky if roll < 0.5 => (Outcome::Status(204), None),
            Mood::Flaky if roll < 0.7 => (Outcome::Status(503), None),
            Mood::Flaky if roll < 0.85 => (Outcome::Timeout, None),
            Mood::Flaky => (Outcome::Connection, None),
            Mood::Down if roll < 0.5 => (Outcome::Status(502), None),
            Mood::Down if roll < 0.75 => (Outcome::Timeout, None),
            Mood::Down => (Outcome::Connection, None),
            Mood::Gone => (Outcome::Status(410), None),
            Mood::RateLimited => (Outcome::Status(429), (roll < 0.7).then_some(retry_after)),
            Mood::Rejecting => (Outcome::Status(400), None),
        };
        {
            let mut s = self.shared.lock();
            *s.sends.entry((did.clone(), attempt)).or_default() += 1;
            s.task_sent.entry(task).or_default().push((did.clone(), attempt));
            if matches!(outcome, Outcome::Status(c) if (200..300).contains(&c)) {
                s.acknowledged.insert(did);
            }
        }
        let duration_ms = if outcome == Outcome::Timeout {
            // Hangs past the request timeout.
            self.clock.set(self.clock.ms() + self.timeout_ms);
            u64::try_from(self.timeout_ms).unwrap_or(0)
        } else {
            7
        };
        SendResult {
            outcome,
            body: matches!(outcome, Outcome::Status(_)).then(|| "ok".to_string()),
            retry_after_seconds: retry_after,
            duration_ms,
            detail: None,
            cause: None,
        }
    }
}

/// What a run came to.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Scheduler steps.
    pub steps: u64,
    /// Deliveries created.
    pub deliveries: u32,
    /// Of those, delivered at the end.
    pub delivered: u32,
    /// Of those, exhausted at the end.
    pub exhausted: u32,
    /// POSTs received.
    pub posts: u32,
    /// POSTs of a (delivery, attempt) received before.
    pub repeated_posts: u32,
    /// POSTs whose record never came (crash, failure or lost lease between send and record).
    pub unrecorded: u32,
    /// Tasks crashed.
    pub crashes: u32,
    /// Calls failed (before or after taking effect).
    pub faults: u32,
    /// Sweeper ticks.
    pub ticks: u32,
    /// Messages moved to the dead-letter queue.
    pub dead_letters: usize,
    /// Virtual time simulated, seconds.
    pub virtual_seconds: i64,
    /// Sweeper ticks that read more than `sweep_batch` items (a failure; it was known finding 2
    /// until `read_due` kept to its batch).
    pub sweep_overshoots: u32,
    /// Claims the sweeper found due before their lease was over (their entry moved to the
    /// lease's end, nothing sent).
    pub leases_pending: usize,
}

/// An invariant that broke, with the run's last steps.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// The step it broke at.
    pub step: u64,
    /// What broke.
    pub message: String,
    /// The last steps (task, kind, operation, fault).
    pub trace: Vec<String>,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "seed {} failed at step {}: {}", self.seed, self.step, self.message)?;
        for line in &self.trace {
            writeln!(f, "  {line}")?;
        }
        write!(f, "reproduce: make sim SEED={}", self.seed)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ingest,
    Worker,
    Sweep,
    Admin,
}

type Work = Pin<Box<dyn Future<Output = ()>>>;

struct Task {
    kind: Kind,
    label: String,
    fut: Work,
    polled: bool,
    ops: u32,
    sweep: Option<Rc<RefCell<Option<sweep::SweepReport>>>>,
}

/// What an admin call promised, checked until the next call on that endpoint starts.
#[derive(Debug, Clone, Default)]
struct Promise {
    url: Option<String>,
    secret: Option<String>,
    manual_disable: bool,
    in_flight: u32,
    generation: u64,
    /// Two calls overlapped since the endpoint was last without calls in flight.
    overlapped: bool,
}

impl Promise {
    /// A call that started at `generation` answered: it promises what `set` says if no other
    /// call started meanwhile, else nothing (the calls' effects landed in some order).
    fn answered(&mut self, generation: u64, set: impl FnOnce(&mut Promise)) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.url = None;
        self.secret = None;
        self.manual_disable = false;
        if self.generation == generation && !self.overlapped {
            set(self);
        }
        if self.in_flight == 0 {
            self.overlapped = false;
        }
    }
}

#[derive(Debug, Clone)]
enum Action {
    Ingest { tenant: String, event_type: String, id: Option<String>, big: bool, sync: bool },
    Disable(EndpointId),
    Enable(EndpointId),
    Patch(EndpointId),
    Rotate(EndpointId),
    Replay,
    Recover(EndpointId),
    Delete(EndpointId),
}

/// The fault rates of a run.
#[derive(Debug, Clone, Copy)]
struct Rates {
    fail: f64,
    ambiguous: f64,
    crash: f64,
    jump: f64,
}

const START_MS: i64 = 1_798_761_600_000; // 2027-01-01T00:00:00Z
const CHAOS_MS: i64 = 40 * 60 * 1000;
const HORIZON_MS: i64 = 60 * 24 * 3600 * 1000;
const MAX_STEPS: u64 = 200_000;

struct World {
    seed: u64,
    rng: StdRng,
    gate: Gate,
    shared: Arc<Shared>,
    clock: SimClock,
    app: App,
    store: Arc<MemStore>,
    queue: Arc<MemQueue>,
    receivers: Arc<Receivers>,
    tasks: BTreeMap<usize, Task>,
    next_task: usize,
    workers: usize,
    batch: usize,
    rates: Rates,
    healed: bool,
    heal_rounds: u32,
    next_tick: i64,
    plan: Vec<(i64, Action)>,
    endpoint_ids: Vec<EndpointId>,
    promises: Rc<RefCell<BTreeMap<EndpointId, Promise>>>,
    url_versions: BTreeMap<EndpointId, u32>,
    report: Report,
    trace: std::collections::VecDeque<String>,
    tracing: bool,
}

/// Runs one seed to quiescence; with `tracing`, a failure carries the run's last 400 steps.
///
/// # Errors
/// The first invariant that broke, with the steps before it.
pub fn run(seed: u64, tracing: bool) -> Result<Report, Failure> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().map_err(|e| Failure {
        seed,
        step: 0,
        message: format!("runtime: {e}"),
        trace: Vec::new(),
    })?;
    // The services use tokio's timers (the sweeper's budget); they need a runtime to register
    // with, never to fire: every future here is polled by the driver.
    let _guard = rt.enter();
    let mut world = World::new(seed, tracing);
    world.run()
}

impl World {
    fn new(seed: u64, tracing: bool) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let gate = Gate::default();
        let shared = Arc::new(Shared { gate: gate.clone(), inner: Mutex::new(SharedInner::default()) });
        let clock = SimClock(Arc::new(Mutex::new(START_MS)));
        let mut config = Config::new("sim", "sim");
        config.due_shards = rng.random_range(1..=4);
        config.sweep_batch = rng.random_range(2..=30);
        config.release_per_tick = rng.random_range(1..=5);
        config.wait_scale = if rng.random_bool(0.5) { 1.0 } else { 0.05 };
        // A short redrive time makes the sweeper find claims whose lease is not over yet (the
        // claim keeps the due time it found) and messages still waiting in the queue.
        if rng.random_bool(0.3) {
            config.redrive_after_seconds = rng.random_range(1..=20);
        }
        let max_lag_ms = if rng.random_bool(0.3) { 0 } else { rng.random_range(1..=2000) };
        let store = Arc::new(MemStore::new(
            gate.clone(),
            shared.clone(),
            Arc::new(clock.clone()),
            rng.random(),
            max_lag_ms,
            config.due_shards,
        ));
        let queue = Arc::new(MemQueue::new(gate.clone(), Arc::new(clock.clone()), rng.random(), 720_000, 5));
        *queue.duplicate.lock().unwrap_or_else(|e| e.into_inner()) = [0.0, 0.05, 0.2][rng.random_range(0..3)];
        let receivers = Arc::new(Receivers {
            shared: shared.clone(),
            tables: store.tables.clone(),
            clock: clock.clone(),
            rng: Mutex::new(StdRng::seed_from_u64(rng.random())),
            moods: Mutex::new(BTreeMap::new()),
            timeout_ms: i64::try_from(config.request_timeout.as_millis()).unwrap_or(10_000),
        });
        let app = App::new(
            config,
            store.clone(),
            queue.clone(),
            receivers.clone(),
            Arc::new(clock.clone()),
            Arc::new(Random::seeded(rng.random())),
        );
        let rates = Rates {
            fail: [0.0, 0.02, 0.08][rng.random_range(0..3)],
            ambiguous: [0.0, 0.02, 0.05][rng.random_range(0..3)],
            crash: [0.0, 0.01, 0.03][rng.random_range(0..3)],
            jump: [0.0, 0.002, 0.01][rng.random_range(0..3)],
        };
        let workers = rng.random_range(1..=4);
        let batch = rng.random_range(1..=3);
        let next_tick = START_MS + rng.random_range(0..60_000);
        let mut w = World {
            seed,
            rng,
            gate,
            shared,
            clock,
            app,
            store,
            queue,
            receivers,
            tasks: BTreeMap::new(),
            next_task: 1,
            workers,
            batch,
            rates,
            healed: false,
            heal_rounds: 0,
            next_tick,
            plan: Vec::new(),
            endpoint_ids: Vec::new(),
            promises: Rc::new(RefCell::new(BTreeMap::new())),
            url_versions: BTreeMap::new(),
            report: Report::default(),
            trace: std::collections::VecDeque::new(),
            tracing,
        };
        w.setup();
        w
    }

    /// Endpoints (written directly: their creation is not under test) and the plan of
    /// ingests and admin calls over the chaos phase.
    fn setup(&mut self) {
        let now = self.clock.now();
        let n = self.rng.random_range(2..=4);
        let policies =
            [RetryPolicy::standard(), RetryPolicy::svix(), RetryPolicy::frappe(3), RetryPolicy::rate_limit_only()];
        let mut tables = self.store.tables.lock().unwrap_or_else(|e| e.into_inner());
        for i in 0..n {
            // Both meet the id rule: nothing is skipped.
            let (Ok(id), Ok(tenant)) =
                (format!("ep_{i}").parse::<EndpointId>(), if i == 3 { "globex" } else { "acme" }.parse::<TenantId>())
            else {
                continue;
            };
            let ep = Endpoint {
                // The first endpoint alone takes `sync.*` events (a sync ingest needs exactly one).
                event_types: (i == 0)
                    .then(|| vec!["sync.*".to_string(), "order.*".to_string()])
                    .or_else(|| Some(vec!["order.*".to_string()])),
                retry_policy: policies[self.rng.random_range(0..policies.len())].clone(),
                circuit_breaker_threshold: [0, 2, 3, 5][self.rng.random_range(0..4)],
                auto_resume: self.rng.random_bool(0.5),
                auto_resume_after_seconds: self.rng.random_range(30..=300),
                ..Endpoint::new(
                    id.clone(),
                    tenant.clone(),
                    receiver_url(&id, 0),
                    webhooks::domain::signing::generate_secret(&self.app.random),
                    now,
                )
            };
            tables.pointers.insert(id.clone(), tenant.clone());
            tables.endpoints.insert((tenant, id.clone()), ep);
            self.url_versions.insert(id.clone(), 0);
            let mood =
                if self.rng.random_bool(0.5) { Mood::Healthy } else { MOODS[self.rng.random_range(0..MOODS.len())] };
            self.receivers.moods.lock().unwrap_or_else(|e| e.into_inner()).insert(id.clone(), mood);
            self.endpoint_ids.push(id);
        }
        drop(tables);
        let events = self.rng.random_range(2..=12);
        let mut last_id: Option<String> = None;
        for i in 0..events {
            let at = START_MS + self.rng.random_range(0..CHAOS_MS / 2);
            let tenant = if n == 4 && self.rng.random_bool(0.25) { "globex" } else { "acme" }.to_string();
            let sync = tenant == "acme" && self.rng.random_bool(0.15);
            let id = match &last_id {
                Some(prev) if self.rng.random_bool(0.1) => Some(prev.clone()),
                _ => self.rng.random_bool(0.5).then(|| format!("evt_sim_{i}")),
            };
            last_id = id.clone().or(last_id);
            let event_type = if sync { "sync.ping" } else { "order.paid" }.to_string();
            let big = self.rng.random_bool(0.03);
            self.plan.push((at, Action::Ingest { tenant, event_type, id, big, sync }));
        }
        let admins = self.rng.random_range(0..=8);
        for _ in 0..admins {
            let at = START_MS + self.rng.random_range(0..CHAOS_MS);
            let ep = self.endpoint_ids[self.rng.random_range(0..n)].clone();
            let action = match self.rng.random_range(0..20) {
                0..=3 => Action::Disable(ep),
                4..=7 => Action::Enable(ep),
                8..=11 => Action::Patch(ep),
                12..=14 => Action::Rotate(ep),
                15..=16 => Action::Replay,
                17..=18 => Action::Recover(ep),
                _ => Action::Delete(ep),
            };
            self.plan.push((at, action));
        }
        // Receivers change their mood during the chaos phase.
        self.plan.sort_by_key(|(at, _)| *at);
    }

    fn spawn(&mut self, kind: Kind, label: String, fut: Work) -> usize {
        let id = self.next_task;
        self.next_task += 1;
        self.tasks.insert(id, Task { kind, label, fut, polled: false, ops: 0, sweep: None });
        id
    }

    fn spawn_action(&mut self, action: Action) {
        let app = self.app.clone();
        let promises = self.promises.clone();
        // A call's promise holds only if no other call on the endpoint overlapped it.
        let begin = |ep: &EndpointId| -> u64 {
            let mut p = promises.borrow_mut();
            let e = p.entry(ep.clone()).or_default();
            e.overlapped |= e.in_flight > 0;
            e.in_flight += 1;
            e.generation += 1;
            e.generation
        };
        match action {
            Action::Ingest { tenant, event_type, id, big, sync } => {
                let payload = if big {
                    format!("{{\"blob\":\"{}\"}}", "x".repeat(350_000))
                } else {
                    format!("{{\"n\":{}}}", self.rng.random_range(0..1000))
                };
                let label = format!("ingest {event_type} {}", id.as_deref().unwrap_or("-"));
                let shared = self.shared.clone();
                self.spawn(
                    Kind::Ingest,
                    label,
                    Box::pin(async move {
                        let event =
                            ingest::NewEvent { tenant_id: tenant, event_type, payload, id, sync, request_sha256: None };
                        let answer = ingest::ingest(&app, event).await;
                        if let Ok(accepted) = answer {
                            shared.promised(accepted.deliveries.into_iter().map(|d| d.id));
                        }
                    }),
                );
            }
            Action::Disable(ep) => {
                let g = begin(&ep);
                self.spawn(
                    Kind::Admin,
                    format!("disable {ep}"),
                    Box::pin(async move {
                        let r = endpoints::disable_endpoint(&app, &ep).await;
                        let manual = r.is_ok_and(|v| v.disabled.is_some_and(|d| d.reason == REASON_MANUAL));
                        promises.borrow_mut().entry(ep).or_default().answered(g, |p| p.manual_disable = manual);
                    }),
                );
            }
            Action::Enable(ep) => {
                let g = begin(&ep);
                self.spawn(
                    Kind::Admin,
                    format!("enable {ep}"),
                    Box::pin(async move {
                        let _ = endpoints::enable_endpoint(&app, &ep).await;
                        promises.borrow_mut().entry(ep).or_default().answered(g, |_| {});
                    }),
                );
            }
            Action::Patch(ep) => {
                let g = begin(&ep);
                let slot = self.url_versions.entry(ep.clone()).or_default();
                *slot += 1;
                let v = *slot;
                let url = receiver_url(&ep, v);
                self.spawn(
                    Kind::Admin,
                    format!("patch {ep} url v{v}"),
                    Box::pin(async move {
                        let mut body = serde_json::Map::new();
                        body.insert("url".into(), serde_json::Value::String(url.clone()));
                        let r = endpoints::update_endpoint(&app, &ep, &body).await;
                        let url = r.is_ok().then_some(url);
                        promises.borrow_mut().entry(ep).or_default().answered(g, |p| p.url = url);
                    }),
                );
            }
            Action::Rotate(ep) => {
                let g = begin(&ep);
                self.spawn(
                    Kind::Admin,
                    format!("rotate {ep}"),
                    Box::pin(async move {
                        let r = endpoints::rotate_secret(&app, &ep, None).await;
                        let secret = r.ok().and_then(|v| v.secret);
                        promises.borrow_mut().entry(ep).or_default().answered(g, |p| p.secret = secret);
                    }),
                );
            }
            Action::Replay => {
                let ids: Vec<DeliveryId> = {
                    let t = self.store.tables.lock().unwrap_or_else(|e| e.into_inner());
                    t.deliveries.keys().cloned().collect()
                };
                if ids.is_empty() {
                    return;
                }
                let id = ids[self.rng.random_range(0..ids.len())].clone();
                self.spawn(
                    Kind::Admin,
                    format!("replay {id}"),
                    Box::pin(async move {
                        let _ = deliveries::replay(&app, &id).await;
                    }),
                );
            }
            Action::Recover(ep) => {
                let since = Utc.timestamp_millis_opt(START_MS).single().unwrap_or_default();
                self.spawn(
                    Kind::Admin,
                    format!("recover {ep}"),
                    Box::pin(async move {
                        let _ = endpoints::recover(&app, &ep, since, None).await;
                    }),
                );
            }
            Action::Delete(ep) => {
                let g = begin(&ep);
                self.spawn(
                    Kind::Admin,
                    format!("delete {ep}"),
                    Box::pin(async move {
                        let _ = endpoints::delete_endpoint(&app, &ep, true).await;
                        promises.borrow_mut().entry(ep).or_default().answered(g, |_| {});
                    }),
                );
            }
        }
    }

    fn spawn_worker(&mut self) {
        let app = self.app.clone();
        let queue = self.queue.clone();
        let batch = self.batch;
        self.spawn(
            Kind::Worker,
            "deliver".into(),
            Box::pin(async move {
                let Ok(messages) = queue.receive(batch).await else { return };
                if messages.is_empty() {
                    return;
                }
                let mut event = SqsEvent::default();
                event.records = messages
                    .iter()
                    .map(|m| {
                        let mut r = SqsMessage::default();
                        r.message_id = Some(m.id.to_string());
                        r.body = Some(m.body.clone());
                        r
                    })
                    .collect();
                let response = deliver::deliver_batch(&app, event).await;
                let failed: BTreeSet<String> =
                    response.batch_item_failures.into_iter().map(|f| f.item_identifier).collect();
                for m in messages {
                    if !failed.contains(&m.id.to_string()) {
                        let _ = queue.delete(m.id).await;
                    }
                }
            }),
        );
    }

    fn spawn_tick(&mut self) {
        let app = self.app.clone();
        let slot = Rc::new(RefCell::new(None));
        let out = slot.clone();
        let id = self.spawn(
            Kind::Sweep,
            "sweep".into(),
            Box::pin(async move {
                if let Ok(r) = sweep::sweep(&app).await {
                    *out.borrow_mut() = Some(r);
                }
            }),
        );
        if let Some(t) = self.tasks.get_mut(&id) {
            t.sweep = Some(slot);
        }
        self.report.ticks += 1;
    }

    fn now(&self) -> i64 {
        self.clock.ms()
    }

    fn fail(&self, step: u64, message: String) -> Failure {
        Failure { seed: self.seed, step, message, trace: self.trace.iter().cloned().collect() }
    }

    fn note(&mut self, line: impl FnOnce() -> String) {
        if !self.tracing {
            return;
        }
        let line = line();
        if self.trace.len() >= 400 {
            self.trace.pop_front();
        }
        self.trace.push_back(line);
    }

    fn run(&mut self) -> Result<Report, Failure> {
        let mut step = 0u64;
        loop {
            step += 1;
            if step > MAX_STEPS {
                return Err(self.fail(step, "step limit reached (livelock?)".into()));
            }
            self.start_due_work();
            let pending = self.gate.undecided();
            let fresh: Vec<usize> = self.tasks.iter().filter(|(_, t)| !t.polled).map(|(id, _)| *id).collect();
            let choices = pending.len() + fresh.len();
            if choices == 0 {
                if !self.idle()? {
                    break;
                }
                continue;
            }
            let pick = self.rng.random_range(0..choices);
            if pick < fresh.len() {
                let id = fresh[pick];
                self.poll(id);
            } else {
                let (gid, task, op) = pending[pick - fresh.len()];
                self.clock.set(self.now() + self.rng.random_range(0..20));
                if !self.healed && self.rng.random_bool(self.rates.jump) {
                    self.clock.set(self.now() + self.rng.random_range(1_000..900_000));
                }
                let r: f64 = self.rng.random();
                let crash = !self.healed && r < self.rates.crash;
                let fault = if self.healed {
                    Fault::None
                } else if r < self.rates.crash + self.rates.fail {
                    Fault::FailBefore
                } else if r < self.rates.crash + self.rates.fail + self.rates.ambiguous {
                    Fault::FailAfter
                } else {
                    Fault::None
                };
                let label = if self.tracing || crash {
                    self.tasks.get(&task).map(|t| t.label.clone()).unwrap_or_default()
                } else {
                    String::new()
                };
                if crash {
                    let t = self.now() - START_MS;
                    self.note(|| format!("t={t} task {task} ({label}) CRASH at {op}"));
                    self.report.crashes += 1;
                    self.tasks.remove(&task);
                    self.gate.forget_task(task);
                    self.shared.task_ended(task);
                    self.promises_crashed(&label);
                } else {
                    if fault != Fault::None {
                        self.report.faults += 1;
                    }
                    let t = self.now() - START_MS;
                    self.note(|| format!("t={t} task {task} ({label}) {op} {fault:?}"));
                    if let Some(t) = self.tasks.get_mut(&task) {
                        t.ops += 1;
                    }
                    self.gate.decide(gid, fault);
                    self.poll(task);
                }
            }
            self.check_step().map_err(|m| self.fail(step, m))?;
        }
        self.report.steps = step;
        self.check_end().map_err(|m| self.fail(step, m))?;
        Ok(self.report.clone())
    }

    /// A crashed admin call may or may not have landed: its endpoint promises nothing.
    fn promises_crashed(&mut self, label: &str) {
        let mut words = label.split(' ');
        let (Some(verb), Some(ep)) = (words.next(), words.next()) else { return };
        if matches!(verb, "disable" | "enable" | "patch" | "rotate" | "delete")
            && let Some(p) = self.promises.borrow_mut().get_mut(ep)
        {
            // It may have landed before the crash: nothing is promised.
            p.answered(0, |_| {});
        }
    }

    fn poll(&mut self, id: usize) {
        let Some(task) = self.tasks.get_mut(&id) else { return };
        task.polled = true;
        self.gate.lock().current = id;
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let done = matches!(task.fut.as_mut().poll(&mut cx), Poll::Ready(()));
        if done {
            let task = self.tasks.remove(&id);
            self.shared.task_ended(id);
            if let Some(t) = task {
                self.task_done(&t);
            }
        }
    }

    /// The sweeper tick's budget: at most `sweep_batch` deliveries and as many job steps read, and a bounded number of
    /// calls for what it read.
    fn task_done(&mut self, t: &Task) {
        let Some(r) = t.sweep.as_ref().and_then(|s| s.borrow().clone()) else { return };
        let cfg = &self.app.config;
        self.report.leases_pending += r.leases_pending;
        // Never past the batch (a round used to ask every open shard for at least one item and
        // overshoot by up to `due_shards - 1`: seed 388, fixed in `read_due`).
        // Due deliveries and job steps each have the batch as their cap (jobs are read from
        // their own partition).
        let deliveries = r.examined.saturating_sub(r.examined_jobs);
        if deliveries > cfg.sweep_batch || r.examined_jobs > cfg.sweep_batch {
            self.report.sweep_overshoots += 1;
            self.shared.violation(format!(
                "sweeper tick read {deliveries} deliveries and {} job steps, over its batch of {} each",
                r.examined_jobs, cfg.sweep_batch
            ));
        }
        let per_item = 8 + 2 * cfg.release_per_tick;
        let bound = 4 * cfg.due_shards as usize + r.examined * per_item + r.enqueued / 10 + 2;
        if t.ops as usize > bound {
            self.shared
                .violation(format!("sweeper tick made {} calls for {} items (bound {bound})", t.ops, r.examined));
        }
    }

    /// Starts what is due now: planned actions, the sweeper's tick, and workers for visible
    /// messages.
    fn start_due_work(&mut self) {
        let now = self.now();
        while let Some((at, _)) = self.plan.first() {
            if *at > now {
                break;
            }
            let (_, action) = self.plan.remove(0);
            self.spawn_action(action);
        }
        if now >= self.next_tick {
            self.spawn_tick();
            while self.next_tick <= now {
                self.next_tick += 60_000;
            }
            // Receivers change their mood now and then.
            if !self.healed && self.rng.random_bool(0.2) {
                let ep = self.endpoint_ids[self.rng.random_range(0..self.endpoint_ids.len())].clone();
                let mood = MOODS[self.rng.random_range(0..MOODS.len())];
                self.receivers.moods.lock().unwrap_or_else(|e| e.into_inner()).insert(ep, mood);
            }
        }
        let workers = self.tasks.values().filter(|t| t.kind == Kind::Worker).count();
        if workers < self.workers && self.queue.has_visible() {
            self.spawn_worker();
        }
        if !self.healed && now >= START_MS + CHAOS_MS {
            self.heal();
        }
    }

    /// The end of the chaos phase: no more faults, every receiver answers 200, and every
    /// endpoint that is not enabled is enabled.
    fn heal(&mut self) {
        self.healed = true;
        *self.queue.duplicate.lock().unwrap_or_else(|e| e.into_inner()) = 0.0;
        for mood in self.receivers.moods.lock().unwrap_or_else(|e| e.into_inner()).values_mut() {
            *mood = Mood::Healthy;
        }
        self.enable_all();
    }

    fn enable_all(&mut self) {
        let stopped: Vec<EndpointId> = {
            let t = self.store.tables.lock().unwrap_or_else(|e| e.into_inner());
            t.endpoints.values().filter(|e| e.state() != EndpointState::Enabled).map(|e| e.id.clone()).collect()
        };
        for ep in stopped {
            self.spawn_action(Action::Enable(ep));
        }
    }

    /// Nothing can run: move the clock to the next thing that will happen. False when nothing
    /// ever will (quiescence).
    fn idle(&mut self) -> Result<bool, Failure> {
        let now = self.now();
        if self.healed {
            self.plan.clear();
            // An attempt recorded after the heal began may have paused or disabled an endpoint
            // again: enable it (a paused endpoint with nothing held probes forever otherwise).
            let stopped = {
                let t = self.store.tables.lock().unwrap_or_else(|e| e.into_inner());
                t.endpoints.values().any(|e| e.state() != EndpointState::Enabled)
            };
            if stopped && self.heal_rounds < 5 {
                self.heal_rounds += 1;
                self.enable_all();
                return Ok(true);
            }
            let due = {
                let t = self.store.tables.lock().unwrap_or_else(|e| e.into_inner());
                let d = t.deliveries.values().filter_map(|r| r.due_at).min();
                let j = t.jobs.values().filter_map(|r| r.due_at).min();
                d.into_iter().chain(j).min()
            };
            let tick = due.map(|d| {
                // The first tick at or after it (plus the indexes' lag, at most 2 s).
                let mut t = self.next_tick;
                while t < d + 2_000 {
                    t += 60_000;
                }
                t
            });
            let next = [tick, self.queue.next_visible()].into_iter().flatten().min();
            match next {
                Some(n) if n <= START_MS + HORIZON_MS => {
                    self.clock.set(n.max(now));
                    Ok(true)
                }
                Some(_) => Err(self.fail(0, "not quiescent within the horizon (60 days)".into())),
                None => Ok(false),
            }
        } else {
            let next = [self.plan.first().map(|(at, _)| *at), Some(self.next_tick), self.queue.next_visible()]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(now);
            self.clock.set(next.max(now + 1));
            Ok(true)
        }
    }

    /// The invariants that hold after every step.
    fn check_step(&mut self) -> Result<(), String> {
        if let Some(v) = self.shared.lock().violations.first() {
            return Err(v.clone());
        }
        let t = self.store.tables.lock().unwrap_or_else(|e| e.into_inner());
        for r in t.deliveries.values() {
            if matches!(r.d.status, DeliveryStatus::Scheduled | DeliveryStatus::Sending) && r.due_at.is_none() {
                return Err(format!(
                    "delivery {} is {} but not in the due index: nothing will move it",
                    r.d.id,
                    r.d.status.as_str()
                ));
            }
        }
        for ep in t.endpoints.values() {
            if ep.state() == EndpointState::Enabled
                && let Some(held) =
                    t.deliveries.values().find(|r| r.d.endpoint_id == ep.id && r.d.status == DeliveryStatus::Held)
            {
                let release = t
                    .jobs
                    .values()
                    .any(|j| j.job.endpoint_id == ep.id && j.job.kind == JobKind::Release && j.job.status == "running");
                if !release {
                    return Err(format!(
                        "endpoint {} is enabled with held delivery {} and no release job",
                        ep.id, held.d.id
                    ));
                }
            }
            if let Some(p) = self.promises.borrow().get(&ep.id)
                && p.in_flight == 0
            {
                if let Some(url) = &p.url
                    && &ep.url != url
                {
                    return Err(format!(
                        "endpoint {}: PATCH answered url {url} but it is {} (lost update)",
                        ep.id, ep.url
                    ));
                }
                if let Some(secret) = &p.secret
                    && &ep.secret != secret
                {
                    return Err(format!("endpoint {}: rotated secret lost (lost update)", ep.id));
                }
                if p.manual_disable && ep.disabled.as_ref().is_none_or(|d| d.reason != REASON_MANUAL) {
                    return Err(format!(
                        "endpoint {}: disable answered but it is {:?} (lost update)",
                        ep.id,
                        ep.state()
                    ));
                }
            }
        }
        Ok(())
    }

    /// At quiescence: every delivery delivered (and a receiver said so) or exhausted, and no
    /// attempt received twice beyond the attempts whose record was lost.
    fn check_end(&mut self) -> Result<(), String> {
        let t = self.store.tables.lock().unwrap_or_else(|e| e.into_inner());
        let s = self.shared.lock();
        self.report.deliveries = s.accepted;
        self.report.unrecorded = s.unrecorded;
        self.report.posts = s.sends.values().sum();
        self.report.repeated_posts = s.sends.values().map(|n| n - 1).sum();
        self.report.dead_letters = self.queue.state.lock().unwrap_or_else(|e| e.into_inner()).dead.len();
        self.report.virtual_seconds = (self.clock.ms() - START_MS) / 1000;
        if let Some(lost) = s.promised.iter().find(|id| !t.deliveries.contains_key(*id)) {
            return Err(format!("delivery {lost} was accepted (202) and is gone"));
        }
        for id in &s.promised {
            if let Some(r) = t.deliveries.get(id)
                && !t.events.contains_key(&(r.d.tenant_id.clone(), r.d.event_id.clone()))
            {
                return Err(format!("delivery {id} was accepted (202) and its event item (the payload) is gone"));
            }
        }
        for r in t.deliveries.values() {
            match r.d.status {
                DeliveryStatus::Delivered => {
                    self.report.delivered += 1;
                    if !s.acknowledged.contains(&r.d.id) {
                        return Err(format!("delivery {} is delivered but no receiver answered 2xx", r.d.id));
                    }
                }
                DeliveryStatus::Exhausted => self.report.exhausted += 1,
                other => {
                    let ep = t.endpoints.values().find(|e| e.id == r.d.endpoint_id);
                    return Err(format!(
                        "delivery {} ended {} (endpoint {}: {:?}; created t={} ms, last change t={} ms) at quiescence",
                        r.d.id,
                        other.as_str(),
                        r.d.endpoint_id,
                        ep.map(|e| e.state()),
                        r.d.created_at.timestamp_millis() - START_MS,
                        r.d.updated_at.timestamp_millis() - START_MS,
                    ));
                }
            }
        }
        if self.report.repeated_posts > s.unrecorded {
            let twice: Vec<_> =
                s.sends.iter().filter(|(_, n)| **n > 1).map(|((d, a), n)| format!("{d}#{a}x{n}")).collect();
            return Err(format!(
                "{} repeated POSTs but only {} attempts went unrecorded: {}",
                self.report.repeated_posts,
                s.unrecorded,
                twice.join(", ")
            ));
        }
        Ok(())
    }
}
