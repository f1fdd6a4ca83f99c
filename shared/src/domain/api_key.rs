//! API keys for producers outside AWS: what a key is, how one is made, and whether a
//! presented one may post an event for a tenant. Pure: no AWS, no clock of its own.
//!
//! A key reads `whk_{ulid}_{secret}`: `whk_` says what it is (so a secret scanner or a reader
//! of a leaked log knows), `{ulid}` (26 characters, Crockford base32) is the key's id without
//! its `key_` prefix, and `{secret}` is 32 random bytes, base64url without padding (43
//! characters). Only the key's SHA-256 is stored ([`ApiKey::secret_sha256`]): the key is
//! shown once, in the answer to its creation. Its **prefix** `whk_{ulid}` names it in logs
//! and answers; it is not secret. SHA-256 and not a slow password hash: the secret is 256
//! random bits, so there is nothing to guess, and a check costs microseconds per event.

use crate::domain::ids;
use crate::error::ServiceError;
use base64::Engine;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};

/// What every key starts with.
pub const KEY_PREFIX: &str = "whk_";

/// What every key id starts with (`key_{ulid}`).
pub const ID_PREFIX: &str = "key_";

/// Most tenants one key may name in `tenant_ids`.
pub const MAX_TENANTS: usize = 100;

/// Most characters of a key's `name`.
pub const MAX_NAME_CHARS: usize = 200;

/// An API key as stored and shown (never with the key itself; `Debug` leaves out its
/// digest). Shown as its fields without `secret_sha256`, plus `all_tenants` (`true` when
/// `tenant_ids` is `None`: a key for every tenant).
#[derive(Clone, PartialEq)]
pub struct ApiKey {
    /// `key_{ulid}`.
    pub id: String,
    /// `whk_{ulid}`: the key's first characters, which name it in logs and answers.
    pub prefix: String,
    /// What the key is for, the operator's words (may be empty).
    pub name: String,
    /// The tenants it may post events for; `None`: every tenant.
    pub tenant_ids: Option<Vec<String>>,
    /// When it was made.
    pub created_at: DateTime<Utc>,
    /// When it stops being accepted; `None`: never.
    pub expires_at: Option<DateTime<Utc>>,
    /// When it was revoked (`DELETE /v1/api-keys/{id}`); `None`: not revoked.
    pub revoked_at: Option<DateTime<Utc>>,
    /// The last time a process read it to accept an event: at most once per process per
    /// `WEBHOOKS_API_KEY_CACHE_SECONDS`, so it is that many seconds coarse.
    pub last_used_at: Option<DateTime<Utc>>,
    /// Base64 (standard) SHA-256 of the whole key: all that is stored of it.
    pub secret_sha256: String,
}

impl Serialize for ApiKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        /// The answer's shape: the record without its digest, with `all_tenants` said.
        #[derive(Serialize)]
        struct Shown<'a> {
            id: &'a str,
            prefix: &'a str,
            name: &'a str,
            tenant_ids: &'a Option<Vec<String>>,
            all_tenants: bool,
            created_at: &'a DateTime<Utc>,
            expires_at: &'a Option<DateTime<Utc>>,
            revoked_at: &'a Option<DateTime<Utc>>,
            last_used_at: &'a Option<DateTime<Utc>>,
        }
        Shown {
            id: &self.id,
            prefix: &self.prefix,
            name: &self.name,
            tenant_ids: &self.tenant_ids,
            all_tenants: self.tenant_ids.is_none(),
            created_at: &self.created_at,
            expires_at: &self.expires_at,
            revoked_at: &self.revoked_at,
            last_used_at: &self.last_used_at,
        }
        .serialize(serializer)
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKey")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("tenant_ids", &self.tenant_ids)
            .field("created_at", &self.created_at)
            .field("expires_at", &self.expires_at)
            .field("revoked_at", &self.revoked_at)
            .field("last_used_at", &self.last_used_at)
            .finish_non_exhaustive()
    }
}

/// What a new key is asked for (`POST /v1/api-keys`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Draft {
    /// What the key is for.
    pub name: Option<String>,
    /// The tenants it may post for (1 to [`MAX_TENANTS`]); give these or `all_tenants`.
    pub tenant_ids: Option<Vec<String>>,
    /// A key for every tenant, asked for explicitly (issue #54: forgetting `tenant_ids` must
    /// not widen a key); give this or `tenant_ids`.
    pub all_tenants: bool,
    /// When it stops being accepted; `None`: never.
    pub expires_at: Option<DateTime<Utc>>,
}

/// Why a presented key is refused (answered 401 `invalid_api_key`, the reason in the message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not of the key's shape, no such key, or the secret does not match.
    Unknown,
    /// Revoked.
    Revoked,
    /// Past its `expires_at`.
    Expired,
}

/// Makes a key from `draft` at `now` with the id `ulid` (26 characters) and the 32 bytes
/// `secret`. Returns the stored record and the key, which is shown once and kept nowhere.
///
/// # Errors
/// [`ServiceError::Validation`] naming the field: a `name` over [`MAX_NAME_CHARS`] characters
/// or with control characters, neither `tenant_ids` nor `all_tenants` given, or both,
/// `tenant_ids` empty, over [`MAX_TENANTS`], repeated, or with an id outside the id rule
/// ([`ids::client_id`]), `expires_at` not after `now`.
pub fn create(
    draft: Draft,
    now: DateTime<Utc>,
    ulid: &str,
    secret: &[u8; 32],
) -> Result<(ApiKey, String), ServiceError> {
    let name = draft.name.unwrap_or_default();
    if name.chars().count() > MAX_NAME_CHARS || name.chars().any(char::is_control) {
        return Err(ServiceError::Validation(format!(
            "name: at most {MAX_NAME_CHARS} characters, no control characters"
        )));
    }
    match (&draft.tenant_ids, draft.all_tenants) {
        (None, false) => {
            return Err(ServiceError::Validation(
                "tenant_ids, all_tenants: a key names the tenants it may post for (tenant_ids), or is for every tenant only when asked (\"all_tenants\": true)".into(),
            ));
        }
        (Some(_), true) => {
            return Err(ServiceError::Validation(
                "tenant_ids, all_tenants: give one: tenant_ids for some tenants, or \"all_tenants\": true for every tenant".into(),
            ));
        }
        _ => {}
    }
    if let Some(tenants) = &draft.tenant_ids {
        if tenants.is_empty() || tenants.len() > MAX_TENANTS {
            return Err(ServiceError::Validation(format!(
                "tenant_ids: 1 to {MAX_TENANTS} tenant ids; for a key that may post for every tenant, give \"all_tenants\": true instead"
            )));
        }
        for (i, t) in tenants.iter().enumerate() {
            ids::client_id(&format!("tenant_ids[{i}]"), t)?;
            if tenants[..i].contains(t) {
                return Err(ServiceError::Validation(format!("tenant_ids[{i}]: {t} is named twice")));
            }
        }
    }
    if let Some(at) = draft.expires_at
        && at <= now
    {
        return Err(ServiceError::Validation(format!(
            "expires_at: {} is not in the future",
            at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )));
    }
    let key = format!("{KEY_PREFIX}{ulid}_{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret));
    let record = ApiKey {
        id: format!("{ID_PREFIX}{ulid}"),
        prefix: format!("{KEY_PREFIX}{ulid}"),
        name,
        tenant_ids: draft.tenant_ids,
        created_at: now,
        expires_at: draft.expires_at,
        revoked_at: None,
        last_used_at: None,
        secret_sha256: digest(&key),
    };
    Ok((record, key))
}

/// Base64 (standard) SHA-256 of a presented key.
pub fn digest(key: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(Sha256::digest(key.as_bytes()))
}

/// The id (`key_{ulid}`) a presented key names, if it has a key's shape: `whk_`, 26 base32
/// characters, `_`, then the secret. Says nothing of whether it is valid.
pub fn id_of(presented: &str) -> Option<String> {
    let rest = presented.strip_prefix(KEY_PREFIX)?;
    let (ulid, secret) = rest.split_once('_')?;
    let base32 = |c: char| c.is_ascii_digit() || c.is_ascii_uppercase();
    (ulid.len() == 26 && ulid.chars().all(base32) && !secret.is_empty()).then(|| format!("{ID_PREFIX}{ulid}"))
}

/// The prefix (`whk_{ulid}`) of a key id (`key_{ulid}`): what logs name a key by.
pub fn prefix_of(id: &str) -> String {
    format!("{KEY_PREFIX}{}", id.strip_prefix(ID_PREFIX).unwrap_or(id))
}

impl ApiKey {
    /// Whether `presented` is this key and it is accepted at `now`.
    ///
    /// # Errors
    /// The [`Refusal`]: a secret that does not match is [`Refusal::Unknown`] (compared in
    /// constant time), then revoked, then expired.
    pub fn check(&self, presented: &str, now: DateTime<Utc>) -> Result<(), Refusal> {
        let (a, b) = (digest(presented), &self.secret_sha256);
        let same = a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0;
        if !same {
            return Err(Refusal::Unknown);
        }
        if self.revoked_at.is_some() {
            return Err(Refusal::Revoked);
        }
        if self.expires_at.is_some_and(|at| at <= now) {
            return Err(Refusal::Expired);
        }
        Ok(())
    }

    /// Whether the key may post events for `tenant_id`.
    pub fn allows(&self, tenant_id: &str) -> bool {
        self.tenant_ids.as_ref().is_none_or(|t| t.iter().any(|x| x == tenant_id))
    }
}

/// The keys a process read, each with when it read it: the ingest path reads a key once per
/// `WEBHOOKS_API_KEY_CACHE_SECONDS`, not per event. Keys not found are not kept (a key made a
/// moment ago is found at its first use).
#[derive(Debug, Default)]
pub struct KeyCache {
    entries: std::sync::Mutex<std::collections::HashMap<String, (DateTime<Utc>, ApiKey)>>,
}

impl KeyCache {
    /// Most keys kept at once (the whole cache is dropped when full).
    pub const MAX_ENTRIES: usize = 10_000;

    /// Key `id` as read at or after `fresh_after`.
    pub fn get(&self, id: &str, fresh_after: DateTime<Utc>) -> Option<ApiKey> {
        let entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        entries.get(id).filter(|(at, _)| *at >= fresh_after).map(|(_, k)| k.clone())
    }

    /// Keeps `key` as read at `at`.
    pub fn put(&self, at: DateTime<Utc>, key: ApiKey) {
        let mut entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if entries.len() >= Self::MAX_ENTRIES && !entries.contains_key(&key.id) {
            entries.clear();
        }
        entries.insert(key.id.clone(), (at, key));
    }

    /// Forgets key `id` (this process changed it).
    pub fn forget(&self, id: &str) {
        self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn a_key_names_its_id_and_only_its_digest_is_kept() {
        let now = at("2026-12-05T12:00:00Z");
        let ulid = "01JEXAMPLE0000000000000000";
        let (rec, key) = create(Draft { all_tenants: true, ..Draft::default() }, now, ulid, &[7u8; 32]).unwrap();
        assert!(key.starts_with("whk_01JEXAMPLE0000000000000000_"), "{key}");
        assert_eq!(key.len(), 4 + 26 + 1 + 43);
        assert_eq!(
            (rec.id.as_str(), rec.prefix.as_str()),
            ("key_01JEXAMPLE0000000000000000", "whk_01JEXAMPLE0000000000000000")
        );
        assert_eq!(id_of(&key).as_deref(), Some(rec.id.as_str()));
        assert_eq!(prefix_of(&rec.id), rec.prefix);
        assert!(!rec.secret_sha256.contains(&key[31..]));
        assert_eq!(rec.check(&key, now), Ok(()));
        let mut wrong = key.clone();
        wrong.pop();
        wrong.push('x');
        assert_eq!(rec.check(&wrong, now), Err(Refusal::Unknown));
        for bad in [
            "",
            "whk_",
            "Bearer x",
            "whk_short_x",
            "whk_01JEXAMPLE0000000000000000_",
            "sk_01JEXAMPLE0000000000000000_x",
        ] {
            assert_eq!(id_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn revoked_and_expired_keys_are_refused_and_scope_is_by_tenant() {
        let now = at("2026-12-05T12:00:00Z");
        let draft = Draft {
            name: Some("billing".into()),
            tenant_ids: Some(vec!["acme".into()]),
            all_tenants: false,
            expires_at: Some(at("2026-12-05T13:00:00Z")),
        };
        let (mut rec, key) = create(draft, now, "01JEXAMPLE0000000000000000", &[1u8; 32]).unwrap();
        assert!(rec.allows("acme") && !rec.allows("globex") && !rec.allows("Acme"));
        assert_eq!(rec.check(&key, at("2026-12-05T13:00:00Z")), Err(Refusal::Expired));
        rec.revoked_at = Some(now);
        assert_eq!(rec.check(&key, now), Err(Refusal::Revoked));
        let every = Draft { all_tenants: true, ..Draft::default() };
        let (all, _) = create(every, now, "01JEXAMPLE0000000000000001", &[2u8; 32]).unwrap();
        assert!(all.allows("acme") && all.allows("globex"));
    }

    #[test]
    fn a_draft_is_checked_field_by_field() {
        let now = at("2026-12-05T12:00:00Z");
        let refused = |d: Draft| create(d, now, "01JEXAMPLE0000000000000000", &[0u8; 32]).unwrap_err().to_string();
        assert!(refused(Draft { tenant_ids: Some(vec![]), ..Draft::default() }).starts_with("tenant_ids: "));
        let twice = Draft { tenant_ids: Some(vec!["a".into(), "a".into()]), ..Draft::default() };
        assert_eq!(refused(twice), "tenant_ids[1]: a is named twice");
        let bad = Draft { tenant_ids: Some(vec!["a b".into()]), ..Draft::default() };
        assert!(refused(bad).starts_with("tenant_ids[0]: "));
        // Issue #54, item 6: "every tenant" is asked for, never what a forgotten field means.
        assert!(refused(Draft::default()).starts_with("tenant_ids, all_tenants: "));
        let both = Draft { tenant_ids: Some(vec!["a".into()]), all_tenants: true, ..Draft::default() };
        assert!(refused(both).starts_with("tenant_ids, all_tenants: give one"));
        let past = Draft { expires_at: Some(now), all_tenants: true, ..Draft::default() };
        assert_eq!(refused(past), "expires_at: 2026-12-05T12:00:00Z is not in the future");
        assert!(refused(Draft { name: Some("a\nb".into()), ..Draft::default() }).starts_with("name: "));
    }
}
