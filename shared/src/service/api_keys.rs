//! Producers' API keys: make, list, read and revoke them (admin), and [`authenticate`], the
//! check `POST /v1/events` makes of `Authorization: Bearer <key>` ([`crate::domain::api_key`]
//! says what a key is).
//!
//! Who may post with what: a request API Gateway (or ingest's function URL) authorised with
//! IAM needs no key; a request on a route IAM does not guard (the stack's `ApiKeyApi`) must
//! present a key, and the key must name the event's tenant (or every tenant). The local
//! runtime stands in for IAM on its loopback port, and checks a key when one is presented,
//! on this same path. Cost per event with the key cached: no AWS request (one SHA-256 of the
//! key); one strongly consistent GetItem and one UpdateItem (`last_used_at`) per process and
//! key every `WEBHOOKS_API_KEY_CACHE_SECONDS` (`make bench`, section 12).

use crate::App;
use crate::domain::api_key::{self, ApiKey, Draft, Refusal};
use crate::domain::ids;
use crate::error::ServiceError;
use crate::store::{Page, StoreError};

/// Who is asking: what the route the request came in on vouches for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// AWS checked the request's SigV4 signature against IAM (API Gateway's IAM authorizer, or
    /// a function URL with `AuthType: AWS_IAM`): no key needed.
    Iam,
    /// The local runtime (`make run`), on its loopback port: no key needed, and one presented
    /// is checked as on AWS.
    Local,
    /// Nothing vouches for the request (a route without an authorizer): it must present a key.
    Anonymous,
}

/// A key made: the record and the key itself, shown this once (`Debug` shows neither).
#[derive(Clone, serde::Serialize)]
pub struct Created {
    /// The key as stored.
    #[serde(flatten)]
    pub record: ApiKey,
    /// The key (`whk_...`): shown in this answer only, stored nowhere.
    pub key: String,
}

impl std::fmt::Debug for Created {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Created").field("record", &self.record).field("key", &"(redacted)").finish()
    }
}

fn not_found(id: &str) -> ServiceError {
    ServiceError::NotFound(format!("API key {}: no such key", ids::shown(id)))
}

/// Makes a key.
///
/// # Errors
/// [`ServiceError::Validation`] (422) naming the field ([`api_key::create`]);
/// [`ServiceError::ReservedTenant`] (403) for `tenant_ids` naming the operational events'
/// tenant; [`ServiceError::Unavailable`] when DynamoDB failed.
pub async fn create(app: &App, draft: Draft) -> Result<Created, ServiceError> {
    for (i, t) in draft.tenant_ids.iter().flatten().enumerate() {
        crate::domain::operational::refuse_reserved(t, &format!("tenant_ids[{i}]"))?;
    }
    let now = app.clock.now();
    let mut secret = [0u8; 32];
    app.random.fill(&mut secret);
    let (record, key) = api_key::create(draft, now, &app.random.ulid(now).to_string(), &secret)?;
    match app.store.create_api_key(&record).await {
        Ok(()) => {}
        // A ULID made twice: as unlikely as a guessed key; the caller may ask again.
        Err(StoreError::AlreadyExists) => return Err(ServiceError::Conflict("API key id taken; try again".into())),
        Err(e) => return Err(e.into()),
    }
    tracing::info!(api_key = %record.prefix, tenants = ?record.tenant_ids, "API key created");
    Ok(Created { record, key })
}

/// A key by id (never the key itself).
///
/// # Errors
/// [`ServiceError::NotFound`] (404); [`ServiceError::Unavailable`] when DynamoDB failed.
pub async fn get(app: &App, id: &str) -> Result<ApiKey, ServiceError> {
    ids::lookup_id("API key", id).map_err(|_| not_found(id))?;
    app.store.get_api_key(id).await?.ok_or_else(|| not_found(id))
}

/// A page of the keys, oldest first.
///
/// # Errors
/// [`ServiceError::Validation`] for a cursor this listing did not hand out;
/// [`ServiceError::Unavailable`] when DynamoDB failed.
pub async fn list(app: &App, limit: usize, cursor: Option<&str>) -> Result<Page<ApiKey>, ServiceError> {
    Ok(app.store.list_api_keys(limit, cursor).await?)
}

/// Revokes a key: this process refuses it at once, every other within
/// `WEBHOOKS_API_KEY_CACHE_SECONDS`. Revoking a revoked key changes nothing.
///
/// # Errors
/// [`ServiceError::NotFound`] (404); [`ServiceError::Unavailable`] when DynamoDB failed.
pub async fn revoke(app: &App, id: &str) -> Result<ApiKey, ServiceError> {
    ids::lookup_id("API key", id).map_err(|_| not_found(id))?;
    let key = app.store.revoke_api_key(id, app.clock.now()).await?.ok_or_else(|| not_found(id))?;
    app.api_keys.forget(id);
    tracing::info!(api_key = %key.prefix, "API key revoked");
    Ok(key)
}

/// Takes a purged tenant out of the API keys (a step of its purge, [`crate::service::purge`]):
/// a live key naming it alone is revoked, a key naming it with others no longer names it; a
/// key for every tenant (`tenant_ids: null`) is untouched. Running it again changes nothing.
/// This process refuses the keys at once, every other within
/// `WEBHOOKS_API_KEY_CACHE_SECONDS`. Returns how many keys it changed.
///
/// # Errors
/// [`ServiceError::Unavailable`] when DynamoDB failed (the purge's next step runs it again).
pub async fn forget_tenant(app: &App, tenant_id: &str) -> Result<usize, ServiceError> {
    let now = app.clock.now();
    let mut changed = 0;
    let mut cursor = None;
    loop {
        let page = app.store.list_api_keys(100, cursor.as_deref()).await?;
        for key in page.data {
            let Some(tenants) = &key.tenant_ids else { continue };
            if !tenants.iter().any(|t| t == tenant_id) {
                continue;
            }
            // Named with others: removed from the list (which may leave it alone, when another
            // purge removed the others meanwhile: then revoked like a key naming it alone).
            let now_named = match tenants.len() {
                1 => tenants.clone(),
                _ => match app.store.remove_api_key_tenant(&key.id, tenant_id).await? {
                    Some(k) => k.tenant_ids.unwrap_or_default(),
                    None => continue,
                },
            };
            if now_named.iter().any(|t| t == tenant_id) {
                if key.revoked_at.is_none() {
                    app.store.revoke_api_key(&key.id, now).await?;
                    tracing::warn!(api_key = %key.prefix, %tenant_id, "API key revoked: its only tenant is purged");
                    changed += 1;
                }
            } else {
                tracing::warn!(api_key = %key.prefix, %tenant_id, "purged tenant removed from the API key");
                changed += 1;
            }
            app.api_keys.forget(&key.id);
        }
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return Ok(changed),
        }
    }
}

/// The key `authorization` (an `Authorization` header's value) presents, checked, if the
/// request presents one: `None` when it presents none and `caller` needs none.
///
/// # Errors
/// [`ServiceError::ApiKeyRequired`] (401) when an [`Caller::Anonymous`] request presents no
/// key; [`ServiceError::InvalidApiKey`] (401) for a key that is not one, revoked or expired
/// (the message names it by its prefix only); [`ServiceError::Unavailable`] when DynamoDB
/// failed.
pub async fn authenticate(
    app: &App,
    caller: Caller,
    authorization: Option<&str>,
) -> Result<Option<ApiKey>, ServiceError> {
    let presented = authorization.and_then(|v| {
        let (scheme, rest) = v.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
    });
    let Some(presented) = presented else {
        return match caller {
            Caller::Iam | Caller::Local => Ok(None),
            Caller::Anonymous => Err(ServiceError::ApiKeyRequired(
                "this route takes an API key: send Authorization: Bearer <key> (POST /v1/api-keys makes one)".into(),
            )),
        };
    };
    let invalid = || ServiceError::InvalidApiKey("Authorization: not a valid API key".into());
    let id = api_key::id_of(presented).ok_or_else(invalid)?;
    let now = app.clock.now();
    let fresh_after = now - chrono::Duration::from_std(app.config.api_key_cache).unwrap_or_default();
    let (key, read) = match app.api_keys.get(&id, fresh_after) {
        Some(key) => (key, false),
        None => {
            let key = app.store.get_api_key(&id).await?.ok_or_else(invalid)?;
            // The record is kept whatever was presented: wrong secrets tried against a known
            // key cost no more reads until it goes stale.
            app.api_keys.put(now, key.clone());
            (key, true)
        }
    };
    match key.check(presented, now) {
        Ok(()) => {
            // Marked used once per read: only by a request that presented it whole.
            if read && let Err(e) = app.store.touch_api_key(&id, now).await {
                tracing::warn!(api_key = %key.prefix, error = %e, "last_used_at not written");
            }
            Ok(Some(key))
        }
        Err(Refusal::Unknown) => {
            tracing::warn!(api_key = %key.prefix, "API key refused: the secret does not match");
            Err(invalid())
        }
        Err(Refusal::Revoked) => {
            tracing::info!(api_key = %key.prefix, "revoked API key refused");
            Err(ServiceError::InvalidApiKey(format!("API key {}: revoked", key.prefix)))
        }
        Err(Refusal::Expired) => {
            tracing::info!(api_key = %key.prefix, "expired API key refused");
            Err(ServiceError::InvalidApiKey(format!("API key {}: expired", key.prefix)))
        }
    }
}

/// Whether `key` (if any) may post an event for `tenant_id`.
///
/// # Errors
/// [`ServiceError::TenantNotAllowed`] (403) naming the key by its prefix and the tenant.
pub fn authorize(key: Option<&ApiKey>, tenant_id: &str) -> Result<(), ServiceError> {
    match key {
        Some(k) if !k.allows(tenant_id) => {
            tracing::warn!(api_key = %k.prefix, tenant_id = %ids::shown(tenant_id), "event refused: the API key may not post for this tenant");
            Err(ServiceError::TenantNotAllowed(format!(
                "tenant_id: API key {} may not post events for tenant {}",
                k.prefix,
                ids::shown(tenant_id)
            )))
        }
        _ => Ok(()),
    }
}
