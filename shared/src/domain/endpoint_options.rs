//! What an attempt carries besides the signed payload, as an endpoint sets it: custom
//! headers (`headers`, shown back; `secret_headers`, write-only) and the receiver's
//! authentication (`auth`: `bearer`, `basic`, or `oauth2_client_credentials`).
//!
//! Pure: the request fields' parsing and bounds, what answers show, and the header lines an
//! attempt adds. The OAuth token itself is fetched and cached by
//! [`crate::sender::oauth`]; the token URL's destination check is the endpoint URL's
//! ([`crate::sender::destination`]).
//!
//! Bounds (stated in docs/api.md): at most [`MAX_HEADERS`] custom headers (`headers` and
//! `secret_headers` together), names of at most [`MAX_HEADER_NAME_BYTES`] bytes, values of at
//! most [`MAX_HEADER_VALUE_BYTES`], [`MAX_HEADERS_BYTES`] in all. They keep an endpoint item,
//! which deliver reads before every attempt, within one 4 KB read unit in the usual case.

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Most custom headers on one endpoint, `headers` and `secret_headers` together: 20.
pub const MAX_HEADERS: usize = 20;
/// Longest custom header name, bytes: 100.
pub const MAX_HEADER_NAME_BYTES: usize = 100;
/// Longest custom header value, bytes: 1,000.
pub const MAX_HEADER_VALUE_BYTES: usize = 1000;
/// Most bytes of custom header names and values on one endpoint, together: 4,096.
pub const MAX_HEADERS_BYTES: usize = 4096;
/// Longest credential (token, user name, password, client id or secret, scope, audience),
/// bytes: 4,096 (a long JWT fits).
pub const MAX_CREDENTIAL_BYTES: usize = 4096;

/// Header names the service sets itself, refused as custom headers: the payload's framing
/// (`content-type`, `content-length`, `transfer-encoding`), the connection's (`host`,
/// `connection`, `keep-alive`, `te`, `trailer`, `upgrade`, `expect`, the `proxy-*` ones),
/// `user-agent`, and `authorization` (set it with `auth`). Every `webhook-*` name is refused
/// too (Standard Webhooks' headers: [`crate::domain::signing`]).
pub const RESERVED_HEADERS: [&str; 13] = [
    "authorization",
    "connection",
    "content-length",
    "content-type",
    "expect",
    "host",
    "keep-alive",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Whether `name` (any case) is one the service sets: [`RESERVED_HEADERS`], `user-agent`,
/// `proxy-*` or `webhook-*`.
pub fn is_reserved(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    RESERVED_HEADERS.contains(&lower.as_str())
        || lower == "user-agent"
        || lower.starts_with("proxy-")
        || lower.starts_with("webhook-")
}

/// How the receiver authenticates the sender, beyond the signature (`auth` on an endpoint).
/// Stored with its credentials; answers show [`ReceiverAuth::shown`] (no credential).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ReceiverAuth {
    /// `Authorization: Bearer {token}` on every attempt.
    Bearer {
        /// The token (write-only).
        token: String,
    },
    /// `Authorization: Basic base64({username}:{password})` on every attempt (RFC 7617).
    Basic {
        /// The user name (shown).
        username: String,
        /// The password (write-only).
        password: String,
    },
    /// OAuth 2.0 client credentials (RFC 6749 4.4): a token fetched from `token_url` with the
    /// client's id and secret (HTTP Basic, RFC 6749 2.3.1), sent as `Authorization: Bearer`.
    #[serde(rename = "oauth2_client_credentials")]
    OAuth2ClientCredentials {
        /// The authorization server's token endpoint (http or https; checked like the
        /// endpoint URL).
        token_url: String,
        /// The client id (shown).
        client_id: String,
        /// The client secret (write-only).
        client_secret: String,
        /// The `scope` parameter, when the server wants one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scope: Option<String>,
        /// The `audience` parameter (Auth0 and others), when the server wants one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        audience: Option<String>,
    },
}

impl ReceiverAuth {
    /// `bearer`, `basic` or `oauth2_client_credentials`: recorded on each attempt.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Bearer { .. } => "bearer",
            Self::Basic { .. } => "basic",
            Self::OAuth2ClientCredentials { .. } => "oauth2_client_credentials",
        }
    }

    /// What answers show: the type and what is not a credential (`username`; `token_url`,
    /// `client_id`, `scope`, `audience`).
    pub fn shown(&self) -> Value {
        let mut shown = Map::new();
        shown.insert("type".into(), Value::from(self.kind()));
        match self {
            Self::Bearer { .. } => {}
            Self::Basic { username, .. } => {
                shown.insert("username".into(), Value::from(username.as_str()));
            }
            Self::OAuth2ClientCredentials { token_url, client_id, scope, audience, .. } => {
                shown.insert("token_url".into(), Value::from(shown_url(token_url)));
                shown.insert("client_id".into(), Value::from(client_id.as_str()));
                if let Some(s) = scope {
                    shown.insert("scope".into(), Value::from(s.as_str()));
                }
                if let Some(a) = audience {
                    shown.insert("audience".into(), Value::from(a.as_str()));
                }
            }
        }
        Value::Object(shown)
    }

    /// The `Authorization` value for `bearer` and `basic`; `None` for OAuth (its token is
    /// fetched: [`crate::sender::oauth`]).
    pub fn static_authorization(&self) -> Option<String> {
        match self {
            Self::Bearer { token } => Some(format!("Bearer {token}")),
            Self::Basic { username, password } => Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"))
            )),
            Self::OAuth2ClientCredentials { .. } => None,
        }
    }
}

/// A token URL as answers show it: without its query string (a token can hide there).
fn shown_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            u.set_query(None);
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => String::new(),
    }
}

/// A request field that does not hold: the field's path and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct OptionError {
    /// The field, e.g. `headers.X-Team` or `auth.token`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

fn bad(field: impl Into<String>, message: impl Into<String>) -> OptionError {
    OptionError { field: field.into(), message: message.into() }
}

/// Parses `headers` or `secret_headers` (`field`): an object of header names to string
/// values, or null for none. Each name an HTTP token not [`is_reserved`], at most
/// [`MAX_HEADER_NAME_BYTES`]; each value visible ASCII, spaces and tabs, at most
/// [`MAX_HEADER_VALUE_BYTES`]. Names are kept as given; two names equal but for case are
/// refused.
///
/// # Errors
/// [`OptionError`] naming the header.
pub fn parse_headers(field: &str, value: &Value) -> Result<BTreeMap<String, String>, OptionError> {
    let object = match value {
        Value::Null => return Ok(BTreeMap::new()),
        Value::Object(o) => o,
        _ => return Err(bad(field, "must be an object of header names to string values, or null")),
    };
    let mut out = BTreeMap::new();
    let mut seen = std::collections::BTreeSet::new();
    for (name, v) in object {
        let at = format!("{field}.{name}");
        if name.is_empty()
            || name.len() > MAX_HEADER_NAME_BYTES
            || http::HeaderName::from_bytes(name.as_bytes()).is_err()
        {
            return Err(bad(
                at,
                format!(
                    "is not a header name (letters, digits and !#$%&'*+-.^_`|~, 1 to {MAX_HEADER_NAME_BYTES} bytes)"
                ),
            ));
        }
        if is_reserved(name) {
            return Err(bad(
                at,
                "is set by the service (webhook-*, content-type, content-length, host, user-agent, authorization (use auth), connection headers) and cannot be set here",
            ));
        }
        if !seen.insert(name.to_ascii_lowercase()) {
            return Err(bad(at, "is given twice (header names are case-insensitive)"));
        }
        let text = v.as_str().ok_or_else(|| bad(&at, "must be a string"))?;
        // Visible ASCII, spaces and tabs only: `http` takes bytes 0x80-0xFF too (obs-text),
        // which would go out as raw UTF-8 that receivers read as Latin-1 or refuse.
        let ascii = text.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b));
        if text.len() > MAX_HEADER_VALUE_BYTES || !ascii || http::HeaderValue::from_str(text).is_err() {
            return Err(bad(
                at,
                format!("must be visible ASCII, spaces and tabs, at most {MAX_HEADER_VALUE_BYTES} bytes"),
            ));
        }
        out.insert(name.clone(), text.to_string());
    }
    Ok(out)
}

/// Checks `headers` and `secret_headers` together: at most [`MAX_HEADERS`] and
/// [`MAX_HEADERS_BYTES`] in all, and no name in both (any case).
///
/// # Errors
/// [`OptionError`] naming the field.
pub fn check_header_sets(
    headers: &BTreeMap<String, String>,
    secret: &BTreeMap<String, String>,
) -> Result<(), OptionError> {
    if headers.len() + secret.len() > MAX_HEADERS {
        return Err(bad("headers", format!("at most {MAX_HEADERS} headers, with secret_headers")));
    }
    let bytes: usize = headers.iter().chain(secret).map(|(n, v)| n.len() + v.len()).sum();
    if bytes > MAX_HEADERS_BYTES {
        return Err(bad(
            "headers",
            format!("at most {MAX_HEADERS_BYTES} bytes of names and values, with secret_headers"),
        ));
    }
    let lower: std::collections::BTreeSet<String> = headers.keys().map(|n| n.to_ascii_lowercase()).collect();
    if let Some(both) = secret.keys().find(|n| lower.contains(&n.to_ascii_lowercase())) {
        return Err(bad(format!("secret_headers.{both}"), "is also in headers"));
    }
    Ok(())
}

/// Checks an endpoint's `url` and `auth` together: a URL carrying a user name or password
/// (`https://user:pass@host/...`, which the HTTP client sends as `Authorization: Basic`) and
/// an `auth` (which sets `Authorization` too) would send two `Authorization` headers, so the
/// pair is refused; `field` is the one the request set (`url` or `auth`), named in the error.
///
/// # Errors
/// [`OptionError`] naming `field`.
pub fn check_url_and_auth(field: &str, url: &str, auth: Option<&ReceiverAuth>) -> Result<(), OptionError> {
    let Some(auth) = auth else { return Ok(()) };
    let Ok(parsed) = url::Url::parse(url) else { return Ok(()) };
    if parsed.username().is_empty() && parsed.password().is_none() {
        return Ok(());
    }
    Err(bad(
        field,
        format!(
            "the url carries a user name or password (sent as Authorization: Basic) and auth ({}) sets \
             Authorization too, so every attempt would send two; keep one: take the credentials out of the url \
             (they can go in auth as {{\"type\": \"basic\", \"username\", \"password\"}}), or remove auth",
            auth.kind()
        ),
    ))
}

/// Parses `auth`: null for none, or an object with `type` and that type's fields. Token
/// URLs are checked as URLs here and for their destination by the caller.
///
/// # Errors
/// [`OptionError`] naming the field (`auth.type`, `auth.token`, ...).
pub fn parse_auth(value: &Value) -> Result<Option<ReceiverAuth>, OptionError> {
    let object = match value {
        Value::Null => return Ok(None),
        Value::Object(o) => o,
        _ => {
            return Err(bad(
                "auth",
                "must be an object with a type (bearer, basic, oauth2_client_credentials), or null",
            ));
        }
    };
    let text = |name: &str, required: bool| -> Result<Option<String>, OptionError> {
        let at = format!("auth.{name}");
        match object.get(name) {
            None | Some(Value::Null) if required => Err(bad(at, "is required")),
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() && required => Err(bad(at, "must not be empty")),
            Some(Value::String(s)) if s.len() > MAX_CREDENTIAL_BYTES => {
                Err(bad(at, format!("at most {MAX_CREDENTIAL_BYTES} bytes")))
            }
            Some(Value::String(s)) if s.chars().any(char::is_control) => {
                Err(bad(at, "must have no control characters"))
            }
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(bad(at, "must be a string")),
        }
    };
    let need = |name: &str| text(name, true).map(Option::unwrap_or_default);
    let allowed: &[&str] = match object.get("type").and_then(Value::as_str) {
        Some("bearer") => &["type", "token"],
        Some("basic") => &["type", "username", "password"],
        Some("oauth2_client_credentials") => &["type", "token_url", "client_id", "client_secret", "scope", "audience"],
        _ => return Err(bad("auth.type", "must be bearer, basic or oauth2_client_credentials")),
    };
    if let Some(other) = object.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(bad(format!("auth.{other}"), "is not a field of this auth type"));
    }
    let auth = match object.get("type").and_then(Value::as_str) {
        Some("bearer") => {
            let token = need("token")?;
            if http::HeaderValue::from_str(&format!("Bearer {token}")).is_err() {
                return Err(bad("auth.token", "must be visible ASCII (it is sent in a header)"));
            }
            ReceiverAuth::Bearer { token }
        }
        Some("basic") => {
            let username = need("username")?;
            if username.contains(':') {
                return Err(bad("auth.username", "must not contain ':' (RFC 7617)"));
            }
            ReceiverAuth::Basic { username, password: text("password", true)?.unwrap_or_default() }
        }
        _ => {
            let token_url = need("token_url")?;
            let parsed =
                url::Url::parse(&token_url).map_err(|_| bad("auth.token_url", "must be an http or https URL"))?;
            if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
                return Err(bad("auth.token_url", "must be an http or https URL with a host"));
            }
            if !parsed.username().is_empty() || parsed.password().is_some() {
                return Err(bad(
                    "auth.token_url",
                    "must not carry a user name or password: use client_id and client_secret",
                ));
            }
            ReceiverAuth::OAuth2ClientCredentials {
                token_url,
                client_id: need("client_id")?,
                client_secret: need("client_secret")?,
                scope: text("scope", false)?,
                audience: text("audience", false)?,
            }
        }
    };
    Ok(Some(auth))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn headers_refuse_reserved_and_malformed_names() {
        assert!(parse_headers("headers", &json!({"X-Team": "blue"})).is_ok());
        for name in [
            "webhook-id",
            "Webhook-Signature",
            "content-type",
            "Content-Length",
            "host",
            "Authorization",
            "user-agent",
            "proxy-x",
        ] {
            let e = parse_headers("headers", &json!({ name: "x" })).unwrap_err();
            assert_eq!(e.field, format!("headers.{name}"), "{name}");
        }
        assert!(parse_headers("headers", &json!({"bad name": "x"})).is_err());
        assert!(parse_headers("headers", &json!({"X-A": "line\nbreak"})).is_err());
        assert!(parse_headers("headers", &json!({"X-A": 1})).is_err());
        assert!(parse_headers("headers", &json!({"X-A": "a", "x-a": "b"})).is_err());
        assert!(parse_headers("headers", &json!(["X-A"])).is_err());
    }

    #[test]
    fn header_values_outside_visible_ascii_are_refused_by_name() {
        for field in ["headers", "secret_headers"] {
            for value in ["café", "naïve value", "\u{80}", "x\u{7f}"] {
                let e = parse_headers(field, &json!({"X-V": value})).unwrap_err();
                assert_eq!(e.field, format!("{field}.X-V"), "{value}");
                assert!(e.message.contains("visible ASCII"), "{e}");
            }
            assert!(parse_headers(field, &json!({"X-V": "plain ~ ascii\twith tab"})).is_ok());
        }
    }

    #[test]
    fn a_url_with_credentials_and_auth_is_refused() {
        let bearer = ReceiverAuth::Bearer { token: "t".into() };
        for url in ["https://user:pass@example.com/hook", "https://user@example.com/hook", "https://:pw@example.com/"] {
            let e = check_url_and_auth("auth", url, Some(&bearer)).unwrap_err();
            assert_eq!(e.field, "auth");
            assert!(e.message.contains("two") && !e.message.contains("pass@"), "{e}");
            assert!(check_url_and_auth("url", url, None).is_ok(), "the URL's credentials alone are fine");
        }
        assert!(check_url_and_auth("url", "https://example.com/hook", Some(&bearer)).is_ok());
    }

    #[test]
    fn header_sets_are_bounded_together() {
        let many: BTreeMap<String, String> = (0..MAX_HEADERS).map(|i| (format!("X-{i}"), "v".to_string())).collect();
        assert!(check_header_sets(&many, &BTreeMap::new()).is_ok());
        let one = BTreeMap::from([("X-Extra".to_string(), "v".to_string())]);
        assert!(check_header_sets(&many, &one).is_err());
        let same = BTreeMap::from([("x-0".to_string(), "v".to_string())]);
        let one_shown = BTreeMap::from([("X-0".to_string(), "v".to_string())]);
        assert_eq!(check_header_sets(&one_shown, &same).unwrap_err().field, "secret_headers.x-0");
        let big = BTreeMap::from([
            ("X-A".to_string(), "a".repeat(MAX_HEADER_VALUE_BYTES)),
            ("X-B".to_string(), "b".repeat(MAX_HEADER_VALUE_BYTES)),
            ("X-C".to_string(), "c".repeat(MAX_HEADER_VALUE_BYTES)),
            ("X-D".to_string(), "d".repeat(MAX_HEADER_VALUE_BYTES)),
            ("X-E".to_string(), "e".repeat(MAX_HEADER_VALUE_BYTES)),
        ]);
        assert!(check_header_sets(&big, &BTreeMap::new()).is_err());
    }

    #[test]
    fn auth_types_parse_and_show_no_credential() {
        let bearer = parse_auth(&json!({"type": "bearer", "token": "t0ken"})).unwrap().unwrap();
        assert_eq!(bearer.static_authorization().as_deref(), Some("Bearer t0ken"));
        assert!(!bearer.shown().to_string().contains("t0ken"));
        let basic = parse_auth(&json!({"type": "basic", "username": "u", "password": "pw"})).unwrap().unwrap();
        assert_eq!(basic.static_authorization().as_deref(), Some("Basic dTpwdw=="));
        assert_eq!(basic.shown(), json!({"type": "basic", "username": "u"}));
        let oauth =
            parse_auth(&json!({"type": "oauth2_client_credentials", "token_url": "https://auth.example.com/token",
            "client_id": "c", "client_secret": "s3cret", "scope": "hooks"}))
            .unwrap()
            .unwrap();
        assert_eq!(oauth.static_authorization(), None);
        assert!(!oauth.shown().to_string().contains("s3cret"));
        assert_eq!(parse_auth(&Value::Null).unwrap(), None);
    }

    #[test]
    fn auth_refuses_what_is_missing_or_unknown() {
        assert_eq!(parse_auth(&json!({"type": "digest"})).unwrap_err().field, "auth.type");
        assert_eq!(parse_auth(&json!({"type": "bearer"})).unwrap_err().field, "auth.token");
        assert_eq!(parse_auth(&json!({"type": "bearer", "token": "t", "x": 1})).unwrap_err().field, "auth.x");
        assert_eq!(
            parse_auth(&json!({"type": "basic", "username": "a:b", "password": "p"})).unwrap_err().field,
            "auth.username"
        );
        let no_url = json!({"type": "oauth2_client_credentials", "token_url": "ftp://x", "client_id": "c", "client_secret": "s"});
        assert_eq!(parse_auth(&no_url).unwrap_err().field, "auth.token_url");
        let e = parse_auth(&json!({"type": "bearer", "token": "secret-value\n"})).unwrap_err();
        assert!(!e.to_string().contains("secret-value"), "{e}");
    }
}
