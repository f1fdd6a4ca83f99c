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
    fn a_long_value_is_shown_cut_and_marked() {
        assert_eq!(shown("acme"), "acme");
        assert_eq!(shown(&"x".repeat(5000)), format!("{}...", "x".repeat(SHOWN_CHARS)));
        assert_eq!(shown(&"\u{e9}".repeat(SHOWN_CHARS)), "\u{e9}".repeat(SHOWN_CHARS));
    }
}
