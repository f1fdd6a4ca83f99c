//! The services the Lambda handlers and the local runtime call: plain async functions over an
//! [`crate::App`].

pub mod api_keys;
pub mod attention;
pub mod deliver;
pub mod deliveries;
pub mod endpoint_settings;
pub mod endpoint_state;
pub mod endpoints;
pub mod event_types;
pub mod ingest;
pub mod lanes;
pub mod purge;
pub mod sweep;
pub mod tenant_settings;
pub mod test_sends;
pub mod throttle;
