//! Listings and counts of deliveries: pages merged over the index's partitions
//! (`by_endpoint`, `by_status`, their shards) with bounded reads per request, and the counts
//! an endpoint's view shows.

use super::*;
use crate::domain::ids::DeliveryId;

impl DynamoStore {
    /// One page of deliveries from the index the query names: `by_endpoint` (keys only: the
    /// items of the entries it lists are read), or `by_status` without an endpoint (it
    /// projects the summary).
    pub(super) async fn index_page(&self, q: &DeliveryQuery) -> Result<Page<DeliverySummary>, StoreError> {
        let limit = q.limit.clamp(1, 100);
        match (&q.endpoint_id, q.status) {
            (Some(ep), status) => {
                let buckets: Vec<&str> = match status {
                    Some(st) => vec![endpoint_bucket(st)],
                    None => ENDPOINT_BUCKETS.to_vec(),
                };
                let sources = self.endpoint_sources(ep, &buckets);
                let open = status.filter(|st| in_open(*st));
                // An item read for an entry is listed while it is still in the entry's bucket
                // (and in the status asked for): the index lags the table a moment.
                let keep = move |src: &Source, d: &DeliverySummary| {
                    endpoint_bucket(d.status) == src.bucket && open.is_none_or(|st| d.status == st)
                };
                self.merged_page(&sources, q, limit, &keep, |src, start| self.bucket_page(src, q, limit, start)).await
            }
            (None, Some(st)) => {
                let sources: Vec<Source> = partitions(st.as_str(), self.status_shards)
                    .into_iter()
                    .map(|partition| Source { name: partition.clone(), partition, bucket: "" })
                    .collect();
                let status_page = |src: &Source, start: Option<Item>| {
                    let req = self
                        .client
                        .query()
                        .table_name(&self.table)
                        .scan_index_forward(q.oldest_first)
                        .index_name(STATUS_INDEX)
                        .key_condition_expression("status_key = :k")
                        .expression_attribute_values(":k", s(&src.partition));
                    self.fill_page(req, src.kind(), limit, start)
                };
                // `by_status` projects the delivery: no entry is read as its item.
                self.merged_page(&sources, q, limit, &|_, _| true, status_page).await
            }
            (None, None) => Err(StoreError::Unsupported("list deliveries by endpoint_id or by status".into())),
        }
    }

    /// Every partition of endpoint `ep` in `by_endpoint`, for each of `buckets`. Cursor names:
    /// the bucket for the unsplit partition, `{bucket}#{k - 1}` for a shard.
    pub(super) fn endpoint_sources(&self, ep: &str, buckets: &[&'static str]) -> Vec<Source> {
        let mut sources = Vec::new();
        for &bucket in buckets {
            for (k, partition) in partitions(ep, self.endpoint_shards).into_iter().enumerate() {
                let name = if k == 0 { bucket.to_string() } else { format!("{bucket}#{}", k - 1) };
                sources.push(Source { name, partition, bucket });
            }
        }
        sources
    }

    /// A Query of `by_endpoint`.
    pub(super) fn endpoint_query(&self) -> aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder {
        self.client.query().table_name(&self.table).index_name(ENDPOINT_INDEX)
    }

    /// See [`DeliveryStore::count_deliveries_in`]: per status, the sum over the endpoint's partitions
    /// of `by_endpoint`, one Select COUNT of the status's key range in each, at most
    /// [`COUNT_CAP`] entries (exact when the range ends within them); for `scheduled` and
    /// `sending`, which share the `open` range (the index projects no status), see
    /// [`Self::open_tally_in`]. A fixed number of requests and read units per partition,
    /// whatever the backlog.
    pub(super) async fn counts_in_buckets(
        &self,
        ep: &str,
        statuses: &[DeliveryStatus],
    ) -> Result<Vec<Counted>, StoreError> {
        let mut selects = Vec::new();
        for (k, st) in statuses.iter().enumerate().filter(|(_, st)| !in_open(**st)) {
            for src in self.endpoint_sources(ep, &[endpoint_bucket(*st)]) {
                selects.push(self.count_for(k, src));
            }
        }
        let (counted, tally) = futures::future::join(
            futures::stream::iter(selects).buffer_unordered(SOURCES_IN_FLIGHT).collect::<Vec<_>>(),
            self.open_tally(ep, statuses.iter().any(|st| in_open(*st))),
        )
        .await;
        let open = tally?;
        let mut counts: Vec<Counted> = statuses
            .iter()
            .map(|st| match st {
                DeliveryStatus::Scheduled => Counted { n: open.scheduled, exact: open.exact },
                DeliveryStatus::Sending => Counted { n: open.sending, exact: open.exact },
                _ => Counted { n: 0, exact: true },
            })
            .collect();
        for c in counted {
            let (k, n, exact) = c?;
            counts[k].n += n;
            counts[k].exact &= exact;
        }
        Ok(counts)
    }

    /// [`Self::count_in_partition`] of `src`, tagged with `k`.
    pub(super) async fn count_for(&self, k: usize, src: Source) -> Result<(usize, u64, bool), StoreError> {
        let (n, exact) = self.count_in_partition(&src).await?;
        Ok((k, n, exact))
    }

    /// Entries of one `by_endpoint` partition in `src`'s bucket, and whether that is all of
    /// them: one Select COUNT of the bucket's key range, `Limit` [`COUNT_CAP`] (an entry is
    /// keys only, about 150 bytes, so the page stays under DynamoDB's 1 MB: at most 128 read
    /// units, eventually consistent).
    pub(super) async fn count_in_partition(&self, src: &Source) -> Result<(u64, bool), StoreError> {
        let page = self
            .endpoint_query()
            .select(aws_sdk_dynamodb::types::Select::Count)
            .key_condition_expression("#ipk = :k AND begins_with(#isk, :b)")
            .expression_attribute_names("#ipk", EP_PK)
            .expression_attribute_names("#isk", EP_SK)
            .expression_attribute_values(":k", s(&src.partition))
            .expression_attribute_values(":b", s(format!("{}#", src.bucket)))
            .limit(self.count_cap)
            .send()
            .await
            .map_err(aws)?;
        let more = page.last_evaluated_key.is_some_and(|k| !k.is_empty());
        Ok((u64::try_from(page.count).unwrap_or(0), !more))
    }

    /// How many of endpoint `ep`'s deliveries in `by_endpoint`'s `open` range are
    /// scheduled and sending, when `wanted` (else none are read): [`Self::open_tally_in`]
    /// of each partition, summed.
    pub(super) async fn open_tally(&self, ep: &str, wanted: bool) -> Result<OpenTally, StoreError> {
        if !wanted {
            return Ok(OpenTally { exact: true, ..OpenTally::default() });
        }
        let sources = self.endpoint_sources(ep, &[endpoint_bucket(DeliveryStatus::Scheduled)]);
        let tallies: Vec<_> = sources.iter().map(|src| self.open_tally_in(src)).collect();
        let tallies: Vec<Result<OpenTally, StoreError>> =
            futures::stream::iter(tallies).buffer_unordered(SOURCES_IN_FLIGHT).collect().await;
        tallies.into_iter().try_fold(OpenTally { exact: true, ..OpenTally::default() }, |sum, t| {
            t.map(|t| OpenTally {
                scheduled: sum.scheduled + t.scheduled,
                sending: sum.sending + t.sending,
                exact: sum.exact && t.exact,
            })
        })
    }

    /// [`Self::open_tally`] of one partition: the oldest [`SPLIT_CAP`] entries of its `open`
    /// range and their items' status (BatchGetItem, eventually consistent: half a read unit
    /// an item of up to 4 KB); an item no longer open (the index lags the table a moment) is
    /// in neither. When the range holds more, its entries are counted (see
    /// [`Self::count_in_partition`]): `sending` is those seen sending, `scheduled` the rest,
    /// and the tally is not exact.
    pub(super) async fn open_tally_in(&self, src: &Source) -> Result<OpenTally, StoreError> {
        let page = self
            .endpoint_query()
            .key_condition_expression("#ipk = :k AND begins_with(#isk, :b)")
            .expression_attribute_names("#ipk", EP_PK)
            .expression_attribute_names("#isk", EP_SK)
            .expression_attribute_values(":k", s(&src.partition))
            .expression_attribute_values(":b", s(format!("{}#", src.bucket)))
            .limit(self.split_cap)
            .send()
            .await
            .map_err(aws)?;
        let more = page.last_evaluated_key.is_some_and(|k| !k.is_empty());
        let keys: Vec<Item> = page.items.unwrap_or_default().iter().map(key_of).collect();
        let (mut scheduled, mut sending) = (0u64, 0u64);
        for item in self.batch_get(&keys, Some(("#status", &[("#status", "status")])), false).await? {
            match item.get("status").and_then(|v| v.as_s().ok()).map(String::as_str) {
                Some("scheduled") => scheduled += 1,
                Some("sending") => sending += 1,
                _ => {}
            }
        }
        if !more {
            return Ok(OpenTally { scheduled, sending, exact: true });
        }
        let (open, _) = self.count_in_partition(src).await?;
        Ok(OpenTally { scheduled: open.saturating_sub(sending), sending, exact: false })
    }

    /// Up to `limit` entries of one `by_endpoint` partition and bucket (`src`: a key range,
    /// nothing outside the bucket is read), accepted in the query's window, from `start`.
    /// Returns them and the key to go on from, if there may be more.
    pub(super) async fn bucket_page(
        &self,
        src: &Source,
        q: &DeliveryQuery,
        limit: usize,
        start: Option<Item>,
    ) -> Result<EntryPage, StoreError> {
        let bucket = src.bucket;
        let from = format!("{bucket}#{}", q.since.map(|t| time_sk(t, "")).unwrap_or_else(|| "0".into()));
        let to = format!("{bucket}#{}", q.until.map(|t| time_sk(t, "")).unwrap_or_else(|| "~".into()));
        if let Some(key) = &start {
            // A cursor from another endpoint, bucket or window would reach DynamoDB as a bad key.
            let in_window = key.get(EP_SK).and_then(|v| v.as_s().ok()).is_some_and(|sk| *sk >= from && *sk <= to);
            if !start_key_fits(src, key) || !in_window {
                return Err(StoreError::InvalidCursor);
            }
        }
        let req = self
            .endpoint_query()
            .scan_index_forward(q.oldest_first)
            .key_condition_expression("#ipk = :k AND #isk BETWEEN :from AND :to")
            .expression_attribute_names("#ipk", EP_PK)
            .expression_attribute_names("#isk", EP_SK)
            .expression_attribute_values(":k", s(&src.partition))
            .expression_attribute_values(":from", s(&from))
            .expression_attribute_values(":to", s(&to));
        self.fill_page(req, src.kind(), limit, start).await
    }

    /// Runs `req`, a Query of an index partition of `kind`, page by page from `start` until `limit`
    /// entries are read or the range ends (a filter can make a page come back short).
    /// Returns them and the key to go on from, if there may be more.
    pub(super) async fn fill_page(
        &self,
        req: aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder,
        kind: Kind,
        limit: usize,
        mut start: Option<Item>,
    ) -> Result<EntryPage, StoreError> {
        let mut entries = Vec::new();
        loop {
            let page = req
                .clone()
                .limit(i32::try_from(limit - entries.len()).unwrap_or(100))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(aws)?;
            for item in page.items.unwrap_or_default() {
                entries.extend(Entry::of(kind, item)?);
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => {
                    if entries.len() >= limit {
                        return Ok((entries, Some(k)));
                    }
                    start = Some(k);
                }
                _ => return Ok((entries, None)),
            }
        }
    }

    /// A page merged over several index partitions (`sources`): the newest (or oldest) `limit`
    /// of them in the index's order, each source read by `page` from where the cursor says,
    /// up to `limit` entries at a time. The merge runs on the entries' keys; only the entries
    /// it takes of the keys-only `by_endpoint` are read as their items (BatchGetItem, strongly
    /// consistent, about as many as it lists), and listed if `keep` takes them. An item that
    /// has moved on since its entry was read (another status of the `open` range, or another
    /// bucket: the index lags the table) is left out and the merge reads on, for at most
    /// [`MERGE_STEPS`] reads of every source: a status the `open` range holds few of (such as
    /// `sending` behind a backlog of scheduled ones) then comes back as a page shorter than
    /// `limit`, even empty, with a cursor, as a Query with a filter does, so no request reads
    /// a whole backlog. Only a page without a cursor is the last. A delivery
    /// with two entries a moment (its old and new bucket while the index catches up) is
    /// listed once. The cursor names every source: where to go on (the index key of the last
    /// entry passed), from the start (`{}`), or done (null); a source it does not name (a
    /// shard added since) starts over.
    pub(super) async fn merged_page<'s, F, Fut>(
        &self,
        sources: &'s [Source],
        q: &DeliveryQuery,
        limit: usize,
        keep: &(dyn Fn(&Source, &DeliverySummary) -> bool + Sync),
        page: F,
    ) -> Result<Page<DeliverySummary>, StoreError>
    where
        F: Fn(&'s Source, Option<Item>) -> Fut,
        Fut: std::future::Future<Output = Result<EntryPage, StoreError>>,
    {
        let mut data = Vec::new();
        let mut step_query = q.clone();
        for _ in 1..MERGE_STEPS {
            let step = self.merged_step(sources, &step_query, limit - data.len(), keep, &page).await?;
            data.extend(step.data);
            match step.next_cursor {
                Some(cursor) if data.len() < limit => step_query.cursor = Some(cursor),
                next_cursor => return Ok(Page { data, next_cursor }),
            }
        }
        let step = self.merged_step(sources, &step_query, limit - data.len(), keep, &page).await?;
        data.extend(step.data);
        Ok(Page { data, next_cursor: step.next_cursor })
    }

    /// One merge of [`Self::merged_page`]: up to `limit` deliveries, from the entries every
    /// source's one read places (see there); fewer when `keep` leaves some out, with a cursor
    /// while any source has more.
    pub(super) async fn merged_step<'s, F, Fut>(
        &self,
        sources: &'s [Source],
        q: &DeliveryQuery,
        limit: usize,
        keep: &(dyn Fn(&Source, &DeliverySummary) -> bool + Sync),
        page: F,
    ) -> Result<Page<DeliverySummary>, StoreError>
    where
        F: Fn(&'s Source, Option<Item>) -> Fut,
        Fut: std::future::Future<Output = Result<EntryPage, StoreError>>,
    {
        // Per source: None = done, Some(None) = from the start, Some(Some(key)) = after key.
        let mut positions: Vec<Option<Option<Item>>> = vec![Some(None); sources.len()];
        if let Some(c) = q.cursor.as_deref() {
            let json: serde_json::Value =
                serde_json::from_slice(&B64URL.decode(c).map_err(|_| StoreError::InvalidCursor)?)
                    .map_err(|_| StoreError::InvalidCursor)?;
            // A cursor names the listing it came from; a cursor without a name is one written
            // before it did (a running job's), taken as before.
            if json.get("of").is_some_and(|of| of.as_str() != Some(listing_of(q).as_str())) {
                return Err(StoreError::InvalidCursor);
            }
            let named = json.get("buckets").and_then(|b| b.as_object()).ok_or(StoreError::InvalidCursor)?;
            for (i, src) in sources.iter().enumerate() {
                positions[i] = match named.get(&src.name) {
                    None => Some(None),
                    Some(serde_json::Value::Null) => None,
                    Some(serde_json::Value::Object(o)) if o.is_empty() => Some(None),
                    Some(other) => {
                        Some(Some(serde_dynamo::to_item(other.clone()).map_err(|_| StoreError::InvalidCursor)?))
                    }
                };
            }
        }
        for (src, at) in sources.iter().zip(&positions) {
            if let Some(Some(k)) = at
                && !start_key_fits(src, k)
            {
                return Err(StoreError::InvalidCursor);
            }
        }
        let to_read: Vec<(usize, Option<Item>)> =
            positions.iter().enumerate().filter_map(|(i, at)| at.clone().map(|start| (i, start))).collect();
        let pages: Vec<Result<(usize, EntryPage), StoreError>> =
            futures::stream::iter(to_read.into_iter().map(|(i, start)| {
                let fut = page(&sources[i], start);
                async move { fut.await.map(|p| (i, p)) }
            }))
            .buffered(SOURCES_IN_FLIGHT)
            .collect()
            .await;
        // `a` comes before `b` in the listing's direction.
        let before = |a: &str, b: &str| if q.oldest_first { a < b } else { a > b };
        let mut fetched: Vec<(usize, Entry)> = Vec::new();
        let mut next_keys: HashMap<usize, Option<Item>> = HashMap::new();
        // The nearest of the last entries read from the sources not read to their end: no
        // entry a source has not read yet comes before it, so the entries up to it are in
        // their place (the source it is from read `limit` of them: a full page).
        let mut frontier: Option<String> = None;
        for p in pages {
            let (i, (entries, next)) = p?;
            if next.is_some()
                && let Some(last) = entries.last()
                && frontier.as_deref().is_none_or(|f| before(&last.order, f))
            {
                frontier = Some(last.order.clone());
            }
            next_keys.insert(i, next);
            fetched.extend(entries.into_iter().map(|e| (i, e)));
        }
        fetched.sort_by(|(_, a), (_, b)| if q.oldest_first { a.order.cmp(&b.order) } else { b.order.cmp(&a.order) });
        let placed =
            fetched.iter().take_while(|(_, e)| frontier.as_deref().is_none_or(|f| !before(f, &e.order))).count();
        // Take entries in order, reading the items of keys-only ones a chunk at a time (as
        // many as are still wanted), until `limit` are listed or the placed entries run out.
        let mut data: Vec<DeliverySummary> = Vec::new();
        let mut listed: std::collections::HashSet<DeliveryId> = std::collections::HashSet::new();
        let mut passed = 0;
        while data.len() < limit && passed < placed {
            let chunk = passed..(passed + limit - data.len()).min(placed);
            // Each id once: one delivery can have two keys-only entries a moment (its old and
            // new bucket or shard while the index catches up), and a BatchGetItem refuses a
            // key given twice.
            let mut ids: Vec<DeliveryId> = fetched[chunk.clone()]
                .iter()
                .filter(|(_, e)| e.summary.is_none() && !listed.contains(&e.id))
                .map(|(_, e)| e.id.clone())
                .collect();
            ids.sort_unstable();
            ids.dedup();
            let items: HashMap<DeliveryId, DeliverySummary> = if ids.is_empty() {
                HashMap::new()
            } else {
                self.delivery_summaries(&ids).await?.into_iter().map(|d| (d.id.clone(), d)).collect()
            };
            for (i, e) in &fetched[chunk] {
                passed += 1;
                if listed.contains(&e.id) {
                    continue;
                }
                let d = match &e.summary {
                    Some(d) => Some(d.clone()),
                    None => items.get(&e.id).filter(|d| keep(&sources[*i], d)).cloned(),
                };
                if let Some(d) = d {
                    listed.insert(d.id.clone());
                    data.push(d);
                    if data.len() == limit {
                        break;
                    }
                }
            }
        }
        // Another entry of the last one listed (see above) is passed with it.
        while passed < fetched.len() && listed.contains(&fetched[passed].1.id) {
            passed += 1;
        }
        let (gone, rest) = fetched.split_at(passed);
        let mut cursor = serde_json::Map::new();
        for (i, src) in sources.iter().enumerate() {
            let unread = rest.iter().any(|(j, _)| *j == i);
            let position = if !next_keys.contains_key(&i) {
                None // done before this page
            } else if unread {
                // Go on after the last entry passed from this source (or where it started).
                match gone.iter().rev().find(|(j, _)| *j == i) {
                    Some((_, e)) => Some(e.key.clone()),
                    None => positions[i].clone().flatten(),
                }
            } else {
                next_keys.get(&i).cloned().flatten()
            };
            let value = match position {
                Some(key) => from_item::<serde_json::Value>(key)?,
                None if unread => serde_json::Value::Object(serde_json::Map::new()),
                None => serde_json::Value::Null,
            };
            cursor.insert(src.name.clone(), value);
        }
        let open = cursor.values().any(|v| !v.is_null());
        let next_cursor =
            open.then(|| B64URL.encode(serde_json::json!({ "of": listing_of(q), "buckets": cursor }).to_string()));
        Ok(Page { data, next_cursor })
    }
}

/// The listing a cursor of `q` belongs to, named in the cursor (`of`): the endpoint (or none:
/// the dead-letter listing by status), the status asked for, and the direction. A cursor is
/// refused on any other listing (422 `validation_error`): the source names of two listings can
/// coincide (an endpoint's `exhausted` bucket and the dead-letter listing's `exhausted`
/// partition), and a position of one read on the other would list nothing, or the wrong things.
fn listing_of(q: &DeliveryQuery) -> String {
    let endpoint = q.endpoint_id.as_ref().map_or("", |e| e.as_str());
    let status = q.status.map_or("any", |st| st.as_str());
    let order = if q.oldest_first { "oldest" } else { "newest" };
    format!("{endpoint}|{status}|{order}")
}

/// Longest sort key value DynamoDB takes, in bytes; a longer one in an `ExclusiveStartKey` is
/// a `ValidationException`.
pub(super) const MAX_SORT_KEY_BYTES: usize = 1024;

/// Whether `text` is `prefix` followed by an id the API could have handed out (the id rule of
/// [`crate::domain::ids`]: at most 256 bytes, no control characters).
pub(super) fn prefixed_id(text: Option<&String>, prefix: &str) -> bool {
    text.and_then(|t| t.strip_prefix(prefix)).is_some_and(crate::domain::ids::is_client_id)
}

/// Whether `key` can be where a listing of `src` goes on: the table key of a delivery (`pk`,
/// `sk`) and the index key of `src`'s partition, with a sort key DynamoDB takes, nothing else
/// (a tampered cursor is refused, not sent to DynamoDB).
pub(super) fn start_key_fits(src: &Source, key: &Item) -> bool {
    let text = |name: &str| key.get(name).and_then(|v| v.as_s().ok());
    let (pk_attr, sk_attr) = src.kind().key_attributes();
    key.len() == 4
        && prefixed_id(text(PK), &delivery_pk(""))
        && text(SK).is_some_and(|sk| sk == DELIVERY_SK)
        && text(pk_attr) == Some(&src.partition)
        && text(sk_attr).is_some_and(|sk| {
            sk.len() <= MAX_SORT_KEY_BYTES && (src.bucket.is_empty() || sk.starts_with(&format!("{}#", src.bucket)))
        })
}

/// Entries read from one index partition, and the key to go on from.
pub(super) type EntryPage = (Vec<Entry>, Option<Item>);

/// One index entry a merged listing may take.
pub(super) struct Entry {
    /// Its index key (the table key and the index's key): where its source goes on after it.
    key: Item,
    /// Its place in the listing: the index's sort key, without the `by_endpoint` bucket
    /// (`{created_at}#{id}`, or `by_status`'s `{updated_at}#{id}`).
    order: String,
    /// The delivery's id.
    id: DeliveryId,
    /// The delivery as `by_status` projects it; `None` from `by_endpoint`, which projects
    /// keys only (the item is read when the entry is taken).
    summary: Option<DeliverySummary>,
}

impl Entry {
    /// The entry of a Query of `src` that returned `item`; `None` for an item not a
    /// delivery's (the endpoint and status indexes hold deliveries only).
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] for a projected delivery that does not decode.
    fn of(src: Kind, item: Item) -> Result<Option<Self>, StoreError> {
        let (pk_attr, sk_attr) = src.key_attributes();
        let text = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
        let (Some(id), Some(sk)) = (
            text(PK).and_then(|pk| {
                pk.strip_prefix(&delivery_pk("")).and_then(|id| DeliveryId::try_from(id.to_string()).ok())
            }),
            text(sk_attr),
        ) else {
            return Ok(None);
        };
        let order = match sk.strip_prefix(src.bucket).and_then(|rest| rest.strip_prefix('#')) {
            Some(rest) if !src.bucket.is_empty() => rest.to_string(),
            _ => sk,
        };
        let key: Item = [PK, SK, pk_attr, sk_attr]
            .into_iter()
            .filter_map(|name| item.get(name).map(|v| (name.to_string(), v.clone())))
            .collect();
        let summary = if src.bucket.is_empty() { Some(from_item(item)?) } else { None };
        Ok(Some(Self { key, order, id, summary }))
    }
}

/// One index partition a merged listing reads.
pub(super) struct Source {
    /// Its name in the cursor.
    name: String,
    /// The index partition key value.
    partition: String,
    /// The `by_endpoint` bucket it lists (empty for `by_status`).
    bucket: &'static str,
}

impl Source {
    /// Which index, and which bucket of it, this source reads.
    fn kind(&self) -> Kind {
        Kind { bucket: self.bucket }
    }
}

/// Which index a [`Source`] reads (`by_status`: no bucket; else `by_endpoint`), and which
/// bucket of it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Kind {
    /// The `by_endpoint` bucket (empty for `by_status`).
    bucket: &'static str,
}

impl Kind {
    /// The key attributes (partition, sort) of the index this reads.
    fn key_attributes(self) -> (&'static str, &'static str) {
        if self.bucket.is_empty() { (STATUS_KEY, STATUS_SK) } else { (EP_PK, EP_SK) }
    }
}

/// Whether `status` is one of the two of the `open` bucket.
pub(super) fn in_open(status: DeliveryStatus) -> bool {
    matches!(status, DeliveryStatus::Scheduled | DeliveryStatus::Sending)
}

/// Scheduled and sending deliveries of an endpoint's `open` range, and whether the split is
/// exact.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct OpenTally {
    scheduled: u64,
    sending: u64,
    exact: bool,
}

/// Reads of every source one listing request makes at most ([`DynamoStore::merged_page`]):
/// at most this many times `limit` entries of each partition, and as many items.
pub(super) const MERGE_STEPS: usize = 10;

/// Index partitions a merged listing queries at once.
pub(super) const SOURCES_IN_FLIGHT: usize = 8;
