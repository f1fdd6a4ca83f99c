//! The table's storage version: one item that says which storage shape the table holds, so
//! that a function of one release never reads or writes a table shaped by another.
//!
//! The item: `pk` = [`VERSION_PK`] (`STORAGE`), `sk` = [`VERSION_SK`] (`VERSION`),
//! [`VERSION_ATTRIBUTE`] (`version`, a number) and [`COPIES_ATTRIBUTE`] (`endpoint_copies`, a
//! number: how many copies of each endpoint item the table keeps, see the store's endpoint
//! copies). It has none of the indexes' attributes, so no index lists it.
//!
//! Every function checks it as it starts ([`ensure`], called by [`crate::App::from_aws`]),
//! and [`crate::bootstrap::create_table`] writes it into a table it creates. The first
//! function to start on a table without the item (a fresh stack) writes
//! [`STORAGE_VERSION`] and its configured `WEBHOOKS_ENDPOINT_COPIES`; a function that finds
//! another version, or another copy count, refuses to start, naming both.

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

/// The version item's attribute holding the table's count of endpoint copies (a DynamoDB
/// number, 1 to [`crate::config::MAX_ENDPOINT_COPIES`]; `WEBHOOKS_ENDPOINT_COPIES`).
pub const COPIES_ATTRIBUTE: &str = "endpoint_copies";

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
    /// The table keeps another number of endpoint copies than the function is configured
    /// with (`WEBHOOKS_ENDPOINT_COPIES`): the function must not start, or it would write
    /// endpoints without copies that readers read, or read copies nobody wrote.
    #[error(
        "table {name} keeps {table} endpoint copies, this function is configured with WEBHOOKS_ENDPOINT_COPIES={configured}: set WEBHOOKS_ENDPOINT_COPIES to {table}; the count is fixed when the table is created, and changing it is a migration (docs/storage.md)"
    )]
    CopiesMismatch {
        /// The table's name.
        name: String,
        /// The copy count the table's version item holds.
        table: u32,
        /// The function's `WEBHOOKS_ENDPOINT_COPIES`.
        configured: u32,
    },
    /// A DynamoDB call failed (after the SDK's own retries), the table named; the SDK's error
    /// with its context.
    #[error("storage version: dynamodb: {0}")]
    Aws(String),
    /// The version item is there but unreadable: its `version` is missing, not a number, or
    /// out of range for a `u32`, or its `endpoint_copies` is missing or not a number from 1 up.
    #[error("storage version: corrupt item: {0}")]
    Corrupt(String),
}

/// Makes sure `table` holds [`STORAGE_VERSION`] and keeps `endpoint_copies` endpoint copies
/// (the function's `WEBHOOKS_ENDPOINT_COPIES`), and returns the storage version.
///
/// Reads the version item (GetItem, strongly consistent). When there is none, writes
/// [`STORAGE_VERSION`] and `endpoint_copies` with a conditional PutItem
/// (`attribute_not_exists(pk)`); when that condition fails, a concurrent starter wrote the
/// item first, and it is read again. At most three DynamoDB calls.
///
/// # Errors
/// - [`VersionError::Mismatch`] when the table holds another storage version.
/// - [`VersionError::CopiesMismatch`] when the table keeps another number of endpoint copies.
/// - [`VersionError::Aws`] when a call fails (the table missing, no permission, throttled).
/// - [`VersionError::Corrupt`] when the item's `version` is not a number that fits a `u32`,
///   its `endpoint_copies` missing or not a number from 1 up, or the item vanished between a lost
///   conditional write and the read after it.
pub async fn ensure(client: &aws_sdk_dynamodb::Client, table: &str, endpoint_copies: u32) -> Result<u32, VersionError> {
    let copies = match read_storage_version(client, table).await? {
        Some(copies) => copies,
        None if write_storage_version(client, table, endpoint_copies).await? => endpoint_copies,
        None => read_storage_version(client, table).await?.ok_or_else(|| {
            VersionError::Corrupt(format!(
                "table {table}: the version item was there for a conditional write and gone for the read after it"
            ))
        })?,
    };
    if copies != endpoint_copies {
        return Err(VersionError::CopiesMismatch {
            name: table.to_string(),
            table: copies,
            configured: endpoint_copies,
        });
    }
    Ok(STORAGE_VERSION)
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

/// The table's count of endpoint copies, read strongly consistent from a version item of
/// [`STORAGE_VERSION`]; `None` without the item. A table of another storage version is
/// [`VersionError::Mismatch`] whatever else its version item holds.
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
    let version = match item.get(VERSION_ATTRIBUTE) {
        Some(AttributeValue::N(n)) => n.parse::<u32>().map_err(|err| {
            VersionError::Corrupt(format!("table {table}: {VERSION_ATTRIBUTE} is {n:?}, not a storage version ({err})"))
        })?,
        Some(other) => {
            return Err(VersionError::Corrupt(format!(
                "table {table}: {VERSION_ATTRIBUTE} is {other:?}, not a number"
            )));
        }
        None => {
            return Err(VersionError::Corrupt(format!("table {table}: the version item has no {VERSION_ATTRIBUTE}")));
        }
    };
    if version != STORAGE_VERSION {
        // Another release's table: its version item may have another shape too.
        return Err(VersionError::Mismatch { name: table.to_string(), table: version, code: STORAGE_VERSION });
    }
    let copies = match item.get(COPIES_ATTRIBUTE) {
        Some(AttributeValue::N(n)) => n.parse::<u32>().ok().filter(|c| *c >= 1).ok_or_else(|| {
            VersionError::Corrupt(format!("table {table}: {COPIES_ATTRIBUTE} is {n:?}, not a count of copies"))
        })?,
        Some(other) => {
            return Err(VersionError::Corrupt(format!("table {table}: {COPIES_ATTRIBUTE} is {other:?}, not a number")));
        }
        None => {
            return Err(VersionError::Corrupt(format!(
                "table {table}: the version item has no {COPIES_ATTRIBUTE}; put the table's count of endpoint copies there (docs/storage.md)"
            )));
        }
    };
    Ok(Some(copies))
}

/// Writes [`STORAGE_VERSION`] and `endpoint_copies` unless the item exists; false when it
/// does (the condition failed: someone else wrote it first).
async fn write_storage_version(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    endpoint_copies: u32,
) -> Result<bool, VersionError> {
    let mut item: std::collections::HashMap<String, AttributeValue> = version_key().into_iter().collect();
    item.insert(VERSION_ATTRIBUTE.to_string(), AttributeValue::N(STORAGE_VERSION.to_string()));
    item.insert(COPIES_ATTRIBUTE.to_string(), AttributeValue::N(endpoint_copies.to_string()));
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

    #[test]
    fn a_copies_mismatch_names_the_table_both_counts_and_what_to_do() {
        let err = VersionError::CopiesMismatch { name: "webhooks".into(), table: 20, configured: 1 };
        assert_eq!(
            err.to_string(),
            "table webhooks keeps 20 endpoint copies, this function is configured with WEBHOOKS_ENDPOINT_COPIES=1: \
             set WEBHOOKS_ENDPOINT_COPIES to 20; the count is fixed when the table is created, and changing it is a \
             migration (docs/storage.md)"
        );
    }
}
