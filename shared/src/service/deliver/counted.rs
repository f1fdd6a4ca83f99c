//! The endpoints' per-day delivered counters, written once per call.

use super::*;
use crate::domain::delivery_lifecycle::OwedCount;
use crate::domain::ids::{DeliveryId, EndpointId};

/// The deliveries a call delivered, by endpoint, for the endpoints' per-day delivered
/// counters: counted once at the end of the call (a whole SQS batch: one ADD per endpoint
/// instead of one per delivery, so a batch of 10 deliveries to one endpoint writes 1 counter
/// unit instead of 10; `make bench` section 1, "at load").
#[derive(Debug, Default)]
pub(super) struct DeliveredInCall(std::sync::Mutex<std::collections::BTreeMap<EndpointId, Noted>>);

/// One endpoint's deliveries noted delivered in a call, when the latest was recorded, and the
/// longest delivered retention among them (days; a tenant's override, [`Delivery::retention_days`]).
type Noted = (Vec<DeliveryId>, chrono::DateTime<chrono::Utc>, u32);

impl DeliveredInCall {
    /// Notes `delivery`, recorded delivered at `at`, for its endpoint's counter.
    pub(super) fn note_delivered(&self, delivery: &Delivery, at: chrono::DateTime<chrono::Utc>, days: u32) {
        if let Ok(mut by_endpoint) = self.0.lock() {
            let noted = by_endpoint.entry(delivery.endpoint_id.clone()).or_insert_with(|| (Vec::new(), at, days));
            noted.0.push(delivery.id.clone());
            noted.1 = noted.1.max(at);
            noted.2 = noted.2.max(days);
        }
    }

    /// Counts what was noted, one ADD per endpoint, on the day of (and with the time of) the
    /// latest record of the endpoint's deliveries in the call. An ADD that fails on every try
    /// is sent to the queue as it was ([`AttemptMessage::owed`]) and counted on receipt
    /// ([`count_owed`]); when that send fails too, `StatsApproximate` counts the deliveries
    /// left out of the counter (the records are what count: never a delivery unrecorded). A
    /// crash between the record and this leaves the counter short by the call's deliveries,
    /// uncounted by any metric (see docs/guarantees.md).
    pub(super) async fn count_noted(&self, app: &App) {
        let by_endpoint = match self.0.lock() {
            Ok(mut by_endpoint) => std::mem::take(&mut *by_endpoint),
            Err(_) => return,
        };
        // Kept as long as a delivered delivery, plus the day it is counted in.
        let adds = by_endpoint.iter().map(|(endpoint_id, (ids, at, days))| async move {
            let expires_at = (*at + chrono::Duration::days(i64::from(*days) + 1)).timestamp();
            if let Err(e) = app.store.count_delivered(endpoint_id, ids, *at, expires_at).await {
                tracing::warn!(endpoint_id = %endpoint_id, deliveries = ids.len(), error = %e, "delivered not counted in the endpoint's stats; sent to the queue to count");
                let owed = OwedCount {
                    endpoint_id: endpoint_id.clone(),
                    delivery_ids: ids.clone(),
                    at: *at,
                    expires_at,
                };
                owe(app, owed).await;
            }
        });
        futures::future::join_all(adds).await;
    }
}

/// Sends `owed` to the queue to be counted on receipt (after [`GIVE_BACK_AFTER_ERROR_SECONDS`],
/// so a throttled table is not asked again at once); when the send fails, the deliveries are
/// left out of the counter and `StatsApproximate` says how many.
async fn owe(app: &App, owed: OwedCount) {
    let Some(first) = owed.delivery_ids.iter().min().cloned() else { return };
    let left_out = owed.delivery_ids.len();
    let endpoint_id = owed.endpoint_id.clone();
    let mut message = AttemptMessage::new(first, 0);
    message.owed = Some(owed);
    let send = delivery_lifecycle::Enqueue { message, delay_seconds: GIVE_BACK_AFTER_ERROR_SECONDS };
    if let Err(e) = app.queue.send(&[send]).await {
        tracing::error!(endpoint_id = %endpoint_id, deliveries = left_out, error = %e, "delivered count lost: the endpoint's stats count fewer deliveries than were made (StatsApproximate)");
        metrics::emit(
            &app.config,
            app.clock.now().timestamp_millis(),
            &[("StatsApproximate", left_out as f64, "Count")],
        );
    }
}

/// Counts deliveries owed to an endpoint's stats ([`AttemptMessage::owed`]): the same write
/// as the one that failed, so a write that landed on its last try is not counted twice
/// (unless another count came between; see docs/guarantees.md).
///
/// # Errors
/// [`ServiceError::Unavailable`] when the write failed again: the message goes back to SQS
/// and is counted on a later receipt.
pub(super) async fn count_owed(app: &App, owed: &OwedCount) -> Result<Handled, ServiceError> {
    app.store.count_delivered(&owed.endpoint_id, &owed.delivery_ids, owed.at, owed.expires_at).await?;
    tracing::info!(endpoint_id = %owed.endpoint_id, deliveries = owed.delivery_ids.len(), "owed deliveries counted in the endpoint's stats");
    Ok(Handled::Counted)
}
