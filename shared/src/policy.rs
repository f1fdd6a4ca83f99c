//! Retry policies: which answers are retried, and how long to wait before the next attempt.
//!
//! The `standard` preset is the payment provider's published schedule
//! (`../shared/seeds/payment-provider-webhook-retries.txt`): 8 attempts, waits of 30 s, 2 min,
//! 10 min, 1 h, 3 h, 8 h and 24 h, each with +-20% jitter; a timeout, a connection error,
//! a 5xx and every 4xx except 410 are retried; `Retry-After` on 429 and 503 makes the wait the
//! longer of the header and the schedule. A custom policy gives its own waits (seconds),
//! attempt count and jitter, which is also how tests and demos compress time.

use crate::clock::Random;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Longest single wait a policy may ask for: 7 days, in seconds.
pub const MAX_WAIT_SECONDS: u64 = 7 * 24 * 3600;
/// Most attempts a policy may make in one cycle (bounds the attempt history per item).
pub const MAX_ATTEMPTS: u32 = 50;
/// Cap on a `Retry-After` header: 24 hours, in seconds.
pub const MAX_RETRY_AFTER_SECONDS: u64 = 24 * 3600;

/// The `standard` waits, in seconds, from the payment provider's docs.
pub const STANDARD_SCHEDULE_SECONDS: [u64; 7] = [30, 120, 600, 3600, 3 * 3600, 8 * 3600, 24 * 3600];

/// A resolved retry policy, as stored on an endpoint and shown by the API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// `standard` or `custom`.
    pub preset: String,
    /// Waits after the 1st, 2nd, ... failure, in seconds; the last one repeats.
    pub schedule_seconds: Vec<u64>,
    /// Attempts in one cycle, the first included.
    pub max_attempts: u32,
    /// Each wait is multiplied by a uniform draw from `[1 - jitter, 1 + jitter]`.
    pub jitter: f64,
    /// Which failures are retried: `timeout`, `connection`, `3xx`, `4xx`, `5xx`, `429`, or an
    /// explicit status code as a string (`"409"`). Anything else is final.
    pub retry_on: Vec<String>,
    /// Whether `Retry-After` on 429 and 503 can lengthen the wait.
    pub honor_retry_after: bool,
}

/// What one attempt came back with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The receiver answered with this HTTP status.
    Status(u16),
    /// No complete answer within the request timeout.
    Timeout,
    /// The connection could not be made or broke (refused, reset, DNS, TLS).
    Connection,
    /// The destination is not allowed (a private address); never retried.
    Refused,
}

/// What a policy makes of an [`Outcome`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// 2xx: delivered.
    Success,
    /// A failure the policy retries, if attempts are left.
    Retry,
    /// A failure that ends the delivery now.
    Final,
    /// 410 Gone under `standard`: the receiver asks to be disabled (final for the delivery).
    Disable,
}

/// A retry policy in a request that cannot be accepted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct PolicyError {
    /// The offending field, e.g. `retry_policy.jitter`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

fn err(field: &str, message: impl Into<String>) -> PolicyError {
    PolicyError {
        field: format!("retry_policy.{field}"),
        message: message.into(),
    }
}

const CLASSES: [&str; 6] = ["timeout", "connection", "3xx", "4xx", "5xx", "429"];

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::standard()
    }
}

impl RetryPolicy {
    /// The payment provider's schedule (see the module docs).
    pub fn standard() -> Self {
        Self {
            preset: "standard".into(),
            schedule_seconds: STANDARD_SCHEDULE_SECONDS.to_vec(),
            max_attempts: 8,
            jitter: 0.2,
            retry_on: ["timeout", "connection", "3xx", "4xx", "5xx"]
                .map(String::from)
                .to_vec(),
            honor_retry_after: true,
        }
    }

    /// Reads a policy from a request body's `retry_policy` value.
    ///
    /// `{"preset": "standard"}` (or no value) is the standard preset. Anything with
    /// `schedule_seconds` is custom: `max_attempts` defaults to one more than the schedule's
    /// length, `jitter` to 0, `retry_on` to every failure class, `honor_retry_after` to true.
    ///
    /// # Errors
    /// [`PolicyError`] naming the field: an unknown preset, an empty schedule, a wait of 0 or
    /// over 7 days, `max_attempts` outside 1..=50, `jitter` outside 0..=0.5, an unknown class.
    pub fn from_request(value: Option<&Value>) -> Result<Self, PolicyError> {
        let Some(value) = value.filter(|v| !v.is_null()) else {
            return Ok(Self::standard());
        };
        let obj = value.as_object().ok_or_else(|| PolicyError {
            field: "retry_policy".into(),
            message: "must be an object".into(),
        })?;
        let preset = match obj.get("preset") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.as_str()),
            Some(_) => return Err(err("preset", "must be a string")),
        };
        match (preset, obj.contains_key("schedule_seconds")) {
            (Some("standard"), false) | (None, false) => {
                if obj.keys().any(|k| k != "preset") {
                    return Err(err("schedule_seconds", "is required for a custom policy"));
                }
                Ok(Self::standard())
            }
            (None | Some("custom"), true) => Self::custom(obj),
            (Some("custom"), false) => {
                Err(err("schedule_seconds", "is required for a custom policy"))
            }
            (Some(other), _) => Err(err(
                "preset",
                format!("unknown preset {other:?}; use standard or custom"),
            )),
        }
    }

    fn custom(obj: &serde_json::Map<String, Value>) -> Result<Self, PolicyError> {
        let schedule = obj
            .get("schedule_seconds")
            .and_then(Value::as_array)
            .ok_or_else(|| err("schedule_seconds", "must be a list of seconds"))?;
        if schedule.is_empty() {
            return Err(err("schedule_seconds", "must not be empty"));
        }
        let mut waits = Vec::with_capacity(schedule.len());
        for (i, w) in schedule.iter().enumerate() {
            match w.as_u64() {
                Some(s) if (1..=MAX_WAIT_SECONDS).contains(&s) => waits.push(s),
                _ => {
                    return Err(err(
                        &format!("schedule_seconds[{i}]"),
                        format!("must be a whole number of seconds from 1 to {MAX_WAIT_SECONDS}"),
                    ));
                }
            }
        }
        let max_attempts = match obj.get("max_attempts") {
            None | Some(Value::Null) => u32::try_from(waits.len() + 1)
                .unwrap_or(MAX_ATTEMPTS)
                .min(MAX_ATTEMPTS),
            Some(v) => match v.as_u64() {
                Some(n) if (1..=u64::from(MAX_ATTEMPTS)).contains(&n) => n as u32,
                _ => {
                    return Err(err(
                        "max_attempts",
                        format!("must be a whole number from 1 to {MAX_ATTEMPTS}"),
                    ));
                }
            },
        };
        let jitter = match obj.get("jitter") {
            None | Some(Value::Null) => 0.0,
            Some(v) => match v.as_f64() {
                Some(j) if (0.0..=0.5).contains(&j) => j,
                _ => return Err(err("jitter", "must be a number from 0 to 0.5")),
            },
        };
        let retry_on = match obj.get("retry_on") {
            None | Some(Value::Null) => CLASSES.map(String::from).to_vec(),
            Some(Value::Array(items)) => {
                let mut out = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    let class = match item {
                        Value::String(s) if CLASSES.contains(&s.as_str()) => s.clone(),
                        Value::String(s) if is_status_code(s) => s.clone(),
                        Value::Number(n)
                            if n.as_u64().is_some_and(|c| (100..=599).contains(&c)) =>
                        {
                            n.to_string()
                        }
                        _ => {
                            return Err(err(
                                &format!("retry_on[{i}]"),
                                "must be one of timeout, connection, 3xx, 4xx, 5xx, 429 or a status code",
                            ));
                        }
                    };
                    out.push(class);
                }
                out
            }
            Some(_) => return Err(err("retry_on", "must be a list")),
        };
        let honor_retry_after = match obj.get("honor_retry_after") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(err("honor_retry_after", "must be true or false")),
        };
        Ok(Self {
            preset: "custom".into(),
            schedule_seconds: waits,
            max_attempts,
            jitter,
            retry_on,
            honor_retry_after,
        })
    }

    /// What this policy makes of an attempt's outcome.
    pub fn classify(&self, outcome: Outcome) -> Verdict {
        let has = |c: &str| self.retry_on.iter().any(|x| x == c);
        match outcome {
            Outcome::Status(code) if (200..300).contains(&code) => Verdict::Success,
            Outcome::Status(410) if self.preset == "standard" => Verdict::Disable,
            Outcome::Status(code) => {
                let class = match code {
                    300..=399 => "3xx",
                    400..=499 => "4xx",
                    500..=599 => "5xx",
                    _ => "",
                };
                let retried = has(&code.to_string()) || has(class) || (code == 429 && has("429"));
                if retried {
                    Verdict::Retry
                } else {
                    Verdict::Final
                }
            }
            Outcome::Timeout if has("timeout") => Verdict::Retry,
            Outcome::Connection if has("connection") => Verdict::Retry,
            Outcome::Timeout | Outcome::Connection | Outcome::Refused => Verdict::Final,
        }
    }

    /// The wait before the next attempt, in seconds, after `failures` failed attempts in this
    /// cycle (1 after the first), or `None` when the attempts are used up.
    ///
    /// The scheduled wait is jittered; a `retry_after_seconds` (already parsed from the
    /// header, honoured only on 429 and 503) lengthens it to
    /// `max(header, jittered wait)`, capped at 24 h.
    pub fn next_wait(
        &self,
        failures: u32,
        outcome: Outcome,
        retry_after_seconds: Option<u64>,
        rng: &Random,
    ) -> Option<u64> {
        if failures >= self.max_attempts || failures == 0 {
            return None;
        }
        let index = usize::try_from(failures - 1)
            .unwrap_or(usize::MAX)
            .min(self.schedule_seconds.len().saturating_sub(1));
        let base = *self.schedule_seconds.get(index)? as f64;
        let jittered = (base * (1.0 + self.jitter * rng.symmetric_unit()))
            .round()
            .max(1.0) as u64;
        let honoured = self.honor_retry_after && matches!(outcome, Outcome::Status(429 | 503));
        match retry_after_seconds {
            Some(ra) if honoured => Some(jittered.max(ra.min(MAX_RETRY_AFTER_SECONDS))),
            _ => Some(jittered),
        }
    }
}

fn is_status_code(s: &str) -> bool {
    s.len() == 3 && s.parse::<u16>().is_ok_and(|c| (100..=599).contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn standard_classifies_like_the_payment_provider() {
        let p = RetryPolicy::standard();
        assert_eq!(p.classify(Outcome::Status(200)), Verdict::Success);
        assert_eq!(p.classify(Outcome::Status(204)), Verdict::Success);
        assert_eq!(p.classify(Outcome::Status(301)), Verdict::Retry);
        assert_eq!(p.classify(Outcome::Status(400)), Verdict::Retry);
        assert_eq!(p.classify(Outcome::Status(404)), Verdict::Retry);
        assert_eq!(p.classify(Outcome::Status(410)), Verdict::Disable);
        assert_eq!(p.classify(Outcome::Status(429)), Verdict::Retry);
        assert_eq!(p.classify(Outcome::Status(503)), Verdict::Retry);
        assert_eq!(p.classify(Outcome::Timeout), Verdict::Retry);
        assert_eq!(p.classify(Outcome::Connection), Verdict::Retry);
        assert_eq!(p.classify(Outcome::Refused), Verdict::Final);
    }

    #[test]
    fn standard_makes_eight_attempts_within_the_jitter_windows() {
        let p = RetryPolicy::standard();
        let rng = Random::seeded(7);
        for _ in 0..2000 {
            for (i, base) in STANDARD_SCHEDULE_SECONDS.iter().enumerate() {
                let w = p
                    .next_wait(i as u32 + 1, Outcome::Status(500), None, &rng)
                    .unwrap();
                let (lo, hi) = (
                    (*base as f64 * 0.8).floor() as u64,
                    (*base as f64 * 1.2).ceil() as u64,
                );
                assert!((lo..=hi).contains(&w), "wait {w} for base {base}");
            }
            assert_eq!(p.next_wait(8, Outcome::Status(500), None, &rng), None);
        }
    }

    #[test]
    fn retry_after_lengthens_only_on_429_and_503_and_is_capped() {
        let p = RetryPolicy::from_request(Some(&json!({"schedule_seconds": [10]}))).unwrap();
        let rng = Random::seeded(1);
        assert_eq!(
            p.next_wait(1, Outcome::Status(429), Some(60), &rng),
            Some(60)
        );
        assert_eq!(
            p.next_wait(1, Outcome::Status(503), Some(5), &rng),
            Some(10)
        );
        assert_eq!(
            p.next_wait(1, Outcome::Status(500), Some(60), &rng),
            Some(10)
        );
        assert_eq!(
            p.next_wait(1, Outcome::Status(429), Some(10_000_000), &rng),
            Some(MAX_RETRY_AFTER_SECONDS)
        );
    }

    #[test]
    fn custom_policy_defaults_and_last_wait_repeats() {
        let p = RetryPolicy::from_request(Some(
            &json!({"schedule_seconds": [1, 2, 4], "max_attempts": 6}),
        ))
        .unwrap();
        let rng = Random::seeded(1);
        let waits: Vec<_> = (1..=6)
            .map(|f| p.next_wait(f, Outcome::Timeout, None, &rng))
            .collect();
        assert_eq!(
            waits,
            vec![Some(1), Some(2), Some(4), Some(4), Some(4), None]
        );
        let d = RetryPolicy::from_request(Some(&json!({"schedule_seconds": [1, 2]}))).unwrap();
        assert_eq!(d.max_attempts, 3);
        assert_eq!(d.classify(Outcome::Status(410)), Verdict::Retry);
    }

    #[test]
    fn invalid_policies_name_the_field() {
        let cases = [
            (
                json!({"schedule_seconds": []}),
                "retry_policy.schedule_seconds",
            ),
            (
                json!({"schedule_seconds": [0]}),
                "retry_policy.schedule_seconds[0]",
            ),
            (
                json!({"schedule_seconds": [1, -5]}),
                "retry_policy.schedule_seconds[1]",
            ),
            (
                json!({"schedule_seconds": [700000]}),
                "retry_policy.schedule_seconds[0]",
            ),
            (
                json!({"schedule_seconds": [1], "jitter": 0.9}),
                "retry_policy.jitter",
            ),
            (
                json!({"schedule_seconds": [1], "max_attempts": 0}),
                "retry_policy.max_attempts",
            ),
            (
                json!({"schedule_seconds": [1], "retry_on": ["sometimes"]}),
                "retry_policy.retry_on[0]",
            ),
            (json!({"preset": "yolo"}), "retry_policy.preset"),
            (json!("standard"), "retry_policy"),
        ];
        for (input, field) in cases {
            let e = RetryPolicy::from_request(Some(&input)).unwrap_err();
            assert_eq!(e.field, field, "{input}");
        }
    }
}
