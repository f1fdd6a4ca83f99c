//! Endpoints: the endpoint item, its id pointer and its copies written in one transaction;
//! the listing of a tenant's endpoints; every later change as one guarded transaction
//! ([`EndpointStore::commit`]).

use super::*;
use crate::domain::ids::{DeliveryId, EndpointId, TenantId};

impl DynamoStore {
    /// An endpoint [`Change`] as transaction items: an UpdateItem of the endpoint item that
    /// sets every attribute of the new endpoint (the failures counter only when the change
    /// resets it) and removes the optional ones it lacks, on the condition that the stored
    /// version is the one read; then the same update of each of its copies (see [`copies`]).
    pub(super) fn endpoint_change(
        &self,
        change: &Change,
    ) -> Result<(TransactWriteItem, Vec<TransactWriteItem>), StoreError> {
        let mut item = to_item(&change.endpoint)?;
        if !change.reset_failures {
            item.remove("consecutive_failures");
        }
        for attr in crate::domain::model::UNVERSIONED_ENDPOINT_ATTRIBUTES {
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
        let marks = super::attention::Marks::of(change);
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

    /// The Query of a tenant's endpoints in partition `pk`: their items (`TENANT#{tenant_id}`)
    /// or one of their copies (`COPY#{j}#TENANT#{tenant_id}`).
    pub(super) fn endpoints_query(&self, pk: &str) -> aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder {
        self.client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND begins_with(sk, :ep)")
            .expression_attribute_values(":pk", s(pk))
            .expression_attribute_values(":ep", s("ENDPOINT#"))
    }

    /// An UpdateItem of an existing endpoint (the condition makes a missing one fail).
    pub(super) fn endpoint_update(
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
pub(super) const OPTIONAL_ENDPOINT_ATTRIBUTES: [&str; 10] = [
    "event_types",
    "disabled",
    "previous_secret",
    "previous_secret_expires_at",
    "probe_delivery_id",
    "rate_limit_per_second",
    "headers",
    "secret_headers",
    "auth",
    "filter",
];

/// Whether `found`, the endpoint item an endpoint create's condition met, is `ours`, the item
/// that create writes: the same secret and creation time (only an earlier try of the same
/// call has both; a rotation since would make it look like another endpoint's).
pub(super) fn same_endpoint(found: &Item, ours: &Item) -> bool {
    ["secret", "created_at"].iter().all(|attr| found.get(*attr).is_some() && found.get(*attr) == ours.get(*attr))
}

#[async_trait]
impl EndpointStore for DynamoStore {
    async fn attention_endpoints(
        &self,
        why: crate::store::Attention,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<Page<crate::store::AttentionMark>, StoreError> {
        self.attention_page(why, limit, cursor).await
    }

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

    async fn get_endpoint(&self, tenant_id: &TenantId, id: &EndpointId) -> Result<Option<Endpoint>, StoreError> {
        self.get(tenant_pk(tenant_id), &endpoint_key(id)).await
    }

    async fn read_endpoint(
        &self,
        tenant_id: &TenantId,
        id: &EndpointId,
        key: &str,
    ) -> Result<Option<Endpoint>, StoreError> {
        self.read_copy(tenant_id, id, key).await
    }

    async fn find_endpoint(&self, id: &EndpointId) -> Result<Option<Endpoint>, StoreError> {
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
        let tenant = TenantId::try_from(tenant.clone())
            .map_err(|e| StoreError::Corrupt(format!("endpoint {id}'s pointer: {e}")))?;
        self.get_endpoint(&tenant, id).await
    }

    async fn tenant_endpoints(&self, tenant_id: &TenantId, key: &str) -> Result<Vec<Endpoint>, StoreError> {
        self.tenant_copies(tenant_id, key).await
    }

    async fn delete_endpoint(&self, deleted: &crate::store::DeletedEndpoint) -> Result<(), StoreError> {
        let (tenant_id, id) = (deleted.tenant_id.as_str(), deleted.endpoint_id.as_str());
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
        let mut tombstone = to_item(deleted)?;
        tombstone.insert(PK.into(), s(tenant_pk(tenant_id)));
        tombstone.insert(SK.into(), s(deleted_endpoint_sk(id)));
        let put = Put::builder().table_name(&self.table).set_item(Some(tombstone)).build().map_err(aws)?;
        items.push(TransactWriteItem::builder().put(put).build());
        self.client.transact_write_items().set_transact_items(Some(items)).send().await.map_err(aws)?;
        Ok(())
    }

    async fn list_endpoints(
        &self,
        tenant_id: &TenantId,
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

    async fn commit(
        &self,
        endpoint: EndpointWrite<'_>,
        delivery: Option<(&DeliveryId, &Transition)>,
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
            items.push(self.transition_in_transaction(id, t)?);
        }
        if let EndpointWrite::Change(change) = endpoint {
            for job in &change.jobs {
                items.push(self.job_put(job)?);
            }
        }
        // The delivery's own jobs (a dead letter's notify job): the cancellation reasons of the
        // first two items are read by position.
        for job in delivery.iter().flat_map(|(_, t)| &t.jobs) {
            items.push(self.job_put(job)?);
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
}

/// A `cursor` of `tenant_id`'s endpoint listing back into its `ExclusiveStartKey`: the table
/// key of one of the tenant's endpoints and nothing else.
///
/// # Errors
/// [`StoreError::InvalidCursor`] for anything else (another tenant's key, an outsized one),
/// before DynamoDB sees it.
pub(super) fn endpoint_start(tenant_id: &str, cursor: &str) -> Result<Item, StoreError> {
    let key = decode_cursor(cursor)?;
    let text = |name: &str| key.get(name).and_then(|v| v.as_s().ok());
    let fits = key.len() == 2 && text(PK) == Some(&tenant_pk(tenant_id)) && prefixed_id(text(SK), &endpoint_key(""));
    if fits { Ok(key) } else { Err(StoreError::InvalidCursor) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::id;

    /// A field added to `Endpoint` with `skip_serializing_if` must be listed above, or a change
    /// that unsets it (a PATCH with `null`) would leave the stored value in place.
    #[test]
    fn every_optional_attribute_of_an_endpoint_is_removed_when_unset() {
        let now = chrono::Utc::now();
        let bare = crate::domain::model::Endpoint::new(id("ep_1"), id("t"), "https://example.com", "whsec_AAAA", now);
        let mut full = bare.clone();
        full.event_types = Some(vec!["a".into()]);
        full.disabled = Some(crate::domain::model::Disabled {
            reason: "manual".into(),
            at: now,
            status_code: None,
            delivery_id: None,
        });
        full.previous_secret = Some("whsec_AAAA".into());
        full.previous_secret_expires_at = Some(now);
        full.probe_delivery_id = Some(id("dlv_1"));
        full.rate_limit_per_second = Some(1);
        full.headers.insert("X-A".into(), "a".into());
        full.secret_headers.insert("X-B".into(), "b".into());
        full.auth = Some(crate::domain::endpoint_options::ReceiverAuth::Bearer { token: "t".into() });
        full.filter = Some(serde_json::json!({"a": 1}));
        full.effective_rate_per_second = Some(1.0);
        full.rate_changed_at_ms = Some(1);
        full.slow_until = Some(now);
        let bare_keys: Vec<String> = to_item(&bare).unwrap().into_keys().collect();
        for key in to_item(&full).unwrap().into_keys() {
            let listed = OPTIONAL_ENDPOINT_ATTRIBUTES.contains(&key.as_str())
                || crate::domain::model::UNVERSIONED_ENDPOINT_ATTRIBUTES.contains(&key.as_str());
            assert!(bare_keys.contains(&key) || listed, "{key} is optional but not in OPTIONAL_ENDPOINT_ATTRIBUTES");
        }
    }
}
