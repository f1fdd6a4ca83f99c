//! Fault injection for the tests that claim "whatever single AWS call fails": [`Faults`] wraps
//! an app's store, queue and notifier, numbers every call they make once armed, and fails
//! exactly one of them: before it is made (the request never reached AWS) or after (it was
//! applied and its answer lost, as a timeout does).
//!
//! A test first runs its scenario with nothing failing and keeps the calls made
//! ([`Faults::calls`]), then runs it again once per [`Faults::plan`] entry, each failing one
//! position of that sequence. Driven by one task (no concurrent pollers or sweeper ticks) on a
//! clock the test moves, a scenario makes the same calls in the same order each run, so
//! position N of a failing run is the call that was N in the recording
//! ([`Faults::struck`] says which call it failed).
//!
//! The sweeper's `due` read is numbered only when it found something: the reads of an idle
//! tick are many and fail to no effect.
//!
//! [`Faults::stalling`] plays the other way an AWS call goes wrong: its answer comes late
//! ([`Faults::slow`]: every answer of one call). [`Faults::lagging_listings`] plays an index
//! that lags the table: a listing's first page empty, with a cursor.

use chrono::{DateTime, Utc};
use std::future::Future;
use std::sync::{Arc, Mutex};
use webhooks::App;
use webhooks::domain::api_key::ApiKey;
use webhooks::domain::delivery_lifecycle::Transition;
use webhooks::domain::event_type::{EventType, EventTypeVersion};
use webhooks::domain::ids::{DeliveryId, EndpointId, EventId, JobId, TenantId};
use webhooks::domain::model::{Delivery, Disabled, Endpoint, Job, StoredEvent};
use webhooks::store::{ApiKeyStore, CounterStore, DeliveryStore, EndpointStore, EventStore, EventTypeStore, JobStore};
use webhooks::store::{
    Applied, Committed, DeliveryQuery, DeliverySummary, Due, EndpointWrite, Page, Store, StoreError,
};

/// When an injected failure strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strike {
    /// The call is not made; the caller gets an error.
    Before,
    /// The call is made (a write lands) and the caller gets an error instead of its answer.
    After,
}

/// The calls that change nothing: failing one after it was made is the same as before.
const READS: [&str; 24] = [
    "tenant_snapshot",
    "deleted_endpoints",
    "scan_tenant",
    "get_settings",
    "event_record",
    "endpoint_counters",
    "get_endpoint",
    "failures_in_a_row",
    "listed_failures_in_a_row",
    "read_endpoint",
    "find_endpoint",
    "tenant_endpoints",
    "list_endpoints",
    "attention_endpoints",
    "get_payload",
    "get_delivery",
    "due",
    "get_job",
    "event_deliveries",
    "list_deliveries",
    "count_deliveries",
    "get_event_type",
    "event_type_version",
    "list_event_types",
];

#[derive(Debug, Default)]
struct State {
    armed: bool,
    calls: Vec<&'static str>,
    fail: Option<(usize, Strike)>,
    struck: Option<(usize, &'static str, Strike)>,
    stall: Option<(&'static str, std::time::Duration)>,
    stalled: bool,
    /// Record writes and delivered-counter writes still to fail ([`Faults::outlasting`]).
    outlast: (usize, usize),
    slow: Option<(&'static str, std::time::Duration)>,
    stall_skip: usize,
    lagging: bool,
}

/// The cursor of the empty first page a lagging listing answers ([`Faults::lagging_listings`]):
/// it leads to the real first page.
const LAGGING_CURSOR: &str = "lagging-index";

/// Numbers the calls of the store, queue and notifier it wraps once armed, and fails the one
/// at a given position. Cheap to clone (shared state).
#[derive(Debug, Clone, Default)]
pub struct Faults(Arc<Mutex<State>>);

impl Faults {
    /// Records calls once armed; fails none.
    pub fn recording() -> Self {
        Self::default()
    }

    /// Fails the call at `position` (0-based, counted from arming) as `strike` says.
    pub fn failing(position: usize, strike: Strike) -> Self {
        let f = Self::default();
        f.lock().fail = Some((position, strike));
        f
    }

    /// Delays the answer of the first call named `name` after arming by `by`: the call is
    /// made at once (a write lands), its caller hears back `by` later.
    pub fn stalling(name: &'static str, by: std::time::Duration) -> Self {
        let f = Self::default();
        f.lock().stall = Some((name, by));
        f
    }

    /// Once armed, fails the next `records` writes of an attempt's record (an `apply` or
    /// `commit` whose transition records an attempt) and the next `counts` delivered-counter
    /// writes (`count_delivered`), before they are made: as a call whose every SDK try failed.
    /// Nothing else fails.
    pub fn outlasting(records: usize, counts: usize) -> Self {
        let f = Self::default();
        f.lock().outlast = (records, counts);
        f
    }

    /// Whether this call (`records`: a record write, else a counter write) is one
    /// [`Faults::outlasting`] fails; counts it down.
    fn outlasts(&self, record: bool) -> bool {
        let mut s = self.lock();
        if !s.armed {
            return false;
        }
        let left = if record { &mut s.outlast.0 } else { &mut s.outlast.1 };
        let hit = *left > 0;
        *left = left.saturating_sub(1);
        hit
    }

    /// As [`Faults::stalling`], for the call named `name` that comes after `skip` others of
    /// that name.
    pub fn stalling_after(name: &'static str, skip: usize, by: std::time::Duration) -> Self {
        let f = Self::stalling(name, by);
        f.lock().stall_skip = skip;
        f
    }

    /// Delays the answer of every call named `name` (once armed) by `by`: a slow table. Fails
    /// none.
    pub fn slow(name: &'static str, by: std::time::Duration) -> Self {
        let f = Self::default();
        f.lock().slow = Some((name, by));
        f
    }

    /// Makes every delivery listing's first page (no cursor) come back empty with a cursor,
    /// which leads to the real first page: what DynamoStore answers when the entries it read
    /// were of items gone or moved (the index lags the table). Fails none.
    pub fn lagging_listings() -> Self {
        let f = Self::default();
        f.lock().lagging = true;
        f
    }

    /// Whether the stalled call has answered.
    pub fn stall_over(&self) -> bool {
        self.lock().stalled
    }

    /// The runs that fail each call of `calls` (a recording) once: every call before it is
    /// made, and a write also after it landed. `due` fails after its read (it is numbered
    /// only when it found something).
    pub fn plan(calls: &[&'static str]) -> Vec<(usize, &'static str, Strike)> {
        let mut out = Vec::new();
        for (i, &name) in calls.iter().enumerate() {
            if name == "due" {
                out.push((i, name, Strike::After));
                continue;
            }
            out.push((i, name, Strike::Before));
            if !READS.contains(&name) {
                out.push((i, name, Strike::After));
            }
        }
        out
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts numbering (and failing).
    pub fn arm(&self) {
        self.lock().armed = true;
    }

    /// Whether armed.
    pub fn armed(&self) -> bool {
        self.lock().armed
    }

    /// The calls made since arming, in order.
    pub fn calls(&self) -> Vec<&'static str> {
        self.lock().calls.clone()
    }

    /// The call failed so far (position, name, when), if any.
    pub fn struck(&self) -> Option<(usize, &'static str, Strike)> {
        self.lock().struck
    }

    /// `app` with its store, queue (and slow queue) and notifier wrapped.
    pub fn wrap(&self, app: App) -> App {
        let mut app = app;
        app.store = Arc::new(FaultyStore { inner: app.store.clone(), faults: self.clone() });
        app.queue = Arc::new(FaultyQueue { inner: app.queue.clone(), faults: self.clone() });
        app.slow_queue = app
            .slow_queue
            .take()
            .map(|q| Arc::new(FaultyQueue { inner: q, faults: self.clone() }) as Arc<dyn webhooks::queue::Queue>);
        app.notifier = Arc::new(FaultyNotifier { inner: app.notifier.clone(), faults: self.clone() });
        app
    }

    /// Numbers the call `name` when armed: its position.
    fn number(&self, name: &'static str) -> Option<usize> {
        let mut s = self.lock();
        s.armed.then(|| {
            s.calls.push(name);
            s.calls.len() - 1
        })
    }

    /// Whether the call numbered `position` fails now (`when`).
    fn strikes(&self, position: Option<usize>, when: Strike) -> bool {
        let mut s = self.lock();
        match (position, s.fail) {
            (Some(p), Some((f, w))) if p == f && w == when => {
                s.struck = Some((p, s.calls[p], when));
                true
            }
            _ => false,
        }
    }

    /// Runs `call` as the call `name`, numbered and maybe failed; `found` says whether a
    /// result counts (`due` is numbered only when it found something).
    async fn run<T, E>(
        &self,
        name: &'static str,
        call: impl Future<Output = Result<T, E>>,
        found: impl FnOnce(&T) -> bool,
        error: impl Fn(String) -> E,
    ) -> Result<T, E> {
        let injected = |when: &str| error(format!("injected failure of {name} ({when} it was made)"));
        if name == "due" {
            let out = call.await?;
            let position = if found(&out) { self.number(name) } else { None };
            if self.strikes(position, Strike::After) {
                return Err(injected("after"));
            }
            return Ok(out);
        }
        let position = self.number(name);
        if self.strikes(position, Strike::Before) {
            return Err(injected("before"));
        }
        let out = call.await;
        self.stall(name).await;
        let out = out?;
        if self.strikes(position, Strike::After) {
            return Err(injected("after"));
        }
        Ok(out)
    }

    /// Waits out the stall when `name` is the call to stall (the first after arming), or a
    /// slow call's delay.
    async fn stall(&self, name: &'static str) {
        let slow = {
            let s = self.lock();
            s.slow.filter(|(n, _)| *n == name && s.armed).map(|(_, by)| by)
        };
        if let Some(by) = slow {
            tokio::time::sleep(by).await;
            return;
        }
        let by = {
            let mut s = self.lock();
            match s.stall {
                Some((n, _)) if n == name && s.armed && s.stall_skip > 0 => {
                    s.stall_skip -= 1;
                    None
                }
                Some((n, by)) if n == name && s.armed => {
                    s.stall = None;
                    Some(by)
                }
                _ => None,
            }
        };
        if let Some(by) = by {
            tokio::time::sleep(by).await;
            self.lock().stalled = true;
        }
    }
}

/// Whether `t` records an attempt's outcome (deliver's record; not a claim, not the sweeper's
/// record of a lapse).
fn records_attempt(t: &Transition) -> bool {
    matches!(t.attempts, webhooks::domain::delivery_lifecycle::Field::Set(_))
        && t.status != webhooks::domain::model::DeliveryStatus::Sending
        && !t.forgive_attempt
}

fn aws(message: String) -> StoreError {
    StoreError::Aws(message)
}

fn any<T>(_: &T) -> bool {
    true
}

struct FaultyStore {
    inner: Arc<dyn Store>,
    faults: Faults,
}

#[async_trait::async_trait]
impl EndpointStore for FaultyStore {
    async fn attention_endpoints(
        &self,
        why: webhooks::store::Attention,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<Page<webhooks::store::AttentionMark>, StoreError> {
        self.faults.run("attention_endpoints", self.inner.attention_endpoints(why, limit, cursor), any, aws).await
    }
    async fn create_endpoint(&self, endpoint: &Endpoint) -> Result<(), StoreError> {
        self.faults.run("create_endpoint", self.inner.create_endpoint(endpoint), any, aws).await
    }

    async fn get_endpoint(&self, tenant_id: &TenantId, id: &EndpointId) -> Result<Option<Endpoint>, StoreError> {
        self.faults.run("get_endpoint", self.inner.get_endpoint(tenant_id, id), any, aws).await
    }

    async fn find_endpoint(&self, id: &EndpointId) -> Result<Option<Endpoint>, StoreError> {
        self.faults.run("find_endpoint", self.inner.find_endpoint(id), any, aws).await
    }

    async fn read_endpoint(
        &self,
        tenant_id: &TenantId,
        id: &EndpointId,
        key: &str,
    ) -> Result<Option<Endpoint>, StoreError> {
        self.faults.run("read_endpoint", self.inner.read_endpoint(tenant_id, id, key), any, aws).await
    }

    async fn tenant_endpoints(&self, tenant_id: &TenantId, key: &str) -> Result<Vec<Endpoint>, StoreError> {
        self.faults.run("tenant_endpoints", self.inner.tenant_endpoints(tenant_id, key), any, aws).await
    }

    async fn commit(
        &self,
        endpoint: EndpointWrite<'_>,
        delivery: Option<(&DeliveryId, &Transition)>,
    ) -> Result<Committed, StoreError> {
        if delivery.is_some_and(|(_, t)| records_attempt(t)) && self.faults.outlasts(true) {
            return Err(aws("injected: the record failed on every try".into()));
        }
        self.faults.run("commit", self.inner.commit(endpoint, delivery), any, aws).await
    }

    async fn delete_endpoint(&self, deleted: &webhooks::store::DeletedEndpoint) -> Result<(), StoreError> {
        self.faults.run("delete_endpoint", self.inner.delete_endpoint(deleted), any, aws).await
    }

    async fn list_endpoints(
        &self,
        tenant_id: &TenantId,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<Page<Endpoint>, StoreError> {
        self.faults.run("list_endpoints", self.inner.list_endpoints(tenant_id, limit, cursor), any, aws).await
    }
}

#[async_trait::async_trait]
impl CounterStore for FaultyStore {
    async fn failures_in_a_row(&self, endpoint: &Endpoint) -> Result<u32, StoreError> {
        self.faults.run("failures_in_a_row", self.inner.failures_in_a_row(endpoint), any, aws).await
    }

    async fn listed_failures_in_a_row(&self, endpoints: &[Endpoint]) -> Result<Vec<u32>, StoreError> {
        self.faults.run("listed_failures_in_a_row", self.inner.listed_failures_in_a_row(endpoints), any, aws).await
    }

    async fn announce_failing(&self, tenant_id: &TenantId, id: &EndpointId, notify: &Job) -> Result<bool, StoreError> {
        self.faults.run("announce_failing", self.inner.announce_failing(tenant_id, id, notify), any, aws).await
    }

    async fn count_failure(
        &self,
        tenant_id: &TenantId,
        id: &EndpointId,
        key: &str,
        attempt: u32,
        threshold: u32,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<webhooks::store::FailureCount>, StoreError> {
        self.faults
            .run("count_failure", self.inner.count_failure(tenant_id, id, key, attempt, threshold, at), any, aws)
            .await
    }

    async fn count_delivered(
        &self,
        endpoint_id: &EndpointId,
        delivery_ids: &[DeliveryId],
        at: chrono::DateTime<chrono::Utc>,
        expires_at: i64,
    ) -> Result<(), StoreError> {
        if self.faults.outlasts(false) {
            return Err(aws("injected: the count failed on every try".into()));
        }
        let call = self.inner.count_delivered(endpoint_id, delivery_ids, at, expires_at);
        self.faults.run("count_delivered", call, any, aws).await
    }

    async fn delivered_tally(
        &self,
        endpoint_id: &EndpointId,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<webhooks::store::DeliveredTally, StoreError> {
        self.faults.run("delivered_tally", self.inner.delivered_tally(endpoint_id, since), any, aws).await
    }

    async fn reset_failures(&self, tenant_id: &TenantId, id: &EndpointId, key: &str) -> Result<(), StoreError> {
        self.faults.run("reset_failures", self.inner.reset_failures(tenant_id, id, key), any, aws).await
    }

    async fn set_slow_until(
        &self,
        tenant_id: &TenantId,
        id: &EndpointId,
        until: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<(), StoreError> {
        self.faults.run("set_slow_until", self.inner.set_slow_until(tenant_id, id, until), any, aws).await
    }

    async fn take_rate_slot(&self, endpoint_id: &str, second: i64) -> Result<u64, StoreError> {
        self.faults.run("take_rate_slot", self.inner.take_rate_slot(endpoint_id, second), any, aws).await
    }

    async fn set_effective_rate(
        &self,
        tenant_id: &TenantId,
        id: &EndpointId,
        expected_ms: Option<i64>,
        rate: f64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let call = self.inner.set_effective_rate(tenant_id, id, expected_ms, rate, now_ms);
        self.faults.run("set_effective_rate", call, any, aws).await
    }
}

#[async_trait::async_trait]
impl EventStore for FaultyStore {
    async fn insert_event(
        &self,
        event: &StoredEvent,
        deliveries: &[(&Delivery, Option<i64>)],
    ) -> Result<webhooks::store::Inserted, StoreError> {
        self.faults.run("insert_event", self.inner.insert_event(event, deliveries), any, aws).await
    }

    async fn get_payload(&self, tenant_id: &TenantId, event_id: &EventId) -> Result<Option<String>, StoreError> {
        self.faults.run("get_payload", self.inner.get_payload(tenant_id, event_id), any, aws).await
    }
}

#[async_trait::async_trait]
impl DeliveryStore for FaultyStore {
    async fn get_delivery(&self, id: &DeliveryId) -> Result<Option<Delivery>, StoreError> {
        self.faults.run("get_delivery", self.inner.get_delivery(id), any, aws).await
    }

    async fn apply(&self, id: &DeliveryId, transition: &Transition, return_new: bool) -> Result<Applied, StoreError> {
        if records_attempt(transition) && self.faults.outlasts(true) {
            return Err(aws("injected: the record failed on every try".into()));
        }
        self.faults.run("apply", self.inner.apply(id, transition, return_new), any, aws).await
    }

    async fn due(&self, shard: u32, until_ms: i64, limit: usize, after: Option<&Due>) -> Result<Vec<Due>, StoreError> {
        self.faults.run("due", self.inner.due(shard, until_ms, limit, after), |v: &Vec<Due>| !v.is_empty(), aws).await
    }

    async fn event_deliveries(&self, event_id: &EventId) -> Result<Vec<DeliverySummary>, StoreError> {
        self.faults.run("event_deliveries", self.inner.event_deliveries(event_id), any, aws).await
    }

    async fn list_deliveries(&self, query: &DeliveryQuery) -> Result<Page<DeliverySummary>, StoreError> {
        let lagging = { self.faults.lock().lagging };
        if lagging {
            match query.cursor.as_deref() {
                None => return Ok(Page { data: Vec::new(), next_cursor: Some(LAGGING_CURSOR.into()) }),
                Some(LAGGING_CURSOR) => {
                    let q = DeliveryQuery { cursor: None, ..query.clone() };
                    return self.faults.run("list_deliveries", self.inner.list_deliveries(&q), any, aws).await;
                }
                Some(_) => {}
            }
        }
        self.faults.run("list_deliveries", self.inner.list_deliveries(query), any, aws).await
    }

    async fn count_deliveries(
        &self,
        endpoint_id: &EndpointId,
        status: webhooks::domain::model::DeliveryStatus,
    ) -> Result<u64, StoreError> {
        self.faults.run("count_deliveries", self.inner.count_deliveries(endpoint_id, status), any, aws).await
    }

    async fn count_deliveries_in(
        &self,
        endpoint_id: &EndpointId,
        statuses: &[webhooks::domain::model::DeliveryStatus],
    ) -> Result<Vec<webhooks::store::Counted>, StoreError> {
        self.faults.run("count_deliveries", self.inner.count_deliveries_in(endpoint_id, statuses), any, aws).await
    }
}

#[async_trait::async_trait]
impl EventTypeStore for FaultyStore {
    async fn create_event_type(&self, event_type: &EventType) -> Result<(), StoreError> {
        self.faults.run("create_event_type", self.inner.create_event_type(event_type), any, aws).await
    }

    async fn get_event_type(&self, name: &str) -> Result<Option<EventType>, StoreError> {
        self.faults.run("get_event_type", self.inner.get_event_type(name), any, aws).await
    }

    async fn event_type_version(&self, name: &str, version: u64) -> Result<Option<EventTypeVersion>, StoreError> {
        self.faults.run("event_type_version", self.inner.event_type_version(name, version), any, aws).await
    }

    async fn save_event_type(
        &self,
        event_type: &EventType,
        expected_revision: u64,
        new_version: bool,
    ) -> Result<bool, StoreError> {
        let save = self.inner.save_event_type(event_type, expected_revision, new_version);
        self.faults.run("save_event_type", save, any, aws).await
    }

    async fn list_event_types(&self, limit: usize, cursor: Option<&str>) -> Result<Page<EventType>, StoreError> {
        self.faults.run("list_event_types", self.inner.list_event_types(limit, cursor), any, aws).await
    }
}

#[async_trait::async_trait]
impl ApiKeyStore for FaultyStore {
    async fn create_api_key(&self, key: &ApiKey) -> Result<(), StoreError> {
        self.faults.run("create_api_key", self.inner.create_api_key(key), any, aws).await
    }

    async fn get_api_key(&self, id: &str) -> Result<Option<ApiKey>, StoreError> {
        self.faults.run("get_api_key", self.inner.get_api_key(id), any, aws).await
    }

    async fn list_api_keys(&self, limit: usize, cursor: Option<&str>) -> Result<Page<ApiKey>, StoreError> {
        self.faults.run("list_api_keys", self.inner.list_api_keys(limit, cursor), any, aws).await
    }

    async fn revoke_api_key(&self, id: &str, at: DateTime<Utc>) -> Result<Option<ApiKey>, StoreError> {
        self.faults.run("revoke_api_key", self.inner.revoke_api_key(id, at), any, aws).await
    }

    async fn remove_api_key_tenant(&self, id: &str, tenant_id: &str) -> Result<Option<ApiKey>, StoreError> {
        self.faults.run("remove_api_key_tenant", self.inner.remove_api_key_tenant(id, tenant_id), any, aws).await
    }

    async fn touch_api_key(&self, id: &str, at: DateTime<Utc>) -> Result<(), StoreError> {
        self.faults.run("touch_api_key", self.inner.touch_api_key(id, at), any, aws).await
    }
}

#[async_trait::async_trait]
impl webhooks::store::LifecycleStore for FaultyStore {
    async fn tenant_snapshot(
        &self,
        tenant_id: &TenantId,
        key: &str,
    ) -> Result<webhooks::store::TenantSnapshot, StoreError> {
        self.faults.run("tenant_snapshot", self.inner.tenant_snapshot(tenant_id, key), any, aws).await
    }

    async fn get_settings(
        &self,
        tenant_id: &TenantId,
    ) -> Result<Option<webhooks::domain::tenant::TenantSettings>, StoreError> {
        self.faults.run("get_settings", self.inner.get_settings(tenant_id), any, aws).await
    }

    async fn save_settings(
        &self,
        settings: &webhooks::domain::tenant::TenantSettings,
        expected_version: u64,
        job: Option<&Job>,
    ) -> Result<bool, StoreError> {
        let save = self.inner.save_settings(settings, expected_version, job);
        self.faults.run("save_settings", save, any, aws).await
    }

    async fn event_record(
        &self,
        tenant_id: &TenantId,
        event_id: &EventId,
    ) -> Result<Option<webhooks::store::lifecycle::EventRecord>, StoreError> {
        self.faults.run("event_record", self.inner.event_record(tenant_id, event_id), any, aws).await
    }

    async fn expunge_payload(
        &self,
        tenant_id: &TenantId,
        event_id: &EventId,
        delivery_ids: &[DeliveryId],
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<bool, StoreError> {
        let expunge = self.inner.expunge_payload(tenant_id, event_id, delivery_ids, at);
        self.faults.run("expunge_payload", expunge, any, aws).await
    }

    async fn endpoint_counters(
        &self,
        endpoint_id: &EndpointId,
        rate_limit_per_second: Option<u32>,
        limit: usize,
    ) -> Result<Vec<webhooks::store::Purgeable>, StoreError> {
        let counters = self.inner.endpoint_counters(endpoint_id, rate_limit_per_second, limit);
        self.faults.run("endpoint_counters", counters, any, aws).await
    }

    async fn deleted_endpoints(
        &self,
        tenant_id: &TenantId,
    ) -> Result<Vec<webhooks::store::DeletedEndpoint>, StoreError> {
        self.faults.run("deleted_endpoints", self.inner.deleted_endpoints(tenant_id), any, aws).await
    }

    async fn scan_tenant(
        &self,
        tenant_id: &TenantId,
        cursor: Option<&str>,
        pages: usize,
    ) -> Result<webhooks::store::ScanPage, StoreError> {
        self.faults.run("scan_tenant", self.inner.scan_tenant(tenant_id, cursor, pages), any, aws).await
    }

    async fn purge(
        &self,
        job_id: &JobId,
        lease_due_at: i64,
        items: &[webhooks::store::Purgeable],
    ) -> Result<bool, StoreError> {
        self.faults.run("purge", self.inner.purge(job_id, lease_due_at, items), any, aws).await
    }
}

#[async_trait::async_trait]
impl JobStore for FaultyStore {
    async fn create_job(&self, job: &Job) -> Result<(), StoreError> {
        self.faults.run("create_job", self.inner.create_job(job), any, aws).await
    }

    async fn save_job(&self, job: &Job, lease_due_at: i64) -> Result<bool, StoreError> {
        self.faults.run("save_job", self.inner.save_job(job, lease_due_at), any, aws).await
    }

    async fn finish_job(&self, job: &Job, lease_due_at: i64, notify: &Job) -> Result<bool, StoreError> {
        self.faults.run("finish_job", self.inner.finish_job(job, lease_due_at, notify), any, aws).await
    }

    async fn get_job(&self, id: &JobId) -> Result<Option<Job>, StoreError> {
        self.faults.run("get_job", self.inner.get_job(id), any, aws).await
    }

    async fn claim_job(&self, id: &JobId, expected_due_at: i64, lease_due_at: i64) -> Result<bool, StoreError> {
        self.faults.run("claim_job", self.inner.claim_job(id, expected_due_at, lease_due_at), any, aws).await
    }
}

struct FaultyQueue {
    inner: Arc<dyn webhooks::queue::Queue>,
    faults: Faults,
}

#[async_trait::async_trait]
impl webhooks::queue::Queue for FaultyQueue {
    async fn send(
        &self,
        messages: &[webhooks::domain::delivery_lifecycle::Enqueue],
    ) -> Result<(), webhooks::queue::QueueError> {
        if messages.is_empty() {
            // No request goes out (the sweeper sends its tick's messages, often none).
            return self.inner.send(messages).await;
        }
        self.faults.run("queue_send", self.inner.send(messages), any, webhooks::queue::QueueError).await
    }
}

/// The owner notification: SNS Publish, when the notifier is [`webhooks::notify::SnsNotifier`].
struct FaultyNotifier {
    inner: Arc<dyn webhooks::notify::Notifier>,
    faults: Faults,
}

#[async_trait::async_trait]
impl webhooks::notify::Notifier for FaultyNotifier {
    async fn endpoint_disabled(&self, endpoint: &Endpoint, disabled: &Disabled) -> Result<(), String> {
        self.faults.run("publish", self.inner.endpoint_disabled(endpoint, disabled), any, |e| e).await
    }
}

/// An SDK interceptor for the app's DynamoDB client that, while switched on, dooms a share of
/// the writes of an attempt's record (an UpdateItem or TransactWriteItems that sets
/// `attempts` on a delivery other than to `sending`) and of the delivered-counter writes (an
/// UpdateItem that `ADD`s `delivered`): every try of a doomed call is throttled before it
/// reaches the emulator, so the call fails after all the SDK's retries (10 for a record, with
/// their backoffs, as in a real outage). Clones share the switch, the random source and the
/// tally ([`Outlasting::doomed`]).
#[derive(Debug, Clone)]
pub struct Outlasting {
    share: f64,
    on: Arc<std::sync::atomic::AtomicBool>,
    rng: Arc<Mutex<rand::rngs::StdRng>>,
    doomed: Arc<Mutex<(usize, usize)>>,
}

/// The mark of a doomed call, kept across its tries.
#[derive(Debug, Clone, Copy)]
struct Doomed;

impl aws_smithy_types::config_bag::Storable for Doomed {
    type Storer = aws_smithy_types::config_bag::StoreReplace<Self>;
}

impl Outlasting {
    /// Dooms each record or counter write with probability `share` (0 to 1) once switched on;
    /// `seed` makes the choices repeatable for one order of calls.
    pub fn new(share: f64, seed: u64) -> Self {
        use rand::SeedableRng as _;
        Self {
            share,
            on: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            rng: Arc::new(Mutex::new(rand::rngs::StdRng::seed_from_u64(seed))),
            doomed: Arc::default(),
        }
    }

    /// Switches it on or off.
    pub fn set(&self, on: bool) {
        self.on.store(on, std::sync::atomic::Ordering::SeqCst);
    }

    /// How many record writes and counter writes were doomed so far.
    pub fn doomed(&self) -> (usize, usize) {
        *self.doomed.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What a DynamoDB call's input is to [`Outlasting`]: `Some(true)` a record write,
/// `Some(false)` a delivered-counter write, `None` anything else.
fn write_kind(input: &aws_smithy_runtime_api::client::interceptors::context::Input) -> Option<bool> {
    use aws_sdk_dynamodb::operation::{transact_write_items::TransactWriteItemsInput, update_item::UpdateItemInput};
    let records =
        |expression: &str,
         values: Option<&std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>>| {
            let sending =
                values.and_then(|v| v.get(":status")).and_then(|v| v.as_s().ok()).is_some_and(|s| s == "sending");
            expression.contains("attempts =") && !sending
        };
    if let Some(u) = input.downcast_ref::<UpdateItemInput>() {
        let expression = u.update_expression().unwrap_or("");
        if expression.starts_with("ADD delivered") {
            return Some(false);
        }
        return records(expression, u.expression_attribute_values()).then_some(true);
    }
    let t = input.downcast_ref::<TransactWriteItemsInput>()?;
    t.transact_items()
        .iter()
        .filter_map(|i| i.update())
        .any(|u| records(u.update_expression(), u.expression_attribute_values()))
        .then_some(true)
}

impl aws_smithy_runtime_api::client::interceptors::Intercept for Outlasting {
    fn name(&self) -> &'static str {
        "outlasting faults"
    }

    fn read_before_execution(
        &self,
        context: &aws_smithy_runtime_api::client::interceptors::context::BeforeSerializationInterceptorContextRef<'_>,
        cfg: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        use rand::Rng as _;
        cfg.interceptor_state().unset::<Doomed>();
        if !self.on.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        let Some(record) = write_kind(context.input()) else { return Ok(()) };
        if !self.rng.lock().unwrap_or_else(|e| e.into_inner()).random_bool(self.share) {
            return Ok(());
        }
        let mut doomed = self.doomed.lock().unwrap_or_else(|e| e.into_inner());
        if record {
            doomed.0 += 1;
        } else {
            doomed.1 += 1;
        }
        cfg.interceptor_state().store_put(Doomed);
        Ok(())
    }

    fn modify_before_transmit(
        &self,
        context: &mut aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextMut<'_>,
        _rc: &aws_smithy_runtime_api::client::runtime_components::RuntimeComponents,
        cfg: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        if cfg.load::<Doomed>().is_some() {
            crate::neutralize(context.request_mut(), "DynamoDB");
        }
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut aws_smithy_runtime_api::client::interceptors::context::BeforeDeserializationInterceptorContextMut<
            '_,
        >,
        _rc: &aws_smithy_runtime_api::client::runtime_components::RuntimeComponents,
        cfg: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        if cfg.load::<Doomed>().is_some() {
            *context.response_mut() = crate::injected_answer(400, "ThrottlingException", "injected: outlasting")?;
        }
        Ok(())
    }
}
