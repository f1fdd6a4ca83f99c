//! Measurement 2: dollars per million delivered events, from the counted requests at AWS's
//! published on-demand prices, and the GitHub sample payloads' sizes.

use crate::count::{PayloadSize, READ_UNIT, SQS_CHUNK, WRITE_UNIT};
use crate::requests::{DDB, SQS, Scenario};
use crate::stack::Res;
use std::path::Path;

/// Region the prices are for.
pub const REGION: &str = "us-east-1";
/// When the prices below were last changed by AWS / checked.
pub const PRICE_DATE: &str = "AWS list prices in force since 2024-11-01 (the DynamoDB on-demand price cut), as published for us-east-1; not fetched at bench time (the bench machine has no internet), last checked 2026-11-29";
/// DynamoDB on-demand, dollars per million write request units (1 KB each).
pub const DDB_WRU: f64 = 0.625;
/// DynamoDB on-demand, dollars per million read request units (4 KB strongly consistent,
/// or 2 x 4 KB eventually consistent).
pub const DDB_RRU: f64 = 0.125;
/// SQS standard queue, dollars per million requests (each 64 KB chunk of a request's payload
/// is one request; after the first million a month, which is free).
pub const SQS_REQ: f64 = 0.40;
/// Lambda, dollars per million invocations (both architectures).
pub const LAMBDA_REQ: f64 = 0.20;
/// Lambda on arm64 (the template's default architecture), dollars per GB-second (first
/// pricing tier; x86_64 is 0.0000166667).
pub const LAMBDA_GBS: f64 = 0.000_013_333_4;
/// API Gateway HTTP API, dollars per million requests (first 300 million a month).
pub const APIGW_REQ: f64 = 1.00;
/// EventBridge custom events, dollars per million PutEvents entries (each 64 KB chunk of an
/// entry is billed as one): what a producer pays to hand ingest an event through the bus
/// instead of the HTTP API (the rule's Lambda target adds no charge).
pub const EVENTBRIDGE_PUT: f64 = 1.00;
/// The memory the functions are priced at, MB: `MemorySize` in `infra/template.yaml`'s
/// function globals.
pub const LAMBDA_MB: f64 = 256.0;

/// The GitHub sample payloads: (path relative to the folder, bytes).
#[derive(Debug, Clone)]
pub struct Samples {
    /// (name, size, text), sorted by size.
    pub files: Vec<(String, usize, String)>,
}

impl Samples {
    /// Reads every `*.json` under `dir` that parses as JSON.
    ///
    /// # Errors
    /// When the folder cannot be read or holds no sample.
    pub fn load(dir: &Path) -> Res<Self> {
        let mut files = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d)? {
                let p = entry?.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|e| e == "json") {
                    let text = std::fs::read_to_string(&p)?;
                    if serde_json::from_str::<serde_json::Value>(&text).is_ok() {
                        let name = p.strip_prefix(dir).unwrap_or(&p).to_string_lossy().to_string();
                        files.push((name, text.len(), text));
                    }
                }
            }
        }
        if files.is_empty() {
            return Err(crate::stack::err(format!("no JSON samples in {}", dir.display())));
        }
        files.sort_by_key(|f| f.1);
        Ok(Self { files })
    }

    /// The sample at quantile `q` of size.
    pub fn at(&self, q: f64) -> &(String, usize, String) {
        let i = ((self.files.len() - 1) as f64 * q).round() as usize;
        &self.files[i.min(self.files.len() - 1)]
    }
}

/// One scenario priced.
#[derive(Debug, Clone)]
pub struct Priced {
    /// Scenario name.
    pub name: String,
    /// Per delivered event (one delivery to one endpoint), in units.
    pub wru: f64,
    /// GSI write units per delivered event.
    pub gsi_wru: f64,
    /// Read units per delivered event.
    pub rru: f64,
    /// SQS requests by the App (sends) per delivered event, as billed (64 KB chunks).
    pub sqs_app: f64,
    /// SQS requests by the poller (non-empty receives + deletes) per delivered event, as billed.
    pub sqs_poller: f64,
    /// SQS requests by the sweeper per delivered event, as billed.
    pub sqs_sweeper: f64,
    /// Lambda invocations per delivered event (ingest per event, deliver per batch).
    pub invocations: f64,
    /// Lambda GB-seconds per delivered event.
    pub gb_seconds: f64,
    /// Events ingested per delivered event (each one HTTP API request).
    pub events: f64,
    /// Dollars per million delivered events, by line: DynamoDB, SQS, Lambda, API Gateway.
    pub dollars: [f64; 4],
}

impl Priced {
    /// Total dollars per million delivered events, events posted to the HTTP API.
    pub fn total(&self) -> f64 {
        self.dollars.iter().sum()
    }

    /// Total dollars per million delivered events with the events handed to ingest another way
    /// that costs `per_million` dollars per million events instead of the HTTP API's
    /// ([`APIGW_REQ`]): 0 for ingest's function URL (`IngestFunctionUrl=enabled`, no price of
    /// its own), [`EVENTBRIDGE_PUT`] for the bus. Nothing else moves (the same function and
    /// invocation).
    pub fn total_via(&self, per_million: f64) -> f64 {
        self.total() - self.dollars[3] + self.events * per_million
    }
}

/// Prices a scenario per delivered event (a delivery that ended 2xx), as measured.
pub fn price(s: &Scenario) -> Priced {
    price_at(s, None)
}

/// Prices a scenario per delivered event as if every event's payload were `payload` (its raw
/// and stored sizes) instead of the measured one (`None`: as measured). What the payload's
/// size moves is re-priced item by item and request by request: each item written or read
/// that holds the payload (the event item, with the payload zstd-compressed: written once at
/// ingest; read by a GetItem where deliver has to) and each SQS request whose messages carry it (64 KB chunks); everything
/// else (the delivery item's writes, the GSI entries, the endpoints Query, Lambda's
/// durations) stays as measured.
pub fn price_at(s: &Scenario, payload: Option<PayloadSize>) -> Priced {
    let per = s.delivered.max(1) as f64;
    let ddb = |k: &crate::count::OpKey| k.1 == DDB;
    let wru = s.sum(ddb, |o| o.writes.iter().map(|w| w.units(WRITE_UNIT, payload)).sum()) / per;
    let gsi_wru = s.sum(ddb, |o| o.gsi_wru) / per;
    let rru = s.sum(ddb, |o| o.reads.iter().map(|r| r.units(READ_UNIT, payload)).sum()) / per;
    let sqs_of = |label: &str| {
        s.sum(|k| k.0 == label && k.1 == SQS, |o| o.sqs.iter().map(|r| r.units(SQS_CHUNK, payload)).sum()) / per
    };
    let batches = s.batch_sizes.len() as f64;
    let invocations = (s.events as f64 + batches + s.sweeps as f64) / per;
    let gb = LAMBDA_MB / 1024.0;
    let ms: f64 =
        s.ingest_ms.iter().map(|m| m.ceil()).sum::<f64>() + s.deliver_ms.iter().map(|m| m.ceil()).sum::<f64>();
    let gb_seconds = ms / 1000.0 * gb / per;
    let (sqs_app, sqs_poller, sqs_sweeper) = (sqs_of("app"), sqs_of("poller"), sqs_of("sweeper"));
    let dollars = [
        (wru + gsi_wru) * DDB_WRU + rru * DDB_RRU,
        (sqs_app + sqs_poller + sqs_sweeper) * SQS_REQ,
        invocations * LAMBDA_REQ + gb_seconds * LAMBDA_GBS * 1e6,
        s.events as f64 / per * APIGW_REQ,
    ];
    let events = s.events as f64 / per;
    Priced {
        name: s.name.clone(),
        wru,
        gsi_wru,
        rru,
        sqs_app,
        sqs_poller,
        sqs_sweeper,
        invocations,
        gb_seconds,
        events,
        dollars,
    }
}

/// Where the payload is billed in a scenario, per delivered event: (items written that hold
/// it, of them in a transaction, items read that hold it, SQS messages that carry it).
pub fn payload_touches(s: &Scenario) -> (f64, f64, f64, f64) {
    let per = s.delivered.max(1) as f64;
    let ddb = |k: &crate::count::OpKey| k.1 == DDB;
    let written = s.sum(ddb, |o| o.writes.iter().map(|w| w.payloads as f64).sum());
    let in_tx = s.sum(ddb, |o| o.writes.iter().filter(|w| w.factor > 1.0).map(|w| w.payloads as f64).sum());
    let read = s.sum(ddb, |o| o.reads.iter().map(|r| r.payloads as f64).sum());
    let sent = s.sum(|k| k.1 == SQS, |o| o.sqs.iter().map(|r| r.payloads as f64).sum());
    (written / per, in_tx / per, read / per, sent / per)
}

/// The largest SQS request of the scenarios (message bytes) and the chunks it was billed as.
pub fn largest_sqs_request(scenarios: &[Scenario]) -> (usize, f64) {
    scenarios
        .iter()
        .flat_map(|s| s.ops.iter().filter(|(k, _)| k.1 == SQS).flat_map(|(_, o)| o.sqs.iter()))
        .map(|r| (r.bytes, r.units(SQS_CHUNK, None)))
        .max_by_key(|r| r.0)
        .unwrap_or((0, 1.0))
}
