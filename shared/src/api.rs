//! The HTTP API (ingest and admin) as an axum router, served by API Gateway through
//! `lambda_http` in the Lambda binaries and by the local runtime directly.
//!
//! | route | answer |
//! |---|---|
//! | `POST /v1/events` | 202 [`ingest::Accepted`]; with `"mode": "sync"`, 200 or 502 with the attempt |
//! | `POST /v1/endpoints` | 201 [`admin::EndpointView`] with the secret |
//! | `GET /v1/endpoints/{id}` | 200 [`admin::EndpointView`] |
//! | `PATCH /v1/endpoints/{id}` | 200 [`admin::EndpointView`] |
//! | `POST /v1/endpoints/{id}/disable` | 200 [`admin::EndpointView`]; its deliveries are held |
//! | `POST /v1/endpoints/{id}/enable` | 200 [`admin::EndpointView`] + `release_job` |
//! | `GET /v1/endpoints?tenant_id=&limit=&cursor=` | 200 `{"data", "next_cursor"}` |
//! | `DELETE /v1/endpoints/{id}?force=` | 200; 409 with unfinished deliveries unless `force=true` |
//! | `GET /v1/endpoints/{id}/stats` | 200 [`admin::EndpointStats`] |
//! | `POST /v1/endpoints/{id}/rotate-secret` `{"secret"?}` | 200 endpoint with the new secret |
//! | `POST /v1/endpoints/{id}/recover` `{"since", "until"?}` | 202 [`crate::model::Job`] |
//! | `GET /v1/events/{id}` | 200 [`admin::EventView`] |
//! | `GET /v1/jobs/{id}` | 200 [`crate::model::Job`] (progress of a release, recover or probe) |
//! | `GET /v1/deliveries/{id}` | 200 [`admin::DeliveryView`] |
//! | `GET /v1/deliveries?status=&endpoint_id=&limit=&cursor=` | 200 `{"data", "next_cursor"}` |
//! | `POST /v1/deliveries/{id}/replay` | 202 [`admin::DeliveryView`] |
//!
//! Every error is `{"error": {"code", "message"}}` with the status of [`ServiceError`].

use crate::App;
use crate::config::MAX_PAYLOAD_BYTES;
use crate::error::ServiceError;
use crate::model::DeliveryStatus;
use crate::service::{admin, ingest};
use crate::store::DeliveryQuery;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

/// Largest request body read, in bytes: room for a 256 KiB payload and its envelope. Larger
/// bodies get 413 before they are parsed.
pub const MAX_BODY_BYTES: usize = MAX_PAYLOAD_BYTES + 64 * 1024;

impl IntoResponse for ServiceError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if status.is_server_error() {
            tracing::error!(error = %self, "request failed");
        }
        (status, Json(self.body())).into_response()
    }
}

/// Reads a JSON body: 413 when over [`MAX_BODY_BYTES`], 400 when it is not JSON, 422 naming
/// the field when it does not fit `T`.
fn parse_body<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ServiceError> {
    let bytes = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ServiceError::TooLarge(format!("request body is over the limit of {MAX_BODY_BYTES} bytes"))
        } else {
            ServiceError::InvalidJson(e.body_text())
        }
    })?;
    let mut de = serde_json::Deserializer::from_slice(&bytes);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        match inner.classify() {
            serde_json::error::Category::Data => {
                if path == "." {
                    ServiceError::Validation(inner.to_string())
                } else {
                    ServiceError::Validation(format!("{path}: {inner}"))
                }
            }
            _ => ServiceError::InvalidJson(format!("request body is not valid JSON: {inner}")),
        }
    })
}

fn required<T>(value: Option<T>, field: &str) -> Result<T, ServiceError> {
    value.ok_or_else(|| ServiceError::Validation(format!("{field}: is required")))
}

#[derive(Deserialize)]
struct EventBody {
    tenant_id: Option<String>,
    event_type: Option<String>,
    payload: Option<Box<RawValue>>,
    id: Option<String>,
    mode: Option<String>,
}

/// `Idempotency-Key`: a retried POST with the same key (per tenant, for
/// `config.idempotency_window`) gets the original answer back.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

async fn post_event(
    State(app): State<App>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServiceError> {
    let b: EventBody = parse_body(body)?;
    let sync = match b.mode.as_deref() {
        None | Some("async") => false,
        Some("sync") => true,
        Some(other) => return Err(ServiceError::Validation(format!("mode: {other:?} is not async or sync"))),
    };
    let tenant_id = required(b.tenant_id, "tenant_id")?;
    let key = match headers.get(IDEMPOTENCY_KEY) {
        None => None,
        Some(v) => Some(v.to_str().ok().filter(|k| (1..=255).contains(&k.len())).ok_or_else(|| {
            ServiceError::Validation("Idempotency-Key: must be 1 to 255 visible ASCII characters".into())
        })?),
    };
    if let Some(key) = key
        && let Some((status, stored)) = app.store.get_idempotent(&tenant_id, key, app.clock.now()).await?
    {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::ACCEPTED);
        let mut response = (status, stored).into_response();
        let headers = response.headers_mut();
        headers.insert(axum::http::header::CONTENT_TYPE, axum::http::HeaderValue::from_static("application/json"));
        headers.insert("idempotent-replayed", axum::http::HeaderValue::from_static("true"));
        return Ok(response);
    }
    // Without an event id, the key names the event, so concurrent retries converge on it.
    let id = b.id.or_else(|| key.map(|k| format!("evt_{}", &crate::model::delivery_id(&tenant_id, k)[4..30])));
    let event = ingest::NewEvent {
        tenant_id: tenant_id.clone(),
        event_type: required(b.event_type, "event_type")?,
        payload: required(b.payload, "payload")?.get().to_string(),
        id,
        sync,
    };
    let accepted = ingest::ingest(&app, event).await?;
    let (status, body) = match &accepted.outcome {
        None => (StatusCode::ACCEPTED, serde_json::to_value(&accepted)),
        Some(outcome) => {
            let status =
                if outcome.status == DeliveryStatus::Delivered { StatusCode::OK } else { StatusCode::BAD_GATEWAY };
            let body = serde_json::json!({
                "event_id": accepted.event_id,
                "delivery_id": outcome.delivery_id,
                "status": outcome.status,
                "status_code": outcome.attempt.as_ref().and_then(|a| a.status_code),
                "attempt": outcome.attempt,
            });
            (status, Ok(body))
        }
    };
    let body = body.map_err(|e| ServiceError::Unavailable(e.to_string()))?;
    if let Some(key) = key {
        let expires = app.clock.now()
            + chrono::Duration::from_std(app.config.idempotency_window).unwrap_or(chrono::Duration::hours(24));
        app.store.put_idempotent(&tenant_id, key, (status.as_u16(), &body.to_string()), expires).await?;
    }
    Ok((status, Json(body)).into_response())
}

fn parse_object(
    body: Result<Bytes, BytesRejection>,
) -> Result<serde_json::Map<String, serde_json::Value>, ServiceError> {
    match parse_body::<serde_json::Value>(body)? {
        serde_json::Value::Object(map) => Ok(map),
        _ => Err(ServiceError::Validation("body: must be a JSON object".into())),
    }
}

async fn post_endpoint(State(app): State<App>, body: Result<Bytes, BytesRejection>) -> Result<Response, ServiceError> {
    let created = admin::create_endpoint(&app, &parse_object(body)?).await?;
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

async fn patch_endpoint(
    State(app): State<App>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServiceError> {
    Ok(Json(admin::update_endpoint(&app, &id, &parse_object(body)?).await?).into_response())
}

async fn enable_endpoint(State(app): State<App>, Path(id): Path<String>) -> Result<Response, ServiceError> {
    let (endpoint, job) = admin::enable_endpoint(&app, &id).await?;
    let mut body = serde_json::to_value(endpoint).map_err(|e| ServiceError::Unavailable(e.to_string()))?;
    body["release_job"] = serde_json::to_value(job).map_err(|e| ServiceError::Unavailable(e.to_string()))?;
    Ok(Json(body).into_response())
}

async fn disable_endpoint(State(app): State<App>, Path(id): Path<String>) -> Result<Response, ServiceError> {
    Ok(Json(admin::disable_endpoint(&app, &id).await?).into_response())
}

#[derive(Deserialize)]
struct EndpointListParams {
    tenant_id: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
}

async fn list_endpoints(
    State(app): State<App>,
    params: Result<Query<EndpointListParams>, QueryRejection>,
) -> Result<Response, ServiceError> {
    let Query(p) = params.map_err(|e| ServiceError::Validation(e.body_text()))?;
    let tenant = p
        .tenant_id
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ServiceError::Validation("tenant_id: is required".into()))?;
    let limit = check_limit(p.limit)?;
    Ok(Json(admin::list_endpoints(&app, &tenant, limit, p.cursor.as_deref().filter(|c| !c.is_empty())).await?)
        .into_response())
}

#[derive(Deserialize)]
struct DeleteParams {
    force: Option<bool>,
}

async fn delete_endpoint(
    State(app): State<App>,
    Path(id): Path<String>,
    params: Result<Query<DeleteParams>, QueryRejection>,
) -> Result<Response, ServiceError> {
    let Query(p) = params.map_err(|e| ServiceError::Validation(e.body_text()))?;
    let ended = admin::delete_endpoint(&app, &id, p.force.unwrap_or(false)).await?;
    Ok(Json(serde_json::json!({"id": id, "deleted": true, "deliveries_ended": ended})).into_response())
}

async fn endpoint_stats(State(app): State<App>, Path(id): Path<String>) -> Result<Response, ServiceError> {
    Ok(Json(admin::endpoint_stats(&app, &id).await?).into_response())
}

#[derive(Deserialize)]
struct RotateBody {
    secret: Option<String>,
}

async fn rotate_secret(
    State(app): State<App>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServiceError> {
    let b: RotateBody = match &body {
        Ok(bytes) if bytes.is_empty() => RotateBody { secret: None },
        _ => parse_body(body)?,
    };
    Ok(Json(admin::rotate_secret(&app, &id, b.secret.as_deref()).await?).into_response())
}

#[derive(Deserialize)]
struct RecoverBody {
    since: Option<String>,
    until: Option<String>,
}

async fn recover(
    State(app): State<App>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServiceError> {
    let b: RecoverBody = parse_body(body)?;
    let since = time_param("since", b.since)?.ok_or_else(|| ServiceError::Validation("since: is required".into()))?;
    let job = admin::recover(&app, &id, since, time_param("until", b.until)?).await?;
    Ok((StatusCode::ACCEPTED, Json(job)).into_response())
}

async fn get_event(State(app): State<App>, Path(id): Path<String>) -> Result<Response, ServiceError> {
    Ok(Json(admin::get_event(&app, &id).await?).into_response())
}

fn check_limit(limit: Option<usize>) -> Result<usize, ServiceError> {
    let limit = limit.unwrap_or(50);
    if !(1..=100).contains(&limit) {
        return Err(ServiceError::Validation("limit: must be from 1 to 100".into()));
    }
    Ok(limit)
}

async fn get_job(State(app): State<App>, Path(id): Path<String>) -> Result<Response, ServiceError> {
    Ok(Json(admin::get_job(&app, &id).await?).into_response())
}

async fn get_endpoint(State(app): State<App>, Path(id): Path<String>) -> Result<Response, ServiceError> {
    Ok(Json(admin::get_endpoint(&app, &id).await?).into_response())
}

async fn get_delivery(State(app): State<App>, Path(id): Path<String>) -> Result<Response, ServiceError> {
    Ok(Json(admin::get_delivery(&app, &id).await?).into_response())
}

#[derive(Deserialize)]
struct ListParams {
    status: Option<String>,
    endpoint_id: Option<String>,
    since: Option<String>,
    until: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
}

fn time_param(name: &str, value: Option<String>) -> Result<Option<chrono::DateTime<chrono::Utc>>, ServiceError> {
    match value.filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => chrono::DateTime::parse_from_rfc3339(&v)
            .map(|t| Some(t.with_timezone(&chrono::Utc)))
            .map_err(|e| ServiceError::Validation(format!("{name}: {v:?} is not an RFC 3339 time ({e})"))),
    }
}

async fn list_deliveries(
    State(app): State<App>,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Result<Response, ServiceError> {
    let Query(p) = params.map_err(|e| ServiceError::Validation(e.body_text()))?;
    let status = match p.status.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => Some(DeliveryStatus::parse(s).ok_or_else(|| {
            ServiceError::Validation(format!(
                "status: {s:?} is not one of scheduled, sending, delivered, exhausted, held"
            ))
        })?),
    };
    let limit = check_limit(p.limit)?;
    let query = DeliveryQuery {
        endpoint_id: p.endpoint_id.filter(|s| !s.is_empty()),
        status,
        since: time_param("since", p.since)?,
        until: time_param("until", p.until)?,
        oldest_first: false,
        limit,
        cursor: p.cursor.filter(|s| !s.is_empty()),
    };
    Ok(Json(admin::list_deliveries(&app, query).await?).into_response())
}

async fn replay(State(app): State<App>, Path(id): Path<String>) -> Result<Response, ServiceError> {
    let d = admin::replay(&app, &id).await?;
    Ok((StatusCode::ACCEPTED, Json(d)).into_response())
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
        .with_state(app)
}

fn ingest_routes() -> Router<App> {
    Router::new().route("/v1/events", post(post_event))
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
}

/// The ingest function's routes.
pub fn ingest_router(app: App) -> Router {
    finish(ingest_routes(), app)
}

/// The admin function's routes.
pub fn admin_router(app: App) -> Router {
    finish(admin_routes(), app)
}

/// Every route (the local runtime).
pub fn router(app: App) -> Router {
    finish(ingest_routes().merge(admin_routes()), app)
}
