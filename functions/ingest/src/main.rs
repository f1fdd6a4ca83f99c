//! The ingest Lambda: `POST /v1/events` from API Gateway (HTTP API, payload v2) and events
//! from an EventBridge rule (`detail-type` = event type, `detail` = payload).

use aws_lambda_events::eventbridge::EventBridgeEvent;
use lambda_http::request::LambdaRequest;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde::Deserialize;
use serde_json::Value;
use tower::ServiceExt;
use webhooks::{App, Config, api, service::ingest};

/// The two triggers; an EventBridge event is recognised by its `detail-type`.
#[derive(Deserialize)]
#[serde(untagged)]
enum Trigger {
    EventBridge(Box<EventBridgeEvent<Value>>),
    Http(Box<LambdaRequest>),
}

async fn handle(app: &App, event: LambdaEvent<Value>) -> Result<Value, Error> {
    let (payload, context) = event.into_parts();
    match serde_json::from_value::<Trigger>(payload)? {
        Trigger::EventBridge(e) => Ok(serde_json::to_value(ingest::ingest_eventbridge(app, *e).await?)?),
        Trigger::Http(request) => {
            let adapter = lambda_http::Adapter::from(api::ingest_router(app.clone()));
            let response = adapter.oneshot(LambdaEvent::new(*request, context)).await?;
            Ok(serde_json::to_value(response)?)
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    webhooks::init_tracing();
    let app = App::from_aws(Config::from_env()?).await?;
    lambda_runtime::run(service_fn(|event| handle(&app, event))).await
}
