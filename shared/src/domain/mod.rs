//! The decisions: entities, their state machines, retry schedules, signing, the id rule, the
//! lane and rate decisions. No async, no AWS call, no [`crate::App`].

pub mod api_key;
pub mod delivery_lifecycle;
pub mod endpoint_lifecycle;
pub mod endpoint_options;
pub mod event_type;
pub mod ids;
pub mod lane;
pub mod model;
pub mod operational;
pub mod payload;
pub mod payload_filter;
pub mod rate;
pub mod retry_policy;
pub mod signing;
pub mod tenant;
