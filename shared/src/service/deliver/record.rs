//! Recording an attempt's outcome: the delivery's transition together with what it does to its
//! endpoint (failures in a row, the circuit breaker, a disable code), and the side effects that
//! follow (notify, hold, the next attempt's message).

use super::*;
use crate::domain::ids::DeliveryId;

/// What an attempt's outcome asks of its endpoint.
pub(super) struct Effect {
    pub(super) verdict: Verdict,
    pub(super) probe: bool,
    pub(super) expired: bool,
    /// The failure counted opens the circuit breaker (see [`crate::store::CounterStore::count_failure`]).
    pub(super) opens_breaker: bool,
    pub(super) status_code: Option<u16>,
}

impl Effect {
    fn opens_breaker(&self, ep: &Endpoint) -> bool {
        ep.circuit_breaker_threshold > 0 && self.opens_breaker
    }

    /// The endpoint transition this outcome asks for, decided on `ep` as it is now.
    fn change(&self, app: &App, ep: &Endpoint, delivery_id: &DeliveryId) -> Option<endpoint_lifecycle::Change> {
        let now = app.clock.now();
        let why = |reason: &str| Disabled {
            reason: reason.into(),
            at: now,
            status_code: self.status_code,
            delivery_id: Some(delivery_id.clone()),
        };
        // A probe refused for its own sake (a final 4xx: the payload, not the receiver) shows
        // the receiver is up: resume, and this delivery is a dead letter, rather than picking
        // the same refused delivery as the probe again and again.
        let refused = self.verdict == Verdict::Final && self.status_code.is_some_and(|c| (400..500).contains(&c));
        match self.verdict {
            Verdict::Disable => endpoint_lifecycle::disable(ep, now, why(REASON_GONE), &app.random),
            Verdict::Success if self.probe => endpoint_lifecycle::probe_succeeded(ep, delivery_id, now, &app.random),
            Verdict::Final if self.probe && refused => {
                endpoint_lifecycle::probe_succeeded(ep, delivery_id, now, &app.random)
            }
            Verdict::Retry | Verdict::Final if self.probe => {
                // A probe that could not be sent says nothing of the receiver: probe again now.
                let cool_down = if self.expired { 0 } else { ep.auto_resume_after_seconds };
                endpoint_lifecycle::probe_failed(ep, delivery_id, now, cool_down, &app.random)
            }
            Verdict::Retry | Verdict::Final if self.opens_breaker(ep) => {
                endpoint_lifecycle::disable(ep, now, why(REASON_CIRCUIT_BREAKER), &app.random)
            }
            _ => None,
        }
    }
}

/// Records the attempt and, when the outcome moves the endpoint, the endpoint's transition
/// with its jobs, in one write; an endpoint changed meanwhile is read again and the decision
/// made again. The delivery ends `held` (with this attempt) when the endpoint, as written or
/// as it stands, does not accept it, else as the policy says (`plain`); a hold without an
/// endpoint change is conditional on the endpoint's version, so nothing is held behind an
/// enable. Returns what was written, `None` when the delivery's lease was lost.
pub(super) async fn record_with_health(
    app: &App,
    delivery: &Delivery,
    attempt: &Attempt,
    plain: Recorded,
    held: impl Fn() -> Transition,
    read: &Endpoint,
    effect: &Effect,
) -> Result<Option<Recorded>, ServiceError> {
    let mut ep = read.clone();
    let settled = |t: &Transition| !matches!(t.status, DeliveryStatus::Scheduled | DeliveryStatus::Held);
    for _ in 0..ENDPOINT_TRIES {
        let (write, chosen, jobs) = match effect.change(app, &ep, &delivery.id) {
            Some(change) => {
                let hold = change.endpoint.state() != EndpointState::Enabled && !settled(&plain.0);
                let jobs = change.jobs.clone();
                (Some(change), if hold { (held(), None) } else { plain.clone() }, jobs)
            }
            // No move of the endpoint: as the policy says, but a delivery still to be
            // attempted is held while the endpoint does not accept it.
            None if !settled(&plain.0) && !ep.accepts(&delivery.id) => (None, (held(), None), Vec::new()),
            None if plain.0.status == DeliveryStatus::Held => {
                // Held by the policy alone (a disable code on an endpoint that accepts it
                // again): go on as a retry, due now.
                let (t, e) = delivery_lifecycle::complete(
                    &app.config,
                    app.clock.now(),
                    delivery,
                    attempt.clone(),
                    Next::RetryIn(1),
                );
                (None, (t, e), Vec::new())
            }
            None => return Ok(apply_or_lost(app, delivery, &plain.0).await?.then_some(plain)),
        };
        let endpoint = match &write {
            Some(change) => EndpointWrite::Change(change),
            None => EndpointWrite::Unchanged { tenant_id: &ep.tenant_id, id: &ep.id, version: ep.version },
        };
        match app.store.commit(endpoint, Some((&delivery.id, &chosen.0))).await? {
            Committed::Done => {
                if let Some(change) = &write {
                    tracing::warn!(endpoint_id = %ep.id, state = ?change.endpoint.state(), reason = ?change.endpoint.disabled.as_ref().map(|d| &d.reason), "endpoint state changed by an attempt");
                    endpoint_state::committed(app, &ep, change);
                }
                endpoint_state::run_inline(app, &jobs).await;
                return Ok(Some(chosen));
            }
            Committed::DeliveryLost => return Ok(None),
            Committed::EndpointChanged => match app.store.get_endpoint(&ep.tenant_id, &ep.id).await? {
                Some(now) => ep = now,
                None => {
                    // Deleted meanwhile: nothing would ever release a held delivery of it, so
                    // what the policy would hold (a disable code, a probe's failure) ends as
                    // a dead letter with reason `endpoint_deleted` instead.
                    let gone = if plain.0.status == DeliveryStatus::Held {
                        let next = Next::Ended(REASON_ENDPOINT_DELETED);
                        delivery_lifecycle::complete(&app.config, app.clock.now(), delivery, attempt.clone(), next)
                    } else {
                        plain
                    };
                    return Ok(apply_or_lost(app, delivery, &gone.0).await?.then_some(gone));
                }
            },
        }
    }
    // A probe's outcome is the endpoint's move (enabled again, or paused for another
    // cool-down): recorded without it, the endpoint would stay `probing` with this delivery,
    // every other one held, and no job left to move it (issue #35 input 6). The message goes
    // back instead: the delivery stays `sending` under its lease, which runs out, and the
    // sweeper records the attempt as `lease_expired` (it may have reached the receiver) and
    // re-drives it as the probe again, whose record then moves the endpoint.
    if effect.probe {
        return Err(ServiceError::Unavailable(format!(
            "endpoint {} kept changing while its probe's outcome was recorded",
            read.id
        )));
    }
    // The attempt was made: record it as the policy says rather than not at all (deliver
    // holds the delivery when it comes up, if the endpoint does not accept it by then).
    tracing::warn!(endpoint_id = %read.id, delivery_id = %delivery.id, "endpoint kept changing; attempt recorded without its endpoint effect");
    let fallback = if plain.0.status == DeliveryStatus::Held {
        delivery_lifecycle::complete(&app.config, app.clock.now(), delivery, attempt.clone(), Next::RetryIn(1))
    } else {
        plain
    };
    Ok(apply_or_lost(app, delivery, &fallback.0).await?.then_some(fallback))
}

/// Announces `ep` failing (`endpoint.failing`): its notify job and the endpoint item's mark in
/// one write ([`crate::store::CounterStore::announce_failing`]), then the publish. Best effort
/// and before the attempt's record: a call that fails, or a process that dies before it,
/// leaves the item unmarked, so the run's next failure announces it (and a process that dies
/// here leaves the delivery `sending`, re-driven by the sweeper, whose attempt fails again if
/// the receiver still does). A run that ends with this failure (its next attempt a 2xx) is
/// not announced then: the endpoint is no longer failing. Returns the job written, which the
/// caller runs once the attempt is recorded (the sweeper runs it otherwise).
pub(super) async fn announce_failing(
    app: &App,
    ep: &Endpoint,
    delivery_id: &str,
    attempt: &Attempt,
    failures: u32,
) -> Option<crate::domain::model::Job> {
    let now = app.clock.now();
    let job = endpoint_lifecycle::failing_job(
        &ep.tenant_id,
        &ep.id,
        failures,
        ep.circuit_breaker_threshold,
        delivery_id,
        attempt,
        now,
    );
    match app.store.announce_failing(&ep.tenant_id, &ep.id, &job).await {
        Ok(true) => {
            tracing::warn!(tenant_id = %ep.tenant_id, endpoint_id = %ep.id, failures, "endpoint failing");
            Some(job)
        }
        Ok(false) => None,
        Err(e) => {
            tracing::warn!(endpoint_id = %ep.id, error = %e, "endpoint failing not announced; the next failure does");
            None
        }
    }
}
