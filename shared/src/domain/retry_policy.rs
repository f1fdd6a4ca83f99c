//! Retry policies: which answers are retried, and how long to wait before the next attempt.
//!
//! Presets reproduce the three reference behaviours in `../shared/seeds/` and Svix's docs:
//!
//! | preset | waits after each failure | attempts | retried on | notes |
//! |---|---|---|---|---|
//! | `standard` (default; payment provider's docs) | 30 s, 2 min, 10 min, 1 h, 3 h, 8 h, 24 h | 8 | timeout, connection, 3xx, 4xx, 5xx; not 410 | jitter +-20%; `Retry-After` on 429/503 = max(header, wait); 410 disables the endpoint |
//! | `svix` (Svix's docs) | 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h | 8 | any non-2xx, timeout, connection | no jitter |
//! | `frappe` (the Frappe story) | 5 min, 30 min, 2 h, 5 h, 10 h, 10 h (last repeats) | 1 + `max_retries` (default 3; 0 = one try) | any failure | no jitter |
//! | `rate_limit_only` (the CRM marketplace doc) | 10 min each, jitter +-10% | 1 + 6 | only 429 | every other answer is final |
//!
//! `rate_limit_only` treats a timeout and a connection error as final, like any answer that
//! is not 429: the CRM's doc retries "only if your server responds with an HTTP 429" and a
//! receiver that never answered did not respond with 429. Nothing is lost by it: the delivery
//! becomes a dead letter that ops can replay. Use `standard` or a custom policy to retry
//! network failures.
//!
//! A custom policy gives its own waits (seconds), attempt count, jitter, retried classes and
//! Retry-After codes, which is also how tests and demos compress time.

use crate::clock::Random;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Longest single wait a policy may ask for: 7 days, in seconds.
pub const MAX_WAIT_SECONDS: u64 = 7 * 24 * 3600;
/// Most attempts a policy may make in one cycle (bounds the attempt history per item).
pub const MAX_ATTEMPTS: u32 = 50;
/// Cap on a `Retry-After` header: 24 hours, in seconds.
pub const MAX_RETRY_AFTER_SECONDS: u64 = 24 * 3600;

/// The `standard` waits, in seconds, from the payment provider's docs.
pub const STANDARD_SCHEDULE_SECONDS: [u64; 7] = [30, 120, 600, 3600, 3 * 3600, 8 * 3600, 24 * 3600];
/// The `svix` waits, in seconds, from Svix's docs.
pub const SVIX_SCHEDULE_SECONDS: [u64; 7] = [5, 300, 1800, 7200, 5 * 3600, 10 * 3600, 10 * 3600];
/// The `frappe` waits, in seconds, from the Frappe story (Svix's minus the 5 s entry).
pub const FRAPPE_SCHEDULE_SECONDS: [u64; 6] = [300, 1800, 7200, 5 * 3600, 10 * 3600, 10 * 3600];
/// The `rate_limit_only` wait, in seconds: "approximately 10 minutes" (the CRM's doc).
pub const RATE_LIMIT_WAIT_SECONDS: u64 = 600;

/// A resolved retry policy, as stored on an endpoint and shown by the API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// `standard`, `svix`, `frappe`, `rate_limit_only` or `custom`.
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
    /// Status codes whose `Retry-After` can lengthen the wait (`standard`: 429 and 503).
    /// Shown (and stored) as `honor_retry_after`, the name a request uses for it; items
    /// stored under the old name `retry_after_on` still read.
    #[serde(default, rename = "honor_retry_after", alias = "retry_after_on")]
    pub retry_after_on: Vec<u16>,
    /// Status codes that disable the endpoint (`standard`: 410 Gone).
    #[serde(default)]
    pub disable_on: Vec<u16>,
    /// `frappe` only: the `max_retries` it was created with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
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
    /// The endpoint's OAuth token could not be fetched (error class `auth_failed`): nothing
    /// was sent to the receiver. Retried where the policy retries `connection` failures (the
    /// token endpoint is part of reaching the receiver), or names `auth_failed`.
    AuthFailed,
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
    /// The receiver asks to be disabled (410 under `standard`): the endpoint is disabled and
    /// its unfinished deliveries are held.
    Disable,
}

/// Where the chosen wait came from, recorded on the attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitSource {
    /// The policy's schedule (with jitter).
    Schedule,
    /// The receiver's `Retry-After`, which was longer.
    RetryAfter,
}

/// The wait before the next attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    /// Seconds.
    pub seconds: u64,
    /// Which rule chose it.
    pub source: WaitSource,
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
    PolicyError { field: format!("retry_policy.{field}"), message: message.into() }
}

const CLASSES: [&str; 6] = ["timeout", "connection", "3xx", "4xx", "5xx", "429"];

/// The settings of a custom policy.
const CUSTOM_SETTINGS: [&str; 7] =
    ["schedule_seconds", "max_attempts", "jitter", "retry_on", "honor_retry_after", "retry_after_on", "disable_on"];

/// Every key a `retry_policy` object may have besides `preset`.
const ALL_SETTINGS: [&str; 8] = [
    "schedule_seconds",
    "max_attempts",
    "jitter",
    "retry_on",
    "honor_retry_after",
    "retry_after_on",
    "disable_on",
    "max_retries",
];

/// JSON equality with numbers compared by value (`0` and `0.0` are the same jitter).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q)),
        _ => a == b,
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_string()).collect()
}

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
            retry_on: strings(&["timeout", "connection", "3xx", "4xx", "5xx"]),
            retry_after_on: vec![429, 503],
            disable_on: vec![410],
            max_retries: None,
        }
    }

    /// Svix's schedule.
    pub fn svix() -> Self {
        Self {
            preset: "svix".into(),
            schedule_seconds: SVIX_SCHEDULE_SECONDS.to_vec(),
            max_attempts: 8,
            jitter: 0.0,
            retry_on: strings(&CLASSES),
            retry_after_on: vec![],
            disable_on: vec![],
            max_retries: None,
        }
    }

    /// The Frappe story's schedule with `max_retries` retries after the first attempt.
    pub fn frappe(max_retries: u32) -> Self {
        Self {
            preset: "frappe".into(),
            schedule_seconds: FRAPPE_SCHEDULE_SECONDS.to_vec(),
            max_attempts: max_retries.saturating_add(1).min(MAX_ATTEMPTS),
            jitter: 0.0,
            retry_on: strings(&CLASSES),
            retry_after_on: vec![],
            disable_on: vec![],
            max_retries: Some(max_retries),
        }
    }

    /// The CRM's 429-only schedule.
    pub fn rate_limit_only() -> Self {
        Self {
            preset: "rate_limit_only".into(),
            schedule_seconds: vec![RATE_LIMIT_WAIT_SECONDS],
            max_attempts: 7,
            jitter: 0.1,
            retry_on: strings(&["429"]),
            retry_after_on: vec![],
            disable_on: vec![],
            max_retries: None,
        }
    }

    /// Reads a policy from a request body's `retry_policy` value. Whatever the API shows as
    /// an endpoint's `retry_policy` is accepted back unchanged.
    ///
    /// - absent or `{"preset": "standard"}`: [`RetryPolicy::standard`];
    /// - `{"preset": "svix"}`, `{"preset": "rate_limit_only"}`;
    /// - `{"preset": "frappe", "max_retries": N}` (N from 0 to 49, default 3);
    /// - a preset's other fields may be given when they equal the preset's own values (as GET
    ///   shows them); a different value is refused: presets are fixed;
    /// - custom (`"preset": "custom"`, or no preset and any custom setting): `schedule_seconds`
    ///   (required), `max_attempts` (default one more than the schedule's length), `jitter` (0
    ///   to 0.5, default 0), and, each defaulting to the `standard` preset's value,
    ///   `retry_on` (timeout, connection, 3xx, 4xx, 5xx), `honor_retry_after` (`true` = 429
    ///   and 503; `false`; or a list of status codes; `retry_after_on` is read as the same) and
    ///   `disable_on` (410).
    ///
    /// # Errors
    /// [`PolicyError`] naming the field: a key that is no setting of any policy (reported
    /// first, so a typo is named as itself), an unknown preset, a preset field changed, an
    /// empty schedule, a wait of 0 or over 7 days, `max_attempts` outside 1..=50, `jitter`
    /// outside 0..=0.5, an unknown class or status code.
    pub fn from_request(value: Option<&Value>) -> Result<Self, PolicyError> {
        let Some(value) = value.filter(|v| !v.is_null()) else {
            return Ok(Self::standard());
        };
        let obj = value
            .as_object()
            .ok_or_else(|| PolicyError { field: "retry_policy".into(), message: "must be an object".into() })?;
        let unknown: Vec<&String> =
            obj.keys().filter(|k| k.as_str() != "preset" && !ALL_SETTINGS.contains(&k.as_str())).collect();
        if let Some(first) = unknown.first() {
            let names: Vec<_> = unknown.iter().map(|k| format!("{k:?}")).collect();
            return Err(err(
                first,
                format!(
                    "unknown field{} {}; a retry policy has preset, {}",
                    if names.len() > 1 { "s" } else { "" },
                    names.join(", "),
                    // `retry_after_on`, the old name of `honor_retry_after`, is read but not
                    // offered.
                    ALL_SETTINGS.iter().filter(|k| **k != "retry_after_on").copied().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        let preset = match obj.get("preset") {
            None | Some(Value::Null) => {
                if obj.keys().any(|k| CUSTOM_SETTINGS.contains(&k.as_str())) {
                    "custom"
                } else {
                    "standard"
                }
            }
            Some(Value::String(s)) => s.as_str(),
            Some(_) => return Err(err("preset", "must be a string")),
        };
        match preset {
            "standard" => Self::standard().fixed(obj, &[]),
            "svix" => Self::svix().fixed(obj, &[]),
            "rate_limit_only" => Self::rate_limit_only().fixed(obj, &[]),
            "frappe" => {
                let n = match obj.get("max_retries") {
                    None | Some(Value::Null) => 3,
                    Some(v) => match v.as_u64() {
                        Some(n) if n < u64::from(MAX_ATTEMPTS) => n as u32,
                        _ => {
                            return Err(err(
                                "max_retries",
                                format!("must be a whole number from 0 to {}", MAX_ATTEMPTS - 1),
                            ));
                        }
                    },
                };
                Self::frappe(n).fixed(obj, &["max_retries"])
            }
            "custom" => {
                if let Some(k) = obj.keys().find(|k| k.as_str() == "max_retries") {
                    return Err(err(k, "is not a setting of the custom preset (it is frappe's)"));
                }
                Self::custom(obj)
            }
            other => Err(err(
                "preset",
                format!("unknown preset {other:?}; use standard, svix, frappe, rate_limit_only or custom"),
            )),
        }
    }

    /// `self` (a named preset) when every field `obj` gives, other than `preset` and the
    /// `settable` ones, equals the preset's own value as the API shows it.
    fn fixed(self, obj: &Map<String, Value>, settable: &[&str]) -> Result<Self, PolicyError> {
        let shown = serde_json::to_value(&self).unwrap_or(Value::Null);
        for (k, v) in obj {
            if k == "preset" || settable.contains(&k.as_str()) {
                continue;
            }
            match shown.get(k) {
                Some(own) if same(own, v) => {}
                Some(own) => {
                    return Err(err(
                        k,
                        format!(
                            "the {} preset's {k} is {own}; a preset is fixed, so use a custom policy (no preset) to change it",
                            self.preset
                        ),
                    ));
                }
                None => return Err(err(k, format!("is not a setting of the {} preset", self.preset))),
            }
        }
        Ok(self)
    }

    fn custom(obj: &Map<String, Value>) -> Result<Self, PolicyError> {
        let schedule = obj
            .get("schedule_seconds")
            .and_then(Value::as_array)
            .ok_or_else(|| err("schedule_seconds", "is required: a list of waits in seconds"))?;
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
            None | Some(Value::Null) => u32::try_from(waits.len() + 1).unwrap_or(MAX_ATTEMPTS).min(MAX_ATTEMPTS),
            Some(v) => match v.as_u64() {
                Some(n) if (1..=u64::from(MAX_ATTEMPTS)).contains(&n) => n as u32,
                _ => return Err(err("max_attempts", format!("must be a whole number from 1 to {MAX_ATTEMPTS}"))),
            },
        };
        let jitter = match obj.get("jitter") {
            None | Some(Value::Null) => 0.0,
            Some(v) => match v.as_f64() {
                Some(j) if (0.0..=0.5).contains(&j) => j,
                _ => return Err(err("jitter", "must be a number from 0 to 0.5")),
            },
        };
        let standard = Self::standard();
        let retry_on = match obj.get("retry_on") {
            None | Some(Value::Null) => standard.retry_on.clone(),
            Some(Value::Array(items)) => {
                let mut out = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    let class = match item {
                        Value::String(s) if CLASSES.contains(&s.as_str()) || s == "auth_failed" => s.clone(),
                        Value::String(s) if is_status_code(s) => s.clone(),
                        Value::Number(n) if n.as_u64().is_some_and(|c| (100..=599).contains(&c)) => n.to_string(),
                        _ => {
                            return Err(err(
                                &format!("retry_on[{i}]"),
                                "must be one of timeout, connection, auth_failed, 3xx, 4xx, 5xx, 429 or a status code",
                            ));
                        }
                    };
                    out.push(class);
                }
                out
            }
            Some(_) => return Err(err("retry_on", "must be a list")),
        };
        let (field, given) = match (obj.get("honor_retry_after"), obj.get("retry_after_on")) {
            (Some(h), Some(r)) if !same(h, r) => {
                return Err(err("retry_after_on", "is the old name of honor_retry_after; give one of them"));
            }
            (Some(h), _) => ("honor_retry_after", Some(h)),
            (None, r) => ("retry_after_on", r),
        };
        let retry_after_on = match given {
            None | Some(Value::Null) | Some(Value::Bool(true)) => standard.retry_after_on.clone(),
            Some(Value::Bool(false)) => vec![],
            Some(Value::Array(items)) => codes(items, field)?,
            Some(_) => return Err(err(field, "must be true, false or a list of status codes")),
        };
        let disable_on = match obj.get("disable_on") {
            None | Some(Value::Null) => standard.disable_on.clone(),
            Some(Value::Array(items)) => codes(items, "disable_on")?,
            Some(_) => return Err(err("disable_on", "must be a list of status codes")),
        };
        Ok(Self {
            preset: "custom".into(),
            schedule_seconds: waits,
            max_attempts,
            jitter,
            retry_on,
            retry_after_on,
            disable_on,
            max_retries: None,
        })
    }

    /// What this policy makes of an attempt's outcome.
    pub fn classify(&self, outcome: Outcome) -> Verdict {
        let has = |c: &str| self.retry_on.iter().any(|x| x == c);
        match outcome {
            Outcome::Status(code) if (200..300).contains(&code) => Verdict::Success,
            Outcome::Status(code) if self.disable_on.contains(&code) => Verdict::Disable,
            Outcome::Status(code) => {
                let class = match code {
                    300..=399 => "3xx",
                    400..=499 => "4xx",
                    500..=599 => "5xx",
                    _ => "",
                };
                let retried = has(&code.to_string()) || has(class) || (code == 429 && has("429"));
                if retried { Verdict::Retry } else { Verdict::Final }
            }
            Outcome::Timeout if has("timeout") => Verdict::Retry,
            Outcome::Connection if has("connection") => Verdict::Retry,
            Outcome::AuthFailed if has("auth_failed") || has("connection") => Verdict::Retry,
            Outcome::Timeout | Outcome::Connection | Outcome::Refused | Outcome::AuthFailed => Verdict::Final,
        }
    }

    /// The longest a cycle of this policy can take from its first attempt to its last, in
    /// seconds: every wait at its jitter's longest (rounded as [`Self::next_wait`] does), or
    /// [`MAX_RETRY_AFTER_SECONDS`] where a `Retry-After` can lengthen it (held time and rate
    /// limiting aside). What an event's payload must outlive ([`crate::domain::tenant`]).
    pub fn longest_span_seconds(&self) -> u64 {
        let last = self.schedule_seconds.len().saturating_sub(1);
        (1..self.max_attempts)
            .map(|failures| {
                let index = usize::try_from(failures - 1).unwrap_or(usize::MAX).min(last);
                let base = self.schedule_seconds.get(index).copied().unwrap_or(0) as f64;
                let longest = (base * (1.0 + self.jitter)).round().max(1.0) as u64;
                if self.retry_after_on.is_empty() { longest } else { longest.max(MAX_RETRY_AFTER_SECONDS) }
            })
            .sum()
    }

    /// The wait before the next attempt after `failures` failed attempts in this cycle (1
    /// after the first), or `None` when the attempts are used up.
    ///
    /// The scheduled wait is jittered; a `retry_after_seconds` (already parsed from the
    /// header) on a status in `retry_after_on` lengthens it to `max(header, jittered wait)`,
    /// capped at 24 h.
    pub fn next_wait(
        &self,
        failures: u32,
        outcome: Outcome,
        retry_after_seconds: Option<u64>,
        rng: &Random,
    ) -> Option<Wait> {
        if failures >= self.max_attempts || failures == 0 {
            return None;
        }
        let last = self.schedule_seconds.len().saturating_sub(1);
        let index = usize::try_from(failures - 1).unwrap_or(usize::MAX).min(last);
        let base = *self.schedule_seconds.get(index)? as f64;
        let jittered = (base * (1.0 + self.jitter * rng.symmetric_unit())).round().max(1.0) as u64;
        let honoured = matches!(outcome, Outcome::Status(code) if self.retry_after_on.contains(&code));
        match retry_after_seconds.map(|ra| ra.min(MAX_RETRY_AFTER_SECONDS)) {
            Some(ra) if honoured && ra > jittered => Some(Wait { seconds: ra, source: WaitSource::RetryAfter }),
            _ => Some(Wait { seconds: jittered, source: WaitSource::Schedule }),
        }
    }
}

fn codes(items: &[Value], field: &str) -> Result<Vec<u16>, PolicyError> {
    items
        .iter()
        .enumerate()
        .map(|(i, v)| match v.as_u64() {
            Some(c) if (100..=599).contains(&c) => Ok(c as u16),
            _ => Err(err(&format!("{field}[{i}]"), "must be an HTTP status code")),
        })
        .collect()
}

fn is_status_code(s: &str) -> bool {
    s.len() == 3 && s.parse::<u16>().is_ok_and(|c| (100..=599).contains(&c))
}

#[cfg(test)]
mod tests;
