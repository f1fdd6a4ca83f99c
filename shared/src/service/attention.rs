//! Endpoints that need attention across tenants (`GET /v1/endpoints?attention=`): the
//! stopped (paused, probing, disabled) and the failing (enabled, with failed attempts in a
//! row: retries under way), newest first. The store lists the marks it keeps on the endpoint
//! items ([`crate::store::EndpointStore::attention_endpoints`]); each listed endpoint is read again
//! here (a strongly consistent GetItem, and its copies' counters when the table keeps copies)
//! and shown only while it is still so, since the index the marks are read through can lag
//! the table a moment.

use crate::App;
use crate::error::ServiceError;
use crate::service::endpoints::EndpointView;
use crate::store::{Attention, Page};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::Serialize;

/// An endpoint that needs attention, as `GET /v1/endpoints?attention=` lists it: its view
/// and since when.
#[derive(Debug, Clone, Serialize)]
pub struct AttentionView {
    /// The endpoint, as `GET /v1/endpoints/{id}` shows it.
    #[serde(flatten)]
    pub endpoint: EndpointView,
    /// Why it is listed: `stopped` or `failing`.
    pub attention: Attention,
    /// Since when: when it stopped (`disabled.at`), or its run of failures began (the first
    /// failed attempt's time).
    pub attention_since: DateTime<Utc>,
}

/// Endpoint reads in flight at once.
const READS_IN_FLIGHT: usize = 8;

/// A page of the endpoints that are `why`, across tenants, newest first: at most `limit`
/// marks read, each endpoint read once (so at most `limit` endpoint reads); an endpoint no
/// longer so (or gone, or listed twice: one mark per copy failing) is left out, so a page can
/// be short with a `next_cursor`.
///
/// # Errors
/// [`ServiceError::Validation`] for a bad cursor; the store's error.
pub async fn list(
    app: &App,
    why: Attention,
    limit: usize,
    cursor: Option<&str>,
) -> Result<Page<AttentionView>, ServiceError> {
    let page = app.store.attention_endpoints(why, limit, cursor).await?;
    let mut seen = std::collections::HashSet::new();
    let marks: Vec<_> = page.data.into_iter().filter(|m| seen.insert(m.endpoint_id.clone())).collect();
    let reads = marks.into_iter().map(|m| async move {
        let ep = app.store.get_endpoint(&m.tenant_id, &m.endpoint_id).await?;
        let shown = match ep {
            Some(ep) => Some(EndpointView::shown(app, ep, false).await),
            None => None,
        };
        Ok::<_, ServiceError>(shown.map(|v| (v, m.since)))
    });
    let read: Vec<_> = futures::stream::iter(reads).buffered(READS_IN_FLIGHT).collect().await;
    let mut data = Vec::new();
    for r in read {
        let Some((endpoint, since)) = r? else { continue };
        let still = match why {
            Attention::Stopped => !endpoint.enabled,
            Attention::Failing => endpoint.enabled && endpoint.consecutive_failures > 0,
        };
        if still {
            data.push(AttentionView { endpoint, attention: why, attention_since: since });
        }
    }
    Ok(Page { data, next_cursor: page.next_cursor })
}
