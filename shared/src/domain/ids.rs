//! The one rule for every id and name a client chooses, shared by every route and checked
//! before any AWS call.
//!
//! An event `id` becomes the `webhook-id` header of every attempt and is signed with it, and
//! Standard Webhooks receivers read headers as bytes in some stacks and as Latin-1 in others;
//! a tenant, an event type and an `Idempotency-Key` become parts of DynamoDB keys. So every
//! one of them (`id`, `tenant_id`, `event_type`, `Idempotency-Key`) is 1 to
//! [`MAX_ID_BYTES`] characters from [`ID_ALPHABET`]: ASCII letters and digits and
//! `- _ . : ~ @ + = /`. No spaces, no control characters (no CR or LF), nothing outside ASCII,
//! so the value is the same bytes in every header reader and in every key.
//!
//! Ids are newtypes ([`TenantId`], [`EndpointId`], [`EventId`], [`DeliveryId`], [`JobId`]),
//! parsed once where they come in: the HTTP handlers (`parse` for a body or query field and
//! for a `{tenant_id}` path, 422 naming it; `lookup` for the id of a thing looked up by path,
//! 404), ingest's `check` of an event, a queue message's decode, an item read back from the
//! table; and made by construction where this service mints them (`ep_`, `evt_`, `dlv_`,
//! `job_`). Services and the store take them typed, so none of them checks an id again (a
//! job's `endpoint_id`, empty for a tenant's purge, is the one id kept as text:
//! `Job::endpoint` parses it).

use crate::error::ServiceError;

/// Longest client-chosen id or name, in bytes (= characters: the alphabet is ASCII).
pub const MAX_ID_BYTES: usize = 256;

/// The allowed characters, as the API documents them.
pub const ID_ALPHABET: &str = "A-Z a-z 0-9 - _ . : ~ @ + = /";

/// The JSON Schema / regex form of the rule (openapi.yaml states the same pattern).
pub const ID_PATTERN: &str = "^[A-Za-z0-9._:~@+=/-]{1,256}$";

fn allowed(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"-_.:~@+=/".contains(&c)
}

/// Whether `value` is a valid client-chosen id or name (see the module docs).
pub fn is_client_id(value: &str) -> bool {
    (1..=MAX_ID_BYTES).contains(&value.len()) && value.bytes().all(allowed)
}

/// Checks a client-chosen id or name.
///
/// # Errors
/// [`ServiceError::Validation`] naming `field`: empty, longer than [`MAX_ID_BYTES`], or a
/// character outside [`ID_ALPHABET`] (the message gives the first one's position).
pub fn client_id(field: &str, value: &str) -> Result<(), ServiceError> {
    if value.is_empty() {
        return Err(ServiceError::Validation(format!("{field}: is required (1 to {MAX_ID_BYTES} characters)")));
    }
    if value.len() > MAX_ID_BYTES {
        return Err(ServiceError::Validation(format!(
            "{field}: {} bytes is over the limit of {MAX_ID_BYTES}",
            value.len()
        )));
    }
    if let Some(i) = value.bytes().position(|c| !allowed(c)) {
        return Err(ServiceError::Validation(format!(
            "{field}: character {} is not allowed; ids and names use only {ID_ALPHABET}",
            i + 1
        )));
    }
    Ok(())
}

/// Longest part of a client's value an error message repeats, in characters.
pub const SHOWN_CHARS: usize = 64;

/// `value` as an error message repeats it: its first [`SHOWN_CHARS`] characters, with `...`
/// when it was longer (a 5,000-character parameter is not echoed back whole).
pub fn shown(value: &str) -> String {
    let mut out: String = value.chars().take(SHOWN_CHARS).collect();
    if out.len() < value.len() {
        out.push_str("...");
    }
    out
}

/// Checks an id taken from the URL path of a lookup (`ep_...`, `dlv_...`, `job_...`, an event
/// id): one that could never have been stored is simply not found, without an AWS call.
///
/// # Errors
/// [`ServiceError::NotFound`] naming `kind` and the id.
pub fn lookup_id(kind: &str, id: &str) -> Result<(), ServiceError> {
    if is_client_id(id) { Ok(()) } else { Err(ServiceError::NotFound(format!("{kind} {}: no such {kind}", shown(id)))) }
}

/// Which of `shards` an id falls into: the first four bytes of SHA-256(id), big-endian,
/// modulo `shards` (0 when `shards` is 0 or 1). Stable across processes and releases: the due
/// index, the `by_endpoint` partitions and the rate counters are keyed by it.
pub fn shard_of(id: &str, shards: u32) -> u32 {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(id.as_bytes());
    u32::from_be_bytes([d[0], d[1], d[2], d[3]]) % shards.max(1)
}

/// Defines an id newtype: a `String` that passed [`client_id`]'s rule once, where it came
/// in (a request, a key read back, an id we made), so no later function checks it again.
///
/// Each type derefs to `str` (pass `&id` where a `&str` is taken), compares with `str` and
/// `String` both ways, displays as itself (`Debug` shows the type: `EndpointId("ep_1")`), and
/// is a plain JSON string in answers and items (serialized as its text; deserialized through
/// `TryFrom<String>`, so an item or message read back is parsed too).
macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Deserialize)]
        #[serde(try_from = "String")]
        pub struct $name(String);

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl $name {
            /// What this id names, as errors say it (`"endpoint"`, `"delivery"`, ...).
            pub const KIND: &'static str = $kind;

            /// Parses a value a client sent in `field` (a body or query field).
            ///
            /// # Errors
            /// [`ServiceError::Validation`] naming `field`, as [`client_id`].
            pub fn parse(field: &str, value: impl Into<String>) -> Result<Self, ServiceError> {
                let value = value.into();
                client_id(field, &value)?;
                Ok(Self(value))
            }

            /// Parses an id taken from a URL path to look something up: one that could never
            /// have been stored is simply not found, without an AWS call.
            ///
            /// # Errors
            /// [`ServiceError::NotFound`] naming [`Self::KIND`] and the id, as [`lookup_id`].
            pub fn lookup(value: &str) -> Result<Self, ServiceError> {
                lookup_id(Self::KIND, value)?;
                Ok(Self(value.to_string()))
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The id's text, owned.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = ServiceError;
            /// As [`Self::parse`] of a field named after [`Self::KIND`].
            fn from_str(value: &str) -> Result<Self, ServiceError> {
                Self::parse(concat!($kind, " id"), value)
            }
        }

        impl TryFrom<String> for $name {
            type Error = String;
            fn try_from(value: String) -> Result<Self, String> {
                client_id(concat!($kind, " id"), &value).map(|()| Self(value)).map_err(|e| e.to_string())
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl From<&$name> for String {
            fn from(id: &$name) -> String {
                id.0.clone()
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }
    };
}

id_type!(
    /// A tenant's id, chosen by the client (`acme`): the owner of endpoints and events.
    TenantId,
    "tenant"
);
id_type!(
    /// An endpoint's id: `ep_` + ULID, made at its creation.
    EndpointId,
    "endpoint"
);
id_type!(
    /// An event's id: the client's, or `evt_` + ULID; sent as `webhook-id`.
    EventId,
    "event"
);
id_type!(
    /// A delivery's id: `dlv_` + a digest of (event id, endpoint id), [`crate::domain::model::delivery_id`].
    DeliveryId,
    "delivery"
);
id_type!(
    /// A job's id: `job_` + ULID.
    JobId,
    "job"
);

/// `made(..)` for the ids this service mints (every kind but the tenant's, which the client
/// chooses).
macro_rules! minted {
    ($($name:ident),*) => {$(
        impl $name {
            /// An id this service made (a prefix and a ULID or digest), which meets the rule
            /// by construction.
            pub(crate) fn made(value: String) -> Self {
                debug_assert!(is_client_id(&value), "{value}");
                Self(value)
            }
        }
    )*};
}
minted!(EndpointId, EventId, DeliveryId, JobId);

/// An id for a test, from a literal known to meet the rule (`id::<EndpointId>("ep_1")`, or
/// typed by where it goes): panics on one that does not, which is the test's mistake.
#[cfg(test)]
pub(crate) fn id<T: std::str::FromStr<Err = ServiceError>>(value: &str) -> T {
    value.parse().unwrap_or_else(|e| panic!("test id {value:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_unsafe_or_oversized_values_are_refused_naming_the_field() {
        for bad in ["evt-1\r\nx-extra: 1", "a b", "", "caf\u{e9}", "tab\there", "nul\0"] {
            let e = client_id("id", bad).unwrap_err();
            assert_eq!(e.code(), "validation_error");
            assert!(e.to_string().starts_with("id: "), "{e}");
        }
        assert!(client_id("tenant_id", &"a".repeat(MAX_ID_BYTES + 1)).is_err());
        for good in ["evt_01HX", "order-7", "order.paid", "acme", "550e8400-e29b-41d4-a716-446655440000", "a+b/c="] {
            assert!(client_id("id", good).is_ok(), "{good}");
            assert!(http::HeaderValue::from_str(good).is_ok());
        }
        assert!(client_id("id", &"a".repeat(MAX_ID_BYTES)).is_ok());
    }

    #[test]
    fn an_id_is_parsed_once_where_it_comes_in_and_reads_back_as_the_same_text() {
        // A field: 422 naming it; a path: 404 naming the kind; both by the one id rule.
        let e = EndpointId::parse("endpoint_id", "ep 1").unwrap_err();
        assert_eq!((e.code(), e.to_string().starts_with("endpoint_id: ")), ("validation_error", true), "{e}");
        let e = DeliveryId::lookup("dlv\r\n1").unwrap_err();
        assert_eq!(e.code(), "not_found", "{e}");
        assert!(e.to_string().starts_with("delivery "), "{e}");
        // JSON and items: the same string as before; text that breaks the rule does not decode.
        let read: DeliveryId = serde_json::from_str("\"dlv_1\"").unwrap();
        assert_eq!((read.as_str(), serde_json::to_string(&read).unwrap().as_str()), ("dlv_1", "\"dlv_1\""));
        assert!(serde_json::from_str::<TenantId>("\"a b\"").is_err());
        assert!(serde_json::from_str::<JobId>(&format!("\"{}\"", "j".repeat(MAX_ID_BYTES + 1))).is_err());
        // Looked up by its text in a map keyed by ids, compared with text either way.
        let map: std::collections::BTreeMap<EndpointId, u8> = [(id::<EndpointId>("ep_1"), 1)].into();
        assert_eq!(map.get("ep_1"), Some(&1));
        assert!(id::<EventId>("evt_1") == "evt_1" && "evt_1" == id::<EventId>("evt_1"));
    }

    #[test]
    fn a_long_value_is_shown_cut_and_marked() {
        assert_eq!(shown("acme"), "acme");
        assert_eq!(shown(&"x".repeat(5000)), format!("{}...", "x".repeat(SHOWN_CHARS)));
        assert_eq!(shown(&"\u{e9}".repeat(SHOWN_CHARS)), "\u{e9}".repeat(SHOWN_CHARS));
    }
}
