//! One attempt's request as the receiver sees it: the endpoint's custom headers
//! (`headers`, `secret_headers`), its `auth` (a static `Authorization`, or an OAuth token
//! from [`crate::sender::oauth`], fetched again once when the receiver answers 401 to a
//! cached one), and the Standard Webhooks headers with one signature per current secret.
//! Deliver and the portal's test event both send through [`post_signed`].

use crate::App;
use crate::domain::model::Endpoint;
use crate::domain::retry_policy::Outcome;
use crate::domain::signing;
use crate::sender::SendResult;
use bytes::Bytes;

/// What [`post_signed`] sent and got: the receiver's answer, and what the attempt record
/// says about its authentication.
#[derive(Debug, Clone)]
pub struct Posted {
    /// The answer (or why none came); `Outcome::AuthFailed` when the OAuth token could not
    /// be fetched, and nothing was sent to the receiver.
    pub result: SendResult,
    /// The endpoint's `auth` type, when it has one.
    pub auth: Option<&'static str>,
    /// Milliseconds spent fetching OAuth tokens for this attempt (absent with a cached token).
    pub token_fetch_ms: Option<u64>,
}

/// POSTs `body` to `ep` as attempt number `attempt` of message `message_id`, signed with
/// each of `keys` (the endpoint's current secrets, decoded) at `timestamp` (unix seconds).
/// Never fails: every failure is in [`Posted::result`].
pub async fn post_signed(
    app: &App,
    ep: &Endpoint,
    message_id: &str,
    attempt: u32,
    body: Bytes,
    keys: &[Vec<u8>],
    timestamp: i64,
) -> Posted {
    // During a secret rotation both signatures go out, space separated (Standard Webhooks).
    let signature = keys.iter().map(|k| signing::sign(k, message_id, timestamp, &body)).collect::<Vec<_>>().join(" ");
    let mut headers: Vec<(String, String)> =
        ep.headers.iter().chain(&ep.secret_headers).map(|(n, v)| (n.clone(), v.clone())).collect();
    headers.extend([
        (signing::HEADER_ID.to_string(), message_id.to_string()),
        (signing::HEADER_TIMESTAMP.to_string(), timestamp.to_string()),
        (signing::HEADER_SIGNATURE.to_string(), signature),
        (signing::HEADER_ATTEMPT.to_string(), attempt.to_string()),
    ]);
    let mut posted = Posted {
        result: SendResult {
            outcome: Outcome::AuthFailed,
            body: None,
            retry_after_seconds: None,
            duration_ms: 0,
            detail: None,
            cause: None,
        },
        auth: ep.auth.as_ref().map(|a| a.kind()),
        token_fetch_ms: None,
    };
    let Some(auth) = &ep.auth else {
        posted.result = app.sender.post(&ep.url, &headers, body).await;
        return posted;
    };
    if let Some(value) = auth.static_authorization() {
        headers.push(("authorization".into(), value));
        posted.result = app.sender.post(&ep.url, &headers, body).await;
        return posted;
    }
    let mut refresh = false;
    let started = std::time::Instant::now();
    loop {
        let token = match app.tokens.token_for(&*app.sender, &ep.id, &ep.url, auth, refresh).await {
            Ok(t) => t,
            Err(why) => {
                tracing::warn!(endpoint_id = %ep.id, error = %why, "OAuth token not fetched; attempt not sent");
                posted.result.detail = Some(why);
                posted.result.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                return posted;
            }
        };
        if let Some(ms) = token.fetch_ms {
            posted.token_fetch_ms = Some(posted.token_fetch_ms.unwrap_or(0).saturating_add(ms));
        }
        let mut with_token = headers.clone();
        with_token.push(("authorization".into(), format!("Bearer {}", token.value)));
        posted.result = app.sender.post(&ep.url, &with_token, body.clone()).await;
        // A 401 to a cached token: it may have been revoked or rotated early. One fresh token,
        // one more POST in the same attempt (the receiver refused the first one unread).
        if posted.result.outcome == Outcome::Status(401) && token.fetch_ms.is_none() && !refresh {
            refresh = true;
            continue;
        }
        return posted;
    }
}
