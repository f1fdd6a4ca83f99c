//! Every DynamoDB key and index attribute, built in one place.

use sha2::{Digest, Sha256};

/// Partition key attribute.
pub const PK: &str = "pk";
/// Sort key attribute.
pub const SK: &str = "sk";
/// The due GSI's name (jobs, and deliveries written before 2026-12-01; projects what a
/// [`crate::lifecycle::DueItem`] holds).
pub const DUE_INDEX: &str = "due";
/// Due GSI partition key attribute.
pub const DUE_PK: &str = "due_pk";
/// Due GSI sort key attribute (number, milliseconds since the epoch).
pub const DUE_AT: &str = "due_at";
/// The deliveries' due GSI: the same keys as [`DUE_INDEX`] under [`DUE_KEYS_PK`] and
/// [`DUE_KEYS_AT`], projecting keys only, so a change of a delivery's state that keeps its
/// due time (the claim) rewrites no entry; the sweeper reads the items it finds.
pub const DUE_KEYS_INDEX: &str = "due_keys";
/// `due_keys` partition key attribute (`DUE#{shard}`, as [`DUE_PK`]).
pub const DUE_KEYS_PK: &str = "dk_pk";
/// `due_keys` sort key attribute (number, milliseconds since the epoch, as [`DUE_AT`]).
pub const DUE_KEYS_AT: &str = "dk_at";
/// The by-endpoint GSI of deliveries written before 2026-12-02 (projects what a
/// [`super::DeliverySummary`] shows): each keeps its entry there until a change of its
/// bucket moves it to [`ENDPOINT_KEYS_INDEX`].
pub const ENDPOINT_INDEX: &str = "by_endpoint";
/// By-endpoint GSI partition key attribute.
pub const EP_PK: &str = "ep_pk";
/// By-endpoint GSI sort key attribute.
pub const EP_SK: &str = "ep_sk";
/// The deliveries' by-endpoint GSI: the same keys as [`ENDPOINT_INDEX`] under
/// [`ENDPOINT_KEYS_PK`] and [`ENDPOINT_KEYS_SK`], projecting keys only, so a change that
/// keeps the delivery's bucket (a claim, a retry's new wait) rewrites no entry; listings
/// and counts that need more than the bucket read the items.
pub const ENDPOINT_KEYS_INDEX: &str = "by_endpoint_keys";
/// `by_endpoint_keys` partition key attribute (as [`EP_PK`]: [`endpoint_partition`]).
pub const ENDPOINT_KEYS_PK: &str = "ek_pk";
/// `by_endpoint_keys` sort key attribute (as [`EP_SK`]: [`endpoint_sk`]).
pub const ENDPOINT_KEYS_SK: &str = "ek_sk";
/// The by-status (dead letter) GSI's name.
pub const STATUS_INDEX: &str = "by_status";
/// By-status GSI partition key attribute.
pub const STATUS_KEY: &str = "status_key";
/// By-status GSI sort key attribute.
pub const STATUS_SK: &str = "status_sk";
/// The by-event GSI's name: partition key `event_id`, sort key `endpoint_id`. Holds items of
/// events accepted before the event-key change, read beside the table's `EVENT_ID#`
/// partitions (see [`event_key`]): event items under [`scoped_event_pk`] (`endpoint_id` =
/// [`EVENT_ENTRY`], one entry per event, written at ingest, or again by a repeat that finds
/// it taken back, which outside a deploy's rollover does not happen), and delivery items
/// written
/// before 2026-12-01 (their endpoint id was in `endpoint_id`; every claim and record rewrote
/// their entry). Newer deliveries keep it in [`DELIVERY_ENDPOINT`], newer event items have
/// no `endpoint_id`, so neither is in it.
pub const EVENT_INDEX: &str = "by_event";
/// By-event GSI partition key attribute.
pub const EVENT_PK: &str = "event_id";
/// By-event GSI sort key attribute.
pub const EVENT_SK: &str = "endpoint_id";
/// `endpoint_id` of an event item under [`scoped_event_pk`]: puts it in `by_event` (its sort
/// key there).
pub const EVENT_ENTRY: &str = "~event";
/// The event item's string set of the endpoint ids it has deliveries for (each delivery's id is
/// [`crate::model::delivery_id`] of the event id and one of them).
pub const EVENT_ENDPOINTS: &str = "endpoint_ids";
/// The delivery item's attribute holding its endpoint id (not `endpoint_id`, which would put
/// the delivery in `by_event`).
pub const DELIVERY_ENDPOINT: &str = "endpoint";

/// `IDEMPOTENCY#{tenant}#{key}` (tenant as [`scoped`] writes it): a stored answer to an
/// `Idempotency-Key`.
pub fn idempotency_pk(tenant_id: &str, key: &str) -> String {
    format!("IDEMPOTENCY#{}", scoped(tenant_id, key))
}

/// `{byte length of tenant_id}:{tenant_id}#{id}`: an id of the caller's under its tenant,
/// unambiguous whatever either contains (tenant `a#b` with id `c` and tenant `a` with id
/// `b#c` are different keys), so one tenant can never reach another's item.
pub fn scoped(tenant_id: &str, id: &str) -> String {
    format!("{}:{tenant_id}#{id}", tenant_id.len())
}

/// Sort key of an idempotency record.
pub const IDEMPOTENCY_SK: &str = "IDEMPOTENCY";

/// The attribute marking the items one ingest call wrote (a random 128-bit value, hex), so
/// that its take-back after a failure deletes only those.
pub const INGEST_TOKEN: &str = "ingest_token";

/// The TTL attribute (unix seconds).
pub const TTL: &str = "expires_at";

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
/// reads: [`due_shard`] of `key` modulo `read_copies` (0: the endpoint item itself).
pub fn endpoint_copy(key: &str, read_copies: u32) -> u32 {
    if read_copies <= 1 { 0 } else { due_shard(key, read_copies) }
}

/// Sort key of the marker item in a copy partition saying that it holds a checked copy of
/// every endpoint of its tenant (written by the copy fill, see [`crate::store::dynamo`]).
pub const COPIES_MARKER_SK: &str = "COPIES";

/// The attribute (boolean) of an endpoint copy saying it was written when no writer that
/// skips the copy could still run (by a writer reading copies, or by the copy fill after
/// checking it against the endpoint item's version).
pub const COPY_CHECKED: &str = "copy_checked";

/// Sort key of an endpoint pointer.
pub const ENDPOINT_POINTER_SK: &str = "ENDPOINT";

/// `DELIVERY#{id}`.
pub fn delivery_pk(id: &str) -> String {
    format!("DELIVERY#{id}")
}

/// The key of an event's item (its payload and the endpoints of its deliveries), as written
/// since the event-key change (issue #14): partition `EVENT_ID#{event_id}`, sort key
/// `TENANT#{tenant_id}`. Event ids are the caller's, so two tenants can use one: each has its
/// own item in the id's partition, and `GET /v1/events/{id}` without a tenant finds them all
/// with one Query of the table, where the key before it needed an index entry per event
/// (`by_event`, one GSI write unit). Neither part can be mistaken for the other's (the
/// partition holds the whole event id, the sort key the whole tenant id), and the prefix
/// keeps the partition apart from every other item's and from [`scoped_event_pk`]'s.
pub fn event_key(tenant_id: &str, event_id: &str) -> (String, String) {
    (event_id_pk(event_id), format!("TENANT#{tenant_id}"))
}

/// `EVENT_ID#{event_id}`: the partition of the items of an event id (see [`event_key`]).
pub fn event_id_pk(event_id: &str) -> String {
    format!("EVENT_ID#{event_id}")
}

/// `EVENT#{tenant}#{event_id}` (tenant as [`scoped`] writes it): the partition of an event
/// item written before the event-key change (sort key [`EVENT_ITEM_SK`]; found without its
/// tenant through its `by_event` entry). Ingest looks it up before writing an event: a repeat
/// of such an event goes on with that item; new events are under [`event_key`].
pub fn scoped_event_pk(tenant_id: &str, event_id: &str) -> String {
    format!("EVENT#{}", scoped(tenant_id, event_id))
}

/// Sort key of an event item under [`scoped_event_pk`].
pub const EVENT_ITEM_SK: &str = "EVENT";

/// The key of an event item written before the event-key change: ([`scoped_event_pk`],
/// [`EVENT_ITEM_SK`]).
pub fn scoped_event_key(tenant_id: &str, event_id: &str) -> (String, String) {
    (scoped_event_pk(tenant_id, event_id), EVENT_ITEM_SK.to_string())
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
    let d = Sha256::digest(id.as_bytes());
    u32::from_be_bytes([d[0], d[1], d[2], d[3]]) % shards.max(1)
}

/// The `by_endpoint` partition of a delivery: the endpoint id itself with one shard (the
/// layout before index sharding), `{endpoint_id}#{k}` with `shards` > 1, `k` the delivery's
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

/// Every partition a listing of `base` reads: `base` (items written unsharded, before the
/// setting was raised) and, with `shards` > 1, `{base}#{k}` for each shard.
pub fn partitions(base: &str, shards: u32) -> Vec<String> {
    let mut out = vec![base.to_string()];
    if shards > 1 {
        out.extend((0..shards).map(|k| format!("{base}#{k}")));
    }
    out
}

/// The due-index "shard" of jobs: their own partition, `DUE#jobs`, read apart from the
/// deliveries' shards so that a backlog of job steps never takes a tick's batch from due
/// deliveries (jobs written before this partition existed sit in `DUE#{shard}` and are
/// still found there).
pub const JOB_SHARD: u32 = u32::MAX;

/// `DUE#{shard}`, or `DUE#jobs` for [`JOB_SHARD`].
pub fn due_pk(shard: u32) -> String {
    if shard == JOB_SHARD { "DUE#jobs".to_string() } else { format!("DUE#{shard}") }
}

/// The `by_endpoint` bucket of a status: `open` (scheduled, sending), `held`, `exhausted`,
/// `delivered`.
pub fn endpoint_bucket(status: crate::model::DeliveryStatus) -> &'static str {
    use crate::model::DeliveryStatus as S;
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
    status: crate::model::DeliveryStatus,
    created_at: chrono::DateTime<chrono::Utc>,
    id: &str,
) -> String {
    format!("{}#{}", endpoint_bucket(status), time_sk(created_at, id))
}

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
        assert_ne!(scoped_event_pk("a#b", "c"), scoped_event_pk("a", "b#c"));
        assert_ne!(event_key("a#b", "c"), event_key("a", "b#c"));
        assert_ne!(idempotency_pk("a#b", "c"), idempotency_pk("a", "b#c"));
        assert_eq!(scoped_event_pk("acme", "evt_1"), "EVENT#4:acme#evt_1");
        assert_eq!(event_key("acme", "evt_1"), ("EVENT_ID#evt_1".to_string(), "TENANT#acme".to_string()));
    }
}
