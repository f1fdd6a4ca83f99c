//! Ingest: validate an event, freeze its payload, fan it out to the tenant's subscribed
//! endpoints and enqueue attempt 1.
//!
//! Writes per event: a conditional PutItem of the payload item (the payload zstd-compressed,
//! [`crate::store::payload`]) and one of each small delivery item, so a delivery's later
//! writes never carry the payload. No transaction: it would bill every item twice (DynamoDB
//! bills a transactional write 2 write units per started KB) and all-or-nothing holds
//! without it: a failed put takes back what the call wrote (deletes conditional on this call's
//! random `ingest_token`), so a 503 means nothing was accepted, and a call that relies on
//! another's items marks the event `promised` first, so a 202 is never taken back (see
//! [`crate::store::EventStore::insert_event`] for the windows left). Idempotency rides on the
//! ids: the payload item is keyed by (tenant, event id) and
//! a delivery id is derived from (event id, endpoint id), every put is conditional, so
//! ingesting the same event id twice creates nothing new. An `Idempotency-Key` is no more
//! than an event id derived from (tenant, key) plus the request's fingerprint on the event
//! item ([`NewEvent::request_sha256`]), so it needs no record of its own. A delivery written
//! but never enqueued (a crash or an SQS failure between the two) sits in the due index and is
//! re-driven by the sweeper, so nothing accepted is lost.
//!
//! What the take-back buys, measured at the bench's median payload (`bench/report.md`: a
//! 2 KB event item and a 0.7 KB delivery item): one TransactWriteItems would bill 4 + 2 = 6
//! write units where the puts bill 3, $1.88 more per million single-endpoint events at
//! $0.625 per million write units, and it caps a fan-out at 100 items. The other shape
//! weighed, deliveries first and the event item last as the commit record, needs no
//! take-back but leaves deliveries of uncommitted events where listings, the due index and
//! the sweeper see them, so every reader would have to check the event item (a read per
//! delivery) and a clean-up pass would have to remove them; the take-back's cost falls only
//! on a failed call.

use crate::App;
use crate::config::MAX_PAYLOAD_BYTES;
use crate::domain::delivery_lifecycle::{self, Enqueue};
use crate::domain::ids::{self, DeliveryId, EndpointId, EventId, TenantId};
use crate::domain::lane;
use crate::domain::model::{Attempt, DeliveryStatus, StoredEvent, delivery_id};
use crate::domain::operational;
use crate::domain::payload::{self, PayloadError};
use crate::domain::payload_filter;
use crate::domain::tenant::TenantSettings;
use crate::error::ServiceError;
use crate::service::lanes;
use crate::store::StoreError;
use serde::Serialize;

/// An event to deliver.
#[derive(Debug, Clone)]
pub struct NewEvent {
    /// The tenant whose endpoints receive it.
    pub tenant_id: String,
    /// The event type, e.g. `order.paid`.
    pub event_type: String,
    /// The JSON payload exactly as it will be POSTed.
    pub payload: String,
    /// The caller's event id; one is generated (`evt_` + ULID) when absent.
    pub id: Option<String>,
    /// `"mode": "sync"`: attempt the one subscribed endpoint inline, once.
    pub sync: bool,
    /// With an `Idempotency-Key`: the request's fingerprint (`http::events::fingerprint`), stored with
    /// the event; a repeat of the event id with another fingerprint is refused (422
    /// `idempotency_key_reused`) and writes nothing.
    pub request_sha256: Option<String>,
}

/// What the inline attempt of a sync event came to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SyncOutcome {
    /// The delivery.
    pub delivery_id: DeliveryId,
    /// `delivered`, `exhausted`, or `held` (the endpoint is disabled; no attempt was made);
    /// `scheduled` or `sending` (with `deferred` set) while the delivery is still under way.
    pub status: DeliveryStatus,
    /// The attempt record.
    pub attempt: Option<Attempt>,
    /// Set when the delivery goes on without an outcome to report: the inline attempt could
    /// not be claimed or recorded (an AWS call failed after the event was accepted; it then
    /// continues asynchronously under the endpoint's retry policy), it could not start and
    /// was queued again, or a repeated event id's delivery is still under way. Says what
    /// happened and where to follow it; the answer is 202, not 200/502.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deferred: Option<String>,
}

/// A delivery created for an event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeliveryRef {
    /// Delivery id.
    pub id: DeliveryId,
    /// The endpoint it goes to.
    pub endpoint_id: EndpointId,
}

/// Something the caller should know about an accepted event: `code` is stable,
/// `message` says what happened and what to do.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Warning {
    /// [`NO_SUBSCRIBED_ENDPOINT`].
    pub code: &'static str,
    /// Names the tenant (and the event type) and says that nothing was stored.
    pub message: String,
}

/// The warning code of an event no endpoint subscribes to: nothing was stored, nothing will
/// be delivered, and `GET /v1/events/{id}` answers 404.
pub const NO_SUBSCRIBED_ENDPOINT: &str = "no_subscribed_endpoint";

/// The answer to an accepted event (HTTP 202).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Accepted {
    /// The event id (the caller's or a generated one).
    pub event_id: EventId,
    /// One delivery per subscribed endpoint; empty when none subscribes (with a
    /// [`NO_SUBSCRIBED_ENDPOINT`] warning).
    pub deliveries: Vec<DeliveryRef>,
    /// What the caller should know: a [`NO_SUBSCRIBED_ENDPOINT`] warning when no endpoint
    /// subscribes, so a typo'd tenant id is not a silent success. Absent when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Warning>,
    /// Sync mode only: the inline attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<SyncOutcome>,
    /// The event id had been accepted before (this call created no event item): the answer
    /// is the event's, not a new one's (`idempotent-replayed: true` for a keyed request).
    #[serde(skip)]
    pub replayed: bool,
    /// Sync mode: the message of the inline attempt, when this call created the delivery;
    /// [`crate::service::deliver::attempt_inline`] makes it and sets [`Self::outcome`].
    #[serde(skip)]
    pub inline_attempt: Option<Enqueue>,
}

/// Checks an event before any AWS call: `tenant_id`, `event_type` and `id` by the one rule
/// for client-chosen ids ([`ids::client_id`]), the payload's size. Returns the tenant and
/// event ids parsed (the event id `None` when the caller gave none).
///
/// # Errors
/// [`ServiceError::Validation`] naming the field; [`ServiceError::TooLarge`] for a payload
/// over 256 KiB.
pub fn check(event: &NewEvent) -> Result<(TenantId, Option<EventId>), ServiceError> {
    let tenant_id = TenantId::parse("tenant_id", event.tenant_id.as_str())?;
    ids::client_id("event_type", &event.event_type)?;
    let id = event.id.as_deref().map(|id| EventId::parse("id", id)).transpose()?;
    if event.payload.len() > MAX_PAYLOAD_BYTES {
        return Err(ServiceError::TooLarge(format!(
            "payload: {} bytes is over the limit of {MAX_PAYLOAD_BYTES} bytes",
            event.payload.len()
        )));
    }
    Ok((tenant_id, id))
}

/// Parses an event's payload, once, for everything ingest checks it against (the catalog's
/// schema, every endpoint's payload filter): [`payload::parse`], at most
/// [`payload::MAX_PAYLOAD_DEPTH`] levels deep. Pure.
///
/// # Errors
/// [`ServiceError::PayloadTooDeep`] (422 `payload_too_deep`); [`ServiceError::Validation`]
/// (422) for a payload serde_json cannot read as a value (a number such as `1e400`).
pub fn parse_payload(text: &str) -> Result<serde_json::Value, ServiceError> {
    payload::parse(text).map_err(|e| match e {
        PayloadError::TooDeep { .. } => ServiceError::PayloadTooDeep(e.to_string()),
        PayloadError::Unreadable(_) => ServiceError::Validation(e.to_string()),
    })
}

/// Accepts an event.
///
/// Every subscribed endpoint gets a delivery; one of a disabled or paused endpoint is stored
/// `held` (kept, not attempted) so nothing is dropped. With `sync`, the one subscribed
/// endpoint's first attempt is left to the caller: [`crate::service::deliver::attempt_inline`]
/// makes it, once, and sets [`Accepted::outcome`] to what happened.
///
/// # Errors
/// - [`ServiceError::Validation`] for a `tenant_id`, `event_type` or `id` outside the id rule
///   ([`check`]), or `sync` where the event would go to other than exactly one endpoint;
/// - [`ServiceError::TooLarge`] for a payload over 256 KiB;
/// - [`ServiceError::PayloadTooDeep`] for a payload nested deeper than
///   [`payload::MAX_PAYLOAD_DEPTH`], [`ServiceError::Validation`] for one that does not parse
///   ([`parse_payload`]);
/// - [`ServiceError::SchemaMismatch`], [`ServiceError::EventTypeArchived`] or
///   [`ServiceError::UnknownEventType`] when the event-type catalog refuses the event
///   ([`crate::service::event_types::enforce`]); nothing is written then;
/// - [`ServiceError::Unavailable`] when DynamoDB failed; nothing was accepted then, however
///   many endpoints the event fans out to (retry; with the same `id` it is idempotent).
/// - [`ServiceError::TenantPurging`] while the tenant is being purged (read with its endpoints,
///   no request of its own);
/// - [`ServiceError::ReservedTenant`] for the operational events' tenant
///   ([`operational::TENANT`]): only the stack itself posts there ([`ingest_operational`]).
pub async fn ingest(app: &App, event: NewEvent) -> Result<Accepted, ServiceError> {
    let ids = check(&event)?;
    if event.tenant_id == operational::TENANT {
        return Err(ServiceError::ReservedTenant(format!(
            "tenant_id: {} is the stack's own tenant for operational events; only the stack posts there",
            operational::TENANT
        )));
    }
    // The one parse of the payload, refused here rather than taken as anything else later.
    let parsed = parse_payload(&event.payload)?;
    // The catalog's word before anything is written (one cached read per type and process).
    crate::service::event_types::enforce(app, &event.event_type, &parsed).await?;
    accept(app, event, ids, &parsed).await
}

/// Hands an operational event to the endpoints registered under [`operational::TENANT`] (the
/// stack's operational endpoints), as an event of that tenant: signed webhooks through the
/// same pipeline (retries, dead letters), its `id` the event's id, so a repeat (a notify
/// step run again after a crash) is the same event, accepted once. The payload is the event
/// as published on the bus. Not checked against the catalog: operational event types are the
/// stack's own ([`crate::domain::operational`]). With no operational endpoint subscribed,
/// nothing is stored (one Query of the tenant's endpoints).
///
/// # Errors
/// [`ServiceError::Unavailable`] when DynamoDB or SQS failed (the notify step runs again).
pub async fn ingest_operational(app: &App, event: &operational::OperationalEvent) -> Result<Accepted, ServiceError> {
    let parsed = serde_json::to_value(event).map_err(|e| ServiceError::Internal(e.to_string()))?;
    let payload = parsed.to_string();
    let event = NewEvent {
        tenant_id: operational::TENANT.to_string(),
        event_type: event.event_type.clone(),
        payload,
        id: Some(event.id.clone()),
        sync: false,
        request_sha256: None,
    };
    let ids = check(&event)?;
    accept(app, event, ids, &parsed).await
}

/// Accepts a checked event (`tenant_id` and `id` its ids as [`check`] parsed them, `parsed`
/// its payload as [`parse_payload`] read it): fan-out to the tenant's subscribed endpoints.
async fn accept(
    app: &App,
    event: NewEvent,
    (tenant_id, id): (TenantId, Option<EventId>),
    parsed: &serde_json::Value,
) -> Result<Accepted, ServiceError> {
    let now = app.clock.now();
    let event_id = id.unwrap_or_else(|| EventId::made(format!("evt_{}", app.random.ulid(now))));
    // The tenant's endpoints and settings (retention, purge mark): one Query.
    let snapshot = app.store.tenant_snapshot(&tenant_id, &event_id).await?;
    let settings = snapshot.settings.unwrap_or_else(|| TenantSettings::empty(&tenant_id, now));
    if let Some(purge) = &settings.purge {
        return Err(ServiceError::TenantPurging(format!(
            "tenant {:?} is being purged (job {}, since {}); its events are refused until the purge ends",
            event.tenant_id,
            purge.job_id,
            purge.started_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )));
    }
    let endpoints = snapshot.endpoints;
    let endpoints_count = endpoints.len();
    // Every filter sees the payload as parsed once at the door (never a stand-in for one
    // that did not parse: such a payload was refused before this).
    let mut targets = Vec::new();
    for ep in endpoints.into_iter().filter(|ep| ep.subscribes_to(&event.event_type)) {
        if let Some(filter) = &ep.filter
            && !payload_filter::matches(filter, parsed)
        {
            continue;
        }
        targets.push(ep);
    }
    if event.sync && targets.len() != 1 {
        return Err(ServiceError::Validation(format!(
            "mode: sync needs exactly one subscribed endpoint; {} subscribe to {}",
            targets.len(),
            event.event_type
        )));
    }
    if targets.is_empty() {
        return nothing_subscribes(app, &event, event_id, endpoints_count).await;
    }

    let stored = StoredEvent {
        tenant_id: tenant_id.clone(),
        event_id: event_id.clone(),
        event_type: event.event_type.clone(),
        payload: event.payload,
        created_at: now,
        expires_at: now.timestamp() + i64::from(settings.retention(&app.config).event_days) * 86_400,
        request_sha256: event.request_sha256,
    };
    let digest = crate::domain::signing::payload_digest(stored.payload.as_bytes());
    let planned: Vec<_> = targets
        .iter()
        .map(|ep| {
            let (mut d, due_at, enqueue) = delivery_lifecycle::new_delivery(
                &app.config,
                now,
                delivery_id(&event_id, &ep.id),
                &event_id,
                &event.event_type,
                &tenant_id,
                &ep.id,
                // Queued like any other: deliver holds it, in a write conditional on the
                // endpoint's version, if the endpoint does not accept it when it comes up. (A
                // delivery written `held` here could race an enable whose release job had
                // already run, and stay held on an enabled endpoint.)
                false,
            );
            d.payload_sha256 = Some(digest.clone());
            // The tenant's overrides ride on the delivery until it is final (domain::tenant).
            d.delivered_retention_days = settings.delivered_retention_days;
            d.exhausted_retention_days = settings.exhausted_retention_days;
            (d, due_at, enqueue)
        })
        .collect();
    let rows: Vec<_> = planned.iter().map(|(d, due_at, _)| (d, *due_at)).collect();
    let inserted = app.store.insert_event(&stored, &rows).await.map_err(|e| match e {
        StoreError::RequestMismatch => ServiceError::IdempotencyKeyReused(format!(
            "Idempotency-Key: event {event_id} was first accepted with a different request (tenant, event type, \
             id, mode or payload); use a new key for a new request"
        )),
        other => other.into(),
    })?;
    let replayed = !rows.is_empty() && !inserted.event;
    let mut deliveries = Vec::with_capacity(planned.len());
    // Attempt 1 of each delivery this call created, by lane: an endpoint marked slow (its
    // `slow_until`, as the endpoint read above has it) has it sent to the slow lane directly,
    // so the main lane never claims it only to give it back (see [`crate::domain::lane`]).
    let (mut to_main, mut to_slow) = (Vec::new(), Vec::new());
    for (((delivery, _, enqueue), ep), created) in planned.into_iter().zip(&targets).zip(inserted.deliveries) {
        deliveries.push(DeliveryRef { id: delivery.id, endpoint_id: ep.id.clone() });
        let Some(mut e) = enqueue.filter(|_| created) else { continue };
        // Attempt 1 carries the payload (unless the event id was seen before: then the first
        // payload stands, and deliver reads it), saving deliver a read.
        e.message.payload = inserted.event.then(|| stored.payload.clone());
        if app.slow_queue.is_some() && lane::is_slow(ep, now) { to_slow.push(e) } else { to_main.push(e) }
    }
    if event.sync {
        // The one inline attempt is the caller's to make (deliver::attempt_inline), whatever
        // the endpoint's lane; its message is not sent. Should the caller not make it, the
        // delivery is in the due index and the sweeper re-drives it.
        let inline_attempt = to_main.pop().or_else(|| to_slow.pop());
        return Ok(Accepted { event_id, deliveries, warnings: Vec::new(), outcome: None, replayed, inline_attempt });
    }
    let id = event_id.as_str();
    let send = |slow: bool, batch: Vec<Enqueue>| async move {
        if batch.is_empty() {
            return;
        }
        if let Err(e) = lanes::queue_for(app, slow).send(&batch).await {
            // The deliveries are written and in the due index: the sweeper re-drives them.
            tracing::warn!(event_id = id, slow, error = %e, "enqueue failed after write; the sweeper will re-drive");
        }
    };
    futures::future::join(send(false, to_main), send(true, to_slow)).await;
    tracing::info!(%event_id, event_type = %event.event_type, deliveries = deliveries.len(), "event accepted");
    Ok(Accepted { event_id, deliveries, warnings: Vec::new(), outcome: None, replayed, inline_attempt: None })
}

/// The answer to an event no endpoint of its tenant subscribes to: nothing is stored. A
/// tenant with no endpoint at all is refused when the stack says so
/// (`reject_unknown_tenants`); otherwise the 202 carries a [`NO_SUBSCRIBED_ENDPOINT`]
/// warning, and the log line is a WARN naming the tenant. It names no other tenant (not even
/// `acme` for `Acme`): whether another tenant id has endpoints is that tenant's business.
async fn nothing_subscribes(
    app: &App,
    event: &NewEvent,
    event_id: EventId,
    endpoints: usize,
) -> Result<Accepted, ServiceError> {
    let tenant = &event.tenant_id;
    let message = if endpoints == 0 {
        format!(
            "tenant {tenant:?} has no endpoints, so nothing was stored and nothing will be delivered; tenant ids \
             are case-sensitive: check the spelling, or create an endpoint for the tenant first"
        )
    } else {
        format!(
            "none of tenant {tenant:?}'s {endpoints} endpoints subscribes to {:?} (by its event types and payload \
             filter), so nothing was stored and nothing will be delivered; add the event type to an endpoint's \
             event_types to receive it",
            event.event_type
        )
    };
    if endpoints == 0 && app.config.reject_unknown_tenants {
        tracing::warn!(tenant_id = %tenant, event_type = %event.event_type, "event refused: the tenant has no endpoints");
        return Err(ServiceError::UnknownTenant(message));
    }
    tracing::warn!(%event_id, tenant_id = %tenant, event_type = %event.event_type, endpoints, "event accepted but no endpoint subscribes: nothing stored");
    Ok(Accepted {
        event_id,
        deliveries: Vec::new(),
        warnings: vec![Warning { code: NO_SUBSCRIBED_ENDPOINT, message }],
        outcome: None,
        replayed: false,
        inline_attempt: None,
    })
}

/// Accepts an EventBridge event: `detail-type` is the event type, `detail` the payload, `id`
/// the event id, and the tenant is the string at `detail[config.eventbridge_tenant_field]`.
///
/// # Errors
/// As [`ingest`], and [`ServiceError::Validation`] when the tenant field is missing.
pub async fn ingest_eventbridge(
    app: &App,
    event: aws_lambda_events::eventbridge::EventBridgeEvent<serde_json::Value>,
) -> Result<Accepted, ServiceError> {
    ingest(app, eventbridge_event(&app.config.eventbridge_tenant_field, event)?).await
}

/// Why the ingest function failed an EventBridge event: the service error's code and message,
/// shown as `{code}: {message}` (e.g. `schema_mismatch: payload: ...`). The function returns
/// it as its error, so Lambda retries the invocation (`EventInvokeConfig`) and then puts the
/// event in the events dead-letter queue with this text as the record's
/// `responsePayload.errorMessage`: the reason an operator reads there.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct EventBridgeRefusal {
    /// The error's stable code ([`ServiceError::code`]).
    pub code: &'static str,
    /// Its message.
    pub message: String,
}

/// The ingest function's answer to an EventBridge event ([`ingest_eventbridge`]), its failure
/// as an [`EventBridgeRefusal`].
///
/// # Errors
/// [`EventBridgeRefusal`] with the code and message of [`ingest_eventbridge`]'s error.
pub async fn handle_eventbridge(
    app: &App,
    event: aws_lambda_events::eventbridge::EventBridgeEvent<serde_json::Value>,
) -> Result<Accepted, EventBridgeRefusal> {
    ingest_eventbridge(app, event).await.map_err(|e| EventBridgeRefusal { code: e.code(), message: e.to_string() })
}

/// [`handle_eventbridge`] for an EventBridge event as the ingest function reads it, its
/// `detail` still JSON text: the detail is parsed by [`parse_payload`], so one nested deeper
/// than [`payload::MAX_PAYLOAD_DEPTH`] is refused with `payload_too_deep` (to the events
/// dead-letter queue), even one deeper than serde_json's own limit (128), which would
/// otherwise fail the invocation with the parser's words.
///
/// # Errors
/// As [`handle_eventbridge`].
pub async fn handle_eventbridge_text(
    app: &App,
    event: aws_lambda_events::eventbridge::EventBridgeEvent<Box<serde_json::value::RawValue>>,
) -> Result<Accepted, EventBridgeRefusal> {
    handle_eventbridge(app, eventbridge_detail(event)?).await
}

/// The EventBridge event with its `detail` parsed by [`parse_payload`]. Pure.
///
/// # Errors
/// [`EventBridgeRefusal`] with `payload_too_deep` or `validation_error`.
pub fn eventbridge_detail(
    event: aws_lambda_events::eventbridge::EventBridgeEvent<Box<serde_json::value::RawValue>>,
) -> Result<aws_lambda_events::eventbridge::EventBridgeEvent<serde_json::Value>, EventBridgeRefusal> {
    let detail =
        parse_payload(event.detail.get()).map_err(|e| EventBridgeRefusal { code: e.code(), message: e.to_string() })?;
    let mut parsed = aws_lambda_events::eventbridge::EventBridgeEvent::<serde_json::Value>::default();
    parsed.version = event.version;
    parsed.id = event.id;
    parsed.detail_type = event.detail_type;
    parsed.source = event.source;
    parsed.account = event.account;
    parsed.time = event.time;
    parsed.region = event.region;
    parsed.resources = event.resources;
    parsed.detail = detail;
    Ok(parsed)
}

/// The event an EventBridge event stands for (see [`ingest_eventbridge`]), checked by
/// [`check`]; `tenant_field` names the field of `detail` that holds the tenant. Pure.
///
/// # Errors
/// [`ServiceError::Validation`] when the tenant field is missing or not a string, or as
/// [`check`].
pub fn eventbridge_event(
    tenant_field: &str,
    event: aws_lambda_events::eventbridge::EventBridgeEvent<serde_json::Value>,
) -> Result<NewEvent, ServiceError> {
    let field = tenant_field;
    let tenant_id = event
        .detail
        .get(field)
        .and_then(|v| v.as_str())
        .ok_or_else(|| ServiceError::Validation(format!("detail.{field}: is required (a string naming the tenant)")))?
        .to_string();
    let payload = serde_json::to_string(&event.detail).map_err(|e| ServiceError::Validation(format!("detail: {e}")))?;
    let new =
        NewEvent { tenant_id, event_type: event.detail_type, payload, id: event.id, sync: false, request_sha256: None };
    check(&new)?;
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_eventbridge_detail_type_follows_the_event_type_id_rule() {
        let envelope = |detail_type: &str| {
            serde_json::from_value(serde_json::json!({
                "version": "0", "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718", "detail-type": detail_type,
                "source": "aws.ec2", "account": "123456789012", "time": "2026-11-30T00:00:00Z",
                "region": "us-east-1", "resources": [], "detail": {"tenant_id": "acme"},
            }))
            .unwrap()
        };
        let e = eventbridge_event("tenant_id", envelope("EC2 Instance State-change Notification")).unwrap_err();
        assert_eq!(e.code(), "validation_error");
        assert!(e.to_string().starts_with("event_type: "), "{e}");
        assert_eq!(eventbridge_event("tenant_id", envelope("order.paid")).unwrap().event_type, "order.paid");
    }
}
