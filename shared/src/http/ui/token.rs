//! Tenant portal tokens: short-lived, signed, scoped to one tenant, stored nowhere.
//!
//! A token is `base64url(payload) "." base64url(HMAC-SHA256(key, "portal.v1." payload))` where
//! the payload is `v1\n{tenant_id}\n{expires_at unix seconds}\n{nonce hex}`. Nothing is
//! written to the table: the token itself carries the tenant and its expiry, the signature
//! (checked in constant time, [`hmac::Mac::verify_slice`]) makes it unforgeable, and the
//! expiry bounds it. The portal derives the tenant from a verified token only.
//!
//! Forms in the portal carry a CSRF field: [`form_token`], an HMAC of the session token
//! under the same key with another label, so a page of another site can neither read nor
//! guess it (the session cookie is also `HttpOnly; SameSite=Lax`: a cross-site POST carries
//! none).
//!
//! The key comes from [`crate::token_keys`]: a Secrets Manager secret read at cold start and
//! again every 300 s, so a rotation takes effect without a redeploy; around one, tokens and
//! form tokens verify under either key of the [`KeySet`] until the overlap ends (4200 s after
//! the new version's creation).

use crate::App;
use crate::domain::ids::TenantId;
use crate::error::ServiceError;
use crate::token_keys::KeySet;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use serde::Serialize;
use sha2::Sha256;

/// Default lifetime of a portal session: 3600 seconds (1 hour).
pub const DEFAULT_TTL_SECONDS: i64 = 3600;
/// Shortest lifetime a caller may ask for: 60 seconds.
pub const MIN_TTL_SECONDS: i64 = 60;
/// Longest lifetime a caller may ask for: 86400 seconds (24 hours).
pub const MAX_TTL_SECONDS: i64 = 86_400;

const TOKEN_LABEL: &[u8] = b"portal.v1.";
const FORM_LABEL: &[u8] = b"portal.form.v1.";

/// What a verified token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// The one tenant the token may see and change.
    pub tenant_id: TenantId,
    /// When it stops working.
    pub expires_at: DateTime<Utc>,
}

/// Why a token was refused. The portal shows each as a page with no tenant data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a token of this service (wrong shape, or the signature does not match: tampered,
    /// or signed with another key).
    #[error("this portal link is not valid; ask for a new one")]
    Invalid,
    /// Signed by us, but past its expiry.
    #[error("this portal link has expired; ask for a new one")]
    Expired,
}

fn mac(key: &[u8], label: &[u8], data: &[u8]) -> Hmac<Sha256> {
    // HMAC accepts keys of any length: new_from_slice cannot fail.
    let mut m = match Hmac::<Sha256>::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC takes keys of any length"),
    };
    m.update(label);
    m.update(data);
    m
}

/// A token for `tenant_id` valid until `expires_at`, with a random `nonce` (so two tokens
/// minted in the same second differ).
pub fn sign(key: &[u8], tenant_id: &str, expires_at: DateTime<Utc>, nonce: &[u8]) -> String {
    let nonce_hex: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
    let payload = format!("v1\n{tenant_id}\n{}\n{nonce_hex}", expires_at.timestamp());
    let signature = mac(key, TOKEN_LABEL, payload.as_bytes()).finalize().into_bytes();
    format!("{}.{}", B64.encode(payload.as_bytes()), B64.encode(signature))
}

/// Checks a token's signature (constant time) and expiry at `now`.
///
/// # Errors
/// [`TokenError::Invalid`] for a malformed or tampered token or one signed with another key;
/// [`TokenError::Expired`] for one past its expiry.
pub fn verify(key: &[u8], token: &str, now: DateTime<Utc>) -> Result<Claims, TokenError> {
    let (payload_b64, signature_b64) = token.split_once('.').ok_or(TokenError::Invalid)?;
    let payload = B64.decode(payload_b64).map_err(|_| TokenError::Invalid)?;
    let signature = B64.decode(signature_b64).map_err(|_| TokenError::Invalid)?;
    mac(key, TOKEN_LABEL, &payload).verify_slice(&signature).map_err(|_| TokenError::Invalid)?;
    let text = String::from_utf8(payload).map_err(|_| TokenError::Invalid)?;
    let mut parts = text.split('\n');
    let (Some("v1"), Some(tenant), Some(exp), Some(_nonce), None) =
        (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Invalid);
    };
    let expires_at = exp.parse::<i64>().ok().and_then(|s| DateTime::from_timestamp(s, 0)).ok_or(TokenError::Invalid)?;
    let tenant_id = TenantId::try_from(tenant.to_string()).map_err(|_| TokenError::Invalid)?;
    // The operational events' tenant has no portal (a token for it is never minted).
    if tenant_id == crate::domain::operational::TENANT {
        return Err(TokenError::Invalid);
    }
    if now >= expires_at {
        return Err(TokenError::Expired);
    }
    Ok(Claims { tenant_id, expires_at })
}

/// As [`verify`], under each key of `keys` that verifies (the signing one first): the first
/// answer other than [`TokenError::Invalid`], else `Invalid`.
///
/// # Errors
/// As [`verify`].
pub fn verify_with(keys: &KeySet, token: &str, now: DateTime<Utc>) -> Result<Claims, TokenError> {
    let mut answer = Err(TokenError::Invalid);
    for key in keys.verifying() {
        answer = verify(key, token, now);
        if answer != Err(TokenError::Invalid) {
            break;
        }
    }
    answer
}

/// The CSRF field of the portal's forms for the session `token`.
pub fn form_token(key: &[u8], token: &str) -> String {
    B64.encode(mac(key, FORM_LABEL, token.as_bytes()).finalize().into_bytes())
}

/// Whether `given` is the CSRF field of session `token` (constant-time compare).
pub fn form_token_ok(key: &[u8], token: &str, given: &str) -> bool {
    match B64.decode(given) {
        Ok(bytes) => mac(key, FORM_LABEL, token.as_bytes()).verify_slice(&bytes).is_ok(),
        Err(_) => false,
    }
}

/// Whether `given` is the CSRF field of session `token` under any key of `keys` that verifies
/// (a form rendered just before a rotation is still accepted during the overlap).
pub fn form_token_ok_with(keys: &KeySet, token: &str, given: &str) -> bool {
    keys.verifying().any(|key| form_token_ok(key, token, given))
}

/// The answer to `POST /v1/tenants/{tenant_id}/portal-sessions`.
#[derive(Debug, Clone, Serialize)]
pub struct PortalSession {
    /// The tenant the session is scoped to.
    pub tenant_id: TenantId,
    /// Where the tenant opens the portal: `{base}/portal?token=...`.
    pub url: String,
    /// The token alone (to build another URL, e.g. behind your own domain).
    pub token: String,
    /// When the token stops working.
    pub expires_at: DateTime<Utc>,
}

/// Mints a portal session for `tenant_id` lasting `ttl_seconds` (default
/// [`DEFAULT_TTL_SECONDS`]), its URL under `base` (scheme and host, no trailing slash),
/// signed with the signing key in force ([`crate::token_keys`]). Writes nothing.
///
/// # Errors
/// [`ServiceError::Validation`] for a `ttl_seconds`
/// outside [`MIN_TTL_SECONDS`]..=[`MAX_TTL_SECONDS`]; [`ServiceError::ReservedTenant`] (403)
/// for the operational events' tenant ([`crate::domain::operational::TENANT`]);
/// [`ServiceError::Unavailable`] when the key's secret must be read and cannot be.
pub async fn create_session(
    app: &App,
    tenant_id: &TenantId,
    ttl_seconds: Option<i64>,
    base: &str,
) -> Result<PortalSession, ServiceError> {
    crate::domain::operational::refuse_reserved(tenant_id, "tenant_id")?;
    let ttl = ttl_seconds.unwrap_or(DEFAULT_TTL_SECONDS);
    if !(MIN_TTL_SECONDS..=MAX_TTL_SECONDS).contains(&ttl) {
        return Err(ServiceError::Validation(format!(
            "ttl_seconds: must be from {MIN_TTL_SECONDS} to {MAX_TTL_SECONDS} seconds"
        )));
    }
    let now = app.clock.now();
    let keys = app.portal_keys.in_force(now).await?;
    let expires_at = now + chrono::Duration::seconds(ttl);
    let mut nonce = [0u8; 12];
    app.random.fill(&mut nonce);
    let token = sign(keys.signing(), tenant_id, expires_at, &nonce);
    Ok(PortalSession { tenant_id: tenant_id.clone(), url: format!("{base}/portal?token={token}"), token, expires_at })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap()
    }

    #[test]
    fn a_token_verifies_until_it_expires() {
        let key = b"k".repeat(32);
        let t = sign(&key, "acme", at(1_000), b"n");
        assert_eq!(
            verify(&key, &t, at(999)).unwrap(),
            Claims { tenant_id: "acme".parse().unwrap(), expires_at: at(1_000) }
        );
        assert_eq!(verify(&key, &t, at(1_000)), Err(TokenError::Expired));
    }

    #[test]
    fn tampered_or_foreign_tokens_are_invalid() {
        let key = b"k".repeat(32);
        let t = sign(&key, "acme", at(1_000), b"n");
        assert_eq!(verify(&b"x".repeat(32), &t, at(0)), Err(TokenError::Invalid));
        // Another tenant in the payload, the old signature kept.
        let (_, sig) = t.split_once('.').unwrap();
        let forged = format!("{}.{sig}", B64.encode("v1\nbeta\n1000\n6e"));
        assert_eq!(verify(&key, &forged, at(0)), Err(TokenError::Invalid));
        for junk in ["", ".", "abc", "a.b", &t[1..]] {
            assert_eq!(verify(&key, junk, at(0)), Err(TokenError::Invalid), "{junk}");
        }
    }

    #[test]
    fn form_tokens_are_bound_to_the_session() {
        let key = b"k".repeat(32);
        let f = form_token(&key, "session-a");
        assert!(form_token_ok(&key, "session-a", &f));
        assert!(!form_token_ok(&key, "session-b", &f));
        assert!(!form_token_ok(&key, "session-a", "garbage"));
    }

    #[test]
    fn during_an_overlap_tokens_and_forms_of_either_key_verify_and_after_it_only_the_new_ones() {
        use crate::token_keys::{Rotation, keys_at};
        let (old, new) = (b"o".repeat(32), b"n".repeat(32));
        let rotation =
            Rotation { refresh: std::time::Duration::from_secs(300), overlap: std::time::Duration::from_secs(4200) };
        let (by_old, by_new) = (sign(&old, "acme", at(9_000), b"n"), sign(&new, "acme", at(9_000), b"n"));
        let during = keys_at(&new, at(1_000), Some(&old), at(2_000), rotation);
        let after = keys_at(&new, at(1_000), Some(&old), at(5_200), rotation);
        for token in [&by_old, &by_new] {
            assert_eq!(verify_with(&during, token, at(2_000)).unwrap().tenant_id, "acme");
        }
        assert_eq!(verify_with(&after, &by_old, at(5_200)), Err(TokenError::Invalid));
        assert_eq!(verify_with(&after, &by_new, at(5_200)).unwrap().tenant_id, "acme");
        // Expired under the old key is still told as expired, not invalid.
        assert_eq!(verify_with(&during, &sign(&old, "acme", at(1_500), b"n"), at(2_000)), Err(TokenError::Expired));
        let old_form = form_token(&old, &by_old);
        assert!(form_token_ok_with(&during, &by_old, &old_form));
        assert!(!form_token_ok_with(&after, &by_old, &old_form));
        assert!(!form_token_ok_with(&during, &by_old, &form_token(&[9u8; 32], &by_old)));
    }
}
