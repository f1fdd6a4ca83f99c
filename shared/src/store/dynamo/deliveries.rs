//! Deliveries: reading one, applying a guarded transition built by
//! [`crate::domain::delivery_lifecycle`], the due index.

use super::*;
use crate::domain::ids::{DeliveryId, EndpointId, EventId, JobId};

impl DynamoStore {
    /// Deliveries by id (see [`Self::batch_get`]), as summaries; ids without an item are left
    /// out.
    pub(super) async fn delivery_summaries(&self, ids: &[DeliveryId]) -> Result<Vec<DeliverySummary>, StoreError> {
        let keys: Vec<Item> = ids
            .iter()
            .map(|id| Item::from([(PK.to_string(), s(delivery_pk(id))), (SK.to_string(), s(DELIVERY_SK))]))
            .collect();
        self.batch_get(&keys, None, true).await?.into_iter().map(from_item).collect()
    }

    /// A delivery as an item, with its index attributes: in `due` at `due_at`, in
    /// `by_status` when exhausted or held, and in `by_endpoint`.
    pub(super) fn delivery_item(&self, delivery: &Delivery, due_at: Option<i64>) -> Result<Item, StoreError> {
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
    pub(super) fn transition_parts(&self, id: &str, t: &Transition) -> Result<(String, String, Item), StoreError> {
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
            // cut to whole seconds, see delivery_lifecycle::CLAIM_CLOCK_ALLOWANCE_SECONDS.
            cond.push("next_attempt_at <= :g_next_by".into());
            u.values.insert(":g_next_by".into(), s(by.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)));
        }
        Ok((u.expression(), cond.join(" AND "), u.values))
    }

    /// Due items of one shard of `due`, at most `limit`, in due order, after `after`. The
    /// index projects keys only: a job's entry is its id (from its table key) and due time; a
    /// delivery's is read as its item, page by page, and only an item still due counts toward
    /// `limit` (an entry whose item moved on, the index lagging the table, is passed over and
    /// the read goes on), so a short answer means the shard has no more due now.
    pub(super) async fn due_in(
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
                if let Some(id) =
                    pk.and_then(|pk| pk.strip_prefix(JOB_PREFIX)).and_then(|id| JobId::try_from(id.to_string()).ok())
                {
                    let due_at = item.get(DUE_AT).and_then(|v| v.as_n().ok()).and_then(|v| v.parse().ok()).unwrap_or(0);
                    out.push(Due::Job { id, due_at });
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
}

/// Where a due item sorts: its due time, then its table key (the due indexes' order).
pub(super) fn due_order(due: &Due) -> (i64, String) {
    match due {
        Due::Delivery(d) => (d.due_at, delivery_pk(&d.id)),
        Due::Job { id, due_at } => (*due_at, job_pk(id)),
    }
}

/// Builds an UpdateItem's expressions from a [`Transition`].
#[derive(Default)]
pub(super) struct Update {
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
pub(super) async fn updated_attribute(
    update: aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder,
    attr: &str,
) -> Result<Option<AttributeValue>, StoreError> {
    match update.return_values(ReturnValue::UpdatedNew).send().await {
        Ok(out) => Ok(out.attributes.and_then(|mut a| a.remove(attr))),
        Err(e) if e.as_service_error().is_some_and(|se| se.is_conditional_check_failed_exception()) => Ok(None),
        Err(e) => Err(aws(e)),
    }
}

/// Whether `t` records an attempt deliver made (not a claim, a re-drive, or the sweeper's
/// record of a lapsed lease, which keeps the SDK's default so a throttled tick stays within
/// its budget).
impl DynamoStore {
    /// A delivery transition as an item of a TransactWriteItems. A transaction is idempotent
    /// by its client token, so it needs no write token; it clears the one a plain transition
    /// left, so that mark always names the last guarded write (see [`WRITE_TOKEN`]).
    pub(super) fn transition_in_transaction(&self, id: &str, t: &Transition) -> Result<TransactWriteItem, StoreError> {
        let (update, condition, values) = self.transition_parts(id, t)?;
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
        Ok(TransactWriteItem::builder().update(update).build())
    }

    /// A new job (conditional on its id being new) as an item of a TransactWriteItems.
    pub(super) fn job_put(&self, job: &Job) -> Result<TransactWriteItem, StoreError> {
        let put = aws_sdk_dynamodb::types::Put::builder()
            .table_name(&self.table)
            .set_item(Some(self.job_item(job)?))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .map_err(aws)?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    /// [`DeliveryStore::apply`] of a transition that carries jobs: the delivery's update and
    /// the jobs' puts in one TransactWriteItems (a collision with another transaction is tried
    /// again after a short pause, as [`EndpointStore::commit`] does).
    async fn apply_with_jobs(&self, id: &DeliveryId, t: &Transition, return_new: bool) -> Result<Applied, StoreError> {
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
        let mut items = vec![self.transition_in_transaction(id, t)?];
        for job in &t.jobs {
            items.push(self.job_put(job)?);
        }
        let mut pause = std::time::Duration::from_millis(20);
        for _ in 0..4 {
            let result = self
                .client
                .transact_write_items()
                .set_transact_items(Some(items.clone()))
                .customize()
                .config_override(retry_for(t))
                .send()
                .await;
            let e = match result {
                Ok(_) if return_new => return Ok(Applied::Done(self.get_delivery(id).await?.map(Box::new))),
                Ok(_) => return Ok(Applied::Done(None)),
                Err(e) => e,
            };
            let Some(TransactWriteItemsError::TransactionCanceledException(c)) = e.as_service_error() else {
                return Err(aws(e));
            };
            let code = |i: usize| c.cancellation_reasons().get(i).and_then(|r| r.code()).unwrap_or("None");
            if code(0) == "ConditionalCheckFailed" {
                return Ok(Applied::Lost);
            }
            if !(0..items.len()).any(|i| code(i) == "TransactionConflict") {
                return Err(aws(e));
            }
            tokio::time::sleep(pause).await;
            pause *= 2;
        }
        Err(StoreError::Aws("transaction kept conflicting with others on the same items".into()))
    }
}

pub(super) fn records_attempt(t: &Transition) -> bool {
    matches!(t.attempts, Field::Set(_))
        && t.status != crate::domain::model::DeliveryStatus::Sending
        && !t.forgive_attempt
}

pub(super) fn retry_for(t: &Transition) -> aws_sdk_dynamodb::config::Builder {
    retry_for_record(records_attempt(t))
}

/// The SDK configuration override of a write: [`RECORD_MAX_ATTEMPTS`] for a record, nothing
/// changed otherwise.
pub(super) fn retry_for_record(record: bool) -> aws_sdk_dynamodb::config::Builder {
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

#[async_trait]
impl DeliveryStore for DynamoStore {
    async fn event_deliveries(&self, event_id: &EventId) -> Result<Vec<DeliverySummary>, StoreError> {
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
        let mut ids: Vec<DeliveryId> = listed
            .iter()
            .filter_map(|item| item.get(EVENT_ENDPOINTS).and_then(|v| v.as_ss().ok()))
            .flatten()
            .map(|endpoint| {
                let endpoint = EndpointId::try_from(endpoint.clone()).map_err(|e| {
                    StoreError::Corrupt(format!("event {event_id}: {EVENT_ENDPOINTS} holds {endpoint:?}: {e}"))
                })?;
                Ok(crate::domain::model::delivery_id(event_id, &endpoint))
            })
            .collect::<Result<_, StoreError>>()?;
        ids.sort();
        ids.dedup();
        let mut out = self.delivery_summaries(&ids).await?;
        out.sort_by(|a, b| (&a.endpoint_id, &a.id).cmp(&(&b.endpoint_id, &b.id)));
        Ok(out)
    }

    async fn get_delivery(&self, id: &DeliveryId) -> Result<Option<Delivery>, StoreError> {
        self.get(delivery_pk(id), DELIVERY_SK).await
    }

    async fn apply(&self, id: &DeliveryId, t: &Transition, return_new: bool) -> Result<Applied, StoreError> {
        use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
        if !t.jobs.is_empty() {
            return self.apply_with_jobs(id, t, return_new).await;
        }
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

    async fn due(&self, shard: u32, until_ms: i64, limit: usize, after: Option<&Due>) -> Result<Vec<Due>, StoreError> {
        self.due_in(shard, until_ms, limit, after).await
    }

    async fn list_deliveries(&self, q: &DeliveryQuery) -> Result<Page<DeliverySummary>, StoreError> {
        self.index_page(q).await
    }

    async fn count_deliveries(&self, endpoint_id: &EndpointId, status: DeliveryStatus) -> Result<u64, StoreError> {
        Ok(self.counts_in_buckets(endpoint_id, &[status]).await?.into_iter().map(|c| c.n).sum())
    }

    async fn count_deliveries_in(
        &self,
        endpoint_id: &EndpointId,
        statuses: &[DeliveryStatus],
    ) -> Result<Vec<Counted>, StoreError> {
        self.counts_in_buckets(endpoint_id, statuses).await
    }
}
