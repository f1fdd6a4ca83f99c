//! A tenant's settings: its retention overrides and its purge mark (issue #39 parts 2 and 3).
//!
//! One item per tenant (`TENANT#{tenant}` / `SETTINGS`, with a copy beside each endpoint copy,
//! `docs/storage.md`), read by ingest in the same Query as the tenant's endpoints, so neither
//! the overrides nor the purge mark cost an event a request of its own.
//!
//! Retention is decided when an item is written and kept on it: an event's payload item takes
//! the tenant's `event_retention_days` at ingest (its `expires_at`); each delivery carries the
//! tenant's `delivered_retention_days` and `exhausted_retention_days` of its ingest (absent:
//! the stack's) and its `expires_at` is set from them when it becomes final. A change of the
//! overrides applies to the items written after it answered; items already written keep theirs.
//!
//! The bounds ([`check`]) come from what the retry schedules and replay need, each named in
//! the refusal: an event's payload must outlive the longest retry schedule of the tenant's
//! endpoints ([`crate::domain::retry_policy::RetryPolicy::longest_span_seconds`], at least the
//! `standard` preset's, which a new endpoint gets) so that no retry finds it gone, and must
//! outlive a dead letter (`exhausted_retention_days`) so that a dead letter can be replayed as
//! long as it is kept; every value is 1 to [`MAX_RETENTION_DAYS`].

use crate::config::Config;
use crate::domain::ids::{JobId, TenantId};
use crate::domain::retry_policy::RetryPolicy;
use crate::error::ServiceError;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The longest retention accepted, days (ten years).
pub const MAX_RETENTION_DAYS: u32 = 3650;

/// A tenant's settings item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantSettings {
    /// The tenant.
    pub tenant_id: TenantId,
    /// Days a delivered delivery is kept (absent: `WEBHOOKS_DELIVERED_RETENTION_DAYS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_retention_days: Option<u32>,
    /// Days a dead letter is kept (absent: `WEBHOOKS_EXHAUSTED_RETENTION_DAYS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exhausted_retention_days: Option<u32>,
    /// Days an event's payload item is kept from ingest (absent:
    /// `WEBHOOKS_EVENT_RETENTION_DAYS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_retention_days: Option<u32>,
    /// Set when a purge of the tenant started (`DELETE /v1/tenants/{id}`): from then on its
    /// events are refused (409 `tenant_purging`) until the purge removes this item last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purge: Option<PurgeMark>,
    /// Bumped by every write; each write is conditional on the version read (0: no item).
    pub version: u64,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

/// A purge under way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurgeMark {
    /// The purge job (`GET /v1/jobs/{id}`).
    pub job_id: JobId,
    /// When it started.
    pub started_at: DateTime<Utc>,
}

impl TenantSettings {
    /// No overrides, no purge, version 0 (not stored yet).
    pub fn empty(tenant_id: &TenantId, now: DateTime<Utc>) -> Self {
        Self {
            tenant_id: tenant_id.clone(),
            delivered_retention_days: None,
            exhausted_retention_days: None,
            event_retention_days: None,
            purge: None,
            version: 0,
            updated_at: now,
        }
    }

    /// The retention that applies to the tenant's new items.
    pub fn retention(&self, cfg: &Config) -> Retention {
        Retention {
            delivered_days: self.delivered_retention_days.unwrap_or(cfg.delivered_retention_days),
            exhausted_days: self.exhausted_retention_days.unwrap_or(cfg.exhausted_retention_days),
            event_days: self.event_retention_days.unwrap_or(cfg.event_retention_days),
        }
    }
}

/// The retention in force, each in days.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Retention {
    /// A delivered delivery, from its delivery.
    pub delivered_days: u32,
    /// A dead letter, from its end.
    pub exhausted_days: u32,
    /// An event's payload item, from ingest.
    pub event_days: u32,
}

/// The least `event_retention_days` the schedules need, days: the longest span of `policies`
/// (the tenant's endpoints'; the `standard` preset's at least), rounded up to whole days.
pub fn least_event_days(policies: &[&RetryPolicy]) -> u32 {
    let longest = policies
        .iter()
        .map(|p| p.longest_span_seconds())
        .chain(std::iter::once(RetryPolicy::standard().longest_span_seconds()))
        .max()
        .unwrap_or(0);
    u32::try_from(longest.div_ceil(86_400)).unwrap_or(u32::MAX)
}

/// Checks `settings` against the bounds (module docs), `policies` the retry policies of the
/// tenant's endpoints.
///
/// # Errors
/// [`ServiceError::Validation`] (422) naming the field, the bound and where it comes from.
pub fn check(cfg: &Config, settings: &TenantSettings, policies: &[&RetryPolicy]) -> Result<(), ServiceError> {
    for (field, value) in [
        ("delivered_retention_days", settings.delivered_retention_days),
        ("exhausted_retention_days", settings.exhausted_retention_days),
        ("event_retention_days", settings.event_retention_days),
    ] {
        if let Some(v) = value
            && !(1..=MAX_RETENTION_DAYS).contains(&v)
        {
            return Err(ServiceError::Validation(format!("{field}: {v} is outside 1 to {MAX_RETENTION_DAYS} days")));
        }
    }
    let r = settings.retention(cfg);
    let least = least_event_days(policies);
    if r.event_days < least {
        return Err(ServiceError::Validation(format!(
            "event_retention_days: {} is under {least} days, the longest retry schedule of the tenant's endpoints \
             (waits at their jitter's longest, Retry-After up to 24 h where honoured): a retry would find the \
             payload gone",
            r.event_days
        )));
    }
    if r.event_days < r.exhausted_days {
        return Err(ServiceError::Validation(format!(
            "event_retention_days: {} is under exhausted_retention_days ({}): a dead letter must be replayable, \
             with its payload, as long as it is kept",
            r.event_days, r.exhausted_days
        )));
    }
    Ok(())
}

/// Checks the retry policy an endpoint of the tenant is to have (at its creation, or a PATCH
/// that changes it) against the event retention its tenant has now (`settings`' override,
/// else `WEBHOOKS_EVENT_RETENTION_DAYS`): the bound [`check`] puts on the retention, seen from
/// the policy's side, so a later policy cannot outlast the payload either.
///
/// # Errors
/// [`ServiceError::Validation`] (422) naming `retry_policy`, its longest cycle and the
/// retention, in days.
pub fn check_policy(cfg: &Config, settings: Option<&TenantSettings>, policy: &RetryPolicy) -> Result<(), ServiceError> {
    let days = settings.map_or(cfg.event_retention_days, |s| s.retention(cfg).event_days);
    let needs = u32::try_from(policy.longest_span_seconds().div_ceil(86_400)).unwrap_or(u32::MAX);
    if needs <= days {
        return Ok(());
    }
    Err(ServiceError::Validation(format!(
        "retry_policy: its longest cycle takes up to {needs} days (waits at their jitter's longest, Retry-After up \
         to 24 h where honoured), longer than the {days} days the tenant's events are kept (its \
         event_retention_days, else WEBHOOKS_EVENT_RETENTION_DAYS): a retry would find the payload gone; \
         shorten the schedule or raise the tenant's event_retention_days"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::id;

    #[test]
    fn a_policy_must_not_outlast_the_tenants_events() {
        let cfg = Config::new("t", "q");
        let policy = |wait: u64, attempts: u32| {
            let body = serde_json::json!({"schedule_seconds": [wait], "max_attempts": attempts, "jitter": 0});
            RetryPolicy::from_request(Some(&body)).unwrap()
        };
        // Fourteen waits of 7 days: 98 days, over the stack's 90; twelve: 84.
        let e = check_policy(&cfg, None, &policy(7 * 86_400, 15)).unwrap_err().to_string();
        assert!(e.starts_with("retry_policy: its longest cycle takes up to 98 days"), "{e}");
        assert!(check_policy(&cfg, None, &policy(7 * 86_400, 13)).is_ok());
        let mut s = TenantSettings::empty(&id("acme"), Utc::now());
        s.event_retention_days = Some(10);
        assert!(check_policy(&cfg, Some(&s), &policy(6 * 86_400, 3)).is_err());
        assert!(check_policy(&cfg, Some(&s), &policy(5 * 86_400, 3)).is_ok());
    }

    #[test]
    fn the_standard_schedule_bounds_an_events_retention() {
        let cfg = Config::new("t", "q");
        // 7 waits at most 24 h each (Retry-After) but the last, 24 h + 20 % jitter: 7.2 days.
        assert_eq!(least_event_days(&[]), 8);
        let mut s = TenantSettings::empty(&id("acme"), Utc::now());
        s.event_retention_days = Some(7);
        let e = check(&cfg, &s, &[]).unwrap_err().to_string();
        assert!(e.starts_with("event_retention_days: 7 is under 8 days"), "{e}");
        s.event_retention_days = Some(10);
        s.exhausted_retention_days = Some(11);
        assert!(check(&cfg, &s, &[]).unwrap_err().to_string().contains("under exhausted_retention_days (11)"));
        s.exhausted_retention_days = Some(10);
        assert!(check(&cfg, &s, &[]).is_ok());
        s.delivered_retention_days = Some(0);
        assert!(check(&cfg, &s, &[]).unwrap_err().to_string().starts_with("delivered_retention_days: 0"));
    }
}
