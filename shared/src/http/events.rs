//! `POST /v1/events` (the ingest function's one route, served by [`crate::http::api`]'s
//! routers): the request body, the `Idempotency-Key` (an event id derived from tenant and key,
//! and the request's fingerprint), the API key check ([`api_keys::authenticate`]) and the
//! answer (202, or in sync mode 200/502).

use super::extract::{NoParams, body_bytes, parse_json_object, required};
use crate::App;
use crate::domain::model::DeliveryStatus;
use crate::error::ServiceError;
use crate::service::api_keys::{self, Caller};
use crate::service::{deliver, ingest};
use axum::Json;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

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

pub(super) async fn post_event(
    State(app): State<App>,
    caller: Option<axum::Extension<Caller>>,
    _: NoParams,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServiceError> {
    // A router that does not say who vouches for its requests vouches for none: a key is needed.
    let caller = caller.map_or(Caller::Anonymous, |c| c.0);
    let authorization = headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    let api_key = api_keys::authenticate(&app, caller, authorization).await?;
    let mut event = event_request(&body_bytes(body)?)?;
    api_keys::authorize(api_key.as_ref(), &event.tenant_id)?;
    let key = match headers.get(IDEMPOTENCY_KEY) {
        None => None,
        Some(v) => {
            let k = v.to_str().map_err(|_| {
                ServiceError::Validation(format!(
                    "Idempotency-Key: ids and names use only {}",
                    crate::domain::ids::ID_ALPHABET
                ))
            })?;
            crate::domain::ids::client_id("Idempotency-Key", k)?;
            Some(k.to_string())
        }
    };
    if let Some(key) = &key {
        event.request_sha256 = Some(fingerprint(&event));
        if event.id.is_none() {
            event.id = Some(keyed_event_id(&event.tenant_id, key));
        }
    }
    let sync = event.sync;
    // What ingest logs names the key the event came with, by its prefix.
    let span = tracing::info_span!("post_event", api_key = api_key.as_ref().map(|k| k.prefix.as_str()));
    let mut accepted = tracing::Instrument::instrument(ingest::ingest(&app, event), span.clone()).await?;
    if sync {
        accepted = tracing::Instrument::instrument(deliver::attempt_inline(&app, accepted), span).await?;
    }
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
