//! Deterministic simulation of the webhook services (issue #12, part 1).
//!
//! The services run unchanged over in-memory implementations of their dependencies
//! ([`store::MemStore`], [`queue::MemQueue`], a virtual clock, seeded randomness and simulated
//! receivers). One thread drives every task (ingest, deliver workers, sweeper ticks, admin
//! calls); each AWS call waits at a gate ([`sched::Gate`]) until the seeded driver picks it,
//! so one seed gives one exact interleaving, with its faults: calls that fail, calls that take
//! effect and then report failure, tasks that crash at a call, clock jumps, and receivers that
//! answer 2xx/4xx/410/5xx/429 (with `Retry-After`), hang past the timeout or reset.
//!
//! [`world::run`] runs one seed and checks the invariants (docs/development.md, "Simulation").

pub mod queue;
pub mod sched;
pub mod store;
pub mod world;

pub use world::{Failure, Report, run};

/// Runs seeds `first..first + count` split over `threads` threads (each seed is independent
/// and deterministic); the failures, in seed order, and the passing runs' counts added up.
pub fn run_parallel(first: u64, count: u64, threads: u64) -> (Vec<Failure>, Report) {
    let threads = threads.clamp(1, count.max(1));
    let per = count.div_ceil(threads);
    let parts: Vec<(Vec<Failure>, Report)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let from = first + i * per;
                let n = per.min(count.saturating_sub(i * per));
                s.spawn(move || run_many(from, n))
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let mut failures = Vec::new();
    let mut total = Report::default();
    for (f, r) in parts {
        failures.extend(f);
        add(&mut total, &r);
    }
    (failures, total)
}

fn add(total: &mut Report, r: &Report) {
    total.steps += r.steps;
    total.deliveries += r.deliveries;
    total.delivered += r.delivered;
    total.exhausted += r.exhausted;
    total.posts += r.posts;
    total.repeated_posts += r.repeated_posts;
    total.unrecorded += r.unrecorded;
    total.crashes += r.crashes;
    total.faults += r.faults;
    total.ticks += r.ticks;
    total.dead_letters += r.dead_letters;
    total.virtual_seconds += r.virtual_seconds;
    total.sweep_overshoots += r.sweep_overshoots;
    total.leases_pending += r.leases_pending;
}

/// Runs seeds `first..first + count` (see [`run`]) on this thread; the failures, in seed
/// order, and the passing runs' counts added up.
pub fn run_many(first: u64, count: u64) -> (Vec<Failure>, Report) {
    let mut failures = Vec::new();
    let mut total = Report::default();
    for seed in first..first.saturating_add(count) {
        match run(seed, count == 1) {
            Ok(r) => add(&mut total, &r),
            Err(f) => failures.push(f),
        }
    }
    (failures, total)
}
