//! `webhooks-sim`: runs simulation seeds (see docs/development.md, "Simulation").
//!
//! `webhooks-sim --seeds 100000` runs seeds 0..100000; `webhooks-sim --seed 1234` runs one
//! seed and prints its last steps when it fails. Exit status 1 when any seed failed.

use clap::Parser;

#[derive(Parser, Debug)]
#[command(about = "Deterministic simulation of the webhook services")]
struct Args {
    /// Run only this seed (and print its trace when it fails).
    #[arg(long)]
    seed: Option<u64>,
    /// How many seeds to run.
    #[arg(long, default_value_t = 10_000)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Threads to run seeds on (default: the machine's cores).
    #[arg(long)]
    jobs: Option<u64>,
    /// Stop at the first failing seed and print it (used to show that a mutant is caught).
    #[arg(long)]
    first_failure: bool,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let (first, count) = match args.seed {
        Some(s) => (s, 1),
        None => (args.start, args.seeds),
    };
    let started = std::time::Instant::now();
    if args.first_failure {
        for seed in first..first.saturating_add(count) {
            if let Err(f) = webhooks_sim::run(seed, false) {
                println!(
                    "first failure after {} seeds ({:.1} s): seed {}: {} (reproduce: make sim SEED={})",
                    seed - first + 1,
                    started.elapsed().as_secs_f64(),
                    f.seed,
                    f.message,
                    f.seed
                );
                return std::process::ExitCode::FAILURE;
            }
        }
        println!("no failure in {count} seeds");
        return std::process::ExitCode::SUCCESS;
    }
    let (failures, total) = webhooks_sim::run_parallel(
        first,
        count,
        args.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u64)),
    );
    let elapsed = started.elapsed().as_secs_f64();
    if count > 1 || failures.is_empty() {
        println!(
            "{count} seeds in {elapsed:.1} s: {} deliveries ({} delivered, {} exhausted), {} POSTs, {} repeated (bound: {} unrecorded), {} crashes, {} faults, {} sweeper ticks ({} leases found running), {} dead letters, {} steps",
            total.deliveries,
            total.delivered,
            total.exhausted,
            total.posts,
            total.repeated_posts,
            total.unrecorded,
            total.crashes,
            total.faults,
            total.ticks,
            total.leases_pending,
            total.dead_letters,
            total.steps,
        );
    }
    for f in &failures {
        if count == 1 {
            println!("{f}");
        } else {
            println!("FAILED seed {}: {} (reproduce: make sim SEED={})", f.seed, f.message, f.seed);
        }
    }
    if failures.is_empty() { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::FAILURE }
}
