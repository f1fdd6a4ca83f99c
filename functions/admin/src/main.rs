//! The admin Lambda: the ops API behind API Gateway (HTTP API, IAM auth); with
//! `WEBHOOKS_SERVE=portal`, the tenant portal alone (routes without IAM auth: the portal
//! token is the credential).

use lambda_runtime::Error;
use webhooks::{App, Config, http::api};

#[tokio::main]
async fn main() -> Result<(), Error> {
    webhooks::init_tracing();
    let app = App::from_aws(Config::from_env()?).await?;
    let portal = std::env::var(webhooks::config::SERVE_VAR).as_deref() == Ok("portal");
    // The portal token key, read at cold start; a failed read is logged and tried again by
    // the first request that needs it (which answers 503 if it fails too).
    let _ = app.portal_keys.in_force(app.clock.now()).await;
    let router = if portal { webhooks::http::ui::portal::standalone(app) } else { api::admin_router(app) };
    lambda_http::run(router).await
}
