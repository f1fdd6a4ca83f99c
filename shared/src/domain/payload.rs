//! An event's payload as ingest reads it: parsed once, by serde_json, with a stated depth
//! limit ([`MAX_PAYLOAD_DEPTH`]) checked as it is read, so every later use (the catalog's
//! schema check, every endpoint's payload filter) works on the same [`Value`] and none of
//! them can fail on a payload ingest accepted.
//!
//! Why a limit of our own: serde_json refuses a document nested deeper than 128 levels
//! ("recursion limit exceeded"), but a payload taken as raw JSON text (`POST /v1/events`
//! reads it as a `RawValue`, which skips over values without that limit) could be deeper;
//! parsed later, such a payload failed every filter's parse (taken as `null`) and every
//! schema check. Ingest now refuses it at the door (422 `payload_too_deep`), with room to
//! spare under 128 for the envelopes that carry a payload (an EventBridge event's `detail`
//! is one level down in the event the Lambda runtime parses with serde_json's limit).

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

/// Most levels of nested objects and arrays in a payload: 64. A scalar payload is 0 levels,
/// `{"a": 1}` is 1, `{"a": [1]}` is 2. Half serde_json's own recursion limit (128), so a
/// payload at the limit still parses inside any envelope that carries it (an EventBridge
/// event, a queue message), and far beyond what real event payloads nest (a few levels).
pub const MAX_PAYLOAD_DEPTH: usize = 64;

/// Why a payload cannot be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// It nests deeper than [`MAX_PAYLOAD_DEPTH`].
    #[error(
        "payload: nests deeper than {MAX_PAYLOAD_DEPTH} levels of objects and arrays (the limit; \
         at byte {at}); nothing was stored"
    )]
    TooDeep {
        /// Where the parse stopped: the byte offset (from 0) of the payload's text, roughly
        /// where the level past the limit opens.
        at: usize,
    },
    /// serde_json cannot read it as a JSON value: not JSON, or a number out of the range of
    /// an `f64` (such as `1e400`).
    #[error("payload: not a JSON value ingest can read: {0}; nothing was stored")]
    Unreadable(String),
}

/// The marker of the depth error inside serde_json's error (its message is ours).
const TOO_DEEP: &str = "payload nests too deep";

/// Parses a payload's JSON text, refusing one nested deeper than [`MAX_PAYLOAD_DEPTH`]. The
/// depth is counted as the text is read (no second pass), so a deep payload is refused at the
/// level past the limit, before serde_json's own limit is reached.
///
/// # Errors
/// [`PayloadError::TooDeep`]; [`PayloadError::Unreadable`] with serde_json's message.
pub fn parse(text: &str) -> Result<Value, PayloadError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Limited { remaining: MAX_PAYLOAD_DEPTH }.deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    value.map_err(|e| {
        if e.to_string().starts_with(TOO_DEEP) {
            // serde_json's column counts from 1 on the line; a payload's text is one line
            // when it came compact, and the offset is only a hint otherwise.
            PayloadError::TooDeep { at: e.column().saturating_sub(1) }
        } else {
            PayloadError::Unreadable(e.to_string())
        }
    })
}

/// How deep `value` nests (as [`MAX_PAYLOAD_DEPTH`] counts).
pub fn depth(value: &Value) -> usize {
    match value {
        Value::Object(o) => 1 + o.values().map(depth).max().unwrap_or(0),
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Reads one value that may open at most `remaining` more levels of objects and arrays
/// (itself included).
#[derive(Clone, Copy)]
struct Limited {
    remaining: usize,
}

impl Limited {
    /// The seed of a value inside this one, which is an object or array: an error when this
    /// one is already a level past the limit.
    fn inner<E: serde::de::Error>(&self) -> Result<Limited, E> {
        match self.remaining.checked_sub(1) {
            Some(remaining) => Ok(Limited { remaining }),
            None => Err(E::custom(TOO_DEEP)),
        }
    }
}

impl<'de> DeserializeSeed<'de> for Limited {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Limited {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v).map(Value::Number).ok_or_else(|| E::custom("a number that is not finite"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let inner = self.inner()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(inner)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let inner = self.inner()?;
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(inner)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> String {
        format!("{}1{}", "{\"a\":".repeat(levels), "}".repeat(levels))
    }

    #[test]
    fn a_payload_at_the_limit_parses_and_one_past_it_is_too_deep() {
        let at = parse(&nested(MAX_PAYLOAD_DEPTH)).unwrap();
        assert_eq!(depth(&at), MAX_PAYLOAD_DEPTH);
        assert!(matches!(parse(&nested(MAX_PAYLOAD_DEPTH + 1)), Err(PayloadError::TooDeep { .. })));
        let arrays = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert_eq!(depth(&parse(&arrays(MAX_PAYLOAD_DEPTH)).unwrap()), MAX_PAYLOAD_DEPTH);
        assert!(matches!(parse(&arrays(MAX_PAYLOAD_DEPTH + 1)), Err(PayloadError::TooDeep { .. })), "an empty one too");
        // Deeper than serde_json's own limit: still our error, not "recursion limit exceeded".
        let e = parse(&nested(200)).unwrap_err();
        assert!(e.to_string().contains("nests deeper than 64 levels"), "{e}");
    }

    #[test]
    fn parse_is_serde_jsons_value_within_the_limit() {
        let text = r#"{"a":[1,-2,3.5,18446744073709551615,"x",true,null,{}],"b":{"c":[]}}"#;
        assert_eq!(parse(text).unwrap(), serde_json::from_str::<Value>(text).unwrap());
        assert_eq!(parse("7").unwrap(), json!(7));
        assert!(matches!(parse("1e400"), Err(PayloadError::Unreadable(_))));
        assert!(matches!(parse("{} x"), Err(PayloadError::Unreadable(_))));
    }
}
