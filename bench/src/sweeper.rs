//! Measurement 5: one sweeper tick over a table holding many scheduled-but-not-due
//! deliveries and some due ones.
//!
//! The table is filled fast with BatchWriteItem, each item a copy of a delivery item the
//! store itself wrote (through the API; the payload is in the event item), with its id, keys,
//! status, `next_attempt_at` and due-index time changed:
//! - not due: a 3 h wait (over the 900 s SQS limit), so `due_at` = next attempt - 900 s, in the
//!   future;
//! - due: a wait that now fits in the SQS delay (next attempt in 120 s), `due_at` in the past.

use crate::count::Counter;
use crate::requests::{DDB, SQS};
use crate::stack::{self, Res, err};
use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use futures::StreamExt;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use webhooks::service::sweep;
use webhooks::store::keys;

/// What ingest wrote and sent for one event to one endpoint.
#[derive(Debug, Clone)]
pub struct Template {
    /// The delivery item (small: the payload is in the event item).
    pub delivery: HashMap<String, AttributeValue>,
    /// The event item (the payload).
    pub event: HashMap<String, AttributeValue>,
    /// The attempt message's body, as sent (the payload riding along when it fits).
    pub message: String,
    /// The endpoint item (tenant `template`), as the admin API wrote it.
    pub endpoint: HashMap<String, AttributeValue>,
}

/// Ingests one event with `payload` through the API into `table` (one endpoint, nobody
/// listening) and reads back what ingest wrote and sent to `url`.
///
/// # Errors
/// When the API, a read or the receive fails.
pub async fn template(sdk: &aws_config::SdkConfig, table: &str, url: &str, payload: &str) -> Res<Template> {
    let ddb = aws_sdk_dynamodb::Client::new(sdk);
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let app = stack::app(stack::config(table, url), ddb.clone(), sqs.clone())?;
    let endpoint_id = stack::endpoint(&app, "template", "http://127.0.0.1:9/hook", serde_json::Value::Null).await?;
    let accepted = stack::event(&app, "template", &stack::unique("evt"), payload).await?;
    let id = accepted["deliveries"][0]["id"].as_str().ok_or_else(|| err("no delivery created"))?.to_string();
    let event_id = accepted["event_id"].as_str().ok_or_else(|| err("no event id"))?.to_string();
    let get = |pk: String, sk: String| {
        ddb.get_item()
            .table_name(table)
            .key("pk", AttributeValue::S(pk))
            .key("sk", AttributeValue::S(sk))
            .consistent_read(true)
            .send()
    };
    let delivery = get(keys::delivery_pk(&id), keys::DELIVERY_SK.into())
        .await?
        .item
        .ok_or_else(|| err("template delivery not found"))?;
    let (event_pk, event_sk) = keys::event_key("template", &event_id);
    let event = get(event_pk, event_sk).await?.item.ok_or_else(|| err("template event not found"))?;
    let mut message = None;
    for _ in 0..5 {
        let out = sqs.receive_message().queue_url(url).max_number_of_messages(1).wait_time_seconds(1).send().await?;
        if let Some(body) = out.messages.unwrap_or_default().into_iter().find_map(|m| m.body) {
            message = Some(body);
            break;
        }
    }
    let message = message.ok_or_else(|| err("ingest's attempt message did not arrive"))?;
    let endpoint = ddb
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(keys::tenant_pk("template")))
        .key("sk", AttributeValue::S(keys::endpoint_key(&endpoint_id)))
        .consistent_read(true)
        .send()
        .await?
        .item
        .ok_or_else(|| err("template endpoint not found"))?;
    Ok(Template { delivery, event, message, endpoint })
}

/// A delivery item as the store wrote it, for `payload`, in a table of its own.
///
/// # Errors
/// When the API or the read fails.
pub async fn template_item(
    sdk: &aws_config::SdkConfig,
    table: &str,
    url: &str,
    payload: &str,
) -> Res<HashMap<String, AttributeValue>> {
    Ok(template(sdk, table, url, payload).await?.delivery)
}

/// What one sweeper tick did on a filled table.
#[derive(Debug, Clone, Default)]
pub struct SweepRun {
    /// Scheduled, not due items in the table.
    pub not_due: usize,
    /// Due items in the table.
    pub due: usize,
    /// Seconds the fill took.
    pub fill_seconds: f64,
    /// Whether the fill stopped at its time budget.
    pub fill_capped: bool,
    /// Wall time of the tick, ms.
    pub tick_ms: f64,
    /// Items the tick read (its report's `examined`).
    pub examined: usize,
    /// Messages it sent.
    pub enqueued: usize,
    /// Query calls on the due index.
    pub queries: u64,
    /// Items those queries returned.
    pub returned: u64,
    /// Items those queries evaluated (`ScannedCount`: what DynamoDB bills reads by).
    pub scanned: u64,
    /// Read units (eventually consistent GSI reads, 4 KB units).
    pub rru: f64,
    /// UpdateItem calls.
    pub updates: u64,
    /// SendMessageBatch calls.
    pub sends: u64,
    /// Size of the delivery item copied into the table, bytes.
    pub item_bytes: usize,
    /// Due-index shards (the default configuration's).
    pub shards: u32,
    /// Most due items one tick reads (the default configuration's).
    pub cap: usize,
}

#[allow(clippy::too_many_arguments)]
async fn fill(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    template: &HashMap<String, AttributeValue>,
    from: usize,
    count: usize,
    due: bool,
    shards: u32,
    deadline: Instant,
) -> Res<usize> {
    let now = chrono::Utc::now();
    let next = if due { now + chrono::Duration::seconds(120) } else { now + chrono::Duration::hours(3) };
    let due_at = if due { now.timestamp_millis() - 1000 } else { next.timestamp_millis() - 900_000 };
    let next_s = next.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
    let created = template.get("created_at").and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
    let item = |i: usize| {
        let id = format!("dlv_{i:032x}");
        let mut it = template.clone();
        let mut set = |k: &str, v: AttributeValue| {
            it.insert(k.to_string(), v);
        };
        set("pk", AttributeValue::S(keys::delivery_pk(&id)));
        set("id", AttributeValue::S(id.clone()));
        set(keys::DUE_PK, AttributeValue::S(keys::due_pk(keys::due_shard(&id, shards))));
        set(keys::DUE_AT, AttributeValue::N(due_at.to_string()));
        set("status", AttributeValue::S("scheduled".into()));
        set("attempt_count", AttributeValue::N("1".into()));
        set("next_attempt_at", AttributeValue::S(next_s.clone()));
        // Its own by_endpoint entry (the template's partition, its own sort key).
        set(keys::EP_SK, AttributeValue::S(format!("open#{created}#{id}")));
        it
    };
    let batches: Vec<Vec<usize>> = (from..from + count).collect::<Vec<_>>().chunks(25).map(<[usize]>::to_vec).collect();
    let results: Vec<Res<usize>> = futures::stream::iter(batches.into_iter().map(|b| {
        let reqs: Vec<WriteRequest> = b
            .iter()
            .filter_map(|i| {
                PutRequest::builder()
                    .set_item(Some(item(*i)))
                    .build()
                    .ok()
                    .map(|p| WriteRequest::builder().put_request(p).build())
            })
            .collect();
        async move {
            if Instant::now() > deadline {
                return Ok(0);
            }
            let n = reqs.len();
            let mut pending: HashMap<String, Vec<WriteRequest>> = [(table.to_string(), reqs)].into_iter().collect();
            for _ in 0..10 {
                let out = ddb.batch_write_item().set_request_items(Some(pending)).send().await?;
                pending = out.unprocessed_items.unwrap_or_default();
                if pending.values().all(Vec::is_empty) {
                    return Ok(n);
                }
            }
            Err(err("BatchWriteItem left items unprocessed"))
        }
    }))
    .buffer_unordered(4)
    .collect()
    .await;
    let mut written = 0;
    for r in results {
        written += r?;
    }
    Ok(written)
}

/// Fills a fresh table with `not_due` + `due` items (stopping at `budget`) and runs one tick.
///
/// # Errors
/// When a call fails.
pub async fn run(sdk: &aws_config::SdkConfig, not_due: usize, due: usize, budget: Duration) -> Res<SweepRun> {
    let ddb = aws_sdk_dynamodb::Client::new(sdk);
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let (table, url) = stack::table_and_queue(&ddb, &sqs, "sweep").await?;
    let template = template_item(sdk, &table, &url, r#"{"action":"bench","n":1}"#).await?;
    let cfg = stack::config(&table, &url);
    let shards = cfg.due_shards;
    let cap = cfg.sweep_batch;
    let t = Instant::now();
    let deadline = t + budget;
    let due_written = fill(&ddb, &table, &template, 0, due, true, shards, deadline).await?;
    let not_due_written = fill(&ddb, &table, &template, due, not_due, false, shards, deadline).await?;
    let fill_seconds = t.elapsed().as_secs_f64();
    let counter = Counter::new();
    let app =
        stack::app(cfg, stack::counted_ddb(sdk, "sweeper", &counter), stack::counted_sqs(sdk, "sweeper", &counter))?;
    let t = Instant::now();
    let report = sweep::sweep(&app).await?;
    let tick_ms = t.elapsed().as_secs_f64() * 1000.0;
    let ops = counter.take();
    let sum = |svc: &str, op: &str, f: &dyn Fn(&crate::count::OpStats) -> u64| -> u64 {
        ops.iter().filter(|(k, _)| k.1 == svc && k.2 == op).map(|(_, s)| f(s)).sum()
    };
    Ok(SweepRun {
        not_due: not_due_written,
        due: due_written,
        fill_seconds,
        fill_capped: not_due_written < not_due || due_written < due,
        tick_ms,
        examined: report.examined,
        enqueued: report.enqueued,
        queries: sum(DDB, "Query", &|s| s.calls),
        returned: sum(DDB, "Query", &|s| s.returned),
        scanned: sum(DDB, "Query", &|s| s.scanned),
        rru: ops.iter().filter(|(k, _)| k.1 == DDB && k.2 == "Query").map(|(_, s)| s.rru).sum(),
        updates: sum(DDB, "UpdateItem", &|s| s.calls),
        sends: sum(SQS, "SendMessageBatch", &|s| s.calls),
        item_bytes: crate::count::item_size(&template),
        shards,
        cap,
    })
}
