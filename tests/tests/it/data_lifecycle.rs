//! The data's lifecycle (issue #39 parts 2 and 3): a tenant's retention overrides set the TTL
//! of its new items, an expunged payload keeps its deliveries' history and is never sent or
//! replayed again, and a tenant's purge leaves nothing of it (a Scan of the table says so),
//! also when a step dies between its writes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use webhooks::service::{endpoint_state, ingest};
use webhooks::store::Due;
use webhooks::store::keys::JOB_SHARD;
use webhooks_local::Options;
use webhooks_tests::faults::{Faults, Strike};
use webhooks_tests::{Receiver, Reply, Stack};

const WITHIN: Duration = Duration::from_secs(30);
const DAY: i64 = 86_400;

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str().unwrap_or_else(|| panic!("not a time: {v}")).parse().unwrap()
}

/// `at` is `from` plus `days` days (within a minute: the two come from different writes).
fn about(at: &Value, from: &Value, days: i64) {
    let off = (time(at) - time(from)).num_seconds() - days * DAY;
    assert!(off.abs() < 60, "{at} is not {days} days after {from}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenants_retention_override_sets_the_ttl_of_its_new_items_within_the_schedules_bounds() {
    let stack = Stack::start(|_| {}).await;
    let ok = Receiver::start(Reply::Status(200)).await;
    let refuses = Receiver::start(Reply::Status(400)).await;
    let once = json!({"schedule_seconds": [1], "max_attempts": 1});
    stack.endpoint("acme", &ok.url, Value::Null).await;
    stack.endpoint("acme", &refuses.url, once.clone()).await;
    stack.endpoint("other", &ok.url, Value::Null).await;

    let path = "/v1/tenants/acme/settings";
    let (status, s) = stack.call(Method::GET, path, None).await;
    assert_eq!(status, 200, "{s}");
    assert_eq!(s["effective"], json!({"delivered_days": 30, "exhausted_days": 14, "event_days": 90}), "{s}");
    assert_eq!(s["min_event_retention_days"], 8, "the standard schedule with Retry-After: {s}");
    // Out of bounds: 422 naming the bound and where it comes from.
    let (status, e) = stack.call(Method::PUT, path, Some(json!({"event_retention_days": 7}))).await;
    assert_eq!(status, 422, "{e}");
    let m = e["error"]["message"].as_str().unwrap();
    assert!(m.starts_with("event_retention_days: 7 is under 8 days, the longest retry schedule"), "{m}");
    let body = json!({"event_retention_days": 20, "exhausted_retention_days": 21});
    let (status, e) = stack.call(Method::PUT, path, Some(body)).await;
    assert_eq!(status, 422, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("under exhausted_retention_days (21)"), "{e}");
    let (status, e) = stack.call(Method::PUT, path, Some(json!({"delivered_retention_days": 0}))).await;
    assert_eq!((status, e["error"]["code"].as_str()), (422, Some("validation_error")), "{e}");

    let body = json!({"delivered_retention_days": 2, "exhausted_retention_days": 3, "event_retention_days": 10});
    let (status, s) = stack.call(Method::PUT, path, Some(body)).await;
    assert_eq!(status, 200, "{s}");
    assert_eq!(s["effective"], json!({"delivered_days": 2, "exhausted_days": 3, "event_days": 10}), "{s}");
    // The bound holds from the policy's side too: no endpoint of acme, new or changed, may get a
    // schedule that outlasts its events' 10 days (two 6-day waits: 12 days and more).
    let long = json!({"schedule_seconds": [518_400], "max_attempts": 3, "jitter": 0});
    let body = json!({"tenant_id": "acme", "url": ok.url, "retry_policy": long});
    let (status, e) = stack.call(Method::POST, "/v1/endpoints", Some(body)).await;
    assert_eq!(status, 422, "{e}");
    let m = e["error"]["message"].as_str().unwrap();
    assert!(m.starts_with("retry_policy: its longest cycle takes up to 12 days") && m.contains("the 10 days"), "{m}");
    let (_, list) = stack.call(Method::GET, "/v1/endpoints?tenant_id=acme", None).await;
    let first = list["data"][0]["id"].as_str().unwrap().to_string();
    let path_ep = format!("/v1/endpoints/{first}");
    let (status, e) = stack.call(Method::PATCH, &path_ep, Some(json!({"retry_policy": long}))).await;
    assert_eq!((status, e["error"]["code"].as_str()), (422, Some("validation_error")), "{e}");
    let fits = json!({"schedule_seconds": [345_600], "max_attempts": 3, "jitter": 0});
    let (status, e) = stack.call(Method::PATCH, &path_ep, Some(json!({"retry_policy": fits}))).await;
    assert_eq!(status, 200, "8 days fit in 10: {e}");
    let (status, e) = stack.call(Method::PATCH, &path_ep, Some(json!({"retry_policy": once}))).await;
    assert_eq!(status, 200, "{e}");

    // acme's new items: the event 10 days from ingest, a delivered delivery 2 days from its
    // delivery, a dead letter 3 days from its end; until final, `expires_at` is null and the
    // answer says the retention that will apply.
    let accepted = stack.event("acme", "order.paid", json!({"n": 1})).await;
    let event_id = accepted["event_id"].as_str().unwrap();
    for d in accepted["deliveries"].as_array().unwrap() {
        let id = d["id"].as_str().unwrap();
        let first = stack.delivery(id).await;
        assert_eq!(first["retention_days"], json!({"delivered": 2, "exhausted": 3}), "{first:#}");
        let done = stack.wait_delivery(id, WITHIN, |d| !d["expires_at"].is_null()).await;
        let days = if done["status"] == "delivered" { 2 } else { 3 };
        about(&done["expires_at"], &done["updated_at"], days);
    }
    let (status, ev) = stack.call(Method::GET, &format!("/v1/events/{event_id}?tenant_id=acme"), None).await;
    assert_eq!(status, 200, "{ev}");
    about(&ev["expires_at"], &ev["created_at"], 10);
    let statuses: Vec<_> = ev["deliveries"].as_array().unwrap().iter().map(|d| d["status"].clone()).collect();
    assert!(statuses.contains(&json!("delivered")) && statuses.contains(&json!("exhausted")), "{ev:#}");

    // Another tenant keeps the stack's.
    let accepted = stack.event("other", "order.paid", json!({"n": 2})).await;
    let id = accepted["deliveries"][0]["id"].as_str().unwrap();
    let done = stack.wait_status(id, "delivered", WITHIN).await;
    about(&done["expires_at"], &done["updated_at"], 30);
    let other_event = accepted["event_id"].as_str().unwrap();
    let (_, ev) = stack.call(Method::GET, &format!("/v1/events/{other_event}"), None).await;
    about(&ev["expires_at"], &ev["created_at"], 90);

    // Ingest's cost: the settings come with the endpoints' Query. An event of acme (with its
    // settings item) makes the same DynamoDB requests as one of `other` (none): one Query.
    let ops = Ops::default();
    let sdk = webhooks::app::aws_sdk_config().await;
    let conf = aws_sdk_dynamodb::config::Builder::from(&sdk).interceptor(ops.clone()).build();
    let cfg = stack.app.config.clone();
    let counted =
        webhooks::store::DynamoStore::new(aws_sdk_dynamodb::Client::from_conf(conf), &cfg.table, cfg.due_shards)
            .with_index_shards(cfg.endpoint_index_shards, cfg.status_index_shards)
            .with_endpoint_copies(cfg.endpoint_copies);
    let mut app = stack.app.clone();
    app.store = Arc::new(counted);
    let mut per_tenant = Vec::new();
    for tenant in ["acme", "other"] {
        ops.0.lock().unwrap().clear();
        let event = ingest::NewEvent {
            tenant_id: tenant.into(),
            event_type: "order.paid".into(),
            payload: "{}".into(),
            id: None,
            sync: false,
            request_sha256: None,
        };
        ingest::ingest(&app, event).await.unwrap();
        let mut calls = ops.0.lock().unwrap().clone();
        calls.retain(|c| *c != "PutItem");
        per_tenant.push(calls);
    }
    assert_eq!(per_tenant[0], per_tenant[1], "acme's settings cost a request of their own");
    assert_eq!(per_tenant[0].iter().filter(|c| **c == "Query").count(), 1, "{per_tenant:?}");
    stack.stop().await;
}

/// Names the DynamoDB requests a client makes that answered (an SDK interceptor).
#[derive(Clone, Default, Debug)]
struct Ops(Arc<Mutex<Vec<&'static str>>>);

impl aws_sdk_dynamodb::config::Intercept for Ops {
    fn name(&self) -> &'static str {
        "Ops"
    }

    fn read_after_execution(
        &self,
        context: &aws_sdk_dynamodb::config::interceptors::FinalizerInterceptorContextRef<'_>,
        _rc: &aws_sdk_dynamodb::config::RuntimeComponents,
        _cfg: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        use aws_sdk_dynamodb::operation as op;
        if let Some(Ok(out)) = context.output_or_error() {
            let name = if out.downcast_ref::<op::query::QueryOutput>().is_some() {
                "Query"
            } else if out.downcast_ref::<op::get_item::GetItemOutput>().is_some() {
                "GetItem"
            } else if out.downcast_ref::<op::put_item::PutItemOutput>().is_some() {
                "PutItem"
            } else {
                "other"
            };
            self.0.lock().unwrap().push(name);
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expunged_payload_keeps_the_history_is_never_sent_again_and_refuses_replay() {
    let stack = Stack::start(|_| {}).await;
    let refuses = Receiver::start(Reply::Status(400)).await;
    let failing = Receiver::start(Reply::Status(500)).await;
    stack.endpoint("acme", &refuses.url, json!({"schedule_seconds": [1], "max_attempts": 1})).await;
    // Retries 5 s apart: the retry's message carries the payload.
    stack.endpoint("acme", &failing.url, json!({"schedule_seconds": [5], "max_attempts": 3, "jitter": 0})).await;
    let accepted = stack.event("acme", "order.paid", json!({"secret": "personal data"})).await;
    let event_id = accepted["event_id"].as_str().unwrap().to_string();
    let ids: Vec<String> =
        accepted["deliveries"].as_array().unwrap().iter().map(|d| d["id"].as_str().unwrap().to_string()).collect();
    let (mut dead, mut retrying) = (None, None);
    for id in &ids {
        let d = stack.wait_delivery(id, WITHIN, |d| d["attempt_count"] == 1 && d["status"] != "sending").await;
        if d["status"] == "exhausted" { dead = Some(id.clone()) } else { retrying = Some(id.clone()) }
    }
    let (dead, retrying) = (dead.unwrap(), retrying.unwrap());

    let (status, x) = stack.call(Method::POST, &format!("/v1/events/{event_id}/expunge?tenant_id=acme"), None).await;
    assert_eq!(status, 200, "{x}");
    assert_eq!(x["deliveries"], 2, "{x}");
    assert!(x["expunged_at"].is_string(), "{x}");
    let (_, ev) = stack.call(Method::GET, &format!("/v1/events/{event_id}"), None).await;
    assert_eq!(ev["expunged_at"], x["expunged_at"], "{ev:#}");

    // The history stays; a replay is refused.
    let d = stack.delivery(&dead).await;
    assert_eq!(d["attempts"][0]["status_code"], 400, "{d:#}");
    let (status, e) = stack.call(Method::POST, &format!("/v1/deliveries/{dead}/replay"), None).await;
    assert_eq!((status, e["error"]["code"].as_str()), (410, Some("payload_expunged")), "{e}");
    assert_eq!(stack.delivery(&dead).await["status"], "exhausted");

    // The retry due after the expunge is not sent: it ends as its payload expired.
    let d = stack.wait_status(&retrying, "exhausted", WITHIN).await;
    assert_eq!(d["attempts"].as_array().unwrap().last().unwrap()["error"], "payload_expired", "{d:#}");
    assert_eq!(failing.count(), 1, "an attempt after the expunge was sent");
    assert_eq!(refuses.count(), 1);
    stack.stop().await;
}

/// A clock the test moves (the API and the job steps read it).
#[derive(Debug)]
struct ManualClock(Mutex<DateTime<Utc>>);

impl webhooks::clock::Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap()
    }
}

/// Every item of the table, as attribute maps.
async fn scan(table: &str) -> Vec<HashMap<String, AttributeValue>> {
    let client = aws_sdk_dynamodb::Client::new(&webhooks::app::aws_sdk_config().await);
    let mut out = Vec::new();
    let mut start = None;
    loop {
        let page = client.scan().table_name(table).set_exclusive_start_key(start.take()).send().await.unwrap();
        out.extend(page.items.unwrap_or_default());
        match page.last_evaluated_key {
            Some(k) if !k.is_empty() => start = Some(k),
            _ => return out,
        }
    }
}

fn text<'a>(item: &'a HashMap<String, AttributeValue>, name: &str) -> &'a str {
    item.get(name).and_then(|v| v.as_s().ok()).map_or("", String::as_str)
}

/// The items of `tenant`: those naming it (`tenant_id`, a key), or one of `endpoints` (their
/// pointers, counters, rate windows), keys shown.
fn items_of(items: &[HashMap<String, AttributeValue>], tenant: &str, endpoints: &[String]) -> Vec<String> {
    let tag = format!("TENANT#{tenant}");
    items
        .iter()
        .filter(|i| {
            let (pk, sk) = (text(i, "pk"), text(i, "sk"));
            text(i, "tenant_id") == tenant
                || pk.ends_with(&tag)
                || sk == tag
                || endpoints.iter().any(|e| pk.contains(e.as_str()))
        })
        .map(|i| format!("{} / {}", text(i, "pk"), text(i, "sk")))
        .collect()
}

/// Runs every due job step (as the sweeper does) on `app`; the errors of the steps.
async fn run_due_steps(app: &webhooks::App) -> Vec<String> {
    let now = app.clock.now().timestamp_millis();
    let mut errors = Vec::new();
    for due in app.store.due(JOB_SHARD, now, 10, None).await.unwrap() {
        if let Due::Job { id, due_at } = due
            && let Err(e) = endpoint_state::run_job_step(app, &id, due_at).await
        {
            errors.push(e.to_string());
        }
    }
    errors
}

#[tokio::test(flavor = "multi_thread")]
async fn a_purge_leaves_nothing_of_the_tenant_and_no_other_tenant_touched_also_when_a_step_dies() {
    let clock = Arc::new(ManualClock(Mutex::new(Utc::now())));
    let c = clock.clone();
    let options = Options { pollers: 0, sweeper: false, ..Options::default() };
    let stack = Stack::start_wrapped(
        |_| {},
        options,
        move |mut app| {
            app.clock = c;
            app
        },
    )
    .await;
    let advance = |s: i64| *clock.0.lock().unwrap() += chrono::Duration::seconds(s);
    let rx = Receiver::start(Reply::Status(200)).await;
    let mut acme_endpoints = Vec::new();
    for _ in 0..2 {
        let body = json!({"tenant_id": "acme", "url": rx.url, "event_types": ["order.paid"]});
        let (status, ep) = stack.call(Method::POST, "/v1/endpoints", Some(body)).await;
        assert_eq!(status, 201, "{ep}");
        acme_endpoints.push(ep["id"].as_str().unwrap().to_string());
    }
    let other = stack.endpoint("other", &rx.url, Value::Null).await["id"].as_str().unwrap().to_string();
    let body = json!({"delivered_retention_days": 5, "event_retention_days": 20});
    assert_eq!(stack.call(Method::PUT, "/v1/tenants/acme/settings", Some(body)).await.0, 200);
    // 700 events to 2 endpoints: 700 event items and 1,400 deliveries; 20 for the other tenant.
    let app = stack.app.clone();
    let posted: Vec<_> = futures::stream::iter((0..720).map(|n| {
        let app = app.clone();
        async move {
            let tenant = if n < 700 { "acme" } else { "other" };
            let event = ingest::NewEvent {
                tenant_id: tenant.into(),
                event_type: "order.paid".into(),
                payload: format!("{{\"n\":{n}}}"),
                id: None,
                sync: false,
                request_sha256: None,
            };
            ingest::ingest(&app, event).await
        }
    }))
    .buffer_unordered(16)
    .collect()
    .await;
    assert!(posted.iter().all(Result::is_ok), "{:?}", posted.iter().find(|r| r.is_err()));
    // A few attempts delivered: the endpoints' delivered counters exist.
    for _ in 0..3 {
        webhooks_local::poll_once(&app, &stack.sqs, 0).await.unwrap();
    }
    // What no live endpoint leads to: an endpoint deleted before the purge (its deliveries and
    // delivered counter stay for their retention), and an event item whose ingest died before
    // its deliveries (made here by deleting the deliveries of an event).
    let body = json!({"tenant_id": "acme", "url": rx.url, "event_types": ["invoice.sent"]});
    let (status, ep) = stack.call(Method::POST, "/v1/endpoints", Some(body)).await;
    assert_eq!(status, 201, "{ep}");
    let gone = ep["id"].as_str().unwrap().to_string();
    let mut gone_deliveries = Vec::new();
    for n in 0..2 {
        // Delivered inline (sync): its delivered counter is written.
        let body = json!({"tenant_id": "acme", "event_type": "invoice.sent", "payload": {"n": n}, "mode": "sync"});
        let (status, accepted) = stack.call(Method::POST, "/v1/events", Some(body)).await;
        assert_eq!(status, 200, "{accepted}");
        gone_deliveries.push(accepted["delivery_id"].as_str().unwrap().to_string());
    }
    let accepted = stack.event("acme", "order.paid", json!({"orphan": true})).await;
    let orphan = accepted["event_id"].as_str().unwrap().to_string();
    let orphan_deliveries: Vec<String> =
        accepted["deliveries"].as_array().unwrap().iter().map(|d| d["id"].as_str().unwrap().to_string()).collect();
    let path = format!("/v1/endpoints/{gone}?force=true");
    assert_eq!(stack.call(Method::DELETE, &path, None).await.0, 200, "delete {gone}");
    assert_eq!(stack.call(Method::GET, &format!("/v1/endpoints/{gone}"), None).await.0, 404);
    acme_endpoints.push(gone.clone());
    let client = aws_sdk_dynamodb::Client::new(&webhooks::app::aws_sdk_config().await);
    for id in &orphan_deliveries {
        let key = |v: String| AttributeValue::S(v);
        let delete = client.delete_item().table_name(&app.config.table).key("pk", key(format!("DELIVERY#{id}")));
        delete.key("sk", key("DELIVERY".into())).send().await.unwrap();
    }

    let before = scan(&app.config.table).await;
    let acme_before = items_of(&before, "acme", &acme_endpoints);
    let orphan_item = format!("EVENT_ID#{orphan} / TENANT#acme");
    assert!(acme_before.contains(&orphan_item), "no orphan event item {orphan_item}: {acme_before:?}");
    let of_gone: Vec<_> = acme_before.iter().filter(|k| k.contains(gone.as_str())).collect();
    assert!(of_gone.iter().any(|k| k.starts_with("STATS#")), "no counter of the deleted endpoint: {of_gone:?}");
    assert!(of_gone.iter().any(|k| k.starts_with("TENANT#acme / DELETED#")), "no tombstone: {of_gone:?}");
    let deliveries_of_gone =
        gone_deliveries.iter().filter(|id| acme_before.contains(&format!("DELIVERY#{id} / DELIVERY")));
    assert!(deliveries_of_gone.count() >= 2, "the deleted endpoint's deliveries: {gone_deliveries:?}");
    assert!(acme_before.len() > 2_000, "{} items of acme", acme_before.len());
    assert!(acme_before.iter().any(|k| k.starts_with("STATS#")), "no delivered counter: {acme_before:?}");
    let mut other_before = items_of(&before, "other", std::slice::from_ref(&other));
    other_before.sort();

    let (status, job) = stack.call(Method::DELETE, "/v1/tenants/acme", None).await;
    assert_eq!(status, 202, "{job}");
    assert_eq!(job["kind"], "purge", "{job}");
    let job_id: webhooks::domain::ids::JobId = webhooks_tests::id(job["id"].as_str().unwrap());
    // From now on: no event, no endpoint, no settings change for acme; a repeat answers the job.
    let ev = json!({"tenant_id": "acme", "event_type": "order.paid", "payload": {}});
    let (status, e) = stack.call(Method::POST, "/v1/events", Some(ev)).await;
    assert_eq!((status, e["error"]["code"].as_str()), (409, Some("tenant_purging")), "{e}");
    let (status, e) =
        stack.call(Method::POST, "/v1/endpoints", Some(json!({"tenant_id": "acme", "url": rx.url}))).await;
    assert_eq!((status, e["error"]["code"].as_str()), (409, Some("tenant_purging")), "{e}");
    assert_eq!(stack.call(Method::DELETE, "/v1/tenants/acme", None).await.1["id"], job["id"]);

    // A step dies between two of its deletes (the second batch never made): it resumes.
    let due = app.store.due(JOB_SHARD, i64::MAX, 10, None).await.unwrap();
    let due_at = due
        .iter()
        .find_map(|d| match d {
            Due::Job { id, due_at } if *id == job_id => Some(*due_at),
            _ => None,
        })
        .unwrap_or_else(|| panic!("the purge job is not due: {due:?}"));
    // claim_job, get_job, get_settings, list_api_keys, list_endpoints, deleted_endpoints,
    // list_deliveries, purge, save_job (its progress), list_deliveries, purge: the 11th call.
    let faults = Faults::failing(10, Strike::Before);
    let faulty = faults.wrap(app.clone());
    faults.arm();
    assert!(endpoint_state::run_job_step(&faulty, &job_id, due_at).await.is_err());
    assert_eq!(faults.struck(), Some((10, "purge", Strike::Before)), "{:?}", faults.calls());
    let mid = items_of(&scan(&app.config.table).await, "acme", &acme_endpoints);
    assert!(mid.len() < acme_before.len() && mid.len() > 1_000, "{} of {} left", mid.len(), acme_before.len());
    let progress = app.store.get_job(&job_id).await.unwrap().unwrap();
    // The first page (100 deliveries with their events) was saved before the step died.
    assert_eq!((progress.status.as_str(), progress.processed), ("running", 200), "the dead step's saved piece");

    let mut steps = 0;
    loop {
        let errors = run_due_steps(&app).await;
        assert!(errors.is_empty(), "{errors:?}");
        let job = app.store.get_job(&job_id).await.unwrap().unwrap();
        if job.status != "running" {
            assert_eq!(job.status, "done");
            break;
        }
        steps += 1;
        assert!(steps < 40, "not done after {steps} steps: {job:?}");
        advance(30);
    }
    let (status, job) = stack.call(Method::GET, &format!("/v1/jobs/{job_id}"), None).await;
    assert_eq!((status, job["status"].as_str()), (200, Some("done")), "{job}");
    assert!(job["processed"].as_u64().unwrap() > 1_000, "{job}");

    // Nothing of acme but the purge job's own record; the other tenant as it was.
    let after = scan(&app.config.table).await;
    let left = items_of(&after, "acme", &acme_endpoints);
    // The jobs are kept (14 days' TTL): the purge's, the deleted endpoint's clean-up, and the
    // notify job of the purge's end (`job.finished`, kind purge).
    assert!(left.contains(&format!("JOB#{job_id} / JOB")), "{left:?}");
    assert!(left.iter().all(|k| k.starts_with("JOB#") && k.ends_with(" / JOB")), "left of acme: {left:?}");
    assert_eq!(left.len(), 3, "left of acme: {left:?}");
    let mut finished = Vec::new();
    for key in &left {
        let id = key.trim_start_matches("JOB#").trim_end_matches(" / JOB");
        if let Some(event) = app.store.get_job(&webhooks_tests::id(id)).await.unwrap().and_then(|j| j.event) {
            finished.push((event.event_type, event.job_id, event.job_kind, event.reason));
        }
    }
    let want = ("job.finished".to_string(), Some(job_id.to_string()), Some("purge".to_string()), "done".to_string());
    assert_eq!(finished, vec![want], "the purge's end as an operational event");
    let mut other_after = items_of(&after, "other", std::slice::from_ref(&other));
    other_after.sort();
    assert_eq!(other_after, other_before, "the other tenant's items changed");
    // The tenant is new again.
    let ev = json!({"tenant_id": "acme", "event_type": "order.paid", "payload": {}});
    let (status, e) = stack.call(Method::POST, "/v1/events", Some(ev)).await;
    assert_eq!((status, e["warnings"][0]["code"].as_str()), (202, Some("no_subscribed_endpoint")), "{e}");
    stack.stop().await;
}

/// A stack on a clock the test moves, with no poller and no sweeper, whose tick budget
/// (`WEBHOOKS_SWEEP_BUDGET_SECONDS`) is `budget`; tenant `acme` with two endpoints and `events`
/// events to both. Returns the stack, the clock and the endpoints.
async fn purge_stack(budget: Duration, events: usize) -> (Stack, Arc<ManualClock>, Vec<String>) {
    let clock = Arc::new(ManualClock(Mutex::new(Utc::now())));
    let c = clock.clone();
    let options = Options { pollers: 0, sweeper: false, ..Options::default() };
    let stack = Stack::start_wrapped(
        move |cfg| cfg.sweep_budget = budget,
        options,
        move |mut app| {
            app.clock = c;
            app
        },
    )
    .await;
    let rx = Receiver::start(Reply::Status(200)).await;
    let mut endpoints = Vec::new();
    for _ in 0..2 {
        let body = json!({"tenant_id": "acme", "url": rx.url, "event_types": ["order.paid"]});
        let (status, ep) = stack.call(Method::POST, "/v1/endpoints", Some(body)).await;
        assert_eq!(status, 201, "{ep}");
        endpoints.push(ep["id"].as_str().unwrap().to_string());
    }
    let app = stack.app.clone();
    let posted: Vec<_> = futures::stream::iter((0..events).map(|n| {
        let app = app.clone();
        async move {
            let event = ingest::NewEvent {
                tenant_id: "acme".into(),
                event_type: "order.paid".into(),
                payload: format!("{{\"n\":{n}}}"),
                id: None,
                sync: false,
                request_sha256: None,
            };
            ingest::ingest(&app, event).await
        }
    }))
    .buffer_unordered(16)
    .collect()
    .await;
    assert!(posted.iter().all(Result::is_ok), "{:?}", posted.iter().find(|r| r.is_err()));
    (stack, clock, endpoints)
}

/// The job item's TTL attribute (unix seconds) as stored; `None`: it never expires.
async fn job_ttl(table: &str, job_id: &str) -> Option<i64> {
    use webhooks::store::keys;
    let client = aws_sdk_dynamodb::Client::new(&webhooks::app::aws_sdk_config().await);
    let read = client.get_item().table_name(table).key(keys::PK, AttributeValue::S(keys::job_pk(job_id)));
    let item = read.key(keys::SK, AttributeValue::S(keys::JOB_SK.into())).consistent_read(true).send().await;
    let item = item.unwrap().item.expect("the job item");
    item.get(keys::TTL).map(|v| v.as_n().unwrap().parse().unwrap())
}

/// A purge step the sweeper's tick budget cuts off keeps what it did: it saves its progress
/// after each piece of work (and starts none it has no time left for), so the job shows the
/// items it removed and the next tick goes on from there (before, a step cut off by the
/// tick's timeout saved nothing, and one that never fitted the budget never moved). A running
/// purge never expires (its mark refuses the tenant until it ends); a finished one does, 14
/// days after.
#[tokio::test(flavor = "multi_thread")]
async fn a_purge_step_cut_off_by_the_tick_budget_keeps_its_progress_and_a_running_purge_never_expires() {
    let (stack, clock, endpoints) = purge_stack(Duration::from_secs(10), 75).await;
    let table = stack.app.config.table.clone();
    let (status, job) = stack.call(Method::DELETE, "/v1/tenants/acme", None).await;
    assert_eq!(status, 202, "{job}");
    let job_id = job["id"].as_str().unwrap().to_string();
    assert_eq!(job_ttl(&table, &job_id).await, None, "a running purge carries no expiry");
    // The step's second delete answers late, past the tick's budget (the deletes land; the
    // tick's timeout cuts the step off while it waits).
    let faults = Faults::stalling_after("purge", 1, Duration::from_secs(60));
    let slow = faults.wrap(stack.app.clone());
    faults.arm();
    let tick = webhooks::service::sweep::sweep(&slow).await;
    assert!(tick.is_ok(), "{tick:?}");
    assert_eq!(tick.as_ref().map(|r| r.jobs_run).ok(), Some(0), "the step was cut off: {tick:?}");
    let (_, after) = stack.call(Method::GET, &format!("/v1/jobs/{job_id}"), None).await;
    assert_eq!(after["status"], "running", "{after}");
    // The 75 deliveries of one endpoint and their 75 events: the piece before the cut.
    assert!(faults.calls().iter().filter(|c| **c == "purge").count() == 2, "{:?}", faults.calls());
    assert_eq!(after["processed"], 150, "the step cut short saved what it removed: {after} {tick:?}");
    assert!(time(&after["updated_at"]) >= time(&job["updated_at"]), "{after}");
    assert_eq!(job_ttl(&table, &job_id).await, None, "a running purge carries no expiry");
    // Tick after tick (a tick a minute), each moving it on, to its end.
    let mut ticks = 1;
    let mut processed = 150;
    loop {
        *clock.0.lock().unwrap() += chrono::Duration::seconds(60);
        let tick = webhooks::service::sweep::sweep(&slow).await;
        assert!(tick.is_ok(), "{tick:?}");
        ticks += 1;
        let (_, now) = stack.call(Method::GET, &format!("/v1/jobs/{job_id}"), None).await;
        let p = now["processed"].as_u64().unwrap();
        assert!(p >= processed, "{now}");
        processed = p;
        if now["status"] != "running" {
            assert_eq!(now["status"], "done", "{now}");
            let ttl = job_ttl(&table, &job_id).await.expect("a finished purge expires");
            assert_eq!(ttl, time(&now["updated_at"]).timestamp() + 14 * DAY, "14 days after it ended");
            break;
        }
        assert!(ticks < 20, "not done after {ticks} ticks: {now}");
    }
    // Nothing of acme left but its jobs (the deletes of the step cut off landed, uncounted:
    // `processed` is a lower bound).
    let left = items_of(&scan(&table).await, "acme", &endpoints);
    assert!(left.iter().all(|k| k.starts_with("JOB#")), "left of acme: {left:?}");
    assert!(processed > 150, "{processed}");
    let ev = json!({"tenant_id": "acme", "event_type": "order.paid", "payload": {}});
    let (status, e) = stack.call(Method::POST, "/v1/events", Some(ev)).await;
    assert_eq!((status, e["warnings"][0]["code"].as_str()), (202, Some("no_subscribed_endpoint")), "{e}");
    stack.stop().await;
}

/// A purge follows a delivery listing's cursor past a page that came back empty (the index
/// lagging the table answers one): before, the empty page ended the endpoint's deliveries for
/// the step, and a listing that always began so kept the purge from ever ending.
#[tokio::test(flavor = "multi_thread")]
async fn a_purge_follows_a_listing_past_an_empty_page_with_a_cursor() {
    let (stack, clock, endpoints) = purge_stack(Duration::from_secs(5), 10).await;
    let (status, job) = stack.call(Method::DELETE, "/v1/tenants/acme", None).await;
    assert_eq!(status, 202, "{job}");
    let job_id: webhooks::domain::ids::JobId = webhooks_tests::id(job["id"].as_str().unwrap());
    let lagging = Faults::lagging_listings().wrap(stack.app.clone());
    let mut steps = 0;
    loop {
        let errors = run_due_steps(&lagging).await;
        assert!(errors.is_empty(), "{errors:?}");
        let job = stack.app.store.get_job(&job_id).await.unwrap().unwrap();
        if job.status != "running" {
            assert_eq!(job.status, "done");
            break;
        }
        steps += 1;
        assert!(steps < 20, "not done after {steps} steps: {job:?}");
        *clock.0.lock().unwrap() += chrono::Duration::seconds(30);
    }
    let left = items_of(&scan(&stack.app.config.table).await, "acme", &endpoints);
    assert!(left.iter().all(|k| k.starts_with("JOB#")), "left of acme: {left:?}");
    stack.stop().await;
}

/// An expunge removes the request's fingerprint (`request_sha256`, kept for an
/// `Idempotency-Key`) with the payload: the SHA-256 of a short payload can be guessed, so it
/// would keep the payload in all but name.
#[tokio::test(flavor = "multi_thread")]
async fn an_expunge_removes_the_requests_fingerprint_with_the_payload() {
    use webhooks::store::keys;
    let stack = Stack::start_with(|_| {}, Options { pollers: 0, sweeper: false, ..Options::default() }).await;
    let rx = Receiver::start(Reply::Status(200)).await;
    stack.endpoint("acme", &rx.url, Value::Null).await;
    let event = ingest::NewEvent {
        tenant_id: "acme".into(),
        event_type: "order.paid".into(),
        payload: "{\"pin\":\"1234\"}".into(),
        id: None,
        sync: false,
        request_sha256: Some("9f".repeat(32)),
    };
    let accepted = ingest::ingest(&stack.app, event).await.unwrap();
    let event_id = accepted.event_id.to_string();
    let (pk, sk) = keys::event_key("acme", &event_id);
    let client = aws_sdk_dynamodb::Client::new(&webhooks::app::aws_sdk_config().await);
    let item = || async {
        let read = client.get_item().table_name(&stack.app.config.table).key(keys::PK, AttributeValue::S(pk.clone()));
        read.key(keys::SK, AttributeValue::S(sk.clone())).consistent_read(true).send().await.unwrap().item.unwrap()
    };
    assert!(item().await.contains_key(keys::REQUEST_SHA256), "the fingerprint is stored with the event");
    let (status, x) = stack.call(Method::POST, &format!("/v1/events/{event_id}/expunge"), None).await;
    assert_eq!(status, 200, "{x}");
    let after = item().await;
    assert!(!after.contains_key(keys::REQUEST_SHA256), "the fingerprint outlived the expunge: {after:?}");
    assert!(after.contains_key("expunged_at"), "{after:?}");
    stack.stop().await;
}

/// `POST /v1/events` on the local runtime with API key `key` (a Bearer token) for `tenant`.
async fn post_with_key(stack: &Stack, key: &Value, tenant: &str) -> (u16, Value) {
    let body = json!({"tenant_id": tenant, "event_type": "order.paid", "payload": {}});
    let resp = stack
        .http
        .post(format!("{}/v1/events", stack.base))
        .bearer_auth(key["key"].as_str().unwrap())
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// A purge takes the tenant out of the API keys (issue #54): a key naming it alone is revoked,
/// a key naming it with others no longer names it (and still posts for the others), a key for
/// every tenant is untouched; taking it out again changes nothing. Before, every such key
/// still posted for the purged tenant.
#[tokio::test(flavor = "multi_thread")]
async fn a_purge_revokes_the_tenants_own_api_keys_and_removes_it_from_shared_ones() {
    let (stack, clock, _) = purge_stack(Duration::from_secs(5), 3).await;
    let mut keys = Vec::new();
    for body in [
        json!({"name": "acme's", "tenant_ids": ["acme"]}),
        json!({"name": "shared", "tenant_ids": ["other", "acme", "third"]}),
        json!({"name": "every", "all_tenants": true}),
    ] {
        let (status, created) = stack.call(Method::POST, "/v1/api-keys", Some(body)).await;
        assert_eq!(status, 201, "{created}");
        keys.push(created);
    }
    let (status, job) = stack.call(Method::DELETE, "/v1/tenants/acme", None).await;
    assert_eq!(status, 202, "{job}");
    let job_id: webhooks::domain::ids::JobId = webhooks_tests::id(job["id"].as_str().unwrap());
    let mut steps = 0;
    while stack.app.store.get_job(&job_id).await.unwrap().unwrap().status == "running" {
        let errors = run_due_steps(&stack.app).await;
        assert!(errors.is_empty(), "{errors:?}");
        steps += 1;
        assert!(steps < 20, "not done after {steps} steps");
        *clock.0.lock().unwrap() += chrono::Duration::seconds(30);
    }
    let get = |k: &Value| format!("/v1/api-keys/{}", k["id"].as_str().unwrap());
    let (own, shared, every) = (&keys[0], &keys[1], &keys[2]);
    let (_, got) = stack.call(Method::GET, &get(own), None).await;
    assert!(got["revoked_at"].is_string(), "the key of the purged tenant alone: {got}");
    let (status, e) = post_with_key(&stack, own, "acme").await;
    assert_eq!((status, e["error"]["code"].as_str()), (401, Some("invalid_api_key")), "{e}");
    let (_, got) = stack.call(Method::GET, &get(shared), None).await;
    assert_eq!((got["tenant_ids"].clone(), got["revoked_at"].clone()), (json!(["other", "third"]), Value::Null));
    let (status, e) = post_with_key(&stack, shared, "acme").await;
    assert_eq!((status, e["error"]["code"].as_str()), (403, Some("tenant_not_allowed")), "{e}");
    assert_eq!(post_with_key(&stack, shared, "third").await.0, 202);
    let (_, got) = stack.call(Method::GET, &get(every), None).await;
    assert_eq!((got["all_tenants"].clone(), got["revoked_at"].clone()), (json!(true), Value::Null), "{got}");
    assert_eq!(post_with_key(&stack, every, "acme").await.0, 202);
    // Again (a step that runs twice): nothing changes, nothing fails.
    assert_eq!(webhooks::service::api_keys::forget_tenant(&stack.app, "acme").await.unwrap(), 0);
    let (_, got) = stack.call(Method::GET, &get(shared), None).await;
    assert_eq!(got["tenant_ids"], json!(["other", "third"]), "{got}");
    stack.stop().await;
}
