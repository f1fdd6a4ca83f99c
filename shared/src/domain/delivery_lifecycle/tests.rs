use super::*;
use crate::domain::ids::id;

fn cfg() -> Config {
    let mut c = Config::new("t", "q");
    c.sqs_max_delay_seconds = 900;
    c.redrive_after_seconds = 300;
    c
}

fn claimed(now: DateTime<Utc>) -> Delivery {
    let (mut d, _, _) =
        new_delivery(&cfg(), now, id("dlv_1"), &id("evt_1"), "order.paid", &id("t1"), &id("ep_1"), false);
    d.status = DeliveryStatus::Sending;
    d.attempt_count = 1;
    d
}

fn attempt(now: DateTime<Utc>) -> Attempt {
    Attempt {
        attempt: 1,
        at: now,
        status_code: Some(500),
        error: None,
        cause: None,
        duration_ms: 3,
        response_body: None,
        next_wait_seconds: None,
        retry_after_seconds: None,
        wait_source: None,
        auth: None,
        token_fetch_ms: None,
    }
}

#[test]
fn short_waits_go_to_sqs_and_long_waits_to_the_due_index() {
    let now = Utc::now();
    let (t, e) = complete(&cfg(), now, &claimed(now), attempt(now), Next::RetryIn(600));
    let e = e.unwrap();
    assert_eq!(e.delay_seconds, 600);
    assert_eq!(e.message.attempt, 2);
    assert_eq!(t.due_at, Field::Set(ms(now) + 900_000));

    let (t, e) = complete(&cfg(), now, &claimed(now), attempt(now), Next::RetryIn(3600));
    assert!(e.is_none());
    assert_eq!(t.due_at, Field::Set(ms(now) + 2_700_000));
    assert_eq!(t.status, DeliveryStatus::Scheduled);
}

#[test]
fn sweeper_sends_long_waits_with_the_exact_remaining_delay() {
    let now = Utc::now();
    let next = now + Duration::seconds(700);
    let item = DueItem {
        id: id("dlv_1"),
        status: DeliveryStatus::Scheduled,
        attempt_count: 1,
        due_at: ms(next) - 900_000,
        next_attempt_at: Some(next),
        lease_until: None,
    };
    let (t, e) = sweep(&cfg(), now, &item, None).unwrap();
    let e = e.unwrap();
    assert_eq!(e.delay_seconds, 700);
    assert_eq!(t.guard.due_at, Some(item.due_at));
    assert_eq!(t.due_at, Field::Set(ms(next) + 300_000));
    let not_yet = DueItem { due_at: ms(now) + 1, ..item };
    assert!(sweep(&cfg(), now, &not_yet, None).is_none());
}

/// A `sending` delivery as the due index shows it, due a millisecond before `now`.
fn sending_due(now: DateTime<Utc>, attempt_count: u32, lease_until: DateTime<Utc>) -> DueItem {
    DueItem {
        id: id("dlv_1"),
        status: DeliveryStatus::Sending,
        attempt_count,
        due_at: ms(now) - 1,
        next_attempt_at: None,
        lease_until: Some(lease_until),
    }
}

#[test]
fn expired_lease_is_recorded_lost_and_redriven_once_its_outcome_wait_is_over() {
    let now = Utc::now();
    let item = sending_due(now, 3, now);
    let mut read = claimed(now);
    read.attempt_count = 3;
    read.attempts = vec![attempt(now), Attempt { attempt: 2, ..attempt(now) }];
    // A lease that ended just now: the re-drive waits for an outcome its worker may still send.
    read.lease_until = Some(now);
    let (t, e) = sweep(&cfg(), now, &item, Some(&read)).unwrap();
    assert_eq!(e.unwrap().delay_seconds, u32::try_from(OUTCOME_WAIT_SECONDS).unwrap());
    assert_eq!(t.next_attempt_at, Field::Set(now + Duration::seconds(OUTCOME_WAIT_SECONDS)), "the claim is held to it");
    // A lease long over: re-driven now.
    read.lease_until = Some(now - Duration::seconds(OUTCOME_WAIT_SECONDS + 60));
    assert!(sweep(&cfg(), now, &item, None).is_none(), "an expired lease is recorded on the item as read");
    let moved_on = Delivery { status: DeliveryStatus::Scheduled, ..read.clone() };
    assert!(sweep(&cfg(), now, &item, Some(&moved_on)).is_none(), "no longer the claim the index showed");
    let (t, e) = sweep(&cfg(), now, &item, Some(&read)).unwrap();
    let e = e.unwrap();
    assert_eq!(e.message.attempt, 4);
    assert_eq!(e.delay_seconds, 0);
    assert!(t.forgive_attempt);
    let Field::Set(history) = t.attempts else { panic!("no history written: {t:?}") };
    let kept: Vec<_> = history.iter().map(|a| (a.attempt, a.error.as_deref())).collect();
    assert_eq!(kept, [(1, None), (2, None), (3, Some("lease_expired"))]);
}

#[test]
fn a_claim_keeps_its_due_time_and_a_lease_not_over_is_looked_at_again_at_its_end() {
    let now = Utc::now();
    let t = claim(&cfg(), now, &AttemptMessage::new(id("dlv_1"), 1));
    assert_eq!(t.due_at, Field::Keep, "the claim re-keys no index entry");
    let lease = t.lease_until.clone();
    let Field::Set(lease) = lease else { panic!("no lease: {t:?}") };
    // The message waited in the queue past its redrive time: the entry came due while
    // the worker still holds its lease.
    let item = sending_due(now, 1, lease);
    let mut read = claimed(now);
    read.lease_until = Some(lease);
    let (t, e) = sweep(&cfg(), now, &item, Some(&read)).unwrap();
    assert!(e.is_none(), "nothing is sent while the lease runs");
    assert_eq!(t.status, DeliveryStatus::Sending);
    assert_eq!(t.due_at, Field::Set(ms(lease)));
    assert_eq!(t.guard.due_at, Some(item.due_at));
    assert_eq!(t.attempts, Field::Keep, "no attempt is recorded lost");
    // At the lease's end it is recovered as lost.
    let later = lease + Duration::milliseconds(1);
    let item = DueItem { due_at: ms(lease), ..item };
    let (_, e) = sweep(&cfg(), later, &item, Some(&read)).unwrap();
    assert_eq!(e.map(|e| e.message.attempt), Some(2));
}

#[test]
fn the_attempt_history_keeps_the_newest_attempts_and_counts_the_rest() {
    let now = Utc::now();
    let mut d = claimed(now);
    for i in 1..=30u32 {
        let (list, dropped) = history(&d, Attempt { attempt: i, ..attempt(now) });
        d.attempts = list;
        d.attempts_dropped = dropped;
    }
    assert_eq!(d.attempts.len(), MAX_KEPT_ATTEMPTS);
    assert_eq!(d.attempts_dropped, 10);
    assert_eq!(d.attempts.first().map(|a| a.attempt), Some(11));
    assert_eq!(d.attempts.last().map(|a| a.attempt), Some(30));
}

/// What a store does with a transition's status and history fields.
fn stored(d: &mut Delivery, t: &Transition) {
    d.status = t.status;
    if let Some(c) = t.attempt_count {
        d.attempt_count = c;
    }
    if let Field::Set(list) = &t.attempts {
        d.attempts = list.clone();
    }
    if let Field::Set(n) = t.attempts_dropped {
        d.attempts_dropped = n;
    }
}

#[test]
fn a_delivery_whose_worker_keeps_dying_keeps_a_bounded_history() {
    let cfg = cfg();
    let mut now = Utc::now();
    let (mut d, _, _) = new_delivery(&cfg, now, id("dlv_1"), &id("evt_1"), "order.paid", &id("t1"), &id("ep_1"), false);
    for n in 1..=50u32 {
        // Attempt n is claimed; its worker dies; the sweeper finds the lease expired.
        stored(&mut d, &claim(&cfg, now, &AttemptMessage::new(id("dlv_1"), n)));
        now += Duration::seconds(60);
        let item = DueItem {
            id: d.id.clone(),
            status: d.status,
            attempt_count: d.attempt_count,
            due_at: ms(now) - 1,
            next_attempt_at: None,
            lease_until: Some(now),
        };
        let (t, e) = sweep(&cfg, now, &item, Some(&d)).unwrap();
        assert_eq!(e.unwrap().message.attempt, n + 1);
        stored(&mut d, &t);
    }
    assert_eq!(d.status, DeliveryStatus::Scheduled);
    assert_eq!(d.attempts.len(), MAX_KEPT_ATTEMPTS);
    assert_eq!(d.attempts_dropped, 50 - MAX_KEPT_ATTEMPTS as u32);
    assert_eq!(d.attempts.last().map(|a| (a.attempt, a.error.as_deref())), Some((50, Some("lease_expired"))));
}

#[test]
fn replay_starts_a_fresh_cycle_only_from_exhausted_or_held() {
    let now = Utc::now();
    let mut d = claimed(now);
    assert!(replay(&cfg(), now, &d).is_none());
    let hold = hold_claimed(now, &d, None);
    assert_eq!((hold.status, hold.attempt_count), (DeliveryStatus::Held, Some(0)), "no attempt counted");
    d.status = DeliveryStatus::Exhausted;
    d.attempt_count = 4;
    let (t, e) = replay(&cfg(), now, &d).unwrap();
    assert_eq!(t.attempts_base, Field::Set(4));
    assert_eq!(e.message.attempt, 5);
    let later = now + Duration::seconds(120);
    let (t, e) =
        release(&cfg(), now, &d.id, DeliveryStatus::Held, 4, EndpointEntry::new(&id("ep"), now), later).unwrap();
    assert_eq!(t.next_attempt_at, Field::Set(later));
    assert_eq!(e.unwrap().delay_seconds, 120);
}

#[test]
fn only_a_dead_letter_of_the_policy_carries_its_notify_job() {
    let now = Utc::now();
    let (dead, _) = complete(&cfg(), now, &claimed(now), attempt(now), Next::Exhausted);
    let [job] = dead.jobs.as_slice() else { panic!("one notify job: {:?}", dead.jobs) };
    assert_eq!(
        (job.kind, job.status.as_str(), job.run_at),
        (crate::domain::model::JobKind::Notify, "running", Some(now))
    );
    let event = job.event.clone().unwrap();
    assert_eq!((event.event_type.as_str(), event.id.as_str()), ("delivery.exhausted", job.id.as_str()));
    assert_eq!(event.delivery_id.as_deref(), Some("dlv_1"));
    assert_eq!((event.event_id.as_deref(), event.delivery_event_type.as_deref()), (Some("evt_1"), Some("order.paid")));
    assert_eq!((event.attempt_count, event.status_code, event.reason.as_str()), (Some(1), Some(500), "retry_policy"));
    // The same record built again (an SDK retry sends the same request) names the same job.
    assert_eq!(complete(&cfg(), now, &claimed(now), attempt(now), Next::Exhausted).0.jobs[0].id, job.id);
    // The delivered path, a retry and a dead letter of ours write no job: one UpdateItem as before.
    for next in [Next::Delivered, Next::RetryIn(30), Next::Ended("unsubscribed")] {
        assert!(complete(&cfg(), now, &claimed(now), attempt(now), next).0.jobs.is_empty(), "{next:?}");
    }
}
