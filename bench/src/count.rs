//! Counting the AWS requests the real clients make: an SDK interceptor on the DynamoDB and
//! SQS clients records every operation by (label, service, operation).
//!
//! For DynamoDB it also works out what the request costs under on-demand pricing:
//! - reads: read request units from the size of the items read (4 KB units; a strongly
//!   consistent read is 1 unit per 4 KB, an eventually consistent one half that). DynamoDB
//!   bills a GetItem by the whole item, whatever its projection: with `snapshots` on, a
//!   projected GetItem's item is read in full by key with the uncounted client. A Query is
//!   billed by the items it returned (none of ours filters, so they are the items read);
//! - writes (PutItem, UpdateItem, DeleteItem, each Put/Update/Delete of a TransactWriteItems,
//!   each request of a BatchWriteItem): with `snapshots` on, every item is read before and
//!   after the write by a separate, uncounted client, so the base-table write units
//!   (`ceil(max(before, after) / 1 KB)`, twice that in a transaction) and the GSI writes (an
//!   entry added, removed, re-keyed = delete + put, or changed in a projected attribute)
//!   follow DynamoDB's published rules for the real item sizes. A TransactWriteItems or a
//!   BatchWriteItem counts as one request. A transaction's ConditionCheck is not priced (the
//!   service makes none); a BatchWriteItem's unprocessed items are priced as if written (moto
//!   leaves none);
//! - it asks for `ReturnConsumedCapacity = TOTAL` and sums what the emulator answers (moto
//!   answers a fixed number per operation, not a size-based one; the report says so).
//!
//! For SQS it keeps the size of the messages each request carried (sent, or received by a
//! non-empty ReceiveMessage): SQS bills each 64 KB chunk of a request's payload as a request.
//!
//! Every priced item or request keeps how much of it was the event's payload (the `payload`
//! attribute of an event item, or the payload riding in an attempt message), so the cost can
//! be re-priced at other payload sizes ([`Sized::units`]).

use aws_sdk_dynamodb::types::{AttributeValue, ReturnConsumedCapacity};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeDeserializationInterceptorContextRef, BeforeSerializationInterceptorContextMut,
    FinalizerInterceptorContextRef,
};
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, mpsc};

/// A DynamoDB item.
pub type Item = HashMap<String, AttributeValue>;

/// DynamoDB's write unit, bytes.
pub const WRITE_UNIT: usize = 1024;
/// DynamoDB's read unit, bytes.
pub const READ_UNIT: usize = 4096;
/// SQS's billing chunk, bytes: each 64 KB of a request's payload is billed as one request.
pub const SQS_CHUNK: usize = 65_536;
/// The attribute of an event item that holds the zstd-compressed payload.
pub const PAYLOAD_Z_ATTRIBUTE: &str = webhooks::store::payload::PAYLOAD_Z;

/// A payload size to re-price at: the payload's own bytes, and the bytes it takes stored in
/// an event item (zstd-compressed by `webhooks::store::payload`, as the store writes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PayloadSize {
    /// The payload's bytes (as POSTed; as it rides in an SQS message, before JSON escaping).
    pub raw: usize,
    /// Its zstd frame's bytes, as stored in `payload_z`.
    pub stored: usize,
}

impl PayloadSize {
    /// The sizes of `payload`, compressed as the store compresses it.
    pub fn of(payload: &str) -> Self {
        let stored = webhooks::store::payload::compress(payload).map_or(payload.len(), |f| f.len());
        Self { raw: payload.len(), stored }
    }
}

/// One priced thing: an item written or read, or an SQS request, by the size it is billed by.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sized {
    /// Bytes it is billed by (an item's size; the sum of a Query's items; the message bodies
    /// of an SQS request).
    pub bytes: usize,
    /// Event payloads in it.
    pub payloads: usize,
    /// Bytes of `bytes` that are those payloads (as stored or sent: JSON-escaped in a message,
    /// the zstd frame in an event item written compressed).
    pub payload_bytes: usize,
    /// The payloads' own sizes, bytes (summed).
    pub payload_raw: usize,
    /// The payloads are stored zstd-compressed (`payload_z`), not as text.
    pub compressed: bool,
    /// Units per started unit of size: 1 for a write (2 in a transaction), 1 for a strongly
    /// consistent read (0.5 eventually consistent), 1 for an SQS request.
    pub factor: f64,
}

impl Sized {
    /// Its size if every payload in it were `payload` instead (`None`: as measured): a
    /// compressed payload at the other payload's compressed size, a text one scaled by the
    /// raw sizes (JSON escaping kept in proportion).
    pub fn bytes_at(&self, payload: Option<PayloadSize>) -> usize {
        match payload {
            Some(size) if self.payloads > 0 && self.compressed => {
                self.bytes - self.payload_bytes + size.stored * self.payloads
            }
            Some(size) if self.payloads > 0 && self.payload_raw > 0 => {
                let scaled = self.payload_bytes as f64 * (size.raw * self.payloads) as f64 / self.payload_raw as f64;
                self.bytes - self.payload_bytes + scaled.round() as usize
            }
            _ => self.bytes,
        }
    }

    /// Units it is billed, in `unit`-byte units (at least one), at payload size `payload`.
    pub fn units(&self, unit: usize, payload: Option<PayloadSize>) -> f64 {
        self.bytes_at(payload).div_ceil(unit).max(1) as f64 * self.factor
    }

    /// An item, with its payload attribute if it has one (`payload_z`, compressed).
    fn item(item: &Item, factor: f64) -> Self {
        let mut s = Self { bytes: item_size(item), factor, ..Self::default() };
        if let Some(AttributeValue::B(frame)) = item.get(PAYLOAD_Z_ATTRIBUTE) {
            s.payloads = 1;
            s.compressed = true;
            s.payload_bytes = frame.as_ref().len();
            s.payload_raw = webhooks::store::payload::decompress(frame.as_ref()).map_or(0, |p| p.len());
        }
        s
    }

    /// Several items read together (a Query): one size, billed once.
    fn items<'a>(items: impl Iterator<Item = &'a Item>, factor: f64) -> Self {
        items.fold(Self { factor, ..Self::default() }, |mut acc, i| {
            let s = Self::item(i, factor);
            acc.bytes += s.bytes;
            acc.payloads += s.payloads;
            acc.payload_bytes += s.payload_bytes;
            acc.payload_raw += s.payload_raw;
            acc.compressed |= s.compressed;
            acc
        })
    }

    /// SQS message bodies carried by one request; a body that is an attempt message with the
    /// payload riding along counts the payload (JSON-escaped in the body).
    fn messages<'a>(bodies: impl Iterator<Item = &'a str>) -> Self {
        let mut s = Self { factor: 1.0, ..Self::default() };
        for body in bodies {
            s.bytes += body.len();
            if let Some(p) = webhooks::queue::decode(body).ok().and_then(|m| m.payload) {
                s.payloads += 1;
                s.payload_raw += p.len();
                s.payload_bytes += serde_json::to_string(&p).map_or(p.len(), |e| e.len().saturating_sub(2));
            }
        }
        s
    }
}

/// What one (label, service, operation) added up to.
#[derive(Debug, Clone, Default)]
pub struct OpStats {
    /// Requests (executions; the SDK's own retries are not counted separately).
    pub calls: u64,
    /// Requests that ended in an error (a lost condition counts here).
    pub errors: u64,
    /// ReceiveMessage calls that returned no message.
    pub empty: u64,
    /// Messages received, items returned by a Query or GetItem.
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
    /// GSI write units by index name (the capacity model's per-key rates).
    pub gsi_by_index: BTreeMap<String, f64>,
    /// Largest item written, bytes (DynamoDB's size rules).
    pub max_item_bytes: usize,
    /// Items written: one per item (a transaction or batch has several), for re-pricing.
    pub writes: Vec<Sized>,
    /// Reads: one per GetItem or Query, for re-pricing.
    pub reads: Vec<Sized>,
    /// SQS requests as billed (empty receives left out), for re-pricing.
    pub sqs: Vec<Sized>,
}

/// (label, service, operation).
pub type OpKey = (String, String, String);

/// A GSI: hash key, range key, projected non-key attributes.
#[derive(Debug, Clone)]
pub struct Gsi {
    /// Index name.
    pub name: String,
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
                let sdk = webhooks::app::aws_sdk_config().await;
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

/// One item a request writes: where, its state before, and the item a put writes.
#[derive(Debug, Clone)]
struct ItemWrite {
    table: String,
    key: Item,
    before: Option<Item>,
    put_item: Option<Item>,
    /// Write units per started KB: 1, or 2 in a transaction.
    factor: f64,
}

impl ItemWrite {
    fn new(table: &str, key: Item, put_item: Option<Item>, factor: f64) -> Self {
        Self { table: table.to_string(), key, before: None, put_item, factor }
    }
}

/// What the interceptor remembers between the start and the end of a request (the input is
/// gone by then: the SDK takes it to serialize it).
#[derive(Debug, Clone, Default)]
struct CallState {
    /// Items written.
    writes: Vec<ItemWrite>,
    /// A strongly consistent read.
    consistent: bool,
    /// A GetItem with a projection: table and key, to read the whole item it is billed by.
    projected_get: Option<(String, Item)>,
    /// The message bodies an SQS send carried.
    sent: Option<Sized>,
}

impl Storable for CallState {
    type Storer = StoreReplace<Self>;
}

fn key_of(item: &Item) -> Item {
    ["pk", "sk"].iter().filter_map(|k| item.get(*k).map(|v| (k.to_string(), v.clone()))).collect()
}

/// What a request writes and reads, from its input (and asks DynamoDB for its consumed capacity).
fn call_state(input: &mut aws_smithy_runtime_api::client::interceptors::context::Input) -> CallState {
    use aws_sdk_dynamodb::operation::{
        batch_write_item::BatchWriteItemInput, delete_item::DeleteItemInput, get_item::GetItemInput,
        put_item::PutItemInput, query::QueryInput, transact_write_items::TransactWriteItemsInput,
        update_item::UpdateItemInput,
    };
    use aws_sdk_sqs::operation::{send_message::SendMessageInput, send_message_batch::SendMessageBatchInput};
    let total = Some(ReturnConsumedCapacity::Total);
    let mut st = CallState::default();
    if let Some(i) = input.downcast_mut::<PutItemInput>() {
        i.return_consumed_capacity = total;
        if let (Some(t), Some(item)) = (&i.table_name, &i.item) {
            st.writes.push(ItemWrite::new(t, key_of(item), Some(item.clone()), 1.0));
        }
    } else if let Some(i) = input.downcast_mut::<UpdateItemInput>() {
        i.return_consumed_capacity = total;
        if let (Some(t), Some(key)) = (&i.table_name, &i.key) {
            st.writes.push(ItemWrite::new(t, key.clone(), None, 1.0));
        }
    } else if let Some(i) = input.downcast_mut::<DeleteItemInput>() {
        i.return_consumed_capacity = total;
        if let (Some(t), Some(key)) = (&i.table_name, &i.key) {
            st.writes.push(ItemWrite::new(t, key.clone(), None, 1.0));
        }
    } else if let Some(i) = input.downcast_mut::<TransactWriteItemsInput>() {
        i.return_consumed_capacity = total;
        for w in i.transact_items.as_deref().unwrap_or_default() {
            if let Some(p) = &w.put {
                st.writes.push(ItemWrite::new(&p.table_name, key_of(&p.item), Some(p.item.clone()), 2.0));
            } else if let Some(u) = &w.update {
                st.writes.push(ItemWrite::new(&u.table_name, u.key.clone(), None, 2.0));
            } else if let Some(d) = &w.delete {
                st.writes.push(ItemWrite::new(&d.table_name, d.key.clone(), None, 2.0));
            }
        }
    } else if let Some(i) = input.downcast_mut::<BatchWriteItemInput>() {
        i.return_consumed_capacity = total;
        for (table, requests) in i.request_items.iter().flatten() {
            for r in requests {
                if let Some(p) = &r.put_request {
                    st.writes.push(ItemWrite::new(table, key_of(&p.item), Some(p.item.clone()), 1.0));
                } else if let Some(d) = &r.delete_request {
                    st.writes.push(ItemWrite::new(table, d.key.clone(), None, 1.0));
                }
            }
        }
    } else if let Some(i) = input.downcast_mut::<GetItemInput>() {
        i.return_consumed_capacity = total;
        st.consistent = i.consistent_read.unwrap_or(false);
        let projected =
            i.projection_expression.is_some() || i.attributes_to_get.as_ref().is_some_and(|a| !a.is_empty());
        if let (true, Some(t), Some(key)) = (projected, &i.table_name, &i.key) {
            st.projected_get = Some((t.clone(), key.clone()));
        }
    } else if let Some(i) = input.downcast_mut::<QueryInput>() {
        i.return_consumed_capacity = total;
        st.consistent = i.consistent_read.unwrap_or(false);
    } else if let Some(i) = input.downcast_ref::<SendMessageBatchInput>() {
        st.sent = Some(Sized::messages(i.entries.iter().flatten().map(|e| e.message_body.as_str())));
    } else if let Some(i) = input.downcast_ref::<SendMessageInput>() {
        st.sent = Some(Sized::messages(i.message_body.iter().map(String::as_str)));
    }
    st
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
        let mut st = call_state(context.input_mut());
        if let Some(snap) = self.counter.snapshotter() {
            for w in &mut st.writes {
                w.before = snap.get(&w.table, w.key.clone());
            }
        }
        cfg.interceptor_state().store_put(st);
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
        let key = (self.label.clone(), service.clone(), op.clone());
        let st = cfg.load::<CallState>().cloned().unwrap_or_default();
        let result = context.output_or_error();
        let failed = !matches!(result, Some(Ok(_)));
        let read_factor = if st.consistent { 1.0 } else { 0.5 };
        let snapshotter = self.counter.snapshotter();
        let mut stats = OpStats { calls: 1, errors: u64::from(failed), ..OpStats::default() };
        if let Some(Ok(out)) = result {
            use aws_sdk_dynamodb::operation::{
                batch_get_item::BatchGetItemOutput, batch_write_item::BatchWriteItemOutput,
                delete_item::DeleteItemOutput, get_item::GetItemOutput, put_item::PutItemOutput, query::QueryOutput,
                transact_write_items::TransactWriteItemsOutput, update_item::UpdateItemOutput,
            };
            use aws_sdk_sqs::operation::receive_message::ReceiveMessageOutput;
            let units =
                |c: Option<&aws_sdk_dynamodb::types::ConsumedCapacity>| c.and_then(|c| c.capacity_units).unwrap_or(0.0);
            let all_units = |c: Option<&Vec<aws_sdk_dynamodb::types::ConsumedCapacity>>| {
                c.map_or(0.0, |v| v.iter().map(|c| c.capacity_units.unwrap_or(0.0)).sum())
            };
            if let Some(o) = out.downcast_ref::<QueryOutput>() {
                let items = o.items.as_deref().unwrap_or_default();
                stats.returned = items.len() as u64;
                stats.scanned = u64::try_from(o.scanned_count).unwrap_or(0);
                stats.emulator_units = units(o.consumed_capacity.as_ref());
                stats.reads.push(Sized::items(items.iter(), read_factor));
            } else if let Some(o) = out.downcast_ref::<GetItemOutput>() {
                stats.returned = u64::from(o.item.is_some());
                stats.emulator_units = units(o.consumed_capacity.as_ref());
                // Billed by the whole item: read it in full when the request projected it.
                let whole = match (&st.projected_get, &snapshotter) {
                    (Some((table, key)), Some(snap)) => snap.get(table, key.clone()),
                    _ => o.item.clone(),
                };
                stats.reads.push(
                    whole
                        .as_ref()
                        .map_or(Sized { factor: read_factor, ..Sized::default() }, |i| Sized::item(i, read_factor)),
                );
            } else if let Some(o) = out.downcast_ref::<BatchGetItemOutput>() {
                // Each item is billed apart, by its whole size, at least one unit (our batch
                // reads are strongly consistent; a projected item stands in for the whole:
                // the items read here are under 4 KB, one unit either way).
                let items: Vec<&Item> = o.responses.iter().flat_map(|r| r.values()).flatten().collect();
                stats.returned = items.len() as u64;
                stats.emulator_units = all_units(o.consumed_capacity.as_ref());
                stats.reads.extend(items.into_iter().map(|i| Sized::item(i, 1.0)));
            } else if let Some(o) = out.downcast_ref::<PutItemOutput>() {
                stats.emulator_units = units(o.consumed_capacity.as_ref());
            } else if let Some(o) = out.downcast_ref::<UpdateItemOutput>() {
                stats.emulator_units = units(o.consumed_capacity.as_ref());
            } else if let Some(o) = out.downcast_ref::<DeleteItemOutput>() {
                stats.emulator_units = units(o.consumed_capacity.as_ref());
            } else if let Some(o) = out.downcast_ref::<TransactWriteItemsOutput>() {
                stats.emulator_units = all_units(o.consumed_capacity.as_ref());
            } else if let Some(o) = out.downcast_ref::<BatchWriteItemOutput>() {
                stats.emulator_units = all_units(o.consumed_capacity.as_ref());
            } else if let Some(o) = out.downcast_ref::<ReceiveMessageOutput>() {
                let msgs = o.messages.as_deref().unwrap_or_default();
                stats.returned = msgs.len() as u64;
                stats.empty = u64::from(msgs.is_empty());
                if !msgs.is_empty() {
                    stats.sqs.push(Sized::messages(msgs.iter().filter_map(|m| m.body.as_deref())));
                }
            }
        }
        if service == crate::requests::SQS && op != "ReceiveMessage" {
            stats.sqs.push(st.sent.unwrap_or(Sized { factor: 1.0, ..Sized::default() }));
        } else if failed && op == "ReceiveMessage" {
            stats.sqs.push(Sized { factor: 1.0, ..Sized::default() });
        }
        for w in &st.writes {
            let after = match &snapshotter {
                Some(snap) => snap.get(&w.table, w.key.clone()),
                None => w.put_item.clone().filter(|_| !failed),
            };
            let before = w.before.as_ref();
            // Billed by the larger of the item before and after (a put that lost its
            // condition, by the item it would have written).
            let largest = [before, after.as_ref(), w.put_item.as_ref()]
                .into_iter()
                .flatten()
                .max_by_key(|i| item_size(i))
                .map_or(Sized { factor: w.factor, ..Sized::default() }, |i| Sized::item(i, w.factor));
            stats.max_item_bytes = stats.max_item_bytes.max(largest.bytes);
            stats.writes.push(largest);
            if !failed {
                for g in self.counter.table_gsis(&w.table) {
                    let (writes, units) = gsi_cost(&g, before, after.as_ref());
                    stats.gsi_writes += writes;
                    stats.gsi_wru += units;
                    *stats.gsi_by_index.entry(g.name.clone()).or_default() += units;
                }
            }
        }
        stats.wru = stats.writes.iter().map(|w| w.units(WRITE_UNIT, None)).sum();
        stats.rru = stats.reads.iter().map(|r| r.units(READ_UNIT, None)).sum();
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
            for (name, units) in &stats.gsi_by_index {
                *s.gsi_by_index.entry(name.clone()).or_default() += units;
            }
            s.max_item_bytes = s.max_item_bytes.max(stats.max_item_bytes);
            s.writes.extend(stats.writes);
            s.reads.extend(stats.reads);
            s.sqs.extend(stats.sqs);
        });
        Ok(())
    }
}

/// An interceptor that counts HTTP 5xx answers, by operation: every attempt that got one
/// (the SDK retries them), for the measurements that run with concurrency.
#[derive(Debug, Clone, Default)]
pub struct ServerErrors(Arc<Mutex<BTreeMap<String, u64>>>);

impl ServerErrors {
    /// 5xx answers so far, by operation.
    pub fn by_operation(&self) -> BTreeMap<String, u64> {
        self.0.lock().map(|g| g.clone()).unwrap_or_default()
    }
}

impl Intercept for ServerErrors {
    fn name(&self) -> &'static str {
        "webhooks-bench 5xx counter"
    }

    fn read_before_deserialization(
        &self,
        context: &BeforeDeserializationInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if context.response().status().is_server_error() {
            let op = cfg.load::<Metadata>().map_or_else(|| "?".to_string(), |m| m.name().to_string());
            if let Ok(mut g) = self.0.lock() {
                *g.entry(op).or_default() += 1;
            }
        }
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
            name: g.index_name.clone().unwrap_or_default(),
            pk: key(KeyType::Hash),
            sk: key(KeyType::Range),
            projected: g.projection.as_ref().and_then(|p| p.non_key_attributes.clone()).unwrap_or_default(),
        });
    }
    Ok(gsis)
}
