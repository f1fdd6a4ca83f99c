//! The services the Lambda handlers and the local runtime call: plain async functions over an
//! [`crate::App`].

pub mod admin;
pub mod attention;
pub mod deliver;
pub mod health;
pub mod ingest;
pub mod sweep;
