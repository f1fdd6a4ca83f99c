//! The sweeper Lambda: an EventBridge schedule (every minute) runs one tick.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::Value;
use webhooks::{App, Config, service::sweep};

#[tokio::main]
async fn main() -> Result<(), Error> {
    webhooks::init_tracing();
    let app = App::from_aws(Config::from_env()?).await?;
    lambda_runtime::run(service_fn(|_: LambdaEvent<Value>| {
        let app = &app;
        async move { Ok::<_, Error>(sweep::sweep(app).await?) }
    }))
    .await
}
