//! Creates the table and the queue for the local runtime and the tests (on AWS, the SAM
//! template does this; keep the two in step).

use crate::store::keys::*;
use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType, TimeToLiveSpecification,
};

/// Attributes the `by_status` index carries (everything a [`crate::store::DeliverySummary`]
/// shows).
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

/// Creates the table (on-demand, the three GSIs of `docs/storage.md`, TTL on `expires_at`)
/// unless it exists. Either way, then writes this release's storage version and
/// `endpoint_copies` (the functions' `WEBHOOKS_ENDPOINT_COPIES`) into it, or checks the ones
/// it holds ([`crate::store::version::ensure`]).
///
/// # Errors
/// [`BootstrapError`] when a call fails for any reason but "already exists", or the table
/// holds another storage version or another count of endpoint copies.
pub async fn create_table(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    endpoint_copies: u32,
) -> Result<(), BootstrapError> {
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
        .attribute_definitions(attr(EP_PK, S)?)
        .attribute_definitions(attr(EP_SK, S)?)
        .attribute_definitions(attr(STATUS_KEY, S)?)
        .attribute_definitions(attr(STATUS_SK, S)?)
        .global_secondary_indexes(keys_only(DUE_INDEX, DUE_PK, DUE_AT)?)
        .global_secondary_indexes(keys_only(ENDPOINT_INDEX, EP_PK, EP_SK)?)
        .global_secondary_indexes(gsi(STATUS_INDEX, STATUS_KEY, STATUS_SK, &SUMMARY_ATTRIBUTES)?)
        .send()
        .await;
    match result {
        Ok(_) => {}
        Err(err) if err.as_service_error().is_some_and(|s| s.is_resource_in_use_exception()) => {
            return storage_version(client, table, endpoint_copies).await;
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
    storage_version(client, table, endpoint_copies).await
}

/// Writes this release's storage version and `endpoint_copies` into the table, or checks the
/// ones it holds ([`crate::store::version::ensure`]).
///
/// # Errors
/// [`BootstrapError`] with the version check's message (another storage version or copy
/// count: both named).
async fn storage_version(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    endpoint_copies: u32,
) -> Result<(), BootstrapError> {
    crate::store::version::ensure(client, table, endpoint_copies)
        .await
        .map(|_| ())
        .map_err(|err| BootstrapError(err.to_string()))
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
