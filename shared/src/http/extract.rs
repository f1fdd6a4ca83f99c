//! What every route shares: the error answer (`{"error": {"code", "message"}}` with the
//! status of [`ServiceError`]), and the extractors that check a request before a handler
//! runs: the path id, the query parameters (only those a route lists; any other is 422
//! naming it), a JSON body (an object, no unknown field) or no body at all.

use super::api::MAX_BODY_BYTES;
use crate::error::ServiceError;
use axum::Json;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, MatchedPath, Path, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;
use serde::de::DeserializeOwned;

impl IntoResponse for ServiceError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if status.is_server_error() {
            tracing::error!(error = %self, "request failed");
        }
        (status, Json(self.body())).into_response()
    }
}

/// Whether a `Content-Type` value declares JSON: `application/json`, any letter case, with or
/// without parameters (`; charset=utf-8`).
fn is_json(content_type: &str) -> bool {
    content_type.split(';').next().is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// The API's guard against cross-site requests (issue #54, item 7), a layer on every API
/// route (the Lambda functions' and the local runtime's): a request that declares a
/// `Content-Type` other than `application/json` (parameters allowed) is refused unless it is a
/// `GET` or `HEAD`, and one that declares none must have no body (blank). A page of another
/// site can make a browser send a POST without asking the server first (no CORS preflight)
/// only as `text/plain`, a form, or `multipart/form-data` (or a body of no declared type),
/// never as `application/json`; such a POST reaches the local runtime with an allowed `Host`.
///
/// # Errors
/// 415 `unsupported_media_type` naming the type received; 413 `payload_too_large` for a body
/// of no declared type over [`MAX_BODY_BYTES`].
pub(super) async fn require_json(request: Request, next: axum::middleware::Next) -> Response {
    use axum::http::{Method, header};
    let declared = request.headers().get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap_or("?").to_string());
    match declared {
        Some(t) if is_json(&t) => next.run(request).await,
        Some(_) if matches!(*request.method(), Method::GET | Method::HEAD) => next.run(request).await,
        Some(t) => ServiceError::UnsupportedMediaType(format!(
            "Content-Type {:?} is not accepted: send request bodies as application/json",
            crate::domain::ids::shown(&t)
        ))
        .into_response(),
        None => {
            let (parts, body) = request.into_parts();
            let bytes = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
                Ok(b) => b,
                Err(_) => {
                    let m = format!("request body is over the limit of {MAX_BODY_BYTES} bytes");
                    return ServiceError::TooLarge(m).into_response();
                }
            };
            if !is_blank(&bytes) {
                let m = "a request body needs Content-Type: application/json";
                return ServiceError::UnsupportedMediaType(m.into()).into_response();
            }
            next.run(Request::from_parts(parts, axum::body::Body::from(bytes))).await
        }
    }
}

/// Reads a JSON body: 413 when over [`MAX_BODY_BYTES`], 400 when it is not JSON, 422
/// `body: must be a JSON object` for any other JSON value, 422 naming the field when it does
/// not fit `T` (an unknown field included: the bodies deny them).
pub(super) fn parse_body<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ServiceError> {
    parse_json_object(&body_bytes(body)?)
}

/// The request body, or 413 `payload_too_large` / 400 `invalid_json` when it could not be
/// read.
pub(super) fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ServiceError> {
    body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ServiceError::TooLarge(format!("request body is over the limit of {MAX_BODY_BYTES} bytes"))
        } else {
            ServiceError::InvalidJson(e.body_text())
        }
    })
}

/// A request body that must be one JSON object, deserialized into `T`; errors name the path.
pub(super) fn parse_json_object<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ServiceError> {
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
pub(super) struct PathParam(pub(super) String);

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
                        crate::domain::ids::ID_ALPHABET
                    ))
                } else {
                    ServiceError::NotFound(format!(
                        "{}: no such resource (its id is not UTF-8 once percent-decoded)",
                        crate::domain::ids::shown(parts.uri.path())
                    ))
                })
            }
        }
    }
}

pub(super) fn required<T>(value: Option<T>, field: &str) -> Result<T, ServiceError> {
    value.ok_or_else(|| ServiceError::Validation(format!("{field}: is required")))
}

/// Reads a route's query string into `T`, whose fields are the route's parameters (each
/// `T` denies unknown ones), as axum's `Query` reads it (`serde_urlencoded`): 422
/// `validation_error` naming the parameter, the same shape as a body error (an unknown or
/// misspelt parameter is `name: unknown field ...`, a malformed value `limit: invalid digit
/// ...`).
pub(super) fn parse_query<T: DeserializeOwned>(query: Option<&str>) -> Result<T, ServiceError> {
    let pairs = url::form_urlencoded::parse(query.unwrap_or("").as_bytes());
    serde_path_to_error::deserialize(serde_urlencoded::Deserializer::new(pairs)).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            ServiceError::Validation(format!("query: {inner}"))
        } else {
            ServiceError::Validation(format!("{}: {inner}", crate::domain::ids::shown(&path)))
        }
    })
}

/// The query string of a route that takes no parameters: empty, or 422 `validation_error`
/// naming the first parameter given (a misspelt one, or one another route takes, would
/// otherwise be ignored without a word).
pub(super) fn no_params(query: Option<&str>) -> Result<(), ServiceError> {
    match url::form_urlencoded::parse(query.unwrap_or("").as_bytes()).next() {
        None => Ok(()),
        Some((name, _)) => Err(ServiceError::Validation(format!(
            "{}: unknown parameter; this route takes no query parameters",
            crate::domain::ids::shown(&name)
        ))),
    }
}

/// A route's query parameters, read into `T` by [`parse_query`] (an extractor: a refused
/// query answers before the handler runs).
pub(super) struct Params<T>(pub(super) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Params<T> {
    type Rejection = ServiceError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ServiceError> {
        parse_query(parts.uri.query()).map(Self)
    }
}

/// The extractor of a route that takes no query parameters: [`no_params`].
pub(super) struct NoParams;

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
pub(super) struct NoBody;

/// Whether a request body counts as no body: empty or ASCII whitespace only (what the routes
/// without a body and those with an optional one take as absent).
pub(super) fn is_blank(body: &[u8]) -> bool {
    body.iter().all(u8::is_ascii_whitespace)
}

/// The fields of a route without a body: none.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EmptyBody {}

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
