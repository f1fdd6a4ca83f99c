//! Creates the table and the queue for the local runtime and the tests (on AWS, the SAM
//! template does this; keep the two in step).

use crate::store::keys::*;
use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType, TimeToLiveSpecification,
};

/// Attributes the list indexes carry (everything a [`crate::store::DeliverySummary`] shows).
pub const SUMMARY_ATTRIBUTES: [&str; 11] = [
    "id",
    "event_id",
    "event_type",
    "tenant_id",
    "endpoint_id",
    "status",
    "attempt_count",
    "next_attempt_at",
    "created_at",
    "updated_at",
    "expires_at",
];

/// Attributes the by-event index carries: the summary less its own keys.
pub const EVENT_ATTRIBUTES: [&str; 9] = [
    "id",
    "event_type",
    "tenant_id",
    "status",
    "attempt_count",
    "next_attempt_at",
    "created_at",
    "updated_at",
    "expires_at",
];

/// Attributes the due index carries (everything a [`crate::lifecycle::DueItem`] holds).
pub const DUE_ATTRIBUTES: [&str; 5] = ["id", "status", "attempt_count", "next_attempt_at", "lease_until"];

/// A setup call failed.
#[derive(Debug, thiserror::Error)]
#[error("bootstrap: {0}")]
pub struct BootstrapError(String);

fn e<E: std::error::Error + 'static>(err: E) -> BootstrapError {
    BootstrapError(DisplayErrorContext(err).to_string())
}

fn key(name: &str, kind: KeyType) -> Result<KeySchemaElement, BootstrapError> {
    KeySchemaElement::builder().attribute_name(name).key_type(kind).build().map_err(e)
}

fn attr(name: &str, t: ScalarAttributeType) -> Result<AttributeDefinition, BootstrapError> {
    AttributeDefinition::builder().attribute_name(name).attribute_type(t).build().map_err(e)
}

fn gsi(name: &str, pk: &str, sk: &str, include: &[&str]) -> Result<GlobalSecondaryIndex, BootstrapError> {
    GlobalSecondaryIndex::builder()
        .index_name(name)
        .key_schema(key(pk, KeyType::Hash)?)
        .key_schema(key(sk, KeyType::Range)?)
        .projection(
            Projection::builder()
                .projection_type(ProjectionType::Include)
                .set_non_key_attributes(Some(include.iter().map(|s| s.to_string()).collect()))
                .build(),
        )
        .build()
        .map_err(e)
}

fn keys_only(name: &str, pk: &str, sk: &str) -> Result<GlobalSecondaryIndex, BootstrapError> {
    GlobalSecondaryIndex::builder()
        .index_name(name)
        .key_schema(key(pk, KeyType::Hash)?)
        .key_schema(key(sk, KeyType::Range)?)
        .projection(Projection::builder().projection_type(ProjectionType::KeysOnly).build())
        .build()
        .map_err(e)
}

/// Creates the table (on-demand, the six GSIs, TTL on `expires_at`) unless it exists; adds
/// the keys-only GSIs to one created before them.
///
/// # Errors
/// [`BootstrapError`] when a call fails for any reason but "already exists".
pub async fn create_table(client: &aws_sdk_dynamodb::Client, table: &str) -> Result<(), BootstrapError> {
    use ScalarAttributeType::{N, S};
    let result = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(key(PK, KeyType::Hash)?)
        .key_schema(key(SK, KeyType::Range)?)
        .attribute_definitions(attr(PK, S)?)
        .attribute_definitions(attr(SK, S)?)
        .attribute_definitions(attr(DUE_PK, S)?)
        .attribute_definitions(attr(DUE_AT, N)?)
        .attribute_definitions(attr(DUE_KEYS_PK, S)?)
        .attribute_definitions(attr(DUE_KEYS_AT, N)?)
        .attribute_definitions(attr(EP_PK, S)?)
        .attribute_definitions(attr(EP_SK, S)?)
        .attribute_definitions(attr(ENDPOINT_KEYS_PK, S)?)
        .attribute_definitions(attr(ENDPOINT_KEYS_SK, S)?)
        .attribute_definitions(attr(STATUS_KEY, S)?)
        .attribute_definitions(attr(STATUS_SK, S)?)
        .attribute_definitions(attr(EVENT_PK, S)?)
        .attribute_definitions(attr(EVENT_SK, S)?)
        .global_secondary_indexes(gsi(DUE_INDEX, DUE_PK, DUE_AT, &DUE_ATTRIBUTES)?)
        .global_secondary_indexes(keys_only(DUE_KEYS_INDEX, DUE_KEYS_PK, DUE_KEYS_AT)?)
        .global_secondary_indexes(gsi(ENDPOINT_INDEX, EP_PK, EP_SK, &SUMMARY_ATTRIBUTES)?)
        .global_secondary_indexes(keys_only(ENDPOINT_KEYS_INDEX, ENDPOINT_KEYS_PK, ENDPOINT_KEYS_SK)?)
        .global_secondary_indexes(gsi(STATUS_INDEX, STATUS_KEY, STATUS_SK, &SUMMARY_ATTRIBUTES)?)
        .global_secondary_indexes(gsi(EVENT_INDEX, EVENT_PK, EVENT_SK, &EVENT_ATTRIBUTES)?)
        .send()
        .await;
    match result {
        Ok(_) => {}
        Err(err) if err.as_service_error().is_some_and(|s| s.is_resource_in_use_exception()) => {
            return add_keys_indexes(client, table).await;
        }
        Err(err) => return Err(e(err)),
    }
    client
        .update_time_to_live()
        .table_name(table)
        .time_to_live_specification(
            TimeToLiveSpecification::builder().attribute_name(TTL).enabled(true).build().map_err(e)?,
        )
        .send()
        .await
        .map_err(e)?;
    Ok(())
}

/// Adds the keys-only indexes (`due_keys`, `by_endpoint_keys`) a table created before them
/// lacks (a local table kept across releases), as the SAM template's updates do on AWS: one
/// at a time, as DynamoDB allows, each after the one before is built (polled once a second,
/// for at most 120 seconds).
///
/// # Errors
/// [`BootstrapError`] when a call fails, or an index is still being built after 120 seconds.
async fn add_keys_indexes(client: &aws_sdk_dynamodb::Client, table: &str) -> Result<(), BootstrapError> {
    use ScalarAttributeType::{N, S};
    use aws_sdk_dynamodb::types::{CreateGlobalSecondaryIndexAction, GlobalSecondaryIndexUpdate, IndexStatus};
    let wanted =
        [(DUE_KEYS_INDEX, DUE_KEYS_PK, DUE_KEYS_AT, N), (ENDPOINT_KEYS_INDEX, ENDPOINT_KEYS_PK, ENDPOINT_KEYS_SK, S)];
    for _ in 0..120 {
        let described = client.describe_table().table_name(table).send().await.map_err(e)?;
        let indexes = described.table().map(|t| t.global_secondary_indexes()).unwrap_or_default();
        if indexes.iter().any(|g| g.index_status().is_some_and(|s| *s != IndexStatus::Active)) {
            // One is being built: DynamoDB takes no other index change meanwhile.
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            continue;
        }
        let missing = wanted.iter().find(|(name, ..)| !indexes.iter().any(|g| g.index_name() == Some(*name)));
        let Some((name, pk, sk, sk_type)) = missing.cloned() else {
            return Ok(());
        };
        let create = CreateGlobalSecondaryIndexAction::builder()
            .index_name(name)
            .key_schema(key(pk, KeyType::Hash)?)
            .key_schema(key(sk, KeyType::Range)?)
            .projection(Projection::builder().projection_type(ProjectionType::KeysOnly).build())
            .build()
            .map_err(e)?;
        client
            .update_table()
            .table_name(table)
            .attribute_definitions(attr(pk, S)?)
            .attribute_definitions(attr(sk, sk_type)?)
            .global_secondary_index_updates(GlobalSecondaryIndexUpdate::builder().create(create).build())
            .send()
            .await
            .map_err(e)?;
    }
    Err(BootstrapError(format!("{table}: an index was still being built after 120 s")))
}

/// Creates the queue (or finds it) and returns its URL. `visibility_timeout_seconds` should
/// be at least six times the deliver function's timeout.
///
/// # Errors
/// [`BootstrapError`] when the call fails.
pub async fn create_queue(
    client: &aws_sdk_sqs::Client,
    name: &str,
    visibility_timeout_seconds: u32,
) -> Result<String, BootstrapError> {
    let out = client
        .create_queue()
        .queue_name(name)
        .attributes(aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout, visibility_timeout_seconds.to_string())
        .send()
        .await
        .map_err(|err| BootstrapError(aws_sdk_sqs::error::DisplayErrorContext(err).to_string()))?;
    out.queue_url.ok_or_else(|| BootstrapError("CreateQueue returned no URL".into()))
}
