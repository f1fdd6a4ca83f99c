//! One storage conformance suite over the [`Store`] trait, run against DynamoStore on the
//! emulator and against the simulation's MemStore (`tests/tests/it/storage.rs`), so the
//! simulation's store is checked against the real one instead of described in prose.
//!
//! Each check states a behaviour the services rely on: conditional creates (a retry of the
//! same create is no conflict), guarded
//! transitions (the claim, a stale guard), the due index (what is due, and an item that moved
//! out of it), an event's repeat keeping its first payload, listings (paging with a cursor, a
//! page shorter than `limit` being the last, status filters, a cursor refused on another listing), counts, jobs (created once, a
//! step's write guarded by its lease), an endpoint's version guard, and the fingerprint an
//! `Idempotency-Key` binds to its event, a job's last save with its notify job, an endpoint's failing run announced once, and the event-type catalog (a conditional create, a
//! change guarded on the revision read, version records, the listing). Ids carry `prefix` so that several runs can share a table.

use chrono::{DateTime, Duration, Utc};
use webhooks::Config;
use webhooks::domain::delivery_lifecycle::{self, AttemptMessage, EndpointEntry};
use webhooks::domain::endpoint_lifecycle;
use webhooks::domain::ids::{DeliveryId, EndpointId, EventId, TenantId};
use webhooks::domain::model::{DeliveryStatus, Endpoint, Job, JobKind, StoredEvent};
use webhooks::store::{Applied, Committed, DeliveryQuery, Due, EndpointWrite, Store, StoreError, collect_deliveries};

/// An id of the suite's, parsed (every one it makes meets the id rule).
fn typed<T: std::str::FromStr>(value: impl AsRef<str>) -> T
where
    T::Err: std::fmt::Debug,
{
    value.as_ref().parse().expect("the suite's ids meet the id rule")
}

/// Runs every check against `store` with `config` (its due shards must be the store's), ids
/// prefixed with `prefix`; panics naming the first check that fails.
pub async fn run(store: &dyn Store, config: &Config, prefix: &str) {
    let now = Utc::now() - Duration::minutes(10);
    endpoints(store, prefix, now).await;
    let ep: EndpointId = typed(format!("{prefix}ep"));
    let ids = events_and_deliveries(store, config, prefix, &ep, now).await;
    transitions_and_due(store, config, &ids, now).await;
    listings_and_counts(store, &ep, &ids).await;
    jobs(store, prefix, now).await;
    idempotency(store, config, prefix, now).await;
    event_types(store, prefix, now).await;
    api_keys(store, prefix, now).await;
}

/// Creates are conditional; reads by tenant and id, by id alone, and a tenant's list; an
/// endpoint write guarded by a version that is no longer the stored one changes nothing.
async fn endpoints(store: &dyn Store, prefix: &str, now: DateTime<Utc>) {
    let tenant: TenantId = typed(format!("{prefix}tenant"));
    let ep = Endpoint::new(
        typed(format!("{prefix}ep")),
        tenant.clone(),
        "https://example.com/hook",
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        now,
    );
    store.create_endpoint(&ep).await.expect("create an endpoint");
    store.create_endpoint(&ep).await.expect("conformance: the same create again (a retry) is no conflict");
    let other = Endpoint { secret: "whsec_b3RoZXItc2VjcmV0LW9mLTI0LWJ5dGVzISE=".into(), ..ep.clone() };
    assert!(
        matches!(store.create_endpoint(&other).await, Err(StoreError::AlreadyExists)),
        "conformance: an endpoint id is created once"
    );
    let got = store.get_endpoint(&tenant, &ep.id).await.unwrap().expect("conformance: the endpoint by tenant and id");
    assert_eq!((got.url.as_str(), got.version), (ep.url.as_str(), ep.version));
    assert_eq!(store.find_endpoint(&ep.id).await.unwrap().map(|e| e.tenant_id), Some(tenant.clone()), "by id alone");
    assert!(
        store.get_endpoint(&typed("another-tenant"), &ep.id).await.unwrap().is_none(),
        "conformance: another tenant's"
    );
    let listed = store.tenant_endpoints(&tenant, "key").await.unwrap();
    assert_eq!(listed.iter().map(|e| e.id.clone()).collect::<Vec<_>>(), vec![ep.id.clone()]);
    // A version guard: the stored version passes, an older one does not.
    let stale = EndpointWrite::Unchanged { tenant_id: &tenant, id: &ep.id, version: ep.version + 7 };
    assert_eq!(store.commit(stale, None).await.unwrap(), Committed::EndpointChanged, "conformance: stale version");
    let current = EndpointWrite::Unchanged { tenant_id: &tenant, id: &ep.id, version: ep.version };
    assert_eq!(store.commit(current, None).await.unwrap(), Committed::Done, "conformance: current version");
    let random = webhooks::clock::Random::seeded(7);
    let change = endpoint_lifecycle::enable(&got, now, &random);
    assert_eq!(store.commit(EndpointWrite::Change(&change), None).await.unwrap(), Committed::Done);
    let after = store.get_endpoint(&tenant, &ep.id).await.unwrap().expect("the endpoint");
    assert_eq!(after.version, change.endpoint.version, "conformance: a change writes its version");
    assert_eq!(
        store.commit(EndpointWrite::Change(&change), None).await.unwrap(),
        Committed::EndpointChanged,
        "conformance: the same change twice: the second finds the version moved on"
    );
}

/// The ids [`events_and_deliveries`] wrote: (delivery id, created at), oldest first.
type Written = Vec<(DeliveryId, DateTime<Utc>)>;

/// An event and its deliveries: created once, a repeat keeps the first payload and reports
/// nothing new; the event's deliveries are found by its id alone.
async fn events_and_deliveries(
    store: &dyn Store,
    config: &Config,
    prefix: &str,
    ep: &EndpointId,
    now: DateTime<Utc>,
) -> Written {
    let tenant: TenantId = typed(format!("{prefix}tenant"));
    let mut written = Vec::new();
    for i in 0..7i64 {
        let at = now + Duration::milliseconds(i * 10);
        let event = StoredEvent {
            tenant_id: tenant.clone(),
            event_id: typed(format!("{prefix}evt-{i}")),
            event_type: "order.paid".into(),
            payload: format!("{{\"n\":{i}}}"),
            created_at: at,
            expires_at: at.timestamp() + 86_400,
            request_sha256: None,
        };
        let id = webhooks::domain::model::delivery_id(&event.event_id, ep);
        let (d, due_at, _) =
            delivery_lifecycle::new_delivery(config, at, id.clone(), &event.event_id, "order.paid", &tenant, ep, false);
        let inserted = store.insert_event(&event, &[(&d, due_at)]).await.expect("insert an event");
        assert_eq!((inserted.event, inserted.deliveries.clone()), (true, vec![true]), "conformance: a new event");
        written.push((id, at));
    }
    // A repeat of an event id with another payload: nothing new, the first payload kept.
    let first: EventId = typed(format!("{prefix}evt-0"));
    let again = StoredEvent {
        tenant_id: tenant.clone(),
        event_id: first.clone(),
        event_type: "order.paid".into(),
        payload: "{\"n\":\"other\"}".into(),
        created_at: now,
        expires_at: now.timestamp() + 86_400,
        request_sha256: None,
    };
    let (d, due_at, _) =
        delivery_lifecycle::new_delivery(config, now, written[0].0.clone(), &first, "order.paid", &tenant, ep, false);
    let inserted = store.insert_event(&again, &[(&d, due_at)]).await.expect("repeat an event");
    assert_eq!((inserted.event, inserted.deliveries), (false, vec![false]), "conformance: a repeat creates nothing");
    assert_eq!(store.get_payload(&tenant, &first).await.unwrap().as_deref(), Some("{\"n\":0}"), "the first payload");
    assert_eq!(store.get_payload(&tenant, &typed(format!("{prefix}no-such-event"))).await.unwrap(), None);
    let found = store.event_deliveries(&first).await.unwrap();
    assert_eq!(
        found.iter().map(|d| (d.id.clone(), d.endpoint_id.clone())).collect::<Vec<_>>(),
        vec![(written[0].0.clone(), ep.clone())]
    );
    written
}

/// The claim applies once; a second claim of the same attempt loses, and so does one made
/// before the attempt's time; a delivery ended is out
/// of the due index, one still waiting is in it (due when its time has come, not before).
async fn transitions_and_due(store: &dyn Store, config: &Config, written: &Written, now: DateTime<Utc>) {
    let (id, created_at) = &written[0];
    let claim = delivery_lifecycle::claim(config, now, &AttemptMessage::new(id.clone(), 1));
    let claimed = match store.apply(id, &claim, true).await.unwrap() {
        Applied::Done(Some(d)) => *d,
        other => panic!("conformance: the claim applies and returns the item: {other:?}"),
    };
    assert_eq!((claimed.status, claimed.attempt_count), (DeliveryStatus::Sending, 1));
    assert!(
        matches!(store.apply(id, &claim, false).await.unwrap(), Applied::Lost),
        "conformance: a second claim loses"
    );
    // A claim made well before a delivery's next attempt is due loses (a message that came
    // early, or one sent to the queue by hand), and changes nothing.
    let (early_id, _) = &written[1];
    let early_claim =
        delivery_lifecycle::claim(config, now - Duration::minutes(5), &AttemptMessage::new(early_id.clone(), 1));
    assert!(
        matches!(store.apply(early_id, &early_claim, false).await.unwrap(), Applied::Lost),
        "conformance: no claim before the attempt's time"
    );
    let unclaimed = store.get_delivery(early_id).await.unwrap().expect("the delivery");
    assert_eq!((unclaimed.status, unclaimed.attempt_count), (DeliveryStatus::Scheduled, 0));
    // End the claimed one: out of the due index from then on.
    let end = delivery_lifecycle::abandon(
        config,
        now,
        DeliveryStatus::Sending,
        1,
        EndpointEntry::new(&claimed.endpoint_id, *created_at),
        "conformance",
        None,
    );
    assert!(matches!(store.apply(id, &end, false).await.unwrap(), Applied::Done(_)));
    assert!(matches!(store.apply(id, &end, false).await.unwrap(), Applied::Lost), "conformance: a stale guard loses");
    let stored = store.get_delivery(id).await.unwrap().expect("the delivery");
    assert_eq!((stored.status, stored.reason.as_deref()), (DeliveryStatus::Exhausted, Some("conformance")));
    // The others are due at their redrive time: not before it, and then in due order.
    let redrive = i64::from(config.redrive_after_seconds) * 1000;
    let before = now.timestamp_millis() + redrive - 1;
    let after = now.timestamp_millis() + redrive + 1_000;
    let mut early = Vec::new();
    let mut due = Vec::new();
    for shard in 0..config.due_shards {
        early.extend(store.due(shard, before, 100, None).await.unwrap());
        due.extend(store.due(shard, after, 100, None).await.unwrap());
    }
    let mine = |list: &[Due]| -> Vec<DeliveryId> {
        let mut ids: Vec<DeliveryId> = list
            .iter()
            .filter_map(|d| match d {
                Due::Delivery(d) if written.iter().any(|(w, _)| *w == d.id) => Some(d.id.clone()),
                _ => None,
            })
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(mine(&early), Vec::<DeliveryId>::new(), "conformance: nothing is due before its time");
    let mut waiting: Vec<DeliveryId> = written[1..].iter().map(|(w, _)| w.clone()).collect();
    waiting.sort();
    assert_eq!(mine(&due), waiting, "conformance: every waiting delivery is due once, the ended one not");
}

/// An endpoint's listing, paged with its cursor in both directions, filtered by status; a
/// page with a cursor is full; the counts match.
async fn listings_and_counts(store: &dyn Store, ep: &EndpointId, written: &Written) {
    let ids = |list: Vec<webhooks::store::DeliverySummary>| list.into_iter().map(|d| d.id).collect::<Vec<_>>();
    let all: Vec<DeliveryId> = written.iter().map(|(w, _)| w.clone()).collect();
    let query = DeliveryQuery { endpoint_id: Some(ep.clone()), oldest_first: true, limit: 2, ..Default::default() };
    // Page by page, each page with a cursor full.
    let mut seen = Vec::new();
    let mut q = query.clone();
    loop {
        let page = store.list_deliveries(&q).await.unwrap();
        if page.next_cursor.is_some() {
            assert_eq!(page.data.len(), 2, "conformance: a page with a cursor is full");
        }
        seen.extend(ids(page.data));
        match page.next_cursor {
            Some(c) => q.cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen, all, "conformance: oldest first, each once");
    let mut newest = all.clone();
    newest.reverse();
    let listed = collect_deliveries(store, DeliveryQuery { oldest_first: false, ..query.clone() }, 100).await.unwrap();
    assert_eq!(ids(listed), newest, "conformance: newest first");
    let scheduled =
        collect_deliveries(store, DeliveryQuery { status: Some(DeliveryStatus::Scheduled), ..query.clone() }, 100)
            .await
            .unwrap();
    assert_eq!(ids(scheduled), all[1..].to_vec(), "conformance: the scheduled ones");
    let dead =
        collect_deliveries(store, DeliveryQuery { status: Some(DeliveryStatus::Exhausted), ..query.clone() }, 100)
            .await
            .unwrap();
    assert_eq!(ids(dead), all[..1].to_vec(), "conformance: the exhausted one");
    let letters = collect_deliveries(
        store,
        DeliveryQuery { status: Some(DeliveryStatus::Exhausted), limit: 100, ..Default::default() },
        1000,
    )
    .await
    .unwrap();
    assert!(letters.iter().any(|d| d.id == all[0] && d.endpoint_id == *ep), "conformance: in the dead-letter list");
    // A cursor goes on only the listing that gave it: the endpoint's, replayed on the
    // dead-letter listing or on another status of the endpoint, is refused.
    let first = store.list_deliveries(&query).await.unwrap();
    let foreign = first.next_cursor.expect("a first page of two with a cursor");
    for other in [
        DeliveryQuery { status: Some(DeliveryStatus::Exhausted), limit: 2, ..Default::default() },
        DeliveryQuery { status: Some(DeliveryStatus::Exhausted), ..query.clone() },
        DeliveryQuery { oldest_first: false, ..query.clone() },
    ] {
        let answer = store.list_deliveries(&DeliveryQuery { cursor: Some(foreign.clone()), ..other.clone() }).await;
        assert!(
            matches!(answer, Err(StoreError::InvalidCursor)),
            "conformance: a cursor of another listing is refused on {other:?}: {answer:?}"
        );
    }
    let statuses =
        [DeliveryStatus::Scheduled, DeliveryStatus::Sending, DeliveryStatus::Exhausted, DeliveryStatus::Held];
    let counts: Vec<(u64, bool)> =
        store.count_deliveries_in(ep, &statuses).await.unwrap().iter().map(|c| (c.n, c.exact)).collect();
    assert_eq!(counts, vec![(6, true), (0, true), (1, true), (0, true)], "conformance: counts");
}

/// A job id is created once; a step takes it with `claim_job`, and a step's write holds only
/// while its lease does.
async fn jobs(store: &dyn Store, prefix: &str, now: DateTime<Utc>) {
    let job = Job {
        id: typed(format!("{prefix}job")),
        kind: JobKind::Release,
        tenant_id: typed(format!("{prefix}tenant")),
        endpoint_id: format!("{prefix}ep"),
        status: "running".into(),
        since: None,
        until: None,
        cursor: None,
        processed: 0,
        run_at: Some(now),
        event: None,
        created_at: now,
        updated_at: now,
    };
    store.create_job(&job).await.unwrap();
    assert!(matches!(store.create_job(&job).await, Err(StoreError::AlreadyExists)), "conformance: a job once");
    let due = now.timestamp_millis();
    assert!(!store.claim_job(&job.id, due + 1, due + 5).await.unwrap(), "conformance: a claim of another due time");
    assert!(store.claim_job(&job.id, due, due + 40_000).await.unwrap());
    assert!(store.claim_job(&job.id, due + 40_000, due + 80_000).await.unwrap(), "the next tick takes it");
    let late = Job { processed: 1, ..job.clone() };
    assert!(!store.save_job(&late, due + 40_000).await.unwrap(), "conformance: a step past its lease writes nothing");
    let done = Job { processed: 2, status: "done".into(), run_at: None, ..job.clone() };
    assert!(store.save_job(&done, due + 80_000).await.unwrap());
    let stored = store.get_job(&job.id).await.unwrap().expect("the job");
    assert_eq!((stored.status.as_str(), stored.processed), ("done", 2));

    // A job's last save with its `job.finished` notify job: both under the lease, or neither.
    let recover = Job { id: typed(format!("{prefix}recover")), kind: JobKind::Recover, ..job.clone() };
    store.create_job(&recover).await.unwrap();
    assert!(store.claim_job(&recover.id, due, due + 40_000).await.unwrap());
    let finished = Job { status: "done".into(), processed: 3, run_at: None, ..recover.clone() };
    let notify = endpoint_lifecycle::finished_job(&finished, now).expect("a recover job's end is told");
    assert!(!store.finish_job(&finished, due + 1, &notify).await.unwrap(), "conformance: a finish past its lease");
    assert!(store.get_job(&notify.id).await.unwrap().is_none(), "conformance: ... writes no notify job either");
    assert!(store.finish_job(&finished, due + 40_000, &notify).await.unwrap());
    let told = store.get_job(&notify.id).await.unwrap().expect("conformance: the notify job, written with the finish");
    assert_eq!((told.status.as_str(), told.event.map(|e| e.processed)), ("running", Some(Some(3))));
    assert_eq!(store.get_job(&recover.id).await.unwrap().map(|j| j.status), Some("done".into()));

    // An endpoint's run of failures is announced once, until a reset ends the run.
    let (tenant, ep): (TenantId, EndpointId) = (typed(format!("{prefix}tenant")), typed(format!("{prefix}ep")));
    let failing = |n: &str| {
        let last = webhooks::domain::model::Attempt { attempt: 1, at: now, ..Default::default() };
        endpoint_lifecycle::failing_job(&tenant, &ep, 5, 10, n, &last, now)
    };
    assert!(store.announce_failing(&tenant, &ep, &failing("d1")).await.unwrap(), "conformance: announced");
    assert!(!store.announce_failing(&tenant, &ep, &failing("d2")).await.unwrap(), "conformance: once per run");
    assert!(store.get_job(&failing("d2").id).await.unwrap().is_none(), "conformance: no job for a second one");
    store.reset_failures(&tenant, &ep, "key").await.unwrap();
    assert!(store.announce_failing(&tenant, &ep, &failing("d3")).await.unwrap(), "conformance: the next run's");
    assert!(
        !store.announce_failing(&typed("another-tenant"), &ep, &failing("d4")).await.unwrap(),
        "conformance: no endpoint"
    );
}

/// An event written with a request fingerprint (an `Idempotency-Key` request): a repeat with
/// the same fingerprint, or with none, is a plain repeat; one with another fingerprint is
/// refused and writes nothing, not even a delivery to an endpoint the first did not have.
async fn idempotency(store: &dyn Store, config: &Config, prefix: &str, now: DateTime<Utc>) {
    let tenant: TenantId = typed(format!("{prefix}tenant"));
    let keyed: EventId = typed(format!("{prefix}evt-keyed"));
    let event = |fingerprint: Option<&str>| StoredEvent {
        tenant_id: tenant.clone(),
        event_id: keyed.clone(),
        event_type: "order.paid".into(),
        payload: "{}".into(),
        created_at: now,
        expires_at: now.timestamp() + 86_400,
        request_sha256: fingerprint.map(str::to_string),
    };
    let delivery = |ep: &str| {
        let ep: EndpointId = typed(ep);
        let id = webhooks::domain::model::delivery_id(&keyed, &ep);
        let (d, due_at, _) =
            delivery_lifecycle::new_delivery(config, now, id, &keyed, "order.paid", &tenant, &ep, false);
        (d, due_at)
    };
    let (first, first_due) = delivery(&format!("{prefix}ep-k1"));
    let inserted = store.insert_event(&event(Some("f1")), &[(&first, first_due)]).await.expect("a keyed event");
    assert_eq!((inserted.event, inserted.deliveries), (true, vec![true]), "conformance: a new keyed event");
    let inserted = store.insert_event(&event(Some("f1")), &[(&first, first_due)]).await.expect("the same request");
    assert_eq!((inserted.event, inserted.deliveries), (false, vec![false]), "conformance: the same request repeats");
    let (other, other_due) = delivery(&format!("{prefix}ep-k2"));
    let refused = store.insert_event(&event(Some("f2")), &[(&first, first_due), (&other, other_due)]).await;
    assert!(
        matches!(refused, Err(StoreError::RequestMismatch)),
        "conformance: another request is refused: {refused:?}"
    );
    assert_eq!(store.get_delivery(&other.id).await.unwrap(), None, "conformance: a refused request writes nothing");
    let inserted = store.insert_event(&event(None), &[(&first, first_due)]).await.expect("a repeat without a key");
    assert!(!inserted.event, "conformance: an id repeated without a key is a plain repeat");
}

/// The event-type catalog: a conditional create (with its version 1 record), a change guarded
/// on the revision read (a stale one writes nothing), a schema change's version record beside
/// the first, and the listing paged by name.
async fn event_types(store: &dyn Store, prefix: &str, now: DateTime<Utc>) {
    use webhooks::domain::event_type::{self, Draft, Patch};
    let name = format!("{prefix}order.paid");
    let draft = Draft { name: name.clone(), schema: Some(serde_json::json!({"type": "object"})), ..Draft::default() };
    let created = event_type::create(draft, now).expect("draft");
    store.create_event_type(&created).await.expect("create event type");
    assert!(
        matches!(store.create_event_type(&created).await, Err(StoreError::AlreadyExists)),
        "conformance: an event type's create is conditional"
    );
    let read = store.get_event_type(&name).await.expect("get").expect("created");
    assert_eq!(read, created, "conformance: an event type reads back as written, its revision too");
    assert!(store.get_event_type(&format!("{prefix}nope")).await.expect("get").is_none());

    let patch = Patch { schema: Some(Some(serde_json::json!({"type": "array"}))), ..Patch::default() };
    let (next, new_version) = event_type::update(&read, patch, now + Duration::seconds(1)).expect("patch");
    assert!(new_version);
    let stale = read.revision + 7;
    assert!(!store.save_event_type(&next, stale, true).await.expect("save"), "conformance: a stale revision");
    assert!(store.event_type_version(&name, 2).await.expect("version").is_none(), "conformance: nothing written");
    assert!(store.save_event_type(&next, read.revision, true).await.expect("save"));
    assert!(!store.save_event_type(&next, read.revision, true).await.expect("save"), "conformance: guard moved on");
    let v1 = store.event_type_version(&name, 1).await.expect("version").expect("version 1");
    let v2 = store.event_type_version(&name, 2).await.expect("version").expect("version 2");
    assert_eq!(
        (v1.schema, v2.schema),
        (created.schema.clone(), next.schema.clone()),
        "conformance: each version's schema"
    );
    assert_eq!(store.get_event_type(&name).await.expect("get").map(|e| e.version), Some(2));

    let other =
        event_type::create(Draft { name: format!("{prefix}order.sent"), ..Draft::default() }, now).expect("draft");
    store.create_event_type(&other).await.expect("create");
    let (mut seen, mut cursor) = (Vec::new(), None::<String>);
    loop {
        let page = store.list_event_types(1, cursor.as_deref()).await.expect("list event types");
        assert!(page.data.len() <= 1);
        seen.extend(page.data.into_iter().map(|e| e.name).filter(|n| n.starts_with(prefix)));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen, [name, format!("{prefix}order.sent")], "conformance: the catalog listed by name, once each");
    assert!(matches!(store.list_event_types(10, Some("not-a-cursor")).await, Err(StoreError::InvalidCursor)));
}

/// An API key's tenants narrowed by a purge: the tenant removed from a key naming others (its
/// place wherever it is), nothing changed for a key naming it alone, not naming it, or for
/// every tenant, and a key that does not exist is `None`.
async fn api_keys(store: &dyn Store, prefix: &str, now: DateTime<Utc>) {
    use webhooks::domain::api_key::ApiKey;
    let key = |name: &str, tenants: Option<&[&str]>| ApiKey {
        id: format!("key_{prefix}{name}"),
        prefix: format!("whk_{prefix}{name}"),
        name: name.into(),
        tenant_ids: tenants.map(|t| t.iter().map(|x| format!("{prefix}{x}")).collect()),
        created_at: now,
        expires_at: None,
        revoked_at: None,
        last_used_at: None,
        secret_sha256: "c2VjcmV0".into(),
    };
    let t = |x: &str| format!("{prefix}{x}");
    let shared = key("shared", Some(&["a", "b", "c"]));
    let alone = key("alone", Some(&["b"]));
    let every = key("every", None);
    for k in [&shared, &alone, &every] {
        store.create_api_key(k).await.expect("create API key");
    }
    let narrowed = store.remove_api_key_tenant(&shared.id, &t("b")).await.expect("remove").expect("the key");
    assert_eq!(narrowed.tenant_ids, Some(vec![t("a"), t("c")]), "conformance: the tenant removed, the others kept");
    let again = store.remove_api_key_tenant(&shared.id, &t("b")).await.expect("remove again").expect("the key");
    assert_eq!(again.tenant_ids, Some(vec![t("a"), t("c")]), "conformance: a tenant not named changes nothing");
    let read = store.get_api_key(&shared.id).await.expect("get").expect("the key");
    assert_eq!(read.tenant_ids, narrowed.tenant_ids, "conformance: the removal is stored");
    let kept = store.remove_api_key_tenant(&alone.id, &t("b")).await.expect("remove").expect("the key");
    assert_eq!(kept.tenant_ids, Some(vec![t("b")]), "conformance: a key naming the tenant alone is left to revoke");
    let kept = store.remove_api_key_tenant(&every.id, &t("b")).await.expect("remove").expect("the key");
    assert_eq!(kept.tenant_ids, None, "conformance: a key for every tenant is untouched");
    let missing = store.remove_api_key_tenant(&format!("key_{prefix}nope"), &t("b")).await.expect("remove");
    assert!(missing.is_none(), "conformance: no such key");
}
