//! The DynamoDB implementation of [`crate::store::Store`], one file per aggregate: this one
//! holds the [`DynamoStore`] and what every file shares (item conversion, conditional writes,
//! cursors, the SDK's retry for records); `endpoints`, `copies` (the endpoint item's copies),
//! `counters` (failures in a row, daily delivered counts, slow-lane marker, adaptive rate,
//! rate windows), `events`, `event_types` (the event-type catalog), `api_keys` (producers' API keys), `deliveries`, `listing` (delivery pages and counts) and `jobs`
//! each implement one trait of [`crate::store`]. The items and keys are in `docs/storage.md`.

use super::keys::*;
use super::payload;
use super::{
    Applied, Committed, Counted, CounterStore, DeliveryQuery, DeliveryStore, DeliverySummary, Due, EndpointStore,
    EndpointWrite, EventStore, Inserted, JobStore, Page, StoreError,
};

use crate::domain::delivery_lifecycle::{DueItem, Field, Transition};
use crate::domain::endpoint_lifecycle::Change;
use crate::domain::model::{Delivery, DeliveryStatus, Endpoint, Job, StoredEvent};
use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, Put, ReturnValue, TransactWriteItem};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use deliveries::{records_attempt, retry_for_record, updated_attribute};
use futures::StreamExt;
use listing::prefixed_id;
use std::collections::HashMap;

mod api_keys;
mod attention;
mod copies;
mod counters;
mod deliveries;
mod endpoints;
mod event_types;
mod events;
mod jobs;
mod lifecycle;
mod listing;

pub use counters::{RATE_SEQ, RATE_WINDOW_TTL_SECONDS, SLOW_SEQ, rate_pk, rate_sk};

/// A DynamoDB item or key: attribute name to value.
pub type Item = HashMap<String, AttributeValue>;

/// [`crate::store::Store`] on one DynamoDB table (see the module docs of [`super`] for the layout).
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
    /// [`DeliveryStore::count_deliveries_in`]), each at least 1: the tests reach a cap with a small
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

    /// A page of partition `pk`'s items by sort key (strongly consistent), up to `limit` (1 to
    /// 100), after `cursor`; the items as stored and the next page's cursor. A cursor is taken
    /// only when it is a key of this partition whose sort key the API could have stored (the
    /// id rule): it never takes DynamoDB a key it refuses (an oversized one).
    ///
    /// # Errors
    /// [`StoreError::InvalidCursor`] for any other cursor.
    async fn page_of_partition(
        &self,
        pk: &str,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<(Vec<Item>, Option<String>), StoreError> {
        let start = match cursor {
            None => None,
            Some(c) => {
                let key = decode_cursor(c)?;
                let text = |k: &str| key.get(k).and_then(|v| v.as_s().ok());
                let pk_ok = text(PK).is_some_and(|p| p == pk);
                let sk_ok = text(SK).is_some_and(|sk| crate::domain::ids::is_client_id(sk));
                if !pk_ok || !sk_ok || key.len() != 2 {
                    return Err(StoreError::InvalidCursor);
                }
                Some(key)
            }
        };
        let page = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", s(pk))
            .consistent_read(true)
            .limit(i32::try_from(limit.clamp(1, 100)).unwrap_or(100))
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(aws)?;
        let next_cursor = page.last_evaluated_key.filter(|k| !k.is_empty()).map(encode_cursor).transpose()?;
        Ok((page.items.unwrap_or_default(), next_cursor))
    }

    /// Every item a Query matches, following `LastEvaluatedKey` page by page.
    async fn query_all<T: serde::de::DeserializeOwned>(
        &self,
        query: aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder,
    ) -> Result<Vec<T>, StoreError> {
        self.query_items(query).await?.into_iter().map(from_item).collect()
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
}

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

impl DynamoStore {
    /// Runs one TransactWriteItems: Ok(true) when it applied, Ok(false) when a condition of
    /// one of its first `guarded` items failed (an answer, not an error); any other
    /// cancellation or failure is an error.
    async fn transact_guarded(&self, items: Vec<TransactWriteItem>, guarded: usize) -> Result<bool, StoreError> {
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
        match self.client.transact_write_items().set_transact_items(Some(items)).send().await {
            Ok(_) => Ok(true),
            Err(e) => match e.as_service_error() {
                Some(TransactWriteItemsError::TransactionCanceledException(c))
                    if c.cancellation_reasons()
                        .iter()
                        .take(guarded)
                        .any(|r| r.code() == Some("ConditionalCheckFailed")) =>
                {
                    Ok(false)
                }
                _ => Err(aws(e)),
            },
        }
    }
}

/// An item's table key (`pk`, `sk`) as strings (empty when missing).
fn table_key(item: &Item) -> (String, String) {
    let text = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
    (text(PK), text(SK))
}

/// An item's table key as one string (`{pk}\n{sk}`).
fn key_text(item: &Item) -> String {
    let (pk, sk) = table_key(item);
    format!("{pk}\n{sk}")
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

/// Tries of a write that records an attempt already made (the receiver has seen it): 10, with
/// exponential backoff from 200 ms up to 2 s (about 7 s in all, jittered), where the SDK's
/// default is 3 tries in about 2 s. A throttled table then does not make deliver give up a
/// 2xx's record, the sweeper later reporting it as `lease_expired` and sending the event
/// again (issue #35 input 2): the record's guard keeps it right however late it lands (it
/// applies while the delivery is still this claim's, and loses once the sweeper moved it
/// on). Every other write keeps the SDK's default.
pub const RECORD_MAX_ATTEMPTS: u32 = 10;

fn time(t: &chrono::DateTime<chrono::Utc>) -> AttributeValue {
    s(t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
}

/// Entries of one `by_endpoint` key range a count reads at most, per partition: one Select
/// COUNT request (see [`DeliveryStore::count_deliveries_in`]). A count that stops there is flagged
/// not exact.
pub const COUNT_CAP: i32 = 5_000;

/// Items of one partition's `open` range the stats read to split it into scheduled and
/// sending (see [`DeliveryStore::count_deliveries_in`]): at most 50 read units a partition.
pub const SPLIT_CAP: i32 = 100;
