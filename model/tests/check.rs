//! The exhaustive check of the delivery protocol model (see `model/README.md`), and mutants
//! of it that show the check has teeth: each planted bug makes a property fail.

use stateright::{Checker, Expectation, Model};
use std::collections::HashSet;
use std::time::Instant;
use webhooks_model::{Budgets, Mutant, Protocol, representative};

/// Budgets of the environment, one set per check: all at once would be too many states for
/// a test run (20 million states and counting), so each check spends its budget on one kind of
/// trouble, with a little of the others. Each is explored exhaustively.
fn configurations() -> Vec<(&'static str, Budgets)> {
    let none = Budgets { crashes: 0, duplicates: 0, losses: 0, early: 0, give_backs: 0, failures: 0, admin: 0 };
    vec![
        // Crashes, duplicated and lost messages, a timer that fires early (a re-drive while
        // the message is on its way, or a lease that expires under a live worker).
        ("faults", Budgets { crashes: 1, duplicates: 1, losses: 1, early: 1, ..none }),
        // The receiver fails twice: retries, exhaustion, the circuit breaker, failed and
        // successful probes.
        ("receiver", Budgets { failures: 2, ..none }),
        // One failure and a claim given back (lease too short).
        ("give-back", Budgets { give_backs: 1, failures: 1, ..none }),
        // An operator disables and enables, with a lost message.
        ("operator", Budgets { admin: 2, losses: 1, ..none }),
        // The breaker pauses the endpoint and an operator disables or enables it.
        ("breaker and operator", Budgets { admin: 1, failures: 1, ..none }),
    ]
}

fn run(model: Protocol) -> impl Checker<Protocol> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    model.checker().threads(threads).symmetry_fn(representative).spawn_dfs().join()
}

#[test]
fn the_protocol_keeps_every_property_in_every_configuration() {
    let mut reached = HashSet::new();
    let mut failed = Vec::new();
    let started = Instant::now();
    for (name, budgets) in configurations() {
        let model = Protocol { budgets, ..Protocol::default() };
        let properties = model.properties();
        let t = Instant::now();
        let checker = run(model);
        eprintln!(
            "{name}: {} states ({} unique up to symmetry), {:.1} s",
            checker.state_count(),
            checker.unique_state_count(),
            t.elapsed().as_secs_f64()
        );
        for p in properties {
            let found = checker.discovery(p.name);
            match p.expectation {
                Expectation::Sometimes => {
                    if found.is_some() {
                        reached.insert(p.name);
                    }
                }
                _ => {
                    if let Some(path) = found {
                        let steps: Vec<String> = path.into_actions().iter().map(|a| a.to_string()).collect();
                        failed.push(format!("{name}: {:?} fails after {}", p.name, steps.join(" -> ")));
                    }
                }
            }
        }
    }
    eprintln!("all configurations: {:.1} s", started.elapsed().as_secs_f64());
    assert!(failed.is_empty(), "counterexamples:\n{}", failed.join("\n"));
    // Every reachability check is met by some configuration: nothing above holds vacuously.
    for p in Protocol::default().properties() {
        if p.expectation == Expectation::Sometimes {
            assert!(reached.contains(p.name), "never reached: {}", p.name);
        }
    }
}

/// The first configuration's budgets that make a mutant's bug reachable.
fn finds(mutant: Mutant, budgets: Budgets, property: &'static str) -> String {
    let checker = run(Protocol { budgets, mutant, ..Protocol::default() });
    let path = checker.assert_any_discovery(property);
    let steps: Vec<String> = path.into_actions().iter().map(|a| a.to_string()).collect();
    steps.join(" -> ")
}

const SMALL: Budgets = Budgets { crashes: 0, duplicates: 1, losses: 0, early: 0, give_backs: 0, failures: 1, admin: 0 };

#[test]
fn a_claim_without_the_attempt_count_guard_is_won_twice() {
    // A duplicated message for attempt 1 arrives after attempt 1 failed and was rescheduled:
    // the status alone lets it claim attempt 1 again.
    let path = finds(Mutant::ClaimWithoutAttemptGuard, SMALL, "no two winning claims of one attempt");
    eprintln!("counterexample: {path}");
}

#[test]
fn an_endpoint_read_before_the_claim_lets_an_attempt_start_on_a_disabled_endpoint() {
    let budgets = Budgets { admin: 1, failures: 0, duplicates: 0, ..SMALL };
    let path = finds(Mutant::ReadEndpointBeforeClaim, budgets, "no new attempt on a stopped endpoint");
    eprintln!("counterexample: {path}");
}

#[test]
fn a_hold_without_the_version_guard_strands_a_delivery_behind_an_enable() {
    let budgets = Budgets { admin: 2, failures: 0, duplicates: 0, ..SMALL };
    let path = finds(Mutant::HoldWithoutVersionGuard, budgets, "every held delivery has a way out");
    eprintln!("counterexample: {path}");
}

/// Not a guarantee of the code: a worker that read the endpoint (enabled) before a disable
/// committed POSTs after the disable has answered. The model shows the window is exactly the
/// one between deliver's endpoint read and its POST (see `model/README.md`).
#[test]
fn an_attempt_in_flight_can_start_after_a_disable_has_answered() {
    let budgets = Budgets { admin: 1, failures: 0, duplicates: 0, ..SMALL };
    let checker = run(Protocol { budgets, strict_window: true, ..Protocol::default() });
    let path = checker.assert_any_discovery("no attempt starts after a stop answered");
    let steps: Vec<String> = path.into_actions().iter().map(|a| a.to_string()).collect();
    eprintln!("window: {}", steps.join(" -> "));
    assert!(steps.iter().any(|s| s == "Disable"));
}
