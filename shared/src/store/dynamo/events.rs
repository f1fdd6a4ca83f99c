//! Events: the event item (payload, fingerprint) and its deliveries written by conditional
//! PutItems, and the take-back that deletes what a failed call wrote (the figure that keeps it
//! over one transaction is in `service/ingest.rs`).

use super::*;
use crate::domain::ids::{EventId, TenantId};

impl DynamoStore {
    /// An event as its item, under [`event_key`] (in no index): the payload zstd-compressed
    /// in `payload_z` (binary), see [`super::payload`]; the endpoints of its deliveries in
    /// `endpoint_ids` (a string set, [`EVENT_ENDPOINTS`]).
    pub(super) fn event_item(event: &StoredEvent, endpoint_ids: &[&str]) -> Result<Item, StoreError> {
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
    pub(super) async fn put_all(&self, items: &[Item]) -> (Vec<bool>, Option<StoreError>) {
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
    pub(super) async fn existing(
        &self,
        items: impl Iterator<Item = &Item>,
    ) -> Result<std::collections::HashSet<String>, StoreError> {
        let keys: Vec<Item> = items.map(key_of).collect();
        Ok(self.batch_get(&keys, Some(("pk, sk", &[])), true).await?.iter().map(key_text).collect())
    }

    /// Marks the event item `promised` (UpdateItem, conditional on it existing): from then on
    /// no ingest's take-back deletes the event or any of its deliveries. False when the event
    /// item is gone (another ingest of the id took it back).
    pub(super) async fn promise(&self, event_item: &Item) -> Result<bool, StoreError> {
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
    pub(super) async fn list_endpoints(&self, event_item: &Item) -> Result<bool, StoreError> {
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
    pub(super) async fn take_back(
        &self,
        event_item: &Item,
        tried: &[Item],
        fence: &[Item],
        error: StoreError,
    ) -> StoreError {
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
    pub(super) async fn take_back_event(
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
}

/// PutItems of one event's deliveries in flight at once (ingest of a large fan-out).
pub(super) const PUTS_IN_FLIGHT: usize = 16;

/// The most deliveries the take-back's delete of an event item checks (DynamoDB's 100 items
/// in one TransactWriteItems, less the delete).
pub(super) const DELIVERIES_PER_CHECK: usize = 99;

#[async_trait]
impl EventStore for DynamoStore {
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

    async fn get_payload(&self, tenant_id: &TenantId, event_id: &EventId) -> Result<Option<String>, StoreError> {
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
}
