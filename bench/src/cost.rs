//! Measurement 2: dollars per million delivered events, from the counted requests at AWS's
//! published on-demand prices, and the GitHub sample payloads' sizes.

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
/// SQS standard queue, dollars per million requests (each 64 KB chunk of a request is one
/// request; after the first million a month, which is free).
pub const SQS_REQ: f64 = 0.40;
/// Lambda, dollars per million invocations (both architectures).
pub const LAMBDA_REQ: f64 = 0.20;
/// Lambda on arm64 (the template's default architecture), dollars per GB-second (first
/// pricing tier; x86_64 is 0.0000166667).
pub const LAMBDA_GBS: f64 = 0.000_013_333_4;
/// API Gateway HTTP API, dollars per million requests (first 300 million a month).
pub const APIGW_REQ: f64 = 1.00;
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

    /// Mean size, bytes.
    pub fn mean(&self) -> f64 {
        self.files.iter().map(|f| f.1 as f64).sum::<f64>() / self.files.len() as f64
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
    /// SQS requests by the App (sends) per delivered event.
    pub sqs_app: f64,
    /// SQS requests by the poller (non-empty receives + deletes) per delivered event.
    pub sqs_poller: f64,
    /// SQS requests by the sweeper per delivered event.
    pub sqs_sweeper: f64,
    /// Lambda invocations per delivered event (ingest per event, deliver per batch).
    pub invocations: f64,
    /// Lambda GB-seconds per delivered event.
    pub gb_seconds: f64,
    /// Dollars per million delivered events, by line: DynamoDB, SQS, Lambda, API Gateway.
    pub dollars: [f64; 4],
}

impl Priced {
    /// Total dollars per million delivered events.
    pub fn total(&self) -> f64 {
        self.dollars.iter().sum()
    }
}

/// Prices a scenario per delivered event (a delivery that ended 2xx).
pub fn price(s: &Scenario) -> Priced {
    let per = s.delivered.max(1) as f64;
    let wru = s.sum(|k| k.1 == DDB, |o| o.wru) / per;
    let gsi_wru = s.sum(|k| k.1 == DDB, |o| o.gsi_wru) / per;
    let rru = s.sum(|k| k.1 == DDB, |o| o.rru) / per;
    let sqs_of = |label: &str| s.sum(|k| k.0 == label && k.1 == SQS, |o| (o.calls - o.empty) as f64) / per;
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
        dollars,
    }
}

/// Base-table write units per delivered event if the payload were `size` bytes instead of
/// `measured` bytes: every write in the scenarios is to a delivery item, which holds the
/// payload, so every write's item size moves by the difference.
pub fn wru_at(s: &Scenario, measured: usize, size: usize) -> f64 {
    let per = s.delivered.max(1) as f64;
    let units: usize = s
        .ops
        .iter()
        .filter(|(k, _)| k.1 == DDB)
        .flat_map(|(_, o)| o.write_sizes.iter())
        .map(|w| {
            let item = (*w + size).saturating_sub(measured);
            item.div_ceil(1024).max(1)
        })
        .sum();
    units as f64 / per
}
