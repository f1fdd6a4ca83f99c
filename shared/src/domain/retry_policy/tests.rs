use super::*;
use serde_json::json;

#[test]
fn standard_classifies_like_the_payment_provider() {
    let p = RetryPolicy::standard();
    assert_eq!(p.classify(Outcome::Status(200)), Verdict::Success);
    assert_eq!(p.classify(Outcome::Status(204)), Verdict::Success);
    assert_eq!(p.classify(Outcome::Status(301)), Verdict::Retry);
    assert_eq!(p.classify(Outcome::Status(400)), Verdict::Retry);
    assert_eq!(p.classify(Outcome::Status(404)), Verdict::Retry);
    assert_eq!(p.classify(Outcome::Status(410)), Verdict::Disable);
    assert_eq!(p.classify(Outcome::Status(429)), Verdict::Retry);
    assert_eq!(p.classify(Outcome::Status(503)), Verdict::Retry);
    assert_eq!(p.classify(Outcome::Timeout), Verdict::Retry);
    assert_eq!(p.classify(Outcome::Connection), Verdict::Retry);
    assert_eq!(p.classify(Outcome::Refused), Verdict::Final);
}

/// Every preset against every answer the issue names: S = success, R = retry, F = final,
/// D = disable the endpoint.
#[test]
fn classification_table_of_every_preset() {
    let outcomes = [
        Outcome::Status(200),
        Outcome::Status(204),
        Outcome::Status(301),
        Outcome::Status(400),
        Outcome::Status(404),
        Outcome::Status(408),
        Outcome::Status(409),
        Outcome::Status(410),
        Outcome::Status(429),
        Outcome::Status(500),
        Outcome::Status(502),
        Outcome::Status(503),
        Outcome::Timeout,
        Outcome::Connection,
    ];
    //                      200  204  301  400  404  408  409  410  429  500  502  503  tmo  conn
    let table = [
        (RetryPolicy::standard(), "S    S    R    R    R    R    R    D    R    R    R    R    R    R"),
        (RetryPolicy::svix(), "S    S    R    R    R    R    R    R    R    R    R    R    R    R"),
        (RetryPolicy::frappe(3), "S    S    R    R    R    R    R    R    R    R    R    R    R    R"),
        (RetryPolicy::rate_limit_only(), "S    S    F    F    F    F    F    F    R    F    F    F    F    F"),
    ];
    for (policy, row) in table {
        let expected: Vec<&str> = row.split_whitespace().collect();
        for (outcome, want) in outcomes.iter().zip(expected) {
            let got = match policy.classify(*outcome) {
                Verdict::Success => "S",
                Verdict::Retry => "R",
                Verdict::Final => "F",
                Verdict::Disable => "D",
            };
            assert_eq!(got, want, "{} on {outcome:?}", policy.preset);
        }
    }
}

fn waits(p: &RetryPolicy) -> Vec<u64> {
    let rng = Random::seeded(9);
    (1..=60).map_while(|f| p.next_wait(f, Outcome::Status(429), None, &rng)).map(|w| w.seconds).collect()
}

#[test]
fn preset_schedules_and_attempt_counts() {
    assert_eq!(waits(&RetryPolicy::svix()), SVIX_SCHEDULE_SECONDS.to_vec());
    assert_eq!(waits(&RetryPolicy::frappe(3)), vec![300, 1800, 7200]);
    assert_eq!(waits(&RetryPolicy::frappe(0)), Vec::<u64>::new());
    assert_eq!(waits(&RetryPolicy::frappe(8)), vec![300, 1800, 7200, 18000, 36000, 36000, 36000, 36000]);
    let crm = waits(&RetryPolicy::rate_limit_only());
    assert_eq!(crm.len(), 6);
    assert!(crm.iter().all(|w| (540..=660).contains(w)), "{crm:?}");
    let total: u64 = crm.iter().sum();
    assert!((3240..=3960).contains(&total), "about an hour of retries: {total}");
    let p = RetryPolicy::from_request(Some(&json!({"preset": "frappe", "max_retries": 0}))).unwrap();
    assert_eq!(p.max_attempts, 1);
    let p = RetryPolicy::from_request(Some(&json!({"preset": "frappe"}))).unwrap();
    assert_eq!((p.max_attempts, p.max_retries), (4, Some(3)));
}

#[test]
fn jitter_stays_inside_its_window_for_every_draw() {
    let rng = Random::from_os();
    for jitter in [0.0, 0.1, 0.2, 0.5] {
        let p =
            RetryPolicy::from_request(Some(&json!({"schedule_seconds": [30, 600, 86400], "jitter": jitter}))).unwrap();
        for _ in 0..5000 {
            for (i, base) in [30u64, 600, 86400].iter().enumerate() {
                let w = p.next_wait(i as u32 + 1, Outcome::Timeout, None, &rng).unwrap().seconds as f64;
                let b = *base as f64;
                assert!(
                    w >= (b * (1.0 - jitter)).floor() && w <= (b * (1.0 + jitter)).ceil(),
                    "{w} for {b} +-{jitter}"
                );
            }
        }
    }
}

#[test]
fn standard_makes_eight_attempts_within_the_jitter_windows() {
    let p = RetryPolicy::standard();
    let rng = Random::seeded(7);
    for _ in 0..2000 {
        for (i, base) in STANDARD_SCHEDULE_SECONDS.iter().enumerate() {
            let w = p.next_wait(i as u32 + 1, Outcome::Status(500), None, &rng).unwrap().seconds;
            let (lo, hi) = ((*base as f64 * 0.8).floor() as u64, (*base as f64 * 1.2).ceil() as u64);
            assert!((lo..=hi).contains(&w), "wait {w} for base {base}");
        }
        assert_eq!(p.next_wait(8, Outcome::Status(500), None, &rng), None);
    }
}

#[test]
fn retry_after_lengthens_only_on_429_and_503_and_is_capped() {
    let p = RetryPolicy::from_request(Some(&json!({"schedule_seconds": [10]}))).unwrap();
    let rng = Random::seeded(1);
    let w = |o, ra| p.next_wait(1, o, ra, &rng).map(|w| (w.seconds, w.source));
    assert_eq!(w(Outcome::Status(429), Some(60)), Some((60, WaitSource::RetryAfter)));
    assert_eq!(w(Outcome::Status(503), Some(5)), Some((10, WaitSource::Schedule)));
    assert_eq!(w(Outcome::Status(500), Some(60)), Some((10, WaitSource::Schedule)));
    assert_eq!(w(Outcome::Status(429), Some(10_000_000)), Some((MAX_RETRY_AFTER_SECONDS, WaitSource::RetryAfter)));
    let listed =
        RetryPolicy::from_request(Some(&json!({"schedule_seconds": [10], "honor_retry_after": [502]}))).unwrap();
    assert_eq!(listed.next_wait(1, Outcome::Status(502), Some(30), &rng).unwrap().seconds, 30);
    assert_eq!(listed.next_wait(1, Outcome::Status(429), Some(30), &rng).unwrap().seconds, 10);
    let off = RetryPolicy::from_request(Some(&json!({"schedule_seconds": [10], "honor_retry_after": false}))).unwrap();
    assert_eq!(off.next_wait(1, Outcome::Status(429), Some(30), &rng).unwrap().seconds, 10);
}

#[test]
fn custom_policy_defaults_and_last_wait_repeats() {
    let p = RetryPolicy::from_request(Some(&json!({"schedule_seconds": [1, 2, 4], "max_attempts": 6}))).unwrap();
    let rng = Random::seeded(1);
    let waits: Vec<_> = (1..=6).map(|f| p.next_wait(f, Outcome::Timeout, None, &rng).map(|w| w.seconds)).collect();
    assert_eq!(waits, vec![Some(1), Some(2), Some(4), Some(4), Some(4), None]);
    let d = RetryPolicy::from_request(Some(&json!({"schedule_seconds": [1, 2]}))).unwrap();
    assert_eq!(d.max_attempts, 3);
}

#[test]
fn a_custom_policy_takes_the_standard_value_of_every_field_it_omits() {
    let d = RetryPolicy::from_request(Some(&json!({"schedule_seconds": [1, 2]}))).unwrap();
    let standard = RetryPolicy::standard();
    assert_eq!(d.classify(Outcome::Status(410)), Verdict::Disable, "410 disables, as under standard");
    assert_eq!(d.retry_on, standard.retry_on);
    assert_eq!(d.retry_after_on, standard.retry_after_on);
    assert_eq!(d.disable_on, standard.disable_on);
}

#[test]
fn every_policy_as_shown_is_read_back_as_itself() {
    let custom =
        json!({"schedule_seconds": [1, 2], "jitter": 0.3, "retry_on": ["409", 500], "honor_retry_after": false});
    for p in [
        RetryPolicy::standard(),
        RetryPolicy::svix(),
        RetryPolicy::frappe(0),
        RetryPolicy::frappe(7),
        RetryPolicy::rate_limit_only(),
        RetryPolicy::from_request(Some(&custom)).unwrap(),
    ] {
        let shown = serde_json::to_value(&p).unwrap();
        assert_eq!(RetryPolicy::from_request(Some(&shown)), Ok(p), "{shown}");
    }
    let changed = json!({"preset": "standard", "max_attempts": 3});
    assert_eq!(RetryPolicy::from_request(Some(&changed)).unwrap_err().field, "retry_policy.max_attempts");
    let typo = json!({"schedule": [1, 2], "max_attempts": 4});
    let e = RetryPolicy::from_request(Some(&typo)).unwrap_err();
    assert_eq!(e.field, "retry_policy.schedule");
    // The keys offered are the ones documented: not the old name, which is still read.
    assert!(e.message.contains("honor_retry_after") && !e.message.contains("retry_after_on"), "{}", e.message);
    let old = json!({"schedule_seconds": [1], "retry_after_on": [429]});
    assert_eq!(RetryPolicy::from_request(Some(&old)).map(|p| p.retry_after_on), Ok(vec![429]));
}

#[test]
fn invalid_policies_name_the_field() {
    let cases = [
        (json!({"schedule_seconds": []}), "retry_policy.schedule_seconds"),
        (json!({"schedule_seconds": [0]}), "retry_policy.schedule_seconds[0]"),
        (json!({"schedule_seconds": [1, -5]}), "retry_policy.schedule_seconds[1]"),
        (json!({"schedule_seconds": [700000]}), "retry_policy.schedule_seconds[0]"),
        (json!({"schedule_seconds": [1], "jitter": 0.9}), "retry_policy.jitter"),
        (json!({"schedule_seconds": [1], "max_attempts": 0}), "retry_policy.max_attempts"),
        (json!({"schedule_seconds": [1], "retry_on": ["sometimes"]}), "retry_policy.retry_on[0]"),
        (json!({"preset": "yolo"}), "retry_policy.preset"),
        (json!({"preset": "frappe", "max_retries": -1}), "retry_policy.max_retries"),
        (json!({"preset": "svix", "jitter": 0.1}), "retry_policy.jitter"),
        (json!({"schedule_seconds": [1], "honor_retry_after": [999]}), "retry_policy.honor_retry_after[0]"),
        (json!({"schedule_seconds": [1], "bogus": 1}), "retry_policy.bogus"),
        (json!("standard"), "retry_policy"),
    ];
    for (input, field) in cases {
        let e = RetryPolicy::from_request(Some(&input)).unwrap_err();
        assert_eq!(e.field, field, "{input}");
    }
}
