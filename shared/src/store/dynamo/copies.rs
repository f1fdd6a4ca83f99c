//! Endpoint copies: one hot tenant's endpoint reads and one hot endpoint's failures-in-a-row
//! counter spread over several partitions (issue #14's capacity model: a single key value
//! takes at most 3,000 read units and 1,000 write units a second, and at 10,000 deliveries a
//! second one tenant's endpoint item takes 20,000 reads and, while it fails, 10,000 writes).
//!
//! | item | `pk` | `sk` | attributes |
//! |---|---|---|---|
//! | endpoint copy `j` (1 and up) | `COPY#{j}#TENANT#{tenant_id}` | `ENDPOINT#{endpoint_id}` | the endpoint item's, `copy_checked` |
//! | copy marker | `COPY#{j}#TENANT#{tenant_id}` | `COPIES` | - (partition `j` holds a checked copy of every endpoint) |
//! | fill lease | `COPY#{j}#TENANT#{tenant_id}` | `COPIES#fill` | `lease_until` (unix milliseconds: one filler at a time) |
//! | registry | `CONFIG#endpoint_copies` | `CONFIG` | `w_{function}`, `since_{function}` (copies each function keeps, since when) |
//!
//! With `WEBHOOKS_ENDPOINT_COPIES` = W, every endpoint write keeps copies 1 to W-1 in step
//! with the endpoint item (copy 0): creation and deletion write them in the same
//! TransactWriteItems, and an endpoint [`crate::endpoint_lifecycle::Change`] updates them in
//! the transaction that holds its version guard. Transactions are serializable, so once a
//! change has answered, a strongly consistent read of any copy sees it: the rule that no
//! attempt starts after a disable, PATCH or rotation answered holds on every copy.
//!
//! With `WEBHOOKS_ENDPOINT_READ_COPIES` = R, ingest reads copy [`endpoint_copy`] of the event
//! id and deliver copy [`endpoint_copy`] of the delivery id, so one tenant's reads spread over
//! R partitions, once copies are readable ([`DynamoStore::readable_copies`]): every function
//! registers at its start the copies it keeps on the registry item (`CONFIG#endpoint_copies`:
//! `w_{function}` and `since_{function}`, unix milliseconds), and readers spread over R only
//! when every function has kept at least R for `WEBHOOKS_ENDPOINT_COPIES_SETTLE_SECONDS`
//! (960: Lambda's longest invocation and a minute), so no process of a deploy before, which
//! skips the copies, can still be changing endpoints; until then they read the endpoint item
//! alone. Even then a reader trusts only a copy marked `copy_checked` (written by a creation
//! once copies are readable, or by the fill after checking it against the endpoint item's
//! version; a change keeps the mark as it is, and a copy a change creates is not marked) and,
//! for a tenant's Query, a partition with its marker (every endpoint has a copy there).
//! Otherwise it reads the endpoint item, and ingest fills the partition (best effort, at most
//! [`FILL_PER_CALL`] endpoints a call): for each endpoint, a 2-item transaction that checks
//! the endpoint item is still at the version read and puts the checked copy; a copy whose
//! endpoint is gone is deleted on the check that it is still gone; then the marker.
//!
//! Never lower either setting: a process that keeps fewer copies registers and stops the
//! reads within a minute, but in that minute a reader could trust a copy it no longer writes.
//! Rolling back to a release without copies and forward again needs the `COPY#` items and the
//! registry item deleted first.
//!
//! The failures-in-a-row counter is split the same way: an attempt counts a failure on the
//! copy it read, and a success zeroes that copy's count only. The breaker opens when the
//! counts summed over the R copies reach the threshold T; the sum is read (one BatchGetItem,
//! a read unit on each copy) only once the copy's own count reaches its share (T / R, rounded
//! up), so it opens at the first failure after the sum reaches T that lands on a copy holding
//! its share: exactly at T with one copy (the default); with R, an endpoint that is down is
//! paused after about T failures, one delivery retrying alone included (its attempts read one
//! copy). "In a row" then means "since the last success of the same copy": at high volume an
//! endpoint failing more than about T / (T + R) of its attempts (83% at T = 100, R = 20) is
//! paused, where with one copy a run of T is needed. The run of timeouts the adaptive rate
//! backs off after is per copy too. An endpoint's view shows the copies' counts summed
//! (`Store::failures_in_a_row`, read by the single-endpoint answers, and
//! `Store::listed_failures_in_a_row`, a listing's page with one Query per copy). The
//! slow-lane marker and the adaptive rate, which readers of every copy act on, are written to
//! the endpoint item and then to each copy (best effort: a copy that missed one is moved by
//! the next), in order: a copy takes a mirror only over an earlier one (the marker's by its
//! `slow_seq`, the rate's by its `rate_seq`: each write of the endpoint item adds one), and
//! the fill's check holds them too, so neither a late mirror nor a fill that read before a
//! mirror puts back an older marker.

use super::{DynamoStore, Item, StoreError, aws, from_item, n, s, version_guard};
use crate::model::Endpoint;
use crate::store::keys::{
    COPIES_MARKER_SK, COPY_CHECKED, PK, SK, endpoint_copy, endpoint_copy_pk, endpoint_key, tenant_pk,
};
use crate::store::{FailureCount, Writer};
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Delete, Put, ReturnValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
    Update,
};
use futures::StreamExt;
use std::collections::HashMap;

/// The registry item's partition key: which copies each function keeps, and since when.
pub const REGISTRY_PK: &str = "CONFIG#endpoint_copies";
/// The registry item's sort key.
pub const REGISTRY_SK: &str = "CONFIG";

/// The default of `WEBHOOKS_ENDPOINT_COPIES_SETTLE_SECONDS`: 960 seconds, Lambda's longest
/// invocation (900 s) and this store's minute of caching the registry.
pub const DEFAULT_SETTLE_SECONDS: u64 = 960;

/// How long a process keeps what it read of the registry.
const READABLE_CACHE: std::time::Duration = std::time::Duration::from_secs(60);

/// Sort key of a copy partition's fill lease item (`lease_until`, unix milliseconds).
pub const FILL_LEASE_SK: &str = "COPIES#fill";

/// How long one ingest call holds a partition's fill lease: 10,000 milliseconds (its
/// transactions take a few round trips; a call that dies leaves it to the next after this).
pub const FILL_LEASE_MS: i64 = 10_000;

/// Most endpoints one ingest call copies into a partition that is not filled yet (2-item
/// transactions, 8 in flight; the next calls go on where it stopped).
pub const FILL_PER_CALL: usize = 25;

impl DynamoStore {
    /// Copies 1 to `WEBHOOKS_ENDPOINT_COPIES` - 1 (copy 0 is the endpoint item).
    pub(super) fn copy_numbers(&self) -> std::ops::Range<u32> {
        1..self.copies
    }

    /// Records that a process of each of `writers` keeps `WEBHOOKS_ENDPOINT_COPIES` copies:
    /// `w_{writer}` = the count and `since_{writer}` = now (unix milliseconds) on the
    /// registry item, unless it holds this count already (a process with another count, of a
    /// deploy rolling over, starts the wait again). Only with copies; best effort.
    pub(super) async fn register_copies(&self, writers: &[Writer]) {
        if self.copies <= 1 {
            return;
        }
        let now = chrono::Utc::now().timestamp_millis();
        for w in writers {
            let result = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(registry_key()))
                .update_expression("SET #w = :w, #since = :now")
                .condition_expression("attribute_not_exists(#w) OR #w <> :w")
                .expression_attribute_names("#w", format!("w_{}", w.name()))
                .expression_attribute_names("#since", format!("since_{}", w.name()))
                .expression_attribute_values(":w", n(self.copies))
                .expression_attribute_values(":now", n(now))
                .send()
                .await;
            if let Err(e) = super::conditional(result) {
                tracing::warn!(writer = w.name(), error = %e, "endpoint copies not registered; copies stay unread");
            }
        }
    }

    /// How many copies readers spread over now: `WEBHOOKS_ENDPOINT_READ_COPIES` once every
    /// writer ([`Writer::ALL`]) has registered at least that many copies for
    /// `WEBHOOKS_ENDPOINT_COPIES_SETTLE_SECONDS` (so no process that skips a copy can still
    /// be running), else 1: the endpoint item alone. Read from the registry item (strongly
    /// consistent) at most once a minute per process.
    pub(super) async fn readable_copies(&self) -> u32 {
        if self.read_copies <= 1 {
            return 1;
        }
        if let Ok(cached) = self.readable.lock()
            && let Some((at, n)) = *cached
            && at.elapsed() < READABLE_CACHE
        {
            return n;
        }
        let read = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(registry_key()))
            .consistent_read(true)
            .send()
            .await;
        let readable = match read {
            Ok(out) => {
                let item = out.item.unwrap_or_default();
                let number =
                    |attr: String| item.get(&attr).and_then(|v| v.as_n().ok()).and_then(|v| v.parse::<i64>().ok());
                let settle_ms = i64::try_from(self.copies_settle.as_millis()).unwrap_or(i64::MAX);
                let now = chrono::Utc::now().timestamp_millis();
                let settled = Writer::ALL.iter().all(|w| {
                    let (count, since) = (number(format!("w_{}", w.name())), number(format!("since_{}", w.name())));
                    matches!((count, since), (Some(c), Some(t)) if c >= i64::from(self.read_copies) && now >= t.saturating_add(settle_ms))
                });
                if settled { self.read_copies } else { 1 }
            }
            Err(e) => {
                tracing::warn!(error = %aws(e), "endpoint copies registry not read; reading the endpoint items");
                1
            }
        };
        if let Ok(mut cached) = self.readable.lock() {
            *cached = Some((std::time::Instant::now(), readable));
        }
        readable
    }

    /// The endpoint item `item` (with its `pk` and `sk`) as copy `j`, marked checked or not.
    pub(super) fn as_copy(&self, item: &Item, tenant_id: &str, j: u32, checked: bool) -> Item {
        let mut copy = item.clone();
        copy.insert(PK.into(), s(endpoint_copy_pk(tenant_id, j)));
        copy.insert(COPY_CHECKED.into(), AttributeValue::Bool(checked));
        copy
    }

    /// Puts (transaction items, no condition) of copies 1.. of a new endpoint's `item`, each
    /// checked when copies are read that far ([`Self::readable_copies`]: no writer that skips
    /// it can still run).
    pub(super) async fn copy_puts(&self, item: &Item, tenant_id: &str) -> Result<Vec<TransactWriteItem>, StoreError> {
        if self.copies <= 1 {
            return Ok(Vec::new());
        }
        let readable = self.readable_copies().await;
        self.copy_numbers()
            .map(|j| {
                let copy = self.as_copy(item, tenant_id, j, j < readable);
                let put = Put::builder().table_name(&self.table).set_item(Some(copy));
                Ok(TransactWriteItem::builder().put(put.build().map_err(aws)?).build())
            })
            .collect()
    }

    /// Deletes (transaction items) of an endpoint's copies 1...
    pub(super) fn copy_deletes(&self, tenant_id: &str, id: &str) -> Result<Vec<TransactWriteItem>, StoreError> {
        self.copy_numbers()
            .map(|j| {
                let delete = Delete::builder()
                    .table_name(&self.table)
                    .key(PK, s(endpoint_copy_pk(tenant_id, j)))
                    .key(SK, s(endpoint_key(id)));
                Ok(TransactWriteItem::builder().delete(delete.build().map_err(aws)?).build())
            })
            .collect()
    }

    /// Updates (transaction items, no condition: the endpoint item's update in the same
    /// transaction holds the version guard) of an endpoint's copies 1.., each applying
    /// `expression` with `names` and `values`. A copy that does not exist yet is created by it
    /// with every attribute the change sets, not checked; one that exists keeps its mark.
    pub(super) fn copy_updates(
        &self,
        tenant_id: &str,
        id: &str,
        expression: &str,
        names: &HashMap<String, String>,
        values: &Item,
    ) -> Result<Vec<TransactWriteItem>, StoreError> {
        // The endpoint item's expression always starts with its SET. A copy this update creates
        // lacks the unversioned markers (slow lane, adaptive rate): unchecked, so the fill puts
        // it whole; one that exists keeps its mark.
        let expression =
            expression.replacen("SET ", "SET #copy_checked = if_not_exists(#copy_checked, :copy_checked), ", 1);
        let mut names = names.clone();
        names.insert("#copy_checked".into(), COPY_CHECKED.into());
        let mut values = values.clone();
        values.insert(":copy_checked".into(), AttributeValue::Bool(false));
        // The version guard's name and value belong to the endpoint item's condition.
        names.retain(|k, _| k != "#g_version");
        values.retain(|k, _| k != ":g_version");
        self.copy_numbers()
            .map(|j| {
                let update = Update::builder()
                    .table_name(&self.table)
                    .key(PK, s(endpoint_copy_pk(tenant_id, j)))
                    .key(SK, s(endpoint_key(id)))
                    .update_expression(&expression)
                    .set_expression_attribute_names(Some(names.clone()))
                    .set_expression_attribute_values(Some(values.clone()))
                    .build()
                    .map_err(aws)?;
                Ok(TransactWriteItem::builder().update(update).build())
            })
            .collect()
    }

    /// The endpoint as an attempt keyed by `key` reads it: a strongly consistent GetItem of
    /// copy [`endpoint_copy`]`(key)`, or of the endpoint item when that is copy 0 or the copy
    /// is missing or not checked.
    pub(super) async fn read_copy(&self, tenant_id: &str, id: &str, key: &str) -> Result<Option<Endpoint>, StoreError> {
        let j = endpoint_copy(key, self.readable_copies().await);
        if j > 0 {
            let out = self
                .client
                .get_item()
                .table_name(&self.table)
                .key(PK, s(endpoint_copy_pk(tenant_id, j)))
                .key(SK, s(endpoint_key(id)))
                .consistent_read(true)
                .send()
                .await
                .map_err(aws)?;
            if let Some(item) = out.item.filter(is_checked) {
                return from_item(item).map(Some);
            }
        }
        self.get(tenant_pk(tenant_id), &endpoint_key(id)).await
    }

    /// A tenant's endpoints as an event keyed by `key` reads them: one strongly consistent
    /// Query of copy partition [`endpoint_copy`]`(key)` when it has its marker and every copy
    /// in it is checked; else the Query of the endpoint items, after which the partition is
    /// filled (best effort, see the module docs).
    pub(super) async fn tenant_copies(&self, tenant_id: &str, key: &str) -> Result<Vec<Endpoint>, StoreError> {
        let j = endpoint_copy(key, self.readable_copies().await);
        if j == 0 {
            return self.query_all(self.endpoints_query(tenant_id).consistent_read(true)).await;
        }
        let partition = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", s(endpoint_copy_pk(tenant_id, j)))
            .consistent_read(true);
        let items = self.query_items(partition).await?;
        let marked = items.iter().any(|i| sk(i) == COPIES_MARKER_SK);
        let copies: Vec<Item> = items.into_iter().filter(|i| sk(i).starts_with("ENDPOINT#")).collect();
        if marked && copies.iter().all(is_checked) {
            return copies.into_iter().map(from_item).collect();
        }
        let originals = self.query_items(self.endpoints_query(tenant_id).consistent_read(true)).await?;
        // One filler a partition at a time (a lease on its own item), so the events of a hot
        // tenant do not all fill it at once; the others read the endpoint items meanwhile.
        // A tenant without endpoints has nothing to fill (and an unknown tenant id costs no
        // write).
        if !originals.is_empty() {
            match self.take_fill_lease(tenant_id, j).await {
                Ok(Some(lease)) => {
                    if let Err(e) = self.fill_copies(tenant_id, j, &originals, &copies).await {
                        tracing::warn!(tenant_id, copy = j, error = %e, "endpoint copies not filled; read the endpoint items");
                    }
                    self.release_fill_lease(tenant_id, j, lease).await;
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(tenant_id, copy = j, error = %e, "endpoint copies' fill lease not taken"),
            }
        }
        originals.into_iter().map(from_item).collect()
    }

    /// Takes the fill lease of a tenant's copy partition `j` for [`FILL_LEASE_MS`] (a
    /// conditional PutItem of its `COPIES#fill` item): its end (unix milliseconds), `None`
    /// while another call holds it.
    async fn take_fill_lease(&self, tenant_id: &str, j: u32) -> Result<Option<i64>, StoreError> {
        let now = chrono::Utc::now().timestamp_millis();
        let until = now + FILL_LEASE_MS;
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(PK, s(endpoint_copy_pk(tenant_id, j)))
            .item(SK, s(FILL_LEASE_SK))
            .item("lease_until", n(until))
            .condition_expression("attribute_not_exists(pk) OR lease_until < :now")
            .expression_attribute_values(":now", n(now))
            .send()
            .await;
        Ok(super::conditional(result)?.then_some(until))
    }

    /// Ends the fill lease taken with end `lease`, unless another call took it since (best
    /// effort: it ends by itself).
    async fn release_fill_lease(&self, tenant_id: &str, j: u32, lease: i64) {
        // A PutItem, as the take: the fill adds no UpdateItem to an ingest call.
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(PK, s(endpoint_copy_pk(tenant_id, j)))
            .item(SK, s(FILL_LEASE_SK))
            .item("lease_until", n(0))
            .condition_expression("lease_until = :mine")
            .expression_attribute_values(":mine", n(lease))
            .send()
            .await;
        if let Err(e) = super::conditional(result) {
            tracing::warn!(tenant_id, copy = j, error = %e, "endpoint copies' fill lease not ended; it runs out");
        }
    }

    /// Brings copy partition `j` of a tenant in step with its endpoint items as read
    /// (`originals`, `copies`), at most [`FILL_PER_CALL`] endpoints, and marks it once every
    /// endpoint has a checked copy of its version and no copy is left of one that is gone.
    /// Public only as the seam the storage tests use to put a write between the fill's read
    /// and its transactions; not for use outside tests.
    ///
    /// # Errors
    /// [`StoreError`] when a transaction fails (one whose check failed among them).
    #[doc(hidden)]
    pub async fn fill_copies(
        &self,
        tenant_id: &str,
        j: u32,
        originals: &[Item],
        copies: &[Item],
    ) -> Result<(), StoreError> {
        let version = |i: &Item| i.get("version").and_then(|v| v.as_n().ok()).and_then(|v| v.parse::<u64>().ok());
        let by_sk: HashMap<String, &Item> = copies.iter().map(|c| (sk(c), c)).collect();
        let mut work = Vec::new();
        for original in originals {
            let in_step = by_sk.get(&sk(original)).is_some_and(|c| is_checked(c) && version(c) == version(original));
            if !in_step {
                let (condition, names, values) = fill_guard(original, version(original).unwrap_or(0));
                let check = ConditionCheck::builder()
                    .table_name(&self.table)
                    .key(PK, s(tenant_pk(tenant_id)))
                    .key(SK, s(sk(original)))
                    .condition_expression(condition)
                    .set_expression_attribute_names(Some(names))
                    .set_expression_attribute_values(Some(values))
                    .build()
                    .map_err(aws)?;
                let mut copy = self.as_copy(original, tenant_id, j, true);
                copy.insert("consecutive_failures".into(), n(0));
                let put = Put::builder().table_name(&self.table).set_item(Some(copy)).build().map_err(aws)?;
                work.push([
                    TransactWriteItem::builder().condition_check(check).build(),
                    TransactWriteItem::builder().put(put).build(),
                ]);
            }
        }
        let originals_sk: std::collections::HashSet<String> = originals.iter().map(sk).collect();
        for copy in copies.iter().filter(|c| !originals_sk.contains(&sk(c))) {
            let check = ConditionCheck::builder()
                .table_name(&self.table)
                .key(PK, s(tenant_pk(tenant_id)))
                .key(SK, s(sk(copy)))
                .condition_expression("attribute_not_exists(pk)")
                .build()
                .map_err(aws)?;
            let delete = Delete::builder()
                .table_name(&self.table)
                .key(PK, s(endpoint_copy_pk(tenant_id, j)))
                .key(SK, s(sk(copy)))
                .build()
                .map_err(aws)?;
            work.push([
                TransactWriteItem::builder().condition_check(check).build(),
                TransactWriteItem::builder().delete(delete).build(),
            ]);
        }
        let whole = work.len() <= FILL_PER_CALL;
        let writes = work.into_iter().take(FILL_PER_CALL).map(|pair| async move {
            self.client.transact_write_items().set_transact_items(Some(pair.to_vec())).send().await.map_err(aws)
        });
        let written: Vec<_> = futures::stream::iter(writes).buffer_unordered(8).collect().await;
        written.into_iter().collect::<Result<Vec<_>, _>>()?;
        if whole {
            self.client
                .put_item()
                .table_name(&self.table)
                .item(PK, s(endpoint_copy_pk(tenant_id, j)))
                .item(SK, s(COPIES_MARKER_SK))
                .send()
                .await
                .map_err(aws)?;
        }
        Ok(())
    }

    /// See [`crate::store::Store::count_failure`]: ADD 1 on the copy the attempt read (the
    /// endpoint item when that copy is missing). With one read copy the breaker opens at the
    /// threshold; with R, once this copy's count reaches its share (threshold / R, rounded up)
    /// the counts of the R copies are read (one BatchGetItem) and summed, and the breaker opens
    /// when the sum reaches the threshold.
    pub(super) async fn count_copy_failure(
        &self,
        tenant_id: &str,
        id: &str,
        key: &str,
        attempt: u32,
        threshold: u32,
    ) -> Result<Option<FailureCount>, StoreError> {
        let readable = self.readable_copies().await;
        let j = endpoint_copy(key, readable);
        let mark = format!("{key}#{attempt}");
        let Some(own) = self.copy_failures_add(tenant_id, id, j, &mark).await? else { return Ok(None) };
        if readable <= 1 {
            return Ok(Some(FailureCount::single(own, threshold)));
        }
        if threshold == 0 || own < threshold.div_ceil(readable) {
            return Ok(Some(FailureCount { in_a_row: own, opens_breaker: false }));
        }
        let sum = self.failures_summed(tenant_id, id).await?.max(own);
        Ok(Some(FailureCount { in_a_row: own, opens_breaker: sum >= threshold }))
    }

    /// ADD 1 to copy `j`'s counter (the endpoint item's when `j` is 0 or the copy is missing),
    /// marked with `mark` (`{key}#{attempt}`, see [`crate::store::Store::count_failure`]): a
    /// write that finds its own mark already there (its first try applied, the answer was
    /// lost) adds nothing and returns the count as it stands. `None` when the endpoint is gone.
    async fn copy_failures_add(
        &self,
        tenant_id: &str,
        id: &str,
        j: u32,
        mark: &str,
    ) -> Result<Option<u32>, StoreError> {
        let count =
            |item: &Item| item.get("consecutive_failures").and_then(|v| v.as_n().ok()).and_then(|v| v.parse().ok());
        for copy in copy_then_original(j) {
            let result = self
                .copy_update(tenant_id, id, copy)
                .update_expression("SET last_failure = :mark ADD consecutive_failures :one")
                .condition_expression(
                    "attribute_exists(pk) AND (attribute_not_exists(last_failure) OR last_failure <> :mark)",
                )
                .expression_attribute_values(":one", n(1))
                .expression_attribute_values(":mark", s(mark))
                .return_values(ReturnValue::UpdatedNew)
                .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
                .send()
                .await;
            match result {
                Ok(out) => return Ok(out.attributes.as_ref().and_then(count)),
                Err(e) => match e.as_service_error() {
                    Some(UpdateItemError::ConditionalCheckFailedException(failed)) => {
                        if let Some(old) = failed.item.as_ref() {
                            // Our own mark: this failure was counted by the try whose answer was lost.
                            return Ok(Some(count(old).unwrap_or(0)));
                        }
                        // No such item: the copy is missing, try the next.
                    }
                    _ => return Err(aws(e)),
                },
            }
        }
        Ok(None)
    }

    /// See [`crate::store::Store::reset_failures`]: zeroes the counter of the copy an attempt
    /// keyed by `key` read (the endpoint item's when that copy is missing).
    pub(super) async fn reset_copy_failures(&self, tenant_id: &str, id: &str, key: &str) -> Result<(), StoreError> {
        for copy in copy_then_original(endpoint_copy(key, self.readable_copies().await)) {
            let result = self
                .copy_update(tenant_id, id, copy)
                .update_expression("SET consecutive_failures = :zero")
                .expression_attribute_values(":zero", n(0))
                .send()
                .await;
            if super::conditional(result)? {
                return Ok(());
            }
        }
        Ok(())
    }

    /// The failures-in-a-row counts of an endpoint's read copies summed (one strongly
    /// consistent BatchGetItem of `WEBHOOKS_ENDPOINT_READ_COPIES` items; copies missing count 0).
    pub(super) async fn failures_summed(&self, tenant_id: &str, id: &str) -> Result<u32, StoreError> {
        let keys: Vec<Item> = (0..self.readable_copies().await)
            .map(|j| {
                Item::from([(PK.to_string(), s(endpoint_copy_pk(tenant_id, j))), (SK.to_string(), s(endpoint_key(id)))])
            })
            .collect();
        let found = self.batch_get(&keys, Some(("consecutive_failures", &[])), true).await?;
        Ok(found.iter().filter_map(failures_of).fold(0u32, u32::saturating_add))
    }

    /// The failures-in-a-row counts of a page of one tenant's endpoints (`endpoints`, as a
    /// listing read them, strongly consistent, from the endpoint items: copy 0; one of another
    /// tenant keeps its own count), each summed with its counts on read copies 1..: one
    /// strongly consistent Query per copy over the page's sort key range (the copy partitions
    /// hold the same `ENDPOINT#{id}` keys), projecting the key and the count, in flight
    /// together. A read unit per 4 KB of matched items, not one per item as a
    /// BatchGetItem of every (endpoint, copy) would be. Returns the sums in `endpoints`' order;
    /// an endpoint missing from a copy counts 0 there.
    pub(super) async fn failures_summed_page(&self, endpoints: &[Endpoint]) -> Result<Vec<u32>, StoreError> {
        let Some(tenant_id) = endpoints.first().map(|e| &e.tenant_id) else { return Ok(Vec::new()) };
        // By sort key: the page's key range is its least and greatest key.
        let mut sums: HashMap<String, u32> = endpoints
            .iter()
            .filter(|e| &e.tenant_id == tenant_id)
            .map(|e| (endpoint_key(&e.id), e.consecutive_failures))
            .collect();
        let (Some(first), Some(last)) = (sums.keys().min().cloned(), sums.keys().max().cloned()) else {
            return Ok(Vec::new());
        };
        let queries = (1..self.readable_copies().await).map(|j| {
            let query = self
                .client
                .query()
                .table_name(&self.table)
                .consistent_read(true)
                .key_condition_expression("pk = :pk AND sk BETWEEN :first AND :last")
                .projection_expression("sk, consecutive_failures")
                .expression_attribute_values(":pk", s(endpoint_copy_pk(tenant_id, j)))
                .expression_attribute_values(":first", s(&first))
                .expression_attribute_values(":last", s(&last));
            self.query_items(query)
        });
        let pages: Vec<Result<Vec<Item>, StoreError>> =
            futures::stream::iter(queries).buffer_unordered(16).collect().await;
        for item in pages.into_iter().collect::<Result<Vec<_>, _>>()?.into_iter().flatten() {
            if let (Some(sum), Some(count)) = (sums.get_mut(&sk(&item)), failures_of(&item)) {
                *sum = sum.saturating_add(count);
            }
        }
        Ok(endpoints
            .iter()
            .map(|e| match sums.get(&endpoint_key(&e.id)) {
                Some(sum) if &e.tenant_id == tenant_id => *sum,
                _ => e.consecutive_failures,
            })
            .collect())
    }

    /// Applies an unversioned marker's UpdateItem (`expression`, `values`; the condition that
    /// the copy exists, and `extra` when given) to copies 1.. of an endpoint, in flight
    /// together; best effort: a copy whose write fails keeps the old marker until the next
    /// write, and one that is missing is left alone.
    pub(super) async fn mirror_marker(
        &self,
        tenant_id: &str,
        id: &str,
        expression: &str,
        values: &Item,
        extra: Option<&str>,
    ) {
        let condition = match extra {
            Some(c) => format!("attribute_exists(pk) AND ({c})"),
            None => "attribute_exists(pk)".to_string(),
        };
        let writes = self.copy_numbers().map(|j| {
            let update = self
                .copy_update(tenant_id, id, j)
                .update_expression(expression)
                .condition_expression(&condition)
                .set_expression_attribute_values((!values.is_empty()).then(|| values.clone()))
                .return_values(ReturnValue::None);
            async move { (j, super::conditional(update.send().await)) }
        });
        let results: Vec<_> = futures::stream::iter(writes).buffer_unordered(16).collect().await;
        for (j, result) in results {
            if let Err(e) = result {
                tracing::warn!(endpoint_id = id, copy = j, error = %e, "endpoint copy's marker not written; the next write moves it");
            }
        }
    }

    /// An UpdateItem of an endpoint's copy `copy` (0: the endpoint item) that exists (the
    /// condition makes a missing one fail; a caller may set its own instead).
    fn copy_update(
        &self,
        tenant_id: &str,
        id: &str,
        copy: u32,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .key(PK, s(endpoint_copy_pk(tenant_id, copy)))
            .key(SK, s(endpoint_key(id)))
            .condition_expression("attribute_exists(pk)")
    }
}

/// The unversioned markers the copies mirror (see [`DynamoStore::mirror_marker`]): the
/// slow-lane marker's sequence number and the adaptive rate's (each written with every change
/// of its marker), and the marker and the rate's change time.
const MIRRORED: [&str; 4] = ["slow_until", super::lanes::SLOW_SEQ, "rate_changed_at_ms", super::lanes::RATE_SEQ];

/// The fill's check of an endpoint item it copies: still at `version` (the version guard),
/// and its mirrored markers still as `original` holds them, so a marker written (and mirrored)
/// between the fill's read and its Put cancels the Put instead of being overwritten by the
/// value read before it; the next event's fill copies the new one.
fn fill_guard(original: &Item, version: u64) -> (String, HashMap<String, String>, Item) {
    let (mut condition, mut names, mut values) = version_guard(version);
    for (i, attr) in MIRRORED.iter().enumerate() {
        let (name, value) = (format!("#g_m{i}"), format!(":g_m{i}"));
        match original.get(*attr) {
            Some(v) => {
                condition.push_str(&format!(" AND {name} = {value}"));
                values.insert(value, v.clone());
            }
            None => condition.push_str(&format!(" AND attribute_not_exists({name})")),
        }
        names.insert(name, (*attr).to_string());
    }
    (condition, names, values)
}

/// An item's sort key (empty when it has none).
fn sk(item: &Item) -> String {
    item.get(SK).and_then(|v| v.as_s().ok()).cloned().unwrap_or_default()
}

/// An endpoint item's (or copy's) failures-in-a-row count, when it has one.
fn failures_of(item: &Item) -> Option<u32> {
    item.get("consecutive_failures").and_then(|v| v.as_n().ok()).and_then(|v| v.parse().ok())
}

/// The registry item's key.
fn registry_key() -> Item {
    Item::from([(PK.to_string(), s(REGISTRY_PK)), (SK.to_string(), s(REGISTRY_SK))])
}

/// Whether an endpoint copy is marked checked.
fn is_checked(item: &Item) -> bool {
    matches!(item.get(COPY_CHECKED), Some(AttributeValue::Bool(true)))
}

/// The copies to try for an endpoint's copy `j`: it, then the endpoint item (copy 0; just
/// that for copy 0).
fn copy_then_original(j: u32) -> Vec<u32> {
    if j == 0 { vec![0] } else { vec![j, 0] }
}
