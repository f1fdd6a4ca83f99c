//! An in-memory backend for the local runtime, so a measurement sees deliver's scheduling and
//! not the emulator: the simulation's store (`webhooks_sim::store::MemStore`, DynamoDB's
//! conditional-write and transaction semantics, here through an open gate: no driver, no
//! faults, no index lag) and [`MemQueue`], a queue with SQS's semantics where the runtime
//! depends on them (`DelaySeconds`, a visibility timeout after each receive, redelivery of
//! what was not deleted, up to 10 messages per receive, a long poll). The services, the local
//! runtime's pollers and the HTTP sender are the real ones; only the AWS calls are replaced,
//! and they cost microseconds instead of an emulator's milliseconds.

use async_trait::async_trait;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use webhooks::clock::{Clock, Random, SystemClock};
use webhooks::domain::delivery_lifecycle::Enqueue;
use webhooks::queue::{Queue, QueueError, encode};
use webhooks::sender::HttpSender;
use webhooks::{App, Config};
use webhooks_local::{Inbox, Received};
use webhooks_sim::sched::Gate;
use webhooks_sim::store::MemStore;

/// How often a long poll looks again at an empty queue, milliseconds.
const POLL_EVERY_MS: u64 = 5;

#[derive(Debug, Default)]
struct QueueState {
    next_id: u64,
    /// Messages not received, by (visible at, ms since the epoch; id).
    waiting: BTreeMap<(i64, u64), String>,
    /// Received and not deleted: id to (visible again at, ms; body).
    in_flight: HashMap<u64, (i64, String)>,
}

/// A queue in memory (see the module docs).
#[derive(Debug)]
pub struct MemQueue {
    clock: SystemClock,
    visibility_ms: i64,
    state: Mutex<QueueState>,
}

impl MemQueue {
    /// An empty queue whose received messages stay hidden for `visibility` (the template's
    /// visibility timeout is 720 s).
    pub fn new(visibility: Duration) -> Self {
        Self {
            clock: SystemClock,
            visibility_ms: i64::try_from(visibility.as_millis()).unwrap_or(i64::MAX),
            state: Mutex::new(QueueState::default()),
        }
    }

    fn st(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Receives up to `max` visible messages; each is hidden for the visibility timeout.
    pub fn receive(&self, max: usize) -> Vec<Received> {
        let now = self.clock.now().timestamp_millis();
        let mut st = self.st();
        // Received long ago and never deleted: visible again, as on SQS.
        let expired: Vec<u64> = st.in_flight.iter().filter(|(_, (at, _))| *at <= now).map(|(id, _)| *id).collect();
        for id in expired {
            if let Some((at, body)) = st.in_flight.remove(&id) {
                st.waiting.insert((at, id), body);
            }
        }
        let mut out = Vec::new();
        while out.len() < max {
            let Some((&(at, id), _)) = st.waiting.first_key_value() else { break };
            if at > now {
                break;
            }
            let Some(body) = st.waiting.remove(&(at, id)) else { break };
            out.push(Received { message_id: id.to_string(), receipt_handle: id.to_string(), body: body.clone() });
            st.in_flight.insert(id, (now + self.visibility_ms, body));
        }
        out
    }

    /// Deletes received messages.
    pub fn delete(&self, receipt_handles: &[String]) {
        let mut st = self.st();
        for r in receipt_handles {
            if let Ok(id) = r.parse::<u64>() {
                st.in_flight.remove(&id);
            }
        }
    }
}

#[async_trait]
impl Queue for MemQueue {
    async fn send(&self, messages: &[Enqueue]) -> Result<(), QueueError> {
        let now = self.clock.now().timestamp_millis();
        let mut st = self.st();
        for m in messages {
            let id = st.next_id;
            st.next_id += 1;
            let at = now + i64::from(m.delay_seconds.min(900)) * 1000;
            st.waiting.insert((at, id), encode(&m.message));
        }
        Ok(())
    }
}

/// The runtime's pollers on [`MemQueue`]s, found by their URL.
pub struct MemInbox {
    queues: Vec<(String, Arc<MemQueue>)>,
}

impl MemInbox {
    /// Over these (URL, queue) pairs.
    pub fn new(queues: Vec<(String, Arc<MemQueue>)>) -> Self {
        Self { queues }
    }

    fn queue(&self, url: &str) -> Result<&MemQueue, String> {
        self.queues.iter().find(|(u, _)| u == url).map(|(_, q)| q.as_ref()).ok_or_else(|| format!("no queue {url}"))
    }
}

#[async_trait]
impl Inbox for MemInbox {
    async fn receive(&self, url: &str, max: i32, wait_seconds: i32) -> Result<Vec<Received>, String> {
        let q = self.queue(url)?;
        let until = Instant::now() + Duration::from_secs(u64::try_from(wait_seconds).unwrap_or(0));
        loop {
            let got = q.receive(usize::try_from(max).unwrap_or(10));
            if !got.is_empty() || Instant::now() >= until {
                return Ok(got);
            }
            tokio::time::sleep(Duration::from_millis(POLL_EVERY_MS)).await;
        }
    }

    async fn delete(&self, url: &str, receipt_handles: Vec<String>) -> Result<(), String> {
        self.queue(url)?.delete(&receipt_handles);
        Ok(())
    }
}

/// An app over an in-memory store and queues (a slow lane when `config.slow_queue_url` is
/// set), the real HTTP sender and the system clock, and the inbox its pollers receive from.
///
/// # Errors
/// When the HTTP sender cannot be built.
pub fn app(config: Config) -> crate::stack::Res<(App, Arc<MemInbox>)> {
    let visibility = Duration::from_secs(720);
    let store = MemStore::new(
        Gate::open(),
        Arc::new(webhooks_sim::world::Shared::default()),
        Arc::new(SystemClock),
        0,
        0,
        config.due_shards,
    );
    let main = Arc::new(MemQueue::new(visibility));
    let mut queues = vec![(config.queue_url.clone(), main.clone())];
    let slow = config.slow_queue_url.clone().map(|url| (url, Arc::new(MemQueue::new(visibility))));
    if let Some((url, q)) = &slow {
        queues.push((url.clone(), q.clone()));
    }
    let sender = HttpSender::new(config.request_timeout, config.allow_private_destinations, config.require_https)
        .map_err(|e| crate::stack::err(e.to_string()))?;
    let mut app =
        App::new(config, Arc::new(store), main, Arc::new(sender), Arc::new(SystemClock), Arc::new(Random::from_os()));
    if let Some((_, q)) = slow {
        app = app.with_slow_queue(q);
    }
    Ok((app, Arc::new(MemInbox::new(queues))))
}
