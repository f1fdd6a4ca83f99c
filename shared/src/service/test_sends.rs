//! Test sends: one signed POST to an endpoint now, outside the delivery pipeline (not stored,
//! not retried, not listed, not counted against the endpoint's health), answered with the
//! attempt as a delivery would record it. The portal's "Send a test event" (a `webhooks.test`
//! event) and send-example (`POST /v1/endpoints/{id}/send-example`, Svix's send-example: the
//! catalog example of an event type, as a producer would send it) both go through
//! [`send_now`], which signs and authenticates exactly as deliver does.

use crate::App;
use crate::domain::ids::EndpointId;
use crate::domain::model::{Attempt, Endpoint};
use crate::domain::retry_policy::Outcome;
use crate::error::ServiceError;
use crate::service::deliver;
use crate::service::{endpoints, event_types};
use bytes::Bytes;
use serde_json::{Value, json};

/// The event type of the portal's test event.
pub const TEST_EVENT_TYPE: &str = "webhooks.test";

/// What a test send did: the message id it carried (`webhook-id`), the event type, and the
/// attempt.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TestSend {
    /// The `webhook-id` sent: `msg_test_` or `msg_example_` and a ULID.
    pub message_id: String,
    /// The event type of the payload sent.
    pub event_type: String,
    /// The attempt, as a delivery records one (`attempt` 1).
    pub attempt: Attempt,
}

/// POSTs `payload` to `ep` now as message `message_id`, signed with every current secret.
///
/// # Errors
/// [`ServiceError::Conflict`] when the endpoint's secret cannot be decoded.
pub async fn send_now(app: &App, ep: &Endpoint, message_id: &str, payload: &Value) -> Result<Attempt, ServiceError> {
    let now = app.clock.now();
    let mut keys = Vec::new();
    for secret in ep.signing_secrets(now) {
        keys.push(
            crate::domain::signing::secret_key(secret)
                .map_err(|_| ServiceError::Conflict("the endpoint's secret is not valid; rotate it".into()))?,
        );
    }
    let body = Bytes::from(payload.to_string());
    let posted = deliver::post::post_signed(app, ep, message_id, 1, body, &keys, now.timestamp()).await;
    let r = posted.result;
    Ok(Attempt {
        attempt: 1,
        at: now,
        status_code: match r.outcome {
            Outcome::Status(c) => Some(c),
            _ => None,
        },
        error: deliver::error_class(r.outcome).map(String::from),
        cause: r.cause.map(String::from),
        duration_ms: r.duration_ms,
        response_body: r.body,
        next_wait_seconds: None,
        retry_after_seconds: None,
        wait_source: None,
        auth: posted.auth.map(String::from),
        token_fetch_ms: posted.token_fetch_ms,
    })
}

/// The portal's test event: `{"type": "webhooks.test", "timestamp", "data"}` to `ep` now.
///
/// # Errors
/// As [`send_now`].
pub async fn send_test_event(app: &App, ep: &Endpoint) -> Result<TestSend, ServiceError> {
    let now = app.clock.now();
    let message_id = format!("msg_test_{}", app.random.ulid(now));
    let payload = json!({
        "type": TEST_EVENT_TYPE,
        "timestamp": now.to_rfc3339(),
        "data": {"message": "A test event from the webhooks portal", "endpoint_id": ep.id},
    });
    let attempt = send_now(app, ep, &message_id, &payload).await?;
    Ok(TestSend { message_id, event_type: TEST_EVENT_TYPE.into(), attempt })
}

/// Send-example: the first example of catalog type `event_type` to endpoint `endpoint_id`,
/// now. The type must be in the catalog, not archived, have an example, and be one the
/// endpoint subscribes to, and the example must pass the endpoint's payload filter (as
/// ingest would hold a real event to it).
///
/// # Errors
/// [`ServiceError::NotFound`] for a missing endpoint or event type; [`ServiceError::Validation`]
/// (422) naming `event_type` for an archived type, a type without examples, one the
/// endpoint does not subscribe to, or an example its filter rejects; as [`send_now`].
pub async fn send_example(app: &App, endpoint_id: &EndpointId, event_type: &str) -> Result<TestSend, ServiceError> {
    let ep = endpoints::find_endpoint(app, endpoint_id).await?;
    send_example_to(app, &ep, event_type).await
}

/// [`send_example`] to an endpoint already read (the portal's, checked against the session's
/// tenant).
///
/// # Errors
/// As [`send_example`].
pub async fn send_example_to(app: &App, ep: &Endpoint, event_type: &str) -> Result<TestSend, ServiceError> {
    let entry = event_types::get(app, event_type).await?;
    let invalid = |why: String| ServiceError::Validation(format!("event_type: {why}"));
    if entry.archived {
        return Err(invalid(format!("{event_type} is archived")));
    }
    let Some(example) = entry.examples.first() else {
        return Err(invalid(format!("{event_type} has no example in the catalog; add one first")));
    };
    if !ep.subscribes_to(event_type) {
        return Err(invalid(format!("endpoint {} does not subscribe to {event_type}", ep.id)));
    }
    // The endpoint's payload filter too: an event like the example would make no delivery
    // for it, so neither does the example.
    if let Some(filter) = &ep.filter
        && !crate::domain::payload_filter::matches(filter, example)
    {
        return Err(invalid(format!(
            "the example of {event_type} does not pass endpoint {}'s payload filter, so an event like it would \
             not be delivered there; send an example that passes (add one to the catalog entry), or change the filter",
            ep.id
        )));
    }
    let now = app.clock.now();
    let message_id = format!("msg_example_{}", app.random.ulid(now));
    let attempt = send_now(app, ep, &message_id, example).await?;
    Ok(TestSend { message_id, event_type: event_type.to_string(), attempt })
}
