//! A tenant's settings item (with a copy beside each endpoint copy), an event's expunge, and
//! the purge's deletes guarded by the job's lease ([`LifecycleStore`]).

use super::*;
use crate::domain::ids::{DeliveryId, EndpointId, EventId, JobId, TenantId};
use crate::domain::tenant::TenantSettings;
use crate::store::lifecycle::{DeletedEndpoint, EventRecord, LifecycleStore, Purgeable, ScanPage, TenantSnapshot};
use aws_sdk_dynamodb::types::Delete;
use chrono::{DateTime, Utc};

/// The event item's attribute marking its payload expunged (RFC 3339).
const EXPUNGED_AT: &str = "expunged_at";

/// Deletes in one purge transaction, beside its ConditionCheck on the job (DynamoDB's limit is
/// 100 items a transaction).
const PURGE_BATCH: usize = 99;

impl DynamoStore {
    /// The table keys a purge of `item` deletes.
    fn purge_keys(&self, item: &Purgeable) -> Vec<(String, String)> {
        match item {
            Purgeable::Delivery(id) => vec![(delivery_pk(id), DELIVERY_SK.to_string())],
            Purgeable::Event(tenant, event) => vec![event_key(tenant, event)],
            Purgeable::Endpoint(tenant, id) => {
                let mut keys = vec![(endpoint_key(id), ENDPOINT_POINTER_SK.to_string())];
                keys.extend((0..self.copies).map(|j| (endpoint_copy_pk(tenant, j), endpoint_key(id))));
                keys
            }
            Purgeable::Item(pk, sk) => vec![(pk.clone(), sk.clone())],
            Purgeable::Tombstone(tenant, id) => vec![(tenant_pk(tenant), deleted_endpoint_sk(id))],
            Purgeable::Settings(tenant) => {
                (0..self.copies).map(|j| (endpoint_copy_pk(tenant, j), SETTINGS_SK.to_string())).collect()
            }
        }
    }
}

#[async_trait]
impl LifecycleStore for DynamoStore {
    async fn tenant_snapshot(&self, tenant_id: &TenantId, key: &str) -> Result<TenantSnapshot, StoreError> {
        let pk = endpoint_copy_pk(tenant_id, endpoint_copy(key, self.copies));
        let query = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND sk BETWEEN :ep AND :settings")
            .expression_attribute_values(":pk", s(pk))
            .expression_attribute_values(":ep", s("ENDPOINT#"))
            .expression_attribute_values(":settings", s(SETTINGS_SK))
            .consistent_read(true);
        let mut out = TenantSnapshot::default();
        for item in self.query_items(query).await? {
            match item.get(SK).and_then(|v| v.as_s().ok()).map(String::as_str) {
                Some(SETTINGS_SK) => out.settings = Some(from_item(item)?),
                Some(sk) if sk.starts_with("ENDPOINT#") => out.endpoints.push(from_item(item)?),
                _ => {}
            }
        }
        Ok(out)
    }

    async fn get_settings(&self, tenant_id: &TenantId) -> Result<Option<TenantSettings>, StoreError> {
        self.get(tenant_pk(tenant_id), SETTINGS_SK).await
    }

    async fn save_settings(
        &self,
        settings: &TenantSettings,
        expected_version: u64,
        job: Option<&Job>,
    ) -> Result<bool, StoreError> {
        let item = to_item(settings)?;
        let mut items = Vec::new();
        for j in 0..self.copies {
            let mut copy = item.clone();
            copy.insert(PK.into(), s(endpoint_copy_pk(&settings.tenant_id, j)));
            copy.insert(SK.into(), s(SETTINGS_SK));
            let mut put = Put::builder().table_name(&self.table).set_item(Some(copy));
            // The item itself holds the guard; its copies follow it in the same transaction.
            if j == 0 {
                put = if expected_version == 0 {
                    put.condition_expression("attribute_not_exists(pk)")
                } else {
                    put.condition_expression("#v = :v")
                        .expression_attribute_names("#v", "version")
                        .expression_attribute_values(":v", n(expected_version))
                };
            }
            items.push(TransactWriteItem::builder().put(put.build().map_err(aws)?).build());
        }
        if let Some(job) = job {
            items.push(self.job_put(job)?);
        }
        self.transact_guarded(items, 1).await
    }

    async fn event_record(&self, tenant_id: &TenantId, event_id: &EventId) -> Result<Option<EventRecord>, StoreError> {
        let (pk, sk) = event_key(tenant_id, event_id);
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(PK, s(pk))
            .key(SK, s(sk))
            .projection_expression("#t, #e, #ttl, #x")
            .expression_attribute_names("#t", "tenant_id")
            .expression_attribute_names("#e", "event_id")
            .expression_attribute_names("#ttl", TTL)
            .expression_attribute_names("#x", EXPUNGED_AT)
            .consistent_read(true)
            .send()
            .await
            .map_err(aws)?;
        out.item.map(from_item).transpose()
    }

    async fn expunge_payload(
        &self,
        tenant_id: &TenantId,
        event_id: &EventId,
        delivery_ids: &[DeliveryId],
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        for id in delivery_ids {
            let result = self
                .client
                .update_item()
                .table_name(&self.table)
                .key(PK, s(delivery_pk(id)))
                .key(SK, s(DELIVERY_SK))
                .update_expression("SET payload_sha256 = :x")
                .condition_expression("attribute_exists(pk)")
                .expression_attribute_values(":x", s(crate::store::lifecycle::EXPUNGED_DIGEST))
                .send()
                .await;
            // A delivery gone (retention) needs nothing.
            conditional(result)?;
        }
        let (pk, sk) = event_key(tenant_id, event_id);
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(PK, s(pk))
            .key(SK, s(sk))
            .update_expression("REMOVE #z, #fp SET #x = if_not_exists(#x, :at)")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_names("#z", payload::PAYLOAD_Z)
            .expression_attribute_names("#fp", REQUEST_SHA256)
            .expression_attribute_names("#x", EXPUNGED_AT)
            .expression_attribute_values(":at", time(&at))
            .send()
            .await;
        conditional(result)
    }

    async fn endpoint_counters(
        &self,
        endpoint_id: &EndpointId,
        rate_limit_per_second: Option<u32>,
        limit: usize,
    ) -> Result<Vec<Purgeable>, StoreError> {
        let mut partitions = stats_partitions(endpoint_id, self.endpoint_shards);
        partitions.push(rate_pk(endpoint_id));
        let slots = u64::from(rate_limit_per_second.unwrap_or(0));
        let counters = slots.div_ceil(crate::domain::rate::SLOTS_PER_COUNTER);
        if counters > 1 {
            partitions.extend((0..counters).map(|k| rate_pk(&format!("{endpoint_id}#{k}"))));
        }
        let mut out = Vec::new();
        for pk in partitions {
            if out.len() >= limit {
                break;
            }
            let left = i32::try_from(limit - out.len()).unwrap_or(i32::MAX);
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk")
                .expression_attribute_values(":pk", s(&pk))
                .projection_expression("pk, sk")
                .limit(left)
                .send()
                .await
                .map_err(aws)?;
            out.extend(page.items.unwrap_or_default().iter().map(|item| {
                let (pk, sk) = table_key(item);
                Purgeable::Item(pk, sk)
            }));
        }
        Ok(out)
    }

    async fn deleted_endpoints(&self, tenant_id: &TenantId) -> Result<Vec<DeletedEndpoint>, StoreError> {
        let query = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND begins_with(sk, :deleted)")
            .expression_attribute_values(":pk", s(tenant_pk(tenant_id)))
            .expression_attribute_values(":deleted", s(DELETED_ENDPOINT_PREFIX))
            .consistent_read(true);
        self.query_all(query).await
    }

    async fn scan_tenant(
        &self,
        tenant_id: &TenantId,
        cursor: Option<&str>,
        pages: usize,
    ) -> Result<ScanPage, StoreError> {
        let mut start = cursor.map(decode_cursor).transpose()?;
        let mut out = ScanPage::default();
        for _ in 0..pages.max(1) {
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression("tenant_id = :t AND NOT begins_with(pk, :job) AND sk <> :settings")
                .expression_attribute_values(":t", s(tenant_id))
                .expression_attribute_values(":job", s("JOB#"))
                .expression_attribute_values(":settings", s(SETTINGS_SK))
                .projection_expression("pk, sk")
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(aws)?;
            out.items.extend(page.items.unwrap_or_default().iter().map(|item| {
                let (pk, sk) = table_key(item);
                Purgeable::Item(pk, sk)
            }));
            match page.last_evaluated_key.filter(|k| !k.is_empty()) {
                Some(key) => start = Some(key),
                None => return Ok(out),
            }
        }
        out.next = start.map(encode_cursor).transpose()?;
        Ok(out)
    }

    async fn purge(&self, job_id: &JobId, lease_due_at: i64, items: &[Purgeable]) -> Result<bool, StoreError> {
        let mut keys: Vec<(String, String)> = items.iter().flat_map(|i| self.purge_keys(i)).collect();
        // One transaction may not name an item twice.
        keys.sort();
        keys.dedup();
        for chunk in keys.chunks(PURGE_BATCH) {
            let check = ConditionCheck::builder()
                .table_name(&self.table)
                .key(PK, s(job_pk(job_id)))
                .key(SK, s(JOB_SK))
                .condition_expression("#at = :lease")
                .expression_attribute_names("#at", DUE_AT)
                .expression_attribute_values(":lease", n(lease_due_at))
                .build()
                .map_err(aws)?;
            let mut batch = vec![TransactWriteItem::builder().condition_check(check).build()];
            for (pk, sk) in chunk {
                let delete =
                    Delete::builder().table_name(&self.table).key(PK, s(pk)).key(SK, s(sk)).build().map_err(aws)?;
                batch.push(TransactWriteItem::builder().delete(delete).build());
            }
            if !self.transact_guarded(batch, 1).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}
