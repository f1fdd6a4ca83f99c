//! The bounded pages of the endpoint jobs' steps ([`super::run_job_step`]): end what a deleted
//! endpoint's delete missed, send a half-open probe, hold a disabled endpoint's scheduled
//! deliveries, release held ones or recover dead letters; each delivery moved by a guarded
//! transition of [`crate::domain::delivery_lifecycle`].

use super::*;

/// Ends up to `limit` unfinished deliveries of the deleted endpoint of `job` as exhausted
/// (reason `endpoint_deleted`); returns how many it found, and whether a listing said there
/// may be more (a page with a cursor: a page can come back short with one).
pub(super) async fn end_deleted_page(app: &App, job: &Job, limit: usize) -> Result<(usize, bool), ServiceError> {
    // Written from the deleted endpoint's id, so it parses; one that did not would name no
    // delivery: nothing to end.
    let Some(endpoint_id) = job.endpoint() else { return Ok((0, false)) };
    let mut found = 0;
    let mut more = false;
    for status in UNFINISHED {
        let page = app
            .store
            .list_deliveries(&DeliveryQuery {
                endpoint_id: Some(endpoint_id.clone()),
                status: Some(status),
                oldest_first: true,
                limit: limit - found,
                ..DeliveryQuery::default()
            })
            .await?;
        found += page.data.len();
        more |= page.next_cursor.is_some();
        for d in &page.data {
            end_as_deleted(app, d).await?;
        }
        if found >= limit {
            break;
        }
    }
    Ok((found, more))
}

/// Releases the oldest held delivery of a paused endpoint as its half-open probe: the
/// endpoint's move to probing and the delivery's release are one write.
pub(super) async fn probe_step(
    app: &App,
    ep: &Endpoint,
    job: &mut Job,
    out: &mut Vec<Enqueue>,
) -> Result<(), ServiceError> {
    let now = app.clock.now();
    let page = app
        .store
        .list_deliveries(&DeliveryQuery {
            endpoint_id: Some(ep.id.clone()),
            status: Some(DeliveryStatus::Held),
            oldest_first: true,
            limit: PROBE_PAGE,
            ..DeliveryQuery::default()
        })
        .await?;
    // Held deliveries whose event type the endpoint's filter no longer takes are never sent
    // (deliver would end them `unsubscribed`): end them here rather than probe with them.
    let mut ended = 0;
    for d in page.data.iter().take_while(|d| !ep.subscribes_to(&d.event_type)) {
        let t = delivery_lifecycle::abandon(
            &app.config,
            now,
            d.status,
            d.attempt_count,
            EndpointEntry::new(&d.endpoint_id, d.created_at),
            REASON_UNSUBSCRIBED,
            d.exhausted_retention_days,
        );
        if let Applied::Done(_) = app.store.apply(&d.id, &t, false).await? {
            ended += 1;
        }
    }
    let Some(d) = page.data.iter().find(|d| ep.subscribes_to(&d.event_type)) else {
        // Nothing to probe with yet: look again next tick when this step ended some (more
        // may follow), else after the cool-down.
        let wait = if ended > 0 { 0 } else { ep.auto_resume_after_seconds };
        job.run_at = Some(now + Duration::seconds(i64::try_from(wait).unwrap_or(300)));
        return Ok(());
    };
    let (Some(change), Some((t, e))) = (endpoint_lifecycle::probe_out(ep, &d.id, now), release_now(app, now, d)) else {
        return Ok(());
    };
    match app.store.commit(EndpointWrite::Change(&change), Some((&d.id, &t))).await? {
        Committed::Done => {
            committed(app, ep, &change);
            out.extend(e);
            job.processed += 1;
            job.status = "done".into();
            tracing::info!(endpoint_id = %ep.id, delivery_id = %d.id, "half-open probe released");
        }
        // Someone moved first: decide again on the next tick.
        Committed::EndpointChanged | Committed::DeliveryLost => {}
    }
    Ok(())
}

/// How many of a paused endpoint's oldest held deliveries a probe step reads to find one its
/// filter still takes (ending the others as `unsubscribed`).
const PROBE_PAGE: usize = 100;

/// Holds one page (up to `limit`, oldest first) of a disabled endpoint's scheduled
/// deliveries, each in a write conditional on the endpoint's version as read (an enable in
/// between makes it lose, so nothing is held behind an enable). Returns how many it found,
/// whether it stopped early because the endpoint changed (then the job goes on next tick), and
/// whether the listing said there may be more (a page can come back short with a cursor).
pub(super) async fn hold_page(
    app: &App,
    ep: &Endpoint,
    limit: usize,
    job: &mut Job,
) -> Result<(usize, bool, bool), ServiceError> {
    let page = app
        .store
        .list_deliveries(&DeliveryQuery {
            endpoint_id: Some(ep.id.clone()),
            status: Some(DeliveryStatus::Scheduled),
            oldest_first: true,
            limit,
            ..DeliveryQuery::default()
        })
        .await?;
    let now = app.clock.now();
    // The half-open probe, released while this job runs, is the one delivery a paused
    // endpoint accepts: it is not held.
    for d in page.data.iter().filter(|d| !ep.accepts(&d.id)) {
        let t =
            delivery_lifecycle::hold_scheduled(now, d.attempt_count, EndpointEntry::new(&d.endpoint_id, d.created_at));
        let check = EndpointWrite::Unchanged { tenant_id: &ep.tenant_id, id: &ep.id, version: ep.version };
        match app.store.commit(check, Some((&d.id, &t))).await? {
            Committed::Done => job.processed += 1,
            Committed::DeliveryLost => {}
            // Enabled (or changed) meanwhile: stop; the next step reads it again.
            Committed::EndpointChanged => return Ok((page.data.len(), true, true)),
        }
    }
    Ok((page.data.len(), false, page.next_cursor.is_some()))
}

/// Releases one page (up to `limit`, oldest first) of `ep`'s deliveries in `status`
/// accepted in the job's window, continuing from `cursor`. Returns how many it found and the
/// next page's cursor.
pub(super) async fn release_page(
    app: &App,
    ep: &Endpoint,
    status: DeliveryStatus,
    limit: usize,
    cursor: Option<String>,
    job: &mut Job,
    out: &mut Vec<Enqueue>,
) -> Result<(usize, Option<String>), ServiceError> {
    let page = app
        .store
        .list_deliveries(&DeliveryQuery {
            endpoint_id: Some(ep.id.clone()),
            status: Some(status),
            since: job.since,
            until: job.until,
            oldest_first: true,
            limit,
            cursor,
        })
        .await?;
    let now = app.clock.now();
    for d in &page.data {
        if let Some((t, e)) = release_now(app, now, d)
            && let Applied::Done(_) = app.store.apply(&d.id, &t, false).await?
        {
            out.extend(e);
            job.processed += 1;
        }
    }
    Ok((page.data.len(), page.next_cursor))
}

/// [`delivery_lifecycle::release`] of listed delivery `d` (held or exhausted, as listed) for a first
/// attempt now.
fn release_now(
    app: &App,
    now: DateTime<Utc>,
    d: &crate::store::DeliverySummary,
) -> Option<(delivery_lifecycle::Transition, Option<Enqueue>)> {
    let entry = EndpointEntry::new(&d.endpoint_id, d.created_at);
    delivery_lifecycle::release(&app.config, now, &d.id, d.status, d.attempt_count, entry, now)
}
