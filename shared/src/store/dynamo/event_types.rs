//! The event-type catalog ([`EventTypeStore`]): the type's item (`EVENT_TYPES` / `{name}`)
//! and a record per schema version (`EVENT_TYPE#{name}` / `VERSION#{n}`), the schema and
//! examples held as JSON text (so a number or an empty object comes back as it went in).
//! Every write after the create is guarded on the `revision` read.

use super::*;
use crate::domain::event_type::{EventType, EventTypeVersion};
use crate::store::EventTypeStore;
use serde::{Deserialize, Serialize};

/// An event type's item.
#[derive(Serialize, Deserialize)]
struct Row {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    schema: Option<String>,
    #[serde(default)]
    examples: String,
    #[serde(default)]
    deprecated: bool,
    #[serde(default)]
    archived: bool,
    version: u64,
    revision: u64,
    created_at: chrono::DateTime<chrono::Utc>,
    updated_at: chrono::DateTime<chrono::Utc>,
}

/// A version record's item.
#[derive(Serialize, Deserialize)]
struct VersionRow {
    name: String,
    version: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    schema: Option<String>,
    #[serde(default)]
    examples: String,
    created_at: chrono::DateTime<chrono::Utc>,
}

fn json_text(v: &impl Serialize) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn parse_json<T: serde::de::DeserializeOwned + Default>(text: &str) -> Result<T, StoreError> {
    if text.is_empty() {
        return Ok(T::default());
    }
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("event type: {e}")))
}

fn row_item(e: &EventType) -> Result<Item, StoreError> {
    let row = Row {
        name: e.name.clone(),
        description: e.description.clone(),
        schema: e.schema.as_ref().map(json_text).transpose()?,
        examples: json_text(&e.examples)?,
        deprecated: e.deprecated,
        archived: e.archived,
        version: e.version,
        revision: e.revision,
        created_at: e.created_at,
        updated_at: e.updated_at,
    };
    let mut item = to_item(&row)?;
    item.insert(PK.into(), s(EVENT_TYPES_PK));
    item.insert(SK.into(), s(&e.name));
    Ok(item)
}

fn from_row(row: Row) -> Result<EventType, StoreError> {
    Ok(EventType {
        schema: row.schema.as_deref().map(parse_json::<serde_json::Value>).transpose()?,
        examples: parse_json(&row.examples)?,
        name: row.name,
        description: row.description,
        deprecated: row.deprecated,
        archived: row.archived,
        version: row.version,
        revision: row.revision,
        created_at: row.created_at,
        updated_at: row.updated_at,
    })
}

fn version_item(e: &EventType) -> Result<Item, StoreError> {
    let v = e.version_record();
    let row = VersionRow {
        name: v.name,
        version: v.version,
        schema: v.schema.as_ref().map(json_text).transpose()?,
        examples: json_text(&v.examples)?,
        created_at: v.created_at,
    };
    let mut item = to_item(&row)?;
    item.insert(PK.into(), s(event_type_pk(&e.name)));
    item.insert(SK.into(), s(event_type_version_sk(e.version)));
    Ok(item)
}

impl DynamoStore {
    /// A Put of `item` in a transaction, on `condition` (with `values`).
    fn event_type_put(
        &self,
        item: Item,
        condition: &str,
        values: Option<Item>,
    ) -> Result<TransactWriteItem, StoreError> {
        Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(condition)
            .set_expression_attribute_values(values)
            .build()
            .map(|p| TransactWriteItem::builder().put(p).build())
            .map_err(aws)
    }
}

#[async_trait]
impl EventTypeStore for DynamoStore {
    async fn create_event_type(&self, event_type: &EventType) -> Result<(), StoreError> {
        let new = "attribute_not_exists(pk)";
        let items = vec![
            self.event_type_put(row_item(event_type)?, new, None)?,
            self.event_type_put(version_item(event_type)?, new, None)?,
        ];
        if self.transact_guarded(items, usize::MAX).await? { Ok(()) } else { Err(StoreError::AlreadyExists) }
    }

    async fn get_event_type(&self, name: &str) -> Result<Option<EventType>, StoreError> {
        let row: Option<Row> = self.get(EVENT_TYPES_PK.to_string(), name).await?;
        row.map(from_row).transpose()
    }

    async fn event_type_version(&self, name: &str, version: u64) -> Result<Option<EventTypeVersion>, StoreError> {
        let row: Option<VersionRow> = self.get(event_type_pk(name), &event_type_version_sk(version)).await?;
        row.map(|r| {
            Ok(EventTypeVersion {
                schema: r.schema.as_deref().map(parse_json::<serde_json::Value>).transpose()?,
                examples: parse_json(&r.examples)?,
                name: r.name,
                version: r.version,
                created_at: r.created_at,
            })
        })
        .transpose()
    }

    async fn save_event_type(
        &self,
        event_type: &EventType,
        expected_revision: u64,
        new_version: bool,
    ) -> Result<bool, StoreError> {
        let guard = "attribute_exists(pk) AND revision = :g_revision";
        let values = Item::from([(":g_revision".to_string(), n(expected_revision))]);
        let mut items = vec![self.event_type_put(row_item(event_type)?, guard, Some(values))?];
        if new_version {
            items.push(self.event_type_put(version_item(event_type)?, "attribute_not_exists(pk)", None)?);
        }
        self.transact_guarded(items, usize::MAX).await
    }

    async fn list_event_types(&self, limit: usize, cursor: Option<&str>) -> Result<Page<EventType>, StoreError> {
        let (items, next_cursor) = self.page_of_partition(EVENT_TYPES_PK, limit, cursor).await?;
        let data =
            items.into_iter().map(|item| from_item::<Row>(item).and_then(from_row)).collect::<Result<Vec<_>, _>>()?;
        Ok(Page { data, next_cursor })
    }
}
