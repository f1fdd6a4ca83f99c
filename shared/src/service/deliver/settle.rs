//! After an attempt: what the retry policy makes of its outcome, the record (with the
//! endpoint's side), and the side effects that follow; and, when the record failed on every
//! try, the outcome kept in a message instead ([`keep_outcome`]).

use super::*;
use chrono::{DateTime, Utc};

/// An attempt made (or not sent, for a reason of ours), ready to be recorded.
pub(super) struct Made {
    /// The delivery as claimed (`sending`, its `attempt_count` the attempt's number).
    pub(super) delivery: Delivery,
    /// The endpoint as read before the POST (`None`: deleted).
    pub(super) endpoint: Option<Endpoint>,
    /// The payload, for the next attempt's message (`None`: it is read then).
    pub(super) payload: Option<Bytes>,
    /// What the POST came to.
    pub(super) result: SendResult,
    /// When the attempt started.
    pub(super) started: DateTime<Utc>,
    /// The receiver authentication used (`oauth2`, ...), when any.
    pub(super) auth_used: Option<String>,
    /// Milliseconds spent fetching an OAuth token, when one was fetched.
    pub(super) token_fetch_ms: Option<u64>,
    /// Whether the attempt is its endpoint's half-open probe.
    pub(super) probe: bool,
    /// Whether the outcome came in a message ([`AttemptMessage::observed`]) rather than from
    /// a POST of this call: its record failing is then returned, not queued again.
    pub(super) observed: bool,
}

/// Records an attempt made: decides what follows under the retry policy and the endpoint's
/// health, writes it, and runs the side effects (notify jobs, the delivered count, the next
/// attempt's message, the endpoint's lane and rate).
///
/// # Errors
/// [`ServiceError::Unavailable`] when a DynamoDB or SQS call failed (after
/// [`keep_outcome`] for a record that failed).
pub(super) async fn settle(
    app: &App,
    made: Made,
    mode: Mode,
    tally: &DeliveredInCall,
) -> Result<Handled, ServiceError> {
    let cfg = &app.config;
    let Made { delivery, endpoint, payload, result, started, auth_used, token_fetch_ms, probe, observed } = made;
    // Not sent for a reason of ours, not the receiver's: final, and not counted against the
    // endpoint's health (the circuit breaker counts the receiver's failures).
    let ours =
        result.detail.as_deref().filter(|d| matches!(*d, INVALID_SECRET | PAYLOAD_EXPIRED | REASON_UNSUBSCRIBED));
    let failures = delivery.attempt_count.saturating_sub(delivery.attempts_base);
    let verdict = match &endpoint {
        Some(ep) if ours.is_none() => ep.retry_policy.classify(result.outcome),
        _ => Verdict::Final,
    };
    let wait = match (verdict, &endpoint, mode) {
        (Verdict::Retry, Some(ep), Mode::Policy) => {
            ep.retry_policy.next_wait(failures, result.outcome, result.retry_after_seconds, &app.random)
        }
        _ => None,
    };
    let attempt = Attempt {
        attempt: delivery.attempt_count,
        at: started,
        status_code: match result.outcome {
            Outcome::Status(code) => Some(code),
            _ => None,
        },
        error: match &endpoint {
            None => Some(REASON_ENDPOINT_DELETED.into()),
            Some(_) if ours.is_some() => ours.map(String::from),
            Some(_) => error_class(result.outcome).map(String::from),
        },
        cause: result.cause.filter(|_| endpoint.is_some() && ours.is_none()).map(String::from),
        duration_ms: result.duration_ms,
        response_body: result.body.clone(),
        next_wait_seconds: wait.map(|w| w.seconds),
        retry_after_seconds: result.retry_after_seconds,
        wait_source: wait.map(|w| w.source),
        auth: auth_used,
        token_fetch_ms,
    };
    // Nothing this endpoint will ever be sent for this delivery (its payload is gone, or the
    // endpoint no longer subscribes to its type).
    let expired = matches!(ours, Some(PAYLOAD_EXPIRED | REASON_UNSUBSCRIBED));
    // The endpoint's side: failures in a row (a counter, best effort: the attempt was made, so
    // nothing may stop its record), and whether this attempt moves the endpoint (a disable
    // code, the circuit breaker, the probe's outcome).
    let failed = matches!(verdict, Verdict::Retry | Verdict::Final) && !probe && ours.is_none();
    let failures = match (&endpoint, failed) {
        (Some(ep), true) => {
            match app
                .store
                .count_failure(
                    &ep.tenant_id,
                    &ep.id,
                    &delivery.id,
                    delivery.attempt_count,
                    ep.circuit_breaker_threshold,
                    app.clock.now(),
                )
                .await
            {
                Ok(n) => n.unwrap_or_default(),
                Err(e) => {
                    tracing::warn!(endpoint_id = %ep.id, error = %e, "failure not counted; the breaker counts the next one");
                    FailureCount::default()
                }
            }
        }
        _ => FailureCount::default(),
    };
    let failures_in_a_row = failures.in_a_row;
    let announced = match (&endpoint, failures.announce_failing) {
        (Some(ep), true) => announce_failing(app, ep, &delivery.id, &attempt, failures.total).await,
        _ => None,
    };
    let now = app.clock.now();
    let effect =
        Effect { verdict, probe, expired, opens_breaker: failures.opens_breaker, status_code: attempt.status_code };
    // What the retry policy alone makes of the attempt, and the delivery held with it (built
    // only when used: it copies the attempt history): which one is written depends on the
    // endpoint as it is when the record is written.
    let held = || delivery_lifecycle::hold_claimed(now, &delivery, Some(attempt.clone()));
    let plain = match verdict {
        // Nothing left to send, ever: a dead letter, even as a probe (held, it would be
        // picked as the probe again and again).
        _ if expired => {
            let next =
                if ours == Some(REASON_UNSUBSCRIBED) { Next::Ended(REASON_UNSUBSCRIBED) } else { Next::Exhausted };
            delivery_lifecycle::complete(cfg, now, &delivery, attempt.clone(), next)
        }
        Verdict::Success => delivery_lifecycle::complete(cfg, now, &delivery, attempt.clone(), Next::Delivered),
        Verdict::Retry if !probe => {
            let scaled = |s: u64| ((s as f64) * cfg.wait_scale).ceil().max(1.0) as u64;
            let next = wait.map_or(Next::Exhausted, |w| Next::RetryIn(scaled(w.seconds)));
            delivery_lifecycle::complete(cfg, now, &delivery, attempt.clone(), next)
        }
        Verdict::Final => delivery_lifecycle::complete(cfg, now, &delivery, attempt.clone(), Next::Exhausted),
        // A disable code, or a probe's retryable failure: nothing to retry on its own.
        Verdict::Disable | Verdict::Retry => (held(), None),
    };
    let recorded = match &endpoint {
        Some(ep) if ours.is_none() || probe => {
            record_with_health(app, &delivery, &attempt, plain, held, ep, &effect).await
        }
        _ => apply_or_lost(app, &delivery, &plain.0).await.map(|done| done.then_some(plain)),
    };
    // Something reached the receiver (or may have: a timeout) and its record failed on every
    // try: the outcome goes to the queue rather than being left to the lease (see
    // [`keep_outcome`]).
    let sent = endpoint.is_some() && ours.is_none() && result.outcome != Outcome::Refused;
    let recorded = match recorded {
        Ok(recorded) => recorded,
        Err(e) if sent && !observed && mode == Mode::Policy => return keep_outcome(app, &delivery, attempt, e).await,
        Err(e) => return Err(e),
    };
    let Some((transition, enqueue)) = recorded else {
        return Ok(Handled::Duplicate);
    };
    // The per-tenant and per-endpoint figures ops group in CloudWatch Logs Insights (the
    // queries of docs/operations.md): fields of this line, not metric dimensions.
    tracing::info!(
        delivery_id = %delivery.id,
        tenant_id = %delivery.tenant_id,
        endpoint_id = %delivery.endpoint_id,
        event_type = %delivery.event_type,
        attempt = delivery.attempt_count,
        status_code = attempt.status_code,
        error = attempt.error.as_deref(),
        outcome = ?result.outcome,
        duration_ms = result.duration_ms,
        status = transition.status.as_str(),
        probe,
        "attempt made"
    );
    let status = transition.status;
    emit_metrics(app, &transition, result.duration_ms);
    // A dead letter's notify job (`delivery.exhausted`), written with the record, and an
    // `endpoint.failing` announced before it: publish now (best effort; the sweeper runs
    // them if this fails or the process dies first).
    let notify: Vec<_> = transition.jobs.iter().chain(&announced).cloned().collect();
    endpoint_state::run_inline(app, &notify).await;
    if status == DeliveryStatus::Delivered {
        // The endpoint's stats read a per-day counter, not its history: counted at the end of
        // the call, for the whole batch (DeliveredInCall::count_noted).
        tally.note_delivered(&delivery, transition.now, delivery.retention_days(&app.config, true));
    }
    // What the attempt says of the endpoint's lane and adaptive rate: writes only when they
    // change (see crate::domain::lane and crate::domain::rate).
    let slow = match &endpoint {
        Some(ep) if ours.is_none() => {
            throttle::observe(app, ep, result.outcome, result.retry_after_seconds, failures_in_a_row).await;
            lanes::observe(app, ep, result.duration_ms).await
        }
        _ => false,
    };
    if let Some(mut e) = enqueue {
        // The next attempt takes the payload along (when it fits), so it needs no read.
        e.message.payload = payload.and_then(|p| String::from_utf8(p.to_vec()).ok());
        lanes::queue_for(app, slow).send(&[e]).await?;
    }
    if let Some(ep) =
        endpoint.as_ref().filter(|ep| verdict == Verdict::Success && !probe && ep.consecutive_failures > 0)
    {
        app.store.reset_failures(&ep.tenant_id, &ep.id, &delivery.id).await?;
    }
    Ok(Handled::Attempted(status, Box::new(attempt)))
}

/// What a worker does when the record of an attempt it made failed on every try (the SDK's
/// retries included): the attempt reached the receiver, or may have, so leaving the claim to
/// its lease would have the sweeper record it `lease_expired` and send the event again, after
/// a 2xx too. Instead its outcome is sent to the queue ([`AttemptMessage::observed`]) and the
/// message is done (`Kept`); deliver records it on receipt, without a POST. When that send
/// fails too, the error is returned (the message goes back to SQS) and `OutcomesLost` counts
/// it: the lease then runs out and the sweeper re-drives the attempt, which may send the event
/// a second time.
///
/// # Errors
/// `error` when the outcome could not be sent either.
pub(super) async fn keep_outcome(
    app: &App,
    delivery: &Delivery,
    attempt: Attempt,
    error: ServiceError,
) -> Result<Handled, ServiceError> {
    let mut message = AttemptMessage::new(delivery.id.clone(), delivery.attempt_count);
    message.observed = Some(Box::new(attempt));
    let kept = delivery_lifecycle::Enqueue { message, delay_seconds: 0 };
    let now = app.clock.now().timestamp_millis();
    match app.queue.send(&[kept]).await {
        Ok(()) => {
            tracing::warn!(delivery_id = %delivery.id, attempt = delivery.attempt_count, error = %error, "attempt made but not recorded; its outcome sent to the queue to record");
            metrics::emit(&app.config, now, &[("OutcomesKept", 1.0, "Count")]);
            Ok(Handled::Kept)
        }
        Err(e) => {
            tracing::error!(delivery_id = %delivery.id, attempt = delivery.attempt_count, error = %error, send = %e, "attempt made, not recorded, and its outcome not sent: the sweeper records it lease_expired and may send it again");
            metrics::emit(&app.config, now, &[("OutcomesLost", 1.0, "Count")]);
            Err(error)
        }
    }
}
