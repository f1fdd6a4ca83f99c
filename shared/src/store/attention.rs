//! Which endpoints need attention, as [`crate::store::EndpointStore::attention_endpoints`]
//! lists them (the `by_status` index's `attention#` partitions, `docs/storage.md`).

use crate::domain::ids::{EndpointId, TenantId};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Why an endpoint needs attention ([`crate::store::EndpointStore::attention_endpoints`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Attention {
    /// Not enabled: paused, probing or disabled; since it stopped.
    Stopped,
    /// Failed attempts in a row (retries under way); since the run's first failure.
    Failing,
}

impl Attention {
    /// As the API spells it: `stopped`, `failing`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stopped => "stopped",
            Self::Failing => "failing",
        }
    }

    /// From the API's spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "stopped" => Some(Self::Stopped),
            "failing" => Some(Self::Failing),
            _ => None,
        }
    }
}

/// An endpoint that needs attention, as [`crate::store::EndpointStore::attention_endpoints`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttentionMark {
    /// Tenant.
    pub tenant_id: TenantId,
    /// Endpoint id.
    pub endpoint_id: EndpointId,
    /// Since when: when it stopped, or its run of failures began.
    pub since: DateTime<Utc>,
}
