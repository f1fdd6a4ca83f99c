//! The integration tests, one binary (it links the AWS SDK and the service once): a module per
//! area, each against the AWS emulator `make test` starts (or the one `AWS_ENDPOINT_URL`
//! names), with real receivers on 127.0.0.1. Run one area with its module path as the filter,
//! e.g. `cargo test -p webhooks-tests --test it -- contract::`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers fail loudly

mod admin;
mod api_keys;
mod browser;
mod contract;
mod data_lifecycle;
mod destinations;
mod endpoint_options;
mod endpoint_state;
mod event_types;
mod iam;
mod lanes;
mod openapi;
mod operational;
mod pipeline;
mod policies;
mod portal;
mod rate_limit;
mod storage;
