//! The keys of portal tokens and of the portal's form tokens ([`crate::http::ui::token`]): where they
//! come from, how long a process keeps them, and which of them sign and verify while one key
//! replaces another.
//!
//! Deployed, the key is a Secrets Manager secret named by `WEBHOOKS_PORTAL_SECRET_ARN` (the
//! SAM template's `PortalTokenKey`); the key itself is in no environment variable, so
//! `lambda:GetFunctionConfiguration` (AWS ReadOnlyAccess) does not reveal it. A process reads
//! the secret's `AWSCURRENT` version at cold start (the admin binary's `main`), and again once
//! its copy is older than the refresh interval (`WEBHOOKS_PORTAL_KEY_REFRESH_SECONDS`, default
//! 300 s), so a rotation takes effect without a redeploy. Around a rotation, with `created` the
//! new current version's `CreatedDate`:
//!
//! - signing: with `AWSPREVIOUS` until `created` + two refresh intervals (600 s by default),
//!   then with `AWSCURRENT`. One interval for every process to re-read the secret, one more
//!   for what `created` cannot tell exactly (some emulators round it to the second; the new
//!   version takes a moment to be read everywhere; hosts' clocks differ a little), so no
//!   process refuses a new token because its copy of the keys predates the rotation (the
//!   admin function mints, the portal function checks: two processes). A secret with one
//!   version signs with it at once.
//! - verifying: a token or form token verifies under `AWSCURRENT`, or under `AWSPREVIOUS`
//!   until `created` + the overlap (`WEBHOOKS_PORTAL_KEY_OVERLAP_SECONDS`, default 4200 s: the
//!   default session lifetime, 3600 s, after the last signing with the old key at 600 s), so
//!   a session of the default hour minted with the old key lives its whole hour. After it the
//!   old key stops; a longer session signed with it ends early.
//!
//! The previous version is read only while the overlap lasts. A read that fails is not kept:
//! the request answers 503 `unavailable` (the SDK's text, which names the secret's ARN, goes
//! only to the log: [`crate::error_text::aws_detail_logged`]) and the next request reads again.
//! A version shorter than [`MIN_KEY_BYTES`] is refused the same way.
//!
//! Without a secret (`make run`, tests) the key is random, made once per process: tokens then
//! work only in the process that made them.

use crate::error::ServiceError;
use chrono::{DateTime, TimeDelta, Utc};
use std::sync::OnceLock;
use std::time::Duration;

/// Secrets Manager's staging label of a secret's current version.
pub const CURRENT: &str = "AWSCURRENT";
/// The staging label of the version before it.
pub const PREVIOUS: &str = "AWSPREVIOUS";
/// The shortest key accepted: 32 bytes, HMAC-SHA256's output size (the template generates 64
/// characters).
pub const MIN_KEY_BYTES: usize = 32;

/// The keys in force at one moment ([`PortalKeys::in_force`]): one that signs, and every one
/// that verifies.
#[derive(Clone, PartialEq, Eq)]
pub struct KeySet {
    signing: Vec<u8>,
    /// The other version, during an overlap: it verifies too.
    other: Option<Vec<u8>>,
}

impl KeySet {
    /// One key that signs and verifies.
    pub fn single(key: Vec<u8>) -> Self {
        Self { signing: key, other: None }
    }

    /// The key new tokens and form tokens are signed with.
    pub fn signing(&self) -> &[u8] {
        &self.signing
    }

    /// Every key a token or form token verifies under, the signing key first.
    pub fn verifying(&self) -> impl Iterator<Item = &[u8]> {
        std::iter::once(self.signing.as_slice()).chain(self.other.as_deref())
    }
}

/// How a rotation of the secret is taken up (the two numbers of the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// How long a process keeps its copy of the keys before reading the secret again.
    pub refresh: Duration,
    /// How long after the current version's `CreatedDate` the previous one still verifies
    /// (more than two refresh intervals: the previous one signs until then).
    pub overlap: Duration,
}

impl Rotation {
    fn refresh(&self) -> TimeDelta {
        TimeDelta::from_std(self.refresh).unwrap_or(TimeDelta::MAX)
    }

    /// How long after the current version's creation the previous one still signs: two
    /// refresh intervals.
    fn switch(&self) -> TimeDelta {
        self.refresh().checked_mul(2).unwrap_or(TimeDelta::MAX)
    }

    fn overlap(&self) -> TimeDelta {
        TimeDelta::from_std(self.overlap).unwrap_or(TimeDelta::MAX)
    }
}

/// Whether `now` comes before `from` + `span` (a sum past chrono's range: always).
fn before(now: DateTime<Utc>, from: DateTime<Utc>, span: TimeDelta) -> bool {
    from.checked_add_signed(span).is_none_or(|end| now < end)
}

/// The keys in force at `now` for a secret whose current version (`current`) was created at
/// `created`, `previous` being the version before it.
pub fn keys_at(
    current: &[u8],
    created: DateTime<Utc>,
    previous: Option<&[u8]>,
    now: DateTime<Utc>,
    rotation: Rotation,
) -> KeySet {
    match previous {
        Some(old) if before(now, created, rotation.overlap()) => {
            if before(now, created, rotation.switch()) {
                KeySet { signing: old.to_vec(), other: Some(current.to_vec()) }
            } else {
                KeySet { signing: current.to_vec(), other: Some(old.to_vec()) }
            }
        }
        _ => KeySet::single(current.to_vec()),
    }
}

/// A secret's versions as one read found them.
struct Versions {
    current: Vec<u8>,
    /// The current version's `CreatedDate` (the Unix epoch when the answer has none).
    created: DateTime<Utc>,
    /// The previous version, when the read came within the overlap and there is one.
    previous: Option<Vec<u8>>,
    /// When they were read, on the app's clock.
    read_at: DateTime<Utc>,
    /// After a failed read, when to try reading again (meanwhile these stay in force).
    retry_at: Option<DateTime<Utc>>,
}

/// Seconds between tries to read the secret again after a read failed, while the keys read
/// last stay in force: every request does not wait on a failing read.
pub const READ_RETRY_SECONDS: i64 = 10;

/// Where the portal token keys come from: [`crate::App`]'s `portal_keys`, built once per
/// process.
pub struct PortalKeys(Source);

enum Source {
    /// A random key, made once per process.
    Process,
    /// A Secrets Manager secret.
    Secret(Secret),
}

struct Secret {
    client: aws_sdk_secretsmanager::Client,
    /// The secret's ARN (or name).
    id: String,
    rotation: Rotation,
    /// The last successful read. A lock held across the read, so concurrent requests of one
    /// process wait for one read instead of each making its own.
    cached: tokio::sync::Mutex<Option<Versions>>,
}

impl PortalKeys {
    /// The key of this process alone: 32 random bytes made on first use, the same for every
    /// `PortalKeys::process()` of the process.
    pub fn process() -> Self {
        Self(Source::Process)
    }

    /// The keys of the Secrets Manager secret `id` (an ARN or a name), read through `client`
    /// and taken up as `rotation` says.
    pub fn secret(client: aws_sdk_secretsmanager::Client, id: impl Into<String>, rotation: Rotation) -> Self {
        Self(Source::Secret(Secret { client, id: id.into(), rotation, cached: tokio::sync::Mutex::new(None) }))
    }

    /// The keys in force at `now` (the app's clock), reading the secret first when this
    /// process has no copy younger than the refresh interval.
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when a read was due and failed (Secrets Manager's error,
    /// such as AccessDenied or a missing secret, only in the log under the message's error
    /// id), or the secret's version is shorter than [`MIN_KEY_BYTES`].
    pub async fn in_force(&self, now: DateTime<Utc>) -> Result<KeySet, ServiceError> {
        match &self.0 {
            Source::Process => Ok(KeySet::single(process_key().to_vec())),
            Source::Secret(secret) => secret.in_force(now).await,
        }
    }
}

fn process_key() -> &'static [u8] {
    static KEY: OnceLock<Vec<u8>> = OnceLock::new();
    KEY.get_or_init(|| {
        let mut key = vec![0u8; 32];
        crate::clock::Random::from_os().fill(&mut key);
        key
    })
}

impl Secret {
    async fn in_force(&self, now: DateTime<Utc>) -> Result<KeySet, ServiceError> {
        let mut cached = self.cached.lock().await;
        let fresh = |v: &Versions| now >= v.read_at && before(now, v.read_at, self.rotation.refresh());
        let versions = match cached.take() {
            Some(v) if fresh(&v) || v.retry_at.is_some_and(|at| now < at) => v,
            // None yet, or too old: read again.
            old => match self.read_versions(now).await {
                Ok(v) => v,
                // A read that fails (Secrets Manager throttled or away) keeps the keys read last
                // in force while they are younger than the overlap, and is tried again after
                // READ_RETRY_SECONDS rather than on every request; keys older than that, or
                // none, and the request fails (503).
                Err(e) => match old {
                    Some(mut v) if now >= v.read_at && before(now, v.read_at, self.rotation.overlap()) => {
                        tracing::warn!(error = %e, "portal token key not read again; the keys read last stay in force");
                        v.retry_at = Some(now + TimeDelta::seconds(READ_RETRY_SECONDS));
                        v
                    }
                    _ => return Err(e),
                },
            },
        };
        let keys = keys_at(&versions.current, versions.created, versions.previous.as_deref(), now, self.rotation);
        *cached = Some(versions);
        Ok(keys)
    }

    /// Reads `AWSCURRENT`, and `AWSPREVIOUS` when the overlap after the current version's
    /// creation still lasts at `now`.
    async fn read_versions(&self, now: DateTime<Utc>) -> Result<Versions, ServiceError> {
        let answer =
            self.client.get_secret_value().secret_id(&self.id).version_stage(CURRENT).send().await.map_err(failed)?;
        let created = answer
            .created_date()
            .and_then(|d| DateTime::from_timestamp(d.secs(), d.subsec_nanos()))
            .unwrap_or(DateTime::UNIX_EPOCH);
        let current = key_of(answer.secret_string(), answer.secret_binary(), CURRENT)?;
        let mut previous = None;
        if before(now, created, self.rotation.overlap()) {
            match self.client.get_secret_value().secret_id(&self.id).version_stage(PREVIOUS).send().await {
                Ok(old) => previous = Some(key_of(old.secret_string(), old.secret_binary(), PREVIOUS)?),
                // A secret never rotated has no previous version.
                Err(e) if e.as_service_error().is_some_and(|e| e.is_resource_not_found_exception()) => {}
                Err(e) => return Err(failed(e)),
            }
        }
        Ok(Versions { current, created, previous, read_at: now, retry_at: None })
    }
}

/// A Secrets Manager error as the answer may show it (no ARN, no account: see
/// [`crate::error_text::aws_detail_logged`]).
fn failed(e: impl std::error::Error) -> ServiceError {
    let detail = aws_sdk_secretsmanager::error::DisplayErrorContext(e).to_string();
    ServiceError::Unavailable(crate::error_text::aws_detail_logged("Secrets Manager", &detail, false))
}

/// A version's key: its string's bytes, or its binary value.
fn key_of(
    string: Option<&str>,
    binary: Option<&aws_sdk_secretsmanager::primitives::Blob>,
    stage: &str,
) -> Result<Vec<u8>, ServiceError> {
    let key = match (string, binary) {
        (Some(s), _) => s.as_bytes().to_vec(),
        (None, Some(b)) => b.as_ref().to_vec(),
        (None, None) => Vec::new(),
    };
    if key.len() < MIN_KEY_BYTES {
        tracing::error!(stage, bytes = key.len(), "the portal token key secret's version is too short");
        return Err(ServiceError::Unavailable(format!(
            "the portal token key is not usable: its {stage} version is shorter than {MIN_KEY_BYTES} bytes"
        )));
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap()
    }

    const ROTATION: Rotation = Rotation { refresh: Duration::from_secs(300), overlap: Duration::from_secs(4200) };

    #[test]
    fn around_a_rotation_the_old_key_signs_until_every_process_has_read_the_new_one_and_verifies_until_the_overlap_ends()
     {
        let (old, new) = (b"o".repeat(32), b"n".repeat(32));
        let keys = |now| keys_at(&new, at(1_000), Some(&old), at(now), ROTATION);
        let verifying = |k: &KeySet| k.verifying().map(<[u8]>::to_vec).collect::<Vec<_>>();
        // Within two refresh intervals after the new version's creation: the old key signs.
        for now in [1_000, 1_599] {
            assert_eq!(keys(now).signing(), &old[..], "{now}");
            assert_eq!(verifying(&keys(now)), [old.clone(), new.clone()], "{now}");
        }
        // Then the new one signs; the old one still verifies until the overlap ends.
        for now in [1_600, 5_199] {
            assert_eq!(keys(now).signing(), &new[..], "{now}");
            assert_eq!(verifying(&keys(now)), [new.clone(), old.clone()], "{now}");
        }
        assert_eq!(verifying(&keys(5_200)), vec![new.clone()]);
        // A secret with one version signs with it at once.
        assert_eq!(verifying(&keys_at(&new, at(1_000), None, at(1_000), ROTATION)), vec![new.clone()]);
        // A rotation far past chrono's range never ends (no overflow).
        let forever = Rotation { refresh: Duration::from_secs(1), overlap: Duration::MAX };
        assert_eq!(verifying(&keys_at(&new, at(1_000), Some(&old), at(5_000), forever)), [new, old]);
    }

    #[test]
    fn a_version_shorter_than_32_bytes_is_refused_without_its_content() {
        let e = key_of(Some("short-key"), None, CURRENT).unwrap_err();
        assert_eq!(e.status(), 503);
        assert!(!e.to_string().contains("short-key"), "{e}");
        assert_eq!(key_of(Some(&"k".repeat(32)), None, CURRENT).unwrap().len(), 32);
        let blob = aws_sdk_secretsmanager::primitives::Blob::new(vec![7u8; 40]);
        assert_eq!(key_of(None, Some(&blob), PREVIOUS).unwrap(), vec![7u8; 40]);
    }

    #[tokio::test]
    async fn without_a_secret_every_app_of_the_process_shares_one_random_key() {
        let a = PortalKeys::process().in_force(at(0)).await.unwrap();
        let b = PortalKeys::process().in_force(at(1_000_000)).await.unwrap();
        assert_eq!(a.signing(), b.signing());
        assert_eq!(a.signing().len(), 32);
        assert_eq!(a.verifying().count(), 1);
    }
}
