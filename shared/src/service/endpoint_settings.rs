//! The settings an endpoint's create or PATCH body carries (url, event type filters, retry
//! policy, rate limit, ...) and their checks, each a 422 naming the field.

use crate::domain::endpoint_options;
use crate::domain::ids;
use crate::domain::model::Endpoint;
use crate::domain::payload_filter;
use crate::domain::retry_policy::RetryPolicy;
use crate::error::ServiceError;
use crate::sender::destination;
use serde_json::{Map, Value};
pub(crate) fn invalid(field: &str, message: impl std::fmt::Display) -> ServiceError {
    ServiceError::Validation(format!("{field}: {message}"))
}

/// Applies the settable fields of a create or PATCH body to `ep`: `url`, `event_types`,
/// `retry_policy`, `circuit_breaker_threshold`, `auto_resume`, `auto_resume_after_seconds`,
/// `rate_limit_per_second`, `rate_limit_adaptive`, `headers`, `secret_headers`, `auth` (see
/// [`crate::domain::endpoint_options`]), `filter` ([`crate::domain::payload_filter`]). `extra` lists other keys the caller handles; any other key is refused.
pub(crate) fn apply_settings(ep: &mut Endpoint, body: &Map<String, Value>, extra: &[&str]) -> Result<(), ServiceError> {
    for (key, value) in body {
        match key.as_str() {
            "url" => {
                let url = value.as_str().ok_or_else(|| invalid("url", "must be a string"))?;
                validate_url(url)?;
                ep.url = url.to_string();
            }
            "event_types" => {
                ep.event_types = match value {
                    Value::Null => None,
                    Value::Array(items) if items.len() > MAX_EVENT_TYPE_FILTERS => {
                        return Err(invalid(
                            "event_types",
                            format!("at most {MAX_EVENT_TYPE_FILTERS} entries (use a prefix such as \"order.*\")"),
                        ));
                    }
                    Value::Array(items) => {
                        let mut types = Vec::with_capacity(items.len());
                        for (i, t) in items.iter().enumerate() {
                            let name = t.as_str().filter(|n| valid_filter(n)).ok_or_else(|| {
                                invalid(&format!("event_types[{i}]"), "must be an event type or a prefix ending in .*")
                            })?;
                            types.push(name.to_string());
                        }
                        Some(types)
                    }
                    _ => return Err(invalid("event_types", "must be a list of event types, or null for all")),
                }
            }
            "retry_policy" => {
                ep.retry_policy =
                    RetryPolicy::from_request(Some(value)).map_err(|e| ServiceError::Validation(e.to_string()))?;
            }
            "circuit_breaker_threshold" => {
                ep.circuit_breaker_threshold = value
                    .as_u64()
                    .filter(|n| *n <= 100_000)
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| invalid(key, "must be a whole number from 0 (never) to 100000"))?;
            }
            "auto_resume" => ep.auto_resume = value.as_bool().ok_or_else(|| invalid(key, "must be true or false"))?,
            "auto_resume_after_seconds" => {
                ep.auto_resume_after_seconds = value
                    .as_u64()
                    .filter(|n| (1..=crate::domain::retry_policy::MAX_WAIT_SECONDS).contains(n))
                    .ok_or_else(|| invalid(key, "must be a whole number of seconds from 1 to 604800"))?;
            }
            "rate_limit_per_second" => {
                ep.rate_limit_per_second = match value {
                    Value::Null => None,
                    v => Some(
                        v.as_u64()
                            .filter(|n| (1..=crate::domain::rate::MAX_RATE_LIMIT).contains(n))
                            .and_then(|n| u32::try_from(n).ok())
                            .ok_or_else(|| {
                                invalid(key, "must be a whole number of requests per second from 1 to 10000, or null")
                            })?,
                    ),
                }
            }
            "rate_limit_adaptive" => {
                ep.rate_limit_adaptive = value.as_bool().ok_or_else(|| invalid(key, "must be true or false"))?
            }
            "headers" => ep.headers = endpoint_options::parse_headers(key, value).map_err(option_error)?,
            "secret_headers" => {
                ep.secret_headers = endpoint_options::parse_headers(key, value).map_err(option_error)?
            }
            "auth" => ep.auth = endpoint_options::parse_auth(value).map_err(option_error)?,
            "filter" => {
                ep.filter = match value {
                    Value::Null => None,
                    v => {
                        payload_filter::check(v).map_err(|e| ServiceError::Validation(e.to_string()))?;
                        Some(v.clone())
                    }
                }
            }
            other if extra.contains(&other) => {}
            other => return Err(invalid(other, "is not a field of an endpoint")),
        }
    }
    endpoint_options::check_header_sets(&ep.headers, &ep.secret_headers).map_err(option_error)?;
    // Checked when the request sets either: a PATCH of another field is not refused for them.
    match ["auth", "url"].into_iter().find(|f| body.contains_key(*f)) {
        Some(field) => endpoint_options::check_url_and_auth(field, &ep.url, ep.auth.as_ref()).map_err(option_error),
        None => Ok(()),
    }
}

fn option_error(e: endpoint_options::OptionError) -> ServiceError {
    ServiceError::Validation(e.to_string())
}

/// The URLs a create or PATCH must check for their destination: `url`, and an OAuth
/// `auth.token_url`, each with the field it came from.
pub(crate) fn destinations(ep: &Endpoint) -> Vec<(&'static str, &str)> {
    let mut out = vec![("url", ep.url.as_str())];
    if let Some(endpoint_options::ReceiverAuth::OAuth2ClientCredentials { token_url, .. }) = &ep.auth {
        out.push(("auth.token_url", token_url.as_str()));
    }
    out
}

/// An event-type filter: `*`, an event type (the id rule), or a prefix of one ending in `.*`.
pub(crate) fn valid_filter(name: &str) -> bool {
    name == "*" || ids::is_client_id(name.strip_suffix(".*").unwrap_or(name))
}

/// Most entries in an endpoint's `event_types` filter (each at most 256 bytes, the id rule):
/// with the URL bound, an endpoint item stays far below DynamoDB's 400 KB item limit, and
/// under 4 KB in the usual case (one read unit per attempt's endpoint read).
pub const MAX_EVENT_TYPE_FILTERS: usize = 100;

/// Longest endpoint URL, bytes (2,048: what browsers and most HTTP servers accept in a
/// request target, and far below DynamoDB's 400 KB item limit).
pub const MAX_URL_BYTES: usize = 2048;

pub(crate) fn validate_url(url: &str) -> Result<(), ServiceError> {
    if url.len() > MAX_URL_BYTES {
        return Err(invalid("url", format!("at most {MAX_URL_BYTES} bytes")));
    }
    let parsed = url::Url::parse(url).map_err(|e| invalid("url", destination::not_a_url(e)))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
        return Err(invalid("url", "must be an http or https URL with a host"));
    }
    if let Some(url::Host::Domain(name)) = parsed.host() {
        // DNS's length rules (RFC 1035 2.3.4): labels of 1 to 63 bytes, at most 253 bytes in
        // all (one trailing dot allowed). The URL parser takes `https://...` or `a..b` as a
        // host, which no attempt could ever reach.
        let bare = name.strip_suffix('.').unwrap_or(name);
        if bare.len() > 253 || bare.split('.').any(|label| label.is_empty() || label.len() > 63) {
            let shown: String = name.chars().take(80).collect();
            return Err(invalid(
                "url",
                format!(
                    "{shown:?} is not a host name (dot-separated labels of 1 to 63 characters, at most 253 in all)"
                ),
            ));
        }
    }
    Ok(())
}

/// Receiver credentials are for the receiver they were given for: a PATCH that points the
/// endpoint at another origin (scheme, host, port) must give each credential setting the
/// endpoint has (`auth`, `secret_headers`) again, or `null`, in the same request. Otherwise
/// whoever may change the URL could have them sent to an address of theirs.
///
/// [`crate::service::endpoints::update_endpoint`] runs it on the endpoint as each try of its
/// versioned write reads it, not only as first read.
pub(crate) fn refuse_credentials_moving(ep: &Endpoint, body: &Map<String, Value>) -> Result<(), ServiceError> {
    let Some(url) = body.get("url").and_then(Value::as_str) else { return Ok(()) };
    if origin_of(url) == origin_of(&ep.url) {
        return Ok(());
    }
    let held: Vec<&str> = [("auth", ep.auth.is_some()), ("secret_headers", !ep.secret_headers.is_empty())]
        .into_iter()
        .filter(|(field, has)| *has && !body.contains_key(*field))
        .map(|(field, _)| field)
        .collect();
    if held.is_empty() {
        return Ok(());
    }
    Err(invalid(
        "url",
        format!(
            "moves the endpoint to another host while it holds receiver credentials ({}): give them again, or null, in the same request",
            held.join(", ")
        ),
    ))
}

/// A URL's origin (scheme, host, port) as text; `None` when it does not parse.
pub(crate) fn origin_of(url: &str) -> Option<String> {
    url::Url::parse(url).map(|u| u.origin().ascii_serialization()).ok()
}

/// Whether a PATCH body gives receiver credentials (`auth` or `secret_headers` other than
/// `null`).
pub(crate) fn gives_credentials(body: &Map<String, Value>) -> bool {
    ["auth", "secret_headers"].iter().any(|f| body.get(*f).is_some_and(|v| !v.is_null()))
}
