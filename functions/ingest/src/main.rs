//! The ingest Lambda: `POST /v1/events` from API Gateway (HTTP API, payload v2) and events
//! from an EventBridge rule (`detail-type` = event type, `detail` = payload).

use aws_lambda_events::eventbridge::EventBridgeEvent;
use lambda_http::request::LambdaRequest;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::Value;
use serde_json::value::RawValue;
use tower::ServiceExt;
use webhooks::service::api_keys::Caller;
use webhooks::{App, Config, http::api, service::ingest};

/// The two triggers; an HTTP request with who vouches for it.
enum Trigger {
    /// Its `detail` as text: ingest parses it ([`ingest::handle_eventbridge_text`]), so a
    /// detail nested too deep is refused with `payload_too_deep`, not a parser error.
    EventBridge(Box<EventBridgeEvent<Box<RawValue>>>),
    Http(Box<LambdaRequest>, Caller),
}

/// Tells the triggers apart by EventBridge's `detail-type`. The event is read from its raw
/// JSON text: lambda_http's request type can only be deserialised from text, not from a
/// `serde_json::Value`. An HTTP request is [`Caller::Iam`] when its `requestContext` carries
/// `authorizer.iam` (API Gateway's IAM authorizer, or a function URL with `AuthType:
/// AWS_IAM`, put it there after checking the SigV4 signature), else [`Caller::Anonymous`]:
/// the `ApiKeyApi` route has no authorizer, and its requests must present an API key.
fn parse_trigger(raw: &str) -> Result<Trigger, serde_json::Error> {
    #[derive(serde::Deserialize)]
    struct Iam {
        iam: Option<serde::de::IgnoredAny>,
    }
    #[derive(serde::Deserialize)]
    struct Context {
        authorizer: Option<Iam>,
    }
    #[derive(serde::Deserialize)]
    struct Probe {
        #[serde(rename = "detail-type")]
        detail_type: Option<serde::de::IgnoredAny>,
        #[serde(rename = "requestContext")]
        request_context: Option<Context>,
    }
    let probe = serde_json::from_str::<Probe>(raw)?;
    if probe.detail_type.is_some() {
        return Ok(Trigger::EventBridge(Box::new(serde_json::from_str(raw)?)));
    }
    let iam = probe.request_context.and_then(|c| c.authorizer).is_some_and(|a| a.iam.is_some());
    Ok(Trigger::Http(Box::new(serde_json::from_str(raw)?), if iam { Caller::Iam } else { Caller::Anonymous }))
}

async fn handle(app: &App, event: LambdaEvent<Box<RawValue>>) -> Result<Value, Error> {
    let (payload, context) = event.into_parts();
    match parse_trigger(payload.get())? {
        // A refused event fails the invocation: after Lambda's retries it lands in the events
        // dead-letter queue, the refusal's `{code}: {message}` its errorMessage.
        Trigger::EventBridge(e) => Ok(serde_json::to_value(ingest::handle_eventbridge_text(app, *e).await?)?),
        Trigger::Http(request, caller) => {
            let adapter = lambda_http::Adapter::from(api::ingest_router(app.clone(), caller));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_gateway_v2_and_eventbridge_events_are_told_apart() {
        let http = r#"{"version":"2.0","routeKey":"POST /v1/events","rawPath":"/v1/events","rawQueryString":"",
            "headers":{"content-type":"application/json"},
            "requestContext":{"accountId":"123456789012","apiId":"api","domainName":"api.example.com","domainPrefix":"api",
              "http":{"method":"POST","path":"/v1/events","protocol":"HTTP/1.1","sourceIp":"192.0.2.1","userAgent":"curl"},
              "requestId":"r1","routeKey":"POST /v1/events","stage":"$default","time":"29/Nov/2026:19:00:00 +0000","timeEpoch":1795978800000},
            "body":"{\"tenant_id\":\"acme\"}","isBase64Encoded":false}"#;
        assert!(matches!(parse_trigger(http), Ok(Trigger::Http(_, Caller::Anonymous))));
        let signed = http.replace(
            r#""requestId":"r1""#,
            r#""requestId":"r1","authorizer":{"iam":{"accessKey":"AKIA","accountId":"123456789012","callerId":"AID","userArn":"arn:aws:iam::123456789012:user/p","userId":"AID"}}"#,
        );
        assert!(matches!(parse_trigger(&signed), Ok(Trigger::Http(_, Caller::Iam))));
        let eb = r#"{"version":"0","id":"e1","detail-type":"order.paid","source":"shop","account":"123456789012",
            "time":"2026-11-29T19:00:00Z","region":"us-east-1","resources":[],"detail":{"tenant_id":"acme"}}"#;
        match parse_trigger(eb) {
            Ok(Trigger::EventBridge(e)) => assert_eq!(e.detail_type, "order.paid"),
            _ => panic!("not read as EventBridge"),
        }
        assert!(parse_trigger("{}").is_err());
    }

    #[test]
    fn an_eventbridge_detail_deeper_than_the_parsers_limit_is_refused_as_too_deep() {
        let deep = format!("{}1{}", r#"{"a":"#.repeat(200), "}".repeat(200));
        let eb = format!(
            r#"{{"version":"0","id":"e1","detail-type":"order.paid","source":"shop","account":"123456789012",
            "time":"2026-11-29T19:00:00Z","region":"us-east-1","resources":[],"detail":{{"tenant_id":"acme","x":{deep}}}}}"#
        );
        let Ok(Trigger::EventBridge(e)) = parse_trigger(&eb) else { panic!("not read as EventBridge") };
        let refusal = ingest::eventbridge_detail(*e).unwrap_err();
        assert_eq!(refusal.code, "payload_too_deep", "{refusal}");
    }
}
