//! The deliver Lambda: an SQS event source mapping with `ReportBatchItemFailures`.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use webhooks::{App, Config, service::deliver};

#[tokio::main]
async fn main() -> Result<(), Error> {
    webhooks::init_tracing();
    let app = App::from_aws(Config::from_env()?).await?;
    lambda_runtime::run(service_fn(|event: LambdaEvent<SqsEvent>| {
        let app = &app;
        async move { Ok::<SqsBatchResponse, Error>(deliver::deliver_batch(app, event.payload).await) }
    }))
    .await
}
