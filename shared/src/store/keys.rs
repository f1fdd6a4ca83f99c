//! Every DynamoDB key and index attribute, built in one place.

/// Partition key attribute.
pub const PK: &str = "pk";
/// Sort key attribute.
pub const SK: &str = "sk";
/// The due GSI's name: deliveries in flight and running jobs, keys only (a change of a
/// delivery's state that keeps its due time, the claim, rewrites no entry; the sweeper reads
/// the items it finds).
pub const DUE_INDEX: &str = "due";
/// Due GSI partition key attribute: `DUE#{shard}` ([`due_pk`]), `DUE#jobs` for jobs.
pub const DUE_PK: &str = "due_pk";
/// Due GSI sort key attribute (number, milliseconds since the epoch).
pub const DUE_AT: &str = "due_at";
/// The deliveries' by-endpoint GSI, keys only: partition [`endpoint_partition`], sort key
/// [`endpoint_sk`] (`{bucket}#{created_at}#{id}`), so a change that keeps the delivery's
/// bucket (a claim, a retry's new wait) rewrites no entry; listings and counts that need
/// more than the bucket read the items.
pub const ENDPOINT_INDEX: &str = "by_endpoint";
/// By-endpoint GSI partition key attribute ([`endpoint_partition`]).
pub const EP_PK: &str = "ep_pk";
/// By-endpoint GSI sort key attribute ([`endpoint_sk`]).
pub const EP_SK: &str = "ep_sk";
/// The by-status (dead letter) GSI's name.
pub const STATUS_INDEX: &str = "by_status";
/// By-status GSI partition key attribute.
pub const STATUS_KEY: &str = "status_key";
/// By-status GSI sort key attribute.
pub const STATUS_SK: &str = "status_sk";
/// The event item's string set of the endpoint ids it has deliveries for (each delivery's id is
/// [`crate::domain::model::delivery_id`] of the event id and one of them).
pub const EVENT_ENDPOINTS: &str = "endpoint_ids";
/// The event item's attribute holding the fingerprint of the `Idempotency-Key` request that
/// wrote it ([`crate::domain::model::StoredEvent::request_sha256`]).
pub const REQUEST_SHA256: &str = "request_sha256";

/// The attribute marking the items one ingest call wrote (a random 128-bit value, hex), so
/// that its take-back after a failure deletes only those.
pub const INGEST_TOKEN: &str = "ingest_token";

/// The TTL attribute (unix seconds).
pub const TTL: &str = "expires_at";

/// The partition of the API keys (`API_KEYS` / `{key id}`).
pub const API_KEYS_PK: &str = "API_KEYS";

/// `EVENT_TYPES`: the partition of the event-type catalog, one item per type (sort key its
/// name).
pub const EVENT_TYPES_PK: &str = "EVENT_TYPES";

/// `EVENT_TYPE#{name}`: the partition of an event type's version records.
pub fn event_type_pk(name: &str) -> String {
    format!("EVENT_TYPE#{name}")
}

/// `VERSION#{n}`: the sort key of an event type's version record.
pub fn event_type_version_sk(version: u64) -> String {
    format!("VERSION#{version}")
}

/// `TENANT#{tenant_id}`: the partition holding a tenant's endpoints.
pub fn tenant_pk(tenant_id: &str) -> String {
    format!("TENANT#{tenant_id}")
}

/// `ENDPOINT#{id}`: an endpoint's sort key under its tenant, and its pointer's partition key.
pub fn endpoint_key(id: &str) -> String {
    format!("ENDPOINT#{id}")
}

/// `COPY#{copy}#TENANT#{tenant_id}` (`copy` from 1): the partition of a tenant's copy number
/// `copy` of its endpoint items; copy 0 is the endpoint item itself, under [`tenant_pk`]
/// (`WEBHOOKS_ENDPOINT_COPIES`, see [`crate::store::dynamo`]'s endpoint copies). The prefix
/// keeps a copy's partition apart from every tenant's own (`TENANT#...`), whatever the tenant
/// id holds.
pub fn endpoint_copy_pk(tenant_id: &str, copy: u32) -> String {
    if copy == 0 { tenant_pk(tenant_id) } else { format!("COPY#{copy}#TENANT#{tenant_id}") }
}

/// The copy of a tenant's endpoints that a reader keyed by `key` (a delivery id, an event id)
/// reads: [`due_shard`] of `key` modulo `copies` (0: the endpoint item itself).
pub fn endpoint_copy(key: &str, copies: u32) -> u32 {
    if copies <= 1 { 0 } else { due_shard(key, copies) }
}

/// `SETTINGS`: the sort key of a tenant's settings item, in its partition [`tenant_pk`] (and
/// each copy's, [`endpoint_copy_pk`]): after every `ENDPOINT#` key, so the endpoints' Query
/// widened to `BETWEEN "ENDPOINT#" AND "SETTINGS"` reads it too.
pub const SETTINGS_SK: &str = "SETTINGS";

/// `DELETED#{id}`: the sort key, in its tenant's partition [`tenant_pk`], of a deleted
/// endpoint's tombstone (the endpoint as it was at its deletion, kept while what it left
/// lives: its deliveries and counters), so a purge of the tenant finds them
/// ([`crate::store::LifecycleStore::deleted_endpoints`]). Before every `ENDPOINT#` key: the
/// endpoints' Queries never read it.
pub fn deleted_endpoint_sk(id: &str) -> String {
    format!("{DELETED_ENDPOINT_PREFIX}{id}")
}

/// The prefix of [`deleted_endpoint_sk`].
pub const DELETED_ENDPOINT_PREFIX: &str = "DELETED#";

/// Sort key of an endpoint pointer.
pub const ENDPOINT_POINTER_SK: &str = "ENDPOINT";

/// `DELIVERY#{id}`.
pub fn delivery_pk(id: &str) -> String {
    format!("DELIVERY#{id}")
}

/// The key of an event's item (its payload and the endpoints of its deliveries): partition
/// `EVENT_ID#{event_id}`, sort key `TENANT#{tenant_id}`. Event ids are the caller's, so two
/// tenants can use one: each has its own item in the id's partition, and
/// `GET /v1/events/{id}` without a tenant finds them all with one Query of the table, with no
/// index entry per event. Neither part can be mistaken for the other's (the partition holds
/// the whole event id, the sort key the whole tenant id), and the prefix keeps the partition
/// apart from every other item's.
pub fn event_key(tenant_id: &str, event_id: &str) -> (String, String) {
    (event_id_pk(event_id), format!("TENANT#{tenant_id}"))
}

/// `EVENT_ID#{event_id}`: the partition of the items of an event id (see [`event_key`]).
pub fn event_id_pk(event_id: &str) -> String {
    format!("EVENT_ID#{event_id}")
}

/// Sort key of a delivery.
pub const DELIVERY_SK: &str = "DELIVERY";

/// Prefix of a job's partition key.
pub const JOB_PREFIX: &str = "JOB#";

/// `JOB#{id}`.
pub fn job_pk(id: &str) -> String {
    format!("{JOB_PREFIX}{id}")
}

/// Sort key of a job.
pub const JOB_SK: &str = "JOB";

/// The due-index shard of a delivery: the first four bytes of SHA-256(id), modulo `shards`.
pub fn due_shard(id: &str, shards: u32) -> u32 {
    crate::domain::ids::shard_of(id, shards)
}

/// The `by_endpoint` partition of a delivery: the endpoint id itself with one shard,
/// `{endpoint_id}#{k}` with `shards` > 1, `k` the delivery's
/// [`due_shard`] modulo `shards` (spreads one hot endpoint's entries over `shards`
/// partitions: issue #14's capacity model derives how many).
pub fn endpoint_partition(endpoint_id: &str, delivery_id: &str, shards: u32) -> String {
    if shards <= 1 { endpoint_id.to_string() } else { format!("{endpoint_id}#{}", due_shard(delivery_id, shards)) }
}

/// The `by_status` partition of an exhausted or held delivery: the status name with one shard,
/// `{status}#{k}` with `shards` > 1 (as [`endpoint_partition`]).
pub fn status_partition(status: &str, delivery_id: &str, shards: u32) -> String {
    if shards <= 1 { status.to_string() } else { format!("{status}#{}", due_shard(delivery_id, shards)) }
}

/// Every partition a listing of `base` reads: `base` (entries written while the setting was
/// one) and, with `shards` above one, `{base}#{k}` for each shard, so raising the setting on
/// a live table hides nothing.
pub fn partitions(base: &str, shards: u32) -> Vec<String> {
    let mut out = vec![base.to_string()];
    if shards > 1 {
        out.extend((0..shards).map(|k| format!("{base}#{k}")));
    }
    out
}

/// The due-index "shard" of jobs: their own partition, `DUE#jobs`, read apart from the
/// deliveries' shards so that a backlog of job steps never takes a tick's batch from due
/// deliveries.
pub const JOB_SHARD: u32 = u32::MAX;

/// `DUE#{shard}`, or `DUE#jobs` for [`JOB_SHARD`].
pub fn due_pk(shard: u32) -> String {
    if shard == JOB_SHARD { "DUE#jobs".to_string() } else { format!("DUE#{shard}") }
}

/// The `by_endpoint` bucket of a status: `open` (scheduled, sending), `held`, `exhausted`,
/// `delivered`.
///
/// Why `scheduled` and `sending` share `open`: every attempt moves a delivery from scheduled
/// to sending (the claim) and, unless it ends, back (the record). With a bucket each, both
/// writes would re-key the keys-only entry, a delete and a put in the index: 4 index write
/// units per retried attempt and 2 on a first try's claim, $1.25 to $2.50 per million
/// attempts at $0.625 per million write units, paid by every delivery. Sharing one bucket
/// costs only the rare reader that must tell them apart: a listing filtered on `scheduled`
/// or `sending` reads the items of the `open` range it walks (at most 10 a partition a
/// request, then a cursor), and the stats split the two by the oldest 100 items of the range.
pub fn endpoint_bucket(status: crate::domain::model::DeliveryStatus) -> &'static str {
    use crate::domain::model::DeliveryStatus as S;
    match status {
        S::Scheduled | S::Sending => "open",
        S::Held => "held",
        S::Exhausted => "exhausted",
        S::Delivered => "delivered",
    }
}

/// Every `by_endpoint` bucket.
pub const ENDPOINT_BUCKETS: [&str; 4] = ["open", "held", "exhausted", "delivered"];

/// `{bucket}#{created_at}#{id}`: a delivery's `by_endpoint` sort key.
pub fn endpoint_sk(
    status: crate::domain::model::DeliveryStatus,
    created_at: chrono::DateTime<chrono::Utc>,
    id: &str,
) -> String {
    format!("{}#{}", endpoint_bucket(status), time_sk(created_at, id))
}

/// The `by_status` partition of endpoints stopped (paused, probing or disabled): the
/// endpoint item carries it while it is not enabled, with `status_sk` = [`time_sk`] of when it
/// stopped (see `dynamo::attention`).
pub const ATTENTION_STOPPED: &str = "attention#stopped";

/// The `by_status` partition of endpoints failing: an endpoint item (or copy) carries it while
/// its failures-in-a-row counter is above 0, with `status_sk` = [`time_sk`] of the run's first
/// failure (see `dynamo::attention`).
pub const ATTENTION_FAILING: &str = "attention#failing";

/// A sortable `{time}#{id}` sort key (RFC 3339, milliseconds, `Z`).
pub fn time_sk(at: chrono::DateTime<chrono::Utc>, id: &str) -> String {
    format!("{}#{id}", at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

/// The partition of an endpoint's delivered counters: `STATS#{endpoint_id}`, or
/// `STATS#{endpoint_id}#{k}` with `shards` > 1 (k from the delivery id's hash, as
/// [`endpoint_partition`]: one hot endpoint's counting spreads like its index entries).
pub fn stats_partition(endpoint_id: &str, delivery_id: &str, shards: u32) -> String {
    endpoint_partition(&format!("STATS#{endpoint_id}"), delivery_id, shards)
}

/// Every partition of an endpoint's delivered counters (see [`partitions`]).
pub fn stats_partitions(endpoint_id: &str, shards: u32) -> Vec<String> {
    partitions(&format!("STATS#{endpoint_id}"), shards)
}

/// The sort key of a day's counter item: `DAY#{YYYY-MM-DD}` (UTC), so a key range is a
/// range of days.
pub fn stats_day_sk(at: chrono::DateTime<chrono::Utc>) -> String {
    format!("DAY#{}", at.format("%Y-%m-%d"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_under_a_tenant_cannot_collide_across_tenants() {
        assert_ne!(event_key("a#b", "c"), event_key("a", "b#c"));
        assert_eq!(event_key("acme", "evt_1"), ("EVENT_ID#evt_1".to_string(), "TENANT#acme".to_string()));
    }
}
