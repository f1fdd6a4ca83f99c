//! Section 11: what checking a payload against its event type's JSON Schema costs at ingest
//! (issue "event-type catalog").
//!
//! Ingest calls `service::event_types::enforce` before it writes anything: with the type in
//! the process's catalog cache (`domain::event_type::Catalog`, kept
//! `WEBHOOKS_EVENT_TYPE_CACHE_SECONDS`, 60 s by default), it parses the payload into a
//! `serde_json::Value` and runs the compiled schema (`jsonschema`, draft 2020-12) on it;
//! otherwise it first reads the catalog entry (one GetItem) and compiles the schema.
//!
//! Two measurements:
//! - requests: a fresh table and queue, the App's DynamoDB and SQS clients counted by the
//!   interceptor of `bench/src/count.rs`; events posted through the HTTP API's router with
//!   `WEBHOOKS_EVENT_TYPES=registered` and the type created (with [`schema`]) through
//!   `POST /v1/event-types`, against the same App in `open` mode with a type the catalog
//!   does not have; the first event of each (cold cache) apart from the next ones (warm);
//! - CPU: the warm path timed in process, microseconds of wall time per event: `enforce` as
//!   ingest calls it (after the counted events, on the same App, so its cache is the one
//!   they warmed; the counter checks it made no AWS request), and its two parts, the parse
//!   and the compiled schema's check (`domain::event_type::violation`), and the schema's
//!   compile (`domain::event_type::compile`).

use crate::cost::{LAMBDA_GBS, LAMBDA_MB};
use crate::count::Counter;
use crate::requests::{DDB, READS, SQS, WRITES};
use crate::stack::{self, Res, err};
use crate::throughput::quantile;
use axum::body::Body;
use axum::http::Request;
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::time::Instant;
use tower::ServiceExt as _;
use webhooks::config::EventTypesMode;
use webhooks::domain::event_type;

/// The event type the schema is registered under.
const TYPE_WITH_SCHEMA: &str = "github.discussion.created";
/// A type the catalog does not have (open mode's baseline).
const TYPE_UNKNOWN: &str = "github.discussion.unlisted";
/// Memory at which Lambda gives a function the equivalent of one vCPU, MB (AWS Lambda
/// developer guide, "Memory and computing power"); below it the CPU share is proportional.
pub(crate) const ONE_VCPU_MB: f64 = 1769.0;

/// A schema for GitHub's `discussion` event (`discussion/created.payload.json`, the median
/// sample), as a producer would register it: the required top-level fields and their types,
/// and the types (some with an `enum`, `pattern` or bound) of 25 nested fields in `discussion`,
/// its `category` and `user`, `repository` and its `owner`, `sender` and `installation`; the
/// user shape shared through `$defs`/`$ref`. `format` is an annotation in draft 2020-12 (the
/// crate asserts it only when asked; ingest does not ask).
pub fn schema() -> Value {
    json!({
        "$schema": event_type::DRAFT_2020_12,
        "title": "GitHub discussion event",
        "type": "object",
        "required": ["action", "discussion", "repository", "sender"],
        "properties": {
            "action": {"type": "string", "enum": ["created", "edited", "deleted", "pinned", "unpinned", "locked", "unlocked", "transferred", "category_changed", "answered", "unanswered", "labeled", "unlabeled", "closed", "reopened"]},
            "discussion": {
                "type": "object",
                "required": ["id", "node_id", "number", "title", "state", "user", "category", "created_at", "html_url"],
                "properties": {
                    "id": {"type": "integer", "minimum": 1},
                    "node_id": {"type": "string", "minLength": 1},
                    "number": {"type": "integer", "minimum": 1},
                    "title": {"type": "string", "maxLength": 1024},
                    "body": {"type": ["string", "null"]},
                    "state": {"type": "string", "enum": ["open", "closed", "locked", "converting", "transferring"]},
                    "locked": {"type": "boolean"},
                    "comments": {"type": "integer", "minimum": 0},
                    "created_at": {"type": "string", "format": "date-time"},
                    "updated_at": {"type": "string", "format": "date-time"},
                    "html_url": {"type": "string", "format": "uri", "pattern": "^https://"},
                    "answer_html_url": {"type": ["string", "null"]},
                    "author_association": {"type": "string", "enum": ["COLLABORATOR", "CONTRIBUTOR", "FIRST_TIMER", "FIRST_TIME_CONTRIBUTOR", "MANNEQUIN", "MEMBER", "NONE", "OWNER"]},
                    "category": {
                        "type": "object",
                        "required": ["id", "name", "slug"],
                        "properties": {
                            "id": {"type": "integer"},
                            "name": {"type": "string"},
                            "slug": {"type": "string", "pattern": "^[a-z0-9-]+$"},
                            "is_answerable": {"type": "boolean"}
                        }
                    },
                    "user": {"$ref": "#/$defs/user"}
                }
            },
            "repository": {
                "type": "object",
                "required": ["id", "name", "full_name", "private", "owner"],
                "properties": {
                    "id": {"type": "integer"},
                    "name": {"type": "string"},
                    "full_name": {"type": "string", "pattern": "^[^/]+/[^/]+$"},
                    "private": {"type": "boolean"},
                    "default_branch": {"type": "string"},
                    "topics": {"type": "array", "items": {"type": "string"}},
                    "owner": {"$ref": "#/$defs/user"}
                }
            },
            "sender": {"$ref": "#/$defs/user"},
            "installation": {
                "type": "object",
                "required": ["id"],
                "properties": {"id": {"type": "integer"}, "node_id": {"type": "string"}}
            }
        },
        "$defs": {
            "user": {
                "type": "object",
                "required": ["login", "id", "type"],
                "properties": {
                    "login": {"type": "string", "minLength": 1},
                    "id": {"type": "integer", "minimum": 1},
                    "type": {"type": "string", "enum": ["User", "Bot", "Organization"]},
                    "site_admin": {"type": "boolean"}
                }
            }
        }
    })
}

/// DynamoDB and SQS calls of ingest per event, by (reads, writes, SQS sends).
#[derive(Debug, Clone, Copy, Default)]
pub struct PerEvent {
    /// DynamoDB read calls (GetItem, Query, ..) per event.
    pub reads: f64,
    /// DynamoDB write calls per event.
    pub writes: f64,
    /// SQS send calls per event.
    pub sends: f64,
    /// Read units per event (DynamoDB's rules for the sizes read, as section 1 counts them).
    pub rru: f64,
    /// Events it is averaged over.
    pub events: u64,
}

/// Section 11's figures. Times are microseconds, sorted.
#[derive(Debug, Clone)]
pub struct Figures {
    /// The payload's name and bytes.
    pub payload: (String, usize),
    /// The schema's bytes as JSON text.
    pub schema_bytes: usize,
    /// `event_type::compile` of the schema, microseconds.
    pub compile_us: Vec<f64>,
    /// Parsing the payload into a `serde_json::Value`, microseconds.
    pub parse_us: Vec<f64>,
    /// The compiled schema's check of the parsed payload (`event_type::violation`), microseconds.
    pub validate_us: Vec<f64>,
    /// `enforce` with the type in the warm cache with its schema (what ingest adds per
    /// event), microseconds.
    pub enforce_us: Vec<f64>,
    /// `enforce` with a type the catalog does not have, open mode, warm cache (what every
    /// event pays without a schema), microseconds.
    pub enforce_open_us: Vec<f64>,
    /// AWS calls the timed `enforce` calls made (expected 0).
    pub timed_calls: u64,
    /// Whether `format` was asserted (a `created_at` that is no date-time refused).
    pub format_asserted: bool,
    /// (label, cold first event, warm events) per mode.
    pub requests: Vec<(String, PerEvent, PerEvent)>,
}

/// Posts an event of `event_type` through the HTTP API's router; returns the status.
async fn post_event(app: &webhooks::App, tenant: &str, event_type: &str, payload: &str) -> Res<u16> {
    let body = format!(
        r#"{{"tenant_id":{},"event_type":{},"id":{},"payload":{payload}}}"#,
        Value::from(tenant),
        Value::from(event_type),
        Value::from(stack::unique("evt"))
    );
    let req = Request::builder()
        .method("POST")
        .uri("/v1/events")
        .header("content-type", "application/json")
        .body(Body::from(body))?;
    let resp = webhooks::http::api::router(app.clone()).oneshot(req).await?;
    Ok(resp.status().as_u16())
}

pub(crate) fn per_event(counter: &Counter, events: u64) -> PerEvent {
    let ops = counter.take();
    let calls = |svc: &str, names: &[&str]| {
        ops.iter()
            .filter(|(k, _)| k.0 == "app" && k.1 == svc && names.contains(&k.2.as_str()))
            .map(|(_, o)| o.calls)
            .sum::<u64>() as f64
            / events.max(1) as f64
    };
    PerEvent {
        reads: calls(DDB, &READS),
        writes: calls(DDB, &WRITES),
        sends: calls(SQS, &["SendMessage", "SendMessageBatch"]),
        rru: ops.iter().filter(|(k, _)| k.0 == "app" && k.1 == DDB).map(|(_, o)| o.rru).sum::<f64>()
            / events.max(1) as f64,
        events,
    }
}

/// Posts one cold event then `warm` more of `event_type`, expecting 202 each; returns the
/// (cold, warm) calls per event.
async fn count_events(
    app: &webhooks::App,
    counter: &Counter,
    event_type: &str,
    payload: &str,
    warm: u64,
) -> Res<(PerEvent, PerEvent)> {
    let _ = counter.take();
    let mut cold = PerEvent::default();
    for i in 0..=warm {
        let status = post_event(app, "t", event_type, payload).await?;
        if status != 202 {
            return Err(err(format!("validation: event of {event_type} answered {status}")));
        }
        if i == 0 {
            cold = per_event(counter, 1);
        }
    }
    Ok((cold, per_event(counter, warm)))
}

fn time_us(n: usize, mut f: impl FnMut()) -> Vec<f64> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f();
        out.push(t.elapsed().as_secs_f64() * 1e6);
    }
    out.sort_by(f64::total_cmp);
    out
}

async fn time_enforce(app: &webhooks::App, event_type: &str, payload: &str, n: usize) -> Res<Vec<f64>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        // Ingest parses the payload once (with its depth limit) and the check reads that value:
        // the parse is timed with the check, as before the parse moved out of it.
        let t = Instant::now();
        let value = webhooks::domain::payload::parse(payload).map_err(|e| e.to_string())?;
        webhooks::service::event_types::enforce(app, event_type, &value).await?;
        out.push(t.elapsed().as_secs_f64() * 1e6);
    }
    out.sort_by(f64::total_cmp);
    Ok(out)
}

/// Runs section 11 with `payload` (the median GitHub sample, `name`).
///
/// # Errors
/// When the schema does not compile or refuses the payload, an event is refused, or the
/// emulator fails.
pub async fn measure(sdk: &aws_config::SdkConfig, quick: bool, name: &str, payload: &str) -> Res<Figures> {
    let (warm, n, compiles) = if quick { (5, 500, 20) } else { (20, 5000, 200) };
    let schema = schema();
    let value: Value = serde_json::from_str(payload)?;
    let validator = event_type::compile(&schema).map_err(|e| err(format!("validation: the schema: {e}")))?;
    if let Some(v) = event_type::violation(&validator, &value) {
        return Err(err(format!("validation: the schema refuses the median payload: {v}")));
    }
    let mut not_a_date = value.clone();
    not_a_date["discussion"]["created_at"] = Value::from("not a date");
    let format_asserted = event_type::violation(&validator, &not_a_date).is_some();

    // Requests: registered mode with the type and its schema, then open mode with a type the
    // catalog does not have, each on its own App (its own cache) over one table.
    let raw_ddb = aws_sdk_dynamodb::Client::new(sdk);
    let raw_sqs = aws_sdk_sqs::Client::new(sdk);
    let (table, url) = stack::table_and_queue(&raw_ddb, &raw_sqs, "catalog").await?;
    let counter = Counter::new();
    let mut cfg = stack::config(&table, &url);
    cfg.event_types = EventTypesMode::Registered;
    let registered =
        stack::app(cfg, stack::counted_ddb(sdk, "app", &counter), stack::counted_sqs(sdk, "app", &counter))?;
    let open = stack::app(
        stack::config(&table, &url),
        stack::counted_ddb(sdk, "app", &counter),
        stack::counted_sqs(sdk, "app", &counter),
    )?;
    let receiver = stack::Receiver::start(0).await?;
    let result = async {
        stack::endpoint(&registered, "t", &receiver.url, Value::Null).await?;
        let draft = json!({"name": TYPE_WITH_SCHEMA, "description": "GitHub discussion events", "schema": schema, "examples": [value]});
        let (status, v) = stack::call(&registered, "POST", "/v1/event-types", &draft).await?;
        if status != 201 {
            return Err(err(format!("validation: create event type: {status} {v}")));
        }
        let (r_cold, r_warm) = count_events(&registered, &counter, TYPE_WITH_SCHEMA, payload, warm).await?;
        let (o_cold, o_warm) = count_events(&open, &counter, TYPE_UNKNOWN, payload, warm).await?;

        // CPU, warm: on the Apps whose caches the events above filled.
        let _ = counter.take();
        let _ = time_enforce(&registered, TYPE_WITH_SCHEMA, payload, n / 10).await?;
        let enforce_us = time_enforce(&registered, TYPE_WITH_SCHEMA, payload, n).await?;
        let enforce_open_us = time_enforce(&open, TYPE_UNKNOWN, payload, n).await?;
        let timed_calls: u64 = counter.take().values().map(|o| o.calls).sum();
        Ok::<_, stack::Error>((
            vec![
                ("`registered`, type in the catalog with the schema".to_string(), r_cold, r_warm),
                ("`open` (the default), type not in the catalog".to_string(), o_cold, o_warm),
            ],
            enforce_us,
            enforce_open_us,
            timed_calls,
        ))
    }
    .await;
    receiver.stop();
    let (requests, enforce_us, enforce_open_us, timed_calls) = result?;

    let parse_us = time_us(n, || {
        let _ = std::hint::black_box(serde_json::from_str::<Value>(std::hint::black_box(payload)));
    });
    let validate_us = time_us(n, || {
        let _ = std::hint::black_box(event_type::violation(&validator, std::hint::black_box(&value)));
    });
    let compile_us = time_us(compiles, || {
        let _ = std::hint::black_box(event_type::compile(std::hint::black_box(&schema)));
    });
    Ok(Figures {
        payload: (name.to_string(), payload.len()),
        schema_bytes: schema.to_string().len(),
        compile_us,
        parse_us,
        validate_us,
        enforce_us,
        enforce_open_us,
        timed_calls,
        format_asserted,
        requests,
    })
}

pub(crate) fn f(v: f64, digits: usize) -> String {
    format!("{:.digits$}", v + 0.0)
}

/// Dollars per million events for `us` microseconds of Lambda duration at the template's
/// memory ([`LAMBDA_MB`]) and arm64 price ([`LAMBDA_GBS`]), as `cost.rs` prices Lambda.
pub(crate) fn dollars_per_million(us: f64) -> f64 {
    us / 1e6 * (LAMBDA_MB / 1024.0) * LAMBDA_GBS * 1e6
}

/// A table of ingest's AWS calls per event: one row per (label, first event, next events)
/// and each of the two `events` headings; `first` names the first column.
pub(crate) fn requests_table(body: &mut String, first: &str, events: [&str; 2], rows: &[(String, PerEvent, PerEvent)]) {
    let _ = writeln!(body, "| {first} | event | events | DynamoDB reads | DynamoDB writes | SQS sends | read units |");
    let _ = writeln!(body, "|---|---|---|---|---|---|---|");
    for (label, cold, warm) in rows {
        for (which, p) in [(events[0], cold), (events[1], warm)] {
            let _ = writeln!(
                body,
                "| {label} | {which} | {} | {} | {} | {} | {} |",
                p.events,
                f(p.reads, 2),
                f(p.writes, 2),
                f(p.sends, 2),
                f(p.rru, 2)
            );
        }
    }
    body.push('\n');
}

/// Writes section 11 and its summary row.
pub fn section(body: &mut String, summary: &mut Vec<[String; 4]>, fig: &Figures) {
    let _ = writeln!(body, "## 11. Schema validation at ingest (event-type catalog)\n");
    let n = fig.enforce_us.len();
    let _ = writeln!(
        body,
        "How: `bench/src/validation.rs`. Payload: the median GitHub sample `{}` ({} bytes). Schema: `validation::schema()`, {} bytes of JSON, draft 2020-12, as a producer would register it for GitHub's `discussion` events: the 4 required top-level fields and their types, and the types of 25 nested fields (some with an `enum`, `pattern`, `minimum` or `maxLength`), the user shape shared through `$defs`/`$ref`; `format` is an annotation in draft 2020-12 unless the validator is asked to assert it, and ingest (`domain::event_type::compile`) does not ask: {}. The type is created through `POST /v1/event-types` with the payload as its example, on a stack with `WEBHOOKS_EVENT_TYPES=registered`; events go through the HTTP API's router (in process), their DynamoDB and SQS calls counted by the interceptor of section 1 (ingest only: deliver does not read the catalog). Times: {n} calls each on this machine, one core, in microseconds of wall time, after the counted events on the same App (its catalog cache warm: the timed calls made {} AWS requests); `enforce` is `service::event_types::enforce`, what ingest calls before it writes anything: the cache lookup, the parse of the payload into a `serde_json::Value`, and the compiled schema's check (`domain::event_type::violation`, the first error if any).\n",
        fig.payload.0,
        fig.payload.1,
        fig.schema_bytes,
        if fig.format_asserted {
            "yet here it was asserted (a `created_at` of \"not a date\" is refused)"
        } else {
            "a `created_at` of \"not a date\" passes"
        },
        fig.timed_calls
    );
    let _ = writeln!(body, "| what | runs | p50, µs | p99, µs | max, µs |");
    let _ = writeln!(body, "|---|---|---|---|---|");
    let rows: [(&str, &Vec<f64>); 5] = [
        ("`enforce`, type with the schema, warm cache (what ingest adds per event)", &fig.enforce_us),
        ("`enforce`, `open` mode, type not in the catalog, warm cache (no schema)", &fig.enforce_open_us),
        ("of which: parse the payload (`serde_json::from_str` to a `Value`)", &fig.parse_us),
        ("of which: the compiled schema's check (`event_type::violation`)", &fig.validate_us),
        ("compile the schema (`event_type::compile`; once per type and process per cache period)", &fig.compile_us),
    ];
    for (what, us) in rows {
        let _ = writeln!(
            body,
            "| {what} | {} | {} | {} | {} |",
            us.len(),
            f(quantile(us, 0.5), 1),
            f(quantile(us, 0.99), 1),
            f(us.last().copied().unwrap_or(f64::NAN), 1)
        );
    }
    body.push('\n');
    let _ = writeln!(
        body,
        "AWS calls of ingest per event, by mode (the first event of an App reads the catalog: its cache is cold):\n"
    );
    requests_table(body, "mode", ["first (cold cache)", "next ones (warm cache)"], &fig.requests);
    let warm_extra = match (fig.requests.first(), fig.requests.get(1)) {
        (Some(r), Some(o)) => Some((r.2.reads + r.2.writes) - (o.2.reads + o.2.writes)),
        _ => None,
    };
    let p50 = quantile(&fig.enforce_us, 0.5);
    let p99 = quantile(&fig.enforce_us, 0.99);
    let added = p50 - quantile(&fig.enforce_open_us, 0.5);
    let scale = ONE_VCPU_MB / LAMBDA_MB;
    let cold_rru = match fig.requests.first() {
        Some((_, cold, warm)) => f(cold.rru - warm.rru, 2),
        None => "(not measured)".into(),
    };
    let extra = match warm_extra {
        Some(x) => format!("{} extra calls per warm event in `registered` mode over `open` without a schema", f(x, 2)),
        None => "not measured".into(),
    };
    let _ = writeln!(
        body,
        "Dollars: {added} µs (the p50 of `enforce` with the schema less the p50 without) of ingest's Lambda duration at {LAMBDA_MB} MB, priced as section 2 prices Lambda (arm64, ${LAMBDA_GBS} per GB-second), is ${dollars} per million events. Lambda bills duration in 1 ms steps, so a few tens of µs move a given invocation's bill by one step or none: on average, by the time added. Lambda gives a function CPU in proportion to its memory, one vCPU at {ONE_VCPU_MB} MB (AWS Lambda developer guide), so at {LAMBDA_MB} MB the same work may take up to {scale:.1} times this machine's single-core time: ${scaled} per million at that bound. Beside it the catalog's own reads: with the cache warm no DynamoDB request per event ({extra}); per process and type, one GetItem ({cold_rru} read units more than a warm event here: the entry holds the schema and its examples, the median payload among them) and one compile per `WEBHOOKS_EVENT_TYPE_CACHE_SECONDS` (60 s by default), when the cache entry goes stale.\n",
        added = f(added, 1),
        dollars = f(dollars_per_million(added), 5),
        scaled = f(dollars_per_million(added * scale), 5),
    );
    summary.push([
        "schema validation at ingest, median GitHub payload (section 11)".into(),
        format!(
            "p50 {} µs, p99 {} µs per event (`enforce`, parse + check); compile {} µs (once per type, process and cache period); {} extra DynamoDB requests per event, warm cache, `registered`; ${} per million events (${} at Lambda's 256 MB CPU share)",
            f(p50, 1),
            f(p99, 1),
            f(quantile(&fig.compile_us, 0.5), 0),
            warm_extra.map_or_else(|| "(not measured)".to_string(), |x| f(x, 2)),
            f(dollars_per_million(added), 5),
            f(dollars_per_million(added * scale), 5),
        ),
        "none set".into(),
        "reported".into(),
    ]);
}
