//! HTTP: the admin API's router and the pages (dashboard, portal) over the services.

pub mod api;
pub mod ui;
