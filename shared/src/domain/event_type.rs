//! The event-type catalog (issue #37): what a producer says each event type carries.
//!
//! An entry has a `name` (the event-type id rule of [`crate::domain::ids`]), a `description`,
//! an optional JSON Schema (draft 2020-12, compiled and checked by the `jsonschema` crate, not
//! a validator of ours) and `examples` that must validate against it. A schema change makes a
//! new `version`; every version's schema stays readable. Ingest refuses a payload that fails
//! its type's schema and an event of an `archived` type; see
//! [`crate::service::event_types::enforce`]. Pure: no async, no AWS. The compiled schemas a
//! process keeps ([`Catalog`]) live here too, so the [`crate::App`] can hold them.

use crate::error::ServiceError;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Longest `description`, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 1_024;

/// Largest `schema`, and largest `examples` all together, as JSON text in bytes (64 KiB
/// each): the entry's item and its version item both hold them, under DynamoDB's 400 KB.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;

/// Most examples an entry keeps.
pub const MAX_EXAMPLES: usize = 20;

/// The one `$schema` a schema may declare (absent means the same).
pub const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// An event type of the catalog, as stored and as the API answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventType {
    /// The event type, e.g. `order.paid` (the id rule of [`crate::domain::ids`]).
    pub name: String,
    /// What the event means, for the people who subscribe (empty when not given).
    #[serde(default)]
    pub description: String,
    /// The JSON Schema (draft 2020-12) every payload of this type must satisfy; `None`: any
    /// payload.
    #[serde(default)]
    pub schema: Option<Value>,
    /// Example payloads, each valid against `schema`.
    #[serde(default)]
    pub examples: Vec<Value>,
    /// Still accepted, but producers should move off it (shown, not enforced).
    #[serde(default)]
    pub deprecated: bool,
    /// Refused at ingest (422 `event_type_archived`); the entry stays readable.
    #[serde(default)]
    pub archived: bool,
    /// The schema's version: 1 at creation, one more at each schema change.
    pub version: u64,
    /// Created at.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// Every write's count, the guard of the next one (not shown by the API).
    #[serde(skip)]
    pub revision: u64,
}

/// One version of an event type's schema, as it was made (`GET
/// /v1/event-types/{name}?version=N`): never changed afterwards.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventTypeVersion {
    /// The event type.
    pub name: String,
    /// Its version number.
    pub version: u64,
    /// The schema of that version (`None`: none).
    #[serde(default)]
    pub schema: Option<Value>,
    /// The examples the entry had when the version was made.
    #[serde(default)]
    pub examples: Vec<Value>,
    /// When the version was made.
    pub created_at: DateTime<Utc>,
}

impl EventType {
    /// The record of the entry's current version.
    pub fn version_record(&self) -> EventTypeVersion {
        EventTypeVersion {
            name: self.name.clone(),
            version: self.version,
            schema: self.schema.clone(),
            examples: self.examples.clone(),
            created_at: self.updated_at,
        }
    }
}

/// What a create asks for (`POST /v1/event-types`).
#[derive(Debug, Clone, Default)]
pub struct Draft {
    /// The name.
    pub name: String,
    /// The description.
    pub description: Option<String>,
    /// The schema.
    pub schema: Option<Value>,
    /// The examples.
    pub examples: Option<Vec<Value>>,
    /// Deprecated from the start.
    pub deprecated: Option<bool>,
}

/// What a change asks for (`PATCH /v1/event-types/{name}`): `None` leaves a field as it is;
/// `schema: Some(None)` removes the schema.
#[derive(Debug, Clone, Default)]
pub struct Patch {
    /// A new description.
    pub description: Option<String>,
    /// A new schema, or `Some(None)` to remove it.
    pub schema: Option<Option<Value>>,
    /// New examples (all of them).
    pub examples: Option<Vec<Value>>,
    /// Deprecated or not.
    pub deprecated: Option<bool>,
    /// Archived or not (`DELETE` sets it; a PATCH may take it back).
    pub archived: Option<bool>,
}

/// A payload that fails a schema: where, which keyword, and the validator's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The JSON pointer of the failing value (`""` is the whole payload).
    pub pointer: String,
    /// The schema keyword that failed (`type`, `required`, ...).
    pub keyword: String,
    /// The validator's message.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at JSON pointer {:?}, keyword {:?}: {}", self.pointer, self.keyword, self.message)
    }
}

/// A compiled schema.
pub type Validator = jsonschema::Validator;

/// Compiles a schema as draft 2020-12 (a `$schema` naming another draft is refused, as is a
/// schema the draft's meta-schema refuses, and a `$ref` outside the document: no retrieval).
/// Patterns run on the linear-time `regex` crate, so one with a lookaround or a
/// backreference is refused.
///
/// # Errors
/// [`ServiceError::Validation`] naming `schema` and what is wrong.
pub fn compile(schema: &Value) -> Result<Validator, ServiceError> {
    if !(schema.is_object() || schema.is_boolean()) {
        return Err(ServiceError::Validation("schema: must be a JSON Schema (an object or a boolean)".into()));
    }
    if let Some(declared) = schema.get("$schema") {
        let ok = declared.as_str().is_some_and(|d| d.trim_end_matches('#') == DRAFT_2020_12);
        if !ok {
            return Err(ServiceError::Validation(format!(
                "schema: $schema must be {DRAFT_2020_12} (draft 2020-12) or absent, not {declared}"
            )));
        }
    }
    let text = schema.to_string();
    if text.len() > MAX_SCHEMA_BYTES {
        return Err(ServiceError::Validation(format!(
            "schema: {} bytes is over the limit of {MAX_SCHEMA_BYTES}",
            text.len()
        )));
    }
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        // The linear-time `regex` engine for `pattern` and `patternProperties`, not the
        // default backtracking one (fancy-regex, up to a million backtracking steps per
        // match): a schema and payload made to backtrack could burn ingest's CPU on every
        // string of every event. A pattern needing backtracking (a lookaround, a
        // backreference) does not compile: the schema is refused, naming it.
        .with_pattern_options(jsonschema::PatternOptions::regex())
        .build(schema)
        .map_err(|e| ServiceError::Validation(format!("schema: does not compile as JSON Schema draft 2020-12: {e}")))
}

/// The first way `instance` fails `validator`, if any.
pub fn violation(validator: &Validator, instance: &Value) -> Option<Violation> {
    validator.iter_errors(instance).next().map(|e| Violation {
        pointer: e.instance_path().to_string(),
        keyword: e.kind().keyword().to_string(),
        message: e.to_string(),
    })
}

/// Checks a description, examples and schema together: the schema compiles, every example
/// validates against it. Returns the compiled schema.
///
/// # Errors
/// [`ServiceError::Validation`] naming the field; for an example, `examples[i]` (from 0)
/// with the failing JSON pointer and keyword.
pub fn check(description: &str, schema: Option<&Value>, examples: &[Value]) -> Result<Option<Validator>, ServiceError> {
    if description.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(ServiceError::Validation(format!(
            "description: over the limit of {MAX_DESCRIPTION_CHARS} characters"
        )));
    }
    if examples.len() > MAX_EXAMPLES {
        return Err(ServiceError::Validation(format!(
            "examples: {} is over the limit of {MAX_EXAMPLES}",
            examples.len()
        )));
    }
    let size = serde_json::to_string(examples).map(|t| t.len()).unwrap_or(usize::MAX);
    if size > MAX_SCHEMA_BYTES {
        return Err(ServiceError::Validation(format!(
            "examples: {size} bytes is over the limit of {MAX_SCHEMA_BYTES}"
        )));
    }
    let Some(schema) = schema else { return Ok(None) };
    let validator = compile(schema)?;
    for (i, example) in examples.iter().enumerate() {
        if let Some(v) = violation(&validator, example) {
            return Err(ServiceError::Validation(format!("examples[{i}]: does not match the schema {v}")));
        }
    }
    Ok(Some(validator))
}

/// A new entry from a create request, checked ([`check`]; the name by the id rule).
///
/// # Errors
/// [`ServiceError::Validation`] naming the field.
pub fn create(draft: Draft, now: DateTime<Utc>) -> Result<EventType, ServiceError> {
    crate::domain::ids::client_id("name", &draft.name)?;
    let description = draft.description.unwrap_or_default();
    let examples = draft.examples.unwrap_or_default();
    check(&description, draft.schema.as_ref(), &examples)?;
    Ok(EventType {
        name: draft.name,
        description,
        schema: draft.schema,
        examples,
        deprecated: draft.deprecated.unwrap_or(false),
        archived: false,
        version: 1,
        created_at: now,
        updated_at: now,
        revision: 1,
    })
}

/// The entry after `patch`, checked as a whole ([`check`]), and whether its schema changed
/// (then its `version` is one more, and the store writes a version record).
///
/// # Errors
/// [`ServiceError::Validation`] naming the field.
pub fn update(current: &EventType, patch: Patch, now: DateTime<Utc>) -> Result<(EventType, bool), ServiceError> {
    let mut next = current.clone();
    if let Some(d) = patch.description {
        next.description = d;
    }
    if let Some(s) = patch.schema {
        next.schema = s;
    }
    if let Some(e) = patch.examples {
        next.examples = e;
    }
    if let Some(d) = patch.deprecated {
        next.deprecated = d;
    }
    if let Some(a) = patch.archived {
        next.archived = a;
    }
    check(&next.description, next.schema.as_ref(), &next.examples)?;
    let schema_changed = next.schema != current.schema;
    if schema_changed {
        next.version = current.version + 1;
    }
    next.updated_at = now;
    next.revision = current.revision + 1;
    Ok((next, schema_changed))
}

/// What a process knows of one event type: its archived flag and compiled schema, or that the
/// catalog has no such type.
#[derive(Clone)]
pub enum Known {
    /// Not in the catalog.
    Absent,
    /// In the catalog.
    Present {
        /// Archived: refused at ingest.
        archived: bool,
        /// The compiled schema, when it has one.
        validator: Option<Arc<Validator>>,
    },
}

/// The catalog entries a process has read, each kept for a while (`WEBHOOKS_EVENT_TYPE_CACHE_SECONDS`)
/// so ingest does not read the catalog per event. Types the catalog has (their compiled
/// schemas) and names it does not have are kept apart, each bounded: at most
/// [`Catalog::MAX_ENTRIES`] of the first and [`Catalog::MAX_ABSENT`] of the second, a full
/// set dropping the entry read longest ago. Open mode takes any type name, so a stream of
/// distinct unknown names (each a GetItem when first seen in a cache period: the catalog must
/// be asked) only ever turns over the absent names, never the compiled schemas.
#[derive(Default)]
pub struct Catalog {
    entries: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    present: HashMap<String, (DateTime<Utc>, Known)>,
    absent: HashMap<String, DateTime<Utc>>,
}

/// Drops the entry of `map` read longest ago (one pass: only when a full set takes a new
/// name, which follows a catalog read).
fn drop_oldest<V>(map: &mut HashMap<String, V>, at: impl Fn(&V) -> DateTime<Utc>) {
    if let Some(oldest) = map.iter().min_by_key(|(_, v)| at(v)).map(|(k, _)| k.clone()) {
        map.remove(&oldest);
    }
}

impl Catalog {
    /// Most event types of the catalog kept at once (their compiled schemas): 10,000.
    pub const MAX_ENTRIES: usize = 10_000;
    /// Most names the catalog does not have kept at once: 1,000 (a name and a time each).
    pub const MAX_ABSENT: usize = 1_000;

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What is known of `name`, if it was read at or after `fresh_after`.
    pub fn get(&self, name: &str, fresh_after: DateTime<Utc>) -> Option<Known> {
        let entries = self.lock();
        if let Some((at, known)) = entries.present.get(name) {
            return (*at >= fresh_after).then(|| known.clone());
        }
        entries.absent.get(name).filter(|at| **at >= fresh_after).map(|_| Known::Absent)
    }

    /// Keeps what was read of `name` at `at`.
    pub fn put(&self, name: &str, at: DateTime<Utc>, known: Known) {
        let mut entries = self.lock();
        entries.present.remove(name);
        entries.absent.remove(name);
        match known {
            Known::Absent => {
                if entries.absent.len() >= Self::MAX_ABSENT {
                    drop_oldest(&mut entries.absent, |at| *at);
                }
                entries.absent.insert(name.to_string(), at);
            }
            known => {
                if entries.present.len() >= Self::MAX_ENTRIES {
                    drop_oldest(&mut entries.present, |(at, _)| *at);
                }
                entries.present.insert(name.to_string(), (at, known));
            }
        }
    }

    /// Forgets `name` (this process changed it: its next event reads it again).
    pub fn forget(&self, name: &str) {
        let mut entries = self.lock();
        entries.present.remove(name);
        entries.absent.remove(name);
    }

    /// How many entries are kept: (types of the catalog, absent names).
    pub fn counts(&self) -> (usize, usize) {
        let entries = self.lock();
        (entries.present.len(), entries.absent.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    #[test]
    fn a_schema_that_does_not_compile_or_names_another_draft_is_refused() {
        for bad in [
            json!({"type": "nope"}),
            json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}),
            json!("object"),
            json!({"$ref": "https://example.com/other.json"}),
        ] {
            let e = compile(&bad).err().unwrap();
            assert_eq!(e.code(), "validation_error", "{bad}");
            assert!(e.to_string().starts_with("schema: "), "{e}");
        }
        assert!(compile(&json!({"$schema": DRAFT_2020_12, "type": "object"})).is_ok());
        // A 2020-12 keyword: prefixItems.
        let v = compile(&json!({"type": "array", "prefixItems": [{"type": "integer"}]})).unwrap();
        assert_eq!(violation(&v, &json!(["x"])).unwrap().keyword, "type");
    }

    #[test]
    fn patterns_run_in_linear_time_and_backtracking_ones_are_refused() {
        // A lookahead, a lookbehind and a backreference need a backtracking engine: refused.
        for pattern in [r"^(?=a)a+$", r"(?<=ab)c", r"^(a+)\1$", r"^(?!x)(a|aa)+$"] {
            let e = compile(&json!({"type": "string", "pattern": pattern})).err().unwrap();
            assert!(e.to_string().starts_with("schema: does not compile"), "{pattern}: {e}");
            let e = compile(&json!({"patternProperties": {pattern: true}})).err().unwrap();
            assert!(e.to_string().starts_with("schema: does not compile"), "{pattern}: {e}");
        }
        // A pattern that backtracks exponentially elsewhere is decided in linear time here.
        let v = compile(&json!({"type": "array", "items": {"type": "string", "pattern": "^(a|aa)+$"}})).unwrap();
        let long = format!("{}!", "a".repeat(10_000));
        let started = std::time::Instant::now();
        assert_eq!(violation(&v, &json!(vec![long; 20])).unwrap().keyword, "pattern");
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
        assert!(violation(&v, &json!(["aaa"])).is_none());
    }

    #[test]
    fn an_example_that_fails_is_named_with_pointer_and_keyword() {
        let schema = json!({"type": "object", "required": ["amount"],
            "properties": {"amount": {"type": "integer"}}});
        let draft = |examples| Draft {
            name: "order.paid".into(),
            schema: Some(schema.clone()),
            examples: Some(examples),
            ..Draft::default()
        };
        assert!(create(draft(vec![json!({"amount": 1})]), now()).is_ok());
        let e = create(draft(vec![json!({"amount": 1}), json!({"amount": "1"})]), now()).unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("examples[1]: "), "{text}");
        assert!(text.contains("\"/amount\"") && text.contains("\"type\""), "{text}");
        let e = create(draft(vec![json!({})]), now()).unwrap_err();
        assert!(e.to_string().contains("\"required\""), "{e}");
    }

    #[test]
    fn the_catalog_keeps_an_entry_until_it_is_stale_or_forgotten() {
        let catalog = Catalog::default();
        let t = now();
        catalog.put("a.b", t, Known::Absent);
        assert!(matches!(catalog.get("a.b", t - chrono::Duration::seconds(60)), Some(Known::Absent)));
        assert!(catalog.get("a.b", t + chrono::Duration::seconds(1)).is_none(), "read before the freshness bound");
        catalog.forget("a.b");
        assert!(catalog.get("a.b", t - chrono::Duration::seconds(60)).is_none());
    }

    #[test]
    fn unknown_names_never_flush_the_compiled_schemas_and_are_bounded() {
        let catalog = Catalog::default();
        let t = now();
        let validator = Arc::new(compile(&json!({"type": "object"})).unwrap());
        catalog.put("order.paid", t, Known::Present { archived: false, validator: Some(validator) });
        for i in 0..Catalog::MAX_ENTRIES + 10 {
            catalog.put(&format!("junk.{i}"), t + chrono::Duration::milliseconds(i as i64), Known::Absent);
        }
        let fresh = t - chrono::Duration::seconds(60);
        assert!(
            matches!(catalog.get("order.paid", fresh), Some(Known::Present { validator: Some(_), .. })),
            "the compiled schema survived 10,010 unknown names"
        );
        assert_eq!(catalog.counts(), (1, Catalog::MAX_ABSENT));
        // The newest absent names are kept, the oldest dropped.
        let last = format!("junk.{}", Catalog::MAX_ENTRIES + 9);
        assert!(matches!(catalog.get(&last, fresh), Some(Known::Absent)));
        assert!(catalog.get("junk.0", fresh).is_none());
        // A name created later is known as present, not absent.
        catalog.put("junk.0", t, Known::Present { archived: true, validator: None });
        assert!(matches!(catalog.get("junk.0", fresh), Some(Known::Present { archived: true, .. })));
    }

    #[test]
    fn a_schema_change_bumps_the_version_and_other_changes_do_not() {
        let et = create(Draft { name: "a.b".into(), ..Draft::default() }, now()).unwrap();
        let (same, changed) = update(&et, Patch { description: Some("x".into()), ..Patch::default() }, now()).unwrap();
        assert!(!changed);
        assert_eq!((same.version, same.revision), (1, 2));
        let patch = Patch { schema: Some(Some(json!({"type": "object"}))), ..Patch::default() };
        let (next, changed) = update(&same, patch, now()).unwrap();
        assert!(changed);
        assert_eq!(next.version, 2);
        let (removed, changed) = update(&next, Patch { schema: Some(None), ..Patch::default() }, now()).unwrap();
        assert!(changed && removed.schema.is_none() && removed.version == 3);
        assert!(create(Draft { name: "bad name".into(), ..Draft::default() }, now()).is_err());
    }
}
