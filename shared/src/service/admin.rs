//! The ops surface: endpoints, deliveries, replay.

use crate::App;
use crate::error::ServiceError;
use crate::lifecycle;
use crate::model::{Attempt, Delivery, DeliveryStatus, Endpoint};
use crate::policy::RetryPolicy;
use crate::signing;
use crate::store::{Applied, DeliveryQuery, DeliverySummary, Page, StoreError};
use chrono::{DateTime, Utc};
use serde::Serialize;

/// A new endpoint, as the API receives it.
#[derive(Debug, Clone)]
pub struct NewEndpoint {
    /// Owner.
    pub tenant_id: String,
    /// http(s) URL.
    pub url: String,
    /// Subscribed event types; `None` = all.
    pub event_types: Option<Vec<String>>,
    /// The raw `retry_policy` value; see [`RetryPolicy::from_request`].
    pub retry_policy: Option<serde_json::Value>,
    /// A `whsec_` secret to use instead of a generated one.
    pub secret: Option<String>,
}

/// An endpoint as the API shows it; the secret only on creation.
#[derive(Debug, Clone, Serialize)]
pub struct EndpointView {
    /// `ep_` id.
    pub id: String,
    /// Owner.
    pub tenant_id: String,
    /// URL.
    pub url: String,
    /// Subscribed event types; absent = all.
    pub event_types: Option<Vec<String>>,
    /// The resolved retry policy.
    pub retry_policy: RetryPolicy,
    /// Whether it receives attempts.
    pub enabled: bool,
    /// Created at.
    pub created_at: DateTime<Utc>,
    /// The signing secret, shown once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

impl EndpointView {
    fn of(ep: Endpoint, with_secret: bool) -> Self {
        Self {
            id: ep.id,
            tenant_id: ep.tenant_id,
            url: ep.url,
            event_types: ep.event_types,
            retry_policy: ep.retry_policy,
            enabled: ep.enabled,
            created_at: ep.created_at,
            secret: with_secret.then_some(ep.secret),
        }
    }
}

/// A delivery with its attempt history (no payload).
#[derive(Debug, Clone, Serialize)]
pub struct DeliveryView {
    /// Delivery id.
    pub id: String,
    /// Event id (`webhook-id`).
    pub event_id: String,
    /// Event type.
    pub event_type: String,
    /// Tenant.
    pub tenant_id: String,
    /// Endpoint.
    pub endpoint_id: String,
    /// `scheduled`, `sending`, `delivered`, `exhausted` or `held`.
    pub status: DeliveryStatus,
    /// Attempts started.
    pub attempt_count: u32,
    /// When the next attempt is due; absent unless `scheduled`.
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// Every attempt, oldest first.
    pub attempts: Vec<Attempt>,
    /// Accepted at.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// When retention (DynamoDB TTL) removes it; absent while in flight.
    pub expires_at: Option<DateTime<Utc>>,
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
            created_at: d.created_at,
            updated_at: d.updated_at,
            expires_at: d.expires_at.and_then(|s| DateTime::from_timestamp(s, 0)),
        }
    }
}

fn validate_url(url: &str) -> Result<(), ServiceError> {
    let parsed = url::Url::parse(url)
        .map_err(|e| ServiceError::Validation(format!("url: not a URL ({e})")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
        return Err(ServiceError::Validation(
            "url: must be an http or https URL with a host".into(),
        ));
    }
    Ok(())
}

/// Creates an endpoint.
///
/// # Errors
/// [`ServiceError::Validation`] naming the field: empty `tenant_id`, a `url` that is not
/// http(s), an empty event type, an invalid `retry_policy` or `secret`.
pub async fn create_endpoint(app: &App, new: NewEndpoint) -> Result<EndpointView, ServiceError> {
    if new.tenant_id.trim().is_empty() {
        return Err(ServiceError::Validation("tenant_id: is required".into()));
    }
    validate_url(&new.url)?;
    if let Some(types) = &new.event_types
        && types.iter().any(|t| t.trim().is_empty())
    {
        return Err(ServiceError::Validation(
            "event_types: names must not be empty".into(),
        ));
    }
    let retry_policy = RetryPolicy::from_request(new.retry_policy.as_ref())
        .map_err(|e| ServiceError::Validation(e.to_string()))?;
    let secret = match new.secret {
        Some(s) => {
            signing::secret_key(&s)
                .map_err(|e| ServiceError::Validation(format!("secret: {e}")))?;
            s
        }
        None => signing::generate_secret(&app.random),
    };
    let now = app.clock.now();
    let endpoint = Endpoint {
        id: format!("ep_{}", app.random.ulid(now)),
        tenant_id: new.tenant_id,
        url: new.url,
        event_types: new.event_types,
        retry_policy,
        secret,
        enabled: true,
        created_at: now,
        updated_at: now,
    };
    app.store
        .create_endpoint(&endpoint)
        .await
        .map_err(|e| match e {
            StoreError::AlreadyExists => {
                ServiceError::Conflict("endpoint id already exists; retry".into())
            }
            other => other.into(),
        })?;
    Ok(EndpointView::of(endpoint, true))
}

/// An endpoint by id (without its secret).
///
/// # Errors
/// [`ServiceError::NotFound`].
pub async fn get_endpoint(app: &App, id: &str) -> Result<EndpointView, ServiceError> {
    let ep = app
        .store
        .find_endpoint(id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("endpoint {id}")))?;
    Ok(EndpointView::of(ep, false))
}

/// A delivery with its attempts.
///
/// # Errors
/// [`ServiceError::NotFound`].
pub async fn get_delivery(app: &App, id: &str) -> Result<DeliveryView, ServiceError> {
    let d = app
        .store
        .get_delivery(id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("delivery {id}")))?;
    Ok(d.into())
}

/// A page of deliveries, by endpoint (any status) or by status `exhausted`/`held`.
///
/// # Errors
/// [`ServiceError::Validation`] for a query with neither, or a bad cursor.
pub async fn list_deliveries(
    app: &App,
    query: DeliveryQuery,
) -> Result<Page<DeliverySummary>, ServiceError> {
    if query.endpoint_id.is_none()
        && !matches!(
            query.status,
            Some(DeliveryStatus::Exhausted | DeliveryStatus::Held)
        )
    {
        return Err(ServiceError::Validation(
            "endpoint_id: is required unless status is exhausted or held".into(),
        ));
    }
    Ok(app.store.list_deliveries(&query).await?)
}

/// Replays an exhausted or held delivery: a fresh cycle of its endpoint's retry policy, the
/// first attempt now, the same frozen payload and `webhook-id`.
///
/// # Errors
/// [`ServiceError::NotFound`]; [`ServiceError::Conflict`] when it is not exhausted or held
/// (or changed while replaying).
pub async fn replay(app: &App, id: &str) -> Result<DeliveryView, ServiceError> {
    let d = app
        .store
        .get_delivery(id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("delivery {id}")))?;
    let now = app.clock.now();
    let Some((t, enqueue)) = lifecycle::replay(&app.config, now, &d) else {
        return Err(ServiceError::Conflict(format!(
            "delivery {id} is {}; only exhausted or held deliveries can be replayed",
            d.status.as_str()
        )));
    };
    let updated = match app.store.apply(id, &t, true).await? {
        Applied::Done(Some(d)) => *d,
        Applied::Done(None) => d,
        Applied::Lost => {
            return Err(ServiceError::Conflict(format!(
                "delivery {id} changed while replaying; retry"
            )));
        }
    };
    if let Err(e) = app.queue.send(&[enqueue]).await {
        tracing::warn!(delivery_id = id, error = %e, "replay enqueue failed; the sweeper will re-drive");
    }
    tracing::info!(delivery_id = id, "replayed");
    Ok(updated.into())
}
