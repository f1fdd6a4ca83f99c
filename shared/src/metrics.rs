//! CloudWatch metrics as Embedded Metric Format log lines: one JSON line on stdout that
//! CloudWatch Logs turns into metrics, so counting costs no API call.
//!
//! Namespace `Webhooks`, one dimension on every metric: `Stack`, the CloudFormation stack's
//! name (`WEBHOOKS_STACK_NAME`), so two stacks in one account and region keep separate series.
//! Nothing per endpoint or per tenant is a dimension (each value would be a custom metric of
//! its own, billed monthly): those figures are fields of the structured log lines (deliver's
//! `"attempt made"` carries `tenant_id`, `endpoint_id`, `event_type`, `status`,
//! `duration_ms`), which CloudWatch Logs Insights groups (docs/operations.md has the queries).
//!
//! Metrics, all per stack:
//! - from deliver: `Delivered`, `FailedAttempts`, `Exhausted` (counts, one line per attempt)
//!   and `AttemptDuration` (milliseconds);
//! - from the sweeper: `SweepEnqueued`, `SweepRecoveredLeases` (counts, one line per tick);
//! - from an endpoint transition, whoever makes it ([`crate::service::endpoint_state::committed`]):
//!   `EndpointsPaused` (the circuit breaker stopped an endpoint) and `EndpointsDisabled` (a
//!   receiver's disable code, such as 410, stopped it; an operator's manual disable is not
//!   counted). Counts, a line only when one happens;
//! - from each step of a tenant's purge ([`crate::service::purge::step`]):
//!   `PurgeProgressAgeSeconds`, seconds since that purge last saved progress (a line per step;
//!   `PurgeStalledAlarm` fires on its maximum).
//!
//! The SAM template's alarms and dashboard use these names with the `Stack` dimension
//! (`scripts/lambda-smoke.sh` checks that every alarm's metric is one emitted here or one AWS
//! publishes).

use crate::Config;
use serde_json::{Map, Value, json};

/// The metric namespace.
pub const NAMESPACE: &str = "Webhooks";

/// The one dimension of every metric: the stack's name.
pub const STACK_DIMENSION: &str = "Stack";

/// A metric value and its CloudWatch unit (`Count`, `Milliseconds` or `Seconds`).
pub type Metric<'a> = (&'a str, f64, &'a str);

/// The EMF line for `metrics` at `timestamp_ms` (milliseconds since the Unix epoch), with
/// the dimension `Stack` = `stack`.
pub fn line(stack: &str, timestamp_ms: i64, metrics: &[Metric<'_>]) -> String {
    let mut root = Map::new();
    let defs: Vec<Value> = metrics.iter().map(|(name, _, unit)| json!({"Name": name, "Unit": unit})).collect();
    root.insert(
        "_aws".into(),
        json!({"Timestamp": timestamp_ms, "CloudWatchMetrics": [{
            "Namespace": NAMESPACE,
            "Dimensions": [[STACK_DIMENSION]],
            "Metrics": defs,
        }]}),
    );
    root.insert(STACK_DIMENSION.into(), json!(stack));
    for (name, value, _) in metrics {
        root.insert((*name).to_string(), json!(value));
    }
    Value::Object(root).to_string()
}

/// Prints the EMF line when `config.emit_metrics` (in Lambda), tagged with
/// `config.stack_name`; does nothing otherwise.
pub fn emit(config: &Config, timestamp_ms: i64, metrics: &[Metric<'_>]) {
    if config.emit_metrics && !metrics.is_empty() {
        println!("{}", line(&config.stack_name, timestamp_ms, metrics));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emf_line_declares_and_carries_each_metric_under_the_stack_dimension() {
        let l: Value = serde_json::from_str(&line(
            "webhooks-prod",
            1000,
            &[("Delivered", 1.0, "Count"), ("AttemptDuration", 12.0, "Milliseconds")],
        ))
        .unwrap();
        let directive = &l["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], "Webhooks");
        assert_eq!(directive["Dimensions"], json!([["Stack"]]));
        assert_eq!(l["Stack"], "webhooks-prod", "the dimension's value is a member of the line");
        assert_eq!(directive["Metrics"][1]["Unit"], "Milliseconds");
        assert_eq!(l["Delivered"], 1.0);
        assert_eq!(l["AttemptDuration"], 12.0);
    }
}
