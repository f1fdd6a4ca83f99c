//! The admin Lambda: the ops API behind API Gateway (HTTP API, IAM auth).

use lambda_runtime::Error;
use webhooks::{App, Config, api};

#[tokio::main]
async fn main() -> Result<(), Error> {
    webhooks::init_tracing();
    let app = App::from_aws(Config::from_env()?).await?;
    lambda_http::run(api::admin_router(app)).await
}
