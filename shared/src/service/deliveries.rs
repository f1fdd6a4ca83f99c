//! Events, deliveries and jobs as the admin API and the portal read them: one event with its
//! deliveries, one delivery with its attempts, listings, a job's progress, and replay.

use crate::App;
use crate::domain::delivery_lifecycle::{self};
use crate::domain::ids::{DeliveryId, EndpointId, EventId, JobId, TenantId};
use crate::domain::model::{Attempt, Delivery, DeliveryStatus, Job};
use crate::error::ServiceError;
use crate::store::{Applied, DeliveryQuery, DeliverySummary, Page};
use chrono::{DateTime, Utc};
use serde::Serialize;
/// An event: its id and every delivery made of it.
#[derive(Debug, Clone, Serialize)]
pub struct EventView {
    /// Event id.
    pub id: EventId,
    /// Event type.
    pub event_type: String,
    /// Tenant.
    pub tenant_id: TenantId,
    /// When it was accepted.
    pub created_at: DateTime<Utc>,
    /// When retention (DynamoDB TTL) removes its payload item: ingest's time plus the
    /// tenant's event retention then (`null`: the item is gone already).
    pub expires_at: Option<DateTime<Utc>>,
    /// When its payload was expunged (absent: it was not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expunged_at: Option<DateTime<Utc>>,
    /// One per endpoint it went to; each says when it expires (`expires_at`, set when it
    /// becomes final; `GET /v1/deliveries/{id}` gives the retention that will apply).
    pub deliveries: Vec<DeliverySummary>,
}

/// An event with its deliveries. An event is identified by (tenant, id): two tenants may
/// use the same id, and no answer mixes their records.
///
/// - with `tenant_id`: that tenant's event (404 when it has none with this id, also when no
///   endpoint subscribed to it, as ingest stores nothing for an event with no deliveries, and
///   once every delivery has expired: the view is made of the deliveries);
/// - without: the event when one tenant has this id; when several do, 409 naming them, so the
///   caller asks again with `tenant_id`.
///
/// # Errors
/// [`ServiceError::NotFound`] when no delivery of the tenant has this event id;
/// [`ServiceError::Conflict`] listing the tenants when the id is ambiguous without `tenant_id`.
pub async fn get_event(app: &App, id: &EventId, tenant_id: Option<&TenantId>) -> Result<EventView, ServiceError> {
    let mut deliveries = app.store.event_deliveries(id).await?;
    if let Some(t) = tenant_id {
        deliveries.retain(|d| d.tenant_id == *t);
    }
    let tenants: std::collections::BTreeSet<&str> = deliveries.iter().map(|d| d.tenant_id.as_str()).collect();
    if tenants.len() > 1 {
        let names: Vec<_> = tenants.into_iter().collect();
        return Err(ServiceError::Conflict(format!(
            "event {id} exists in tenants {}; ask again with ?tenant_id=",
            names.join(", ")
        )));
    }
    let first = deliveries.first().ok_or_else(|| {
        ServiceError::NotFound(format!(
            "no event {id} with a stored delivery (an event no endpoint subscribed to, answered with no \
             deliveries, is not stored; a delivery is kept {} days after it is delivered and {} after it is \
             exhausted)",
            app.config.delivered_retention_days, app.config.exhausted_retention_days
        ))
    })?;
    let record = app.store.event_record(&first.tenant_id, id).await?;
    Ok(EventView {
        id: id.clone(),
        event_type: first.event_type.clone(),
        tenant_id: first.tenant_id.clone(),
        created_at: first.created_at,
        expires_at: record.as_ref().and_then(|r| DateTime::from_timestamp(r.expires_at, 0)),
        expunged_at: record.and_then(|r| r.expunged_at),
        deliveries,
    })
}

/// A background job by id.
///
/// # Errors
/// [`ServiceError::NotFound`].
pub async fn get_job(app: &App, id: &JobId) -> Result<Job, ServiceError> {
    app.store.get_job(id).await?.ok_or_else(|| ServiceError::NotFound(format!("job {id}")))
}

/// A delivery with its attempt history (no payload).
#[derive(Debug, Clone, Serialize)]
pub struct DeliveryView {
    /// Delivery id.
    pub id: DeliveryId,
    /// Event id (`webhook-id`).
    pub event_id: EventId,
    /// Event type.
    pub event_type: String,
    /// Tenant.
    pub tenant_id: TenantId,
    /// Endpoint.
    pub endpoint_id: EndpointId,
    /// `scheduled`, `sending`, `delivered`, `exhausted` or `held`.
    pub status: DeliveryStatus,
    /// Attempts started.
    pub attempt_count: u32,
    /// When the next attempt is due; absent unless `scheduled`.
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// The most recent attempts (at most [`crate::domain::delivery_lifecycle::MAX_KEPT_ATTEMPTS`]), oldest
    /// first.
    pub attempts: Vec<Attempt>,
    /// How many older attempts are no longer listed in `attempts` (0 is left out).
    #[serde(skip_serializing_if = "is_zero")]
    pub attempts_dropped: u32,
    /// Accepted at.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// Why it was ended without the retry policy deciding (`endpoint_deleted`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When retention (DynamoDB TTL) removes it; `null` until it is final (delivered or
    /// exhausted), when it is set from `retention_days`.
    pub expires_at: Option<DateTime<Utc>>,
    /// The retention that applies once it is final, days: its tenant's override at ingest,
    /// else the stack's.
    pub retention_days: FinalRetention,
}

/// A delivery's retention once final, days.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct FinalRetention {
    /// Once delivered.
    pub delivered: u32,
    /// Once exhausted.
    pub exhausted: u32,
}

impl DeliveryView {
    /// The view of `d` under the stack's configuration `cfg`.
    pub fn of(d: Delivery, cfg: &crate::config::Config) -> Self {
        let retention_days =
            FinalRetention { delivered: d.retention_days(cfg, true), exhausted: d.retention_days(cfg, false) };
        Self { retention_days, ..d.into() }
    }
}

impl From<Delivery> for DeliveryView {
    fn from(d: Delivery) -> Self {
        Self {
            id: d.id,
            event_id: d.event_id,
            event_type: d.event_type,
            tenant_id: d.tenant_id,
            endpoint_id: d.endpoint_id,
            status: d.status,
            attempt_count: d.attempt_count,
            next_attempt_at: d.next_attempt_at,
            attempts: d.attempts,
            attempts_dropped: d.attempts_dropped,
            created_at: d.created_at,
            updated_at: d.updated_at,
            reason: d.reason,
            expires_at: d.expires_at.and_then(|s| DateTime::from_timestamp(s, 0)),
            // Only the stamps here; [`DeliveryView::of`] fills in the stack's.
            retention_days: FinalRetention {
                delivered: d.delivered_retention_days.unwrap_or_default(),
                exhausted: d.exhausted_retention_days.unwrap_or_default(),
            },
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A delivery with its attempts.
///
/// # Errors
/// [`ServiceError::NotFound`].
pub async fn get_delivery(app: &App, id: &DeliveryId) -> Result<DeliveryView, ServiceError> {
    let d = app.store.get_delivery(id).await?.ok_or_else(|| ServiceError::NotFound(format!("delivery {id}")))?;
    Ok(DeliveryView::of(d, &app.config))
}

/// A page of deliveries, by endpoint (any status) or by status `exhausted`/`held`.
///
/// # Errors
/// [`ServiceError::Validation`] for a query with neither, a `since` or `until` without
/// `endpoint_id`, or a bad cursor.
pub async fn list_deliveries(app: &App, query: DeliveryQuery) -> Result<Page<DeliverySummary>, ServiceError> {
    if query.endpoint_id.is_none() && !matches!(query.status, Some(DeliveryStatus::Exhausted | DeliveryStatus::Held)) {
        return Err(ServiceError::Validation("endpoint_id: is required unless status is exhausted or held".into()));
    }
    // The listing across endpoints reads the status index, which is ordered by when each
    // delivery ended, not by acceptance: a window there would be ignored, so it is refused.
    if query.endpoint_id.is_none() && (query.since.is_some() || query.until.is_some()) {
        let field = if query.since.is_some() { "since" } else { "until" };
        return Err(ServiceError::Validation(format!(
            "{field}: a window of acceptance times needs endpoint_id (the dead letters across endpoints \
             are listed by when each ended); to replay an endpoint's dead letters of a window, use \
             POST /v1/endpoints/{{id}}/recover"
        )));
    }
    Ok(app.store.list_deliveries(&query).await?)
}

/// Replays an exhausted or held delivery: a fresh cycle of its endpoint's retry policy, the
/// first attempt now, the same frozen payload and `webhook-id`.
///
/// # Errors
/// [`ServiceError::NotFound`]; [`ServiceError::Conflict`] when it is not exhausted or held
/// (or changed while replaying); [`ServiceError::PayloadExpunged`] when its event's payload
/// was expunged.
pub async fn replay(app: &App, id: &DeliveryId) -> Result<DeliveryView, ServiceError> {
    let d = app.store.get_delivery(id).await?.ok_or_else(|| ServiceError::NotFound(format!("delivery {id}")))?;
    // An expunged payload is never sent again (one read of the event's item).
    if let Some(at) = app.store.event_record(&d.tenant_id, &d.event_id).await?.and_then(|r| r.expunged_at) {
        return Err(ServiceError::PayloadExpunged(format!(
            "delivery {id}: the payload of event {} was expunged at {}; its history stays, it cannot be replayed",
            d.event_id,
            at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )));
    }
    let now = app.clock.now();
    let Some((t, enqueue)) = delivery_lifecycle::replay(&app.config, now, &d) else {
        return Err(ServiceError::Conflict(format!(
            "delivery {id} is {}; only exhausted or held deliveries can be replayed",
            d.status.as_str()
        )));
    };
    let updated = match app.store.apply(id, &t, true).await? {
        Applied::Done(Some(d)) => *d,
        Applied::Done(None) => d,
        Applied::Lost => {
            return Err(ServiceError::Conflict(format!("delivery {id} changed while replaying; retry")));
        }
    };
    if let Err(e) = app.queue.send(&[enqueue]).await {
        tracing::warn!(delivery_id = %id, error = %e, "replay enqueue failed; the sweeper will re-drive");
    }
    tracing::info!(delivery_id = %id, "replayed");
    Ok(DeliveryView::of(updated, &app.config))
}
