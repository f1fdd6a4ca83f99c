//! The event-type catalog's service: create, read, list, change and archive entries
//! ([`crate::domain::event_type`]), and [`enforce`], the check ingest makes of every event
//! before it writes anything.

use crate::App;
use crate::config::EventTypesMode;
use crate::domain::event_type::{self, Draft, EventType, EventTypeVersion, Known, Patch};
use crate::domain::ids;
use crate::error::ServiceError;
use crate::store::{Page, StoreError};
use std::sync::Arc;

/// Tries of a change that loses its guard to another change (each reads the entry again).
const SAVE_TRIES: usize = 3;

fn not_found(name: &str) -> ServiceError {
    ServiceError::NotFound(format!("event type {}: no such event type", ids::shown(name)))
}

/// Creates an event type (version 1).
///
/// # Errors
/// [`ServiceError::Validation`] (422) naming the field: a name outside the id rule, a schema
/// that does not compile as draft 2020-12, an example that fails it (`examples[i]` with the
/// failing JSON pointer and keyword); [`ServiceError::Conflict`] (409) when the name is taken;
/// [`ServiceError::Unavailable`] when DynamoDB failed.
pub async fn create(app: &App, draft: Draft) -> Result<EventType, ServiceError> {
    let created = event_type::create(draft, app.clock.now())?;
    match app.store.create_event_type(&created).await {
        Ok(()) => {}
        Err(StoreError::AlreadyExists) => {
            return Err(ServiceError::Conflict(format!(
                "event type {}: already exists; change it with PATCH /v1/event-types/{}",
                created.name, created.name
            )));
        }
        Err(e) => return Err(e.into()),
    }
    app.catalog.forget(&created.name);
    Ok(created)
}

/// An event type by name.
///
/// # Errors
/// [`ServiceError::NotFound`] (404); [`ServiceError::Unavailable`] when DynamoDB failed.
pub async fn get(app: &App, name: &str) -> Result<EventType, ServiceError> {
    ids::lookup_id("event type", name).map_err(|_| not_found(name))?;
    app.store.get_event_type(name).await?.ok_or_else(|| not_found(name))
}

/// One version of an event type's schema (1 to its current `version`).
///
/// # Errors
/// [`ServiceError::NotFound`] (404) for an unknown type or version; [`ServiceError::Unavailable`]
/// when DynamoDB failed.
pub async fn get_version(app: &App, name: &str, version: u64) -> Result<EventTypeVersion, ServiceError> {
    ids::lookup_id("event type", name).map_err(|_| not_found(name))?;
    app.store
        .event_type_version(name, version)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("event type {}: no version {version}", ids::shown(name))))
}

/// A page of the catalog by name.
///
/// # Errors
/// [`ServiceError::Validation`] for a cursor this listing did not hand out;
/// [`ServiceError::Unavailable`] when DynamoDB failed.
pub async fn list(app: &App, limit: usize, cursor: Option<&str>) -> Result<Page<EventType>, ServiceError> {
    Ok(app.store.list_event_types(limit, cursor).await?)
}

/// Changes an event type: a new schema makes a new version (the old ones stay readable).
///
/// # Errors
/// As [`create`] for the fields; [`ServiceError::NotFound`] (404); [`ServiceError::Conflict`]
/// (409) when other changes kept coming first ([`SAVE_TRIES`] reads).
pub async fn update(app: &App, name: &str, patch: Patch) -> Result<EventType, ServiceError> {
    for _ in 0..SAVE_TRIES {
        let current = get(app, name).await?;
        let (next, new_version) = event_type::update(&current, patch.clone(), app.clock.now())?;
        if app.store.save_event_type(&next, current.revision, new_version).await? {
            app.catalog.forget(name);
            return Ok(next);
        }
    }
    Err(ServiceError::Conflict(format!(
        "event type {}: changed by others while this change was made; read it and try again",
        ids::shown(name)
    )))
}

/// Archives an event type (`DELETE`): ingest refuses it from then on (within
/// `WEBHOOKS_EVENT_TYPE_CACHE_SECONDS` in other processes); the entry stays readable.
///
/// # Errors
/// As [`update`].
pub async fn archive(app: &App, name: &str) -> Result<EventType, ServiceError> {
    update(app, name, Patch { archived: Some(true), ..Patch::default() }).await
}

/// Most catalog pages [`check_subscription`] reads (100 entries each): a catalog of more than
/// 10,000 types is checked on its first 10,000 (by name), and a filter that matches none of
/// them is let through rather than refused on a partial read.
const SUBSCRIPTION_CHECK_PAGES: usize = 100;

/// With `WEBHOOKS_EVENT_TYPES=registered`, an endpoint's `event_types` filter must name what
/// the catalog has: each entry (a name, `*`, or a prefix ending in `.*`) must match at least
/// one type in the catalog that is not archived, or the create or PATCH is refused. In `open`
/// mode, or with no filter (every type), nothing is checked. Reads the catalog (one Query of
/// its partition per 100 types). An endpoint of the operational tenant
/// ([`crate::domain::operational::TENANT`]) is checked against the operational event types
/// ([`crate::domain::operational::EVENT_TYPES`]) instead, with no read.
///
/// # Errors
/// [`ServiceError::UnknownEventType`] (422 `unknown_event_type`) naming the first entry that
/// matches nothing, as `event_types[i]`; [`ServiceError::Unavailable`] when the catalog could
/// not be read.
pub async fn check_subscription(app: &App, tenant_id: &str, filter: Option<&[String]>) -> Result<(), ServiceError> {
    let (EventTypesMode::Registered, Some(filter)) = (app.config.event_types, filter) else { return Ok(()) };
    let operational = tenant_id == crate::domain::operational::TENANT;
    let mut names: Vec<String> = Vec::new();
    let mut cursor: Option<String> = None;
    let mut complete = operational;
    if operational {
        names.extend(crate::domain::operational::EVENT_TYPES.iter().map(|t| t.to_string()));
    }
    for _ in 0..SUBSCRIPTION_CHECK_PAGES {
        if operational {
            break;
        }
        let page = app.store.list_event_types(100, cursor.as_deref()).await?;
        names.extend(page.data.into_iter().filter(|e| !e.archived).map(|e| e.name));
        cursor = page.next_cursor;
        if cursor.is_none() {
            complete = true;
            break;
        }
    }
    let unmatched = filter
        .iter()
        .enumerate()
        .find(|(_, pattern)| !names.iter().any(|name| crate::domain::model::type_matches(pattern, name)));
    match unmatched {
        Some((i, pattern)) if complete => Err(ServiceError::UnknownEventType(format!(
            "event_types[{i}]: {} matches no event type in the catalog, and this stack takes only registered \
             types (WEBHOOKS_EVENT_TYPES=registered); create the type with POST /v1/event-types first, or \
             subscribe to one the catalog has (GET /v1/event-types)",
            ids::shown(pattern)
        ))),
        _ => Ok(()),
    }
}

/// What this process knows of `name`: from its [`crate::domain::event_type::Catalog`] while
/// fresh (`config.event_type_cache`), else read (one GetItem) and compiled.
async fn known(app: &App, name: &str) -> Result<Known, ServiceError> {
    let now = app.clock.now();
    let ttl = chrono::Duration::from_std(app.config.event_type_cache).unwrap_or(chrono::Duration::zero());
    if let Some(k) = app.catalog.get(name, now - ttl).filter(|_| !ttl.is_zero()) {
        return Ok(k);
    }
    let known = match app.store.get_event_type(name).await? {
        None => Known::Absent,
        Some(e) => {
            // Stored schemas compiled when they were written; one that no longer does (a
            // validator upgrade) refuses its events rather than letting them through unchecked.
            let validator = e
                .schema
                .as_ref()
                .map(event_type::compile)
                .transpose()
                .map_err(|err| ServiceError::Internal(format!("event type {name}: stored schema: {err}")))?
                .map(Arc::new);
            Known::Present { archived: e.archived, validator }
        }
    };
    app.catalog.put(name, now, known.clone());
    Ok(known)
}

/// The catalog's check of an event before ingest writes anything: a type in the catalog must
/// not be archived and its payload must satisfy its schema; with `WEBHOOKS_EVENT_TYPES=registered`
/// the type must be in the catalog. `payload` is the event's payload as ingest parsed it
/// ([`crate::service::ingest::parse_payload`]: at most
/// [`crate::domain::payload::MAX_PAYLOAD_DEPTH`] levels deep).
///
/// # Errors
/// - [`ServiceError::SchemaMismatch`] (422 `schema_mismatch`) naming the failing JSON pointer
///   and keyword;
/// - [`ServiceError::EventTypeArchived`] (422 `event_type_archived`);
/// - [`ServiceError::UnknownEventType`] (422 `unknown_event_type`), registered mode only;
/// - [`ServiceError::Unavailable`] when the catalog could not be read.
pub async fn enforce(app: &App, name: &str, payload: &serde_json::Value) -> Result<(), ServiceError> {
    match known(app, name).await? {
        Known::Absent => match app.config.event_types {
            EventTypesMode::Open => Ok(()),
            EventTypesMode::Registered => Err(ServiceError::UnknownEventType(format!(
                "event_type: {} is not in the event-type catalog, and this stack takes only registered types \
                 (WEBHOOKS_EVENT_TYPES=registered); create it with POST /v1/event-types first",
                ids::shown(name)
            ))),
        },
        Known::Present { archived: true, .. } => Err(ServiceError::EventTypeArchived(format!(
            "event_type: {name} is archived in the event-type catalog; nothing was stored"
        ))),
        Known::Present { validator: None, .. } => Ok(()),
        Known::Present { validator: Some(v), .. } => match event_type::violation(&v, payload) {
            None => Ok(()),
            Some(violation) => Err(ServiceError::SchemaMismatch(format!(
                "payload: does not match the schema of event type {name}: {violation}; nothing was stored"
            ))),
        },
    }
}
