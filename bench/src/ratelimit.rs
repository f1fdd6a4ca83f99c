//! Issue #14 part 5: a receiver that answers 429 (no `Retry-After`) above 5 requests a second
//! gets 600 events; how many 429s it answered and how long the 600 took to drain, for an
//! endpoint with a static limit set too high (20 a second, as an owner who guessed), and with
//! the same limit adaptive (AIMD), which finds the receiver's rate itself.
//!
//! Each run: a fresh in-memory store and queue (`crate::memory`, as section 8's runs at the
//! template's concurrency), one endpoint with the retry policy below, the events ingested
//! first, then the local runtime with the template's concurrency (20 pollers) drains them. The
//! clock runs from the runtime's start to the 600th 200 at the receiver.
//!
//! Why not the emulator: at 20 pollers moto's one Python process saturates (a full `make
//! bench` once stalled here with 1 of 600 delivered: each call waited behind the others' so
//! long that deliver found its claim's lease too short to start the POST and gave it back,
//! over and over). In memory the store keeps DynamoDB's conditional writes, so the limit's
//! per-second counter is taken by the 20 pollers exactly as by 20 deliver invocations; the
//! rate-limit suite (`tests/tests/it/rate_limit.rs`) checks the same on the emulator.

use crate::noisy::Rx;
use crate::stack::{self, Res, err};
use serde_json::json;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use webhooks_local::Options;

/// What the receiver takes: 5 requests a second (the figure).
pub const RECEIVER_LIMIT: u64 = 5;
/// The static limit of the limited runs, requests per second: four times what the receiver
/// takes, the owner's guess.
pub const CONFIGURED_LIMIT: u32 = 20;

/// The retry policy of every run: retries of a 429 after 2, 4, 8, 16, then every 30 s (the
/// last wait repeats), up to 30 attempts, jitter 20%, so that a run drains in minutes.
pub fn retry_policy() -> serde_json::Value {
    json!({"schedule_seconds": [2, 4, 8, 16, 30], "max_attempts": 30, "jitter": 0.2})
}

/// Which run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// `rate_limit_per_second` 20, `rate_limit_adaptive` false.
    Static,
    /// `rate_limit_per_second` 20, adaptive.
    Adaptive,
}

impl Variant {
    /// The report's name.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Static => "static limit 20/s",
            Variant::Adaptive => "adaptive limit (AIMD), at most 20/s",
        }
    }
}

/// One run's figures.
#[derive(Debug, Clone)]
pub struct RateRun {
    /// Which.
    pub variant: Variant,
    /// Answered 200.
    pub delivered: u64,
    /// Answered 429.
    pub too_many: u64,
    /// From the runtime's start to the last 200, seconds.
    pub seconds: f64,
    /// (seconds since the start, effective rate) samples of the endpoint, every 500 ms.
    pub rate_curve: Vec<(f64, f64)>,
}

/// One run of `variant` over `events` events (see the module docs).
///
/// # Errors
/// When the stack cannot start, a post fails, or the events do not drain within 15 minutes.
pub async fn run(variant: Variant, events: usize, payload: &str) -> Res<RateRun> {
    let (app, inbox) = crate::memory::app(stack::config("rate", "memory://local/000000000000/rate"))?;
    let rx = Rx::start(Duration::ZERO, Some(RECEIVER_LIMIT)).await?;
    let tenant = "rate";
    let mut body = json!({"tenant_id": tenant, "url": rx.url, "retry_policy": retry_policy()});
    body["rate_limit_per_second"] = json!(CONFIGURED_LIMIT);
    body["rate_limit_adaptive"] = json!(variant == Variant::Adaptive);
    let (status, ep) = stack::call(&app, "POST", "/v1/endpoints", &body).await?;
    if status != 201 {
        return Err(err(format!("create endpoint: {status} {ep}")));
    }
    let id = ep["id"].as_str().unwrap_or_default().to_string();
    crate::noisy::ingest(&app, tenant, events, payload).await?;

    let options = Options {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        pollers: crate::noisy::POLLERS,
        slow_pollers: 0,
        poll_wait_seconds: 1,
        sweeper: false,
    };
    let t0 = Instant::now();
    let running = webhooks_local::start_with(app.clone(), inbox, options).await.map_err(|e| err(e.to_string()))?;
    let deadline = t0 + Duration::from_secs(900);
    let mut rate_curve = Vec::new();
    let mut last_ok = (0, t0);
    while rx.ok() < events as u64 && Instant::now() < deadline {
        if let Ok(Some(ep)) = app.store.find_endpoint(&id.parse()?).await {
            let rate = webhooks::domain::rate::effective(&ep).unwrap_or(f64::NAN);
            rate_curve.push((t0.elapsed().as_secs_f64(), rate));
        }
        let ok = rx.ok();
        if ok != last_ok.0 {
            last_ok = (ok, Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let ok = rx.ok();
    if ok != last_ok.0 {
        last_ok = (ok, Instant::now());
    }
    running.stop().await;
    rx.stop();
    if ok < events as u64 {
        return Err(err(format!("{}: {ok} of {events} delivered within 15 minutes", variant.name())));
    }
    Ok(RateRun {
        variant,
        delivered: ok,
        too_many: rx.too_many(),
        seconds: last_ok.1.duration_since(t0).as_secs_f64(),
        rate_curve,
    })
}

/// Runs the three variants, draws `ratelimit.png` and writes section 9 and its summary row.
///
/// # Errors
/// When a run or the chart fails.
pub async fn part(
    quick: bool,
    payload: &str,
    out: &std::path::Path,
    text: bool,
    body: &mut String,
    summary: &mut Vec<[String; 4]>,
) -> Res<()> {
    use std::fmt::Write as _;
    let events = if quick { 150 } else { 600 };
    let mut runs = Vec::new();
    for v in [Variant::Static, Variant::Adaptive] {
        eprintln!("bench:    rate limit: {} ({events} events)", v.name());
        runs.push(run(v, events, payload).await?);
    }
    let adaptive = runs.iter().find(|r| r.variant == Variant::Adaptive).cloned();
    let series: Vec<(String, Vec<(f64, f64)>)> = adaptive
        .iter()
        .map(|r| ("effective_rate_per_second (adaptive run)".to_string(), r.rate_curve.clone()))
        .collect();
    crate::lines::draw(
        &out.join("ratelimit.png"),
        "adaptive limit against a receiver taking 5/s",
        "seconds since the runtime started",
        "effective rate, requests/s",
        &series,
        text,
    )?;
    let _ = writeln!(body, "## 9. Per-endpoint rate limit (static and adaptive)\n");
    let _ = writeln!(
        body,
        "How: `bench/src/ratelimit.rs`. A loopback receiver answers 429 without `Retry-After` to every request past {RECEIVER_LIMIT} in one wall-clock second (a fixed window), else 200. One endpoint, retry policy `{}` (a 429 is retried after 2, 4, 8, 16, then every 30 s). {events} events are ingested with the runtime stopped; then the local runtime ({} pollers, the template's concurrency) drains them, over the in-memory store and queue of section 8 (`bench/src/memory.rs`: DynamoDB's conditional writes, so the limit's per-second counter is shared by the pollers as by concurrent deliver invocations; on moto, one Python process, 20 pollers saturated it: a full run once stalled here as deliver's claims ran out of lease while their calls waited, and were given back over and over; the rate-limit suite checks the limit on the emulator); the clock runs from its start to the {events}th 200. Limited runs: `rate_limit_per_second` {CONFIGURED_LIMIT} (four times what the receiver takes: the owner guessed), with `rate_limit_adaptive` false (static) or true (AIMD: halved on a 429 without Retry-After, +1 per 2 s on a 2xx). Chart: `ratelimit.png` (the adaptive run's `effective_rate_per_second`, sampled every 500 ms).\n",
        retry_policy(),
        crate::noisy::POLLERS
    );
    let _ = writeln!(body, "| run | delivered | 429s answered | drain, seconds | delivered/s |");
    let _ = writeln!(body, "|---|---|---|---|---|");
    for r in &runs {
        let _ = writeln!(
            body,
            "| {} | {} | {} | {:.1} | {:.2} |",
            r.variant.name(),
            r.delivered,
            r.too_many,
            r.seconds,
            r.delivered as f64 / r.seconds
        );
    }
    let _ = writeln!(
        body,
        "\nWaiting for the limit is not an attempt: an attempt over it gives its claim back and its message comes back when its place in line falls (one wait per attempt, not one per second). Per delivery of a limited endpoint: one UpdateItem (the second's counter) per attempt, plus a claim, a give-back write and a SendMessage per wait, plus at most one UpdateItem per 2 s for the adaptive rate; an endpoint without a limit pays nothing.\n"
    );
    if let (Some(s), Some(a)) = (runs.iter().find(|r| r.variant == Variant::Static), adaptive) {
        summary.push([
            format!("rate limit: 429s and drain time of {events} events to a receiver taking 5/s, limit 20/s static vs adaptive"),
            format!(
                "static: {} 429s, {:.0} s; adaptive: {} 429s, {:.0} s",
                s.too_many, s.seconds, a.too_many, a.seconds
            ),
            "adaptive answers fewer 429s".into(),
            if a.too_many < s.too_many { "met".into() } else { "not met".into() },
        ]);
    }
    Ok(())
}
