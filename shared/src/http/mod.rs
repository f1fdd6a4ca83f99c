//! HTTP: the admin API's router and the pages (dashboard, portal) over the services.

pub mod api;
mod api_keys;
mod event_types;
pub mod events;
mod extract;
mod lifecycle;
pub mod local_host;
pub mod ui;
