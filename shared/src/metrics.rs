//! CloudWatch metrics as Embedded Metric Format log lines: one JSON line on stdout that
//! CloudWatch Logs turns into metrics, so counting costs no API call.
//!
//! Namespace `Webhooks`, no dimensions. Metrics: `Delivered`, `FailedAttempts`, `Exhausted`
//! (counts) and `AttemptDuration` (milliseconds) from deliver; `SweepEnqueued`,
//! `SweepRecoveredLeases` (counts) from the sweeper. The SAM template's alarms use these names.

use serde_json::{Map, Value, json};

/// The metric namespace.
pub const NAMESPACE: &str = "Webhooks";

/// A metric value and its CloudWatch unit (`Count` or `Milliseconds`).
pub type Metric<'a> = (&'a str, f64, &'a str);

/// The EMF line for `metrics` at `timestamp_ms`.
pub fn line(timestamp_ms: i64, metrics: &[Metric<'_>]) -> String {
    let mut root = Map::new();
    let defs: Vec<Value> = metrics.iter().map(|(name, _, unit)| json!({"Name": name, "Unit": unit})).collect();
    root.insert(
        "_aws".into(),
        json!({"Timestamp": timestamp_ms, "CloudWatchMetrics": [{"Namespace": NAMESPACE, "Dimensions": [[]], "Metrics": defs}]}),
    );
    for (name, value, _) in metrics {
        root.insert((*name).to_string(), json!(value));
    }
    Value::Object(root).to_string()
}

/// Prints the EMF line when `enabled` (in Lambda); does nothing otherwise.
pub fn emit(enabled: bool, timestamp_ms: i64, metrics: &[Metric<'_>]) {
    if enabled && !metrics.is_empty() {
        println!("{}", line(timestamp_ms, metrics));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emf_line_declares_and_carries_each_metric() {
        let l: Value = serde_json::from_str(&line(
            1000,
            &[("Delivered", 1.0, "Count"), ("AttemptDuration", 12.0, "Milliseconds")],
        ))
        .unwrap();
        assert_eq!(l["_aws"]["CloudWatchMetrics"][0]["Namespace"], "Webhooks");
        assert_eq!(l["_aws"]["CloudWatchMetrics"][0]["Metrics"][1]["Unit"], "Milliseconds");
        assert_eq!(l["Delivered"], 1.0);
        assert_eq!(l["AttemptDuration"], 12.0);
    }
}
