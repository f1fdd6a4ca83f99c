//! The HTTP sender: POSTs an attempt and reports what came back.
//!
//! The destination check (SSRF) lives in DNS resolution: the client's resolver refuses a name
//! that resolves to a loopback, private, link-local or otherwise non-public address, so a
//! public name that is later pointed at an internal address is refused at connect time, not
//! only when the endpoint is created. URLs with a literal IP are checked the same way before
//! the request. Redirects are never followed (a 3xx is a failed attempt).

use crate::policy::Outcome;
use async_trait::async_trait;
use bytes::Bytes;
use std::net::{IpAddr, SocketAddr};
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
}

/// POSTs attempts.
#[async_trait]
pub trait Sender: Send + Sync {
    /// POSTs `body` to `url` with `headers`. Never fails: every failure is an [`Outcome`].
    async fn post(&self, url: &str, headers: &[(&'static str, String)], body: Bytes) -> SendResult;
}

/// [`Sender`] on reqwest, with the request timeout and the destination check.
#[derive(Debug, Clone)]
pub struct HttpSender {
    client: reqwest::Client,
    allow_private: bool,
}

/// A destination that resolves to a non-public address.
#[derive(Debug, thiserror::Error)]
#[error("destination {0} is not a public address")]
pub struct DestinationRefused(pub String);

/// Whether `ip` is a public unicast address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_documentation()
                || v4.is_multicast()
                || o[0] == 0
                || (o[0] == 100 && (64..128).contains(&o[1])) // shared address space, RFC 6598
                || (o[0] == 192 && o[1] == 0 && o[2] == 0) // IETF protocol assignments
                || o[0] >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let seg = v6.segments();
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (seg[0] & 0xfe00) == 0xfc00 // unique local
                || (seg[0] & 0xffc0) == 0xfe80 // link local
                || seg[0] == 0x2001 && seg[1] == 0xdb8) // documentation
        }
    }
}

struct GuardedResolver {
    allow_private: bool,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow = self.allow_private;
        Box::pin(async move {
            let host = name.as_str().to_string();
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if !allow && let Some(bad) = addrs.iter().find(|a| !is_public(a.ip())) {
                let e: Box<dyn std::error::Error + Send + Sync> =
                    Box::new(DestinationRefused(format!("{host} ({})", bad.ip())));
                return Err(e);
            }
            let it: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(it)
        })
    }
}

impl HttpSender {
    /// A sender with the per-request `timeout`; `allow_private` lifts the destination check.
    ///
    /// # Errors
    /// reqwest's error when its TLS backend cannot start.
    pub fn new(timeout: Duration, allow_private: bool) -> Result<Self, reqwest::Error> {
        install_tls_provider();
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            // An answer is classified by its status line: a malformed header line after it is
            // skipped rather than turning a 2xx into a `connection` failure.
            .http1_ignore_invalid_headers_in_responses(true)
            // Nor do many header lines: see RESPONSE_MAX_HEADERS.
            .http1_max_headers(RESPONSE_MAX_HEADERS)
            .dns_resolver(std::sync::Arc::new(GuardedResolver { allow_private }))
            .user_agent(concat!("webhooks/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self { client, allow_private })
    }

    fn literal_refused(&self, url: &str) -> Option<String> {
        if self.allow_private {
            return None;
        }
        let parsed = url::Url::parse(url).ok()?;
        let ip = match parsed.host()? {
            url::Host::Ipv4(v4) => IpAddr::V4(v4),
            url::Host::Ipv6(v6) => IpAddr::V6(v6),
            url::Host::Domain(_) => return None,
        };
        (!is_public(ip)).then(|| ip.to_string())
    }
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

/// `url` as logs, notifications and metrics may show it: any userinfo (`user:password@`)
/// replaced by `***`, so credentials in an endpoint URL never leave the endpoint's record.
/// Something that does not parse as a URL is shown as `<unparseable url>`.
///
/// `https://user:pw@example.com/hook` becomes `https://***@example.com/hook`.
pub fn redact_url(url: &str) -> String {
    let Ok(mut parsed) = url::Url::parse(url) else {
        return "<unparseable url>".into();
    };
    if parsed.username().is_empty() && parsed.password().is_none() {
        return parsed.into();
    }
    // Both setters fail only for URLs that cannot have userinfo (no host), handled above.
    let _ = parsed.set_password(None);
    let _ = parsed.set_username("***");
    parsed.into()
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
    async fn post(&self, url: &str, headers: &[(&'static str, String)], body: Bytes) -> SendResult {
        let started = Instant::now();
        let elapsed = |s: Instant| u64::try_from(s.elapsed().as_millis()).unwrap_or(u64::MAX);
        if let Some(ip) = self.literal_refused(url) {
            return SendResult {
                outcome: Outcome::Refused,
                body: None,
                retry_after_seconds: None,
                duration_ms: 0,
                detail: Some(DestinationRefused(ip).to_string()),
            };
        }
        let mut req = self.client.post(url).header("content-type", "application/json");
        for (name, value) in headers {
            req = req.header(*name, value);
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
                    body: None,
                    retry_after_seconds: None,
                    duration_ms: elapsed(started),
                    // reqwest's message carries the URL: keep its credentials out.
                    detail: Some(match url::Url::parse(&redact_url(url)) {
                        Ok(shown) => crate::error::chain(&e.with_url(shown)),
                        Err(_) => crate::error::chain(&e.without_url()),
                    }),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_and_private_addresses() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.216.34", "8.8.8.8", "2606:4700::1111"] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn credentials_in_urls_are_redacted() {
        assert_eq!(redact_url("https://user:s3cret@example.com/hook?a=1"), "https://***@example.com/hook?a=1");
        assert_eq!(redact_url("http://s3cret@127.0.0.1:9/x"), "http://***@127.0.0.1:9/x");
        assert_eq!(redact_url("https://example.com/hook"), "https://example.com/hook");
        assert!(!redact_url("not a url s3cret").contains("s3cret"));
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

    #[tokio::test]
    async fn refuses_loopback_unless_allowed() {
        let s = HttpSender::new(Duration::from_secs(1), false).unwrap();
        let r = s.post("http://127.0.0.1:9/x", &[], Bytes::new()).await;
        assert_eq!(r.outcome, Outcome::Refused);
        let r = s.post("http://localhost:9/x", &[], Bytes::new()).await;
        assert_eq!(r.outcome, Outcome::Refused);
        let allowed = HttpSender::new(Duration::from_secs(1), true).unwrap();
        let r = allowed.post("http://127.0.0.1:9/x", &[], Bytes::new()).await;
        assert_eq!(r.outcome, Outcome::Connection);
    }
}
