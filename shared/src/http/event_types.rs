//! The event-type catalog's routes ([`crate::service::event_types`]), merged into the admin
//! router by [`crate::http::api`]:
//!
//! | route | answer |
//! |---|---|
//! | `POST /v1/event-types` `{"name", "description"?, "schema"?, "examples"?, "deprecated"?}` | 201 [`EventType`] |
//! | `GET /v1/event-types?limit=&cursor=` | 200 `{"data", "next_cursor"}`, by name |
//! | `GET /v1/event-types/{name}` | 200 [`EventType`]; `?version=N`: 200 [`crate::domain::event_type::EventTypeVersion`] |
//! | `PATCH /v1/event-types/{name}` `{"description"?, "schema"?, "examples"?, "deprecated"?, "archived"?}` | 200 [`EventType`]; a new schema is a new `version` (`"schema": null` removes it) |
//! | `DELETE /v1/event-types/{name}` | 200 [`EventType`], archived (it stays readable) |
//! | `POST /v1/endpoints/{id}/send-example` `{"event_type"}` | 200 [`crate::service::test_sends::TestSend`]: the type's first example, signed, POSTed to the endpoint now (not stored, not retried) |
//!
//! A schema that does not compile as JSON Schema draft 2020-12, or an example that fails it,
//! is 422 `validation_error` naming the field (`examples[i]` with the failing JSON pointer
//! and keyword). A name with `/` is percent-encoded in the path (`%2F`).

use super::api::check_limit;
use super::extract::{NoBody, NoParams, Params, PathParam, parse_body, required};
use crate::App;
use crate::domain::event_type::{Draft, EventType, Patch};
use crate::error::ServiceError;
use crate::service::event_types;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// A field that may be `null` (present and null is `Some(Value::Null)`; absent is `None`).
fn nullable<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    name: Option<String>,
    description: Option<String>,
    schema: Option<Value>,
    examples: Option<Vec<Value>>,
    deprecated: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PatchBody {
    description: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    schema: Option<Value>,
    examples: Option<Vec<Value>>,
    deprecated: Option<bool>,
    archived: Option<bool>,
}

/// `GET /v1/event-types`'s parameters.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    limit: Option<String>,
    cursor: Option<String>,
}

/// `GET /v1/event-types/{name}`'s parameters.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetParams {
    version: Option<String>,
}

async fn create(
    State(app): State<App>,
    _: NoParams,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServiceError> {
    let b: CreateBody = parse_body(body)?;
    let draft = Draft {
        name: required(b.name, "name")?,
        description: b.description,
        schema: b.schema,
        examples: b.examples,
        deprecated: b.deprecated,
    };
    Ok((StatusCode::CREATED, Json(event_types::create(&app, draft).await?)).into_response())
}

async fn list(State(app): State<App>, Params(p): Params<ListParams>) -> Result<Response, ServiceError> {
    let limit = check_limit(p.limit)?;
    let page = event_types::list(&app, limit, p.cursor.as_deref().filter(|c| !c.is_empty())).await?;
    Ok(Json(page).into_response())
}

async fn get_one(
    State(app): State<App>,
    PathParam(name): PathParam,
    Params(p): Params<GetParams>,
) -> Result<Response, ServiceError> {
    match p.version.filter(|v| !v.is_empty()) {
        None => Ok(Json(event_types::get(&app, &name).await?).into_response()),
        Some(v) => {
            let version = v.parse::<u64>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                ServiceError::Validation(format!(
                    "version: {:?} is not a whole number from 1",
                    crate::domain::ids::shown(&v)
                ))
            })?;
            Ok(Json(event_types::get_version(&app, &name, version).await?).into_response())
        }
    }
}

async fn patch(
    State(app): State<App>,
    PathParam(name): PathParam,
    _: NoParams,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServiceError> {
    let b: PatchBody = parse_body(body)?;
    let patch = Patch {
        description: b.description,
        schema: b.schema.map(|s| Some(s).filter(|s| !s.is_null())),
        examples: b.examples,
        deprecated: b.deprecated,
        archived: b.archived,
    };
    let updated: EventType = event_types::update(&app, &name, patch).await?;
    Ok(Json(updated).into_response())
}

async fn archive(
    State(app): State<App>,
    PathParam(name): PathParam,
    _: NoParams,
    _: NoBody,
) -> Result<Response, ServiceError> {
    Ok(Json(event_types::archive(&app, &name).await?).into_response())
}

/// `POST /v1/endpoints/{id}/send-example`'s body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SendExampleBody {
    event_type: Option<String>,
}

async fn send_example(
    State(app): State<App>,
    PathParam(id): PathParam,
    _: NoParams,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServiceError> {
    let b: SendExampleBody = parse_body(body)?;
    let event_type = required(b.event_type, "event_type")?;
    Ok(Json(
        crate::service::test_sends::send_example(&app, &crate::domain::ids::EndpointId::lookup(&id)?, &event_type)
            .await?,
    )
    .into_response())
}

/// The catalog's routes (admin).
pub(super) fn routes() -> Router<App> {
    Router::new()
        .route("/v1/event-types", post(create).get(list))
        .route("/v1/event-types/{name}", get(get_one).patch(patch).delete(archive))
        .route("/v1/endpoints/{id}/send-example", post(send_example))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_null_schema_in_a_patch_removes_it_and_an_absent_one_leaves_it() {
        let b: PatchBody = serde_json::from_str(r#"{"schema": null}"#).unwrap();
        assert_eq!(b.schema, Some(Value::Null));
        let b: PatchBody = serde_json::from_str(r#"{"description": "x"}"#).unwrap();
        assert_eq!(b.schema, None);
        assert!(serde_json::from_str::<PatchBody>(r#"{"name": "x"}"#).is_err());
    }
}
