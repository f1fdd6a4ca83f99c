//! OAuth 2.0 client credentials (RFC 6749 4.4) for endpoints whose `auth` is
//! `oauth2_client_credentials`: the token is fetched before an attempt's POST and cached per
//! endpoint in the process (shared by every attempt the process makes), until shortly before
//! it expires; deliver fetches it again once when the receiver answers 401 to a cached token.
//!
//! The token request goes through the sender's client ([`crate::sender::Sender::request_token`]),
//! so the token URL meets the same destination check (SSRF) as the endpoint's URL at connect
//! time. The client authenticates with HTTP Basic (RFC 6749 2.3.1: every authorization server
//! must accept it), its id and secret form-encoded first.
//!
//! Cost: one token request per endpoint and process per token lifetime (a deliver Lambda's
//! instance lives minutes to hours, so with tokens of an hour about one fetch per instance
//! and hour), plus one per 401 answered to a cached token. A fetch that fails is remembered
//! for [`FAILURE_HOLD_SECONDS`]: the attempts in that window fail with the same reason without
//! asking, so a failing token endpoint gets at most one request per endpoint and process
//! every 10 seconds, however many attempts are due.

use crate::domain::endpoint_options::ReceiverAuth;
use crate::sender::Sender;
use base64::Engine;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Longest a token is kept when its answer gives no `expires_in`: 300 seconds.
pub const DEFAULT_LIFETIME_SECONDS: u64 = 300;
/// Longest a token is kept, whatever its `expires_in` says: 86,400 seconds (a day).
pub const MAX_LIFETIME_SECONDS: u64 = 86_400;
/// A token is fetched again this long before it expires, at most: 30 seconds (or a tenth of
/// its lifetime, when that is shorter).
pub const EARLY_REFRESH_SECONDS: u64 = 30;
/// Most endpoints' tokens cached by one process: 10,000 (past it the cache starts over).
pub const MAX_CACHED: usize = 10_000;
/// How long a failed token fetch is remembered per endpoint (and credential set): 10 seconds.
/// Long enough that a burst of attempts (a backlog released, a fan-out) asks a failing token
/// endpoint once rather than once per attempt; short next to any retry schedule's waits
/// after the first (the presets start at 5 seconds and grow), so a token endpoint that
/// recovers is asked again by the next retry or the one after.
pub const FAILURE_HOLD_SECONDS: u64 = 10;

/// A token ready to send, and how long fetching it took (milliseconds; `None` when it came
/// from the cache).
#[derive(Debug, Clone)]
pub struct Token {
    /// The access token (sent as `Authorization: Bearer {value}`).
    pub value: String,
    /// Milliseconds the fetch took, when this call fetched it.
    pub fetch_ms: Option<u64>,
}

#[derive(Debug)]
enum Cached {
    Token {
        value: String,
        fresh_until: Instant,
    },
    /// The last fetch failed (its reason, as the attempt records it), until `until`.
    Failed {
        why: String,
        until: Instant,
    },
}

type Slot = Arc<tokio::sync::Mutex<Option<Cached>>>;

/// The process's OAuth tokens, one slot per endpoint and credential set. Concurrent attempts
/// to one endpoint wait for one fetch rather than each making their own.
#[derive(Debug)]
pub struct TokenCache {
    slots: Mutex<HashMap<String, Slot>>,
    failure_hold: Duration,
}

impl Default for TokenCache {
    fn default() -> Self {
        Self::with_failure_hold(Duration::from_secs(FAILURE_HOLD_SECONDS))
    }
}

impl TokenCache {
    /// An empty cache, remembering failures [`FAILURE_HOLD_SECONDS`].
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty cache that remembers a failed fetch for `hold` (zero: not at all).
    pub fn with_failure_hold(hold: Duration) -> Self {
        Self { slots: Mutex::default(), failure_hold: hold }
    }

    /// The token for `endpoint_id` under `auth`: the cached one while fresh, unless
    /// `refresh`, else one fetched now. `auth` other than OAuth has no token (an error).
    ///
    /// # Errors
    /// Why no token came (the token endpoint's status and OAuth `error` code, or why no
    /// answer came), never a credential: the attempt's `auth_failed` detail. A failure is
    /// remembered for the cache's failure hold ([`FAILURE_HOLD_SECONDS`]): until then the
    /// same reason is answered, marked as remembered, without asking again (even with
    /// `refresh`).
    pub async fn token(
        &self,
        sender: &dyn Sender,
        endpoint_id: &str,
        auth: &ReceiverAuth,
        refresh: bool,
    ) -> Result<Token, String> {
        self.token_for(sender, endpoint_id, "", auth, refresh).await
    }

    /// [`TokenCache::token`] for an endpoint whose URL is `url`: a token is cached per
    /// endpoint, credential set and URL origin, so one fetched while the endpoint pointed
    /// elsewhere is never sent to a new address.
    ///
    /// # Errors
    /// As [`TokenCache::token`].
    pub async fn token_for(
        &self,
        sender: &dyn Sender,
        endpoint_id: &str,
        url: &str,
        auth: &ReceiverAuth,
        refresh: bool,
    ) -> Result<Token, String> {
        let ReceiverAuth::OAuth2ClientCredentials { token_url, client_id, client_secret, scope, audience } = auth
        else {
            return Err("not an OAuth endpoint".into());
        };
        let slot = self.slot(&key(endpoint_id, url, auth));
        let mut cached = slot.lock().await;
        match cached.as_ref() {
            Some(Cached::Failed { why, until }) if *until > Instant::now() => {
                let hold = self.failure_hold.as_secs();
                return Err(format!("{why} (remembered: the token endpoint is asked again {hold} s after it failed)"));
            }
            Some(Cached::Token { value, fresh_until }) if !refresh && *fresh_until > Instant::now() => {
                return Ok(Token { value: value.clone(), fetch_ms: None });
            }
            _ => {}
        }
        let started = Instant::now();
        let fetched =
            fetch(sender, token_url, client_id, client_secret, scope.as_deref(), audience.as_deref(), started).await;
        *cached = Some(match &fetched {
            Ok((value, fresh_until)) => Cached::Token { value: value.clone(), fresh_until: *fresh_until },
            Err(why) => Cached::Failed { why: why.clone(), until: started + self.failure_hold },
        });
        let (value, _) = fetched?;
        let fetch_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        Ok(Token { value, fetch_ms: Some(fetch_ms) })
    }

    fn slot(&self, key: &str) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if slots.len() >= MAX_CACHED && !slots.contains_key(key) {
            slots.clear();
        }
        slots.entry(key.to_string()).or_default().clone()
    }
}

/// One token request: the token and until when it is fresh, or why none came.
async fn fetch(
    sender: &dyn Sender,
    token_url: &str,
    client_id: &str,
    client_secret: &str,
    scope: Option<&str>,
    audience: Option<&str>,
    started: Instant,
) -> Result<(String, Instant), String> {
    // Built and finished before the request: the serializer is not Send.
    let form = {
        let mut form = url::form_urlencoded::Serializer::new(String::new());
        form.append_pair("grant_type", "client_credentials");
        if let Some(s) = scope {
            form.append_pair("scope", s);
        }
        if let Some(a) = audience {
            form.append_pair("audience", a);
        }
        form.finish()
    };
    let encode = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let basic =
        base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", encode(client_id), encode(client_secret)));
    let (status, body) = sender.request_token(token_url, &format!("Basic {basic}"), form).await?;
    let parsed: serde_json::Value = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    if !(200..300).contains(&status) {
        let code =
            parsed.get("error").and_then(|e| e.as_str()).map(|e| format!(" ({})", shorten(e))).unwrap_or_default();
        return Err(format!("token endpoint answered {status}{code}"));
    }
    let value = parsed
        .get("access_token")
        .and_then(|t| t.as_str())
        .filter(|t| !t.is_empty() && http::HeaderValue::from_str(&format!("Bearer {t}")).is_ok())
        .ok_or("token endpoint's answer has no usable access_token")?
        .to_string();
    if let Some(kind) = parsed.get("token_type").and_then(|t| t.as_str())
        && !kind.eq_ignore_ascii_case("bearer")
    {
        return Err(format!("token endpoint issued a {} token, not a bearer token", shorten(kind)));
    }
    // The token server's word, bounded: a day at most (an absurd `expires_in` must not
    // overflow the clock, and a token is fetched again at least daily).
    let lifetime = parsed
        .get("expires_in")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(DEFAULT_LIFETIME_SECONDS)
        .min(MAX_LIFETIME_SECONDS);
    let early = EARLY_REFRESH_SECONDS.min(lifetime / 10);
    let fresh_until = started.checked_add(Duration::from_secs(lifetime.saturating_sub(early))).unwrap_or(started);
    Ok((value, fresh_until))
}

/// The cache key: the endpoint and a digest of its URL's origin and credential set, so a
/// changed `auth` or receiver fetches a new token at once.
fn key(endpoint_id: &str, url: &str, auth: &ReceiverAuth) -> String {
    let mut h = Sha256::new();
    let origin = url::Url::parse(url).map(|u| u.origin().ascii_serialization()).unwrap_or_default();
    h.update(origin.as_bytes());
    h.update([0u8]);
    h.update(serde_json::to_vec(auth).unwrap_or_default());
    let digest = h.finalize();
    let short: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("{endpoint_id}#{short}")
}

/// At most 100 characters of a token endpoint's own words, control characters dropped.
fn shorten(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(100).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use bytes::Bytes;

    /// A token server answering `expires_in` as given, counting requests.
    struct Answers(String, std::sync::atomic::AtomicUsize);

    #[async_trait]
    impl Sender for Answers {
        async fn post(&self, _: &str, _: &[(String, String)], _: Bytes) -> crate::sender::SendResult {
            unreachable!("no attempt here")
        }
        async fn request_token(&self, _: &str, _: &str, _: String) -> Result<(u16, Bytes), String> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok((200, Bytes::from(self.0.clone())))
        }
    }

    fn oauth() -> ReceiverAuth {
        ReceiverAuth::OAuth2ClientCredentials {
            token_url: "https://auth.example.com/token".into(),
            client_id: "c".into(),
            client_secret: "s".into(),
            scope: None,
            audience: None,
        }
    }

    /// Review finding H1: a token server's `expires_in` of u64::MAX overflowed the clock and
    /// panicked deliver (the whole SQS batch back to the queue).
    #[tokio::test]
    async fn an_absurd_expires_in_is_bounded_not_a_panic() {
        let server = Answers(format!(r#"{{"access_token": "t", "expires_in": {}}}"#, u64::MAX), Default::default());
        let cache = TokenCache::new();
        let t = cache.token_for(&server, "ep_1", "https://hooks.example.com/in", &oauth(), false).await.unwrap();
        assert_eq!(t.value, "t");
        cache.token_for(&server, "ep_1", "https://hooks.example.com/in", &oauth(), false).await.unwrap();
        assert_eq!(server.1.load(std::sync::atomic::Ordering::SeqCst), 1, "cached");
        // Another receiver origin for the same endpoint: a token of its own.
        cache.token_for(&server, "ep_1", "https://elsewhere.example.net/in", &oauth(), false).await.unwrap();
        assert_eq!(server.1.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    /// A token server that always fails, counting requests.
    struct Failing(std::sync::atomic::AtomicUsize);

    #[async_trait]
    impl Sender for Failing {
        async fn post(&self, _: &str, _: &[(String, String)], _: Bytes) -> crate::sender::SendResult {
            unreachable!("no attempt here")
        }
        async fn request_token(&self, _: &str, _: &str, _: String) -> Result<(u16, Bytes), String> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok((503, Bytes::from_static(br#"{"error": "temporarily_unavailable"}"#)))
        }
    }

    /// Issue #54, item 15: a token endpoint that failed was asked again by every attempt. A
    /// failure is remembered for FAILURE_HOLD_SECONDS per endpoint, then asked again.
    #[tokio::test]
    async fn a_failing_token_endpoint_is_asked_once_per_hold_not_once_per_attempt() {
        let server = Failing(Default::default());
        let asked = || server.0.load(std::sync::atomic::Ordering::SeqCst);
        let cache = TokenCache::new();
        for refresh in [false, false, true, false] {
            let e = cache.token_for(&server, "ep_1", "https://hooks.example.com/in", &oauth(), refresh).await;
            assert!(e.unwrap_err().starts_with("token endpoint answered 503 (temporarily_unavailable)"));
        }
        assert_eq!(asked(), 1, "one request while the failure is remembered");
        // Another endpoint has its own slot.
        assert!(cache.token_for(&server, "ep_2", "https://hooks.example.com/in", &oauth(), false).await.is_err());
        assert_eq!(asked(), 2);
        // Once the hold is over (here: none), the token endpoint is asked again.
        let unheld = TokenCache::with_failure_hold(Duration::ZERO);
        for _ in 0..2 {
            assert!(unheld.token_for(&server, "ep_1", "https://hooks.example.com/in", &oauth(), false).await.is_err());
        }
        assert_eq!(asked(), 4);
    }
}
