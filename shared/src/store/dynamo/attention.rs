//! Endpoints that need attention, across tenants: marks on the endpoint items themselves,
//! listed through the `by_status` index (the dashboard's landing page,
//! `GET /v1/endpoints?attention=`).
//!
//! | mark | on | `status_key` | `status_sk` | set by | removed by |
//! |---|---|---|---|---|---|
//! | stopped | the endpoint item (copy 0) | `attention#stopped` | `{disabled.at}#{id}` | every change that leaves it paused, probing or disabled | the change that enables it (enable, a probe's 2xx); its deletion |
//! | failing | the endpoint item or copy whose failures-in-a-row counter counts the run | `attention#failing` | `{first failure}#{id}` | the failure that starts the run (the counter's ADD) | the reset that ends it (the first 2xx after it), an enable; its deletion |
//!
//! Each mark is two attributes on an item the change already writes, in the same request
//! (the stopped mark in the endpoint change's guarded TransactWriteItems, the failing mark in
//! the counter's UpdateItem), so it holds exactly when its state does and costs no request of
//! its own. What it costs is `by_status` index writes (a write unit each: the entry is the
//! endpoint's id, tenant and times, well under 1 KB):
//! - a stop (disable, pause) or an enable: 1 index write (put, or delete), plus 1 per copy
//!   that held a failing mark (removed: a stopped endpoint shows as stopped);
//! - any other change of a stopped endpoint (PATCH, rotation, probe out and back): 1 (the
//!   entry carries `updated_at`);
//! - a run of failures: 1 at its first failure and 1 at the 2xx that ends it (per copy
//!   counting a run); the failures in between change no indexed attribute and write nothing;
//! - nothing on the delivery hot path: an attempt that succeeds on an endpoint with no
//!   failures in a row writes no counter, as before, and ingest writes nothing more.
//!
//! The marks' partitions are not split (`WEBHOOKS_STATUS_INDEX_SHARDS` splits the delivery
//! statuses only): they take a write per state change or failing run, far below one
//! partition's 1,000 write units a second.
//!
//! A reset that finds the stopped mark on the item (a 2xx of an attempt in flight when the
//! endpoint stopped) zeroes the counter and keeps the mark: a second UpdateItem, in that case
//! only.

use super::{DynamoStore, Item, StoreError, aws, decode_cursor, encode_cursor, n, s};
use crate::domain::endpoint_lifecycle::Change;
use crate::domain::model::EndpointState;
use crate::store::keys::{ATTENTION_FAILING, ATTENTION_STOPPED, STATUS_INDEX, STATUS_KEY, STATUS_SK, time_sk};
use crate::store::{Attention, AttentionMark, Page};
use aws_sdk_dynamodb::types::AttributeValue;

/// The endpoint item's (copy 0's) mark that its run of failures was announced
/// (`endpoint.failing`): the notify job's id, set with the job by
/// [`crate::store::CounterStore::announce_failing`], removed with the counter by the reset
/// that ends the item's run and by an enable. Not indexed.
pub const FAILING_ANNOUNCED: &str = "failing_announced";

/// What an endpoint change writes of the marks: `set` and `remove` on the endpoint item (with
/// `values`), `copy_remove` on its copies.
#[derive(Debug, Default)]
pub(super) struct Marks {
    pub set: Vec<String>,
    pub remove: Vec<String>,
    pub values: Item,
    pub copy_remove: Vec<String>,
}

/// The mark attributes, as an update expression's REMOVE list.
fn both() -> Vec<String> {
    vec![STATUS_KEY.to_string(), STATUS_SK.to_string()]
}

/// The `by_status` partition of `why`.
pub(super) fn partition(why: Attention) -> &'static str {
    match why {
        Attention::Stopped => ATTENTION_STOPPED,
        Attention::Failing => ATTENTION_FAILING,
    }
}

impl Marks {
    /// The marks `change` writes: stopped (paused, probing, disabled) sets the stopped mark
    /// on the endpoint item, since it stopped, and removes the copies' failing marks; an enable
    /// (a change that resets the failures) removes every mark; any other change of an enabled
    /// endpoint (PATCH, rotation) leaves them as they are.
    pub(super) fn of(change: &Change) -> Self {
        let ep = &change.endpoint;
        if ep.state() != EndpointState::Enabled {
            let since = ep.disabled.as_ref().map_or(ep.updated_at, |d| d.at);
            Self {
                set: vec![format!("{STATUS_KEY} = :att_key"), format!("{STATUS_SK} = :att_sk")],
                remove: Vec::new(),
                values: Item::from([
                    (":att_key".to_string(), s(ATTENTION_STOPPED)),
                    (":att_sk".to_string(), s(time_sk(since, &ep.id))),
                ]),
                copy_remove: both(),
            }
        } else if change.reset_failures {
            let mut remove = both();
            remove.push(FAILING_ANNOUNCED.to_string());
            Self { remove, copy_remove: both(), ..Self::default() }
        } else {
            Self::default()
        }
    }
}

/// The failing mark a counter's ADD sets when the item has none (the run's first failure at
/// `at`): the update expression's SET clauses and their values.
pub(super) fn failing_mark(id: &str, at: chrono::DateTime<chrono::Utc>) -> (String, Item) {
    (
        format!(
            "{STATUS_KEY} = if_not_exists({STATUS_KEY}, :att_key), {STATUS_SK} = if_not_exists({STATUS_SK}, :att_sk)"
        ),
        Item::from([(":att_key".to_string(), s(ATTENTION_FAILING)), (":att_sk".to_string(), s(time_sk(at, id)))]),
    )
}

impl DynamoStore {
    /// See [`crate::store::EndpointStore::attention_endpoints`]: one Query of the mark's `by_status`
    /// partition, newest first.
    pub(super) async fn attention_page(
        &self,
        why: Attention,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<Page<AttentionMark>, StoreError> {
        let key = partition(why);
        let start = cursor.map(decode_cursor).transpose()?;
        // A cursor of another listing (another partition) is refused, not read.
        if start
            .as_ref()
            .is_some_and(|k| k.get(STATUS_KEY).and_then(|v| v.as_s().ok()).map(String::as_str) != Some(key))
        {
            return Err(StoreError::InvalidCursor);
        }
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(STATUS_INDEX)
            .key_condition_expression("status_key = :k")
            .expression_attribute_values(":k", s(key))
            .scan_index_forward(false)
            .limit(i32::try_from(limit.clamp(1, 100)).unwrap_or(100))
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(aws)?;
        let data = out.items.unwrap_or_default().iter().map(mark_of).collect::<Result<Vec<_>, _>>()?;
        let next_cursor = match out.last_evaluated_key {
            Some(k) if !k.is_empty() => Some(encode_cursor(k)?),
            _ => None,
        };
        Ok(Page { data, next_cursor })
    }

    /// See [`crate::store::CounterStore::reset_failures`]: zeroes copy `j`'s counter and removes its
    /// failing mark, unless the item carries the stopped mark, which stays (then a second
    /// UpdateItem zeroes the counter alone). Nothing when the endpoint is gone.
    pub(super) async fn reset_marked(&self, tenant_id: &str, id: &str, j: u32) -> Result<(), StoreError> {
        // The endpoint item's reset ends the run its announcement (if any) told of.
        let announced = if j == 0 { format!(", {FAILING_ANNOUNCED}") } else { String::new() };
        let reset = self
            .copy_update(tenant_id, id, j)
            .update_expression(format!("SET consecutive_failures = :zero REMOVE {STATUS_KEY}, {STATUS_SK}{announced}"))
            .condition_expression(format!(
                "attribute_exists(pk) AND (attribute_not_exists({STATUS_KEY}) OR {STATUS_KEY} = :failing)"
            ))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":failing", s(ATTENTION_FAILING))
            .send()
            .await;
        if super::conditional(reset)? {
            return Ok(());
        }
        let plain_reset = if j == 0 {
            format!("SET consecutive_failures = :zero REMOVE {FAILING_ANNOUNCED}")
        } else {
            "SET consecutive_failures = :zero".to_string()
        };
        let plain = self
            .copy_update(tenant_id, id, j)
            .update_expression(plain_reset)
            .expression_attribute_values(":zero", n(0))
            .send()
            .await;
        super::conditional(plain)?;
        Ok(())
    }
}

/// A `by_status` entry of a mark: the endpoint's `id` and `tenant_id` (projected) and the
/// time that begins `status_sk`.
fn mark_of(item: &Item) -> Result<AttentionMark, StoreError> {
    let text = |k: &str| item.get(k).and_then(|v: &AttributeValue| v.as_s().ok()).cloned();
    let corrupt = || StoreError::Corrupt(format!("attention entry {:?}", text(STATUS_SK)));
    let sk = text(STATUS_SK).ok_or_else(corrupt)?;
    let since = sk
        .split_once('#')
        .and_then(|(t, _)| chrono::DateTime::parse_from_rfc3339(t).ok())
        .ok_or_else(corrupt)?
        .with_timezone(&chrono::Utc);
    Ok(AttentionMark {
        tenant_id: text("tenant_id").and_then(|t| t.try_into().ok()).ok_or_else(corrupt)?,
        endpoint_id: text("id").and_then(|t| t.try_into().ok()).ok_or_else(corrupt)?,
        since,
    })
}
