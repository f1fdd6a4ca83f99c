//! The capacity model: at a given delivery rate, the writes and reads per second that land on
//! each partition key pattern of the table and its GSIs, from the units per delivery measured
//! in section 1 (not guessed), against DynamoDB's per-partition limits; with the shard counts
//! that keep every key under half its limit, and Lambda, SQS and API Gateway limits beside.
//!
//! Worst case throughout: one hot tenant with one hot endpoint takes the whole rate, so every
//! key that is per tenant or per endpoint takes all of it; only hashed shards spread it.

use crate::requests::{DDB, Scenario};
use std::fmt::Write as _;

/// Deliveries a second the model is computed at (issue #14: "the scale of a large SaaS").
pub const RATE: f64 = 10_000.0;
/// DynamoDB: write units a second one partition serves (DynamoDB developer guide,
/// "Burst and adaptive capacity": 1,000 WCU per partition per second), the same for a GSI's
/// partitions.
pub const PARTITION_WRU: f64 = 1_000.0;
/// DynamoDB: read units a second one partition serves (same page: 3,000 RCU per partition per
/// second; a strongly consistent read of up to 4 KB is one unit).
pub const PARTITION_RRU: f64 = 3_000.0;
/// The share of a limit no key may pass (issue #14: "no key above 50% of its limit").
pub const HEADROOM: f64 = 0.5;
/// Lambda: concurrent executions per account and region by default (Lambda quotas page; a
/// soft limit).
pub const LAMBDA_CONCURRENCY: f64 = 1_000.0;
/// Lambda: batches an SQS event source mapping processes at once at most (Lambda developer
/// guide, "Configuring scaling behavior for SQS event source mappings": 1,000; it grows by up
/// to 300 a minute).
pub const ESM_BATCHES: f64 = 1_000.0;
/// SQS standard queue: messages in flight (received, not deleted) at most (SQS quotas page:
/// about 120,000).
pub const SQS_IN_FLIGHT: f64 = 120_000.0;
/// API Gateway: requests a second per account and region, HTTP APIs included (API Gateway
/// quotas page: 10,000 steady, 5,000 burst; a soft limit).
pub const APIGW_RPS: f64 = 10_000.0;
/// Messages per deliver invocation at high traffic (the event source mapping's `BatchSize`
/// in `infra/template.yaml`).
pub const BATCH: f64 = 10.0;
/// The receiver's answer time assumed for deliver's Lambda concurrency, seconds: the request
/// timeout's default (10 s) is the ceiling; 1 s is a slow receiver, the loopback receiver of
/// the bench answers in about a millisecond.
pub const RECEIVER_SECONDS: [f64; 2] = [0.2, 1.0];

/// Shards (partition key values, spread by a hash) that keep `per_second` units under
/// [`HEADROOM`] of `limit`: `ceil(per_second / (HEADROOM * limit))`, at least 1.
pub fn shards_needed(per_second: f64, limit: f64) -> u32 {
    (per_second / (HEADROOM * limit)).ceil().max(1.0) as u32
}

/// One key pattern's row.
struct Row {
    key: String,
    what: String,
    per_delivery: f64,
    spread_over: f64,
    limit: f64,
    unit: &'static str,
    source: String,
    /// The environment variable that splits this key over shards, if one exists.
    setting: Option<&'static str>,
}

impl Row {
    fn per_key(&self) -> f64 {
        RATE * self.per_delivery / self.spread_over.max(1.0)
    }
    fn share(&self) -> f64 {
        self.per_key() / self.limit
    }
    /// Shards that keep the key within [`HEADROOM`] (for the whole rate on hashed shards).
    fn needed(&self) -> u32 {
        shards_needed(RATE * self.per_delivery, self.limit)
    }
    /// The share of the limit with the derived setting (as now when there is no setting).
    fn share_with_setting(&self) -> f64 {
        match self.setting {
            Some(_) => RATE * self.per_delivery / f64::from(self.needed()) / self.limit,
            None => self.share(),
        }
    }
}

fn f(v: f64, digits: usize) -> String {
    format!("{v:.digits$}")
}

/// Writes the capacity model section from the warm first-try scenario (`warm`) and the
/// configured due shards; returns (keys over the headroom, summary line).
pub fn section(body: &mut String, scenarios: &[Scenario], due_shards: u32) -> (usize, String) {
    let Some(warm) = scenarios.iter().find(|s| s.name == "first try, 1 endpoint (second event)") else {
        return (0, "no first-try scenario measured".into());
    };
    let per = warm.delivered.max(1) as f64;
    let gsi = |name: &str| warm.sum(|k| k.1 == DDB, |o| o.gsi_by_index.get(name).copied().unwrap_or(0.0)) / per;
    let app = |op: &str, v: &dyn Fn(&crate::count::OpStats) -> f64| {
        warm.sum(|k| k.0 == "app" && k.1 == DDB && k.2 == op, v) / per
    };
    let query_rru = app("Query", &|o| o.rru);
    let endpoint_get_rru = app("GetItem", &|o| {
        o.reads.iter().filter(|r| r.payloads == 0 && r.factor >= 1.0).map(|r| r.units(4096, None)).sum()
    });
    let (due, by_endpoint, by_status) = (gsi("due"), gsi("by_endpoint"), gsi("by_status"));
    // The delivered counter's ADD (an UpdateItem of an item under 1 KB, one per delivered
    // delivery) is on its own key: taken out of the delivery item's units.
    let counter_wru = 1.0;
    let delivery_wru = app("UpdateItem", &|o| o.wru) - counter_wru
        + app("PutItem", &|o| o.writes.iter().filter(|w| w.payloads == 0).map(|w| w.units(1024, None)).sum());
    let event_wru = app("PutItem", &|o| o.writes.iter().filter(|w| w.payloads > 0).map(|w| w.units(1024, None)).sum());
    let rows = vec![
        Row {
            key: "table `DELIVERY#{id}`".into(),
            what: "a delivery's item: its put, claim and record".into(),
            per_delivery: delivery_wru,
            spread_over: RATE,
            limit: PARTITION_WRU,
            unit: "WRU",
            source: "measured (PutItem of the delivery, 2 UpdateItems); one key per delivery".into(),
            setting: None,
        },
        Row {
            key: "table `TENANT#{tenant}` (tenant's endpoints Query; `COPY#{j}#TENANT#{tenant}` with copies)".into(),
            what: "ingest's strongly consistent Query of the tenant's endpoints, one per event; deliver's strongly consistent GetItem of the endpoint before each POST; each reads the copy its event or delivery id picks".into(),
            per_delivery: query_rru + endpoint_get_rru,
            spread_over: 1.0,
            limit: PARTITION_RRU,
            unit: "RRU",
            source: "measured (Query and GetItem of 1 endpoint item under 4 KB); one hot tenant takes every event; the copies are hashed on the event and delivery ids, so even over them".into(),
            setting: Some("WEBHOOKS_ENDPOINT_COPIES"),
        },
        Row {
            key: "table `TENANT#{tenant}` (endpoint item, failures; `COPY#{j}#TENANT#{tenant}` with copies)".into(),
            what: "the failures-in-a-row counter (ADD), one UpdateItem per failed attempt on the copy the attempt read, while the endpoint fails (the circuit breaker pauses it after 100 in a row, summed over the copies)".into(),
            per_delivery: 1.0,
            spread_over: 1.0,
            limit: PARTITION_WRU,
            unit: "WRU",
            source: "derived: 1 WRU per failed attempt (an endpoint item under 1 KB) if every attempt failed; 0 on first tries; split over the copies".into(),
            setting: Some("WEBHOOKS_ENDPOINT_COPIES"),
        },
        Row {
            key: "table `STATS#{endpoint_id}` (`STATS#{endpoint_id}#{k}` when split), `DAY#{date}`".into(),
            what: "the endpoint's delivered counter for its stats (ADD), one UpdateItem per delivered delivery".into(),
            per_delivery: counter_wru,
            spread_over: 1.0,
            limit: PARTITION_WRU,
            unit: "WRU",
            source: "derived: 1 WRU per delivered delivery (an item under 1 KB); split with the endpoint's index (`WEBHOOKS_ENDPOINT_INDEX_SHARDS`); one hot endpoint takes every delivery".into(),
            setting: Some("WEBHOOKS_ENDPOINT_INDEX_SHARDS"),
        },
        Row {
            key: format!("GSI `due`, `DUE#{{shard}}` ({due_shards} shards, `WEBHOOKS_DUE_SHARDS`)"),
            what: "entry put at ingest, removed by the record; the claim keeps it (same key, keys only: no write)".into(),
            per_delivery: due,
            spread_over: f64::from(due_shards),
            limit: PARTITION_WRU,
            unit: "WRU",
            source: "measured GSI writes; hashed on the delivery id, so even over the shards".into(),
            setting: Some("WEBHOOKS_DUE_SHARDS"),
        },
        Row {
            key: "GSI `by_endpoint`, `{endpoint_id}` (`{endpoint_id}#{k}` when split)".into(),
            what: "entry put at ingest, re-keyed (open to delivered) by the record; the claim keeps it (same key, keys only: no write)".into(),
            per_delivery: by_endpoint,
            spread_over: 1.0,
            limit: PARTITION_WRU,
            unit: "WRU",
            source: "measured GSI writes; one hot endpoint takes every delivery".into(),
            setting: Some("WEBHOOKS_ENDPOINT_INDEX_SHARDS"),
        },
        Row {
            key: "GSI `by_status`, `exhausted` / `held` (`{status}#{k}` when split)".into(),
            what: "entry put when a delivery becomes a dead letter or is held (none on a first try)".into(),
            per_delivery: by_status.max(1.0),
            spread_over: 1.0,
            limit: PARTITION_WRU,
            unit: "WRU",
            source: format!("measured {} on a first try; the row is the worst case, derived: every delivery a dead letter, 1 entry (under 1 KB) each", f(by_status, 2)),
            setting: Some("WEBHOOKS_STATUS_INDEX_SHARDS"),
        },
        Row {
            key: "table `EVENT_ID#{event_id}`, `TENANT#{tenant}`".into(),
            what: "the event item (payload compressed), put once at ingest; found by the event id alone, so in no index".into(),
            per_delivery: event_wru,
            spread_over: RATE,
            limit: PARTITION_WRU,
            unit: "WRU",
            source: "measured (the PutItem holding the payload); one key per event, one item per tenant that uses the id".into(),
            setting: None,
        },
    ];
    let _ = writeln!(body, "## 2b. Capacity model at {} deliveries a second\n", f(RATE, 0));
    let _ = writeln!(
        body,
        "How: the units per delivered event measured in *{}* (section 1: base-table units by item size, GSI entry writes by index from the before/after snapshots), times {} deliveries a second, divided by the partition key values the load spreads over, against DynamoDB's limits per partition (a single partition key value cannot be split past them): {} write units and {} read units a second (DynamoDB developer guide, burst and adaptive capacity). Worst case: one hot tenant with one hot endpoint takes the whole rate. Goal: no key above {}% of its limit. The setting that gets there = ceil(units a second / ({} x limit)) shards of a key, the hash of the delivery id choosing one; `% of limit` is at the defaults (one shard, 8 due shards), `with the setting` at the derived count.\n",
        warm.name,
        f(RATE, 0),
        f(PARTITION_WRU, 0),
        f(PARTITION_RRU, 0),
        f(HEADROOM * 100.0, 0),
        HEADROOM
    );
    let _ = writeln!(
        body,
        "| key pattern | what lands on it | units per delivery | units a second per key | limit | % of limit | within 50% | setting that gets there | % of limit with the setting | source |"
    );
    let _ = writeln!(body, "|---|---|---|---|---|---|---|---|---|---|");
    let mut over = 0;
    let mut worst: Vec<String> = Vec::new();
    // The settings that get there, in the order of the rows; one can serve several keys.
    let mut settings: Vec<(&str, u32)> = Vec::new();
    for r in &rows {
        let ok = r.share() <= HEADROOM;
        let ok_with = r.share_with_setting() <= HEADROOM;
        if !ok_with {
            over += 1;
            worst.push(format!("{} {}%", r.key, f(r.share() * 100.0, 0)));
        }
        let setting = match (ok, r.setting) {
            (true, _) => "- (not needed)".to_string(),
            (false, Some(name)) => {
                // One setting can serve several keys: the largest count they need.
                match settings.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, needed)) => *needed = (*needed).max(r.needed()),
                    None => settings.push((name, r.needed())),
                }
                format!("`{name}={}`", r.needed())
            }
            (false, None) => "**none built**".to_string(),
        };
        let _ = writeln!(
            body,
            "| {} | {} | {} {} | {} | {} | {} | {} | {} | {} | {} |",
            r.key,
            r.what,
            f(r.per_delivery, 2),
            r.unit,
            f(r.per_key(), 0),
            f(r.limit, 0),
            f(r.share() * 100.0, 0),
            if ok { "yes" } else { "**no**" },
            setting,
            f(r.share_with_setting() * 100.0, 0),
            r.source
        );
    }
    let due_needed = shards_needed(RATE * due, PARTITION_WRU);
    let _ = writeln!(
        body,
        "\nThe due index: {} GSI write units per delivery, {} a second in all; under half a partition's {} each that is {} shards (`WEBHOOKS_DUE_SHARDS={}`; raising it is safe at any time: items keep the shard they were written with until their next transition, and every shard below the setting is read, so only lowering it strands items). The sweeper's reads stay bounded by due items: each tick reads at most its batch cap of items (1000), an even share from each shard; what grows with the shard count is the number of Queries a tick (at least one a shard: {} at {} shards, each at least 0.5 read units, about 0.01 dollars a day), not the items read (section 5).\n",
        f(due, 2),
        f(RATE * due, 0),
        f(PARTITION_WRU, 0),
        due_needed,
        due_needed,
        due_needed,
        due_needed
    );
    let _ = writeln!(
        body,
        "Keys that take a whole hot endpoint (`by_endpoint`, `by_status`) are split by their own settings: with `WEBHOOKS_ENDPOINT_INDEX_SHARDS` or `WEBHOOKS_STATUS_INDEX_SHARDS` above 1, a delivery's entry goes to `{{key}}#{{k}}`, k from the hash of its id, and a listing reads the unsplit key (entries made while the setting was 1) and every shard, merged in the index's order (a Query per shard and bucket, 8 at a time: a page of an endpoint's deliveries in every status at {} shards is {} Queries, each at least 0.5 read units). The tenant's endpoint reads ({} copies' worth) and the failure counter ({}) take a whole hot tenant or endpoint on one base-table item: they are spread over copies of the endpoint item (`WEBHOOKS_ENDPOINT_COPIES`, one setting for both rows: {}; the table's own, fixed when it is created). Every endpoint write keeps the copies in step in its own TransactWriteItems, so a change that answered is what every copy reads (the rule that no attempt starts after a disable holds on each); an endpoint change costs 2 write units per copy more (admin-rate, not per delivery), the slow-lane marker and the adaptive rate are written to each copy when they change, and a failure sum (one BatchGetItem, a read unit on each copy) is read only by a copy holding its share of the threshold (100 / {} = {} failures since its last success), which with every attempt failing opens the breaker within about 100 failures (with one copy, at exactly 100 in a row). Reads on a first try stay 1 Query and 1 GetItem: section 1 is measured at the default of 1.\n",
        shards_needed(RATE * by_endpoint, PARTITION_WRU),
        4 * (1 + shards_needed(RATE * by_endpoint, PARTITION_WRU)),
        shards_needed(RATE * (query_rru + endpoint_get_rru), PARTITION_RRU),
        shards_needed(RATE, PARTITION_WRU),
        shards_needed(RATE * (query_rru + endpoint_get_rru), PARTITION_RRU).max(shards_needed(RATE, PARTITION_WRU)),
        shards_needed(RATE * (query_rru + endpoint_get_rru), PARTITION_RRU).max(shards_needed(RATE, PARTITION_WRU)),
        100u32.div_ceil(
            shards_needed(RATE * (query_rru + endpoint_get_rru), PARTITION_RRU).max(shards_needed(RATE, PARTITION_WRU))
        ),
    );
    // Lambda, SQS, API Gateway.
    let ingest_s = warm.ingest_ms.iter().sum::<f64>() / warm.ingest_ms.len().max(1) as f64 / 1000.0;
    let deliver_s = warm.deliver_ms.iter().sum::<f64>() / warm.deliver_ms.len().max(1) as f64 / 1000.0;
    let _ = writeln!(
        body,
        "Beside DynamoDB, at {} events a second (one endpoint each). Durations measured here against moto ({} ms an ingest call, {} ms a deliver poll of one message), an over-estimate of AWS's; deliver's messages of one batch are handled concurrently, so a batch takes about its slowest receiver.\n",
        f(RATE, 0),
        f(ingest_s * 1000.0, 1),
        f(deliver_s * 1000.0, 1)
    );
    let _ =
        writeln!(body, "| service | what | at {} a second | limit (default quota) | % of limit | source |", f(RATE, 0));
    let _ = writeln!(body, "|---|---|---|---|---|---|");
    let ingest_c = RATE * ingest_s;
    let mut lambda_rows = vec![(
        "Lambda ingest".to_string(),
        "concurrent executions = events a second x duration".to_string(),
        ingest_c,
        LAMBDA_CONCURRENCY,
        "Lambda quotas: 1,000 concurrent executions per account and region, shared by all functions (soft)".to_string(),
    )];
    for r in RECEIVER_SECONDS {
        let c = RATE / BATCH * (deliver_s + r);
        lambda_rows.push((
            format!("Lambda deliver (receiver answers in {} s)", f(r, 1)),
            format!("batches in flight = {} / {} a batch x ({} s + {} s)", f(RATE, 0), f(BATCH, 0), f(deliver_s, 3), f(r, 1)),
            c,
            ESM_BATCHES.min(LAMBDA_CONCURRENCY),
            "SQS event source mapping: 1,000 batches at once at most, +300 a minute (Lambda developer guide); and the account's 1,000".to_string(),
        ));
    }
    lambda_rows.push((
        "SQS standard queue".to_string(),
        "messages in flight = deliveries a second x time held (receiver + deliver)".to_string(),
        RATE * (deliver_s + RECEIVER_SECONDS[1]),
        SQS_IN_FLIGHT,
        "SQS quotas: about 120,000 in flight; send and receive calls a second: nearly unlimited".to_string(),
    ));
    lambda_rows.push((
        "API Gateway HTTP API".to_string(),
        "requests a second (events that come through EventBridge skip it)".to_string(),
        RATE,
        APIGW_RPS,
        "API Gateway quotas: 10,000 requests a second per account and region (soft)".to_string(),
    ));
    for (name, what, value, limit, source) in &lambda_rows {
        let _ = writeln!(
            body,
            "| {name} | {what} | {} | {} | {} | {source} |",
            f(*value, 0),
            f(*limit, 0),
            f(value / limit * 100.0, 0)
        );
    }
    body.push('\n');
    let settings: Vec<String> = settings.iter().map(|(name, n)| format!("`{name}={n}`")).collect();
    let line = if over == 0 {
        format!("every key within 50% at {} deliveries/s with {}", f(RATE, 0), settings.join(", "))
    } else {
        format!(
            "with {}: {over} of {} key patterns still over 50% at {} deliveries/s (no setting built for them): {}",
            settings.join(", "),
            rows.len(),
            f(RATE, 0),
            worst.join(", ")
        )
    };
    (over, line)
}

/// Where a first try's GSI write units go, by index and by request (ingest's PutItems, the
/// claim's and record's UpdateItems), measured; and what the key change not built would save,
/// derived by DynamoDB's GSI write rules (an entry put, deleted or changed in a projected
/// attribute: 1 unit under 1 KB; re-keyed: 2). Returns the dollars per million the warm first
/// try would come to with it.
pub fn gsi_breakdown(body: &mut String, scenarios: &[Scenario]) -> Option<f64> {
    let warm = scenarios.iter().find(|s| s.name == "first try, 1 endpoint (second event)")?;
    let per = warm.delivered.max(1) as f64;
    let by = |index: &str, op: &str| {
        warm.sum(|k| k.0 == "app" && k.1 == DDB && k.2 == op, |o| o.gsi_by_index.get(index).copied().unwrap_or(0.0))
            / per
    };
    let total = crate::cost::price(warm).total();
    // (index, lever, units it saves on a first try, what it trades): what is left, not built.
    let saved = 2.0;
    let levers: [(&str, &str, f64, &str); 1] = [(
        "by_endpoint",
        "entries only for deliveries not delivered on their first try (the record of a delivered first try puts its `delivered` entry)",
        saved,
        "an endpoint's listing and its hold, delete and stats counts would miss deliveries waiting for their first try",
    )];
    let _ = writeln!(
        body,
        "Where a first try's GSI write units go (*{}*, measured by index and request). The shape (docs/storage.md): `due` and `by_endpoint` project keys only, so a claim (which keeps the due time and the `open` range) and a retry's new wait (same range) write no entry there; the event item is under a key found by the event id alone (`EVENT_ID#{{event_id}}`, one item per tenant that uses the id: `GET /v1/events/{{id}}` reads it with one Query of the table), in no index; listings read the items of only the `by_endpoint` entries they list (BatchGetItem, strongly consistent: 1 read unit an item of up to 4 KB); the stats' scheduled and sending counts read the `open` range's items once, eventually consistent. What is left (derived by DynamoDB's GSI write rules; not built):\n",
        warm.name
    );
    let _ =
        writeln!(body, "| index | ingest (PutItem) | claim + record (UpdateItem) | change | saves, units | trade |");
    let _ = writeln!(body, "|---|---|---|---|---|---|");
    for (index, lever, saves, trade) in levers {
        let _ = writeln!(
            body,
            "| `{index}` | {} | {} | {lever} | {} | {trade} |",
            f(by(index, "PutItem"), 0),
            f(by(index, "UpdateItem"), 0),
            f(saves, 0)
        );
    }
    let _ = writeln!(
        body,
        "\n| index | ingest (PutItem) | claim + record (UpdateItem) |\n|---|---|---|\n| `due` | {} | {} |\n| `by_status` | {} | {} |\n",
        f(by("due", "PutItem"), 0),
        f(by("due", "UpdateItem"), 0),
        f(by("by_status", "PutItem"), 0),
        f(by("by_status", "UpdateItem"), 0)
    );
    let floor = total - saved * crate::cost::DDB_WRU;
    let priced = crate::cost::price(warm);
    let units = priced.wru + priced.gsi_wru;
    // What $8 leaves for write units once everything else of the first try is paid, posted to
    // the HTTP API and through ingest's function URL (no API Gateway request).
    let others = total - units * crate::cost::DDB_WRU;
    let budget = (8.0 - others) / crate::cost::DDB_WRU;
    let via_url = priced.total_via(0.0);
    let budget_url = (8.0 - (via_url - units * crate::cost::DDB_WRU)) / crate::cost::DDB_WRU;
    let _ = writeln!(
        body,
        "The {} write units of a first try are the payload item (2 at the median payload), the delivery item's put, claim and record (1 each), the endpoint's delivered counter (1, so that its stats read no history), the due entry's put and delete (1 each) and the `by_endpoint` entry's put and re-key (1, 2). $8 leaves {} write units once the reads, SQS, Lambda and API Gateway of this run are paid ({} through ingest's function URL). The lever above would come to ${} per million ({} through the function URL) and makes an endpoint's listings and counts miss deliveries waiting for their first try; with it, a delivered counter not written per delivery (1) would still leave {} units over $8 via the HTTP API.\n",
        f(units, 0),
        f(budget, 1),
        f(budget_url, 1),
        f(floor, 2),
        f(via_url - saved * crate::cost::DDB_WRU, 2),
        f(units - saved - 1.0 - budget, 1)
    );
    Some(floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_keep_each_key_under_half_its_limit() {
        assert_eq!(shards_needed(40_000.0, PARTITION_WRU), 80);
        assert_eq!(shards_needed(400.0, PARTITION_WRU), 1);
        assert_eq!(shards_needed(0.0, PARTITION_WRU), 1);
        assert_eq!(shards_needed(10_000.0, PARTITION_RRU), 7);
    }
}
