//! The simulation's short run inside `make test`: seeds `0..WEBHOOKS_SIM_SEEDS` (default
//! 10,000: `webhooks` is built at opt-level 1 and this crate at 2 in debug builds too, 22 s
//! on the 2-core dev machine; see docs/development.md, "Simulation"), split over the machine's cores. Every failing seed is
//! named with the command that reproduces it.

#[test]
fn every_seed_keeps_every_invariant() {
    let seeds: u64 = std::env::var("WEBHOOKS_SIM_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    let started = std::time::Instant::now();
    let (failures, total) = webhooks_sim::run_parallel(0, seeds, threads);
    let (posts, crashes, repeated) = (total.posts, total.crashes, total.repeated_posts);
    eprintln!(
        "{seeds} seeds in {:.1} s on {threads} threads: {posts} POSTs, {crashes} crashes, {repeated} repeated POSTs",
        started.elapsed().as_secs_f64()
    );
    // The simulation must exercise what it claims to: receivers were reached and tasks crashed.
    assert!(posts > 0 && crashes > 0, "the simulation made no POSTs or no crashes");
    for f in &failures {
        eprintln!("FAILED seed {}: {} (reproduce: make sim SEED={})", f.seed, f.message, f.seed);
    }
    assert!(failures.is_empty(), "{} of {seeds} seeds failed (first: seed {})", failures.len(), failures[0].seed);
}

#[test]
fn one_seed_gives_one_run() {
    for seed in [7, 42, 1234] {
        let a = format!("{:?}", webhooks_sim::run(seed, false).map_err(|f| f.message));
        let b = format!("{:?}", webhooks_sim::run(seed, false).map_err(|f| f.message));
        assert_eq!(a, b, "seed {seed} ran two ways");
    }
}
