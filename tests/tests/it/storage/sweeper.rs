//! A sweeper tick that meets a failure does what it can (issue #35, failing input 7): a shard
//! whose read fails, an item of the due index that is not a delivery, a tick cut short.

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use webhooks::service::sweep;
use webhooks::store::StoreError;
use webhooks::store::keys::{self, DUE_AT, DUE_PK, PK, SK};
use webhooks::{App, Config, bootstrap};
use webhooks_local::Options;
use webhooks_tests::{BoxFuture, Hook, Serialized, Stack};

const WAIT: Duration = Duration::from_secs(20);

/// A re-drive's wait, seconds, for the ticks under test: a delivery they re-drive leaves the
/// due index for five minutes, as in production.
const REDRIVE_AFTER_SECONDS: u32 = 300;

fn quiet() -> Options {
    Options { pollers: 0, sweeper: false, ..Options::default() }
}

/// A stack whose deliveries are due as soon as they are accepted (their attempt messages go
/// unread: no pollers, no sweeper of its own), with `shards` due-index shards.
async fn stack(shards: u32) -> Stack {
    Stack::start_with(
        |c| {
            c.redrive_after_seconds = 0;
            c.due_shards = shards;
        },
        quiet(),
    )
    .await
}

/// Posts events to one endpoint until every one of the `shards` due-index shards holds at
/// least `each` of their deliveries; returns the delivery ids by shard.
async fn due_deliveries(stack: &Stack, shards: u32, each: usize) -> Vec<BTreeSet<String>> {
    stack.endpoint("acme", "http://127.0.0.1:9/hook", Value::Null).await;
    let mut by_shard = vec![BTreeSet::new(); shards as usize];
    for i in 0..200 {
        if by_shard.iter().all(|ids| ids.len() >= each) {
            return by_shard;
        }
        let accepted = stack.event("acme", "order.paid", json!({"i": i})).await;
        let id = accepted["deliveries"][0]["id"].as_str().expect("delivery id").to_string();
        by_shard[keys::due_shard(&id, shards) as usize].insert(id);
    }
    panic!("200 events did not put {each} deliveries in each of {shards} shards: {by_shard:?}");
}

/// An app on `stack`'s table with a queue of its own (so it holds only the messages of the
/// ticks under test), a re-drive wait of [`REDRIVE_AFTER_SECONDS`], and its DynamoDB client
/// passing every call through `interceptor`.
async fn sweeper_app(
    stack: &Stack,
    interceptor: impl aws_smithy_runtime_api::client::interceptors::Intercept + 'static,
) -> App {
    let sdk = webhooks::app::aws_sdk_config().await;
    let ddb = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&sdk).interceptor(interceptor).build(),
    );
    let name = format!("sweeper-{}", ulid::Ulid::new().to_string().to_lowercase());
    let queue_url = bootstrap::create_queue(&stack.sqs, &name, 30).await.expect("create queue");
    let mut config: Config = (*stack.app.config).clone();
    config.queue_url = queue_url;
    config.redrive_after_seconds = REDRIVE_AFTER_SECONDS;
    App::from_clients(config, ddb, stack.sqs.clone(), None).expect("sweeper app")
}

/// An SDK interceptor that changes nothing.
#[derive(Debug)]
struct Untouched;

impl aws_smithy_runtime_api::client::interceptors::Intercept for Untouched {
    fn name(&self) -> &'static str {
        "untouched"
    }
}

/// Fails, before it is sent, every Query of one partition of the due index (`DUE#{shard}`):
/// an AWS error once the SDK's retries are spent, say.
#[derive(Debug)]
struct FailReadsOf(String);

impl aws_smithy_runtime_api::client::interceptors::Intercept for FailReadsOf {
    fn name(&self) -> &'static str {
        "fail the reads of one due-index partition"
    }

    fn read_before_serialization(
        &self,
        context: &aws_smithy_runtime_api::client::interceptors::context::BeforeSerializationInterceptorContextRef<'_>,
        _rc: &aws_smithy_runtime_api::client::runtime_components::RuntimeComponents,
        _cfg: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        let partition = context
            .input()
            .downcast_ref::<aws_sdk_dynamodb::operation::query::QueryInput>()
            .and_then(|q| q.expression_attribute_values()?.get(":p")?.as_s().ok().cloned());
        if partition.as_deref() == Some(self.0.as_str()) {
            return Err(format!("injected failure of a read of {}", self.0).into());
        }
        Ok(())
    }
}

/// The delivery ids of the attempt messages on `queue_url`, each received and deleted, read
/// until `want` of them came or `within` passed, then once more for any extra.
async fn messages(stack: &Stack, queue_url: &str, want: usize, within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    let mut ids = Vec::new();
    loop {
        let enough = ids.len() >= want;
        let out = stack
            .sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await
            .expect("receive");
        for m in out.messages() {
            ids.push(
                webhooks::queue::decode(m.body().unwrap_or_default())
                    .expect("attempt message")
                    .delivery_id
                    .into_string(),
            );
            if let Some(handle) = m.receipt_handle() {
                stack.sqs.delete_message().queue_url(queue_url).receipt_handle(handle).send().await.expect("delete");
            }
        }
        if (enough && out.messages().is_empty()) || Instant::now() > deadline {
            return ids;
        }
    }
}

/// The deliveries of `shards` shards still due now (the stack's own store).
async fn still_due(stack: &Stack, shards: u32) -> BTreeSet<String> {
    let now = chrono::Utc::now().timestamp_millis();
    let mut ids = BTreeSet::new();
    for shard in 0..shards {
        for due in stack.app.store.due(shard, now, 1000, None).await.expect("due read") {
            if let webhooks::store::Due::Delivery(d) = due {
                ids.insert(d.id.into_string());
            }
        }
    }
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shard_whose_read_fails_leaves_the_other_shards_redriven_in_the_same_tick() {
    let stack = stack(2).await;
    let by_shard = due_deliveries(&stack, 2, 3).await;
    let app = sweeper_app(&stack, FailReadsOf(keys::due_pk(1))).await;
    let tick = sweep::sweep(&app).await;
    assert!(tick.is_err(), "the tick ends in the failed read, for the alarm: {tick:?}");
    let sent: BTreeSet<String> =
        messages(&stack, &app.config.queue_url, by_shard[0].len(), WAIT).await.into_iter().collect();
    assert_eq!(sent, by_shard[0], "shard 0's due deliveries each got their message in that tick");
    assert_eq!(still_due(&stack, 2).await, by_shard[1], "shard 1's wait, still due, for the next tick");
    // The next tick, its read working, re-drives them.
    let next = sweep::sweep(&sweeper_app(&stack, Untouched).await).await.expect("a tick");
    assert_eq!((next.examined, next.enqueued), (by_shard[1].len(), by_shard[1].len()), "{next:?}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_item_in_the_due_index_that_is_not_a_delivery_is_passed_over_and_the_rest_redriven() {
    let stack = stack(1).await;
    let ids = due_deliveries(&stack, 1, 4).await.remove(0);
    // Due before all of them, on their page: a delivery's key, nothing of a delivery in it.
    let ddb = aws_sdk_dynamodb::Client::new(&webhooks::app::aws_sdk_config().await);
    let due_at = chrono::Utc::now().timestamp_millis() - 60_000;
    ddb.put_item()
        .table_name(&stack.app.config.table)
        .item(PK, AttributeValue::S(keys::delivery_pk("not-a-delivery")))
        .item(SK, AttributeValue::S(keys::DELIVERY_SK.into()))
        .item(DUE_PK, AttributeValue::S(keys::due_pk(0)))
        .item(DUE_AT, AttributeValue::N(due_at.to_string()))
        .item("status", AttributeValue::S("exploded".into()))
        .item("attempt_count", AttributeValue::S("many".into()))
        .send()
        .await
        .expect("put the undecodable item");
    let app = sweeper_app(&stack, Untouched).await;
    let tick = sweep::sweep(&app).await.expect("the tick goes on past the item");
    assert_eq!((tick.examined, tick.enqueued), (ids.len(), ids.len()), "{tick:?}");
    let sent: BTreeSet<String> = messages(&stack, &app.config.queue_url, ids.len(), WAIT).await.into_iter().collect();
    assert_eq!(sent, ids, "every delivery got its message");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tick_cut_short_has_sent_the_message_of_every_delivery_it_moved_on() {
    // 40 due; the tick's 21st transition never answers (the tick is then cut, as the Lambda's
    // timeout cuts it): each of the 20 written has its message, none waits for its re-drive.
    let stack = stack(1).await;
    let ids = due_deliveries(&stack, 1, 40).await.remove(0);
    let applies = Arc::new(AtomicUsize::new(0));
    let hook: Hook = Arc::new(move |call| {
        let n = if call == "apply" { applies.fetch_add(1, Ordering::SeqCst) + 1 } else { 0 };
        Box::pin(async move {
            if n > 20 {
                std::future::pending::<()>().await;
            }
            Ok(())
        }) as BoxFuture<Result<(), StoreError>>
    });
    let app = Serialized::hooked(&sweeper_app(&stack, Untouched).await, Some(hook));
    let mut tick = Box::pin(sweep::sweep(&app));
    let mut sent = BTreeSet::new();
    let deadline = Instant::now() + WAIT;
    while sent.len() < 20 && Instant::now() < deadline {
        tokio::select! {
            r = &mut tick => panic!("the tick was to hang on its 21st transition; it ended: {r:?}"),
            got = messages(&stack, &app.config.queue_url, 1, Duration::ZERO) => sent.extend(got),
        }
    }
    // The tick dies here.
    drop(tick);
    let moved_on: BTreeSet<String> = ids.difference(&still_due(&stack, 1).await).cloned().collect();
    assert_eq!(moved_on.len(), 20, "20 transitions written");
    assert_eq!(sent, moved_on, "every delivery the tick moved on had its message sent");
    stack.stop().await;
}
