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
//! | `GET /v1/endpoints?attention=stopped\|failing&limit=&cursor=` | 200 `{"data", "next_cursor"}`: endpoints stopped or failing across tenants, newest first ([`crate::service::attention`]) |
//! | `DELETE /v1/endpoints/{id}?force=` | 200; 409 with unfinished deliveries unless `force=true` |
//! | `GET /v1/endpoints/{id}/stats` | 200 [`admin::EndpointStats`] |
//! | `POST /v1/endpoints/{id}/rotate-secret` `{"secret"?}` | 200 endpoint with the new secret |
//! | `POST /v1/endpoints/{id}/recover` `{"since", "until"?}` | 202 [`crate::model::Job`] |
//! | `GET /v1/events/{id}?tenant_id=` | 200 [`admin::EventView`]; 409 naming the tenants when the id is in several and `tenant_id` is not given |
//! | `GET /v1/jobs/{id}` | 200 [`crate::model::Job`] (progress of a release, recover or probe) |
//! | `GET /v1/deliveries/{id}` | 200 [`admin::DeliveryView`] |
//! | `GET /v1/deliveries?status=&endpoint_id=&limit=&cursor=` | 200 `{"data", "next_cursor"}` |
//! | `POST /v1/deliveries/{id}/replay` | 202 [`admin::DeliveryView`] |
//! | `POST /v1/tenants/{tenant_id}/portal-sessions` `{"ttl_seconds"?}` | 201 [`crate::ui::token::PortalSession`]: a signed portal URL for one tenant |
//!
//! Every error is `{"error": {"code", "message"}}` with the status of [`ServiceError`]. A
//! route takes only the query parameters listed above (most take none): any other, such as a
//! misspelt one, is 422 `validation_error` naming it, as an unknown body field is. Every
//! parameter is checked before any AWS call: ids by the rule of [`crate::validate`], a cursor
//! against the listing it must come from.

use crate::App;
use crate::config::MAX_PAYLOAD_BYTES;
use crate::error::ServiceError;
use crate::model::DeliveryStatus;
use crate::service::{admin, ingest};
use crate::store::DeliveryQuery;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, MatchedPath, Path, Request, State};
use axum::http::request::Parts;
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

/// Reads a JSON body: 413 when over [`MAX_BODY_BYTES`], 400 when it is not JSON, 422
/// `body: must be a JSON object` for any other JSON value, 422 naming the field when it does
/// not fit `T` (an unknown field included: the bodies deny them).
fn parse_body<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ServiceError> {
    parse_json_object(&body_bytes(body)?)
}

/// The request body, or 413 `payload_too_large` / 400 `invalid_json` when it could not be
/// read.
fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ServiceError> {
    body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ServiceError::TooLarge(format!("request body is over the limit of {MAX_BODY_BYTES} bytes"))
        } else {
            ServiceError::InvalidJson(e.body_text())
        }
    })
}

/// A request body that must be one JSON object, deserialized into `T`; errors name the path.
fn parse_json_object<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ServiceError> {
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
            Ok(_) => Err(ServiceError::Validation("body: must be a JSON object".into())),
            Err(e) => Err(ServiceError::InvalidJson(format!("request body is not valid JSON: {e}"))),
        };
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        match inner.classify() {
            serde_json::error::Category::Data => {
                if path == "." {
                    ServiceError::Validation(format!("body: {inner}"))
                } else {
                    ServiceError::Validation(format!("{path}: {inner}"))
                }
            }
            _ => ServiceError::InvalidJson(format!("request body is not valid JSON: {inner}")),
        }
    })
}

/// A route's one path parameter (`{id}`, `{tenant_id}`), percent-decoded. axum's own
/// rejection of a segment that is not UTF-8 once decoded (`caf%E9`) is a plain-text 400; this
/// one is the error shape: 404 `not_found` for an id (no id that could be stored is not
/// UTF-8), 422 naming `tenant_id` for a tenant, as the id rule answers.
struct PathParam(String);

impl<S: Send + Sync> FromRequestParts<S> for PathParam {
    type Rejection = ServiceError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ServiceError> {
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(Self(value)),
            Err(_) => {
                let tenant = parts.extensions.get::<MatchedPath>().is_some_and(|m| m.as_str().contains("{tenant_id}"));
                Err(if tenant {
                    ServiceError::Validation(format!(
                        "tenant_id: is not UTF-8 once percent-decoded; ids and names use only {}",
                        crate::validate::ID_ALPHABET
                    ))
                } else {
                    ServiceError::NotFound(format!(
                        "{}: no such resource (its id is not UTF-8 once percent-decoded)",
                        crate::validate::shown(parts.uri.path())
                    ))
                })
            }
        }
    }
}

fn required<T>(value: Option<T>, field: &str) -> Result<T, ServiceError> {
    value.ok_or_else(|| ServiceError::Validation(format!("{field}: is required")))
}

/// Reads a route's query string into `T`, whose fields are the route's parameters (each
/// `T` denies unknown ones), as axum's `Query` reads it (`serde_urlencoded`): 422
/// `validation_error` naming the parameter, the same shape as a body error (an unknown or
/// misspelt parameter is `name: unknown field ...`, a malformed value `limit: invalid digit
/// ...`).
fn parse_query<T: DeserializeOwned>(query: Option<&str>) -> Result<T, ServiceError> {
    let pairs = url::form_urlencoded::parse(query.unwrap_or("").as_bytes());
    serde_path_to_error::deserialize(serde_urlencoded::Deserializer::new(pairs)).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            ServiceError::Validation(format!("query: {inner}"))
        } else {
            ServiceError::Validation(format!("{}: {inner}", crate::validate::shown(&path)))
        }
    })
}

/// The query string of a route that takes no parameters: empty, or 422 `validation_error`
/// naming the first parameter given (a misspelt one, or one another route takes, would
/// otherwise be ignored without a word).
fn no_params(query: Option<&str>) -> Result<(), ServiceError> {
    match url::form_urlencoded::parse(query.unwrap_or("").as_bytes()).next() {
        None => Ok(()),
        Some((name, _)) => Err(ServiceError::Validation(format!(
            "{}: unknown parameter; this route takes no query parameters",
            crate::validate::shown(&name)
        ))),
    }
}

/// A route's query parameters, read into `T` by [`parse_query`] (an extractor: a refused
/// query answers before the handler runs).
struct Params<T>(T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Params<T> {
    type Rejection = ServiceError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ServiceError> {
        parse_query(parts.uri.query()).map(Self)
    }
}

/// The extractor of a route that takes no query parameters: [`no_params`].
struct NoParams;

impl<S: Send + Sync> FromRequestParts<S> for NoParams {
    type Rejection = ServiceError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ServiceError> {
        no_params(parts.uri.query()).map(|()| Self)
    }
}

/// The extractor of a route that takes no body (enable, disable, replay, delete): an empty
/// body, or `{}`. Anything else is refused as on the routes that take one: 422
/// `validation_error` naming the unknown field, 400 `invalid_json` when it is not JSON, 413
/// over the body limit. Must be a handler's last argument (it reads the body).
struct NoBody;

/// Whether a request body counts as no body: empty or ASCII whitespace only (what the routes
/// without a body and those with an optional one take as absent).
fn is_blank(body: &[u8]) -> bool {
    body.iter().all(u8::is_ascii_whitespace)
}

/// The fields of a route without a body: none.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EmptyBody {}

impl<S: Send + Sync> FromRequest<S> for NoBody {
    type Rejection = ServiceError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ServiceError> {
        let bytes = body_bytes(Bytes::from_request(req, state).await)?;
        if is_blank(&bytes) {
            return Ok(Self);
        }
        parse_json_object::<EmptyBody>(&bytes).map(|_| Self)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventBody {
    tenant_id: Option<String>,
    event_type: Option<String>,
    payload: Option<Box<RawValue>>,
    id: Option<String>,
    mode: Option<String>,
}

/// `Idempotency-Key`: names the event a request creates. Without an `id` in the body the
/// event id is derived from the tenant and the key ([`keyed_event_id`]), so a retry with the
/// same key is a repeat of the same event id and creates nothing new (ingest's conditional
/// writes), whenever it comes, for as long as the event is kept
/// (`WEBHOOKS_EVENT_RETENTION_DAYS`). The request's [`fingerprint`] is stored with the event:
/// the same key with another request is 422 `idempotency_key_reused` and writes nothing; the
/// same request again gets the event's answer with header `idempotent-replayed: true`.
/// Concurrent retries converge on the one event (a sync retry while the first attempt is in
/// flight is answered 202 with `deferred`, as any repeat of an event id under way). No
/// record of its own: the event item is the key's record.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// SHA-256 (hex) of the parts, each length-prefixed (8 bytes, big-endian) so no two lists of
/// parts share one.
fn sha256_of(parts: &[&str]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in parts {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The fingerprint an `Idempotency-Key` is bound to: SHA-256 (hex) of the request's
/// `tenant_id`, `event_type`, `id` (as sent; empty when absent), `mode` and the payload's
/// bytes as sent, each length-prefixed so no two requests share one.
pub fn fingerprint(event: &ingest::NewEvent) -> String {
    let id = event.id.as_deref().unwrap_or("");
    let mode = if event.sync { "sync" } else { "async" };
    sha256_of(&[event.tenant_id.as_str(), event.event_type.as_str(), id, mode, event.payload.as_str()])
}

/// The event id of a request with an `Idempotency-Key` and no `id`: `evt_` and the first 32
/// hex digits (128 bits) of SHA-256 of the tenant and the key, so the same key in another
/// tenant is another event.
pub fn keyed_event_id(tenant_id: &str, key: &str) -> String {
    let digest = sha256_of(&["idempotency-key", tenant_id, key]);
    format!("evt_{}", &digest[..32])
}

fn replayed(response: &mut Response) {
    response.headers_mut().insert("idempotent-replayed", axum::http::HeaderValue::from_static("true"));
}

/// The event a `POST /v1/events` body asks for (`{"tenant_id", "event_type", "payload", "id"?,
/// "mode"?: "async"|"sync"}`), checked by [`ingest::check`]. Pure: reads nothing, writes
/// nothing.
///
/// # Errors
/// [`ServiceError::InvalidJson`] (400) for a body that is not JSON,
/// [`ServiceError::Validation`] (422) naming the field, [`ServiceError::TooLarge`] (413) for
/// a payload over the limit.
pub fn event_request(body: &[u8]) -> Result<ingest::NewEvent, ServiceError> {
    let b: EventBody = parse_json_object(body)?;
    let sync = match b.mode.as_deref() {
        None | Some("async") => false,
        Some("sync") => true,
        Some(other) => return Err(ServiceError::Validation(format!("mode: {other:?} is not async or sync"))),
    };
    let event = ingest::NewEvent {
        tenant_id: required(b.tenant_id, "tenant_id")?,
        event_type: required(b.event_type, "event_type")?,
        payload: required(b.payload, "payload")?.get().to_string(),
        id: b.id,
        sync,
        request_sha256: None,
    };
    ingest::check(&event)?;
    Ok(event)
}

async fn post_event(
    State(app): State<App>,
    _: NoParams,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServiceError> {
    let mut event = event_request(&body_bytes(body)?)?;
    let key = match headers.get(IDEMPOTENCY_KEY) {
        None => None,
        Some(v) => {
            let k = v.to_str().map_err(|_| {
                ServiceError::Validation(format!(
                    "Idempotency-Key: ids and names use only {}",
                    crate::validate::ID_ALPHABET
                ))
            })?;
            crate::validate::client_id("Idempotency-Key", k)?;
            Some(k.to_string())
        }
    };
    if let Some(key) = &key {
        event.request_sha256 = Some(fingerprint(&event));
        if event.id.is_none() {
            event.id = Some(keyed_event_id(&event.tenant_id, key));
        }
    }
    let accepted = ingest::ingest(&app, event).await?;
    let (status, body) = answer(&accepted)?;
    let mut response = (status, Json(body)).into_response();
    if key.is_some() && accepted.replayed {
        replayed(&mut response);
    }
    Ok(response)
}

/// The HTTP answer to an accepted event: 202 [`ingest::Accepted`]; sync mode 200 (delivered)
/// or 502 with the attempt, or 202 with `deferred` when the delivery goes on asynchronously
/// (see [`ingest::SyncOutcome::deferred`]).
fn answer(accepted: &ingest::Accepted) -> Result<(StatusCode, serde_json::Value), ServiceError> {
    let internal = |e: serde_json::Error| ServiceError::Internal(format!("answer not serializable: {e}"));
    match &accepted.outcome {
        None => Ok((StatusCode::ACCEPTED, serde_json::to_value(accepted).map_err(internal)?)),
        Some(outcome) if outcome.deferred.is_some() => {
            let body = serde_json::json!({
                "event_id": accepted.event_id,
                "deliveries": accepted.deliveries,
                "deferred": true,
                "message": outcome.deferred,
            });
            Ok((StatusCode::ACCEPTED, body))
        }
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
            Ok((status, body))
        }
    }
}

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
    let created = admin::create_endpoint(&app, &parse_object(body)?).await?;
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

async fn patch_endpoint(
    State(app): State<App>,
    PathParam(id): PathParam,
    _: NoParams,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServiceError> {
    Ok(Json(admin::update_endpoint(&app, &id, &parse_object(body)?).await?).into_response())
}

async fn enable_endpoint(
    State(app): State<App>,
    PathParam(id): PathParam,
    _: NoParams,
    _: NoBody,
) -> Result<Response, ServiceError> {
    let (endpoint, job) = admin::enable_endpoint(&app, &id).await?;
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
    Ok(Json(admin::disable_endpoint(&app, &id).await?).into_response())
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
                crate::validate::shown(a)
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
    let tenant = p.tenant_id.unwrap_or_default();
    crate::validate::client_id("tenant_id", &tenant)?;
    let limit = check_limit(p.limit)?;
    Ok(Json(admin::list_endpoints(&app, &tenant, limit, p.cursor.as_deref().filter(|c| !c.is_empty())).await?)
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
    let done = admin::delete_endpoint(&app, &id, p.force.unwrap_or(false)).await?;
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
    Ok(Json(admin::endpoint_stats(&app, &id).await?).into_response())
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
    Ok(Json(admin::rotate_secret(&app, &id, b.secret.as_deref()).await?).into_response())
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
    let job = admin::recover(&app, &id, since, time_param("until", b.until)?).await?;
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
    let tenant = p.tenant_id.filter(|t| !t.is_empty());
    if let Some(t) = &tenant {
        crate::validate::client_id("tenant_id", t)?;
    }
    Ok(Json(admin::get_event(&app, &id, tenant.as_deref()).await?).into_response())
}

/// A listing's `limit`: 50 when absent or empty (`?limit=`, as every other empty parameter),
/// else a whole number from 1 to 100.
fn check_limit(limit: Option<String>) -> Result<usize, ServiceError> {
    let Some(v) = limit.filter(|v| !v.is_empty()) else { return Ok(50) };
    match v.parse::<usize>() {
        Ok(n) if (1..=100).contains(&n) => Ok(n),
        _ => Err(ServiceError::Validation(format!(
            "limit: {:?} is not a whole number from 1 to 100",
            crate::validate::shown(&v)
        ))),
    }
}

async fn get_job(State(app): State<App>, PathParam(id): PathParam, _: NoParams) -> Result<Response, ServiceError> {
    Ok(Json(admin::get_job(&app, &id).await?).into_response())
}

async fn get_endpoint(State(app): State<App>, PathParam(id): PathParam, _: NoParams) -> Result<Response, ServiceError> {
    Ok(Json(admin::get_endpoint(&app, &id).await?).into_response())
}

async fn get_delivery(State(app): State<App>, PathParam(id): PathParam, _: NoParams) -> Result<Response, ServiceError> {
    Ok(Json(admin::get_delivery(&app, &id).await?).into_response())
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

fn time_param(name: &str, value: Option<String>) -> Result<Option<chrono::DateTime<chrono::Utc>>, ServiceError> {
    match value.filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => chrono::DateTime::parse_from_rfc3339(&v).map(|t| Some(t.with_timezone(&chrono::Utc))).map_err(|e| {
            ServiceError::Validation(format!("{name}: {:?} is not an RFC 3339 time ({e})", crate::validate::shown(&v)))
        }),
    }
}

async fn list_deliveries(State(app): State<App>, Params(p): Params<ListParams>) -> Result<Response, ServiceError> {
    let status = match p.status.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => Some(DeliveryStatus::parse(s).ok_or_else(|| {
            ServiceError::Validation(format!(
                "status: {:?} is not one of scheduled, sending, delivered, exhausted, held",
                crate::validate::shown(s)
            ))
        })?),
    };
    let endpoint_id = p.endpoint_id.filter(|s| !s.is_empty());
    if let Some(e) = &endpoint_id {
        crate::validate::client_id("endpoint_id", e)?;
    }
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
    Ok(Json(admin::list_deliveries(&app, query).await?).into_response())
}

async fn replay(
    State(app): State<App>,
    PathParam(id): PathParam,
    _: NoParams,
    _: NoBody,
) -> Result<Response, ServiceError> {
    let d = admin::replay(&app, &id).await?;
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
    let session = crate::ui::token::create_session(&app, &tenant_id, b.ttl_seconds, &base).await?;
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
        .route("/v1/tenants/{tenant_id}/portal-sessions", post(portal_session))
}

/// The ingest function's routes.
pub fn ingest_router(app: App) -> Router {
    finish(ingest_routes(), app)
}

/// The admin function's routes. It also takes API Gateway's `$default` route (every request no
/// other route takes), so `/v1/events`, whose one method is ingest's, is known here too: any
/// method that reaches it here is 405 `method_not_allowed`, as on the local runtime.
pub fn admin_router(app: App) -> Router {
    finish(admin_routes().route("/v1/events", axum::routing::MethodRouter::new()), app)
}

/// Every route (the local runtime).
pub fn router(app: App) -> Router {
    finish(ingest_routes().merge(admin_routes()), app)
}

#[cfg(test)]
mod tests {
    use super::*;

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

/// Whether a request's `Host` header (`host`) names a server listening on `addr` by a
/// loopback name: `addr` itself, or `localhost`, `127.0.0.1` or `[::1]` with its port. The
/// local runtime and the CLI's dashboard answer only these, so a page of another site that
/// rebinds its DNS name to 127.0.0.1 (its requests carry its own name) cannot reach the
/// unauthenticated local API or read the dashboard (DNS rebinding). A missing header is
/// refused.
pub fn is_local_host(host: Option<&str>, addr: std::net::SocketAddr) -> bool {
    let Some(host) = host else { return false };
    let port = addr.port();
    host == addr.to_string() || ["localhost", "127.0.0.1", "[::1]"].iter().any(|name| host == format!("{name}:{port}"))
}

/// The local runtime's answer to a request whose `Host` is not a loopback name of the server
/// (see [`is_local_host`]): 421 in the API's error shape, `misdirected_request`.
pub fn misdirected(addr: std::net::SocketAddr) -> Response {
    let body = serde_json::json!({"error": {
        "code": "misdirected_request",
        "message": format!("this local server answers only requests to http://{addr} or http://localhost:{} (a Host of another name is refused: DNS rebinding)", addr.port()),
    }});
    (axum::http::StatusCode::MISDIRECTED_REQUEST, Json(body)).into_response()
}

#[cfg(test)]
mod local_host_tests {
    use super::is_local_host;

    /// Issue #34, failing input 7: `make run` answered any Host, so a page on another site
    /// could reach the unauthenticated admin API by DNS rebinding.
    #[test]
    fn only_loopback_names_of_the_local_server_are_answered() {
        let addr: std::net::SocketAddr = "127.0.0.1:3000".parse().unwrap_or_else(|_| unreachable!());
        for ok in ["127.0.0.1:3000", "localhost:3000", "[::1]:3000"] {
            assert!(is_local_host(Some(ok), addr), "{ok}");
        }
        for refused in ["attacker.example", "attacker.example:3000", "localhost:3001", "127.0.0.1", ""] {
            assert!(!is_local_host(Some(refused), addr), "{refused}");
        }
        assert!(!is_local_host(None, addr));
    }
}
