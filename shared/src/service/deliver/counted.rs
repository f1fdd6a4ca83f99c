//! The endpoints' per-day delivered counters, written once per call.

use super::*;
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
    /// latest record of the endpoint's deliveries in the call. Best effort: the records are
    /// what count; a failure or a crash before this leaves the counter short by the batch's
    /// deliveries to that endpoint, never a delivery unrecorded (the endpoint's stats say
    /// their delivered count is a counter, not a listing).
    pub(super) async fn count_noted(&self, app: &App) {
        let by_endpoint = match self.0.lock() {
            Ok(mut by_endpoint) => std::mem::take(&mut *by_endpoint),
            Err(_) => return,
        };
        // Kept as long as a delivered delivery, plus the day it is counted in.
        let adds = by_endpoint.iter().map(|(endpoint_id, (ids, at, days))| async move {
            let expires_at = (*at + chrono::Duration::days(i64::from(*days) + 1)).timestamp();
            if let Err(e) = app.store.count_delivered(endpoint_id, ids, *at, expires_at).await {
                tracing::warn!(endpoint_id = %endpoint_id, deliveries = ids.len(), error = %e, "delivered not counted in the endpoint's stats");
            }
        });
        futures::future::join_all(adds).await;
    }
}
