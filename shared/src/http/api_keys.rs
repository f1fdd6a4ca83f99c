//! The producers' API keys' routes ([`crate::service::api_keys`]), merged into the admin
//! router by [`crate::http::api`] (so IAM guards them on AWS, as every admin route):
//!
//! | route | answer |
//! |---|---|
//! | `POST /v1/api-keys` `{"name"?, "tenant_ids" \| "all_tenants": true, "expires_at"?}` | 201 [`crate::service::api_keys::Created`]: the record and `key`, shown this once |
//! | `GET /v1/api-keys?limit=&cursor=` | 200 `{"data", "next_cursor"}`, oldest first, never a key |
//! | `GET /v1/api-keys/{id}` | 200 [`ApiKey`] |
//! | `DELETE /v1/api-keys/{id}` | 200 [`ApiKey`] with `revoked_at`: refused by every ingest process within `WEBHOOKS_API_KEY_CACHE_SECONDS` |
//!
//! A key names its tenants (`tenant_ids`, 1 to 100) or is for every tenant only when asked
//! (`"all_tenants": true`): neither, or both, is 422 naming both fields. Keys stored before
//! this rule with no `tenant_ids` keep their meaning and answer `"all_tenants": true`.
//! `expires_at` is an RFC 3339 time in the future; absent: the key does not expire.

use super::api::check_limit;
use super::extract::{NoBody, NoParams, Params, PathParam, parse_body};
use crate::App;
use crate::domain::api_key::{ApiKey, Draft};
use crate::error::ServiceError;
use crate::service::api_keys;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    name: Option<String>,
    tenant_ids: Option<Vec<String>>,
    all_tenants: Option<bool>,
    expires_at: Option<String>,
}

/// `GET /v1/api-keys`'s parameters.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    limit: Option<String>,
    cursor: Option<String>,
}

async fn create(
    State(app): State<App>,
    _: NoParams,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServiceError> {
    let b: CreateBody = match &body {
        Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => {
            CreateBody { name: None, tenant_ids: None, all_tenants: None, expires_at: None }
        }
        _ => parse_body(body)?,
    };
    let expires_at = super::api::time_param("expires_at", b.expires_at)?;
    let draft =
        Draft { name: b.name, tenant_ids: b.tenant_ids, all_tenants: b.all_tenants.unwrap_or(false), expires_at };
    Ok((StatusCode::CREATED, Json(api_keys::create(&app, draft).await?)).into_response())
}

async fn list(State(app): State<App>, Params(p): Params<ListParams>) -> Result<Response, ServiceError> {
    let limit = check_limit(p.limit)?;
    let page = api_keys::list(&app, limit, p.cursor.as_deref().filter(|c| !c.is_empty())).await?;
    Ok(Json(page).into_response())
}

async fn get_one(State(app): State<App>, PathParam(id): PathParam, _: NoParams) -> Result<Response, ServiceError> {
    let key: ApiKey = api_keys::get(&app, &id).await?;
    Ok(Json(key).into_response())
}

async fn revoke(
    State(app): State<App>,
    PathParam(id): PathParam,
    _: NoParams,
    _: NoBody,
) -> Result<Response, ServiceError> {
    Ok(Json(api_keys::revoke(&app, &id).await?).into_response())
}

/// The API keys' routes (admin).
pub(super) fn routes() -> Router<App> {
    Router::new().route("/v1/api-keys", post(create).get(list)).route("/v1/api-keys/{id}", get(get_one).delete(revoke))
}
