//! Endpoints as the admin API and the portal manage them: create, read, update, enable,
//! disable, delete, rotate the secret, recover, and the views and stats they answer with.

use crate::App;
use crate::domain::endpoint_lifecycle;
use crate::domain::ids::{EndpointId, JobId, TenantId};
use crate::domain::model::{DeliveryStatus, Disabled, Endpoint, EndpointState, Job, JobKind, REASON_MANUAL};
use crate::domain::retry_policy::RetryPolicy;
use crate::domain::signing;
use crate::domain::tenant::TenantSettings;
use crate::error::ServiceError;
use crate::sender::destination;
use crate::service::endpoint_settings::{
    apply_settings, destinations, gives_credentials, invalid, origin_of, refuse_credentials_moving,
};
use crate::service::endpoint_state;
use crate::store::{DeletedEndpoint, DeliveryQuery, DeliverySummary, Page, StoreError, collect_deliveries};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::Serialize;
use serde_json::{Map, Value};

/// An endpoint as the API shows it; the secret only on creation.
#[derive(Debug, Clone, Serialize)]
pub struct EndpointView {
    /// `ep_` id.
    pub id: EndpointId,
    /// Owner.
    pub tenant_id: TenantId,
    /// URL.
    pub url: String,
    /// Subscribed event types (exact names or `prefix.*`); absent = all.
    pub event_types: Option<Vec<String>>,
    /// The resolved retry policy.
    pub retry_policy: RetryPolicy,
    /// Custom headers sent with every attempt (absent: none).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub headers: std::collections::BTreeMap<String, String>,
    /// The names of the write-only custom headers (their values are never shown).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secret_headers: Vec<String>,
    /// The receiver's authentication without its credentials: `{"type": "bearer"}`,
    /// `{"type": "basic", "username"}`, `{"type": "oauth2_client_credentials", "token_url",
    /// "client_id", "scope"?, "audience"?}` (absent: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<Value>,
    /// The payload filter (absent: every payload); see [`crate::domain::payload_filter`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<Value>,
    /// Whether it receives attempts.
    pub enabled: bool,
    /// `enabled`, `disabled` (an operator, or a disable code such as 410), `paused` (the
    /// circuit breaker) or `probing` (paused, with one held delivery out as the half-open
    /// probe); see [`crate::domain::endpoint_lifecycle`].
    pub state: &'static str,
    /// Why and when it was disabled, while it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled: Option<Disabled>,
    /// Failed attempts in a row.
    pub consecutive_failures: u32,
    /// Failed attempts in a row that pause it (0 = never).
    pub circuit_breaker_threshold: u32,
    /// Whether a paused endpoint gets a half-open probe.
    pub auto_resume: bool,
    /// The probe's cool-down, seconds.
    pub auto_resume_after_seconds: u64,
    /// Most attempts started per second (null: no limit); see [`crate::domain::rate`].
    pub rate_limit_per_second: Option<u32>,
    /// Whether the limit adapts (AIMD) to 429s without `Retry-After` and runs of timeouts.
    pub rate_limit_adaptive: bool,
    /// The limit in force now, requests per second (the adaptive rate, at most
    /// `rate_limit_per_second`); absent without a limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effective_rate_per_second: Option<f64>,
    /// While its attempts go through the slow lane: until when (see [`crate::domain::lane`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slow_until: Option<DateTime<Utc>>,
    /// Created at.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// The signing secret, shown on create and rotate only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// During a rotation: when the previous secret stops signing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
}

impl EndpointView {
    /// The view of `ep` as a single-endpoint answer shows it: as [`EndpointView::of`], with
    /// its failures in a row from [`failures_in_a_row`] (summed over the endpoint's copies
    /// when the counter is split over them).
    pub async fn shown(app: &App, mut ep: Endpoint, with_secret: bool) -> Self {
        ep.consecutive_failures = failures_in_a_row(app, &ep).await;
        Self::of(ep, with_secret)
    }

    /// The view of `ep`, with its secret when `with_secret`.
    pub fn of(ep: Endpoint, with_secret: bool) -> Self {
        let state = match ep.state() {
            EndpointState::Enabled => "enabled",
            EndpointState::Disabled => "disabled",
            EndpointState::Paused => "paused",
            EndpointState::Probing(_) => "probing",
        };
        let effective_rate_per_second = crate::domain::rate::effective(&ep);
        Self {
            state,
            effective_rate_per_second,
            rate_limit_per_second: ep.rate_limit_per_second,
            rate_limit_adaptive: ep.rate_limit_adaptive,
            slow_until: ep.slow_until,
            id: ep.id,
            tenant_id: ep.tenant_id,
            url: ep.url,
            event_types: ep.event_types,
            retry_policy: ep.retry_policy,
            secret_headers: ep.secret_headers.into_keys().collect(),
            auth: ep.auth.as_ref().map(|a| a.shown()),
            filter: ep.filter,
            headers: ep.headers,
            enabled: ep.enabled,
            disabled: ep.disabled,
            consecutive_failures: ep.consecutive_failures,
            circuit_breaker_threshold: ep.circuit_breaker_threshold,
            auto_resume: ep.auto_resume,
            auto_resume_after_seconds: ep.auto_resume_after_seconds,
            created_at: ep.created_at,
            updated_at: ep.updated_at,
            secret: with_secret.then_some(ep.secret),
            previous_secret_expires_at: ep.previous_secret_expires_at,
        }
    }
}

/// Creates an endpoint from a request body: `tenant_id` and `url` required; `event_types`,
/// `retry_policy`, `secret`, `circuit_breaker_threshold`, `auto_resume`,
/// `auto_resume_after_seconds`, `rate_limit_per_second`, `rate_limit_adaptive` optional.
///
/// # Errors
/// [`ServiceError::Validation`] naming the field; [`ServiceError::UnknownEventType`] (422
/// `unknown_event_type`) for an `event_types` entry that matches no catalog type when the
/// catalog is `registered` ([`crate::service::event_types::check_subscription`]);
/// [`ServiceError::DestinationNotAllowed`] for a URL whose host is, or now resolves to, a
/// non-public address (see [`crate::sender::destination`]); [`ServiceError::Unavailable`] when
/// the store failed (nothing of the caller's: retry).
pub async fn create_endpoint(app: &App, body: &Map<String, Value>) -> Result<EndpointView, ServiceError> {
    let tenant_id = match body.get("tenant_id") {
        None | Some(Value::Null) => return Err(invalid("tenant_id", "is required")),
        Some(v) => TenantId::parse("tenant_id", v.as_str().ok_or_else(|| invalid("tenant_id", "must be a string"))?)?,
    };
    if !body.contains_key("url") {
        return Err(invalid("url", "is required"));
    }
    let secret = match body.get("secret") {
        None | Some(Value::Null) => signing::generate_secret(&app.random),
        Some(v) => {
            let s = v.as_str().ok_or_else(|| invalid("secret", "must be a string"))?;
            signing::secret_key(s).map_err(|e| invalid("secret", e))?;
            s.to_string()
        }
    };
    let now = app.clock.now();
    let mut endpoint =
        Endpoint::new(EndpointId::made(format!("ep_{}", app.random.ulid(now))), tenant_id.clone(), "", secret, now);
    apply_settings(&mut endpoint, body, &["tenant_id", "secret"])?;
    crate::service::event_types::check_subscription(app, &endpoint.tenant_id, endpoint.event_types.as_deref()).await?;
    for (field, url) in destinations(&endpoint) {
        destination::check_field(&app.config, field, url).await?;
    }
    // The tenant's endpoints (one strongly consistent Query, at most the limit's worth):
    // concurrent creations can each pass this count, so a tenant can end a few over it,
    // never unboundedly.
    let max = app.config.max_endpoints_per_tenant;
    let snapshot = app.store.tenant_snapshot(&tenant_id, &endpoint.id).await?;
    if let Some(purge) = snapshot.settings.as_ref().and_then(|s| s.purge.as_ref()) {
        let m = format!("tenant {tenant_id} is being purged (job {}); create its endpoints after", purge.job_id);
        return Err(ServiceError::TenantPurging(m));
    }
    crate::domain::tenant::check_policy(&app.config, snapshot.settings.as_ref(), &endpoint.retry_policy)?;
    let have = snapshot.endpoints.len();
    if have >= usize::try_from(max).unwrap_or(usize::MAX) {
        return Err(invalid(
            "tenant_id",
            format!(
                "tenant {tenant_id} has {have} endpoints, the most a tenant may have (WEBHOOKS_MAX_ENDPOINTS_PER_TENANT = {max}): delete one first"
            ),
        ));
    }
    // The id is ours, not the caller's: one found taken (80 random bits: never seen, short of
    // a store that is not what it should be) is no conflict of theirs, so the create takes a
    // fresh id, once; taken again, a retryable 503.
    match app.store.create_endpoint(&endpoint).await {
        Err(StoreError::AlreadyExists) => {
            tracing::warn!(endpoint_id = %endpoint.id, "a new endpoint's id was taken; creating it under a fresh id");
            endpoint.id = EndpointId::made(format!("ep_{}", app.random.ulid(app.clock.now())));
            app.store.create_endpoint(&endpoint).await.map_err(|e| match e {
                StoreError::AlreadyExists => ServiceError::Unavailable("no free endpoint id found; retry".into()),
                other => other.into(),
            })?;
        }
        other => other?,
    }
    Ok(EndpointView::of(endpoint, true))
}

/// The failures in a row to show for `ep` ([`crate::store::CounterStore::failures_in_a_row`]: summed
/// over its copies when the counter is split). Never an error: the answers that show it come
/// after a write that has answered (a rotation's new secret, an enable's job), so a failed
/// read of the copies shows the endpoint item's own count, logged, instead of failing them.
pub async fn failures_in_a_row(app: &App, ep: &Endpoint) -> u32 {
    match app.store.failures_in_a_row(ep).await {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(endpoint_id = %ep.id, error = %e, "failures in a row not summed over the copies; showing the endpoint item's own");
            ep.consecutive_failures
        }
    }
}

/// Sets each of a listing's endpoints' failures in a row to what its view shows (summed over
/// the copies when the counter is split: [`crate::store::CounterStore::listed_failures_in_a_row`]); when
/// that read fails, the listing shows the endpoint items' own counts (logged), not an error.
async fn show_failures_in_a_row(app: &App, endpoints: &mut [Endpoint]) {
    match app.store.listed_failures_in_a_row(endpoints).await {
        Ok(counts) => {
            for (ep, n) in endpoints.iter_mut().zip(counts) {
                ep.consecutive_failures = n;
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "failures in a row not summed over the copies; the listing shows the endpoint items' own")
        }
    }
}

/// The endpoint `id`, or 404.
///
/// # Errors
/// [`ServiceError::NotFound`].
pub async fn find_endpoint(app: &App, id: &EndpointId) -> Result<Endpoint, ServiceError> {
    app.store.find_endpoint(id).await?.ok_or_else(|| ServiceError::NotFound(format!("endpoint {id}")))
}

/// An endpoint by id (without its secret).
///
/// # Errors
/// [`ServiceError::NotFound`].
pub async fn get_endpoint(app: &App, id: &EndpointId) -> Result<EndpointView, ServiceError> {
    Ok(EndpointView::shown(app, find_endpoint(app, id).await?, false).await)
}

/// Changes an endpoint's settings (PATCH: only the fields given), in a write conditional on
/// the version read (re-read and re-applied when another writer came first); the endpoint's
/// state (enabled, disabled, paused) is left as it is.
///
/// # Errors
/// [`ServiceError::NotFound`]; [`ServiceError::Validation`] naming the field;
/// [`ServiceError::UnknownEventType`] for a changed `event_types` filter with an entry that
/// matches no catalog type, in `registered` mode;
/// [`ServiceError::DestinationNotAllowed`] for a new `url` that is, or resolves to, a
/// non-public address; [`ServiceError::Conflict`] when the endpoint kept changing under it.
pub async fn update_endpoint(
    app: &App,
    id: &EndpointId,
    body: &Map<String, Value>,
) -> Result<EndpointView, ServiceError> {
    let ep = find_endpoint(app, id).await?;
    refuse_credentials_moving(&ep, body)?;
    // The settings as they would be, to check new destinations before the write (the write
    // applies them again to the endpoint as it is then).
    let mut changed = ep.clone();
    apply_settings(&mut changed, body, &[])?;
    // A filter this PATCH changes must name what the catalog has (registered mode); one it
    // leaves as it is is not checked again (a type archived since does not block a PATCH of
    // the URL).
    if changed.event_types != ep.event_types {
        crate::service::event_types::check_subscription(app, &changed.tenant_id, changed.event_types.as_deref())
            .await?;
    }
    if changed.retry_policy != ep.retry_policy {
        let settings = app.store.get_settings(&ep.tenant_id).await?;
        crate::domain::tenant::check_policy(&app.config, settings.as_ref(), &changed.retry_policy)?;
    }
    for (field, url) in destinations(&changed) {
        if body.contains_key(field.split('.').next().unwrap_or(field)) {
            destination::check_field(&app.config, field, url).await?;
        }
    }
    // The credential guard runs again on the endpoint as each try of the write reads it: a
    // PATCH that added `auth` or `secret_headers` between the first read and this write must
    // not be carried to this PATCH's new origin, and credentials this PATCH gives without a
    // URL are for the origin the caller saw, not one another PATCH moved the endpoint to.
    let seen = origin_of(&ep.url);
    let (ep, _) = endpoint_state::change_endpoint(app, &ep.tenant_id, id, |now| {
        refuse_credentials_moving(now, body)?;
        if !body.contains_key("url") && gives_credentials(body) && origin_of(&now.url) != seen {
            return Err(ServiceError::Conflict(format!(
                "endpoint {id} was moved to another host while this request was applied; read it again and give its credentials for the new URL"
            )));
        }
        endpoint_lifecycle::configure(now, app.clock.now(), &app.random, |e| apply_settings(e, body, &[])).map(Some)
    })
    .await?;
    Ok(EndpointView::shown(app, ep, false).await)
}

/// Disables an endpoint by hand (reason `manual`): from enabled, paused or probing (an
/// operator's disable wins over the circuit breaker's auto-resume: no more probes). Its
/// scheduled deliveries are held; none starts an attempt once this has answered.
///
/// # Errors
/// [`ServiceError::NotFound`]; [`ServiceError::Conflict`] when it kept changing under it.
pub async fn disable_endpoint(app: &App, id: &EndpointId) -> Result<EndpointView, ServiceError> {
    let ep = find_endpoint(app, id).await?;
    let disabled = Disabled { reason: REASON_MANUAL.into(), at: app.clock.now(), status_code: None, delivery_id: None };
    let (ep, _) = endpoint_state::disable(app, &ep, disabled).await?;
    Ok(EndpointView::shown(app, ep, false).await)
}

/// Enables an endpoint; its held deliveries are released `release_per_tick` per sweeper
/// tick by the returned job (written with the enable, so it cannot be missing).
///
/// # Errors
/// [`ServiceError::NotFound`]; [`ServiceError::Conflict`] when it kept changing under it.
pub async fn enable_endpoint(app: &App, id: &EndpointId) -> Result<(EndpointView, Job), ServiceError> {
    let ep = find_endpoint(app, id).await?;
    let (ep, job) = endpoint_state::enable(app, &ep).await?;
    Ok((EndpointView::shown(app, ep, false).await, job))
}

/// A page of a tenant's endpoints (without secrets).
///
/// # Errors
/// [`ServiceError::Validation`] for a bad cursor.
pub async fn list_endpoints(
    app: &App,
    tenant_id: &TenantId,
    limit: usize,
    cursor: Option<&str>,
) -> Result<Page<EndpointView>, ServiceError> {
    let mut page = app.store.list_endpoints(tenant_id, limit, cursor).await?;
    show_failures_in_a_row(app, &mut page.data).await;
    Ok(Page {
        data: page.data.into_iter().map(|e| EndpointView::of(e, false)).collect(),
        next_cursor: page.next_cursor,
    })
}

/// What a delete did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Deleted {
    /// Unfinished deliveries the delete ended as exhausted (`endpoint_deleted`) before it
    /// answered (at most [`DELETE_ENDS_INLINE`]; the job ends the rest).
    pub deliveries_ended: usize,
    /// The delete's `end_deleted` job (`GET /v1/jobs/{id}`), which ends what the delete's
    /// listing missed.
    pub job_id: JobId,
}

/// How many unfinished deliveries a forced delete ends itself, at most, before it answers;
/// its `end_deleted` job ends the rest (`release_per_tick` a sweeper tick), so a delete
/// answers within API Gateway's 30 s however many there are.
pub const DELETE_ENDS_INLINE: usize = 100;

/// How many unfinished deliveries a delete without `force` counts, at most, for its 409
/// (beyond it the message says "1000 or more").
pub const DELETE_COUNTS_UP_TO: usize = 1000;

/// Deletes an endpoint. With unfinished deliveries (scheduled, sending or held) it is refused
/// unless `force`, which ends them as `exhausted` with reason `endpoint_deleted`: nothing
/// silently vanishes. It ends up to [`DELETE_ENDS_INLINE`] itself (16 at a time) and returns
/// how many, and the job that ends the rest. The 409 without `force` counts up to
/// [`DELETE_COUNTS_UP_TO`].
///
/// Every delete first writes an `end_deleted` job, which the sweeper runs once the endpoint
/// is gone: it ends what the delete did not, including what the `by_endpoint` index (which
/// can lag the table by a moment) had not shown yet. Nothing here reads the endpoint's
/// history: the counts and the page read only the unfinished buckets.
///
/// # Errors
/// [`ServiceError::NotFound`]; [`ServiceError::Conflict`] with the count of unfinished
/// deliveries.
pub async fn delete_endpoint(app: &App, id: &EndpointId, force: bool) -> Result<Deleted, ServiceError> {
    let ep = find_endpoint(app, id).await?;
    if !force {
        // Counted up to a cap, so a large backlog cannot hold the answer past API Gateway's 30 s.
        let unfinished = unfinished_deliveries(app, &ep.id, DELETE_COUNTS_UP_TO).await?.len();
        if unfinished > 0 {
            let how_many = if unfinished >= DELETE_COUNTS_UP_TO {
                format!("{DELETE_COUNTS_UP_TO} or more")
            } else {
                unfinished.to_string()
            };
            return Err(ServiceError::Conflict(format!(
                "endpoint {id} has {how_many} unfinished deliveries; retry with ?force=true to end them as exhausted (reason endpoint_deleted)"
            )));
        }
    }
    let unfinished = unfinished_deliveries(app, &ep.id, DELETE_ENDS_INLINE).await?;
    let now = app.clock.now();
    let settle = now + chrono::Duration::seconds(endpoint_state::INDEX_SETTLE_SECONDS);
    let job_id = endpoint_state::start_job(app, &ep, JobKind::EndDeleted, settle, None, None).await?.id;
    let ended: Vec<Result<(), ServiceError>> = futures::stream::iter(unfinished.iter().cloned().map(|d| {
        let app = app.clone();
        async move { endpoint_state::end_as_deleted(&app, &d).await }
    }))
    .buffer_unordered(16)
    .collect()
    .await;
    ended.into_iter().collect::<Result<Vec<()>, _>>()?;
    // The tombstone lives while what the endpoint leaves does (its deliveries and delivered
    // counters, kept for the tenant's retention), so a purge of the tenant finds them.
    let retention = app
        .store
        .get_settings(&ep.tenant_id)
        .await?
        .unwrap_or_else(|| TenantSettings::empty(&ep.tenant_id, now))
        .retention(&app.config);
    let kept_days = i64::from(retention.delivered_days.max(retention.exhausted_days)) + 1;
    let tombstone = DeletedEndpoint {
        tenant_id: ep.tenant_id.clone(),
        endpoint_id: ep.id.clone(),
        rate_limit_per_second: ep.rate_limit_per_second,
        deleted_at: now,
        expires_at: now.timestamp() + kept_days * 86_400,
    };
    app.store.delete_endpoint(&tombstone).await?;
    tracing::info!(endpoint_id = %id, ended = unfinished.len(), job_id = %job_id, "endpoint deleted");
    Ok(Deleted { deliveries_ended: unfinished.len(), job_id })
}

/// Up to `max` of an endpoint's unfinished deliveries ([`endpoint_state::UNFINISHED`], status by status, in
/// the listing's order): pages of their `by_endpoint` ranges only, never its history.
async fn unfinished_deliveries(
    app: &App,
    endpoint_id: &EndpointId,
    max: usize,
) -> Result<Vec<DeliverySummary>, StoreError> {
    let mut out = Vec::new();
    for status in endpoint_state::UNFINISHED {
        let left = max.saturating_sub(out.len());
        if left == 0 {
            break;
        }
        let query =
            DeliveryQuery { endpoint_id: Some(endpoint_id.clone()), status: Some(status), ..DeliveryQuery::default() };
        out.extend(collect_deliveries(app.store.as_ref(), query, left).await?);
    }
    Ok(out)
}

/// An endpoint's delivery counts by status, its last success and failures in a row.
#[derive(Debug, Clone, Serialize)]
pub struct EndpointStats {
    /// Endpoint id.
    pub endpoint_id: EndpointId,
    /// Deliveries by status (statuses with none are 0).
    pub counts: std::collections::BTreeMap<String, u64>,
    /// The latest success: when the latest delivered delivery was recorded (as its per-day
    /// counter keeps it, best effort), or the newest-accepted delivered delivery's last change
    /// when that is later.
    pub last_success_at: Option<DateTime<Utc>>,
    /// Failed attempts in a row.
    pub consecutive_failures: u32,
    /// Deliveries counted (retention bounds this: delivered ones leave after 30 days).
    pub counted: u64,
    /// The statuses whose count is not exact: reading stopped at a cap, so that the stats of
    /// an endpoint with a backlog of millions still read a bounded number of entries (see
    /// [`crate::store::Counted`]): an exhausted or held count is then at least that many;
    /// scheduled and sending together are the unfinished deliveries counted, split by a
    /// sample (sending those seen sending). Empty when every count is exact.
    pub approximate: Vec<String>,
}

/// Counts an endpoint's deliveries by status without reading its history:
/// - `delivered`: the per-day delivered counters of the last `WEBHOOKS_DELIVERED_RETENTION_DAYS`
///   days (UTC days: a delivered delivery is kept that long), one Query per counter partition
///   ([`crate::store::CounterStore::delivered_tally`]);
/// - the others: one `Select=COUNT` Query each of their `by_endpoint` key range, which holds
///   only unfinished deliveries (`scheduled`, `sending`, `held`) or dead letters
///   (`exhausted`, kept `WEBHOOKS_EXHAUSTED_RETENTION_DAYS`), never delivered ones, each read
///   up to a cap ([`crate::store::DeliveryStore::count_deliveries_in`]; `approximate` names those
///   that stopped there);
/// - the last success: the counters' `last_delivered_at` (the time a delivered delivery was
///   counted), or one entry of the `delivered` range when that is later (a count is best
///   effort, after the delivery's record: one lost to a failure leaves the time as it was).
///
/// # Errors
/// [`ServiceError::NotFound`].
pub async fn endpoint_stats(app: &App, id: &EndpointId) -> Result<EndpointStats, ServiceError> {
    let ep = find_endpoint(app, id).await?;
    let statuses =
        [DeliveryStatus::Scheduled, DeliveryStatus::Sending, DeliveryStatus::Exhausted, DeliveryStatus::Held];
    let now = app.clock.now();
    let retention = chrono::Duration::days(i64::from(app.config.delivered_retention_days));
    // The last `delivered_retention_days` UTC days, today included.
    let first_day = now - retention + chrono::Duration::days(1);
    let delivered = async {
        let tally = app.store.delivered_tally(&ep.id, first_day).await?;
        Ok::<_, crate::store::StoreError>((tally.delivered, tally.last_delivered_at))
    };
    let (counted, (delivered, last_counted)) =
        futures::future::try_join(app.store.count_deliveries_in(&ep.id, &statuses), delivered).await?;
    let mut counts: std::collections::BTreeMap<String, u64> =
        statuses.iter().zip(&counted).map(|(st, c)| (st.as_str().to_string(), c.n)).collect();
    let approximate: Vec<String> =
        statuses.iter().zip(&counted).filter(|(_, c)| !c.exact).map(|(st, _)| st.as_str().to_string()).collect();
    counts.insert(DeliveryStatus::Delivered.as_str().to_string(), delivered);
    // The latest success is the counters' `last_delivered_at`; for a success whose count was
    // lost, the newest delivery that was delivered (newest by acceptance; its
    // last change is when it was delivered, which a replay of an older one can pass): one
    // item of the delivered range. The later of the two.
    let newest = app
        .store
        .list_deliveries(&DeliveryQuery {
            endpoint_id: Some(ep.id.clone()),
            status: Some(DeliveryStatus::Delivered),
            limit: 1,
            ..DeliveryQuery::default()
        })
        .await?;
    let consecutive_failures = failures_in_a_row(app, &ep).await;
    Ok(EndpointStats {
        endpoint_id: ep.id,
        counted: counts.values().sum(),
        counts,
        last_success_at: newest.data.first().map(|d| d.updated_at).max(last_counted),
        consecutive_failures,
        approximate,
    })
}

/// Starts a secret rotation: a new secret (generated, or the `whsec_` one given) signs from
/// now on, and the old one keeps signing too (both signatures, space separated) for
/// `config.secret_rotation` (24 h). Returns the endpoint with its new secret.
///
/// # Errors
/// [`ServiceError::NotFound`]; [`ServiceError::Validation`] for a malformed `secret`.
pub async fn rotate_secret(app: &App, id: &EndpointId, secret: Option<&str>) -> Result<EndpointView, ServiceError> {
    let ep = find_endpoint(app, id).await?;
    let new = match secret {
        Some(s) => {
            signing::secret_key(s).map_err(|e| invalid("secret", e))?;
            s.to_string()
        }
        None => signing::generate_secret(&app.random),
    };
    let now = app.clock.now();
    let until = now + chrono::Duration::from_std(app.config.secret_rotation).unwrap_or(chrono::Duration::hours(24));
    let (ep, _) = endpoint_state::change_endpoint(app, &ep.tenant_id, id, |ep| {
        let rotated = endpoint_lifecycle::configure(ep, now, &app.random, |e| {
            e.previous_secret = Some(std::mem::replace(&mut e.secret, new.clone()));
            e.previous_secret_expires_at = Some(until);
            Ok::<_, ServiceError>(())
        })?;
        Ok(Some(rotated))
    })
    .await?;
    tracing::info!(endpoint_id = %id, until = ?ep.previous_secret_expires_at, "secret rotated");
    let mut view = EndpointView::shown(app, ep, true).await;
    view.previous_secret_expires_at = Some(until);
    Ok(view)
}

/// Starts replaying every exhausted delivery of an endpoint accepted in `[since, until)` as a
/// background job (`config.release_per_tick` per sweeper tick); its progress is
/// `GET /v1/jobs/{id}`. Without `until` the window ends now, when the job starts (the job
/// shows it): deliveries accepted while it runs are not replayed by it.
///
/// # Errors
/// [`ServiceError::NotFound`]; [`ServiceError::Validation`] when `until` is not after `since`
/// (without `until`: when `since` is not before now).
pub async fn recover(
    app: &App,
    id: &EndpointId,
    since: DateTime<Utc>,
    until: Option<DateTime<Utc>>,
) -> Result<Job, ServiceError> {
    let ep = find_endpoint(app, id).await?;
    let now = app.clock.now();
    let until = match until {
        Some(u) if u <= since => return Err(invalid("until", "must be after since")),
        Some(u) => u,
        None if now <= since => return Err(invalid("since", "must be before now when until is not given")),
        None => now,
    };
    endpoint_state::start_job(app, &ep, JobKind::Recover, now, Some(since), Some(until)).await
}
