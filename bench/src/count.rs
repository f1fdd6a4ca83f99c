//! Counting the AWS requests the real clients make: an SDK interceptor on the DynamoDB and
//! SQS clients records every operation by (label, service, operation).
//!
//! For DynamoDB it also works out what the request costs under on-demand pricing:
//! - reads: read request units from the size of what came back (4 KB units; a strongly
//!   consistent read is 1 unit per 4 KB, an eventually consistent one half that);
//! - writes (PutItem, UpdateItem): with `snapshots` on, the item is read before and after the
//!   write by a separate, uncounted client, so the base-table write units
//!   (`ceil(max(before, after) / 1 KB)`) and the GSI writes (an entry added, removed,
//!   re-keyed = delete + put, or changed in a projected attribute) follow DynamoDB's published
//!   rules for the real item sizes;
//! - it asks for `ReturnConsumedCapacity = TOTAL` and sums what the emulator answers (moto
//!   answers a fixed number per operation, not a size-based one; the report says so).

use aws_sdk_dynamodb::types::{AttributeValue, ReturnConsumedCapacity};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeSerializationInterceptorContextMut, FinalizerInterceptorContextRef,
};
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, mpsc};

/// A DynamoDB item.
pub type Item = HashMap<String, AttributeValue>;

/// What one (label, service, operation) added up to.
#[derive(Debug, Clone, Default)]
pub struct OpStats {
    /// Requests (executions; the SDK's own retries are not counted separately).
    pub calls: u64,
    /// Requests that ended in an error (a lost condition counts here).
    pub errors: u64,
    /// ReceiveMessage calls that returned no message.
    pub empty: u64,
    /// Messages received, items returned by a Query.
    pub returned: u64,
    /// Items a Query evaluated (`ScannedCount`).
    pub scanned: u64,
    /// Sum of the `ConsumedCapacity.CapacityUnits` the emulator reported.
    pub emulator_units: f64,
    /// Read request units by DynamoDB's rules for the sizes seen.
    pub rru: f64,
    /// Base-table write request units by DynamoDB's rules (needs snapshots for updates).
    pub wru: f64,
    /// GSI write request units by DynamoDB's rules (needs snapshots).
    pub gsi_wru: f64,
    /// GSI entry writes (puts and deletes), each at least one unit.
    pub gsi_writes: u64,
    /// Largest item written, bytes (DynamoDB's size rules).
    pub max_item_bytes: usize,
    /// Per write: the item size (max of before and after), bytes, for re-pricing at other
    /// payload sizes.
    pub write_sizes: Vec<usize>,
}

/// (label, service, operation).
pub type OpKey = (String, String, String);

/// A GSI: hash key, range key, projected non-key attributes.
#[derive(Debug, Clone)]
pub struct Gsi {
    /// Hash key attribute.
    pub pk: String,
    /// Range key attribute.
    pub sk: String,
    /// Projected non-key attributes.
    pub projected: Vec<String>,
}

/// A snapshot request: table, key, and where to send the item read.
type SnapshotRequest = (String, Item, mpsc::Sender<Option<Item>>);

/// Reads an item by key on its own runtime and client, so the counted clients' runtime is
/// never re-entered. The interceptor blocks on it (only in the request-count scenarios).
pub struct Snapshotter {
    tx: Mutex<mpsc::Sender<SnapshotRequest>>,
}

impl Snapshotter {
    /// Starts the snapshot thread with a client from the environment's SDK configuration.
    pub fn start() -> Self {
        let (tx, rx) = mpsc::channel::<(String, Item, mpsc::Sender<Option<Item>>)>();
        std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(async move {
                let sdk = aws_config::load_from_env().await;
                let client = aws_sdk_dynamodb::Client::new(&sdk);
                while let Ok((table, key, reply)) = rx.recv() {
                    let out = client
                        .get_item()
                        .table_name(table)
                        .set_key(Some(key))
                        .consistent_read(true)
                        .send()
                        .await
                        .ok()
                        .and_then(|o| o.item);
                    let _ = reply.send(out);
                }
            });
        });
        Self { tx: Mutex::new(tx) }
    }

    fn get(&self, table: &str, key: Item) -> Option<Item> {
        let (reply, rx) = mpsc::channel();
        {
            let tx = self.tx.lock().ok()?;
            tx.send((table.to_string(), key, reply)).ok()?;
        }
        rx.recv().ok().flatten()
    }
}

/// The shared tally every counting interceptor writes to.
#[derive(Default)]
pub struct Counter {
    ops: Mutex<BTreeMap<OpKey, OpStats>>,
    snapshots: Mutex<Option<Arc<Snapshotter>>>,
    gsis: Mutex<HashMap<String, Vec<Gsi>>>,
}

impl Counter {
    /// A new, empty tally.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Turns before/after snapshots of written items on (or off with `None`).
    pub fn set_snapshots(&self, s: Option<Arc<Snapshotter>>) {
        if let Ok(mut g) = self.snapshots.lock() {
            *g = s;
        }
    }

    /// Declares a table's GSIs (for the GSI write rules).
    pub fn set_gsis(&self, table: &str, gsis: Vec<Gsi>) {
        if let Ok(mut g) = self.gsis.lock() {
            g.insert(table.to_string(), gsis);
        }
    }

    /// Everything counted since the last take, and a fresh start.
    pub fn take(&self) -> BTreeMap<OpKey, OpStats> {
        self.ops.lock().map(|mut g| std::mem::take(&mut *g)).unwrap_or_default()
    }

    fn with(&self, key: OpKey, f: impl FnOnce(&mut OpStats)) {
        if let Ok(mut g) = self.ops.lock() {
            f(g.entry(key).or_default());
        }
    }

    fn snapshotter(&self) -> Option<Arc<Snapshotter>> {
        self.snapshots.lock().ok().and_then(|g| g.clone())
    }

    fn table_gsis(&self, table: &str) -> Vec<Gsi> {
        self.gsis.lock().ok().and_then(|g| g.get(table).cloned()).unwrap_or_default()
    }
}

/// The interceptor: one per client, with the label its requests are counted under.
#[derive(Clone)]
pub struct Counting {
    label: String,
    counter: Arc<Counter>,
}

impl std::fmt::Debug for Counting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Counting({})", self.label)
    }
}

impl Counting {
    /// Counts under `label` into `counter`.
    pub fn new(label: &str, counter: &Arc<Counter>) -> Self {
        Self { label: label.to_string(), counter: counter.clone() }
    }
}

/// What the interceptor remembers between the start and the end of a write.
#[derive(Debug, Clone)]
struct WriteState {
    table: String,
    key: Item,
    before: Option<Item>,
    put_item: Option<Item>,
}

impl Storable for WriteState {
    type Storer = StoreReplace<Self>;
}

fn key_of(item: &Item) -> Item {
    ["pk", "sk"].iter().filter_map(|k| item.get(*k).map(|v| (k.to_string(), v.clone()))).collect()
}

impl Intercept for Counting {
    fn name(&self) -> &'static str {
        "webhooks-bench request counter"
    }

    fn modify_before_serialization(
        &self,
        context: &mut BeforeSerializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        use aws_sdk_dynamodb::operation::{
            get_item::GetItemInput, put_item::PutItemInput, query::QueryInput, update_item::UpdateItemInput,
        };
        let total = Some(ReturnConsumedCapacity::Total);
        let input = context.input_mut();
        let mut state = None;
        if let Some(i) = input.downcast_mut::<PutItemInput>() {
            i.return_consumed_capacity = total;
            if let (Some(t), Some(item)) = (&i.table_name, &i.item) {
                state = Some(WriteState {
                    table: t.clone(),
                    key: key_of(item),
                    before: None,
                    put_item: Some(item.clone()),
                });
            }
        } else if let Some(i) = input.downcast_mut::<UpdateItemInput>() {
            i.return_consumed_capacity = total;
            if let (Some(t), Some(key)) = (&i.table_name, &i.key) {
                state = Some(WriteState { table: t.clone(), key: key.clone(), before: None, put_item: None });
            }
        } else if let Some(i) = input.downcast_mut::<GetItemInput>() {
            i.return_consumed_capacity = total;
        } else if let Some(i) = input.downcast_mut::<QueryInput>() {
            i.return_consumed_capacity = total;
        }
        if let Some(mut s) = state {
            if let Some(snap) = self.counter.snapshotter() {
                s.before = snap.get(&s.table, s.key.clone());
            }
            cfg.interceptor_state().store_put(s);
        }
        Ok(())
    }

    fn read_after_execution(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let (service, op) = cfg
            .load::<Metadata>()
            .map(|m| (m.service().to_string(), m.name().to_string()))
            .unwrap_or_else(|| ("?".into(), "?".into()));
        let key = (self.label.clone(), service, op.clone());
        let write = cfg.load::<WriteState>().cloned();
        let result = context.output_or_error();
        let failed = !matches!(result, Some(Ok(_)));
        let consistent = context.input().is_some_and(|i| {
            i.downcast_ref::<aws_sdk_dynamodb::operation::get_item::GetItemInput>()
                .and_then(|g| g.consistent_read)
                .or_else(|| {
                    i.downcast_ref::<aws_sdk_dynamodb::operation::query::QueryInput>().and_then(|q| q.consistent_read)
                })
                .unwrap_or(false)
        });
        let mut stats = OpStats { calls: 1, errors: u64::from(failed), ..OpStats::default() };
        if let Some(Ok(out)) = result {
            use aws_sdk_dynamodb::operation::{
                get_item::GetItemOutput, put_item::PutItemOutput, query::QueryOutput, update_item::UpdateItemOutput,
            };
            use aws_sdk_sqs::operation::receive_message::ReceiveMessageOutput;
            let units =
                |c: Option<&aws_sdk_dynamodb::types::ConsumedCapacity>| c.and_then(|c| c.capacity_units).unwrap_or(0.0);
            let read_units = |bytes: usize| {
                let u = bytes.div_ceil(4096).max(1) as f64;
                if consistent { u } else { u / 2.0 }
            };
            if let Some(o) = out.downcast_ref::<QueryOutput>() {
                let items = o.items.as_deref().unwrap_or_default();
                stats.returned = items.len() as u64;
                stats.scanned = u64::try_from(o.scanned_count).unwrap_or(0);
                stats.emulator_units = units(o.consumed_capacity.as_ref());
                stats.rru = read_units(items.iter().map(item_size).sum());
            } else if let Some(o) = out.downcast_ref::<GetItemOutput>() {
                stats.returned = u64::from(o.item.is_some());
                stats.emulator_units = units(o.consumed_capacity.as_ref());
                stats.rru = read_units(o.item.as_ref().map(item_size).unwrap_or(0));
            } else if let Some(o) = out.downcast_ref::<PutItemOutput>() {
                stats.emulator_units = units(o.consumed_capacity.as_ref());
            } else if let Some(o) = out.downcast_ref::<UpdateItemOutput>() {
                stats.emulator_units = units(o.consumed_capacity.as_ref());
            } else if let Some(o) = out.downcast_ref::<ReceiveMessageOutput>() {
                let n = o.messages.as_ref().map_or(0, Vec::len);
                stats.returned = n as u64;
                stats.empty = u64::from(n == 0);
            }
        }
        if let Some(w) = write {
            let after = match self.counter.snapshotter() {
                Some(snap) => snap.get(&w.table, w.key.clone()),
                None => w.put_item.clone().filter(|_| !failed),
            };
            let before = w.before.as_ref();
            let size = before
                .map(item_size)
                .unwrap_or(0)
                .max(after.as_ref().map(item_size).unwrap_or(0))
                .max(w.put_item.as_ref().map(item_size).unwrap_or(0));
            stats.wru = size.div_ceil(1024).max(1) as f64;
            stats.max_item_bytes = size;
            stats.write_sizes.push(size);
            if !failed {
                for g in self.counter.table_gsis(&w.table) {
                    let (writes, units) = gsi_cost(&g, before, after.as_ref());
                    stats.gsi_writes += writes;
                    stats.gsi_wru += units;
                }
            }
        }
        self.counter.with(key, |s| {
            s.calls += stats.calls;
            s.errors += stats.errors;
            s.empty += stats.empty;
            s.returned += stats.returned;
            s.scanned += stats.scanned;
            s.emulator_units += stats.emulator_units;
            s.rru += stats.rru;
            s.wru += stats.wru;
            s.gsi_wru += stats.gsi_wru;
            s.gsi_writes += stats.gsi_writes;
            s.max_item_bytes = s.max_item_bytes.max(stats.max_item_bytes);
            s.write_sizes.extend(stats.write_sizes);
        });
        Ok(())
    }
}

/// DynamoDB's size of an attribute value, bytes (the published rules: strings and binaries
/// by length, numbers about one byte per two significant digits plus one, lists and maps 3
/// bytes plus one per element plus their contents).
pub fn value_size(v: &AttributeValue) -> usize {
    match v {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => number_size(n),
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::L(l) => 3 + l.iter().map(|e| value_size(e) + 1).sum::<usize>(),
        AttributeValue::M(m) => 3 + m.iter().map(|(k, e)| k.len() + value_size(e) + 1).sum::<usize>(),
        AttributeValue::Ss(v) => v.iter().map(String::len).sum(),
        AttributeValue::Ns(v) => v.iter().map(|n| number_size(n)).sum(),
        AttributeValue::Bs(v) => v.iter().map(|b| b.as_ref().len()).sum(),
        _ => 1,
    }
}

fn number_size(n: &str) -> usize {
    let digits = n.trim_start_matches('-').chars().filter(char::is_ascii_digit).collect::<String>();
    let significant = digits.trim_start_matches('0').trim_end_matches('0').len();
    significant.max(1).div_ceil(2) + 1
}

/// An item's size: attribute names plus values.
pub fn item_size(item: &Item) -> usize {
    item.iter().map(|(k, v)| k.len() + value_size(v)).sum()
}

/// (entry writes, write units) a change from `before` to `after` costs in one GSI. An index
/// entry's size is the table key, the index key and the projected attributes plus 100 bytes.
fn gsi_cost(g: &Gsi, before: Option<&Item>, after: Option<&Item>) -> (u64, f64) {
    let entry = |item: Option<&Item>| -> Option<Item> {
        let item = item?;
        if !item.contains_key(&g.pk) || !item.contains_key(&g.sk) {
            return None;
        }
        let mut e = Item::new();
        for a in ["pk", "sk", g.pk.as_str(), g.sk.as_str()].into_iter().chain(g.projected.iter().map(String::as_str)) {
            if let Some(v) = item.get(a) {
                e.insert(a.to_string(), v.clone());
            }
        }
        Some(e)
    };
    let units = |e: &Item| (item_size(e) + 100).div_ceil(1024).max(1) as f64;
    match (entry(before), entry(after)) {
        (None, None) => (0, 0.0),
        (None, Some(a)) => (1, units(&a)),
        (Some(b), None) => (1, units(&b)),
        (Some(b), Some(a)) => {
            let rekeyed = b.get(&g.pk) != a.get(&g.pk) || b.get(&g.sk) != a.get(&g.sk);
            if rekeyed {
                (2, units(&b) + units(&a))
            } else if b != a {
                (1, units(&a))
            } else {
                (0, 0.0)
            }
        }
    }
}

/// Reads a table's GSIs from DescribeTable.
///
/// # Errors
/// The SDK error, as text.
pub async fn describe_gsis(client: &aws_sdk_dynamodb::Client, table: &str) -> Result<Vec<Gsi>, String> {
    use aws_sdk_dynamodb::types::KeyType;
    let out = client
        .describe_table()
        .table_name(table)
        .send()
        .await
        .map_err(|e| aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string())?;
    let mut gsis = Vec::new();
    let Some(t) = out.table else {
        return Ok(gsis);
    };
    for g in t.global_secondary_indexes.unwrap_or_default() {
        let key = |kt: KeyType| {
            g.key_schema
                .as_deref()
                .unwrap_or_default()
                .iter()
                .find(|k| k.key_type == kt)
                .map(|k| k.attribute_name.clone())
                .unwrap_or_default()
        };
        gsis.push(Gsi {
            pk: key(KeyType::Hash),
            sk: key(KeyType::Range),
            projected: g.projection.as_ref().and_then(|p| p.non_key_attributes.clone()).unwrap_or_default(),
        });
    }
    Ok(gsis)
}
