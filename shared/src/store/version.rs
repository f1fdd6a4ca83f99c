//! The table's storage version: one item that says which storage shape the table holds, so
//! that a function of one release never reads or writes a table shaped by another.
//!
//! The item: `pk` = [`VERSION_PK`] (`STORAGE`), `sk` = [`VERSION_SK`] (`VERSION`), and
//! [`VERSION_ATTRIBUTE`] (`version`, a number). It has none of the indexes' attributes, so
//! no index lists it.
//!
//! Every function checks it as it starts ([`ensure`], called by [`crate::App::from_aws`]),
//! and [`crate::bootstrap::create_table`] writes it into a table it creates. The first
//! function to start on a table without the item (a fresh stack) writes
//! [`STORAGE_VERSION`]; a function that finds another version refuses to start, naming both.

use crate::store::keys::{PK, SK};
use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::AttributeValue;

/// The storage shape this release reads and writes: the table's items, keys and indexes as
/// documented in `docs/storage.md`. Storage version 1 is the shape of release 0.1.0. A later
/// release that changes the shape bumps this number and ships a migration, described in
/// `CHANGELOG.md`.
pub const STORAGE_VERSION: u32 = 1;

/// The version item's partition key (`pk`).
pub const VERSION_PK: &str = "STORAGE";

/// The version item's sort key (`sk`).
pub const VERSION_SK: &str = "VERSION";

/// The version item's attribute holding the storage version (a DynamoDB number).
pub const VERSION_ATTRIBUTE: &str = "version";

/// Why [`ensure`] did not confirm the table's storage version.
#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    /// The table holds another storage version than this release reads: the function must
    /// not start.
    #[error(
        "table {name} holds storage version {table}, this release reads storage version {code}: deploy the release that matches the table, or run the migration in CHANGELOG.md"
    )]
    Mismatch {
        /// The table's name.
        name: String,
        /// The storage version the table holds.
        table: u32,
        /// The storage version this release reads ([`STORAGE_VERSION`]).
        code: u32,
    },
    /// A DynamoDB call failed (after the SDK's own retries), the table named; the SDK's error
    /// with its context.
    #[error("storage version: dynamodb: {0}")]
    Aws(String),
    /// The version item is there but unreadable: its `version` is missing, not a number, or
    /// out of range for a `u32`.
    #[error("storage version: corrupt item: {0}")]
    Corrupt(String),
}

/// Makes sure `table` holds [`STORAGE_VERSION`] and returns it.
///
/// Reads the version item (GetItem, strongly consistent). When there is none, writes
/// [`STORAGE_VERSION`] with a conditional PutItem (`attribute_not_exists(pk)`); when that
/// condition fails, a concurrent starter wrote the item first, and it is read again. At most
/// three DynamoDB calls.
///
/// # Errors
/// - [`VersionError::Mismatch`] when the table holds another storage version.
/// - [`VersionError::Aws`] when a call fails (the table missing, no permission, throttled).
/// - [`VersionError::Corrupt`] when the item's `version` is not a number that fits a `u32`,
///   or the item vanished between a lost conditional write and the read after it.
pub async fn ensure(client: &aws_sdk_dynamodb::Client, table: &str) -> Result<u32, VersionError> {
    let found = match read_storage_version(client, table).await? {
        Some(v) => v,
        None if write_storage_version(client, table).await? => STORAGE_VERSION,
        None => read_storage_version(client, table).await?.ok_or_else(|| {
            VersionError::Corrupt(format!(
                "table {table}: the version item was there for a conditional write and gone for the read after it"
            ))
        })?,
    };
    if found == STORAGE_VERSION {
        Ok(found)
    } else {
        Err(VersionError::Mismatch { name: table.to_string(), table: found, code: STORAGE_VERSION })
    }
}

/// The version item's key.
fn version_key() -> [(String, AttributeValue); 2] {
    [
        (PK.to_string(), AttributeValue::S(VERSION_PK.to_string())),
        (SK.to_string(), AttributeValue::S(VERSION_SK.to_string())),
    ]
}

fn aws_error<E: std::error::Error + 'static>(table: &str, err: E) -> VersionError {
    VersionError::Aws(format!("table {table}: {}", DisplayErrorContext(err)))
}

/// The storage version the table holds (strongly consistent read), `None` without the item.
async fn read_storage_version(client: &aws_sdk_dynamodb::Client, table: &str) -> Result<Option<u32>, VersionError> {
    let out = client
        .get_item()
        .table_name(table)
        .set_key(Some(version_key().into_iter().collect()))
        .consistent_read(true)
        .send()
        .await
        .map_err(|err| aws_error(table, err))?;
    let Some(item) = out.item else {
        return Ok(None);
    };
    match item.get(VERSION_ATTRIBUTE) {
        Some(AttributeValue::N(n)) => n.parse::<u32>().map(Some).map_err(|err| {
            VersionError::Corrupt(format!("table {table}: {VERSION_ATTRIBUTE} is {n:?}, not a storage version ({err})"))
        }),
        Some(other) => {
            Err(VersionError::Corrupt(format!("table {table}: {VERSION_ATTRIBUTE} is {other:?}, not a number")))
        }
        None => Err(VersionError::Corrupt(format!("table {table}: the version item has no {VERSION_ATTRIBUTE}"))),
    }
}

/// Writes [`STORAGE_VERSION`] unless the item exists; false when it does (the condition
/// failed: someone else wrote it first).
async fn write_storage_version(client: &aws_sdk_dynamodb::Client, table: &str) -> Result<bool, VersionError> {
    let mut item: std::collections::HashMap<String, AttributeValue> = version_key().into_iter().collect();
    item.insert(VERSION_ATTRIBUTE.to_string(), AttributeValue::N(STORAGE_VERSION.to_string()));
    let result = client
        .put_item()
        .table_name(table)
        .set_item(Some(item))
        .condition_expression(format!("attribute_not_exists({PK})"))
        .send()
        .await;
    match result {
        Ok(_) => Ok(true),
        Err(err) if err.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => Ok(false),
        Err(err) => Err(aws_error(table, err)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mismatch_names_the_table_both_versions_and_what_to_do() {
        let err = VersionError::Mismatch { name: "webhooks".into(), table: 2, code: STORAGE_VERSION };
        assert_eq!(
            err.to_string(),
            "table webhooks holds storage version 2, this release reads storage version 1: deploy the release \
             that matches the table, or run the migration in CHANGELOG.md"
        );
    }
}
