//! The DynamoDB side of [`crate::domain::lane`] and [`crate::domain::rate`]: the slow-lane marker and
//! the adaptive rate on the endpoint item (plain UpdateItems beside the versioned
//! configuration, see [`crate::domain::model::UNVERSIONED_ENDPOINT_ATTRIBUTES`]; each also adds one to
//! its sequence number, [`SLOW_SEQ`] or [`RATE_SEQ`], which orders its mirrors to the
//! endpoint's copies), and the per-second rate counter items.
//!
//! | item | `pk` | `sk` | attributes |
//! |---|---|---|---|
//! | rate window | `RATE#{endpoint_id}` | `S#{unix second}` | `n` (attempt starts counted), `expires_at` (TTL: the second + [`RATE_WINDOW_TTL_SECONDS`]) |

use super::*;
use crate::domain::ids::{DeliveryId, EndpointId, TenantId};
use crate::store::keys::{PK, SK, TTL};
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use chrono::{DateTime, Utc};

/// The endpoint item's count of slow-lane marker writes (a number, added to by each), which
/// orders the marker's mirrors to the copies (see `DynamoStore::write_slow_until`).
pub const SLOW_SEQ: &str = "slow_seq";

/// The endpoint item's count of adaptive rate writes (a number, added to by each), which
/// orders the rate's mirrors to the copies (see `DynamoStore::write_effective_rate`).
pub const RATE_SEQ: &str = "rate_seq";

/// How long a rate window's counter item is kept after its second, seconds (DynamoDB TTL
/// removes it; only the current second's item is ever read).
pub const RATE_WINDOW_TTL_SECONDS: i64 = 120;

/// The partition key of an endpoint's rate counter items.
pub fn rate_pk(endpoint_id: &str) -> String {
    format!("RATE#{endpoint_id}")
}

/// The sort key of the counter item of one second (unix seconds).
pub fn rate_sk(second: i64) -> String {
    format!("S#{second}")
}

impl DynamoStore {
    /// Sets (or, with `None`, removes) the endpoint item's slow-lane marker, ordered by
    /// [`SLOW_SEQ`] (see [`DynamoStore::write_marker`]): two writers of the marker at once
    /// (one deliver marking the endpoint slow while another clears it) leave every copy with
    /// what the endpoint item was left with, whichever mirror lands last.
    pub(super) async fn write_slow_until(
        &self,
        tenant_id: &str,
        id: &str,
        until: Option<DateTime<Utc>>,
    ) -> Result<(), StoreError> {
        let (marker, values) = match until {
            Some(t) => (
                "SET slow_until = :t",
                super::Item::from([(
                    ":t".to_string(),
                    AttributeValue::S(t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)),
                )]),
            ),
            None => ("REMOVE slow_until", super::Item::new()),
        };
        self.write_marker(tenant_id, id, marker, values, None, SLOW_SEQ).await?;
        Ok(())
    }

    /// Applies `marker` (an update expression: a SET or a REMOVE clause, with `values`) to the
    /// endpoint item on `condition` (with its values; `None`: that the item exists), adding
    /// one to its sequence number `seq` ([`SLOW_SEQ`], [`RATE_SEQ`]); then mirrors `marker`
    /// and the new number to the copies, each taking it only over an earlier number, so the
    /// copies follow the endpoint item's order, not the writers' (readers of every copy act on
    /// the marker, see [`super::copies`]). Whether the endpoint item took it.
    async fn write_marker(
        &self,
        tenant_id: &str,
        id: &str,
        marker: &str,
        mut values: super::Item,
        condition: Option<(&str, super::Item)>,
        seq: &str,
    ) -> Result<bool, StoreError> {
        let mut item_values = values.clone();
        item_values.insert(":one".into(), n(1));
        let mut update = self.endpoint_update(tenant_id, id).update_expression(format!("{marker} ADD {seq} :one"));
        if let Some((condition, extra)) = condition {
            item_values.extend(extra);
            update = update.condition_expression(condition);
        }
        let Some(number) =
            super::updated_attribute(update.set_expression_attribute_values(Some(item_values)), seq).await?
        else {
            return Ok(false);
        };
        values.insert(":seq".into(), number);
        let mirror = match marker.strip_prefix("SET ") {
            Some(rest) => format!("SET {seq} = :seq, {rest}"),
            None => format!("{marker} SET {seq} = :seq"),
        };
        let later = format!("attribute_not_exists({seq}) OR {seq} < :seq");
        self.mirror_marker(tenant_id, id, &mirror, &values, Some(&later)).await;
        Ok(true)
    }

    pub(super) async fn add_rate_slot(&self, endpoint_id: &str, second: i64) -> Result<u64, StoreError> {
        let out = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(PK, s(rate_pk(endpoint_id)))
            .key(SK, s(rate_sk(second)))
            .update_expression("ADD #n :one SET #ttl = if_not_exists(#ttl, :ttl)")
            .expression_attribute_names("#n", "n")
            .expression_attribute_names("#ttl", TTL)
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":ttl", n(second + RATE_WINDOW_TTL_SECONDS))
            .return_values(ReturnValue::UpdatedNew)
            .send()
            .await
            .map_err(aws)?;
        out.attributes
            .as_ref()
            .and_then(|a| a.get("n"))
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| StoreError::Corrupt("rate counter without n".into()))
    }

    pub(super) async fn write_effective_rate(
        &self,
        tenant_id: &str,
        id: &str,
        expected_ms: Option<i64>,
        rate: f64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let values = super::Item::from([(":r".to_string(), n(rate)), (":now".to_string(), n(now_ms))]);
        let condition = match expected_ms {
            Some(old) => (
                "attribute_exists(pk) AND rate_changed_at_ms = :old",
                super::Item::from([(":old".to_string(), n(old))]),
            ),
            None => ("attribute_exists(pk) AND attribute_not_exists(rate_changed_at_ms)", super::Item::new()),
        };
        let marker = "SET effective_rate_per_second = :r, rate_changed_at_ms = :now";
        self.write_marker(tenant_id, id, marker, values, Some(condition), RATE_SEQ).await
    }
}

#[async_trait]
impl CounterStore for DynamoStore {
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

    async fn announce_failing(&self, tenant_id: &TenantId, id: &EndpointId, notify: &Job) -> Result<bool, StoreError> {
        use super::attention::FAILING_ANNOUNCED;
        let mark = aws_sdk_dynamodb::types::Update::builder()
            .table_name(&self.table)
            .key(PK, s(tenant_pk(tenant_id)))
            .key(SK, s(endpoint_key(id)))
            .update_expression("SET #announced = :job")
            .condition_expression("attribute_exists(pk) AND attribute_not_exists(#announced)")
            .expression_attribute_names("#announced", FAILING_ANNOUNCED)
            .expression_attribute_values(":job", s(&notify.id))
            .build()
            .map_err(aws)?;
        let items = vec![TransactWriteItem::builder().update(mark).build(), self.job_put(notify)?];
        // Only the first item is guarded (the job is new).
        self.transact_guarded(items, 1).await
    }

    async fn count_failure(
        &self,
        tenant_id: &TenantId,
        id: &EndpointId,
        key: &str,
        attempt: u32,
        threshold: u32,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<crate::store::FailureCount>, StoreError> {
        self.count_copy_failure(tenant_id, id, key, attempt, threshold, at).await
    }

    async fn count_delivered(
        &self,
        endpoint_id: &EndpointId,
        delivery_ids: &[DeliveryId],
        at: chrono::DateTime<chrono::Utc>,
        expires_at: i64,
    ) -> Result<(), StoreError> {
        let Some(delivery_id) = delivery_ids.iter().min() else { return Ok(()) };
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(PK, s(stats_partition(endpoint_id, delivery_id, self.endpoint_shards)))
            .key(SK, s(stats_day_sk(at)))
            .update_expression("ADD delivered :one SET expires_at = :ttl, last_delivered_at = :at, last_counted = :id")
            .condition_expression("attribute_not_exists(last_counted) OR last_counted <> :id")
            .expression_attribute_values(":one", n(delivery_ids.len()))
            .expression_attribute_values(":ttl", n(expires_at))
            .expression_attribute_values(":at", time(&at))
            .expression_attribute_values(":id", s(delivery_id))
            .send()
            .await;
        // A failed condition: this set is the last one counted there (a retry of this same
        // write, whose first try applied).
        conditional(result)?;
        Ok(())
    }

    async fn delivered_tally(
        &self,
        endpoint_id: &EndpointId,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<crate::store::DeliveredTally, StoreError> {
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
        Ok(crate::store::DeliveredTally {
            delivered: days.iter().map(|d| d.delivered).sum(),
            last_delivered_at: days.iter().filter_map(|d| d.last_delivered_at).max(),
        })
    }

    async fn reset_failures(&self, tenant_id: &TenantId, id: &EndpointId, key: &str) -> Result<(), StoreError> {
        self.reset_copy_failures(tenant_id, id, key).await
    }

    async fn set_slow_until(
        &self,
        tenant_id: &TenantId,
        id: &EndpointId,
        until: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<(), StoreError> {
        self.write_slow_until(tenant_id, id, until).await
    }

    async fn take_rate_slot(&self, endpoint_id: &str, second: i64) -> Result<u64, StoreError> {
        self.add_rate_slot(endpoint_id, second).await
    }

    async fn set_effective_rate(
        &self,
        tenant_id: &TenantId,
        id: &EndpointId,
        expected_ms: Option<i64>,
        rate: f64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        self.write_effective_rate(tenant_id, id, expected_ms, rate, now_ms).await
    }
}
