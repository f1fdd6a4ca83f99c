//! Where attempts may go (SSRF): the one list of refused address ranges, and the checks made
//! with it.
//!
//! An endpoint URL is checked twice:
//! - **at registration** (create and PATCH, [`check_registration`]): a literal address in a
//!   refused range, a `localhost` name, or a name that resolves into a refused range at that
//!   moment is answered with 422 `destination_not_allowed`; with `WEBHOOKS_REQUIRE_HTTPS` an
//!   `http://` URL is a 422 `validation_error`;
//! - **at connect time**, by the sender's resolver ([`crate::sender::HttpSender`]), because a
//!   name's DNS answer can change after registration. Both use [`is_public`].
//!
//! URLs are parsed as browsers do (WHATWG, the `url` crate), so every spelling of an IPv4
//! address (decimal `2130706433`, hex `0x7f000001`, octal `0177.0.0.1`, short `127.1`, a
//! trailing dot) becomes the address itself before the check, and userinfo never hides the
//! host.

use crate::config::Config;
use crate::error::ServiceError;
use ipnet::IpNet;
use std::net::IpAddr;
use std::sync::LazyLock;
use std::time::Duration;

/// The refused ranges, with the name a refusal gives. Sources: IANA's IPv4 and IPv6
/// Special-Purpose Address Registries (RFC 6890 and its updates), plus the ranges that embed
/// an IPv4 address (mapped, compatible, NAT64, 6to4), which could carry a private one.
pub const REFUSED_RANGES: &[(&str, &str)] = &[
    ("0.0.0.0/8", "this network (unspecified)"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "shared address space (CGNAT)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local (cloud metadata)"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "6to4 relay anycast"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved (and broadcast)"),
    ("::/96", "IPv4-compatible IPv6 (with unspecified and loopback)"),
    ("::ffff:0:0/96", "IPv4-mapped IPv6"),
    ("64:ff9b::/96", "NAT64"),
    ("64:ff9b:1::/48", "local-use NAT64"),
    ("100::/64", "discard-only"),
    ("2001::/23", "IETF protocol assignments (Teredo, benchmarking)"),
    ("2001:db8::/32", "documentation"),
    ("2002::/16", "6to4"),
    ("fc00::/7", "unique local"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local"),
    ("ff00::/8", "multicast"),
];

static RANGES: LazyLock<Vec<(IpNet, &'static str)>> = LazyLock::new(|| {
    // Every entry parses (a unit test checks the count), so none is skipped in practice.
    REFUSED_RANGES.iter().filter_map(|(net, name)| net.parse().ok().map(|n| (n, *name))).collect()
});

/// The refused range `ip` is in, by name; `None` for a public unicast address.
pub fn refused_range(ip: IpAddr) -> Option<&'static str> {
    RANGES.iter().find(|(net, _)| net.contains(&ip)).map(|(_, name)| *name)
}

/// Whether `ip` is outside every [`REFUSED_RANGES`] entry.
pub fn is_public(ip: IpAddr) -> bool {
    refused_range(ip).is_none()
}

/// How long registration waits for a name's DNS answer (2 seconds). A name that does not
/// resolve in time is accepted: the connect-time check still applies to every attempt.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

fn refused(field: &str, url: &str, why: impl std::fmt::Display) -> ServiceError {
    ServiceError::DestinationNotAllowed(format!("{field}: {} is not allowed: {why}", redact_url(url)))
}

/// Whether `host` is a `localhost` name (RFC 6761: always loopback, whatever DNS says).
fn is_localhost(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    host == "localhost" || host.ends_with(".localhost")
}

/// Checks an endpoint URL when it is created or changed. `url` has already been checked to be
/// an http(s) URL with a host. With `allow_private_destinations` (local runtime) only the
/// https rule applies.
///
/// # Errors
/// - [`ServiceError::Validation`] (422 `validation_error`) for `http://` when
///   `require_https` is on;
/// - [`ServiceError::DestinationNotAllowed`] (422 `destination_not_allowed`) for a literal
///   address in a refused range, a `localhost` name, or a name resolving into a refused range
///   now (any one of its addresses).
pub async fn check_registration(cfg: &Config, url: &str) -> Result<(), ServiceError> {
    check_field(cfg, "url", url).await
}

/// [`check_registration`] for a URL in another field (`auth.token_url`), named in the
/// error.
///
/// # Errors
/// As [`check_registration`], naming `field`.
pub async fn check_field(cfg: &Config, field: &str, url: &str) -> Result<(), ServiceError> {
    let parsed = url::Url::parse(url).map_err(|e| ServiceError::Validation(format!("{field}: {}", not_a_url(e))))?;
    if cfg.require_https && parsed.scheme() != "https" {
        return Err(ServiceError::Validation(format!("{field}: must be an https URL (WEBHOOKS_REQUIRE_HTTPS is on)")));
    }
    if cfg.allow_private_destinations {
        return Ok(());
    }
    let ip = match parsed.host() {
        Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
        Some(url::Host::Domain(name)) => {
            if is_localhost(name) {
                return Err(refused(field, url, "localhost is loopback"));
            }
            let port = parsed.port_or_known_default().unwrap_or(443);
            let lookup = tokio::net::lookup_host((name, port));
            return match tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
                Ok(Ok(addrs)) => refuse_resolved(field, url, name, addrs),
                // Not resolvable now (not set up yet, or no DNS here): the connect-time check
                // decides at each attempt.
                Ok(Err(_)) | Err(_) => Ok(()),
            };
        }
        None => return Err(ServiceError::Validation(format!("{field}: must have a host"))),
    };
    match refused_range(ip) {
        Some(range) => Err(refused(field, url, format!("{ip} is {range}"))),
        None => Ok(()),
    }
}

/// The registration answer for a name that resolved to `addrs`: refused when any is in a
/// refused range. The refusal names the field, the URL (redacted) and the name, never the
/// address it resolved to nor its range: whoever may register URLs (a portal user) must not
/// learn what names resolve to inside the service's network (a DNS oracle when deliver runs
/// in a VPC). The address and range go to the log (info) for operators.
fn refuse_resolved(
    field: &str,
    url: &str,
    name: &str,
    addrs: impl IntoIterator<Item = std::net::SocketAddr>,
) -> Result<(), ServiceError> {
    for a in addrs {
        if let Some(range) = refused_range(a.ip()) {
            tracing::info!(field, host = name, address = %a.ip(), range, "destination refused at registration");
            return Err(refused(field, url, format!("{name} resolves to a private address")));
        }
    }
    Ok(())
}

/// Whether the sender refuses `url` before any connection: `http://` under `require_https`,
/// or a literal address in a refused range (unless `allow_private`). The reason, for the
/// attempt record; names are checked by the resolver instead.
pub fn refused_before_connect(url: &str, allow_private: bool, require_https: bool) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    if require_https && parsed.scheme() != "https" {
        return Some("http:// refused (WEBHOOKS_REQUIRE_HTTPS is on)".into());
    }
    if allow_private {
        return None;
    }
    let ip = match parsed.host()? {
        url::Host::Ipv4(v4) => IpAddr::V4(v4),
        url::Host::Ipv6(v6) => IpAddr::V6(v6),
        url::Host::Domain(name) if is_localhost(name) => return Some(format!("{name} is loopback")),
        url::Host::Domain(_) => return None,
    };
    refused_range(ip).map(|range| format!("destination {ip} is not a public address ({range})"))
}

/// What a URL that does not parse is told (the URL itself is not repeated: it may hold a
/// token): the parser's reason and, for one without a scheme (`example.com/hook`), what to
/// do about it.
pub fn not_a_url(e: url::ParseError) -> String {
    match e {
        url::ParseError::RelativeUrlWithoutBase => {
            format!("not a URL ({e}): it has no scheme; write it in full, with https:// in front")
        }
        other => format!("not a URL ({other})"),
    }
}

/// `url` as logs, notifications, error bodies and metrics may show it: any userinfo
/// (`user:password@`) replaced by `***`, every query value by `***` (receivers put tokens
/// there: `?token=...`), and the fragment dropped, so credentials in an endpoint URL never
/// leave the endpoint's record except in the POST itself. Query names with a value stay, to
/// tell URLs apart; a name without one can be a token and goes too. A token in the path
/// (`/services/T0/B0/XXXX`, as Slack's incoming webhooks have) is not recognised: the path
/// is shown as it is. Something that does not parse as a URL is shown as `<unparseable url>`.
///
/// `https://user:pw@example.com/hook?token=abc` becomes `https://***@example.com/hook?token=***`.
pub fn redact_url(url: &str) -> String {
    let Ok(mut parsed) = url::Url::parse(url) else {
        return "<unparseable url>".into();
    };
    if !parsed.username().is_empty() || parsed.password().is_some() {
        // Both setters fail only for URLs that cannot have userinfo (no host).
        let _ = parsed.set_password(None);
        let _ = parsed.set_username("***");
    }
    // (Not `Url::query`: tests/tests/it/iam.rs reads a `query` call as DynamoDB's Query.)
    if parsed.as_str().contains('?') {
        // A name without a value can be a token itself (`?s3cret`): it goes too.
        let names: Vec<String> = parsed
            .query_pairs()
            .map(|(name, value)| if value.is_empty() { "***".to_string() } else { name.into_owned() })
            .collect();
        if names.is_empty() {
            parsed.set_query(None);
        } else {
            parsed.query_pairs_mut().clear().extend_pairs(names.iter().map(|name| (name.as_str(), "***")));
        }
    }
    parsed.set_fragment(None);
    parsed.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::id;

    #[test]
    fn credentials_in_urls_are_redacted() {
        assert_eq!(redact_url("https://user:s3cret@example.com/hook?a=1"), "https://***@example.com/hook?a=***");
        assert_eq!(redact_url("http://s3cret@127.0.0.1:9/x"), "http://***@127.0.0.1:9/x");
        assert_eq!(redact_url("https://example.com/hook"), "https://example.com/hook");
        assert!(!redact_url("not a url s3cret").contains("s3cret"));
    }

    /// Issue #34, failing input 6: `redact_url` kept query strings, so a receiver's
    /// `?token=...` reached SNS and e-mail notifications, logs and error bodies.
    #[test]
    fn a_receivers_query_token_is_redacted_wherever_a_url_leaves_the_process() {
        let url = "https://hooks.example.com/in?token=s3cret&team=blue&sig=abc%20def#frag-s3cret";
        assert_eq!(redact_url(url), "https://hooks.example.com/in?token=***&team=***&sig=***");
        assert_eq!(redact_url("https://example.com/in?s3cret"), "https://example.com/in?***=***");
        assert_eq!(redact_url("https://example.com/in?"), "https://example.com/in");
        let now = chrono::Utc::now();
        let ep = crate::domain::model::Endpoint::new(id("ep_1"), id("acme"), url, "whsec_x", now);
        let disabled = crate::domain::model::Disabled {
            reason: "gone".into(),
            status_code: Some(410),
            delivery_id: None,
            at: now,
        };
        let message = crate::notify::message(&ep, &disabled).to_string();
        assert!(!message.contains("s3cret") && !message.contains("abc"), "{message}");
    }

    /// The same for the error body of an endpoint URL refused at registration.
    #[tokio::test]
    async fn a_refused_urls_error_body_carries_no_query_token() {
        let cfg = crate::config::Config::new("t", "q");
        let refused = check_registration(&cfg, "http://127.0.0.1/in?token=s3cret").await;
        let text = refused.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains("not allowed") && !text.contains("s3cret"), "{text}");
    }

    /// Issue #54, item 8: a name refused for what it resolves to is refused as resolving to a
    /// private address, without the address or its range (a DNS oracle for portal users).
    #[test]
    fn a_name_refused_for_its_address_does_not_say_which_address() {
        for ip in ["10.1.2.3", "169.254.169.254", "fd00::7"] {
            let addr = std::net::SocketAddr::new(ip.parse().unwrap(), 443);
            let refused = refuse_resolved("url", "https://inside.example/in", "inside.example", [addr]);
            let text = refused.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(text.contains("inside.example resolves to a private address"), "{text}");
            for leaked in [ip, "private)", "link-local", "unique local"] {
                assert!(!text.contains(leaked), "{leaked} in {text}");
            }
        }
        let public = std::net::SocketAddr::new("93.184.216.34".parse().unwrap(), 443);
        assert!(refuse_resolved("url", "https://example.com/", "example.com", [public]).is_ok());
    }

    #[test]
    fn every_range_parses() {
        assert_eq!(RANGES.len(), REFUSED_RANGES.len());
    }

    #[test]
    fn refused_and_public_addresses() {
        for ip in [
            "127.0.0.1",
            "10.0.0.1",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "198.18.0.1",
            "198.19.255.255",
            "224.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::127.0.0.1",
            "::ffff:127.0.0.1",
            "::ffff:8.8.8.8",
            "64:ff9b::a00:1",
            "2002:a00:1::",
            "2001::1",
            "fe80::1",
            "fd00::1",
            "fd00:ec2::254",
            "ff02::1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.216.34", "8.8.8.8", "198.20.0.1", "100.128.0.1", "2606:4700::1111", "2001:4860::8888"] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn spellings_of_loopback_are_refused_before_connecting() {
        for url in [
            "http://127.0.0.1/",
            "http://2130706433/",
            "http://0x7f000001/",
            "http://0177.0.0.1/",
            "http://127.1/",
            "http://127.0.0.1./",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "http://user:pw@127.0.0.1/",
            "http://localhost/",
            "http://LOCALHOST./",
            "http://api.localhost/",
        ] {
            assert!(refused_before_connect(url, false, false).is_some(), "{url}");
            assert!(refused_before_connect(url, true, false).is_none(), "{url}");
        }
        assert!(refused_before_connect("https://example.com/", false, true).is_none());
        assert!(refused_before_connect("http://example.com/", false, true).is_some());
    }
}
