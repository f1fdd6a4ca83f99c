//! A tenant's retention overrides (`GET/PUT /v1/tenants/{id}/settings`) and an event's payload
//! expunged on request (`POST /v1/events/{id}/expunge`); the bounds and what they apply to are
//! [`crate::domain::tenant`]'s.

use crate::App;
use crate::domain::ids::{DeliveryId, EventId, TenantId};
use crate::domain::tenant::{self, PurgeMark, Retention, TenantSettings};
use crate::error::ServiceError;
use crate::service::endpoint_state::CHANGE_TRIES;
use chrono::{DateTime, Utc};
use serde::Serialize;

/// A tenant's settings as the API shows them.
#[derive(Debug, Clone, Serialize)]
pub struct SettingsView {
    /// Tenant.
    pub tenant_id: TenantId,
    /// The override, days (`null`: the stack's `WEBHOOKS_DELIVERED_RETENTION_DAYS`).
    pub delivered_retention_days: Option<u32>,
    /// The override, days (`null`: the stack's `WEBHOOKS_EXHAUSTED_RETENTION_DAYS`).
    pub exhausted_retention_days: Option<u32>,
    /// The override, days (`null`: the stack's `WEBHOOKS_EVENT_RETENTION_DAYS`).
    pub event_retention_days: Option<u32>,
    /// What applies to the tenant's new items, days.
    pub effective: Retention,
    /// The least `event_retention_days` accepted now, days: the longest retry schedule of the
    /// tenant's endpoints (the `standard` preset's at least).
    pub min_event_retention_days: u32,
    /// The purge under way, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purge: Option<PurgeMark>,
    /// The settings item's version (0: none stored).
    pub version: u64,
}

/// What `PUT /v1/tenants/{id}/settings` sets: each override, `None` for the stack's value.
#[derive(Debug, Clone, Default)]
pub struct NewSettings {
    /// Days a delivered delivery is kept.
    pub delivered_retention_days: Option<u32>,
    /// Days a dead letter is kept.
    pub exhausted_retention_days: Option<u32>,
    /// Days an event's payload is kept from ingest.
    pub event_retention_days: Option<u32>,
}

fn view(app: &App, s: &TenantSettings, policies: &[&crate::domain::retry_policy::RetryPolicy]) -> SettingsView {
    SettingsView {
        tenant_id: s.tenant_id.clone(),
        delivered_retention_days: s.delivered_retention_days,
        exhausted_retention_days: s.exhausted_retention_days,
        event_retention_days: s.event_retention_days,
        effective: s.retention(&app.config),
        min_event_retention_days: tenant::least_event_days(policies),
        purge: s.purge.clone(),
        version: s.version,
    }
}

/// A tenant's settings (one Query of its partition: endpoints and settings).
///
/// # Errors
/// [`ServiceError::Unavailable`] when DynamoDB failed.
pub async fn get_settings(app: &App, tenant_id: &TenantId) -> Result<SettingsView, ServiceError> {
    let snap = app.store.tenant_snapshot(tenant_id, tenant_id).await?;
    let settings = snap.settings.unwrap_or_else(|| TenantSettings::empty(tenant_id, app.clock.now()));
    let policies: Vec<_> = snap.endpoints.iter().map(|e| &e.retry_policy).collect();
    Ok(view(app, &settings, &policies))
}

/// Replaces a tenant's retention overrides; they apply to the items written after this
/// answers (see [`crate::domain::tenant`]). A write guarded on the settings' version, decided
/// again when another writer came first.
///
/// # Errors
/// [`ServiceError::Validation`] naming the bound an override breaks ([`tenant::check`]);
/// [`ServiceError::TenantPurging`] while the tenant is being purged;
/// [`ServiceError::Conflict`] when the settings changed under every one of [`CHANGE_TRIES`]
/// tries; [`ServiceError::Unavailable`] when DynamoDB failed.
pub async fn put_settings(app: &App, tenant_id: &TenantId, new: NewSettings) -> Result<SettingsView, ServiceError> {
    for _ in 0..CHANGE_TRIES {
        let now = app.clock.now();
        let snap = app.store.tenant_snapshot(tenant_id, tenant_id).await?;
        let current = snap.settings.unwrap_or_else(|| TenantSettings::empty(tenant_id, now));
        if let Some(p) = &current.purge {
            return Err(ServiceError::TenantPurging(format!("tenant {tenant_id} is being purged (job {})", p.job_id)));
        }
        let next = TenantSettings {
            delivered_retention_days: new.delivered_retention_days,
            exhausted_retention_days: new.exhausted_retention_days,
            event_retention_days: new.event_retention_days,
            version: current.version + 1,
            updated_at: now,
            ..current.clone()
        };
        let policies: Vec<_> = snap.endpoints.iter().map(|e| &e.retry_policy).collect();
        tenant::check(&app.config, &next, &policies)?;
        if app.store.save_settings(&next, current.version, None).await? {
            tracing::info!(%tenant_id, retention = ?next.retention(&app.config), "tenant retention set");
            return Ok(view(app, &next, &policies));
        }
    }
    Err(ServiceError::Conflict(format!("tenant {tenant_id}'s settings changed under {CHANGE_TRIES} tries; retry")))
}

/// What an expunge answers.
#[derive(Debug, Clone, Serialize)]
pub struct Expunged {
    /// Event id.
    pub id: EventId,
    /// Tenant.
    pub tenant_id: TenantId,
    /// When the payload was expunged (the first expunge's time).
    pub expunged_at: Option<DateTime<Utc>>,
    /// When the event's item (now without payload) is removed by retention.
    pub expires_at: Option<DateTime<Utc>>,
    /// Its deliveries, whose history stays (until their own retention).
    pub deliveries: usize,
}

/// Expunges an event's payload: its deliveries keep their history, a replay of them is
/// refused (410 `payload_expunged`), and no attempt after this answers sends it (an attempt
/// whose message carries it finds the delivery's digest changed and reads the stored payload,
/// which is gone: it ends `exhausted` with `payload_expired`). The event is found as
/// `GET /v1/events/{id}` finds it (with `tenant_id`, or the one tenant that used the id).
///
/// # Errors
/// As [`crate::service::deliveries::get_event`] (404, 409 naming the tenants);
/// [`ServiceError::Unavailable`] when DynamoDB failed (retry: it is idempotent).
pub async fn expunge_event(app: &App, id: &EventId, tenant_id: Option<&TenantId>) -> Result<Expunged, ServiceError> {
    let event = crate::service::deliveries::get_event(app, id, tenant_id).await?;
    let delivery_ids: Vec<DeliveryId> = event.deliveries.iter().map(|d| d.id.clone()).collect();
    let now = app.clock.now();
    if !app.store.expunge_payload(&event.tenant_id, id, &delivery_ids, now).await? {
        return Err(ServiceError::NotFound(format!("event {id}: its item is gone (past its retention)")));
    }
    let record = app.store.event_record(&event.tenant_id, id).await?;
    tracing::info!(event_id = %id, tenant_id = %event.tenant_id, "event payload expunged");
    Ok(Expunged {
        id: id.clone(),
        tenant_id: event.tenant_id,
        expunged_at: record.as_ref().and_then(|r| r.expunged_at),
        expires_at: record.and_then(|r| DateTime::from_timestamp(r.expires_at, 0)),
        deliveries: delivery_ids.len(),
    })
}
