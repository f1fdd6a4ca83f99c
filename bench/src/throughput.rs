//! Measurements 3 and 4: throughput and latency through the local runtime (HTTP API, SQS
//! pollers feeding deliver, loopback receiver), and the emulator's own ceiling for the
//! minimal call sequence of one delivery.

use crate::count::ServerErrors;
use crate::stack::{self, Receiver, Res, err};
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, SendMessageBatchRequestEntry};
use futures::StreamExt;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use webhooks::store::keys;
use webhooks_local::Options;

/// Pollers the local runtime runs (the event source mapping's concurrency).
pub const POLLERS: usize = 4;
/// Concurrent producers posting events.
pub const PRODUCERS: usize = 8;

/// One throughput run.
#[derive(Debug, Clone)]
pub struct Throughput {
    /// Endpoints per event.
    pub endpoints: usize,
    /// Events posted.
    pub events: usize,
    /// Deliveries that arrived (2xx) within the deadline.
    pub delivered: u64,
    /// From the first post to the last arrival, seconds.
    pub seconds: f64,
    /// The ceiling's copies: event item, delivery item and attempt message, bytes.
    pub sizes: Option<[usize; 3]>,
    /// HTTP 5xx answers of the emulator, by operation (each retried by the SDK).
    pub server_errors: BTreeMap<String, u64>,
}

impl Throughput {
    /// Events per second (all of an event's deliveries arrived).
    pub fn events_per_s(&self) -> f64 {
        self.delivered as f64 / self.endpoints as f64 / self.seconds
    }
    /// Deliveries per second.
    pub fn deliveries_per_s(&self) -> f64 {
        self.delivered as f64 / self.seconds
    }
}

struct Local {
    running: webhooks_local::Running,
    base: String,
    receiver: Receiver,
    tenant: String,
    errors: ServerErrors,
}

async fn local(sdk: &aws_config::SdkConfig, endpoints: usize) -> Res<Local> {
    let errors = ServerErrors::default();
    let (ddb, sqs) = stack::retrying_clients(sdk, &errors);
    let (table, url) = stack::table_and_queue(&ddb, &sqs, "tput").await?;
    let app = stack::app(stack::config(&table, &url), ddb, sqs.clone())?;
    let receiver = Receiver::start(0).await?;
    let tenant = "tp".to_string();
    for _ in 0..endpoints {
        stack::endpoint(&app, &tenant, &receiver.url, serde_json::Value::Null).await?;
    }
    let options = Options {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        pollers: POLLERS,
        slow_pollers: 0,
        poll_wait_seconds: 1,
        sweeper: false,
    };
    let running = webhooks_local::start(app, sqs, options).await.map_err(|e| err(e.to_string()))?;
    Ok(Local { base: format!("http://{}", running.addr), running, receiver, tenant, errors })
}

fn event_body(tenant: &str, id: &str, payload: &str) -> String {
    format!(
        r#"{{"tenant_id":{},"event_type":"bench.event","id":{},"payload":{payload}}}"#,
        serde_json::Value::from(tenant),
        serde_json::Value::from(id)
    )
}

/// A reqwest client for the bench's own calls, on the ring provider the service uses.
fn http_client() -> Res<reqwest::Client> {
    webhooks::sender::install_tls_provider();
    Ok(reqwest::Client::builder().build()?)
}

async fn post(http: &reqwest::Client, base: &str, body: String) -> Res<()> {
    let r = http.post(format!("{base}/v1/events")).header("content-type", "application/json").body(body).send().await?;
    if r.status().as_u16() != 202 {
        return Err(err(format!("post event: {}", r.status())));
    }
    Ok(())
}

/// Posts `events` events (PRODUCERS at a time) to a tenant with `endpoints` endpoints and
/// waits (at most `limit`) for every delivery to reach the receiver.
///
/// # Errors
/// When the stack cannot start or a post fails.
pub async fn pipeline(
    sdk: &aws_config::SdkConfig,
    endpoints: usize,
    events: usize,
    payload: &str,
    limit: Duration,
) -> Res<Throughput> {
    let l = local(sdk, endpoints).await?;
    let http = http_client()?;
    let want = (events * endpoints) as u64;
    let t0 = Instant::now();
    let results: Vec<Res<()>> = futures::stream::iter((0..events).map(|_| {
        let body = event_body(&l.tenant, &stack::unique("evt"), payload);
        let (http, base) = (&http, l.base.as_str());
        async move { post(http, base, body).await }
    }))
    .buffer_unordered(PRODUCERS)
    .collect()
    .await;
    let deadline = t0 + limit;
    while l.receiver.ok() < want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let last = l.receiver.hits().iter().map(|h| h.at).max().unwrap_or_else(Instant::now);
    let out = Throughput {
        endpoints,
        events,
        delivered: l.receiver.ok(),
        seconds: last.duration_since(t0).as_secs_f64(),
        sizes: None,
        server_errors: l.errors.by_operation(),
    };
    l.running.stop().await;
    l.receiver.stop();
    results.into_iter().collect::<Res<Vec<()>>>()?;
    Ok(out)
}

/// Latency of ingest -> first attempt at the receiver for `events` events posted one every
/// `every` (open loop), in ms, sorted; and the emulator's 5xx answers by operation.
///
/// # Errors
/// When the stack cannot start or a post fails.
pub async fn latency(
    sdk: &aws_config::SdkConfig,
    events: usize,
    every: Duration,
    payload: &str,
) -> Res<(Vec<f64>, BTreeMap<String, u64>)> {
    let l = local(sdk, 1).await?;
    let http = http_client()?;
    let mut sent = Vec::new();
    let mut tasks = Vec::new();
    let mut tick = tokio::time::interval(every);
    for _ in 0..events {
        tick.tick().await;
        let id = stack::unique("evt");
        let body = event_body(&l.tenant, &id, payload);
        sent.push((id, Instant::now()));
        let (http, base) = (http.clone(), l.base.clone());
        tasks.push(tokio::spawn(async move { post(&http, &base, body).await }));
    }
    for t in tasks {
        t.await??;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while l.receiver.ok() < events as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let first = l.receiver.first_arrivals();
    let mut lat: Vec<f64> = sent
        .iter()
        .filter_map(|(id, at)| first.get(id).map(|f| f.duration_since(*at).as_secs_f64() * 1000.0))
        .collect();
    l.running.stop().await;
    l.receiver.stop();
    if lat.len() < events {
        return Err(err(format!("latency: {} of {events} events arrived within 30 s", lat.len())));
    }
    lat.sort_by(f64::total_cmp);
    Ok((lat, l.errors.by_operation()))
}

/// The q-quantile (nearest rank) of sorted values.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The emulator's ceiling: `n` sequences of ingest's strongly consistent Query of the
/// tenant's endpoints, the puts (a PutItem of the event item, then one of the delivery item,
/// both conditional: ingest's write requests), SendMessageBatch (1 entry), ReceiveMessage (up
/// to 10), deliver's strongly consistent GetItem of the endpoint, UpdateItem (claim of the
/// delivery item, conditional, ALL_NEW), UpdateItem (record), UpdateItem (the endpoint's
/// delivered counter) and DeleteMessageBatch: every
/// AWS call the pipeline makes for a first try, with the same concurrency as the
/// pipeline (PRODUCERS putting and sending, POLLERS receiving) and items and messages of the
/// same shape and size (copies of what ingest wrote and sent for `payload`: the
/// payload-sized event item, the small delivery item, the attempt message with the payload
/// riding along). Returns sequences per second.
///
/// # Errors
/// When a call fails.
pub async fn ceiling(sdk: &aws_config::SdkConfig, n: usize, payload: &str) -> Res<Throughput> {
    let errors = ServerErrors::default();
    let (ddb, sqs) = stack::retrying_clients(sdk, &errors);
    let (table, url) = stack::table_and_queue(&ddb, &sqs, "ceil").await?;
    // The template comes from a table and queue of its own, so its attempt message does not
    // land in the queue measured here.
    let (t_table, t_url) = stack::table_and_queue(&ddb, &sqs, "ceil-template").await?;
    let template = crate::sweeper::template(sdk, &t_table, &t_url, payload).await?;
    let message = webhooks::queue::decode(&template.message)?;
    let tenant = template.event.get("tenant_id").and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
    // The tenant's endpoint, for the reads ingest and deliver make.
    ddb.put_item().table_name(table.as_str()).set_item(Some(template.endpoint.clone())).send().await?;
    let endpoint_key: HashMap<String, AttributeValue> = template
        .endpoint
        .iter()
        .filter(|(k, _)| *k == keys::PK || *k == keys::SK)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let done = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(120);
    let mut consumers = Vec::new();
    for _ in 0..POLLERS {
        let (ddb, sqs, table, url, done) = (ddb.clone(), sqs.clone(), table.clone(), url.clone(), done.clone());
        let endpoint_key = endpoint_key.clone();
        consumers.push(tokio::spawn(async move {
            let mut last_batch = t0;
            while done.load(Ordering::SeqCst) < n as u64 && Instant::now() < deadline {
                let out = sqs
                    .receive_message()
                    .queue_url(&url)
                    .max_number_of_messages(10)
                    .wait_time_seconds(1)
                    .send()
                    .await?;
                let msgs = out.messages.unwrap_or_default();
                if msgs.is_empty() {
                    continue;
                }
                let work = msgs.iter().map(|m| {
                    // The one thing the consumer reads from the message: which delivery.
                    let id = webhooks::queue::decode(m.body.as_deref().unwrap_or_default())
                        .map(|msg| msg.delivery_id.into_string())
                        .unwrap_or_default();
                    let (ddb, table, endpoint_key) = (&ddb, &table, &endpoint_key);
                    async move {
                        ddb.get_item()
                            .table_name(table)
                            .set_key(Some(endpoint_key.clone()))
                            .consistent_read(true)
                            .send()
                            .await?;
                        let key = |u: aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder| {
                            u.table_name(table)
                                .key(keys::PK, AttributeValue::S(keys::delivery_pk(&id)))
                                .key(keys::SK, AttributeValue::S(keys::DELIVERY_SK.into()))
                        };
                        key(ddb.update_item())
                            .update_expression("SET #s = :sending, attempt_count = :one, lease_until = :l")
                            .condition_expression("#s = :scheduled AND attempt_count = :zero")
                            .expression_attribute_names("#s", "status")
                            .expression_attribute_values(":sending", AttributeValue::S("sending".into()))
                            .expression_attribute_values(":scheduled", AttributeValue::S("scheduled".into()))
                            .expression_attribute_values(":one", AttributeValue::N("1".into()))
                            .expression_attribute_values(":zero", AttributeValue::N("0".into()))
                            .expression_attribute_values(":l", AttributeValue::S(chrono::Utc::now().to_rfc3339()))
                            .return_values(ReturnValue::AllNew)
                            .send()
                            .await?;
                        key(ddb.update_item())
                            .update_expression("SET #s = :delivered, attempts = list_append(if_not_exists(attempts, :empty), :a) REMOVE due_pk, due_at, lease_until")
                            .condition_expression("#s = :sending AND attempt_count = :one")
                            .expression_attribute_names("#s", "status")
                            .expression_attribute_values(":delivered", AttributeValue::S("delivered".into()))
                            .expression_attribute_values(":sending", AttributeValue::S("sending".into()))
                            .expression_attribute_values(":one", AttributeValue::N("1".into()))
                            .expression_attribute_values(":empty", AttributeValue::L(vec![]))
                            .expression_attribute_values(":a", AttributeValue::L(vec![AttributeValue::M(
                                [("attempt".to_string(), AttributeValue::N("1".into())),
                                 ("status_code".to_string(), AttributeValue::N("200".into())),
                                 ("duration_ms".to_string(), AttributeValue::N("1".into()))]
                                .into_iter().collect())]))
                            .send()
                            .await?;
                        // The endpoint's delivered counter for its stats (one per delivery).
                        ddb.update_item()
                            .table_name(table)
                            .key(keys::PK, AttributeValue::S(keys::stats_partition("ceil", &id, 1)))
                            .key(keys::SK, AttributeValue::S(keys::stats_day_sk(chrono::Utc::now())))
                            .update_expression("ADD delivered :one")
                            .expression_attribute_values(":one", AttributeValue::N("1".into()))
                            .send()
                            .await?;
                        Ok::<_, stack::Error>(())
                    }
                });
                for r in futures::future::join_all(work).await {
                    r?;
                }
                let entries = msgs
                    .iter()
                    .enumerate()
                    .filter_map(|(i, m)| {
                        DeleteMessageBatchRequestEntry::builder()
                            .id(i.to_string())
                            .receipt_handle(m.receipt_handle.clone().unwrap_or_default())
                            .build()
                            .ok()
                    })
                    .collect::<Vec<_>>();
                sqs.delete_message_batch()
                    .queue_url(&url)
                    .set_entries(Some(entries))
                    .send()
                    .await?;
                done.fetch_add(msgs.len() as u64, Ordering::SeqCst);
                last_batch = Instant::now();
            }
            Ok::<_, stack::Error>(last_batch)
        }));
    }
    let produced: Vec<Res<()>> = futures::stream::iter((0..n).map(|i| {
        let (ddb, sqs, table, url, template, message, tenant) =
            (&ddb, &sqs, &table, &url, &template, &message, &tenant);
        async move {
            ddb.query()
                .table_name(table.as_str())
                .key_condition_expression("pk = :pk AND begins_with(sk, :ep)")
                .expression_attribute_values(":pk", AttributeValue::S(keys::tenant_pk(tenant)))
                .expression_attribute_values(":ep", AttributeValue::S("ENDPOINT#".into()))
                .consistent_read(true)
                .send()
                .await?;
            let id = format!("dlv_ceil{i:08}");
            let event_id = format!("evt_ceil{i:08}");
            let mut event = template.event.clone();
            let (pk, sk) = keys::event_key(tenant, &event_id);
            event.insert(keys::PK.into(), AttributeValue::S(pk));
            event.insert(keys::SK.into(), AttributeValue::S(sk));
            event.insert("event_id".into(), AttributeValue::S(event_id.clone()));
            let mut delivery = template.delivery.clone();
            delivery.insert(keys::PK.into(), AttributeValue::S(keys::delivery_pk(&id)));
            delivery.insert("id".into(), AttributeValue::S(id.clone()));
            delivery.insert("event_id".into(), AttributeValue::S(event_id));
            for item in [event, delivery] {
                ddb.put_item()
                    .table_name(table.as_str())
                    .set_item(Some(item))
                    .condition_expression("attribute_not_exists(pk)")
                    .send()
                    .await?;
            }
            let mut msg = message.clone();
            msg.delivery_id = id.parse()?;
            sqs.send_message_batch()
                .queue_url(url)
                .entries(
                    SendMessageBatchRequestEntry::builder()
                        .id("0")
                        .message_body(webhooks::queue::encode(&msg))
                        .build()?,
                )
                .send()
                .await?;
            Ok(())
        }
    }))
    .buffer_unordered(PRODUCERS)
    .collect()
    .await;
    produced.into_iter().collect::<Res<Vec<()>>>()?;
    let mut last = t0;
    for c in consumers {
        last = last.max(c.await??);
    }
    Ok(Throughput {
        endpoints: 1,
        events: n,
        delivered: done.load(Ordering::SeqCst),
        seconds: last.duration_since(t0).as_secs_f64(),
        sizes: Some([
            crate::count::item_size(&template.event),
            crate::count::item_size(&template.delivery),
            template.message.len(),
        ]),
        server_errors: errors.by_operation(),
    })
}
