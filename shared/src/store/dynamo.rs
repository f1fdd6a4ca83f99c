//! The DynamoDB implementation of [`Store`].

use super::keys::*;
use super::payload;
use super::{
    Applied, Committed, Counted, DeliveryQuery, DeliverySummary, Due, EndpointWrite, Inserted, Page, Store, StoreError,
};
use crate::endpoint_lifecycle::Change;
use crate::lifecycle::{DueItem, Field, Transition};
use crate::model::{Delivery, DeliveryStatus, Endpoint, Job, StoredEvent};
use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, Put, ReturnValue, TransactWriteItem};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use futures::StreamExt;
use std::collections::HashMap;

mod attention;
mod copies;
mod lanes;
pub use lanes::{RATE_SEQ, RATE_WINDOW_TTL_SECONDS, SLOW_SEQ, rate_pk, rate_sk};

/// A DynamoDB item or key: attribute name to value.
pub type Item = HashMap<String, AttributeValue>;

/// [`Store`] on one DynamoDB table (see the module docs of [`super`] for the layout).
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
    due_shards: u32,
    endpoint_shards: u32,
    status_shards: u32,
    copies: u32,
    count_cap: i32,
    split_cap: i32,
}

impl DynamoStore {
    /// A store on `table`, with the due index split into `due_shards` partitions.
    pub fn new(client: Client, table: impl Into<String>, due_shards: u32) -> Self {
        Self {
            client,
            table: table.into(),
            due_shards: due_shards.max(1),
            endpoint_shards: 1,
            status_shards: 1,
            copies: 1,
            count_cap: COUNT_CAP,
            split_cap: SPLIT_CAP,
        }
    }

    /// The same store with other caps on what an endpoint's counts read per index partition
    /// (defaults [`COUNT_CAP`] entries a status, [`SPLIT_CAP`] items of the `open` range; see
    /// [`Store::count_deliveries_in`]), each at least 1: the tests reach a cap with a small
    /// backlog.
    #[must_use]
    pub fn with_count_caps(mut self, count: u32, split: u32) -> Self {
        self.count_cap = i32::try_from(count.max(1)).unwrap_or(COUNT_CAP);
        self.split_cap = i32::try_from(split.max(1)).unwrap_or(SPLIT_CAP);
        self
    }

    /// The same store with the `by_endpoint` index's partitions split `endpoint` ways and
    /// `by_status`'s `status` ways (1: unsplit, the layout before index sharding). Raising either
    /// on a live table is safe (listings read the unsplit partition and every shard below the
    /// setting); lowering it hides the entries of the shards above until they change.
    #[must_use]
    pub fn with_index_shards(mut self, endpoint: u32, status: u32) -> Self {
        self.endpoint_shards = endpoint.max(1);
        self.status_shards = status.max(1);
        self
    }

    /// The same store on a table of `copies` copies of every endpoint item (1: the item
    /// alone; `WEBHOOKS_ENDPOINT_COPIES`, the count the table's storage version item holds),
    /// written by every endpoint write and read spread over; see the `dynamo::copies` module.
    #[must_use]
    pub fn with_endpoint_copies(mut self, copies: u32) -> Self {
        self.copies = copies.max(1);
        self
    }

    /// Writes one item of an event, conditional on it being new: true when this call created
    /// it, false when it existed already (the event id was ingested before).
    async fn put_new(&self, item: Item) -> Result<bool, StoreError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        conditional(result)
    }

    /// An event as its item, under [`event_key`] (in no index): the payload zstd-compressed
    /// in `payload_z` (binary), see [`super::payload`]; the endpoints of its deliveries in
    /// `endpoint_ids` (a string set, [`EVENT_ENDPOINTS`]).
    fn event_item(event: &StoredEvent, endpoint_ids: &[&str]) -> Result<Item, StoreError> {
        let mut item = to_item(event)?;
        // The payload is stored compressed, not as the struct's text.
        item.remove("payload");
        item.insert(payload::PAYLOAD_Z.into(), AttributeValue::B(payload::compress(&event.payload)?.into()));
        let (pk, sk) = event_key(&event.tenant_id, &event.event_id);
        item.insert(PK.into(), s(pk));
        item.insert(SK.into(), s(sk));
        let ids: std::collections::BTreeSet<String> = endpoint_ids.iter().map(|e| (*e).to_string()).collect();
        item.insert(EVENT_ENDPOINTS.into(), AttributeValue::Ss(ids.into_iter().collect()));
        Ok(item)
    }

    /// Conditional PutItems of `items` ([`PUTS_IN_FLIGHT`] at once): per item, true when
    /// this call created it, false when it existed; the first error, if any.
    async fn put_all(&self, items: &[Item]) -> (Vec<bool>, Option<StoreError>) {
        let results: Vec<Result<bool, StoreError>> =
            futures::stream::iter(items.iter().cloned().map(|item| self.put_new(item)).collect::<Vec<_>>())
                .buffered(PUTS_IN_FLIGHT)
                .collect()
                .await;
        let mut created = Vec::with_capacity(results.len());
        let mut failed = None;
        for r in results {
            match r {
                Ok(c) => created.push(c),
                Err(e) => {
                    created.push(false);
                    failed.get_or_insert(e);
                }
            }
        }
        (created, failed)
    }

    /// Which of `items` exist (strongly consistent BatchGetItems of their keys, 100 a call),
    /// as [`key_text`]s.
    async fn existing(
        &self,
        items: impl Iterator<Item = &Item>,
    ) -> Result<std::collections::HashSet<String>, StoreError> {
        let keys: Vec<Item> = items.map(key_of).collect();
        Ok(self.batch_get(&keys, Some(("pk, sk", &[])), true).await?.iter().map(key_text).collect())
    }

    /// The items of `keys` that exist (BatchGetItems, 100 keys a call, strongly consistent
    /// when `consistent`: 1 read unit an item of up to 4 KB, else half; with `projection`
    /// when given, an expression and its attribute names: DynamoDB bills the whole item all
    /// the same), in no particular order.
    async fn batch_get(
        &self,
        keys: &[Item],
        projection: Option<(&str, &[(&str, &str)])>,
        consistent: bool,
    ) -> Result<Vec<Item>, StoreError> {
        let mut found = Vec::with_capacity(keys.len());
        let names: Option<HashMap<String, String>> = projection
            .map(|(_, names)| names.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect())
            .filter(|n: &HashMap<String, String>| !n.is_empty());
        for chunk in keys.chunks(100) {
            let mut pending = Some(
                aws_sdk_dynamodb::types::KeysAndAttributes::builder()
                    .set_keys(Some(chunk.to_vec()))
                    .consistent_read(consistent)
                    .set_projection_expression(projection.map(|(p, _)| p.to_string()))
                    .set_expression_attribute_names(names.clone())
                    .build()
                    .map_err(aws)?,
            );
            // Keys DynamoDB leaves unprocessed (throughput) are asked again, a few times.
            for _ in 0..5 {
                let Some(request) = pending.take() else { break };
                let out = self.client.batch_get_item().request_items(&self.table, request).send().await.map_err(aws)?;
                found.extend(out.responses.and_then(|mut r| r.remove(&self.table)).unwrap_or_default());
                pending = out.unprocessed_keys.and_then(|mut u| u.remove(&self.table)).filter(|k| !k.keys.is_empty());
            }
            if pending.is_some() {
                return Err(StoreError::Aws("BatchGetItem left keys unprocessed".into()));
            }
        }
        Ok(found)
    }

    /// Deliveries by id (see [`Self::batch_get`]), as summaries; ids without an item are left
    /// out.
    async fn delivery_summaries(&self, ids: &[String]) -> Result<Vec<DeliverySummary>, StoreError> {
        let keys: Vec<Item> = ids
            .iter()
            .map(|id| Item::from([(PK.to_string(), s(delivery_pk(id))), (SK.to_string(), s(DELIVERY_SK))]))
            .collect();
        self.batch_get(&keys, None, true).await?.into_iter().map(from_item).collect()
    }

    /// Marks the event item `promised` (UpdateItem, conditional on it existing): from then on
    /// no ingest's take-back deletes the event or any of its deliveries. False when the event
    /// item is gone (another ingest of the id took it back).
    async fn promise(&self, event_item: &Item) -> Result<bool, StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key_of(event_item)))
            .update_expression("SET promised = :t")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_values(":t", AttributeValue::Bool(true))
            .send()
            .await;
        conditional(result)
    }

    /// Adds this call's endpoints to an event item another call wrote: its `endpoint_ids` (a
    /// repeat of the id can find an endpoint created since, and write its delivery). Made
    /// before this call writes any delivery, so no delivery exists that its event does not
    /// list (a listed endpoint without a delivery is left out of the event's view).
    /// UpdateItem, conditional on the item existing and, when this call carries a
    /// `request_sha256`, on the stored one being absent or equal: false when it is gone
    /// (taken back by the ingest that wrote it), [`StoreError::RequestMismatch`] when the
    /// fingerprints differ (the item, returned with the failure, says which).
    async fn list_endpoints(&self, event_item: &Item) -> Result<bool, StoreError> {
        use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
        let endpoints = event_item.get(EVENT_ENDPOINTS).cloned().unwrap_or_else(|| AttributeValue::Ss(Vec::new()));
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key_of(event_item)))
            .condition_expression("attribute_exists(pk)")
            .update_expression("ADD #endpoints :endpoints")
            .expression_attribute_names("#endpoints", EVENT_ENDPOINTS)
            .expression_attribute_values(":endpoints", endpoints)
            .return_values_on_condition_check_failure(
                aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::AllOld,
            );
        if let Some(fp) = event_item.get(REQUEST_SHA256) {
            update = update
                .condition_expression(format!(
                    "attribute_exists(pk) AND (attribute_not_exists({REQUEST_SHA256}) OR {REQUEST_SHA256} = :fp)"
                ))
                .expression_attribute_values(":fp", fp.clone());
        }
        match update.send().await {
            Ok(_) => Ok(true),
            Err(e) => match e.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(c)) => {
                    if c.item().is_some_and(|found| !found.is_empty()) {
                        Err(StoreError::RequestMismatch)
                    } else {
                        Ok(false)
                    }
                }
                _ => Err(aws(e)),
            },
        }
    }

    /// After a failed write of an event's items: takes back what this call wrote and returns
    /// the error to answer. `tried` are the delivery items this call tried to put; `fence`,
    /// those whose existence keeps the event item (the first 99).
    ///
    /// Which items are ours is not known from the answers (a write can land and its answer be
    /// lost), so every delete is conditional on the item's `ingest_token` being this call's
    /// (a random 128-bit mark every item of one ingest carries): an item of another ingest of
    /// the same event id is left alone, one never written fails the condition harmlessly.
    /// Each delivery's delete is a TransactWriteItems with a ConditionCheck that the event
    /// item is not `promised` (a concurrent repeat of the event id that found the delivery and
    /// answers 202 marks it so first), last to first. The event item goes last, conditional
    /// on not being promised and, in the same TransactWriteItems, on each delivery of `fence`
    /// being absent (one a concurrent repeat created needs its event item). Should anything
    /// stay, the error says which event id to retry with to complete it.
    async fn take_back(&self, event_item: &Item, tried: &[Item], fence: &[Item], error: StoreError) -> StoreError {
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
        let Some(mine) = event_item.get(INGEST_TOKEN).cloned() else {
            return error;
        };
        let not_promised = match ConditionCheck::builder()
            .table_name(&self.table)
            .set_key(Some(key_of(event_item)))
            .condition_expression("attribute_not_exists(promised)")
            .build()
        {
            Ok(c) => TransactWriteItem::builder().condition_check(c).build(),
            Err(e) => return StoreError::Aws(format!("{error}; take-back not started: {e}")),
        };
        let mut left = 0;
        let mut promised = false;
        for item in tried.iter().rev() {
            let delete = aws_sdk_dynamodb::types::Delete::builder()
                .table_name(&self.table)
                .set_key(Some(key_of(item)))
                .condition_expression("ingest_token = :mine")
                .expression_attribute_values(":mine", mine.clone())
                .build()
                .map(|d| TransactWriteItem::builder().delete(d).build());
            let Ok(delete) = delete else {
                left += 1;
                continue;
            };
            let result = self
                .client
                .transact_write_items()
                .transact_items(delete)
                .transact_items(not_promised.clone())
                .send()
                .await;
            match result {
                Ok(_) => {}
                Err(e) => match e.as_service_error() {
                    Some(TransactWriteItemsError::TransactionCanceledException(c)) => {
                        let code = |i: usize| c.cancellation_reasons().get(i).and_then(|r| r.code()).unwrap_or("None");
                        if code(1) == "ConditionalCheckFailed" {
                            promised = true;
                            break;
                        }
                        if code(0) != "ConditionalCheckFailed" {
                            left += 1;
                        }
                    }
                    _ => left += 1,
                },
            }
        }
        if promised {
            // A repeat of the event id answered (or is answering) 202 with these items.
            let event_id = event_item.get("event_id").and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
            tracing::warn!(event_id, error = %error, "ingest failed, but a repeat of the event id was accepted");
            return StoreError::Aws(format!(
                "{error}; event {event_id} was accepted by another request with the same id meanwhile: \
                 retry with \"id\": \"{event_id}\" to see it"
            ));
        }
        // A delivery left behind keeps its event item (no delivery without its payload).
        if left > 0 {
            left += 1;
        } else if let Err(e) = self.take_back_event(event_item, &mine, fence).await {
            tracing::warn!(error = %e, "event item not taken back");
            left += 1;
        }
        if left == 0 {
            return error;
        }
        let event_id = event_item.get("event_id").and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
        tracing::error!(event_id, left, error = %error, "event partly written and not fully taken back");
        StoreError::Aws(format!(
            "{error}; {left} items of event {event_id} could not be taken back: retry with \"id\": \"{event_id}\" to complete it"
        ))
    }

    /// Deletes the event item if this call created it (its `ingest_token` is `mine`), it is
    /// not promised, and none of `deliveries` exists, as one TransactWriteItems. Ok when it
    /// is gone or was never this call's; an error when it had to stay or the call failed.
    async fn take_back_event(
        &self,
        event_item: &Item,
        mine: &AttributeValue,
        deliveries: &[Item],
    ) -> Result<(), StoreError> {
        let delete = aws_sdk_dynamodb::types::Delete::builder()
            .table_name(&self.table)
            .set_key(Some(key_of(event_item)))
            .condition_expression("ingest_token = :mine AND attribute_not_exists(promised)")
            .expression_attribute_values(":mine", mine.clone())
            .build()
            .map_err(aws)?;
        let mut items = vec![TransactWriteItem::builder().delete(delete).build()];
        for d in deliveries {
            let check = ConditionCheck::builder()
                .table_name(&self.table)
                .set_key(Some(key_of(d)))
                .condition_expression("attribute_not_exists(pk)")
                .build()
                .map_err(aws)?;
            items.push(TransactWriteItem::builder().condition_check(check).build());
        }
        match self.client.transact_write_items().set_transact_items(Some(items)).send().await {
            Ok(_) => Ok(()),
            Err(e) => {
                use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
                let Some(TransactWriteItemsError::TransactionCanceledException(c)) = e.as_service_error() else {
                    return Err(aws(e));
                };
                let code = |i: usize| c.cancellation_reasons().get(i).and_then(|r| r.code()).unwrap_or("None");
                if (1..=deliveries.len()).any(|i| code(i) == "ConditionalCheckFailed") {
                    Err(StoreError::Aws("a delivery of the event exists: its event item stays".into()))
                } else if code(0) == "ConditionalCheckFailed" {
                    // Not this call's, promised, or already gone.
                    Ok(())
                } else {
                    Err(aws(e))
                }
            }
        }
    }

    /// A strongly consistent GetItem of `(pk, sk)`, read into `T`.
    async fn get<T: serde::de::DeserializeOwned>(&self, pk: String, sk: &str) -> Result<Option<T>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(PK, s(pk))
            .key(SK, s(sk))
            .consistent_read(true)
            .send()
            .await
            .map_err(aws)?;
        out.item.map(from_item).transpose()
    }

    /// A delivery as an item, with its index attributes: in `due` at `due_at`, in
    /// `by_status` when exhausted or held, and in `by_endpoint`.
    fn delivery_item(&self, delivery: &Delivery, due_at: Option<i64>) -> Result<Item, StoreError> {
        let mut item = to_item(delivery)?;
        item.insert(PK.into(), s(delivery_pk(&delivery.id)));
        item.insert(SK.into(), s(DELIVERY_SK));
        if let Some(due_at) = due_at {
            item.insert(DUE_PK.into(), s(due_pk(due_shard(&delivery.id, self.due_shards))));
            item.insert(DUE_AT.into(), n(due_at));
        }
        if matches!(delivery.status, DeliveryStatus::Exhausted | DeliveryStatus::Held) {
            item.insert(
                STATUS_KEY.into(),
                s(status_partition(delivery.status.as_str(), &delivery.id, self.status_shards)),
            );
            item.insert(STATUS_SK.into(), s(time_sk(delivery.updated_at, &delivery.id)));
        }
        item.insert(EP_PK.into(), s(endpoint_partition(&delivery.endpoint_id, &delivery.id, self.endpoint_shards)));
        item.insert(EP_SK.into(), s(endpoint_sk(delivery.status, delivery.created_at, &delivery.id)));
        Ok(item)
    }

    /// A delivery transition as an UpdateItem's update expression, condition (the guard) and
    /// values; the expression uses the name `#status` for `status`.
    fn transition_parts(&self, id: &str, t: &Transition) -> Result<(String, String, Item), StoreError> {
        let mut u = Update::default();
        u.set.push("#status = :status".into());
        u.values.insert(":status".into(), s(t.status.as_str()));
        u.set("updated_at", time(&t.now));
        if let Some(c) = t.attempt_count {
            u.set("attempt_count", n(c));
        }
        u.field("attempts_base", &t.attempts_base, |v| n(v));
        if t.forgive_attempt {
            u.set.push("attempts_base = if_not_exists(attempts_base, :zero) + :one".into());
            u.values.insert(":zero".into(), n(0));
            u.values.insert(":one".into(), n(1));
        }
        u.field("next_attempt_at", &t.next_attempt_at, time);
        u.field("lease_until", &t.lease_until, time);
        u.field(TTL, &t.expires_at, |v| n(v));
        u.field("reason", &t.reason, |v| s(v));
        match &t.due_at {
            Field::Keep => {}
            Field::Set(at) => {
                u.set(DUE_AT, n(at));
                u.set(DUE_PK, s(due_pk(due_shard(id, self.due_shards))));
            }
            Field::Remove => {
                u.remove.extend([DUE_AT, DUE_PK].map(String::from));
            }
        }
        if let Field::Set(list) = &t.attempts {
            let list = list.iter().map(|a| to_item(a).map(AttributeValue::M)).collect::<Result<Vec<_>, _>>()?;
            u.set("attempts", AttributeValue::L(list));
        }
        u.field("attempts_dropped", &t.attempts_dropped, |v| n(v));
        // A transition with the entry (every change of bucket, and deliver's record of an
        // attempt, a retry's too) writes it to `by_endpoint`, where an unchanged key costs no
        // index write. A claim, a give-back or the sweeper's re-drive has no entry and leaves
        // the index as it is.
        if let Some(entry) = &t.entry {
            u.set(EP_PK, s(endpoint_partition(&entry.endpoint_id, id, self.endpoint_shards)));
            u.set(EP_SK, s(endpoint_sk(t.status, entry.created_at, id)));
        }
        if matches!(t.status, DeliveryStatus::Exhausted | DeliveryStatus::Held) {
            u.set(STATUS_KEY, s(status_partition(t.status.as_str(), id, self.status_shards)));
            u.set(STATUS_SK, s(time_sk(t.now, id)));
        } else {
            u.remove.extend([STATUS_KEY.to_string(), STATUS_SK.to_string()]);
        }
        // The guard.
        let mut cond = vec!["attribute_exists(pk)".to_string()];
        let names: Vec<String> = t
            .guard
            .status
            .iter()
            .enumerate()
            .map(|(i, st)| {
                let name = format!(":g_status{i}");
                u.values.insert(name.clone(), s(st.as_str()));
                name
            })
            .collect();
        cond.push(format!("#status IN ({})", names.join(", ")));
        cond.push("attempt_count = :g_attempt_count".into());
        u.values.insert(":g_attempt_count".into(), n(t.guard.attempt_count));
        if let Some(due) = t.guard.due_at {
            cond.push(format!("{DUE_AT} = :g_due_at"));
            u.values.insert(":g_due_at".into(), n(due));
        }
        if let Some(by) = t.guard.next_attempt_by {
            // Compared as text (RFC 3339 in UTC with `Z`, as every time is stored): the bound
            // cut to whole seconds, see lifecycle::CLAIM_CLOCK_ALLOWANCE_SECONDS.
            cond.push("next_attempt_at <= :g_next_by".into());
            u.values.insert(":g_next_by".into(), s(by.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)));
        }
        Ok((u.expression(), cond.join(" AND "), u.values))
    }

    /// An endpoint [`Change`] as transaction items: an UpdateItem of the endpoint item that
    /// sets every attribute of the new endpoint (the failures counter only when the change
    /// resets it) and removes the optional ones it lacks, on the condition that the stored
    /// version is the one read; then the same update of each of its copies (see [`copies`]).
    fn endpoint_change(&self, change: &Change) -> Result<(TransactWriteItem, Vec<TransactWriteItem>), StoreError> {
        let mut item = to_item(&change.endpoint)?;
        if !change.reset_failures {
            item.remove("consecutive_failures");
        }
        for attr in crate::model::UNVERSIONED_ENDPOINT_ATTRIBUTES {
            item.remove(attr);
        }
        let (condition, mut names, mut values) = version_guard(change.expected_version);
        let mut set = Vec::new();
        for (i, (attr, value)) in item.into_iter().enumerate() {
            names.insert(format!("#a{i}"), attr);
            values.insert(format!(":a{i}"), value);
            set.push(format!("#a{i} = :a{i}"));
        }
        let mut remove = Vec::new();
        for (i, attr) in OPTIONAL_ENDPOINT_ATTRIBUTES.iter().enumerate() {
            if !names.iter().any(|(k, a)| k.starts_with("#a") && a == attr) {
                names.insert(format!("#r{i}"), (*attr).to_string());
                remove.push(format!("#r{i}"));
            }
        }
        let expression = |set: &[String], remove: &[String]| {
            let mut expression = format!("SET {}", set.join(", "));
            if !remove.is_empty() {
                expression.push_str(&format!(" REMOVE {}", remove.join(", ")));
            }
            expression
        };
        // The attention marks (see `attention`): the endpoint item's differ from its copies'.
        let marks = attention::Marks::of(change);
        let copy_expression = expression(&set, &[remove.clone(), marks.copy_remove].concat());
        let (tenant_id, id) = (&change.endpoint.tenant_id, &change.endpoint.id);
        let copies = self.copy_updates(tenant_id, id, &copy_expression, &names, &values)?;
        values.extend(marks.values);
        let expression = expression(&[set, marks.set].concat(), &[remove, marks.remove].concat());
        let update = aws_sdk_dynamodb::types::Update::builder()
            .table_name(&self.table)
            .key(PK, s(tenant_pk(tenant_id)))
            .key(SK, s(endpoint_key(id)))
            .update_expression(expression)
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .build()
            .map_err(aws)?;
        Ok((TransactWriteItem::builder().update(update).build(), copies))
    }

    /// A job as an item, in the due index at `run_at` while it is running.
    fn job_item(&self, job: &Job) -> Result<Item, StoreError> {
        let mut item = to_item(job)?;
        item.insert(PK.into(), s(job_pk(&job.id)));
        item.insert(SK.into(), s(JOB_SK));
        if let (Some(at), "running") = (job.run_at, job.status.as_str()) {
            item.insert(DUE_PK.into(), s(due_pk(JOB_SHARD)));
            item.insert(DUE_AT.into(), n(at.timestamp_millis()));
        }
        // Every job item expires (DynamoDB TTL): a finished one after the retention of a dead
        // letter's record; a running one that long after its next step is due, a date each
        // step's write moves on, so only a job nobody has stepped for that long (no sweeper
        // running, or a shard no longer queried) leaves the table without finishing.
        let from = match (job.status.as_str(), job.run_at) {
            ("running", Some(at)) => at.max(job.updated_at),
            _ => job.updated_at,
        };
        item.insert(TTL.into(), n(from.timestamp() + JOB_RETENTION_SECONDS));
        Ok(item)
    }

    /// The Query of a tenant's endpoints in partition `pk`: their items (`TENANT#{tenant_id}`)
    /// or one of their copies (`COPY#{j}#TENANT#{tenant_id}`).
    fn endpoints_query(&self, pk: &str) -> aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder {
        self.client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND begins_with(sk, :ep)")
            .expression_attribute_values(":pk", s(pk))
            .expression_attribute_values(":ep", s("ENDPOINT#"))
    }

    /// Every item a Query matches, following `LastEvaluatedKey` page by page.
    async fn query_all<T: serde::de::DeserializeOwned>(
        &self,
        query: aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder,
    ) -> Result<Vec<T>, StoreError> {
        self.query_items(query).await?.into_iter().map(from_item).collect()
    }

    /// One page of deliveries from the index the query names: `by_endpoint` (keys only: the
    /// items of the entries it lists are read), or `by_status` without an endpoint (it
    /// projects the summary).
    async fn index_page(&self, q: &DeliveryQuery) -> Result<Page<DeliverySummary>, StoreError> {
        let limit = q.limit.clamp(1, 100);
        match (&q.endpoint_id, q.status) {
            (Some(ep), status) => {
                let buckets: Vec<&str> = match status {
                    Some(st) => vec![endpoint_bucket(st)],
                    None => ENDPOINT_BUCKETS.to_vec(),
                };
                let sources = self.endpoint_sources(ep, &buckets);
                let open = status.filter(|st| in_open(*st));
                // An item read for an entry is listed while it is still in the entry's bucket
                // (and in the status asked for): the index lags the table a moment.
                let keep = move |src: &Source, d: &DeliverySummary| {
                    endpoint_bucket(d.status) == src.bucket && open.is_none_or(|st| d.status == st)
                };
                self.merged_page(&sources, q, limit, &keep, |src, start| self.bucket_page(src, q, limit, start)).await
            }
            (None, Some(st)) => {
                let sources: Vec<Source> = partitions(st.as_str(), self.status_shards)
                    .into_iter()
                    .map(|partition| Source { name: partition.clone(), partition, bucket: "" })
                    .collect();
                let status_page = |src: &Source, start: Option<Item>| {
                    let req = self
                        .client
                        .query()
                        .table_name(&self.table)
                        .scan_index_forward(q.oldest_first)
                        .index_name(STATUS_INDEX)
                        .key_condition_expression("status_key = :k")
                        .expression_attribute_values(":k", s(&src.partition));
                    self.fill_page(req, src.kind(), limit, start)
                };
                // `by_status` projects the delivery: no entry is read as its item.
                self.merged_page(&sources, q, limit, &|_, _| true, status_page).await
            }
            (None, None) => Err(StoreError::Unsupported("list deliveries by endpoint_id or by status".into())),
        }
    }

    /// Due items of one shard of `due`, at most `limit`, in due order, after `after`. The
    /// index projects keys only: a job's entry is its id (from its table key) and due time; a
    /// delivery's is read as its item, page by page, and only an item still due counts toward
    /// `limit` (an entry whose item moved on, the index lagging the table, is passed over and
    /// the read goes on), so a short answer means the shard has no more due now.
    async fn due_in(
        &self,
        shard: u32,
        until_ms: i64,
        limit: usize,
        after: Option<&Due>,
    ) -> Result<Vec<Due>, StoreError> {
        let mut out = Vec::new();
        let mut seen = std::collections::HashSet::new();
        // The index key of the last item read before: the table key and the index key.
        let mut start: Option<Item> = after.map(|due| {
            let (pk, sk, at) = match due {
                Due::Delivery(d) => (delivery_pk(&d.id), DELIVERY_SK, d.due_at),
                Due::Job { id, due_at } => (job_pk(id), JOB_SK, *due_at),
            };
            Item::from([
                (PK.to_string(), s(pk)),
                (SK.to_string(), s(sk)),
                (DUE_PK.to_string(), s(due_pk(shard))),
                (DUE_AT.to_string(), n(at)),
            ])
        });
        while out.len() < limit {
            let page = self
                .client
                .query()
                .index_name(DUE_INDEX)
                .table_name(&self.table)
                .key_condition_expression("#p = :p AND #t <= :t")
                .expression_attribute_names("#p", DUE_PK)
                .expression_attribute_names("#t", DUE_AT)
                .expression_attribute_values(":p", s(due_pk(shard)))
                .expression_attribute_values(":t", n(until_ms))
                .limit(i32::try_from(limit - out.len()).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(aws)?;
            let mut deliveries = Vec::new();
            for item in page.items.unwrap_or_default() {
                let pk = item.get(PK).and_then(|v| v.as_s().ok());
                if let Some(id) = pk.and_then(|pk| pk.strip_prefix(JOB_PREFIX)) {
                    let due_at = item.get(DUE_AT).and_then(|v| v.as_n().ok()).and_then(|v| v.parse().ok()).unwrap_or(0);
                    out.push(Due::Job { id: id.to_string(), due_at });
                } else if seen.insert(key_text(&item)) {
                    // Each delivery once: its entry can show twice while the index catches up
                    // with a new due time, and a BatchGetItem refuses a key given twice.
                    deliveries.push(key_of(&item));
                }
            }
            // This page's delivery items, read strongly consistent (one that moved on since,
            // to a later due time or out of the index, is left out).
            // Its key too, to name an item that does not read as a delivery.
            let projection = (
                "#pk, #sk, id, #status, attempt_count, next_attempt_at, lease_until, #at",
                &[("#pk", PK), ("#sk", SK), ("#status", "status"), ("#at", DUE_AT)][..],
            );
            for item in self.batch_get(&deliveries, Some(projection), true).await? {
                if !item.contains_key(DUE_AT) {
                    continue;
                }
                let key = key_text(&item);
                let due: DueItem = match from_item(item) {
                    Ok(due) => due,
                    // One item that does not decode is passed over (logged with its key, every
                    // tick until someone mends or deletes it), not the whole page, nor the tick.
                    Err(e) => {
                        tracing::error!(key = %key.replace('\n', " "), error = %e, "due index item is not a delivery; passed over");
                        continue;
                    }
                };
                if due.due_at <= until_ms {
                    out.push(Due::Delivery(due));
                }
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        out.sort_by_key(due_order);
        Ok(out)
    }

    /// Every item a Query finds, page after page.
    async fn query_items(
        &self,
        query: aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder,
    ) -> Result<Vec<Item>, StoreError> {
        let mut out = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let page = query.clone().set_exclusive_start_key(start.take()).send().await.map_err(aws)?;
            out.extend(page.items.unwrap_or_default());
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Ok(out),
            }
        }
    }

    /// An UpdateItem of an existing endpoint (the condition makes a missing one fail).
    fn endpoint_update(
        &self,
        tenant_id: &str,
        id: &str,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .key(PK, s(tenant_pk(tenant_id)))
            .key(SK, s(endpoint_key(id)))
            .condition_expression("attribute_exists(pk)")
    }
}

/// The optional attributes of an endpoint item, removed by a change that leaves them unset.
const OPTIONAL_ENDPOINT_ATTRIBUTES: [&str; 6] = [
    "event_types",
    "disabled",
    "previous_secret",
    "previous_secret_expires_at",
    "probe_delivery_id",
    "rate_limit_per_second",
];

/// How long a job item is kept (DynamoDB TTL) after it finished, or after its next step was
/// due while it runs: 14 days in seconds (the default retention of a dead letter).
const JOB_RETENTION_SECONDS: i64 = 14 * 86_400;

/// The condition that an endpoint exists at `version`: (condition, names, values); the name
/// `#g_version` stands for `version`.
fn version_guard(version: u64) -> (String, HashMap<String, String>, Item) {
    let condition = "attribute_exists(pk) AND #g_version = :g_version";
    let names = HashMap::from([("#g_version".to_string(), "version".to_string())]);
    (condition.to_string(), names, Item::from([(":g_version".to_string(), n(version))]))
}

/// An SDK error as a [`StoreError`]: the SDK's text logged under an error id, the error saying
/// what failed with that id (see [`crate::error_text::aws_detail_logged`]).
fn aws<E: std::error::Error + 'static>(e: E) -> StoreError {
    let text = DisplayErrorContext(e).to_string();
    // DynamoDB's error code for a request it refuses as malformed (an oversized key, a bad
    // expression, a key of the wrong shape): ours to fix, not the caller's to retry.
    if text.contains("ValidationException") {
        StoreError::Invalid(crate::error_text::aws_detail_logged("DynamoDB", &text, true))
    } else {
        StoreError::Aws(crate::error_text::aws_detail_logged("DynamoDB", &text, false))
    }
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn to_item<T: serde::Serialize>(v: &T) -> Result<Item, StoreError> {
    serde_dynamo::to_item(v).map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn from_item<T: serde::de::DeserializeOwned>(item: Item) -> Result<T, StoreError> {
    serde_dynamo::from_item(item).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// A Query's `LastEvaluatedKey` as the API's opaque `cursor`: the key as JSON, base64url.
///
/// # Errors
/// [`StoreError::Corrupt`] for a key that is not plain attribute values.
pub fn encode_cursor(key: Item) -> Result<String, StoreError> {
    let json: serde_json::Value = from_item(key)?;
    Ok(B64URL.encode(json.to_string()))
}

/// A `cursor` from a client back into an `ExclusiveStartKey`.
///
/// # Errors
/// [`StoreError::InvalidCursor`] (the API's 422) for anything [`encode_cursor`] did not make:
/// not base64url, not JSON, not an object, or values DynamoDB cannot hold.
pub fn decode_cursor(cursor: &str) -> Result<Item, StoreError> {
    let bytes = B64URL.decode(cursor).map_err(|_| StoreError::InvalidCursor)?;
    let json: serde_json::Value = serde_json::from_slice(&bytes).map_err(|_| StoreError::InvalidCursor)?;
    if !json.is_object() {
        return Err(StoreError::InvalidCursor);
    }
    serde_dynamo::to_item(json).map_err(|_| StoreError::InvalidCursor)
}

/// Ok(true) when a conditional write applied, Ok(false) when its condition failed.
fn conditional<T, E>(
    result: Result<T, aws_sdk_dynamodb::error::SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>>,
) -> Result<bool, StoreError>
where
    E: std::error::Error + aws_sdk_dynamodb::error::ProvideErrorMetadata + 'static,
{
    match result {
        Ok(_) => Ok(true),
        Err(e) if e.as_service_error().and_then(|se| se.code()) == Some("ConditionalCheckFailedException") => Ok(false),
        Err(e) => Err(aws(e)),
    }
}

/// An item's table key as one string (`{pk}\n{sk}`).
fn key_text(item: &Item) -> String {
    let text = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
    format!("{}\n{}", text(PK), text(SK))
}

/// Where a due item sorts: its due time, then its table key (the due indexes' order).
fn due_order(due: &Due) -> (i64, String) {
    match due {
        Due::Delivery(d) => (d.due_at, delivery_pk(&d.id)),
        Due::Job { id, due_at } => (*due_at, job_pk(id)),
    }
}

/// An item's table key (`pk`, `sk`).
fn key_of(item: &Item) -> Item {
    [PK, SK].iter().filter_map(|k| item.get(*k).map(|v| (k.to_string(), v.clone()))).collect()
}

/// The delivery item's attribute holding a random mark of the last guarded transition written
/// to it (128 bits, hex): a transition whose answer was lost and whose retry fails the guard
/// reads the item back with the failure (`ReturnValuesOnConditionCheckFailure`) and, finding
/// its own mark, knows it applied (issue #35: a lost answer was taken for a lost claim).
pub const WRITE_TOKEN: &str = "write_token";

/// PutItems of one event's deliveries in flight at once (ingest of a large fan-out).
const PUTS_IN_FLIGHT: usize = 16;

/// The most deliveries the take-back's delete of an event item checks (DynamoDB's 100 items
/// in one TransactWriteItems, less the delete).
const DELIVERIES_PER_CHECK: usize = 99;

/// Whether `found`, the endpoint item an endpoint create's condition met, is `ours`, the item
/// that create writes: the same secret and creation time (only an earlier try of the same
/// call has both; a rotation since would make it look like another endpoint's).
fn same_endpoint(found: &Item, ours: &Item) -> bool {
    ["secret", "created_at"].iter().all(|attr| found.get(*attr).is_some() && found.get(*attr) == ours.get(*attr))
}

/// Whether a TransactWriteItems was cancelled because DynamoDB refused one of its items as
/// malformed (a `ValidationError` reason, such as a key over 2048 bytes). DynamoDB reports
/// these inside a `TransactionCanceledException`, not as a `ValidationException`; moto 5.2.5
/// answers `ValidationException`, DynamoDB Local (LocalStack) answers as AWS does.
fn cancelled_as_invalid(
    e: &aws_sdk_dynamodb::error::SdkError<
        aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError,
        aws_sdk_dynamodb::config::http::HttpResponse,
    >,
) -> bool {
    use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
    match e.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(c)) => {
            c.cancellation_reasons().iter().any(|r| r.code() == Some("ValidationError"))
        }
        _ => false,
    }
}

/// Builds an UpdateItem's expressions from a [`Transition`].
#[derive(Default)]
struct Update {
    set: Vec<String>,
    remove: Vec<String>,
    values: Item,
}

impl Update {
    fn set(&mut self, attr: &str, v: AttributeValue) {
        let name = format!(":{attr}");
        self.set.push(format!("{attr} = {name}"));
        self.values.insert(name, v);
    }

    fn field<T>(&mut self, attr: &str, f: &Field<T>, conv: impl Fn(&T) -> AttributeValue) {
        match f {
            Field::Keep => {}
            Field::Set(v) => self.set(attr, conv(v)),
            Field::Remove => self.remove.push(attr.to_string()),
        }
    }

    fn expression(&self) -> String {
        let mut e = String::new();
        if !self.set.is_empty() {
            e.push_str("SET ");
            e.push_str(&self.set.join(", "));
        }
        if !self.remove.is_empty() {
            e.push_str(" REMOVE ");
            e.push_str(&self.remove.join(", "));
        }
        e
    }
}

/// Sends an endpoint UpdateItem ([`DynamoStore::endpoint_update`]) asking for the updated
/// values and returns `attr` as written; `None` when the endpoint is gone.
async fn updated_attribute(
    update: aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder,
    attr: &str,
) -> Result<Option<AttributeValue>, StoreError> {
    match update.return_values(ReturnValue::UpdatedNew).send().await {
        Ok(out) => Ok(out.attributes.and_then(|mut a| a.remove(attr))),
        Err(e) if e.as_service_error().is_some_and(|se| se.is_conditional_check_failed_exception()) => Ok(None),
        Err(e) => Err(aws(e)),
    }
}

/// Tries of a write that records an attempt already made (the receiver has seen it): 10, with
/// exponential backoff from 200 ms up to 2 s (about 7 s in all, jittered), where the SDK's
/// default is 3 tries in about 2 s. A throttled table then does not make deliver give up a
/// 2xx's record, the sweeper later reporting it as `lease_expired` and sending the event
/// again (issue #35 input 2): the record's guard keeps it right however late it lands (it
/// applies while the delivery is still this claim's, and loses once the sweeper moved it
/// on). Every other write keeps the SDK's default.
pub const RECORD_MAX_ATTEMPTS: u32 = 10;

/// Whether `t` records an attempt deliver made (not a claim, a re-drive, or the sweeper's
/// record of a lapsed lease, which keeps the SDK's default so a throttled tick stays within
/// its budget).
fn records_attempt(t: &Transition) -> bool {
    matches!(t.attempts, Field::Set(_)) && t.status != crate::model::DeliveryStatus::Sending && !t.forgive_attempt
}

fn retry_for(t: &Transition) -> aws_sdk_dynamodb::config::Builder {
    retry_for_record(records_attempt(t))
}

/// The SDK configuration override of a write: [`RECORD_MAX_ATTEMPTS`] for a record, nothing
/// changed otherwise.
fn retry_for_record(record: bool) -> aws_sdk_dynamodb::config::Builder {
    let builder = aws_sdk_dynamodb::config::Builder::default();
    if !record {
        return builder;
    }
    // Their own retry partition: the standard strategy's retry quota (a token bucket per
    // partition) spent by other throttled calls does not cut a record's tries short.
    builder
        .retry_config(
            aws_sdk_dynamodb::config::retry::RetryConfig::standard()
                .with_max_attempts(RECORD_MAX_ATTEMPTS)
                .with_initial_backoff(std::time::Duration::from_millis(200))
                .with_max_backoff(std::time::Duration::from_secs(2)),
        )
        .retry_partition(aws_sdk_dynamodb::config::retry::RetryPartition::new("webhooks-records"))
}

fn time(t: &chrono::DateTime<chrono::Utc>) -> AttributeValue {
    s(t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
}

#[async_trait]
impl Store for DynamoStore {
    async fn create_endpoint(&self, endpoint: &Endpoint) -> Result<(), StoreError> {
        let mut item = to_item(endpoint)?;
        item.insert(PK.into(), s(tenant_pk(&endpoint.tenant_id)));
        item.insert(SK.into(), s(endpoint_key(&endpoint.id)));
        let mut pointer = Item::new();
        pointer.insert(PK.into(), s(endpoint_key(&endpoint.id)));
        pointer.insert(SK.into(), s(ENDPOINT_POINTER_SK));
        pointer.insert("tenant_id".into(), s(&endpoint.tenant_id));
        // The endpoint item's put returns the item its condition meets, to tell our own earlier
        // try from another endpoint.
        let put = |item: Item, old: Option<aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure>| {
            Put::builder()
                .table_name(&self.table)
                .set_item(Some(item))
                .condition_expression("attribute_not_exists(pk)")
                .set_return_values_on_condition_check_failure(old)
                .build()
                .map(|p| TransactWriteItem::builder().put(p).build())
                .map_err(aws)
        };
        // The copies (see [`copies`]) go in unconditionally: the endpoint item's condition
        // decides, and an id is never reused.
        let copies = self.copy_puts(&item, &endpoint.tenant_id)?;
        let ours = item.clone();
        let all_old = Some(aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::AllOld);
        let mut items = vec![put(item, all_old)?, put(pointer, None)?];
        items.extend(copies);
        let result = self.client.transact_write_items().set_transact_items(Some(items)).send().await;
        let Err(e) = result else { return Ok(()) };
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
        if let Some(TransactWriteItemsError::TransactionCanceledException(c)) = e.as_service_error() {
            // Read by position: the endpoint item, then its id's pointer. Only their own
            // condition says the id is taken; any other reason (a conflicting transaction,
            // throttling) is a failure to retry, not the caller's doing.
            let reason = |i: usize| c.cancellation_reasons().get(i);
            let failed = |i: usize| reason(i).and_then(|r| r.code()) == Some("ConditionalCheckFailed");
            if failed(0) {
                if reason(0).and_then(|r| r.item()).is_some_and(|found| same_endpoint(found, &ours)) {
                    // An earlier try of this call applied and its answer was lost (a try cut
                    // at the SDK's attempt timeout, say): DynamoDB answers the retry, which
                    // carries the same client token, as the first try, but an emulator that
                    // ignores the token (moto) cancels it on the first try's item.
                    tracing::info!(endpoint_id = %endpoint.id, "an endpoint create's answer was lost and its retry found it applied");
                    return Ok(());
                }
                return Err(StoreError::AlreadyExists);
            }
            if failed(1) {
                // Another tenant's endpoint has the id.
                return Err(StoreError::AlreadyExists);
            }
        }
        if cancelled_as_invalid(&e) {
            let text = DisplayErrorContext(e).to_string();
            return Err(StoreError::Invalid(crate::error_text::aws_detail_logged("DynamoDB", &text, true)));
        }
        Err(aws(e))
    }

    async fn get_endpoint(&self, tenant_id: &str, id: &str) -> Result<Option<Endpoint>, StoreError> {
        self.get(tenant_pk(tenant_id), &endpoint_key(id)).await
    }

    async fn read_endpoint(&self, tenant_id: &str, id: &str, key: &str) -> Result<Option<Endpoint>, StoreError> {
        self.read_copy(tenant_id, id, key).await
    }

    async fn find_endpoint(&self, id: &str) -> Result<Option<Endpoint>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(PK, s(endpoint_key(id)))
            .key(SK, s(ENDPOINT_POINTER_SK))
            .send()
            .await
            .map_err(aws)?;
        let Some(tenant) = out.item.as_ref().and_then(|i| i.get("tenant_id")).and_then(|v| v.as_s().ok()) else {
            return Ok(None);
        };
        self.get_endpoint(tenant, id).await
    }

    async fn failures_in_a_row(&self, endpoint: &Endpoint) -> Result<u32, StoreError> {
        if self.copies > 1 {
            // The counter is split over the copies (see [`copies`]): shown summed.
            return self.failures_summed(&endpoint.tenant_id, &endpoint.id).await;
        }
        Ok(endpoint.consecutive_failures)
    }

    async fn listed_failures_in_a_row(&self, endpoints: &[Endpoint]) -> Result<Vec<u32>, StoreError> {
        if self.copies > 1 {
            return self.failures_summed_page(endpoints).await;
        }
        Ok(endpoints.iter().map(|e| e.consecutive_failures).collect())
    }

    async fn tenant_endpoints(&self, tenant_id: &str, key: &str) -> Result<Vec<Endpoint>, StoreError> {
        self.tenant_copies(tenant_id, key).await
    }

    async fn count_failure(
        &self,
        tenant_id: &str,
        id: &str,
        key: &str,
        attempt: u32,
        threshold: u32,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<super::FailureCount>, StoreError> {
        self.count_copy_failure(tenant_id, id, key, attempt, threshold, at).await
    }

    async fn attention_endpoints(
        &self,
        why: super::Attention,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<Page<super::AttentionMark>, StoreError> {
        self.attention_page(why, limit, cursor).await
    }

    async fn count_delivered(
        &self,
        endpoint_id: &str,
        delivery_id: &str,
        at: chrono::DateTime<chrono::Utc>,
        expires_at: i64,
    ) -> Result<(), StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(PK, s(stats_partition(endpoint_id, delivery_id, self.endpoint_shards)))
            .key(SK, s(stats_day_sk(at)))
            .update_expression("ADD delivered :one SET expires_at = :ttl, last_delivered_at = :at, last_counted = :id")
            .condition_expression("attribute_not_exists(last_counted) OR last_counted <> :id")
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":ttl", n(expires_at))
            .expression_attribute_values(":at", time(&at))
            .expression_attribute_values(":id", s(delivery_id))
            .send()
            .await;
        // A failed condition: this delivery is the last one counted there (a retry of this
        // same write, whose first try applied).
        conditional(result)?;
        Ok(())
    }

    async fn delivered_tally(
        &self,
        endpoint_id: &str,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<super::DeliveredTally, StoreError> {
        /// A day's counter item as read.
        #[derive(serde::Deserialize)]
        struct Day {
            #[serde(default)]
            delivered: u64,
            #[serde(default)]
            last_delivered_at: Option<chrono::DateTime<chrono::Utc>>,
        }
        let reads = stats_partitions(endpoint_id, self.endpoint_shards).into_iter().map(|partition| async move {
            let query = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :p AND sk >= :from")
                .expression_attribute_values(":p", s(partition))
                .expression_attribute_values(":from", s(stats_day_sk(since)))
                .projection_expression("delivered, last_delivered_at");
            self.query_all::<Day>(query).await
        });
        // Every partition's days, summed once.
        let mut days = Vec::new();
        for read in futures::stream::iter(reads).buffer_unordered(8).collect::<Vec<_>>().await {
            days.extend(read?);
        }
        Ok(super::DeliveredTally {
            delivered: days.iter().map(|d| d.delivered).sum(),
            last_delivered_at: days.iter().filter_map(|d| d.last_delivered_at).max(),
        })
    }

    async fn reset_failures(&self, tenant_id: &str, id: &str, key: &str) -> Result<(), StoreError> {
        self.reset_copy_failures(tenant_id, id, key).await
    }

    async fn delete_endpoint(&self, tenant_id: &str, id: &str) -> Result<(), StoreError> {
        let delete = |pk: String, sk: String| {
            aws_sdk_dynamodb::types::Delete::builder()
                .table_name(&self.table)
                .key(PK, s(pk))
                .key(SK, s(sk))
                .build()
                .map(|d| TransactWriteItem::builder().delete(d).build())
                .map_err(aws)
        };
        let mut items = vec![
            delete(tenant_pk(tenant_id), endpoint_key(id))?,
            delete(endpoint_key(id), ENDPOINT_POINTER_SK.to_string())?,
        ];
        items.extend(self.copy_deletes(tenant_id, id)?);
        self.client.transact_write_items().set_transact_items(Some(items)).send().await.map_err(aws)?;
        Ok(())
    }

    async fn list_endpoints(
        &self,
        tenant_id: &str,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<Page<Endpoint>, StoreError> {
        let page = self
            .endpoints_query(&tenant_pk(tenant_id))
            .consistent_read(true)
            .limit(i32::try_from(limit.clamp(1, 100)).unwrap_or(100))
            .set_exclusive_start_key(cursor.map(|c| endpoint_start(tenant_id, c)).transpose()?)
            .send()
            .await
            .map_err(aws)?;
        let data = page.items.unwrap_or_default().into_iter().map(from_item).collect::<Result<Vec<_>, _>>()?;
        let next_cursor = match page.last_evaluated_key {
            Some(k) if !k.is_empty() => Some(encode_cursor(k)?),
            _ => None,
        };
        Ok(Page { data, next_cursor })
    }

    async fn event_deliveries(&self, event_id: &str) -> Result<Vec<DeliverySummary>, StoreError> {
        // The event items under its id (one per tenant that used it), each listing the
        // endpoints it has deliveries for.
        let events = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :p")
            .expression_attribute_values(":p", s(event_id_pk(event_id)))
            .projection_expression("#e")
            .expression_attribute_names("#e", EVENT_ENDPOINTS)
            .consistent_read(true);
        let listed = self.query_items(events).await?;
        let mut ids: Vec<String> = listed
            .iter()
            .filter_map(|item| item.get(EVENT_ENDPOINTS).and_then(|v| v.as_ss().ok()))
            .flatten()
            .map(|endpoint| crate::model::delivery_id(event_id, endpoint))
            .collect();
        ids.sort();
        ids.dedup();
        let mut out = self.delivery_summaries(&ids).await?;
        out.sort_by(|a, b| (&a.endpoint_id, &a.id).cmp(&(&b.endpoint_id, &b.id)));
        Ok(out)
    }

    async fn create_job(&self, job: &Job) -> Result<(), StoreError> {
        let item = self.job_item(job)?;
        if self.put_new(item).await? { Ok(()) } else { Err(StoreError::AlreadyExists) }
    }

    async fn save_job(&self, job: &Job, lease_due_at: i64) -> Result<bool, StoreError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(self.job_item(job)?))
            .condition_expression("#at = :lease")
            .expression_attribute_names("#at", DUE_AT)
            .expression_attribute_values(":lease", n(lease_due_at))
            .send()
            .await;
        conditional(result)
    }

    async fn get_job(&self, id: &str) -> Result<Option<Job>, StoreError> {
        self.get(job_pk(id), JOB_SK).await
    }

    async fn claim_job(&self, id: &str, expected_due_at: i64, lease_due_at: i64) -> Result<bool, StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(PK, s(job_pk(id)))
            .key(SK, s(JOB_SK))
            .update_expression("SET due_at = :lease")
            .condition_expression("due_at = :expected")
            .expression_attribute_values(":lease", n(lease_due_at))
            .expression_attribute_values(":expected", n(expected_due_at))
            .send()
            .await;
        conditional(result)
    }

    async fn insert_event(
        &self,
        event: &StoredEvent,
        deliveries: &[(&Delivery, Option<i64>)],
    ) -> Result<Inserted, StoreError> {
        if deliveries.is_empty() {
            return Ok(Inserted { event: false, deliveries: Vec::new() });
        }
        // This call's mark on every item it writes: the take-back deletes only items that
        // carry it (two ingests of one event id can share an instant, so `created_at` cannot
        // tell them apart).
        let token = s(format!("{:032x}", rand::random::<u128>()));
        let mut items = Vec::with_capacity(deliveries.len() + 1);
        let endpoint_ids: Vec<&str> = deliveries.iter().map(|(d, _)| d.endpoint_id.as_str()).collect();
        items.push(Self::event_item(event, &endpoint_ids)?);
        for (d, due_at) in deliveries {
            items.push(self.delivery_item(d, *due_at)?);
        }
        for item in &mut items {
            item.insert(INGEST_TOKEN.into(), token.clone());
        }
        // The payload item first, then the deliveries (conditional PutItems, no transaction:
        // a transaction bills every KB twice, DynamoDB pricing), so no delivery exists
        // without its payload item. When a write fails, what this call wrote is taken back
        // (see `take_back`), and a failed call leaves nothing behind. When some items existed
        // (the event id was ingested before, or is being ingested now by another request),
        // this call answers 202 only after marking the event item `promised`, which stops
        // every take-back, and putting again any delivery a take-back removed before that.
        // No delivery is visible to deliver before the call returns (its message is sent
        // after), nor to the sweeper before its due time (`redrive_after` later).
        let event_item = items.remove(0);
        let fence = &items[..items.len().min(DELIVERIES_PER_CHECK)];
        let mut created = vec![false; items.len()];
        let mut event_new = false;
        for round in 0..3 {
            // From the second round on, deliveries of this call's may exist: a failure takes
            // them back too.
            let tried: &[Item] = if round == 0 { &[] } else { &items };
            let written = match self.put_new(event_item.clone()).await {
                Ok(c) => c,
                Err(e) => return Err(self.take_back(&event_item, tried, fence, e).await),
            };
            event_new |= written;
            if !written {
                match self.list_endpoints(&event_item).await {
                    Ok(true) => {}
                    // Nothing of this call's written yet: nothing to take back.
                    Err(StoreError::RequestMismatch) if round == 0 => return Err(StoreError::RequestMismatch),
                    Ok(false) => {
                        tracing::info!(event_id = %event.event_id, round, "event item taken back by another ingest; writing it again");
                        continue;
                    }
                    Err(e) => return Err(self.take_back(&event_item, tried, fence, e).await),
                }
            }
            let (flags, failed) = self.put_all(&items).await;
            for (c, f) in created.iter_mut().zip(flags) {
                *c |= f;
            }
            if let Some(e) = failed {
                return Err(self.take_back(&event_item, &items, fence, e).await);
            }
            // Only an event item and deliveries all of this call's are safe from every other
            // call's take-back without the mark.
            if event_new && created.iter().all(|c| *c) {
                return Ok(Inserted { event: event_new, deliveries: created });
            }
            match self.promise(&event_item).await {
                Ok(true) => {}
                Ok(false) => {
                    // The event item was taken back by the ingest that wrote it: write it again.
                    tracing::info!(event_id = %event.event_id, round, "event item taken back by another ingest; writing it again");
                    continue;
                }
                Err(e) => return Err(self.take_back(&event_item, &items, fence, e).await),
            }
            // Promised: nothing is taken back any more. Put again what a take-back removed
            // before the mark (read first: a read costs a fifth of a failed put, and a plain
            // repeat of an accepted event finds every delivery there).
            for _ in 0..3 {
                let others: Vec<usize> = (0..items.len()).filter(|i| !created[*i]).collect();
                let Ok(present) = self.existing(others.iter().map(|i| &items[*i])).await else {
                    continue;
                };
                let missing: Vec<usize> =
                    others.into_iter().filter(|i| !present.contains(&key_text(&items[*i]))).collect();
                let again: Vec<Item> = missing.iter().map(|i| items[*i].clone()).collect();
                let (flags, failed) = self.put_all(&again).await;
                for (i, f) in missing.into_iter().zip(flags) {
                    created[i] |= f;
                }
                if failed.is_none() {
                    return Ok(Inserted { event: event_new, deliveries: created });
                }
            }
            return Err(StoreError::Aws(format!(
                "event {} is accepted but some of its deliveries could not be written: retry with \"id\": \"{}\" to complete it",
                event.event_id, event.event_id
            )));
        }
        Err(self
            .take_back(
                &event_item,
                &items,
                fence,
                StoreError::Aws(format!(
                    "event {} kept being taken back by another request with the same id; retry",
                    event.event_id
                )),
            )
            .await)
    }

    async fn get_payload(&self, tenant_id: &str, event_id: &str) -> Result<Option<String>, StoreError> {
        let (pk, sk) = event_key(tenant_id, event_id);
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(PK, s(pk))
            .key(SK, s(sk))
            .projection_expression("#z")
            .expression_attribute_names("#z", payload::PAYLOAD_Z)
            .consistent_read(true)
            .send()
            .await
            .map_err(aws)?;
        match out.item.and_then(|mut item| item.remove(payload::PAYLOAD_Z)) {
            Some(AttributeValue::B(frame)) => payload::decompress(frame.as_ref()).map(Some),
            Some(_) => Err(StoreError::Corrupt(format!("event {event_id}: {} is not binary", payload::PAYLOAD_Z))),
            None => Ok(None),
        }
    }

    async fn get_delivery(&self, id: &str) -> Result<Option<Delivery>, StoreError> {
        self.get(delivery_pk(id), DELIVERY_SK).await
    }

    async fn apply(&self, id: &str, t: &Transition, return_new: bool) -> Result<Applied, StoreError> {
        use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
        let (update, condition, mut values) = self.transition_parts(id, t)?;
        // This call's mark on the item (see [`WRITE_TOKEN`]): the SDK's retry of a write whose
        // answer was lost sends the same request, mark included, and fails the guard the
        // first try moved on; the item it is shown then carries this mark, so the write is
        // known to be ours, not someone else's.
        let token = s(format!("{:032x}", rand::random::<u128>()));
        values.insert(":write_token".into(), token.clone());
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(PK, s(delivery_pk(id)))
            .key(SK, s(DELIVERY_SK))
            // Every transition sets its status, so the expression has its SET clause.
            .update_expression(update.replacen("SET ", "SET #write_token = :write_token, ", 1))
            .condition_expression(condition)
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#write_token", WRITE_TOKEN)
            .set_expression_attribute_values(Some(values))
            .return_values(if return_new { ReturnValue::AllNew } else { ReturnValue::None })
            .return_values_on_condition_check_failure(
                aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::AllOld,
            )
            .customize()
            .config_override(retry_for(t))
            .send()
            .await;
        match result {
            Ok(out) => match out.attributes {
                Some(item) if return_new => Ok(Applied::Done(Some(Box::new(from_item(item)?)))),
                _ => Ok(Applied::Done(None)),
            },
            Err(e) => match e.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(failed)) => {
                    match failed.item().filter(|item| item.get(WRITE_TOKEN) == Some(&token)) {
                        // Our own write, applied by an earlier try whose answer was lost.
                        Some(item) => {
                            tracing::info!(delivery_id = %id, "a transition's answer was lost and its retry found it applied");
                            let item = if return_new { Some(Box::new(from_item(item.clone())?)) } else { None };
                            Ok(Applied::Done(item))
                        }
                        None => Ok(Applied::Lost),
                    }
                }
                _ => Err(aws(e)),
            },
        }
    }

    async fn commit(
        &self,
        endpoint: EndpointWrite<'_>,
        delivery: Option<(&str, &Transition)>,
    ) -> Result<Committed, StoreError> {
        // The endpoint item first and the delivery second (the cancellation reasons are read
        // by position), then the jobs and the endpoint's copies.
        let mut copies = Vec::new();
        let mut items = vec![match endpoint {
            EndpointWrite::Change(change) => {
                let (item, copy_items) = self.endpoint_change(change)?;
                copies = copy_items;
                item
            }
            EndpointWrite::Unchanged { tenant_id, id, version } => {
                let (condition, names, values) = version_guard(version);
                let check = ConditionCheck::builder()
                    .table_name(&self.table)
                    .key(PK, s(tenant_pk(tenant_id)))
                    .key(SK, s(endpoint_key(id)))
                    .condition_expression(condition)
                    .set_expression_attribute_names(Some(names))
                    .set_expression_attribute_values(Some(values))
                    .build()
                    .map_err(aws)?;
                TransactWriteItem::builder().condition_check(check).build()
            }
        }];
        if let Some((id, t)) = delivery {
            let (update, condition, values) = self.transition_parts(id, t)?;
            // A transaction is idempotent by its client token, so it needs no write token; it
            // clears the one a plain transition left, so that mark always names the last
            // guarded write (see [`WRITE_TOKEN`]).
            let update = if update.contains(" REMOVE ") {
                format!("{update}, #write_token")
            } else {
                format!("{update} REMOVE #write_token")
            };
            let update = aws_sdk_dynamodb::types::Update::builder()
                .table_name(&self.table)
                .key(PK, s(delivery_pk(id)))
                .key(SK, s(DELIVERY_SK))
                .update_expression(update)
                .condition_expression(condition)
                .expression_attribute_names("#status", "status")
                .expression_attribute_names("#write_token", WRITE_TOKEN)
                .set_expression_attribute_values(Some(values))
                .build()
                .map_err(aws)?;
            items.push(TransactWriteItem::builder().update(update).build());
        }
        if let EndpointWrite::Change(change) = endpoint {
            for job in &change.jobs {
                let put = Put::builder()
                    .table_name(&self.table)
                    .set_item(Some(self.job_item(job)?))
                    .condition_expression("attribute_not_exists(pk)")
                    .build()
                    .map_err(aws)?;
                items.push(TransactWriteItem::builder().put(put).build());
            }
        }
        items.extend(copies);
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
        // A transaction that collided with another on one of its items (TransactionConflict)
        // is tried again after a short pause; a failed condition is an answer, not an error.
        let mut pause = std::time::Duration::from_millis(20);
        for _ in 0..4 {
            let result = self
                .client
                .transact_write_items()
                .set_transact_items(Some(items.clone()))
                .customize()
                .config_override(retry_for_record(delivery.is_some_and(|(_, t)| records_attempt(t))))
                .send()
                .await;
            let e = match result {
                Ok(_) => return Ok(Committed::Done),
                Err(e) => e,
            };
            let Some(TransactWriteItemsError::TransactionCanceledException(c)) = e.as_service_error() else {
                return Err(aws(e));
            };
            let code = |i: usize| c.cancellation_reasons().get(i).and_then(|r| r.code()).unwrap_or("None");
            if code(0) == "ConditionalCheckFailed" {
                return Ok(Committed::EndpointChanged);
            }
            if delivery.is_some() && code(1) == "ConditionalCheckFailed" {
                return Ok(Committed::DeliveryLost);
            }
            if !(0..items.len()).any(|i| code(i) == "TransactionConflict") {
                return Err(aws(e));
            }
            tokio::time::sleep(pause).await;
            pause *= 2;
        }
        Err(StoreError::Aws("transaction kept conflicting with others on the same items".into()))
    }

    async fn due(&self, shard: u32, until_ms: i64, limit: usize, after: Option<&Due>) -> Result<Vec<Due>, StoreError> {
        self.due_in(shard, until_ms, limit, after).await
    }

    async fn list_deliveries(&self, q: &DeliveryQuery) -> Result<Page<DeliverySummary>, StoreError> {
        self.index_page(q).await
    }

    async fn count_deliveries(&self, endpoint_id: &str, status: DeliveryStatus) -> Result<u64, StoreError> {
        Ok(self.counts_in_buckets(endpoint_id, &[status]).await?.into_iter().map(|c| c.n).sum())
    }

    async fn count_deliveries_in(
        &self,
        endpoint_id: &str,
        statuses: &[DeliveryStatus],
    ) -> Result<Vec<Counted>, StoreError> {
        self.counts_in_buckets(endpoint_id, statuses).await
    }

    async fn set_slow_until(
        &self,
        tenant_id: &str,
        id: &str,
        until: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<(), StoreError> {
        self.write_slow_until(tenant_id, id, until).await
    }

    async fn take_rate_slot(&self, endpoint_id: &str, second: i64) -> Result<u64, StoreError> {
        self.add_rate_slot(endpoint_id, second).await
    }

    async fn set_effective_rate(
        &self,
        tenant_id: &str,
        id: &str,
        expected_ms: Option<i64>,
        rate: f64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        self.write_effective_rate(tenant_id, id, expected_ms, rate, now_ms).await
    }
}

impl DynamoStore {
    /// Every partition of endpoint `ep` in `by_endpoint`, for each of `buckets`. Cursor names:
    /// the bucket for the unsplit partition, `{bucket}#{k - 1}` for a shard.
    fn endpoint_sources(&self, ep: &str, buckets: &[&'static str]) -> Vec<Source> {
        let mut sources = Vec::new();
        for &bucket in buckets {
            for (k, partition) in partitions(ep, self.endpoint_shards).into_iter().enumerate() {
                let name = if k == 0 { bucket.to_string() } else { format!("{bucket}#{}", k - 1) };
                sources.push(Source { name, partition, bucket });
            }
        }
        sources
    }

    /// A Query of `by_endpoint`.
    fn endpoint_query(&self) -> aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder {
        self.client.query().table_name(&self.table).index_name(ENDPOINT_INDEX)
    }

    /// See [`Store::count_deliveries_in`]: per status, the sum over the endpoint's partitions
    /// of `by_endpoint`, one Select COUNT of the status's key range in each, at most
    /// [`COUNT_CAP`] entries (exact when the range ends within them); for `scheduled` and
    /// `sending`, which share the `open` range (the index projects no status), see
    /// [`Self::open_tally_in`]. A fixed number of requests and read units per partition,
    /// whatever the backlog.
    async fn counts_in_buckets(&self, ep: &str, statuses: &[DeliveryStatus]) -> Result<Vec<Counted>, StoreError> {
        let mut selects = Vec::new();
        for (k, st) in statuses.iter().enumerate().filter(|(_, st)| !in_open(**st)) {
            for src in self.endpoint_sources(ep, &[endpoint_bucket(*st)]) {
                selects.push(self.count_for(k, src));
            }
        }
        let (counted, tally) = futures::future::join(
            futures::stream::iter(selects).buffer_unordered(SOURCES_IN_FLIGHT).collect::<Vec<_>>(),
            self.open_tally(ep, statuses.iter().any(|st| in_open(*st))),
        )
        .await;
        let open = tally?;
        let mut counts: Vec<Counted> = statuses
            .iter()
            .map(|st| match st {
                DeliveryStatus::Scheduled => Counted { n: open.scheduled, exact: open.exact },
                DeliveryStatus::Sending => Counted { n: open.sending, exact: open.exact },
                _ => Counted { n: 0, exact: true },
            })
            .collect();
        for c in counted {
            let (k, n, exact) = c?;
            counts[k].n += n;
            counts[k].exact &= exact;
        }
        Ok(counts)
    }

    /// [`Self::count_in_partition`] of `src`, tagged with `k`.
    async fn count_for(&self, k: usize, src: Source) -> Result<(usize, u64, bool), StoreError> {
        let (n, exact) = self.count_in_partition(&src).await?;
        Ok((k, n, exact))
    }

    /// Entries of one `by_endpoint` partition in `src`'s bucket, and whether that is all of
    /// them: one Select COUNT of the bucket's key range, `Limit` [`COUNT_CAP`] (an entry is
    /// keys only, about 150 bytes, so the page stays under DynamoDB's 1 MB: at most 128 read
    /// units, eventually consistent).
    async fn count_in_partition(&self, src: &Source) -> Result<(u64, bool), StoreError> {
        let page = self
            .endpoint_query()
            .select(aws_sdk_dynamodb::types::Select::Count)
            .key_condition_expression("#ipk = :k AND begins_with(#isk, :b)")
            .expression_attribute_names("#ipk", EP_PK)
            .expression_attribute_names("#isk", EP_SK)
            .expression_attribute_values(":k", s(&src.partition))
            .expression_attribute_values(":b", s(format!("{}#", src.bucket)))
            .limit(self.count_cap)
            .send()
            .await
            .map_err(aws)?;
        let more = page.last_evaluated_key.is_some_and(|k| !k.is_empty());
        Ok((u64::try_from(page.count).unwrap_or(0), !more))
    }

    /// How many of endpoint `ep`'s deliveries in `by_endpoint`'s `open` range are
    /// scheduled and sending, when `wanted` (else none are read): [`Self::open_tally_in`]
    /// of each partition, summed.
    async fn open_tally(&self, ep: &str, wanted: bool) -> Result<OpenTally, StoreError> {
        if !wanted {
            return Ok(OpenTally { exact: true, ..OpenTally::default() });
        }
        let sources = self.endpoint_sources(ep, &[endpoint_bucket(DeliveryStatus::Scheduled)]);
        let tallies: Vec<_> = sources.iter().map(|src| self.open_tally_in(src)).collect();
        let tallies: Vec<Result<OpenTally, StoreError>> =
            futures::stream::iter(tallies).buffer_unordered(SOURCES_IN_FLIGHT).collect().await;
        tallies.into_iter().try_fold(OpenTally { exact: true, ..OpenTally::default() }, |sum, t| {
            t.map(|t| OpenTally {
                scheduled: sum.scheduled + t.scheduled,
                sending: sum.sending + t.sending,
                exact: sum.exact && t.exact,
            })
        })
    }

    /// [`Self::open_tally`] of one partition: the oldest [`SPLIT_CAP`] entries of its `open`
    /// range and their items' status (BatchGetItem, eventually consistent: half a read unit
    /// an item of up to 4 KB); an item no longer open (the index lags the table a moment) is
    /// in neither. When the range holds more, its entries are counted (see
    /// [`Self::count_in_partition`]): `sending` is those seen sending, `scheduled` the rest,
    /// and the tally is not exact.
    async fn open_tally_in(&self, src: &Source) -> Result<OpenTally, StoreError> {
        let page = self
            .endpoint_query()
            .key_condition_expression("#ipk = :k AND begins_with(#isk, :b)")
            .expression_attribute_names("#ipk", EP_PK)
            .expression_attribute_names("#isk", EP_SK)
            .expression_attribute_values(":k", s(&src.partition))
            .expression_attribute_values(":b", s(format!("{}#", src.bucket)))
            .limit(self.split_cap)
            .send()
            .await
            .map_err(aws)?;
        let more = page.last_evaluated_key.is_some_and(|k| !k.is_empty());
        let keys: Vec<Item> = page.items.unwrap_or_default().iter().map(key_of).collect();
        let (mut scheduled, mut sending) = (0u64, 0u64);
        for item in self.batch_get(&keys, Some(("#status", &[("#status", "status")])), false).await? {
            match item.get("status").and_then(|v| v.as_s().ok()).map(String::as_str) {
                Some("scheduled") => scheduled += 1,
                Some("sending") => sending += 1,
                _ => {}
            }
        }
        if !more {
            return Ok(OpenTally { scheduled, sending, exact: true });
        }
        let (open, _) = self.count_in_partition(src).await?;
        Ok(OpenTally { scheduled: open.saturating_sub(sending), sending, exact: false })
    }

    /// Up to `limit` entries of one `by_endpoint` partition and bucket (`src`: a key range,
    /// nothing outside the bucket is read), accepted in the query's window, from `start`.
    /// Returns them and the key to go on from, if there may be more.
    async fn bucket_page(
        &self,
        src: &Source,
        q: &DeliveryQuery,
        limit: usize,
        start: Option<Item>,
    ) -> Result<EntryPage, StoreError> {
        let bucket = src.bucket;
        let from = format!("{bucket}#{}", q.since.map(|t| time_sk(t, "")).unwrap_or_else(|| "0".into()));
        let to = format!("{bucket}#{}", q.until.map(|t| time_sk(t, "")).unwrap_or_else(|| "~".into()));
        if let Some(key) = &start {
            // A cursor from another endpoint, bucket or window would reach DynamoDB as a bad key.
            let in_window = key.get(EP_SK).and_then(|v| v.as_s().ok()).is_some_and(|sk| *sk >= from && *sk <= to);
            if !start_key_fits(src, key) || !in_window {
                return Err(StoreError::InvalidCursor);
            }
        }
        let req = self
            .endpoint_query()
            .scan_index_forward(q.oldest_first)
            .key_condition_expression("#ipk = :k AND #isk BETWEEN :from AND :to")
            .expression_attribute_names("#ipk", EP_PK)
            .expression_attribute_names("#isk", EP_SK)
            .expression_attribute_values(":k", s(&src.partition))
            .expression_attribute_values(":from", s(&from))
            .expression_attribute_values(":to", s(&to));
        self.fill_page(req, src.kind(), limit, start).await
    }

    /// Runs `req`, a Query of an index partition of `kind`, page by page from `start` until `limit`
    /// entries are read or the range ends (a filter can make a page come back short).
    /// Returns them and the key to go on from, if there may be more.
    async fn fill_page(
        &self,
        req: aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder,
        kind: Kind,
        limit: usize,
        mut start: Option<Item>,
    ) -> Result<EntryPage, StoreError> {
        let mut entries = Vec::new();
        loop {
            let page = req
                .clone()
                .limit(i32::try_from(limit - entries.len()).unwrap_or(100))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(aws)?;
            for item in page.items.unwrap_or_default() {
                entries.extend(Entry::of(kind, item)?);
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => {
                    if entries.len() >= limit {
                        return Ok((entries, Some(k)));
                    }
                    start = Some(k);
                }
                _ => return Ok((entries, None)),
            }
        }
    }

    /// A page merged over several index partitions (`sources`): the newest (or oldest) `limit`
    /// of them in the index's order, each source read by `page` from where the cursor says,
    /// up to `limit` entries at a time. The merge runs on the entries' keys; only the entries
    /// it takes of the keys-only `by_endpoint` are read as their items (BatchGetItem, strongly
    /// consistent, about as many as it lists), and listed if `keep` takes them. An item that
    /// has moved on since its entry was read (another status of the `open` range, or another
    /// bucket: the index lags the table) is left out and the merge reads on, for at most
    /// [`MERGE_STEPS`] reads of every source: a status the `open` range holds few of (such as
    /// `sending` behind a backlog of scheduled ones) then comes back as a page shorter than
    /// `limit`, even empty, with a cursor, as a Query with a filter does, so no request reads
    /// a whole backlog. Only a page without a cursor is the last. A delivery
    /// with two entries a moment (its old and new bucket while the index catches up) is
    /// listed once. The cursor names every source: where to go on (the index key of the last
    /// entry passed), from the start (`{}`), or done (null); a source it does not name (a
    /// shard added since) starts over.
    async fn merged_page<'s, F, Fut>(
        &self,
        sources: &'s [Source],
        q: &DeliveryQuery,
        limit: usize,
        keep: &(dyn Fn(&Source, &DeliverySummary) -> bool + Sync),
        page: F,
    ) -> Result<Page<DeliverySummary>, StoreError>
    where
        F: Fn(&'s Source, Option<Item>) -> Fut,
        Fut: std::future::Future<Output = Result<EntryPage, StoreError>>,
    {
        let mut data = Vec::new();
        let mut step_query = q.clone();
        for _ in 1..MERGE_STEPS {
            let step = self.merged_step(sources, &step_query, limit - data.len(), keep, &page).await?;
            data.extend(step.data);
            match step.next_cursor {
                Some(cursor) if data.len() < limit => step_query.cursor = Some(cursor),
                next_cursor => return Ok(Page { data, next_cursor }),
            }
        }
        let step = self.merged_step(sources, &step_query, limit - data.len(), keep, &page).await?;
        data.extend(step.data);
        Ok(Page { data, next_cursor: step.next_cursor })
    }

    /// One merge of [`Self::merged_page`]: up to `limit` deliveries, from the entries every
    /// source's one read places (see there); fewer when `keep` leaves some out, with a cursor
    /// while any source has more.
    async fn merged_step<'s, F, Fut>(
        &self,
        sources: &'s [Source],
        q: &DeliveryQuery,
        limit: usize,
        keep: &(dyn Fn(&Source, &DeliverySummary) -> bool + Sync),
        page: F,
    ) -> Result<Page<DeliverySummary>, StoreError>
    where
        F: Fn(&'s Source, Option<Item>) -> Fut,
        Fut: std::future::Future<Output = Result<EntryPage, StoreError>>,
    {
        // Per source: None = done, Some(None) = from the start, Some(Some(key)) = after key.
        let mut positions: Vec<Option<Option<Item>>> = vec![Some(None); sources.len()];
        if let Some(c) = q.cursor.as_deref() {
            let json: serde_json::Value =
                serde_json::from_slice(&B64URL.decode(c).map_err(|_| StoreError::InvalidCursor)?)
                    .map_err(|_| StoreError::InvalidCursor)?;
            let named = json.get("buckets").and_then(|b| b.as_object()).ok_or(StoreError::InvalidCursor)?;
            for (i, src) in sources.iter().enumerate() {
                positions[i] = match named.get(&src.name) {
                    None => Some(None),
                    Some(serde_json::Value::Null) => None,
                    Some(serde_json::Value::Object(o)) if o.is_empty() => Some(None),
                    Some(other) => {
                        Some(Some(serde_dynamo::to_item(other.clone()).map_err(|_| StoreError::InvalidCursor)?))
                    }
                };
            }
        }
        for (src, at) in sources.iter().zip(&positions) {
            if let Some(Some(k)) = at
                && !start_key_fits(src, k)
            {
                return Err(StoreError::InvalidCursor);
            }
        }
        let to_read: Vec<(usize, Option<Item>)> =
            positions.iter().enumerate().filter_map(|(i, at)| at.clone().map(|start| (i, start))).collect();
        let pages: Vec<Result<(usize, EntryPage), StoreError>> =
            futures::stream::iter(to_read.into_iter().map(|(i, start)| {
                let fut = page(&sources[i], start);
                async move { fut.await.map(|p| (i, p)) }
            }))
            .buffered(SOURCES_IN_FLIGHT)
            .collect()
            .await;
        // `a` comes before `b` in the listing's direction.
        let before = |a: &str, b: &str| if q.oldest_first { a < b } else { a > b };
        let mut fetched: Vec<(usize, Entry)> = Vec::new();
        let mut next_keys: HashMap<usize, Option<Item>> = HashMap::new();
        // The nearest of the last entries read from the sources not read to their end: no
        // entry a source has not read yet comes before it, so the entries up to it are in
        // their place (the source it is from read `limit` of them: a full page).
        let mut frontier: Option<String> = None;
        for p in pages {
            let (i, (entries, next)) = p?;
            if next.is_some()
                && let Some(last) = entries.last()
                && frontier.as_deref().is_none_or(|f| before(&last.order, f))
            {
                frontier = Some(last.order.clone());
            }
            next_keys.insert(i, next);
            fetched.extend(entries.into_iter().map(|e| (i, e)));
        }
        fetched.sort_by(|(_, a), (_, b)| if q.oldest_first { a.order.cmp(&b.order) } else { b.order.cmp(&a.order) });
        let placed =
            fetched.iter().take_while(|(_, e)| frontier.as_deref().is_none_or(|f| !before(f, &e.order))).count();
        // Take entries in order, reading the items of keys-only ones a chunk at a time (as
        // many as are still wanted), until `limit` are listed or the placed entries run out.
        let mut data: Vec<DeliverySummary> = Vec::new();
        let mut listed: std::collections::HashSet<String> = std::collections::HashSet::new();
        let mut passed = 0;
        while data.len() < limit && passed < placed {
            let chunk = passed..(passed + limit - data.len()).min(placed);
            // Each id once: one delivery can have two keys-only entries a moment (its old and
            // new bucket or shard while the index catches up), and a BatchGetItem refuses a
            // key given twice.
            let mut ids: Vec<String> = fetched[chunk.clone()]
                .iter()
                .filter(|(_, e)| e.summary.is_none() && !listed.contains(&e.id))
                .map(|(_, e)| e.id.clone())
                .collect();
            ids.sort_unstable();
            ids.dedup();
            let items: HashMap<String, DeliverySummary> = if ids.is_empty() {
                HashMap::new()
            } else {
                self.delivery_summaries(&ids).await?.into_iter().map(|d| (d.id.clone(), d)).collect()
            };
            for (i, e) in &fetched[chunk] {
                passed += 1;
                if listed.contains(&e.id) {
                    continue;
                }
                let d = match &e.summary {
                    Some(d) => Some(d.clone()),
                    None => items.get(&e.id).filter(|d| keep(&sources[*i], d)).cloned(),
                };
                if let Some(d) = d {
                    listed.insert(d.id.clone());
                    data.push(d);
                    if data.len() == limit {
                        break;
                    }
                }
            }
        }
        // Another entry of the last one listed (see above) is passed with it.
        while passed < fetched.len() && listed.contains(&fetched[passed].1.id) {
            passed += 1;
        }
        let (gone, rest) = fetched.split_at(passed);
        let mut cursor = serde_json::Map::new();
        for (i, src) in sources.iter().enumerate() {
            let unread = rest.iter().any(|(j, _)| *j == i);
            let position = if !next_keys.contains_key(&i) {
                None // done before this page
            } else if unread {
                // Go on after the last entry passed from this source (or where it started).
                match gone.iter().rev().find(|(j, _)| *j == i) {
                    Some((_, e)) => Some(e.key.clone()),
                    None => positions[i].clone().flatten(),
                }
            } else {
                next_keys.get(&i).cloned().flatten()
            };
            let value = match position {
                Some(key) => from_item::<serde_json::Value>(key)?,
                None if unread => serde_json::Value::Object(serde_json::Map::new()),
                None => serde_json::Value::Null,
            };
            cursor.insert(src.name.clone(), value);
        }
        let open = cursor.values().any(|v| !v.is_null());
        let next_cursor = open.then(|| B64URL.encode(serde_json::json!({ "buckets": cursor }).to_string()));
        Ok(Page { data, next_cursor })
    }
}

/// Longest sort key value DynamoDB takes, in bytes; a longer one in an `ExclusiveStartKey` is
/// a `ValidationException`.
const MAX_SORT_KEY_BYTES: usize = 1024;

/// Whether `text` is `prefix` followed by an id the API could have handed out (the id rule of
/// [`crate::validate`]: at most 256 bytes, no control characters).
fn prefixed_id(text: Option<&String>, prefix: &str) -> bool {
    text.and_then(|t| t.strip_prefix(prefix)).is_some_and(crate::validate::is_client_id)
}

/// Whether `key` can be where a listing of `src` goes on: the table key of a delivery (`pk`,
/// `sk`) and the index key of `src`'s partition, with a sort key DynamoDB takes, nothing else
/// (a tampered cursor is refused, not sent to DynamoDB).
fn start_key_fits(src: &Source, key: &Item) -> bool {
    let text = |name: &str| key.get(name).and_then(|v| v.as_s().ok());
    let (pk_attr, sk_attr) = src.kind().key_attributes();
    key.len() == 4
        && prefixed_id(text(PK), &delivery_pk(""))
        && text(SK).is_some_and(|sk| sk == DELIVERY_SK)
        && text(pk_attr) == Some(&src.partition)
        && text(sk_attr).is_some_and(|sk| {
            sk.len() <= MAX_SORT_KEY_BYTES && (src.bucket.is_empty() || sk.starts_with(&format!("{}#", src.bucket)))
        })
}

/// A `cursor` of `tenant_id`'s endpoint listing back into its `ExclusiveStartKey`: the table
/// key of one of the tenant's endpoints and nothing else.
///
/// # Errors
/// [`StoreError::InvalidCursor`] for anything else (another tenant's key, an outsized one),
/// before DynamoDB sees it.
fn endpoint_start(tenant_id: &str, cursor: &str) -> Result<Item, StoreError> {
    let key = decode_cursor(cursor)?;
    let text = |name: &str| key.get(name).and_then(|v| v.as_s().ok());
    let fits = key.len() == 2 && text(PK) == Some(&tenant_pk(tenant_id)) && prefixed_id(text(SK), &endpoint_key(""));
    if fits { Ok(key) } else { Err(StoreError::InvalidCursor) }
}

/// Entries read from one index partition, and the key to go on from.
type EntryPage = (Vec<Entry>, Option<Item>);

/// One index entry a merged listing may take.
struct Entry {
    /// Its index key (the table key and the index's key): where its source goes on after it.
    key: Item,
    /// Its place in the listing: the index's sort key, without the `by_endpoint` bucket
    /// (`{created_at}#{id}`, or `by_status`'s `{updated_at}#{id}`).
    order: String,
    /// The delivery's id.
    id: String,
    /// The delivery as `by_status` projects it; `None` from `by_endpoint`, which projects
    /// keys only (the item is read when the entry is taken).
    summary: Option<DeliverySummary>,
}

impl Entry {
    /// The entry of a Query of `src` that returned `item`; `None` for an item not a
    /// delivery's (the endpoint and status indexes hold deliveries only).
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] for a projected delivery that does not decode.
    fn of(src: Kind, item: Item) -> Result<Option<Self>, StoreError> {
        let (pk_attr, sk_attr) = src.key_attributes();
        let text = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
        let (Some(id), Some(sk)) =
            (text(PK).and_then(|pk| pk.strip_prefix(&delivery_pk("")).map(str::to_string)), text(sk_attr))
        else {
            return Ok(None);
        };
        let order = match sk.strip_prefix(src.bucket).and_then(|rest| rest.strip_prefix('#')) {
            Some(rest) if !src.bucket.is_empty() => rest.to_string(),
            _ => sk,
        };
        let key: Item = [PK, SK, pk_attr, sk_attr]
            .into_iter()
            .filter_map(|name| item.get(name).map(|v| (name.to_string(), v.clone())))
            .collect();
        let summary = if src.bucket.is_empty() { Some(from_item(item)?) } else { None };
        Ok(Some(Self { key, order, id, summary }))
    }
}

/// One index partition a merged listing reads.
struct Source {
    /// Its name in the cursor.
    name: String,
    /// The index partition key value.
    partition: String,
    /// The `by_endpoint` bucket it lists (empty for `by_status`).
    bucket: &'static str,
}

impl Source {
    /// Which index, and which bucket of it, this source reads.
    fn kind(&self) -> Kind {
        Kind { bucket: self.bucket }
    }
}

/// Which index a [`Source`] reads (`by_status`: no bucket; else `by_endpoint`), and which
/// bucket of it.
#[derive(Debug, Clone, Copy)]
struct Kind {
    /// The `by_endpoint` bucket (empty for `by_status`).
    bucket: &'static str,
}

impl Kind {
    /// The key attributes (partition, sort) of the index this reads.
    fn key_attributes(self) -> (&'static str, &'static str) {
        if self.bucket.is_empty() { (STATUS_KEY, STATUS_SK) } else { (EP_PK, EP_SK) }
    }
}

/// Whether `status` is one of the two of the `open` bucket.
fn in_open(status: DeliveryStatus) -> bool {
    matches!(status, DeliveryStatus::Scheduled | DeliveryStatus::Sending)
}

/// Entries of one `by_endpoint` key range a count reads at most, per partition: one Select
/// COUNT request (see [`Store::count_deliveries_in`]). A count that stops there is flagged
/// not exact.
pub const COUNT_CAP: i32 = 5_000;

/// Items of one partition's `open` range the stats read to split it into scheduled and
/// sending (see [`Store::count_deliveries_in`]): at most 50 read units a partition.
pub const SPLIT_CAP: i32 = 100;

/// Scheduled and sending deliveries of an endpoint's `open` range, and whether the split is
/// exact.
#[derive(Debug, Clone, Copy, Default)]
struct OpenTally {
    scheduled: u64,
    sending: u64,
    exact: bool,
}

/// Reads of every source one listing request makes at most ([`DynamoStore::merged_page`]):
/// at most this many times `limit` entries of each partition, and as many items.
const MERGE_STEPS: usize = 10;

/// Index partitions a merged listing queries at once.
const SOURCES_IN_FLIGHT: usize = 8;
