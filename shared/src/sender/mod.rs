//! The HTTP sender: POSTs an attempt and reports what came back.
//!
//! The destination check (SSRF) lives in DNS resolution: the client's resolver refuses a name
//! that resolves to a loopback, private, link-local or otherwise non-public address (the
//! ranges of [`crate::sender::destination`], also checked when the endpoint is registered), so a
//! public name that is later pointed at an internal address is refused at connect time. URLs
//! with a literal IP or a `localhost` name are refused before the request. Proxy variables are
//! ignored and redirects are never followed (a 3xx is a failed attempt).

pub mod destination;
pub mod oauth;
pub mod tls_roots;

use crate::domain::retry_policy::Outcome;
use async_trait::async_trait;
use bytes::Bytes;
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime};

/// Most response body bytes kept on an attempt record (1 KiB).
pub const RESPONSE_BODY_LIMIT: usize = 1024;

/// Most header lines read in an HTTP/1 answer: 1000, ten times hyper's default of 100.
///
/// An answer is classified by its status line, and hyper fails the whole response when its
/// headers exceed the limit, which would turn a receiver's `200 OK` with many headers (proxies
/// and frameworks add them) into a `connection` failure retried until exhausted. Hyper
/// allocates room for this many headers while it parses an answer (64 bytes each), so the limit
/// stays finite; the header section is also bounded by hyper's read buffer (about 400 KiB).
pub const RESPONSE_MAX_HEADERS: usize = 1000;

/// Makes rustls on ring the process's default TLS crypto provider, once.
///
/// reqwest is built with `rustls-no-provider` (its `rustls` feature would bring aws-lc as a
/// second crypto library next to the ring that the AWS SDK client uses, see
/// [`crate::app::aws_sdk_config`]), and then takes the process default when a client is
/// built; without one it panics. [`HttpSender::new`] calls this; so must any other code that
/// builds a reqwest client (the tests, the bench). A provider already installed is kept.
pub fn install_tls_provider() {
    // The error only says a default is already installed (by an earlier call or the host).
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// At most [`RESPONSE_BODY_LIMIT`] bytes of a response body read as lossy UTF-8, cut at a
/// character boundary (each invalid byte becomes a 3-byte U+FFFD, so 1 KiB read can triple).
fn excerpt(mut body: String) -> String {
    if body.len() > RESPONSE_BODY_LIMIT {
        let mut cut = RESPONSE_BODY_LIMIT;
        while !body.is_char_boundary(cut) {
            cut -= 1;
        }
        body.truncate(cut);
    }
    body
}

/// What one POST came back with.
#[derive(Debug, Clone, PartialEq)]
pub struct SendResult {
    /// Status, timeout, connection error or refused destination.
    pub outcome: Outcome,
    /// The body's first [`RESPONSE_BODY_LIMIT`] bytes as lossy UTF-8, at most that long
    /// itself, when it answered.
    pub body: Option<String>,
    /// `Retry-After`, in seconds from now, when present and valid (seconds or HTTP-date).
    pub retry_after_seconds: Option<u64>,
    /// Wall time of the request, milliseconds.
    pub duration_ms: u64,
    /// A short description of a transport error, for logs.
    pub detail: Option<String>,
    /// Why a `timeout` or `connection` failure got no answer ([`cause_of`]): `refused`,
    /// `reset`, `dns`, `tls`, `timeout` or `other`.
    pub cause: Option<&'static str>,
}

/// Most bytes of an OAuth token endpoint's answer read (64 KiB: a token response with a
/// large JWT fits many times over).
pub const TOKEN_ANSWER_LIMIT: usize = 64 * 1024;

/// POSTs attempts.
#[async_trait]
pub trait Sender: Send + Sync {
    /// POSTs `body` to `url` with `headers` (name, value). Never fails: every failure is an
    /// [`Outcome`].
    async fn post(&self, url: &str, headers: &[(String, String)], body: Bytes) -> SendResult;

    /// POSTs an OAuth 2.0 token request (`form`, `application/x-www-form-urlencoded`, with
    /// `authorization` as the `Authorization` header) to `url`, under the same destination
    /// check as an attempt. The answer's status and its first [`TOKEN_ANSWER_LIMIT`] bytes.
    ///
    /// # Errors
    /// Why no answer came (refused destination, connection, timeout), without credentials.
    /// The default, for senders that fetch no tokens (the simulation's), always fails.
    async fn request_token(&self, url: &str, authorization: &str, form: String) -> Result<(u16, Bytes), String> {
        let _ = (url, authorization, form);
        Err("this sender fetches no OAuth tokens".into())
    }
}

/// [`Sender`] on reqwest, with the request timeout and the destination check.
#[derive(Debug, Clone)]
pub struct HttpSender {
    client: reqwest::Client,
    allow_private: bool,
    require_https: bool,
}

/// A name the resolver could not resolve (the system resolver's error as text).
#[derive(Debug, thiserror::Error)]
#[error("dns: {0}")]
pub struct DnsFailure(pub String);

/// A destination that resolves to a non-public address.
#[derive(Debug, thiserror::Error)]
#[error("destination {0} is not a public address")]
pub struct DestinationRefused(pub String);

pub use crate::sender::destination::is_public;

/// The refusal of a connection to `host`, resolved to `addrs`, when any of them is not public.
/// It names the host only: the attempt record (which portal users read) does not say what the
/// name resolved to (a DNS oracle inside a VPC); the address goes to the log (warn).
fn refused_resolution(host: &str, addrs: &[SocketAddr]) -> Option<DestinationRefused> {
    let bad = addrs.iter().find(|a| !is_public(a.ip()))?;
    tracing::warn!(host, address = %bad.ip(), "attempt refused: the destination resolves to a non-public address");
    Some(DestinationRefused(host.to_string()))
}

struct GuardedResolver {
    allow_private: bool,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow = self.allow_private;
        Box::pin(async move {
            let host = name.as_str().to_string();
            let addrs: Vec<SocketAddr> = match tokio::net::lookup_host((host.as_str(), 0)).await {
                Ok(found) => found.collect(),
                Err(e) => {
                    let e: Box<dyn std::error::Error + Send + Sync> = Box::new(DnsFailure(format!("{host}: {e}")));
                    return Err(e);
                }
            };
            if !allow && let Some(refused) = refused_resolution(&host, &addrs) {
                let e: Box<dyn std::error::Error + Send + Sync> = Box::new(refused);
                return Err(e);
            }
            let it: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(it)
        })
    }
}

impl HttpSender {
    /// A sender with the per-request `timeout`; `allow_private` lifts the destination check;
    /// `require_https` refuses `http://` URLs (`WEBHOOKS_REQUIRE_HTTPS`).
    ///
    /// Proxy variables (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`) are ignored: through a proxy
    /// the proxy resolves the name, and the destination check would never see the address.
    ///
    /// # Errors
    /// reqwest's error when its TLS backend cannot start.
    pub fn new(timeout: Duration, allow_private: bool, require_https: bool) -> Result<Self, reqwest::Error> {
        install_tls_provider();
        let client = crate::sender::tls_roots::sender_roots(reqwest::Client::builder())
            .timeout(timeout)
            .connect_timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            // An answer is classified by its status line: a malformed header line after it is
            // skipped rather than turning a 2xx into a `connection` failure.
            .http1_ignore_invalid_headers_in_responses(true)
            // Nor do many header lines: see RESPONSE_MAX_HEADERS.
            .http1_max_headers(RESPONSE_MAX_HEADERS)
            .dns_resolver(std::sync::Arc::new(GuardedResolver { allow_private }))
            .user_agent(concat!("webhooks/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self { client, allow_private, require_https })
    }
}

/// Why a request that got no answer failed, from its error chain: `timeout` (no answer
/// within the request timeout), `dns` (the name did not resolve), `refused` (nothing listens:
/// the connection was refused), `tls` (the TLS handshake or the certificate failed), `reset`
/// (the receiver dropped the connection: reset, aborted, or closed before an answer), else
/// `other`. Stored on the attempt beside its class (`connection`, `timeout`), so the
/// delivery's page says what to look at.
pub fn cause_of(e: &reqwest::Error) -> &'static str {
    use std::io::ErrorKind;
    if e.is_timeout() {
        return "timeout";
    }
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = next {
        if s.is::<DnsFailure>() {
            return "dns";
        }
        if s.is::<rustls::Error>() {
            return "tls";
        }
        // hyper's errors for a connection the receiver dropped carry no io::Error beneath:
        // "connection closed before message completed" (EOF before an answer), "operation
        // was canceled: connection closed" (closed while the request was being written).
        let text = s.to_string();
        if ["connection closed", "connection reset", "broken pipe", "operation was canceled"]
            .iter()
            .any(|t| text.to_ascii_lowercase().contains(t))
        {
            return "reset";
        }
        next = s.source();
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            match io.kind() {
                ErrorKind::ConnectionRefused => return "refused",
                ErrorKind::ConnectionReset
                | ErrorKind::ConnectionAborted
                | ErrorKind::BrokenPipe
                | ErrorKind::UnexpectedEof => return "reset",
                _ => {}
            }
            // An io::Error's `source` skips the error it wraps (a TLS error wrapped twice).
            if let Some(inner) = io.get_ref() {
                next = Some(inner as &(dyn std::error::Error + 'static));
            }
        }
    }
    "other"
}

fn is_refused(e: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.is::<DestinationRefused>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// Parses `Retry-After`: delta seconds or an HTTP-date, as seconds from `now`. `None` when
/// absent, negative, in the past or unparseable.
pub fn parse_retry_after(value: Option<&str>, now: SystemTime) -> Option<u64> {
    let v = value?.trim();
    if let Ok(seconds) = v.parse::<i64>() {
        return u64::try_from(seconds).ok();
    }
    let at = httpdate::parse_http_date(v).ok()?;
    at.duration_since(now).ok().map(|d| d.as_secs())
}

#[async_trait]
impl Sender for HttpSender {
    async fn post(&self, url: &str, headers: &[(String, String)], body: Bytes) -> SendResult {
        let started = Instant::now();
        let elapsed = |s: Instant| u64::try_from(s.elapsed().as_millis()).unwrap_or(u64::MAX);
        if let Some(why) =
            crate::sender::destination::refused_before_connect(url, self.allow_private, self.require_https)
        {
            return SendResult {
                outcome: Outcome::Refused,
                body: None,
                retry_after_seconds: None,
                duration_ms: 0,
                detail: Some(why),
                cause: None,
            };
        }
        let mut req = self.client.post(url).header("content-type", "application/json");
        for (name, value) in headers {
            // Credentials (authorization, secret headers) never show in a debug print.
            match reqwest::header::HeaderValue::from_str(value) {
                Ok(mut v) => {
                    v.set_sensitive(true);
                    req = req.header(name.as_str(), v);
                }
                Err(_) => req = req.header(name.as_str(), value.as_str()),
            }
        }
        match req.body(body).send().await {
            Ok(mut resp) => {
                let status = resp.status().as_u16();
                let retry_after = parse_retry_after(
                    resp.headers().get("retry-after").and_then(|v| v.to_str().ok()),
                    SystemTime::now(),
                );
                let mut kept: Vec<u8> = Vec::new();
                while kept.len() < RESPONSE_BODY_LIMIT {
                    match resp.chunk().await {
                        Ok(Some(chunk)) => kept.extend_from_slice(&chunk),
                        _ => break,
                    }
                }
                kept.truncate(RESPONSE_BODY_LIMIT);
                SendResult {
                    outcome: Outcome::Status(status),
                    body: (!kept.is_empty()).then(|| excerpt(String::from_utf8_lossy(&kept).into_owned())),
                    retry_after_seconds: retry_after,
                    duration_ms: elapsed(started),
                    detail: None,
                    cause: None,
                }
            }
            Err(e) => {
                let outcome = if is_refused(&e) {
                    Outcome::Refused
                } else if e.is_timeout() {
                    Outcome::Timeout
                } else {
                    Outcome::Connection
                };
                SendResult {
                    outcome,
                    cause: (outcome != Outcome::Refused).then(|| cause_of(&e)),
                    body: None,
                    retry_after_seconds: None,
                    duration_ms: elapsed(started),
                    detail: Some(redacted_error(e, url)),
                }
            }
        }
    }

    async fn request_token(&self, url: &str, authorization: &str, form: String) -> Result<(u16, Bytes), String> {
        if let Some(why) =
            crate::sender::destination::refused_before_connect(url, self.allow_private, self.require_https)
        {
            return Err(format!("token_url refused: {why}"));
        }
        let sent = self
            .client
            .post(url)
            .header("authorization", authorization)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .body(form)
            .send()
            .await;
        let mut resp = match sent {
            Ok(resp) => resp,
            Err(e) if is_refused(&e) => return Err(format!("token_url refused: {}", redacted_error(e, url))),
            Err(e) => return Err(format!("token request failed ({}): {}", cause_of(&e), redacted_error(e, url))),
        };
        let status = resp.status().as_u16();
        let mut kept: Vec<u8> = Vec::new();
        while kept.len() < TOKEN_ANSWER_LIMIT {
            match resp.chunk().await {
                Ok(Some(chunk)) => kept.extend_from_slice(&chunk),
                _ => break,
            }
        }
        kept.truncate(TOKEN_ANSWER_LIMIT);
        Ok((status, Bytes::from(kept)))
    }
}

/// A reqwest error's chain as text with the URL's credentials and query values redacted
/// (reqwest's message carries the URL).
fn redacted_error(e: reqwest::Error, url: &str) -> String {
    match url::Url::parse(&crate::sender::destination::redact_url(url)) {
        Ok(shown) => crate::error_text::chain(&e.with_url(shown)),
        Err(_) => crate::error_text::chain(&e.without_url()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue #54, item 8: an attempt refused at connect time for what the name resolves to
    /// does not record the address (portal users read attempt records).
    #[test]
    fn a_refused_resolution_names_the_host_not_the_address() {
        let addrs: Vec<SocketAddr> = vec!["93.184.216.34:443".parse().unwrap(), "10.1.2.3:443".parse().unwrap()];
        let text = refused_resolution("inside.example", &addrs).map(|r| r.to_string()).unwrap_or_default();
        assert_eq!(text, "destination inside.example is not a public address");
        assert!(refused_resolution("example.com", &addrs[..1]).is_none());
    }

    #[test]
    fn retry_after_in_seconds_and_as_a_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(parse_retry_after(Some("120"), now), Some(120));
        assert_eq!(parse_retry_after(Some("-5"), now), None);
        assert_eq!(parse_retry_after(Some("soon"), now), None);
        assert_eq!(parse_retry_after(None, now), None);
        let later = httpdate::fmt_http_date(now + Duration::from_secs(90));
        assert_eq!(parse_retry_after(Some(&later), now), Some(90));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(90));
        assert_eq!(parse_retry_after(Some(&earlier), now), None);
    }

    /// The proxy variables this test sets in its child process.
    const PROXY_VARIABLES: [&str; 6] =
        ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"];

    /// Runs this test binary again with every proxy variable pointing at a canary listener on
    /// loopback (a process's environment cannot be changed safely from a running test), and
    /// has the child POST to names the resolver cannot place. Through a proxy, the proxy would
    /// resolve the name and the destination check would never see the address: the canary
    /// must get no connection.
    #[tokio::test]
    async fn proxy_variables_are_ignored() {
        let canary = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        canary.set_nonblocking(true).unwrap();
        let proxy = format!("http://{}", canary.local_addr().unwrap());
        let mut child = std::process::Command::new(std::env::current_exe().unwrap());
        child.args(["--exact", "sender::tests::posts_through_proxy_variables_as_a_child", "--nocapture"]);
        for name in PROXY_VARIABLES {
            child.env(name, &proxy);
        }
        child.env("NO_PROXY", "").env("no_proxy", "").env("WEBHOOKS_PROXY_CHILD", "1");
        let out = child.output().unwrap();
        let printed = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "child failed: {printed}");
        assert!(printed.contains("child posted 2"), "the child did not run: {printed}");
        assert!(canary.accept().is_err(), "a request went to the proxy");
    }

    /// The child half of [`proxy_variables_are_ignored`]; does nothing unless started by it.
    #[tokio::test]
    async fn posts_through_proxy_variables_as_a_child() {
        if std::env::var_os("WEBHOOKS_PROXY_CHILD").is_none() {
            return;
        }
        let s = HttpSender::new(Duration::from_secs(2), false, false).unwrap();
        let mut posted = 0;
        for url in ["http://hook.example.invalid/x", "https://hook.example.invalid/x"] {
            let r = s.post(url, &[], Bytes::new()).await;
            // Without the proxy the name does not resolve (a connection failure, or a timeout
            // where DNS itself is unreachable); never an answer. The parent checks the proxy.
            assert!(matches!(r.outcome, Outcome::Connection | Outcome::Timeout), "{url}: {r:?}");
            posted += 1;
        }
        println!("child posted {posted}");
    }

    /// The connect-time check itself, past `post`'s check of literal addresses and localhost
    /// names: the resolver refuses a name whose answer is loopback, and the error says so (a
    /// name pointed at an internal address after registration ends as refused, not retried).
    #[tokio::test]
    async fn the_resolver_refuses_a_name_that_resolves_to_loopback() {
        let s = HttpSender::new(Duration::from_secs(2), false, false).unwrap();
        let e = s.client.post("http://localhost:9/x").send().await.unwrap_err();
        assert!(is_refused(&e), "{e:?}");
        let allowed = HttpSender::new(Duration::from_secs(2), true, false).unwrap();
        let e = allowed.client.post("http://localhost:9/x").send().await.unwrap_err();
        assert!(!is_refused(&e), "{e:?}");
    }

    #[tokio::test]
    async fn refuses_loopback_unless_allowed() {
        let s = HttpSender::new(Duration::from_secs(1), false, false).unwrap();
        let r = s.post("http://127.0.0.1:9/x", &[], Bytes::new()).await;
        assert_eq!(r.outcome, Outcome::Refused);
        let r = s.post("http://localhost:9/x", &[], Bytes::new()).await;
        assert_eq!(r.outcome, Outcome::Refused);
        let allowed = HttpSender::new(Duration::from_secs(1), true, false).unwrap();
        let r = allowed.post("http://127.0.0.1:9/x", &[], Bytes::new()).await;
        assert_eq!(r.outcome, Outcome::Connection);
    }
}
