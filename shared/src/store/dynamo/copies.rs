//! Endpoint copies: one hot tenant's endpoint reads and one hot endpoint's failures-in-a-row
//! counter spread over R partitions, because one key value takes at most 3,000 read and 1,000
//! write units a second (bench/report.md section 2b).
//!
//! | item | `pk` | `sk` | attributes |
//! |---|---|---|---|
//! | endpoint copy `j` (1 to R - 1) | `COPY#{j}#TENANT#{tenant_id}` | `ENDPOINT#{endpoint_id}` | the endpoint item's |
//!
//! R (`WEBHOOKS_ENDPOINT_COPIES`, default 1) is a property of the table, fixed when it is
//! created: it is stored on the storage version item, and a function configured with another
//! count refuses to start ([`crate::store::version::ensure`]), so every process agrees on it
//! (changing it is a migration). Copy 0 is the endpoint item itself; copies 1 to R - 1 are
//! written in the same TransactWriteItems as it by the endpoint's creation, by every change
//! (the transaction that holds its version guard) and by its deletion, so every copy always
//! exists and a strongly consistent read of any copy sees every change that has answered.
//! An event reads the copy its id hashes to and an attempt the copy its delivery id hashes to
//! ([`endpoint_copy`]). A failed attempt adds one to the failures-in-a-row counter of the copy
//! it read and a 2xx zeroes that copy's: with one copy the breaker opens after exactly T
//! failed attempts in a row; with R, each copy counts its own run since its last 2xx and the
//! breaker opens when the runs summed over the copies reach T (the sum, one BatchGetItem, is
//! read only by a failure that brings its copy's run to its share, T / R rounded up, or past
//! it), so an endpoint that is down is paused after about T failures and, at high volume, one
//! failing more than about T / (T + R) of its attempts is paused; an endpoint's views show
//! the runs summed. The slow-lane marker and the adaptive rate, which are not versioned, are
//! written to the endpoint item and then to each copy (best effort: a copy that missed one
//! is moved by the next), a copy taking a write only over an earlier one by the endpoint
//! item's count of them (`slow_seq`, `rate_seq`), so no copy goes back to a marker the
//! endpoint item has moved past.

use super::attention::FAILING_ANNOUNCED;
use super::{DynamoStore, Item, StoreError, aws, n, s};
use crate::domain::model::Endpoint;
use crate::store::FailureCount;
use crate::store::keys::{PK, SK, endpoint_copy, endpoint_copy_pk, endpoint_key};
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    Delete, Put, ReturnValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use futures::StreamExt;
use std::collections::HashMap;

impl DynamoStore {
    /// Copies 1 to R - 1 (copy 0 is the endpoint item).
    fn copy_numbers(&self) -> std::ops::Range<u32> {
        1..self.copies
    }

    /// Puts (transaction items, no condition: the endpoint item's put in the same transaction
    /// decides) of copies 1.. of a new endpoint's `item` (with its `pk` and `sk`).
    pub(super) fn copy_puts(&self, item: &Item, tenant_id: &str) -> Result<Vec<TransactWriteItem>, StoreError> {
        self.copy_numbers()
            .map(|j| {
                let mut copy = item.clone();
                copy.insert(PK.into(), s(endpoint_copy_pk(tenant_id, j)));
                let put = Put::builder().table_name(&self.table).set_item(Some(copy)).build().map_err(aws)?;
                Ok(TransactWriteItem::builder().put(put).build())
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
                    .key(SK, s(endpoint_key(id)))
                    .build()
                    .map_err(aws)?;
                Ok(TransactWriteItem::builder().delete(delete).build())
            })
            .collect()
    }

    /// Updates (transaction items, no condition: the endpoint item's update in the same
    /// transaction holds the version guard) of an endpoint's copies 1.., each applying the
    /// endpoint item's `expression` with `names` and `values`.
    pub(super) fn copy_updates(
        &self,
        tenant_id: &str,
        id: &str,
        expression: &str,
        names: &HashMap<String, String>,
        values: &Item,
    ) -> Result<Vec<TransactWriteItem>, StoreError> {
        // The version guard's name and value belong to the endpoint item's condition.
        let mut names = names.clone();
        names.retain(|k, _| k != "#g_version");
        let mut values = values.clone();
        values.retain(|k, _| k != ":g_version");
        self.copy_numbers()
            .map(|j| {
                let update = Update::builder()
                    .table_name(&self.table)
                    .key(PK, s(endpoint_copy_pk(tenant_id, j)))
                    .key(SK, s(endpoint_key(id)))
                    .update_expression(expression)
                    .set_expression_attribute_names(Some(names.clone()))
                    .set_expression_attribute_values(Some(values.clone()))
                    .build()
                    .map_err(aws)?;
                Ok(TransactWriteItem::builder().update(update).build())
            })
            .collect()
    }

    /// The endpoint as an attempt keyed by `key` reads it: a strongly consistent GetItem of
    /// copy [`endpoint_copy`]`(key)` (copy 0: the endpoint item).
    pub(super) async fn read_copy(&self, tenant_id: &str, id: &str, key: &str) -> Result<Option<Endpoint>, StoreError> {
        self.get(endpoint_copy_pk(tenant_id, endpoint_copy(key, self.copies)), &endpoint_key(id)).await
    }

    /// A tenant's endpoints as an event keyed by `key` reads them: one strongly consistent
    /// Query (paged past 1 MB) of copy partition [`endpoint_copy`]`(key)` (copy 0: the
    /// tenant's own partition).
    pub(super) async fn tenant_copies(&self, tenant_id: &str, key: &str) -> Result<Vec<Endpoint>, StoreError> {
        let j = endpoint_copy(key, self.copies);
        self.query_all(self.endpoints_query(&endpoint_copy_pk(tenant_id, j)).consistent_read(true)).await
    }

    /// See [`crate::store::CounterStore::count_failure`]: ADD 1 on the copy the attempt read. With one
    /// copy the breaker opens at the threshold; with R, once this copy's count reaches its
    /// share (threshold / R, rounded up) the counts of the R copies are read (one
    /// BatchGetItem) and summed, and the breaker opens when the sum reaches the threshold.
    pub(super) async fn count_copy_failure(
        &self,
        tenant_id: &str,
        id: &str,
        key: &str,
        attempt: u32,
        threshold: u32,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<FailureCount>, StoreError> {
        let j = endpoint_copy(key, self.copies);
        let mark = format!("{key}#{attempt}");
        let Some((own, announced)) = self.copy_failures_add(tenant_id, id, j, &mark, at).await? else {
            return Ok(None);
        };
        if self.copies <= 1 {
            return Ok(Some(FailureCount::single_announced(own, threshold, announced)));
        }
        // The sum is read once this copy holds its share of the lower of the two marks (the
        // failing announcement's, the breaker's).
        let share = |of: u32| of.div_ceil(self.copies);
        let announce_at = crate::domain::operational::failing_at(threshold);
        if threshold == 0 || announce_at.is_none_or(|a| own < share(a)) {
            return Ok(Some(FailureCount { in_a_row: own, total: own, ..FailureCount::default() }));
        }
        let (sum, announced) = self.failures_summed_announced(tenant_id, id).await?;
        let sum = sum.max(own);
        Ok(Some(FailureCount {
            in_a_row: own,
            opens_breaker: own >= share(threshold) && sum >= threshold,
            announce_failing: announce_at.is_some_and(|a| sum >= a) && !announced,
            total: sum,
        }))
    }

    /// [`Self::failures_summed`], and whether the endpoint item (copy 0) holds the
    /// announcement of its run (`failing_announced`): the same one BatchGetItem.
    async fn failures_summed_announced(&self, tenant_id: &str, id: &str) -> Result<(u32, bool), StoreError> {
        let keys: Vec<Item> = (0..self.copies)
            .map(|j| {
                Item::from([(PK.to_string(), s(endpoint_copy_pk(tenant_id, j))), (SK.to_string(), s(endpoint_key(id)))])
            })
            .collect();
        let projection = format!("pk, consecutive_failures, {FAILING_ANNOUNCED}");
        let found = self.batch_get(&keys, Some((&projection, &[])), true).await?;
        let sum = found.iter().filter_map(failures_of).fold(0u32, u32::saturating_add);
        let main = s(endpoint_copy_pk(tenant_id, 0));
        let announced = found.iter().any(|i| i.get(PK) == Some(&main) && i.contains_key(FAILING_ANNOUNCED));
        Ok((sum, announced))
    }

    /// ADD 1 to copy `j`'s counter, marked with `mark` (`{key}#{attempt}`, see
    /// [`crate::store::CounterStore::count_failure`]): a write that finds its own mark already there
    /// (its first try applied, the answer was lost) adds nothing and returns the count as it
    /// stands. `None` when the endpoint is gone. The run's first failure (`at`) marks the copy
    /// failing (see `attention`).
    async fn copy_failures_add(
        &self,
        tenant_id: &str,
        id: &str,
        j: u32,
        mark: &str,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<(u32, bool)>, StoreError> {
        let (failing, failing_values) = super::attention::failing_mark(id, at);
        let result = self
            .copy_update(tenant_id, id, j)
            .update_expression(format!("SET last_failure = :mark, {failing} ADD consecutive_failures :one"))
            .set_expression_attribute_values(Some(failing_values))
            .condition_expression(
                "attribute_exists(pk) AND (attribute_not_exists(last_failure) OR last_failure <> :mark)",
            )
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":mark", s(mark))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        // The count, and whether the item holds its run's announcement (the endpoint item's).
        let of = |item: &Item| (failures_of(item).unwrap_or(0), item.contains_key(FAILING_ANNOUNCED));
        match result {
            Ok(out) => Ok(out.attributes.as_ref().filter(|a| failures_of(a).is_some()).map(of)),
            Err(e) => match e.as_service_error() {
                // Our own mark: this failure was counted by the try whose answer was lost.
                // No item: the endpoint is gone.
                Some(UpdateItemError::ConditionalCheckFailedException(failed)) => Ok(failed.item.as_ref().map(of)),
                _ => Err(aws(e)),
            },
        }
    }

    /// See [`crate::store::CounterStore::reset_failures`]: zeroes the counter of the copy an attempt
    /// keyed by `key` read (nothing when the endpoint is gone).
    pub(super) async fn reset_copy_failures(&self, tenant_id: &str, id: &str, key: &str) -> Result<(), StoreError> {
        let j = endpoint_copy(key, self.copies);
        self.reset_marked(tenant_id, id, j).await?;
        if j != 0 {
            // A 2xx on any copy ends the run its announcement told of (the endpoint item's
            // reset removes the mark in its own write): one more UpdateItem, only when a run
            // ends on another copy, and only the mark's write when there is one.
            let clear = self
                .copy_update(tenant_id, id, 0)
                .update_expression(format!("REMOVE {FAILING_ANNOUNCED}"))
                .condition_expression(format!("attribute_exists({FAILING_ANNOUNCED})"))
                .send()
                .await;
            super::conditional(clear)?;
        }
        Ok(())
    }

    /// The failures-in-a-row counts of an endpoint's R copies summed (one strongly consistent
    /// BatchGetItem of R items).
    pub(super) async fn failures_summed(&self, tenant_id: &str, id: &str) -> Result<u32, StoreError> {
        let keys: Vec<Item> = (0..self.copies)
            .map(|j| {
                Item::from([(PK.to_string(), s(endpoint_copy_pk(tenant_id, j))), (SK.to_string(), s(endpoint_key(id)))])
            })
            .collect();
        let found = self.batch_get(&keys, Some(("consecutive_failures", &[])), true).await?;
        Ok(found.iter().filter_map(failures_of).fold(0u32, u32::saturating_add))
    }

    /// The failures-in-a-row counts of a page of one tenant's endpoints (`endpoints`, as a
    /// listing read them, strongly consistent, from the endpoint items: copy 0; one of another
    /// tenant keeps its own count), each summed with its counts on copies 1..: one strongly
    /// consistent Query per copy over the page's sort key range (the copy partitions hold the
    /// same `ENDPOINT#{id}` keys), projecting the key and the count, in flight together. A read
    /// unit per 4 KB of matched items, not one per item as a BatchGetItem of every (endpoint,
    /// copy) would be. Returns the sums in `endpoints`' order.
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
        let queries = self.copy_numbers().map(|j| {
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
            let sk = item.get(SK).and_then(|v| v.as_s().ok());
            if let (Some(sum), Some(count)) = (sk.and_then(|sk| sums.get_mut(sk)), failures_of(&item)) {
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
    /// write, and one that is missing (the endpoint is gone) is left alone.
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
    pub(super) fn copy_update(
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

/// An endpoint item's (or copy's) failures-in-a-row count, when it has one.
fn failures_of(item: &Item) -> Option<u32> {
    item.get("consecutive_failures").and_then(|v| v.as_n().ok()).and_then(|v| v.parse().ok())
}
