//! Producers' API keys ([`ApiKeyStore`]): one item per key, `API_KEYS` / `{key id}`, with the
//! key's SHA-256 and never the key. `valid_until` is the key's own expiry; `expires_at`, the
//! table's TTL, is set [`KEPT_AFTER_END_DAYS`] after the key ends (expiry or revocation).

use super::*;
use crate::domain::api_key::{ApiKey, prefix_of};
use crate::store::ApiKeyStore;
use crate::store::api_keys::KEPT_AFTER_END_DAYS;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// An API key's item.
#[derive(Serialize, Deserialize)]
struct Row {
    id: String,
    #[serde(default)]
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tenant_ids: Option<Vec<String>>,
    secret_sha256: String,
    created_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    valid_until: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    revoked_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_used_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires_at: Option<i64>,
}

fn from_row(row: Row) -> ApiKey {
    ApiKey {
        prefix: prefix_of(&row.id),
        id: row.id,
        name: row.name,
        tenant_ids: row.tenant_ids,
        created_at: row.created_at,
        expires_at: row.valid_until,
        revoked_at: row.revoked_at,
        last_used_at: row.last_used_at,
        secret_sha256: row.secret_sha256,
    }
}

/// How many times [`ApiKeyStore::remove_api_key_tenant`] reads the key again after its
/// tenants changed under it.
const REMOVE_TRIES: usize = 5;

fn kept_until(end: DateTime<Utc>) -> i64 {
    end.timestamp() + KEPT_AFTER_END_DAYS * 86_400
}

#[async_trait]
impl ApiKeyStore for DynamoStore {
    async fn create_api_key(&self, key: &ApiKey) -> Result<(), StoreError> {
        let row = Row {
            id: key.id.clone(),
            name: key.name.clone(),
            tenant_ids: key.tenant_ids.clone(),
            secret_sha256: key.secret_sha256.clone(),
            created_at: key.created_at,
            valid_until: key.expires_at,
            revoked_at: key.revoked_at,
            last_used_at: key.last_used_at,
            expires_at: key.expires_at.map(kept_until),
        };
        let mut item = to_item(&row)?;
        item.insert(PK.into(), s(API_KEYS_PK));
        item.insert(SK.into(), s(&key.id));
        if self.put_new(item).await? { Ok(()) } else { Err(StoreError::AlreadyExists) }
    }

    async fn get_api_key(&self, id: &str) -> Result<Option<ApiKey>, StoreError> {
        let row: Option<Row> = self.get(API_KEYS_PK.to_string(), id).await?;
        Ok(row.map(from_row))
    }

    async fn list_api_keys(&self, limit: usize, cursor: Option<&str>) -> Result<Page<ApiKey>, StoreError> {
        let (items, next_cursor) = self.page_of_partition(API_KEYS_PK, limit, cursor).await?;
        let data = items.into_iter().map(|item| from_item::<Row>(item).map(from_row)).collect::<Result<Vec<_>, _>>()?;
        Ok(Page { data, next_cursor })
    }

    async fn revoke_api_key(&self, id: &str, at: DateTime<Utc>) -> Result<Option<ApiKey>, StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(PK, s(API_KEYS_PK))
            .key(SK, s(id))
            .update_expression("SET revoked_at = :at, #ttl = :ttl")
            .condition_expression("attribute_exists(pk) AND attribute_not_exists(revoked_at)")
            .expression_attribute_names("#ttl", TTL)
            .expression_attribute_values(":at", time(&at))
            .expression_attribute_values(":ttl", n(kept_until(at)))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew)
            .send()
            .await;
        match result {
            Ok(out) => out.attributes.map(|item| from_item::<Row>(item).map(from_row)).transpose(),
            // Gone, or revoked before: as it is.
            Err(e) if e.as_service_error().is_some_and(|se| se.is_conditional_check_failed_exception()) => {
                self.get_api_key(id).await
            }
            Err(e) => Err(aws(e)),
        }
    }

    async fn remove_api_key_tenant(&self, id: &str, tenant_id: &str) -> Result<Option<ApiKey>, StoreError> {
        // The tenant's place in the list, read then removed on the condition that it is still
        // there and not alone: a concurrent removal moves it, and the next try reads it again.
        for _ in 0..REMOVE_TRIES {
            let Some(key) = self.get_api_key(id).await? else { return Ok(None) };
            let place =
                key.tenant_ids.as_ref().filter(|t| t.len() > 1).and_then(|t| t.iter().position(|x| x == tenant_id));
            let Some(place) = place else { return Ok(Some(key)) };
            let result = self
                .client
                .update_item()
                .table_name(&self.table)
                .key(PK, s(API_KEYS_PK))
                .key(SK, s(id))
                .update_expression(format!("REMOVE tenant_ids[{place}]"))
                .condition_expression(format!("tenant_ids[{place}] = :t AND size(tenant_ids) > :one"))
                .expression_attribute_values(":t", s(tenant_id))
                .expression_attribute_values(":one", n(1))
                .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew)
                .send()
                .await;
            match result {
                Ok(out) => return out.attributes.map(|item| from_item::<Row>(item).map(from_row)).transpose(),
                Err(e) if e.as_service_error().is_some_and(|se| se.is_conditional_check_failed_exception()) => {}
                Err(e) => return Err(aws(e)),
            }
        }
        Err(StoreError::Aws(format!("API key {}: its tenants kept changing", prefix_of(id))))
    }

    async fn touch_api_key(&self, id: &str, at: DateTime<Utc>) -> Result<(), StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(PK, s(API_KEYS_PK))
            .key(SK, s(id))
            .update_expression("SET last_used_at = :at")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_values(":at", time(&at))
            .send()
            .await;
        conditional(result).map(|_| ())
    }
}
