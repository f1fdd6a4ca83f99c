//! [`Store`] in memory, with DynamoDB's semantics where the services depend on them.
//!
//! - Every call goes through the [`Gate`]: it is one atomic step of the simulation, and it can
//!   fail before taking effect or after (the ambiguous case).
//! - Conditional writes check and write one item in that step; `commit` (TransactWriteItems)
//!   writes all its items or none. `insert_event` is DynamoStore's: a conditional put of the
//!   payload item, then one per delivery (in order; DynamoStore has 16 in flight), the
//!   `promised` mark when an item was not this call's (then a read of the deliveries and a
//!   put of each one absent), and after an error its take-back: a
//!   delete of each delivery this call's `ingest_token` marks, unless the event is promised,
//!   one step each, then the payload item's, on the same conditions and none of the first 99
//!   deliveries existing.
//! - The base table reads are strongly consistent; the GSIs (`due`, `by_endpoint`,
//!   `by_status`) see each item as it was some time ago: every write of an item
//!   reaches the indexes after a random delay (up to `max_lag_ms`, in order per item).
//! - The event-type catalog is kept but its calls are not steps of the simulation (no
//!   faults, no scheduling point): the simulated workloads have no catalog, and ingest's
//!   read of it would otherwise change every seed's schedule.
//! - `list_endpoints` pages may end early (fewer items than the limit, with a cursor).
//! - Every item written is measured against DynamoDB's 400 KB item limit (its JSON size, a
//!   close upper bound of DynamoDB's own count); a larger one is refused and recorded.
//!
//! The condition expressions mirrored are those of [`webhooks::store::DynamoStore`]: a
//! transition's guard (exists, status in the list, `attempt_count` equal, `due_at` equal when
//! given, `next_attempt_at` at or before a claim's bound), an endpoint's version guard, `attribute_not_exists(pk)` on creates and jobs, a job
//! claim's `due_at = :expected`.

use crate::sched::{Fault, Gate};
use crate::world::Shared;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use webhooks::clock::Clock;
use webhooks::domain::api_key::ApiKey;
use webhooks::domain::delivery_lifecycle::{DueItem, Field, Transition};
use webhooks::domain::event_type::{EventType, EventTypeVersion};
use webhooks::domain::ids::{DeliveryId, EndpointId, EventId, JobId, TenantId};
use webhooks::domain::model::{Delivery, DeliveryStatus, Endpoint, Job, StoredEvent};
use webhooks::domain::tenant::TenantSettings;
use webhooks::store::keys::{JOB_SHARD, due_shard, endpoint_bucket, endpoint_sk, stats_day_sk, time_sk};
use webhooks::store::lifecycle::{
    DeletedEndpoint, EXPUNGED_DIGEST, EventRecord, LifecycleStore, Purgeable, ScanPage, TenantSnapshot,
};
use webhooks::store::{ApiKeyStore, CounterStore, DeliveryStore, EndpointStore, EventStore, EventTypeStore, JobStore};
use webhooks::store::{
    Applied, Attention, AttentionMark, Committed, DeliveredTally, DeliveryQuery, DeliverySummary, Due, EndpointWrite,
    FailureCount, Inserted, Page, StoreError,
};

/// DynamoDB's largest item, bytes (400 KB).
pub const MAX_ITEM_BYTES: usize = 400 * 1024;

/// A delivery item with the index attributes DynamoDB keeps on it.
#[derive(Debug, Clone)]
pub struct DeliveryRow {
    /// The delivery.
    pub d: Delivery,
    /// `due_at` (milliseconds) while in the due index.
    pub due_at: Option<i64>,
    /// `ep_sk`: re-keyed only when a transition gives `created_at` (as DynamoStore does).
    pub ep_sk: String,
    /// `status_sk` while exhausted or held.
    pub status_sk: Option<String>,
    /// The mark of the ingest call that wrote it (`ingest_token`).
    pub ingest_token: u64,
}

/// A job item and its due-index time.
#[derive(Debug, Clone)]
pub struct JobRow {
    /// The job.
    pub job: Job,
    /// `due_at` (milliseconds) while running.
    pub due_at: Option<i64>,
}

/// An item as the indexes see it.
#[derive(Debug, Clone)]
enum Indexed {
    Delivery(Box<DeliveryRow>),
    Job { id: JobId, due_at: Option<i64> },
}

/// The table.
#[derive(Debug, Default)]
pub struct Tables {
    /// Endpoints by (tenant, id).
    pub endpoints: BTreeMap<(TenantId, EndpointId), Endpoint>,
    /// Endpoint id to tenant.
    pub pointers: BTreeMap<EndpointId, TenantId>,
    /// Event payload items by (tenant, event id).
    pub events: BTreeMap<(TenantId, EventId), StoredEvent>,
    /// The `ingest_token` of each event item, and whether it is `promised`.
    event_tokens: BTreeMap<(TenantId, EventId), (u64, bool)>,
    /// The last `ingest_token` handed out.
    last_token: u64,
    /// Deliveries by id.
    pub deliveries: BTreeMap<DeliveryId, DeliveryRow>,
    /// Jobs by id.
    pub jobs: BTreeMap<JobId, JobRow>,
    /// Rate counters by (endpoint id, unix second).
    rate_windows: BTreeMap<(String, i64), u64>,
    /// Delivered counters by (endpoint id, day key [`stats_day_sk`]).
    delivered_days: BTreeMap<(String, String), DeliveredTally>,
    /// The last delivery counted on each day's counter (DynamoStore's `last_counted`).
    delivered_marks: BTreeMap<(String, String), String>,
    /// The event-type catalog by name.
    pub event_types: BTreeMap<String, EventType>,
    /// The catalog's version records by (name, version).
    pub event_type_versions: BTreeMap<(String, u64), EventTypeVersion>,
    /// Producers' API keys by id.
    pub api_keys: BTreeMap<String, ApiKey>,
    /// The last (delivery, attempt) counted on each endpoint's failures (`last_failure`).
    failure_marks: BTreeMap<(TenantId, EndpointId), String>,
    /// When each endpoint's run of failures began (DynamoStore's failing mark), while it runs.
    failing_since: BTreeMap<(TenantId, EndpointId), chrono::DateTime<chrono::Utc>>,
    /// Endpoints whose run of failures was announced (DynamoStore's `failing_announced`).
    failing_announced: std::collections::BTreeSet<(TenantId, EndpointId)>,
    /// Per item key, its versions as the GSIs will see them: (visible from, ms; item or gone).
    gsi: BTreeMap<String, Vec<(i64, Option<Indexed>)>>,
    /// Tenants' settings items by tenant.
    pub settings: BTreeMap<TenantId, TenantSettings>,
    /// When each expunged event's payload was expunged, by (tenant, event id).
    expunged: BTreeMap<(TenantId, EventId), DateTime<Utc>>,
    /// Deleted endpoints' tombstones by (tenant, endpoint id).
    pub tombstones: BTreeMap<(TenantId, EndpointId), DeletedEndpoint>,
}

/// The in-memory store.
pub struct MemStore {
    gate: Gate,
    shared: Arc<Shared>,
    clock: Arc<dyn Clock>,
    /// The table (the driver reads it for the invariants).
    pub tables: Arc<Mutex<Tables>>,
    rng: Mutex<StdRng>,
    max_lag_ms: i64,
    shards: u32,
}

fn aws(op: &str) -> StoreError {
    StoreError::Aws(format!("simulated failure of {op}"))
}

fn size_of<T: serde::Serialize>(item: &T) -> usize {
    serde_json::to_vec(item).map(|v| v.len()).unwrap_or(usize::MAX)
}

fn summary(r: &DeliveryRow) -> DeliverySummary {
    let d = &r.d;
    DeliverySummary {
        id: d.id.clone(),
        event_id: d.event_id.clone(),
        event_type: d.event_type.clone(),
        tenant_id: d.tenant_id.clone(),
        endpoint_id: d.endpoint_id.clone(),
        status: d.status,
        attempt_count: d.attempt_count,
        next_attempt_at: d.next_attempt_at,
        created_at: d.created_at,
        updated_at: d.updated_at,
        expires_at: d.expires_at,
        exhausted_retention_days: d.exhausted_retention_days,
    }
}

fn set<T>(slot: &mut Option<T>, f: &Field<T>)
where
    T: Clone,
{
    match f {
        Field::Keep => {}
        Field::Set(v) => *slot = Some(v.clone()),
        Field::Remove => *slot = None,
    }
}

/// Whether a transition's guard holds on a row (DynamoStore's condition expression).
fn guard_holds(row: Option<&DeliveryRow>, t: &Transition) -> bool {
    let Some(r) = row else { return false };
    t.guard.status.contains(&r.d.status)
        && r.d.attempt_count == t.guard.attempt_count
        && t.guard.due_at.is_none_or(|g| r.due_at == Some(g))
        && t.guard.next_attempt_by.is_none_or(|by| r.d.next_attempt_at.is_some_and(|at| at <= by))
}

/// A transition's update expression, on a row.
fn apply_to(row: &mut DeliveryRow, id: &str, t: &Transition) {
    let d = &mut row.d;
    d.status = t.status;
    d.updated_at = t.now;
    if let Some(c) = t.attempt_count {
        d.attempt_count = c;
    }
    match &t.attempts_base {
        Field::Keep => {}
        Field::Set(v) => d.attempts_base = *v,
        Field::Remove => d.attempts_base = 0,
    }
    if t.forgive_attempt {
        d.attempts_base += 1;
    }
    set(&mut d.next_attempt_at, &t.next_attempt_at);
    set(&mut d.lease_until, &t.lease_until);
    set(&mut d.expires_at, &t.expires_at);
    set(&mut d.reason, &t.reason);
    set(&mut row.due_at, &t.due_at);
    if let Field::Set(list) = &t.attempts {
        d.attempts = list.clone();
    }
    match &t.attempts_dropped {
        Field::Keep => {}
        Field::Set(v) => d.attempts_dropped = *v,
        Field::Remove => d.attempts_dropped = 0,
    }
    if let Some(entry) = &t.entry {
        row.ep_sk = endpoint_sk(t.status, entry.created_at, id);
    }
    row.status_sk = matches!(t.status, DeliveryStatus::Exhausted | DeliveryStatus::Held).then(|| time_sk(t.now, id));
}

fn cursor_of(key: &str) -> String {
    format!("sim:{key}")
}

fn from_cursor(c: Option<&str>) -> Result<Option<String>, StoreError> {
    c.map(|c| c.strip_prefix("sim:").map(String::from).ok_or(StoreError::InvalidCursor)).transpose()
}

/// The listing a delivery listing's cursor belongs to (as DynamoStore's: endpoint, status,
/// direction); a cursor is refused on any other.
fn listing_of(q: &DeliveryQuery) -> String {
    let endpoint = q.endpoint_id.as_ref().map_or("", |e| e.as_str());
    let status = q.status.map_or("any", |st| st.as_str());
    format!("{endpoint}|{status}|{}", if q.oldest_first { "oldest" } else { "newest" })
}

/// Where a delivery listing's cursor `c` goes on from, when it is one of `listing`.
fn listing_cursor(c: Option<&str>, listing: &str) -> Result<Option<String>, StoreError> {
    let Some(text) = from_cursor(c)? else { return Ok(None) };
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|_| StoreError::InvalidCursor)?;
    match (json.get("of").and_then(|v| v.as_str()), json.get("after").and_then(|v| v.as_str())) {
        (Some(of), Some(after)) if of == listing => Ok(Some(after.to_string())),
        _ => Err(StoreError::InvalidCursor),
    }
}

impl MemStore {
    /// A store over empty tables.
    pub fn new(
        gate: Gate,
        shared: Arc<Shared>,
        clock: Arc<dyn Clock>,
        seed: u64,
        max_lag_ms: i64,
        shards: u32,
    ) -> Self {
        Self {
            gate,
            shared,
            clock,
            tables: Arc::new(Mutex::new(Tables::default())),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            max_lag_ms,
            shards,
        }
    }

    fn tables(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now_ms(&self) -> i64 {
        self.clock.now().timestamp_millis()
    }

    /// Records a write for the indexes, visible after a random lag (never before an earlier
    /// write of the same item).
    fn index(&self, t: &mut Tables, key: &str, item: Option<Indexed>) {
        let lag = if self.max_lag_ms > 0 {
            self.rng.lock().unwrap_or_else(|e| e.into_inner()).random_range(0..=self.max_lag_ms)
        } else {
            0
        };
        let now = self.now_ms();
        let versions = t.gsi.entry(key.to_string()).or_default();
        let at = versions.last().map_or(now + lag, |(v, _)| (*v).max(now + lag));
        // Versions no read can see any more (a later one is visible already) are dropped.
        let visible = versions.iter().rposition(|(v, _)| *v <= now);
        if let Some(i) = visible {
            versions.drain(..i);
        }
        versions.push((at, item));
    }

    fn index_delivery(&self, t: &mut Tables, id: &str) {
        let row = t.deliveries.get(id).cloned().map(|r| Indexed::Delivery(Box::new(r)));
        self.index(t, &format!("D#{id}"), row);
    }

    fn index_job(&self, t: &mut Tables, id: &JobId) {
        let row = t.jobs.get(id).map(|r| Indexed::Job { id: id.clone(), due_at: r.due_at });
        self.index(t, &format!("J#{id}"), row);
    }

    /// Every item as the indexes see it now.
    fn gsi_view<'a>(&self, t: &'a Tables) -> impl Iterator<Item = &'a Indexed> + 'a {
        let now = self.now_ms();
        t.gsi
            .values()
            .filter_map(move |versions| versions.iter().rev().find(|(v, _)| *v <= now).and_then(|(_, i)| i.as_ref()))
    }

    fn gsi_deliveries<'a>(&self, t: &'a Tables) -> impl Iterator<Item = &'a DeliveryRow> + 'a {
        self.gsi_view(t).filter_map(|i| match i {
            Indexed::Delivery(r) => Some(r.as_ref()),
            Indexed::Job { .. } => None,
        })
    }

    fn check_size(&self, what: &str, bytes: usize) -> Result<(), StoreError> {
        if bytes > MAX_ITEM_BYTES {
            self.shared.violation(format!("{what}: item of {bytes} bytes over DynamoDB's 400 KB"));
            return Err(StoreError::Invalid(format!("item size {bytes} over 400 KB")));
        }
        Ok(())
    }

    /// Runs `f` as one gated call: failed before, applied, or applied and then failed.
    async fn call<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&Self, &mut Tables) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let fault = self.gate.enter(op).await;
        if fault == Fault::FailBefore {
            return Err(aws(op));
        }
        let out = {
            let mut t = self.tables();
            f(self, &mut t)
        };
        if fault == Fault::FailAfter {
            return Err(aws(op));
        }
        out
    }

    /// DynamoStore's take-back after a failed ingest: per delivery tried (last to first), a
    /// step deleting it if its `ingest_token` is this call's and the event item is not
    /// promised (stopping at a promised one); then a step deleting the event item if it is
    /// this call's, not promised, and none of `fence` exists.
    async fn take_back(
        &self,
        token: u64,
        event: &StoredEvent,
        tried: &[(&Delivery, Option<i64>)],
        fence: &[(&Delivery, Option<i64>)],
    ) {
        let ekey = (event.tenant_id.clone(), event.event_id.clone());
        let promised = |t: &Tables| t.event_tokens.get(&ekey).is_some_and(|(_, p)| *p);
        let mut left = false;
        for (d, _) in tried.iter().rev() {
            let stop = self
                .call("store.insert_event.take_back", |s, t| {
                    if promised(t) {
                        return Ok(true);
                    }
                    if t.deliveries.get(&d.id).is_some_and(|row| row.ingest_token == token) {
                        t.deliveries.remove(&d.id);
                        s.index_delivery(t, &d.id);
                    }
                    Ok(false)
                })
                .await;
            match stop {
                Ok(true) => return,
                Ok(false) => {}
                Err(_) => left = true,
            }
        }
        // A delivery left behind keeps its event item.
        if left {
            return;
        }
        let _ = self
            .call("store.insert_event.take_back", |_, t| {
                let fenced = fence.iter().any(|(d, _)| t.deliveries.contains_key(&d.id));
                if !fenced && t.event_tokens.get(&ekey) == Some(&(token, false)) {
                    t.events.remove(&ekey);
                    t.event_tokens.remove(&ekey);
                }
                Ok(())
            })
            .await;
    }

    /// One delivery's conditional put, as ingest writes it: false when it exists.
    fn put_delivery(&self, t: &mut Tables, token: u64, d: &Delivery, due_at: Option<i64>) -> Result<bool, StoreError> {
        self.check_size("delivery", size_of(d))?;
        if t.deliveries.contains_key(&d.id) {
            return Ok(false);
        }
        let row = DeliveryRow {
            d: d.clone(),
            due_at,
            ep_sk: endpoint_sk(d.status, d.created_at, &d.id),
            status_sk: matches!(d.status, DeliveryStatus::Exhausted | DeliveryStatus::Held)
                .then(|| time_sk(d.updated_at, &d.id)),
            ingest_token: token,
        };
        t.deliveries.insert(d.id.clone(), row);
        self.index_delivery(t, &d.id);
        self.shared.accepted(&d.id);
        Ok(true)
    }

    fn transition(&self, t: &mut Tables, id: &DeliveryId, tr: &Transition) -> Result<bool, StoreError> {
        if !guard_holds(t.deliveries.get(id), tr) {
            return Ok(false);
        }
        let mut row = t.deliveries.get(id).cloned().ok_or_else(|| aws("apply"))?;
        // Only the lease's holder moves a claim on before the lease is over (the sweeper's
        // recovery of a lost worker waits for its end: the claim keeps an earlier due time).
        if tr.forgive_attempt && row.d.lease_until.is_some_and(|l| l.timestamp_millis() > self.now_ms()) {
            self.shared.violation(format!("{id}: lease of attempt {} taken before it was over", row.d.attempt_count));
        }
        apply_to(&mut row, id, tr);
        self.check_size("delivery", size_of(&row.d))?;
        self.shared.recorded(&row.d, tr);
        t.deliveries.insert(id.clone(), row);
        self.index_delivery(t, id);
        Ok(true)
    }

    fn put_job_row(&self, t: &mut Tables, job: &Job) -> Result<(), StoreError> {
        self.check_size("job", size_of(job))?;
        let due_at = match (job.run_at, job.status.as_str()) {
            (Some(at), "running") => Some(at.timestamp_millis()),
            _ => None,
        };
        t.jobs.insert(job.id.clone(), JobRow { job: job.clone(), due_at });
        self.index_job(t, &job.id);
        Ok(())
    }
}

#[async_trait]
impl EndpointStore for MemStore {
    /// DynamoStore's marks, read from the table as it is (no index lag), newest first; one
    /// page (the simulation's services do not list them).
    async fn attention_endpoints(
        &self,
        why: Attention,
        limit: usize,
        _cursor: Option<&str>,
    ) -> Result<Page<AttentionMark>, StoreError> {
        self.call("store.attention_endpoints", |_, t| {
            let mut data: Vec<AttentionMark> = t
                .endpoints
                .iter()
                .filter_map(|(k, e)| {
                    let since = match why {
                        Attention::Stopped if !e.enabled => Some(e.disabled.as_ref().map_or(e.updated_at, |d| d.at)),
                        Attention::Failing if e.enabled => t.failing_since.get(k).copied(),
                        _ => None,
                    }?;
                    Some(AttentionMark { tenant_id: k.0.clone(), endpoint_id: k.1.clone(), since })
                })
                .collect();
            data.sort_by(|a, b| b.since.cmp(&a.since).then_with(|| b.endpoint_id.cmp(&a.endpoint_id)));
            data.truncate(limit.clamp(1, 100));
            Ok(Page { data, next_cursor: None })
        })
        .await
    }

    async fn create_endpoint(&self, endpoint: &Endpoint) -> Result<(), StoreError> {
        self.call("store.create_endpoint", |s, t| {
            s.check_size("endpoint", size_of(endpoint))?;
            let key = (endpoint.tenant_id.clone(), endpoint.id.clone());
            // DynamoStore's: the very same endpoint (an earlier try of this create) is success.
            if let Some(found) = t.endpoints.get(&key)
                && found.secret == endpoint.secret
                && found.created_at == endpoint.created_at
            {
                return Ok(());
            }
            if t.endpoints.contains_key(&key) || t.pointers.contains_key(&endpoint.id) {
                return Err(StoreError::AlreadyExists);
            }
            t.endpoints.insert(key, endpoint.clone());
            t.pointers.insert(endpoint.id.clone(), endpoint.tenant_id.clone());
            Ok(())
        })
        .await
    }

    async fn get_endpoint(&self, tenant_id: &TenantId, id: &EndpointId) -> Result<Option<Endpoint>, StoreError> {
        self.call("store.get_endpoint", |_, t| Ok(t.endpoints.get(&(tenant_id.clone(), id.clone())).cloned())).await
    }

    async fn find_endpoint(&self, id: &EndpointId) -> Result<Option<Endpoint>, StoreError> {
        self.call("store.find_endpoint", |_, t| {
            Ok(t.pointers.get(id).and_then(|tenant| t.endpoints.get(&(tenant.clone(), id.clone()))).cloned())
        })
        .await
    }

    /// One endpoint item (no copies): the same as [`EndpointStore::get_endpoint`].
    async fn read_endpoint(
        &self,
        tenant_id: &TenantId,
        id: &EndpointId,
        _key: &str,
    ) -> Result<Option<Endpoint>, StoreError> {
        self.call("store.read_endpoint", |_, t| Ok(t.endpoints.get(&(tenant_id.clone(), id.clone())).cloned())).await
    }

    async fn tenant_endpoints(&self, tenant_id: &TenantId, _key: &str) -> Result<Vec<Endpoint>, StoreError> {
        self.call("store.tenant_endpoints", |_, t| {
            Ok(t.endpoints.iter().filter(|((tn, _), _)| tn == tenant_id).map(|(_, e)| e.clone()).collect())
        })
        .await
    }

    async fn commit(
        &self,
        endpoint: EndpointWrite<'_>,
        delivery: Option<(&DeliveryId, &Transition)>,
    ) -> Result<Committed, StoreError> {
        self.call("store.commit", |s, t| {
            let (tenant, id, version) = match endpoint {
                EndpointWrite::Change(c) => (&c.endpoint.tenant_id, &c.endpoint.id, c.expected_version),
                EndpointWrite::Unchanged { tenant_id, id, version } => (tenant_id, id, version),
            };
            let key = (tenant.clone(), id.clone());
            if t.endpoints.get(&key).is_none_or(|e| e.version != version) {
                return Ok(Committed::EndpointChanged);
            }
            if let Some((did, tr)) = delivery
                && !guard_holds(t.deliveries.get(did), tr)
            {
                return Ok(Committed::DeliveryLost);
            }
            if let EndpointWrite::Change(c) = endpoint {
                if c.jobs.iter().chain(delivery.iter().flat_map(|(_, tr)| &tr.jobs)).any(|j| t.jobs.contains_key(&j.id))
                {
                    return Err(StoreError::Aws("transaction cancelled: a job id exists".into()));
                }
                s.check_size("endpoint", size_of(&c.endpoint))?;
            }
            // Everything holds: write it all.
            if let Some((did, tr)) = delivery {
                s.transition(t, did, tr)?;
                for job in &tr.jobs {
                    s.put_job_row(t, job)?;
                }
            }
            if let EndpointWrite::Change(c) = endpoint {
                let stored = t.endpoints.get(&key);
                let old = stored.map_or(0, |e| e.consecutive_failures);
                let mut new = c.endpoint.clone();
                if !c.reset_failures {
                    new.consecutive_failures = old;
                } else {
                    t.failing_since.remove(&key);
                    t.failing_announced.remove(&key);
                }
                // As DynamoStore's endpoint change: the unversioned state (the adaptive rate,
                // the slow-lane marker; model::UNVERSIONED_ENDPOINT_ATTRIBUTES) is not written
                // back from the copy read before, it stays as stored.
                new.effective_rate_per_second = stored.and_then(|e| e.effective_rate_per_second);
                new.rate_changed_at_ms = stored.and_then(|e| e.rate_changed_at_ms);
                new.slow_until = stored.and_then(|e| e.slow_until);
                t.endpoints.insert(key, new);
                for job in &c.jobs {
                    s.put_job_row(t, job)?;
                }
            }
            Ok(Committed::Done)
        })
        .await
    }

    async fn delete_endpoint(&self, deleted: &DeletedEndpoint) -> Result<(), StoreError> {
        self.call("store.delete_endpoint", |_, t| {
            let key = (deleted.tenant_id.clone(), deleted.endpoint_id.clone());
            t.endpoints.remove(&key);
            t.failing_since.remove(&key);
            t.failing_announced.remove(&key);
            t.pointers.remove(&deleted.endpoint_id);
            t.tombstones.insert(key, deleted.clone());
            Ok(())
        })
        .await
    }

    async fn list_endpoints(
        &self,
        tenant_id: &TenantId,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<Page<Endpoint>, StoreError> {
        let after = from_cursor(cursor)?;
        let short = self.rng.lock().unwrap_or_else(|e| e.into_inner()).random_bool(0.3);
        self.call("store.list_endpoints", |_, t| {
            let mut all: Vec<Endpoint> = t
                .endpoints
                .iter()
                .filter(|((tn, id), _)| tn == tenant_id && after.as_ref().is_none_or(|a| id.as_str() > a.as_str()))
                .map(|(_, e)| e.clone())
                .collect();
            // A page that ends early (1 MB read) still says where to go on.
            let take = if short { (limit.clamp(1, 100) / 2).max(1) } else { limit.clamp(1, 100) };
            let more = all.len() > take || (short && !all.is_empty());
            all.truncate(take);
            let next_cursor = if more { all.last().map(|e| cursor_of(&e.id)) } else { None };
            Ok(Page { data: all, next_cursor })
        })
        .await
    }
}

#[async_trait]
impl CounterStore for MemStore {
    /// No copies here: the endpoint's own count.
    async fn failures_in_a_row(&self, endpoint: &Endpoint) -> Result<u32, StoreError> {
        Ok(endpoint.consecutive_failures)
    }

    /// No copies here: each endpoint's own count.
    async fn listed_failures_in_a_row(&self, endpoints: &[Endpoint]) -> Result<Vec<u32>, StoreError> {
        Ok(endpoints.iter().map(|e| e.consecutive_failures).collect())
    }

    async fn count_failure(
        &self,
        tenant_id: &TenantId,
        id: &EndpointId,
        key: &str,
        attempt: u32,
        threshold: u32,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<FailureCount>, StoreError> {
        let mark = format!("{key}#{attempt}");
        self.call("store.count_failure", |_, t| {
            let k = (tenant_id.clone(), id.clone());
            let Some(e) = t.endpoints.get_mut(&k) else { return Ok(None) };
            // DynamoStore's mark: the same (key, attempt) as the last counted adds nothing.
            if t.failure_marks.get(&k) != Some(&mark) {
                e.consecutive_failures += 1;
                t.failure_marks.insert(k.clone(), mark);
            }
            let announced = t.failing_announced.contains(&k);
            t.failing_since.entry(k).or_insert(at);
            Ok(Some(FailureCount::single_announced(e.consecutive_failures, threshold, announced)))
        })
        .await
    }

    async fn count_delivered(
        &self,
        endpoint_id: &EndpointId,
        delivery_ids: &[DeliveryId],
        at: chrono::DateTime<chrono::Utc>,
        _expires_at: i64,
    ) -> Result<(), StoreError> {
        let Some(delivery_id) = delivery_ids.iter().min() else { return Ok(()) };
        self.call("store.count_delivered", |_, t| {
            let day = t.delivered_days.entry((endpoint_id.to_string(), stats_day_sk(at))).or_default();
            // DynamoStore's `last_counted`: the same delivery again adds nothing.
            let last = t.delivered_marks.entry((endpoint_id.to_string(), stats_day_sk(at))).or_default();
            if last != delivery_id {
                day.delivered += delivery_ids.len() as u64;
                day.last_delivered_at = Some(at);
                *last = delivery_id.to_string();
            }
            Ok(())
        })
        .await
    }

    async fn delivered_tally(
        &self,
        endpoint_id: &EndpointId,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<DeliveredTally, StoreError> {
        let from = stats_day_sk(since);
        self.call("store.delivered_tally", |_, t| {
            let days: Vec<_> = t
                .delivered_days
                .iter()
                .filter(|((ep, day), _)| ep == endpoint_id && *day >= from)
                .map(|(_, d)| d)
                .collect();
            Ok(DeliveredTally {
                delivered: days.iter().map(|d| d.delivered).sum(),
                last_delivered_at: days.iter().filter_map(|d| d.last_delivered_at).max(),
            })
        })
        .await
    }

    async fn reset_failures(&self, tenant_id: &TenantId, id: &EndpointId, _key: &str) -> Result<(), StoreError> {
        self.call("store.reset_failures", |_, t| {
            if let Some(e) = t.endpoints.get_mut(&(tenant_id.clone(), id.clone())) {
                e.consecutive_failures = 0;
            }
            t.failing_since.remove(&(tenant_id.clone(), id.clone()));
            t.failing_announced.remove(&(tenant_id.clone(), id.clone()));
            Ok(())
        })
        .await
    }

    async fn announce_failing(&self, tenant_id: &TenantId, id: &EndpointId, notify: &Job) -> Result<bool, StoreError> {
        self.call("store.announce_failing", |s, t| {
            let k = (tenant_id.clone(), id.clone());
            if !t.endpoints.contains_key(&k) || t.failing_announced.contains(&k) {
                return Ok(false);
            }
            if t.jobs.contains_key(&notify.id) {
                return Err(StoreError::Aws("transaction cancelled: a job id exists".into()));
            }
            s.put_job_row(t, notify)?;
            t.failing_announced.insert(k);
            Ok(true)
        })
        .await
    }

    async fn set_slow_until(
        &self,
        tenant_id: &TenantId,
        id: &EndpointId,
        until: Option<DateTime<Utc>>,
    ) -> Result<(), StoreError> {
        self.call("store.set_slow_until", |_, t| {
            if let Some(e) = t.endpoints.get_mut(&(tenant_id.clone(), id.clone())) {
                e.slow_until = until;
            }
            Ok(())
        })
        .await
    }

    async fn take_rate_slot(&self, endpoint_id: &str, second: i64) -> Result<u64, StoreError> {
        self.call("store.take_rate_slot", |_, t| {
            let n = t.rate_windows.entry((endpoint_id.to_string(), second)).or_insert(0);
            *n += 1;
            Ok(*n)
        })
        .await
    }

    async fn set_effective_rate(
        &self,
        tenant_id: &TenantId,
        id: &EndpointId,
        expected_ms: Option<i64>,
        rate: f64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        self.call("store.set_effective_rate", |_, t| {
            Ok(match t.endpoints.get_mut(&(tenant_id.clone(), id.clone())) {
                Some(e) if e.rate_changed_at_ms == expected_ms => {
                    e.effective_rate_per_second = Some(rate);
                    e.rate_changed_at_ms = Some(now_ms);
                    true
                }
                _ => false,
            })
        })
        .await
    }
}

#[async_trait]
impl EventStore for MemStore {
    async fn insert_event(
        &self,
        event: &StoredEvent,
        deliveries: &[(&Delivery, Option<i64>)],
    ) -> Result<Inserted, StoreError> {
        if deliveries.is_empty() {
            return Ok(Inserted { event: false, deliveries: Vec::new() });
        }
        // As DynamoStore writes it: a conditional put of the payload item, then one per
        // delivery, each a step of its own (a crash or a failure can fall between any two);
        // after an error the items are taken back; when some existed, the event item is
        // marked promised and the missing deliveries put again.
        let token = {
            let mut t = self.tables();
            t.last_token += 1;
            t.last_token
        };
        let ekey = (event.tenant_id.clone(), event.event_id.clone());
        let fence = &deliveries[..deliveries.len().min(99)];
        let mut created = vec![false; deliveries.len()];
        let mut event_new = false;
        for round in 0..3 {
            let tried = if round == 0 { &[][..] } else { deliveries };
            let put_event = self
                .call("store.insert_event.put", |s, t| {
                    s.check_size("event", size_of(event))?;
                    if let Some(found) = t.events.get(&ekey) {
                        // As DynamoStore's ADD of the endpoints, conditional on the fingerprint.
                        return match (&found.request_sha256, &event.request_sha256) {
                            (Some(theirs), Some(ours)) if theirs != ours => Err(StoreError::RequestMismatch),
                            _ => Ok(false),
                        };
                    }
                    t.events.insert(ekey.clone(), event.clone());
                    t.event_tokens.insert(ekey.clone(), (token, false));
                    Ok(true)
                })
                .await;
            match put_event {
                Ok(c) => event_new |= c,
                Err(e) => {
                    self.take_back(token, event, tried, fence).await;
                    return Err(e);
                }
            }
            let mut failed = None;
            for (i, (d, due_at)) in deliveries.iter().enumerate() {
                match self.call("store.insert_event.put", |s, t| s.put_delivery(t, token, d, *due_at)).await {
                    Ok(c) => created[i] |= c,
                    Err(e) => {
                        failed.get_or_insert(e);
                    }
                }
            }
            if let Some(e) = failed {
                self.take_back(token, event, deliveries, fence).await;
                return Err(e);
            }
            if event_new && created.iter().all(|c| *c) {
                return Ok(Inserted { event: event_new, deliveries: created });
            }
            let promised = self
                .call("store.insert_event.promise", |_, t| {
                    Ok(t.event_tokens.get_mut(&ekey).map(|(_, p)| *p = true).is_some())
                })
                .await;
            match promised {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    self.take_back(token, event, deliveries, fence).await;
                    return Err(e);
                }
            }
            for _ in 0..3 {
                // One read of the deliveries not this call's (a BatchGetItem), then a put of
                // each one absent.
                let read = self
                    .call("store.insert_event.read", |_, t| {
                        Ok(deliveries.iter().map(|(d, _)| t.deliveries.contains_key(&d.id)).collect::<Vec<_>>())
                    })
                    .await;
                let Ok(present) = read else { continue };
                let mut failed = None;
                for (i, (d, due_at)) in deliveries.iter().enumerate() {
                    if created[i] || present[i] {
                        continue;
                    }
                    match self.call("store.insert_event.put", |s, t| s.put_delivery(t, token, d, *due_at)).await {
                        Ok(c) => created[i] |= c,
                        Err(e) => {
                            failed.get_or_insert(e);
                        }
                    }
                }
                if failed.is_none() {
                    return Ok(Inserted { event: event_new, deliveries: created });
                }
            }
            return Err(aws("insert_event (deliveries after the promise)"));
        }
        self.take_back(token, event, deliveries, fence).await;
        Err(aws("insert_event (taken back three times)"))
    }

    async fn get_payload(&self, tenant_id: &TenantId, event_id: &EventId) -> Result<Option<String>, StoreError> {
        self.call("store.get_payload", |_, t| {
            let key = (tenant_id.clone(), event_id.clone());
            Ok(t.events.get(&key).filter(|_| !t.expunged.contains_key(&key)).map(|e| e.payload.clone()))
        })
        .await
    }
}

#[async_trait]
impl DeliveryStore for MemStore {
    async fn get_delivery(&self, id: &DeliveryId) -> Result<Option<Delivery>, StoreError> {
        self.call("store.get_delivery", |_, t| Ok(t.deliveries.get(id).map(|r| r.d.clone()))).await
    }

    async fn apply(&self, id: &DeliveryId, tr: &Transition, return_new: bool) -> Result<Applied, StoreError> {
        self.call("store.apply", |s, t| {
            // As DynamoStore's: a transition with jobs is one transaction with their puts.
            if tr.jobs.iter().any(|j| t.jobs.contains_key(&j.id)) && guard_holds(t.deliveries.get(id), tr) {
                return Err(StoreError::Aws("transaction cancelled: a job id exists".into()));
            }
            if !s.transition(t, id, tr)? {
                return Ok(Applied::Lost);
            }
            for job in &tr.jobs {
                s.put_job_row(t, job)?;
            }
            Ok(Applied::Done(if return_new { t.deliveries.get(id).map(|r| Box::new(r.d.clone())) } else { None }))
        })
        .await
    }

    async fn due(&self, shard: u32, until_ms: i64, limit: usize, after: Option<&Due>) -> Result<Vec<Due>, StoreError> {
        let after_key = after.map(|a| match a {
            Due::Delivery(d) => (d.due_at, format!("DELIVERY#{}", d.id)),
            Due::Job { id, due_at } => (*due_at, format!("JOB#{id}")),
        });
        self.call("store.due", |s, t| {
            let mut items: Vec<((i64, String), Due)> = s
                .gsi_view(t)
                .filter_map(|i| match i {
                    Indexed::Delivery(r) => {
                        let at = r.due_at?;
                        let d = &r.d;
                        Some((
                            (at, format!("DELIVERY#{}", d.id)),
                            Due::Delivery(DueItem {
                                id: d.id.clone(),
                                status: d.status,
                                attempt_count: d.attempt_count,
                                due_at: at,
                                next_attempt_at: d.next_attempt_at,
                                lease_until: d.lease_until,
                            }),
                        ))
                    }
                    Indexed::Job { id, due_at } => {
                        let at = (*due_at)?;
                        Some(((at, format!("JOB#{id}")), Due::Job { id: id.clone(), due_at: at }))
                    }
                })
                .filter(|((at, key), _)| {
                    // Jobs have their own partition (JOB_SHARD), as in DynamoStore.
                    let (kind, id) = key.split_once('#').unwrap_or(("", ""));
                    let of = if kind == "JOB" { JOB_SHARD } else { due_shard(id, s.shards) };
                    of == shard && *at <= until_ms
                })
                .filter(|(k, _)| after_key.as_ref().is_none_or(|a| k > a))
                .collect();
            items.sort_by(|a, b| a.0.cmp(&b.0));
            items.truncate(limit);
            Ok(items.into_iter().map(|(_, d)| d).collect())
        })
        .await
    }

    async fn list_deliveries(&self, q: &DeliveryQuery) -> Result<Page<DeliverySummary>, StoreError> {
        let limit = q.limit.clamp(1, 100);
        let listing = listing_of(q);
        let after = listing_cursor(q.cursor.as_deref(), &listing)?;
        self.call("store.list_deliveries", |s, t| {
            let rows = s.gsi_deliveries(t);
            let since = q.since.map(|x| time_sk(x, ""));
            let until = q.until.map(|x| time_sk(x, ""));
            let mut keyed: Vec<(String, &DeliveryRow)> = match (&q.endpoint_id, q.status) {
                (Some(ep), status) => rows
                    .filter(|r| &r.d.endpoint_id == ep)
                    .filter_map(|r| {
                        let (bucket, rest) = r.ep_sk.split_once('#')?;
                        if let Some(st) = status {
                            if bucket != endpoint_bucket(st) {
                                return None;
                            }
                            if matches!(st, DeliveryStatus::Scheduled | DeliveryStatus::Sending) && r.d.status != st {
                                return None;
                            }
                        }
                        if since.as_ref().is_some_and(|x| rest < x.as_str())
                            || until.as_ref().is_some_and(|x| rest > x.as_str())
                        {
                            return None;
                        }
                        let key = if status.is_some() { r.ep_sk.clone() } else { rest.to_string() };
                        Some((key, r))
                    })
                    .collect(),
                (None, Some(st)) if matches!(st, DeliveryStatus::Exhausted | DeliveryStatus::Held) => {
                    rows.filter(|r| r.d.status == st).filter_map(|r| r.status_sk.clone().map(|k| (k, r))).collect()
                }
                _ => return Err(StoreError::Unsupported("list deliveries by endpoint_id or by status".into())),
            };
            keyed.sort_by(|a, b| a.0.cmp(&b.0));
            if !q.oldest_first {
                keyed.reverse();
            }
            if let Some(a) = &after {
                keyed.retain(|(k, _)| if q.oldest_first { k > a } else { k < a });
            }
            let more = keyed.len() > limit;
            keyed.truncate(limit);
            let next_cursor = if more {
                keyed.last().map(|(k, _)| cursor_of(&serde_json::json!({"of": listing, "after": k}).to_string()))
            } else {
                None
            };
            Ok(Page { data: keyed.iter().map(|(_, r)| summary(r)).collect(), next_cursor })
        })
        .await
    }

    async fn count_deliveries(&self, endpoint_id: &EndpointId, status: DeliveryStatus) -> Result<u64, StoreError> {
        self.call("store.count_deliveries", |s, t| {
            let bucket = format!("{}#", endpoint_bucket(status));
            Ok(s.gsi_deliveries(t)
                .filter(|r| r.d.endpoint_id == *endpoint_id && r.ep_sk.starts_with(&bucket))
                .filter(|r| {
                    !matches!(status, DeliveryStatus::Scheduled | DeliveryStatus::Sending) || r.d.status == status
                })
                .count() as u64)
        })
        .await
    }

    async fn event_deliveries(&self, event_id: &EventId) -> Result<Vec<DeliverySummary>, StoreError> {
        self.call("store.event_deliveries", |s, t| {
            Ok(s.gsi_deliveries(t).filter(|r| r.d.event_id == *event_id).map(summary).collect())
        })
        .await
    }
}

#[async_trait]
impl JobStore for MemStore {
    async fn create_job(&self, job: &Job) -> Result<(), StoreError> {
        self.call("store.create_job", |s, t| {
            if t.jobs.contains_key(&job.id) {
                return Err(StoreError::AlreadyExists);
            }
            s.put_job_row(t, job)
        })
        .await
    }

    async fn save_job(&self, job: &Job, lease_due_at: i64) -> Result<bool, StoreError> {
        self.call("store.save_job", |s, t| match t.jobs.get(&job.id) {
            Some(r) if r.due_at == Some(lease_due_at) => s.put_job_row(t, job).map(|()| true),
            _ => Ok(false),
        })
        .await
    }

    async fn finish_job(&self, job: &Job, lease_due_at: i64, notify: &Job) -> Result<bool, StoreError> {
        self.call("store.finish_job", |s, t| match t.jobs.get(&job.id) {
            Some(r) if r.due_at == Some(lease_due_at) => {
                if t.jobs.contains_key(&notify.id) {
                    return Err(StoreError::Aws("transaction cancelled: a job id exists".into()));
                }
                s.put_job_row(t, job)?;
                s.put_job_row(t, notify).map(|()| true)
            }
            _ => Ok(false),
        })
        .await
    }

    async fn get_job(&self, id: &JobId) -> Result<Option<Job>, StoreError> {
        self.call("store.get_job", |_, t| Ok(t.jobs.get(id).map(|r| r.job.clone()))).await
    }

    async fn claim_job(&self, id: &JobId, expected_due_at: i64, lease_due_at: i64) -> Result<bool, StoreError> {
        self.call("store.claim_job", |s, t| match t.jobs.get_mut(id) {
            Some(r) if r.due_at == Some(expected_due_at) => {
                r.due_at = Some(lease_due_at);
                s.index_job(t, id);
                Ok(true)
            }
            _ => Ok(false),
        })
        .await
    }
}

#[async_trait]
impl EventTypeStore for MemStore {
    async fn create_event_type(&self, event_type: &EventType) -> Result<(), StoreError> {
        let mut t = self.tables();
        if t.event_types.contains_key(&event_type.name) {
            return Err(StoreError::AlreadyExists);
        }
        t.event_types.insert(event_type.name.clone(), event_type.clone());
        t.event_type_versions.insert((event_type.name.clone(), event_type.version), event_type.version_record());
        Ok(())
    }

    async fn get_event_type(&self, name: &str) -> Result<Option<EventType>, StoreError> {
        Ok(self.tables().event_types.get(name).cloned())
    }

    async fn event_type_version(&self, name: &str, version: u64) -> Result<Option<EventTypeVersion>, StoreError> {
        Ok(self.tables().event_type_versions.get(&(name.to_string(), version)).cloned())
    }

    async fn save_event_type(
        &self,
        event_type: &EventType,
        expected_revision: u64,
        new_version: bool,
    ) -> Result<bool, StoreError> {
        let mut t = self.tables();
        let key = (event_type.name.clone(), event_type.version);
        let current = t.event_types.get(&event_type.name).map(|e| e.revision);
        if current != Some(expected_revision) || (new_version && t.event_type_versions.contains_key(&key)) {
            return Ok(false);
        }
        t.event_types.insert(event_type.name.clone(), event_type.clone());
        if new_version {
            t.event_type_versions.insert(key, event_type.version_record());
        }
        Ok(true)
    }

    async fn list_event_types(&self, limit: usize, cursor: Option<&str>) -> Result<Page<EventType>, StoreError> {
        let after = from_cursor(cursor)?;
        let t = self.tables();
        let mut data: Vec<EventType> = t
            .event_types
            .values()
            .filter(|e| after.as_ref().is_none_or(|a| e.name.as_str() > a.as_str()))
            .take(limit.clamp(1, 100) + 1)
            .cloned()
            .collect();
        let more = data.len() > limit.clamp(1, 100);
        data.truncate(limit.clamp(1, 100));
        let next_cursor = more.then(|| data.last().map(|e| format!("sim:{}", e.name))).flatten();
        Ok(Page { data, next_cursor })
    }
}

#[async_trait]
impl ApiKeyStore for MemStore {
    async fn create_api_key(&self, key: &ApiKey) -> Result<(), StoreError> {
        let mut t = self.tables();
        if t.api_keys.contains_key(&key.id) {
            return Err(StoreError::AlreadyExists);
        }
        t.api_keys.insert(key.id.clone(), key.clone());
        Ok(())
    }

    async fn get_api_key(&self, id: &str) -> Result<Option<ApiKey>, StoreError> {
        Ok(self.tables().api_keys.get(id).cloned())
    }

    async fn list_api_keys(&self, limit: usize, cursor: Option<&str>) -> Result<Page<ApiKey>, StoreError> {
        let after = from_cursor(cursor)?;
        let t = self.tables();
        let limit = limit.clamp(1, 100);
        let mut data: Vec<ApiKey> = t
            .api_keys
            .values()
            .filter(|k| after.as_ref().is_none_or(|a| k.id.as_str() > a.as_str()))
            .take(limit + 1)
            .cloned()
            .collect();
        let more = data.len() > limit;
        data.truncate(limit);
        let next_cursor = more.then(|| data.last().map(|k| format!("sim:{}", k.id))).flatten();
        Ok(Page { data, next_cursor })
    }

    async fn revoke_api_key(&self, id: &str, at: DateTime<Utc>) -> Result<Option<ApiKey>, StoreError> {
        let mut t = self.tables();
        Ok(t.api_keys.get_mut(id).map(|k| {
            k.revoked_at.get_or_insert(at);
            k.clone()
        }))
    }

    async fn remove_api_key_tenant(&self, id: &str, tenant_id: &str) -> Result<Option<ApiKey>, StoreError> {
        let mut t = self.tables();
        Ok(t.api_keys.get_mut(id).map(|k| {
            if let Some(tenants) = k.tenant_ids.as_mut().filter(|t| t.len() > 1) {
                tenants.retain(|x| x != tenant_id);
            }
            k.clone()
        }))
    }

    async fn touch_api_key(&self, id: &str, at: DateTime<Utc>) -> Result<(), StoreError> {
        if let Some(k) = self.tables().api_keys.get_mut(id) {
            k.last_used_at = Some(at);
        }
        Ok(())
    }
}

/// DynamoStore's lifecycle items: the settings item (no copies here), an event's expunge, and
/// the purge's deletes guarded on the job's lease; the delivered counters and rate windows
/// listed as `Counter("STATS#{endpoint}", day)` and `Counter("RATE#{endpoint}", second)`.
#[async_trait]
impl LifecycleStore for MemStore {
    async fn tenant_snapshot(&self, tenant_id: &TenantId, _key: &str) -> Result<TenantSnapshot, StoreError> {
        self.call("store.tenant_snapshot", |_, t| {
            Ok(TenantSnapshot {
                endpoints: t.endpoints.iter().filter(|((tn, _), _)| tn == tenant_id).map(|(_, e)| e.clone()).collect(),
                settings: t.settings.get(tenant_id).cloned(),
            })
        })
        .await
    }

    async fn get_settings(&self, tenant_id: &TenantId) -> Result<Option<TenantSettings>, StoreError> {
        self.call("store.get_settings", |_, t| Ok(t.settings.get(tenant_id).cloned())).await
    }

    async fn save_settings(
        &self,
        settings: &TenantSettings,
        expected_version: u64,
        job: Option<&Job>,
    ) -> Result<bool, StoreError> {
        self.call("store.save_settings", |s, t| {
            let stored = t.settings.get(&settings.tenant_id).map_or(0, |x| x.version);
            if stored != expected_version {
                return Ok(false);
            }
            if let Some(job) = job {
                if t.jobs.contains_key(&job.id) {
                    return Err(StoreError::Aws("transaction cancelled: a job id exists".into()));
                }
                s.put_job_row(t, job)?;
            }
            t.settings.insert(settings.tenant_id.clone(), settings.clone());
            Ok(true)
        })
        .await
    }

    async fn event_record(&self, tenant_id: &TenantId, event_id: &EventId) -> Result<Option<EventRecord>, StoreError> {
        self.call("store.event_record", |_, t| {
            let key = (tenant_id.clone(), event_id.clone());
            Ok(t.events.get(&key).map(|e| EventRecord {
                tenant_id: e.tenant_id.clone(),
                event_id: e.event_id.clone(),
                expires_at: e.expires_at,
                expunged_at: t.expunged.get(&key).copied(),
            }))
        })
        .await
    }

    async fn expunge_payload(
        &self,
        tenant_id: &TenantId,
        event_id: &EventId,
        delivery_ids: &[DeliveryId],
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.call("store.expunge_payload", |s, t| {
            for id in delivery_ids {
                if let Some(r) = t.deliveries.get_mut(id) {
                    r.d.payload_sha256 = Some(EXPUNGED_DIGEST.to_string());
                    s.index_delivery(t, id);
                }
            }
            let key = (tenant_id.clone(), event_id.clone());
            let Some(event) = t.events.get_mut(&key) else { return Ok(false) };
            // The request's fingerprint goes with the payload (a digest of a short payload
            // can be guessed).
            event.request_sha256 = None;
            t.expunged.entry(key).or_insert(at);
            Ok(true)
        })
        .await
    }

    async fn endpoint_counters(
        &self,
        endpoint_id: &EndpointId,
        _rate_limit_per_second: Option<u32>,
        limit: usize,
    ) -> Result<Vec<Purgeable>, StoreError> {
        self.call("store.endpoint_counters", |_, t| {
            let stats = t.delivered_days.keys().filter(|(ep, _)| ep == endpoint_id);
            let mut out: Vec<Purgeable> =
                stats.map(|(ep, day)| Purgeable::Item(format!("STATS#{ep}"), day.clone())).collect();
            let rates = t.rate_windows.keys().filter(|(ep, _)| ep == endpoint_id);
            out.extend(rates.map(|(ep, second)| Purgeable::Item(format!("RATE#{ep}"), second.to_string())));
            out.truncate(limit);
            Ok(out)
        })
        .await
    }

    async fn deleted_endpoints(&self, tenant_id: &TenantId) -> Result<Vec<DeletedEndpoint>, StoreError> {
        self.call("store.deleted_endpoints", |_, t| {
            Ok(t.tombstones.iter().filter(|((tn, _), _)| tn == tenant_id).map(|(_, d)| d.clone()).collect())
        })
        .await
    }

    /// The whole table in one page (the cursor and page count are DynamoStore's concern).
    async fn scan_tenant(
        &self,
        tenant_id: &TenantId,
        _cursor: Option<&str>,
        _pages: usize,
    ) -> Result<ScanPage, StoreError> {
        self.call("store.scan_tenant", |_, t| {
            let ours = |tn: &TenantId| tn == tenant_id;
            let mut items: Vec<Purgeable> = t
                .endpoints
                .keys()
                .filter(|(tn, _)| ours(tn))
                .map(|(tn, id)| Purgeable::Endpoint(tn.clone(), id.clone()))
                .collect();
            items.extend(
                t.tombstones
                    .keys()
                    .filter(|(tn, _)| ours(tn))
                    .map(|(tn, id)| Purgeable::Tombstone(tn.clone(), id.clone())),
            );
            items.extend(
                t.events.keys().filter(|(tn, _)| ours(tn)).map(|(tn, id)| Purgeable::Event(tn.clone(), id.clone())),
            );
            items.extend(
                t.deliveries.values().filter(|r| ours(&r.d.tenant_id)).map(|r| Purgeable::Delivery(r.d.id.clone())),
            );
            Ok(ScanPage { items, next: None })
        })
        .await
    }

    async fn purge(&self, job_id: &JobId, lease_due_at: i64, items: &[Purgeable]) -> Result<bool, StoreError> {
        self.call("store.purge", |s, t| {
            if t.jobs.get(job_id).and_then(|r| r.due_at) != Some(lease_due_at) {
                return Ok(false);
            }
            for item in items {
                match item {
                    Purgeable::Delivery(id) => {
                        t.deliveries.remove(id);
                        s.index_delivery(t, id);
                    }
                    Purgeable::Event(tenant, event) => {
                        let key = (tenant.clone(), event.clone());
                        t.events.remove(&key);
                        t.event_tokens.remove(&key);
                        t.expunged.remove(&key);
                    }
                    Purgeable::Endpoint(tenant, id) => {
                        let key = (tenant.clone(), id.clone());
                        t.endpoints.remove(&key);
                        t.failing_since.remove(&key);
                        t.failing_announced.remove(&key);
                        t.failure_marks.remove(&key);
                        t.pointers.remove(id);
                    }
                    // Counters by key (the scan's other keys are DynamoStore's: this store's scan
                    // names its items by kind).
                    Purgeable::Item(pk, sk) => {
                        if let Some(ep) = pk.strip_prefix("STATS#") {
                            t.delivered_days.remove(&(ep.to_string(), sk.clone()));
                            t.delivered_marks.remove(&(ep.to_string(), sk.clone()));
                        } else if let (Some(ep), Ok(second)) = (pk.strip_prefix("RATE#"), sk.parse::<i64>()) {
                            t.rate_windows.remove(&(ep.to_string(), second));
                        }
                    }
                    Purgeable::Settings(tenant) => {
                        t.settings.remove(tenant);
                    }
                    Purgeable::Tombstone(tenant, id) => {
                        t.tombstones.remove(&(tenant.clone(), id.clone()));
                    }
                }
            }
            Ok(true)
        })
        .await
    }
}
