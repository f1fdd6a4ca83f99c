//! The HTTP API (ingest and admin) as an axum router, served by API Gateway through
//! `lambda_http` in the Lambda binaries and by the local runtime directly.
//!
//! | route | answer |
//! |---|---|
//! | `POST /v1/events` (`http::events`) | 202 [`crate::service::ingest::Accepted`]; with `"mode": "sync"`, 200 or 502 with the attempt. With `Authorization: Bearer <key>`, the key is checked ([`crate::service::api_keys::authenticate`]: 401 `invalid_api_key`) and must name the tenant (403 `tenant_not_allowed`); on a route IAM does not guard a key is required (401 `api_key_required`) |
//! | `POST /v1/endpoints` | 201 [`endpoints::EndpointView`] with the secret |
//! | `GET /v1/endpoints/{id}` | 200 [`endpoints::EndpointView`] |
//! | `PATCH /v1/endpoints/{id}` | 200 [`endpoints::EndpointView`] |
//! | `POST /v1/endpoints/{id}/disable` | 200 [`endpoints::EndpointView`]; its deliveries are held |
//! | `POST /v1/endpoints/{id}/enable` | 200 [`endpoints::EndpointView`] + `release_job` |
//! | `GET /v1/endpoints?tenant_id=&limit=&cursor=` | 200 `{"data", "next_cursor"}` |
//! | `GET /v1/endpoints?attention=stopped\|failing&limit=&cursor=` | 200 `{"data", "next_cursor"}`: endpoints stopped or failing across tenants, newest first ([`crate::service::attention`]) |
//! | `DELETE /v1/endpoints/{id}?force=` | 200; 409 with unfinished deliveries unless `force=true` |
//! | `GET /v1/endpoints/{id}/stats` | 200 [`endpoints::EndpointStats`] |
//! | `POST /v1/endpoints/{id}/rotate-secret` `{"secret"?}` | 200 endpoint with the new secret |
//! | `POST /v1/endpoints/{id}/recover` `{"since", "until"?}` | 202 [`crate::domain::model::Job`] |
//! | `GET /v1/events/{id}?tenant_id=` | 200 [`deliveries::EventView`]; 409 naming the tenants when the id is in several and `tenant_id` is not given |
//! | `GET /v1/jobs/{id}` | 200 [`crate::domain::model::Job`] (progress of a release, recover or probe) |
//! | `GET /v1/deliveries/{id}` | 200 [`deliveries::DeliveryView`] |
//! | `GET /v1/deliveries?status=&endpoint_id=&limit=&cursor=` | 200 `{"data", "next_cursor"}` |
//! | `POST /v1/deliveries/{id}/replay` | 202 [`deliveries::DeliveryView`] |
//! | `/v1/event-types`, `/v1/event-types/{name}` | the event-type catalog: see `http::event_types` |
//! | `/v1/api-keys`, `/v1/api-keys/{id}` | producers' API keys: see `http::api_keys` |
//! | `/v1/tenants/{tenant_id}/settings`, `DELETE /v1/tenants/{tenant_id}`, `POST /v1/events/{id}/expunge` | retention, purge, expunge: see `http::lifecycle` |
//! | `POST /v1/tenants/{tenant_id}/portal-sessions` `{"ttl_seconds"?}` | 201 [`crate::http::ui::token::PortalSession`]: a signed portal URL for one tenant |
//!
//! Every error is `{"error": {"code", "message"}}` with the status of [`ServiceError`]. A
//! request body must be declared `Content-Type: application/json` (415
//! `unsupported_media_type` otherwise: the guard against cross-site browser POSTs, see
//! `http::extract::require_json`). A
//! route takes only the query parameters listed above (most take none): any other, such as a
//! misspelt one, is 422 `validation_error` naming it, as an unknown body field is. Every
//! parameter is checked before any AWS call: ids by the rule of [`crate::domain::ids`], a cursor
//! against the listing it must come from.

use super::extract::{NoBody, NoParams, Params, PathParam, is_blank, parse_body};
use crate::App;
use crate::config::MAX_PAYLOAD_BYTES;
use crate::domain::ids::{DeliveryId, EndpointId, EventId, JobId, TenantId};
use crate::domain::model::DeliveryStatus;
use crate::error::ServiceError;
use crate::service::api_keys::Caller;
use crate::service::{deliveries, endpoints};
use crate::store::DeliveryQuery;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use serde::Deserialize;

/// Largest request body read, in bytes: room for a 256 KiB payload and its envelope. Larger
/// bodies get 413 before they are parsed.
pub const MAX_BODY_BYTES: usize = MAX_PAYLOAD_BYTES + 64 * 1024;

fn parse_object(
    body: Result<Bytes, BytesRejection>,
) -> Result<serde_json::Map<String, serde_json::Value>, ServiceError> {
    match parse_body::<serde_json::Value>(body)? {
        serde_json::Value::Object(map) => Ok(map),
        _ => Err(ServiceError::Validation("body: must be a JSON object".into())),
    }
}

async fn post_endpoint(
    State(app): State<App>,
    _: NoParams,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServiceError> {
    let created = endpoints::create_endpoint(&app, &parse_object(body)?).await?;
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

async fn patch_endpoint(
    State(app): State<App>,
    PathParam(id): PathParam,
    _: NoParams,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServiceError> {
    // The body is checked first, then the id (as before ids were typed).
    let body = parse_object(body)?;
    Ok(Json(endpoints::update_endpoint(&app, &EndpointId::lookup(&id)?, &body).await?).into_response())
}

async fn enable_endpoint(
    State(app): State<App>,
    PathParam(id): PathParam,
    _: NoParams,
    _: NoBody,
) -> Result<Response, ServiceError> {
    let (endpoint, job) = endpoints::enable_endpoint(&app, &EndpointId::lookup(&id)?).await?;
    let mut body = serde_json::to_value(endpoint).map_err(|e| ServiceError::Internal(e.to_string()))?;
    body["release_job"] = serde_json::to_value(job).map_err(|e| ServiceError::Internal(e.to_string()))?;
    Ok(Json(body).into_response())
}

async fn disable_endpoint(
    State(app): State<App>,
    PathParam(id): PathParam,
    _: NoParams,
    _: NoBody,
) -> Result<Response, ServiceError> {
    Ok(Json(endpoints::disable_endpoint(&app, &EndpointId::lookup(&id)?).await?).into_response())
}

/// `GET /v1/endpoints`'s parameters.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EndpointListParams {
    tenant_id: Option<String>,
    attention: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

async fn list_endpoints(
    State(app): State<App>,
    Params(p): Params<EndpointListParams>,
) -> Result<Response, ServiceError> {
    if let Some(a) = p.attention.as_deref().filter(|a| !a.is_empty()) {
        let why = crate::store::Attention::parse(a).ok_or_else(|| {
            ServiceError::Validation(format!(
                "attention: {:?} is not one of stopped, failing",
                crate::domain::ids::shown(a)
            ))
        })?;
        if p.tenant_id.as_deref().is_some_and(|t| !t.is_empty()) {
            return Err(ServiceError::Validation(
                "tenant_id, attention: give one (a tenant's endpoints, or those needing attention across tenants)"
                    .into(),
            ));
        }
        let limit = check_limit(p.limit)?;
        let cursor = p.cursor.as_deref().filter(|c| !c.is_empty());
        return Ok(Json(crate::service::attention::list(&app, why, limit, cursor).await?).into_response());
    }
    let tenant = TenantId::parse("tenant_id", p.tenant_id.unwrap_or_default())?;
    let limit = check_limit(p.limit)?;
    Ok(Json(endpoints::list_endpoints(&app, &tenant, limit, p.cursor.as_deref().filter(|c| !c.is_empty())).await?)
        .into_response())
}

/// `DELETE /v1/endpoints/{id}`'s parameters.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteParams {
    force: Option<bool>,
}

async fn delete_endpoint(
    State(app): State<App>,
    PathParam(id): PathParam,
    Params(p): Params<DeleteParams>,
    _: NoBody,
) -> Result<Response, ServiceError> {
    let done = endpoints::delete_endpoint(&app, &EndpointId::lookup(&id)?, p.force.unwrap_or(false)).await?;
    Ok(Json(serde_json::json!({
        "id": id,
        "deleted": true,
        "deliveries_ended": done.deliveries_ended,
        "job_id": done.job_id,
    }))
    .into_response())
}

async fn endpoint_stats(
    State(app): State<App>,
    PathParam(id): PathParam,
    _: NoParams,
) -> Result<Response, ServiceError> {
    Ok(Json(endpoints::endpoint_stats(&app, &EndpointId::lookup(&id)?).await?).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RotateBody {
    secret: Option<String>,
}

async fn rotate_secret(
    State(app): State<App>,
    PathParam(id): PathParam,
    _: NoParams,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServiceError> {
    let b: RotateBody = match &body {
        Ok(bytes) if is_blank(bytes) => RotateBody { secret: None },
        _ => parse_body(body)?,
    };
    Ok(Json(endpoints::rotate_secret(&app, &EndpointId::lookup(&id)?, b.secret.as_deref()).await?).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecoverBody {
    since: Option<String>,
    until: Option<String>,
}

async fn recover(
    State(app): State<App>,
    PathParam(id): PathParam,
    _: NoParams,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServiceError> {
    let b: RecoverBody = parse_body(body)?;
    let since = time_param("since", b.since)?.ok_or_else(|| ServiceError::Validation("since: is required".into()))?;
    let until = time_param("until", b.until)?;
    let job = endpoints::recover(&app, &EndpointId::lookup(&id)?, since, until).await?;
    Ok((StatusCode::ACCEPTED, Json(job)).into_response())
}

/// `GET /v1/events/{id}`'s parameters.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventParams {
    tenant_id: Option<String>,
}

async fn get_event(
    State(app): State<App>,
    PathParam(id): PathParam,
    Params(p): Params<EventParams>,
) -> Result<Response, ServiceError> {
    let tenant = p.tenant_id.filter(|t| !t.is_empty()).map(|t| TenantId::parse("tenant_id", t)).transpose()?;
    Ok(Json(deliveries::get_event(&app, &EventId::lookup(&id)?, tenant.as_ref()).await?).into_response())
}

/// A listing's `limit`: 50 when absent or empty (`?limit=`, as every other empty parameter),
/// else a whole number from 1 to 100.
pub(super) fn check_limit(limit: Option<String>) -> Result<usize, ServiceError> {
    let Some(v) = limit.filter(|v| !v.is_empty()) else { return Ok(50) };
    match v.parse::<usize>() {
        Ok(n) if (1..=100).contains(&n) => Ok(n),
        _ => Err(ServiceError::Validation(format!(
            "limit: {:?} is not a whole number from 1 to 100",
            crate::domain::ids::shown(&v)
        ))),
    }
}

async fn get_job(State(app): State<App>, PathParam(id): PathParam, _: NoParams) -> Result<Response, ServiceError> {
    Ok(Json(deliveries::get_job(&app, &JobId::lookup(&id)?).await?).into_response())
}

async fn get_endpoint(State(app): State<App>, PathParam(id): PathParam, _: NoParams) -> Result<Response, ServiceError> {
    Ok(Json(endpoints::get_endpoint(&app, &EndpointId::lookup(&id)?).await?).into_response())
}

async fn get_delivery(State(app): State<App>, PathParam(id): PathParam, _: NoParams) -> Result<Response, ServiceError> {
    Ok(Json(deliveries::get_delivery(&app, &DeliveryId::lookup(&id)?).await?).into_response())
}

/// `GET /v1/deliveries`'s parameters.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    status: Option<String>,
    endpoint_id: Option<String>,
    since: Option<String>,
    until: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

pub(super) fn time_param(
    name: &str,
    value: Option<String>,
) -> Result<Option<chrono::DateTime<chrono::Utc>>, ServiceError> {
    match value.filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => chrono::DateTime::parse_from_rfc3339(&v).map(|t| Some(t.with_timezone(&chrono::Utc))).map_err(|e| {
            ServiceError::Validation(format!(
                "{name}: {:?} is not an RFC 3339 time ({e})",
                crate::domain::ids::shown(&v)
            ))
        }),
    }
}

async fn list_deliveries(State(app): State<App>, Params(p): Params<ListParams>) -> Result<Response, ServiceError> {
    let status = match p.status.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => Some(DeliveryStatus::parse(s).ok_or_else(|| {
            ServiceError::Validation(format!(
                "status: {:?} is not one of scheduled, sending, delivered, exhausted, held",
                crate::domain::ids::shown(s)
            ))
        })?),
    };
    let endpoint_id =
        p.endpoint_id.filter(|s| !s.is_empty()).map(|e| EndpointId::parse("endpoint_id", e)).transpose()?;
    let limit = check_limit(p.limit)?;
    let since = time_param("since", p.since)?;
    let until = time_param("until", p.until)?;
    if let (Some(s), Some(u)) = (since, until)
        && s > u
    {
        return Err(ServiceError::Validation(format!(
            "since, until: since ({}) is after until ({}); the window is since <= accepted < until",
            s.to_rfc3339(),
            u.to_rfc3339()
        )));
    }
    let query = DeliveryQuery {
        endpoint_id,
        status,
        since,
        until,
        oldest_first: false,
        limit,
        cursor: p.cursor.filter(|s| !s.is_empty()),
    };
    Ok(Json(deliveries::list_deliveries(&app, query).await?).into_response())
}

async fn replay(
    State(app): State<App>,
    PathParam(id): PathParam,
    _: NoParams,
    _: NoBody,
) -> Result<Response, ServiceError> {
    let d = deliveries::replay(&app, &DeliveryId::lookup(&id)?).await?;
    Ok((StatusCode::ACCEPTED, Json(d)).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PortalSessionBody {
    ttl_seconds: Option<i64>,
}

/// `POST /v1/tenants/{tenant_id}/portal-sessions`: a portal URL on the host the request came
/// to (`x-forwarded-proto` or http), so it points at the same API Gateway or local runtime.
async fn portal_session(
    State(app): State<App>,
    PathParam(tenant_id): PathParam,
    _: NoParams,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServiceError> {
    let b: PortalSessionBody = match &body {
        Ok(bytes) if is_blank(bytes) => PortalSessionBody { ttl_seconds: None },
        _ => parse_body(body)?,
    };
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).filter(|v| !v.is_empty());
    let host = header("x-forwarded-host").or_else(|| header("host")).unwrap_or("127.0.0.1");
    let scheme = header("x-forwarded-proto").unwrap_or("http");
    let base = format!("{scheme}://{host}");
    let session =
        crate::http::ui::token::create_session(&app, &TenantId::parse("tenant_id", tenant_id)?, b.ttl_seconds, &base)
            .await?;
    Ok((StatusCode::CREATED, Json(session)).into_response())
}

async fn no_route(method: Method, uri: Uri) -> ServiceError {
    ServiceError::NotFound(format!("no route {method} {}", uri.path()))
}

async fn wrong_method(method: Method, uri: Uri) -> Response {
    let e = ServiceError::NotFound(format!("{method} is not allowed on {}", uri.path()));
    let body = serde_json::json!({"error": {"code": "method_not_allowed", "message": e.to_string()}});
    (StatusCode::METHOD_NOT_ALLOWED, Json(body)).into_response()
}

fn finish(router: Router<App>, app: App) -> Router {
    router
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(super::extract::require_json))
        .with_state(app)
}

fn ingest_routes() -> Router<App> {
    Router::new().route("/v1/events", post(super::events::post_event))
}

fn admin_routes() -> Router<App> {
    Router::new()
        .route("/v1/endpoints", post(post_endpoint).get(list_endpoints))
        .route("/v1/endpoints/{id}", get(get_endpoint).patch(patch_endpoint).delete(delete_endpoint))
        .route("/v1/endpoints/{id}/stats", get(endpoint_stats))
        .route("/v1/endpoints/{id}/rotate-secret", post(rotate_secret))
        .route("/v1/endpoints/{id}/recover", post(recover))
        .route("/v1/events/{id}", get(get_event))
        .route("/v1/endpoints/{id}/enable", post(enable_endpoint))
        .route("/v1/endpoints/{id}/disable", post(disable_endpoint))
        .route("/v1/jobs/{id}", get(get_job))
        .route("/v1/deliveries", get(list_deliveries))
        .route("/v1/deliveries/{id}", get(get_delivery))
        .route("/v1/deliveries/{id}/replay", post(replay))
        .route("/v1/tenants/{tenant_id}/portal-sessions", post(portal_session))
        .merge(super::event_types::routes())
        .merge(super::api_keys::routes())
        .merge(super::lifecycle::routes())
}

/// The ingest function's routes, for requests `caller` vouches for: [`Caller::Iam`] when AWS
/// checked the request against IAM, [`Caller::Anonymous`] on a route without an authorizer
/// (`POST /v1/events` then needs an API key).
pub fn ingest_router(app: App, caller: Caller) -> Router {
    finish(ingest_routes(), app).layer(axum::Extension(caller))
}

/// The admin function's routes. It also takes API Gateway's `$default` route (every request no
/// other route takes), so `/v1/events`, whose one method is ingest's, is known here too: any
/// method that reaches it here is 405 `method_not_allowed`, as on the local runtime.
pub fn admin_router(app: App) -> Router {
    finish(admin_routes().route("/v1/events", axum::routing::MethodRouter::new()), app)
}

/// Every route (the local runtime: [`Caller::Local`], a presented API key is checked).
pub fn router(app: App) -> Router {
    finish(ingest_routes().merge(admin_routes()), app).layer(axum::Extension(Caller::Local))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::extract::{no_params, parse_query};
    use serde::de::DeserializeOwned;

    fn refused<T: DeserializeOwned>(query: &str) -> String {
        match parse_query::<T>(Some(query)) {
            Ok(_) => String::from("accepted"),
            Err(e) => format!("{} {e}", e.code()),
        }
    }

    #[test]
    fn a_query_error_names_the_parameter() {
        assert_eq!(
            refused::<EndpointListParams>("tenant=acme"),
            "validation_error tenant: unknown field `tenant`, expected one of `tenant_id`, `attention`, `limit`, `cursor`"
        );
        assert_eq!(
            refused::<DeleteParams>("force=yes"),
            "validation_error force: provided string was not `true` or `false`"
        );
        assert_eq!(
            refused::<EventParams>("tenant_id=a&tenant_id=b"),
            "validation_error query: duplicate field `tenant_id`"
        );
        assert_eq!(refused::<ListParams>("endpoint_id=ep_1&status=held&since=&until=&limit=5&cursor="), "accepted");
        // An empty `limit=` is absent, as the other empty parameters: the default page.
        assert_eq!(refused::<ListParams>("endpoint_id=ep_1&limit="), "accepted");
        assert_eq!(check_limit(Some(String::new())).ok(), Some(50));
        assert_eq!(check_limit(Some("100".into())).ok(), Some(100));
        for bad in ["ten", "0", "101", "-1", "1.5"] {
            let e = check_limit(Some(bad.into())).unwrap_err();
            assert_eq!(e.to_string(), format!("limit: {bad:?} is not a whole number from 1 to 100"), "{bad}");
        }
        assert!(parse_query::<EventParams>(None).is_ok());
        let e = no_params(Some("mode=sync")).unwrap_err();
        assert_eq!(e.to_string(), "mode: unknown parameter; this route takes no query parameters");
        assert!(no_params(Some("")).is_ok() && no_params(None).is_ok());
    }
}
