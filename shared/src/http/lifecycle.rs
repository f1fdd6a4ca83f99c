//! The data lifecycle's routes (issue #39 parts 2 and 3), merged into the admin router by
//! [`crate::http::api`]:
//!
//! | route | answer |
//! |---|---|
//! | `GET /v1/tenants/{tenant_id}/settings` | 200 [`SettingsView`]: the retention overrides, what applies, the least event retention accepted |
//! | `PUT /v1/tenants/{tenant_id}/settings` `{"delivered_retention_days"?, "exhausted_retention_days"?, "event_retention_days"?}` | 200 [`SettingsView`]; each absent or `null` is the stack's; 422 naming the bound an override breaks; 409 `tenant_purging` |
//! | `DELETE /v1/tenants/{tenant_id}` | 202 [`crate::domain::model::Job`] of kind `purge` (`GET /v1/jobs/{id}` follows it); the purge under way when one is |
//! | `POST /v1/events/{id}/expunge?tenant_id=` | 200 [`Expunged`]; 404, or 409 naming the tenants when the id is in several and `tenant_id` is not given |

use super::extract::{NoBody, NoParams, Params, PathParam, is_blank, parse_body};
use crate::App;
use crate::domain::ids::{EventId, TenantId};
use crate::error::ServiceError;
use crate::service::tenant_settings::{self, Expunged, NewSettings, SettingsView};
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use bytes::Bytes;
use serde::Deserialize;

/// `PUT /v1/tenants/{tenant_id}/settings`'s body.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SettingsBody {
    delivered_retention_days: Option<u32>,
    exhausted_retention_days: Option<u32>,
    event_retention_days: Option<u32>,
}

async fn get_settings(
    State(app): State<App>,
    PathParam(tenant_id): PathParam,
    _: NoParams,
) -> Result<Response, ServiceError> {
    let view: SettingsView = tenant_settings::get_settings(&app, &TenantId::parse("tenant_id", tenant_id)?).await?;
    Ok(Json(view).into_response())
}

async fn put_settings(
    State(app): State<App>,
    PathParam(tenant_id): PathParam,
    _: NoParams,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServiceError> {
    let b: SettingsBody = match &body {
        Ok(bytes) if is_blank(bytes) => SettingsBody::default(),
        _ => parse_body(body)?,
    };
    let new = NewSettings {
        delivered_retention_days: b.delivered_retention_days,
        exhausted_retention_days: b.exhausted_retention_days,
        event_retention_days: b.event_retention_days,
    };
    Ok(Json(tenant_settings::put_settings(&app, &TenantId::parse("tenant_id", tenant_id)?, new).await?).into_response())
}

async fn delete_tenant(
    State(app): State<App>,
    PathParam(tenant_id): PathParam,
    _: NoParams,
    _: NoBody,
) -> Result<Response, ServiceError> {
    let job = crate::service::purge::delete_tenant(&app, &TenantId::parse("tenant_id", tenant_id)?).await?;
    Ok((StatusCode::ACCEPTED, Json(job)).into_response())
}

/// `POST /v1/events/{id}/expunge`'s parameters.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpungeParams {
    tenant_id: Option<String>,
}

async fn expunge(
    State(app): State<App>,
    PathParam(id): PathParam,
    Params(p): Params<ExpungeParams>,
    _: NoBody,
) -> Result<Response, ServiceError> {
    let tenant = p.tenant_id.filter(|t| !t.is_empty()).map(|t| TenantId::parse("tenant_id", t)).transpose()?;
    let done: Expunged = tenant_settings::expunge_event(&app, &EventId::lookup(&id)?, tenant.as_ref()).await?;
    Ok(Json(done).into_response())
}

/// The lifecycle's routes (admin).
pub(super) fn routes() -> Router<App> {
    Router::new()
        .route("/v1/tenants/{tenant_id}/settings", get(get_settings).put(put_settings))
        .route("/v1/tenants/{tenant_id}", delete(delete_tenant))
        .route("/v1/events/{id}/expunge", post(expunge))
}
