//! Time and randomness, injected so tests and simulations control them.

use chrono::{DateTime, Utc};
use rand::{Rng as _, RngCore, SeedableRng, rngs::StdRng};
use std::sync::Mutex;

/// The source of "now".
pub trait Clock: Send + Sync {
    /// The current time, UTC.
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// The random source for jitter, ids and secrets. Seedable for deterministic tests.
#[derive(Debug)]
pub struct Random(Mutex<StdRng>);

impl Random {
    /// Seeded from the operating system.
    pub fn from_os() -> Self {
        Self(Mutex::new(StdRng::from_os_rng()))
    }

    /// Seeded with a fixed value: the same seed gives the same sequence.
    pub fn seeded(seed: u64) -> Self {
        Self(Mutex::new(StdRng::seed_from_u64(seed)))
    }

    fn with<T>(&self, f: impl FnOnce(&mut StdRng) -> T) -> T {
        // A poisoned lock only means another thread panicked mid-draw; the generator is
        // still usable.
        let mut guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }

    /// A uniform draw in `[-1.0, 1.0]`, used to spread a wait by a jitter fraction.
    pub fn symmetric_unit(&self) -> f64 {
        self.with(|r| r.random_range(-1.0..=1.0))
    }

    /// Fills `buf` with random bytes.
    pub fn fill(&self, buf: &mut [u8]) {
        self.with(|r| r.fill_bytes(buf))
    }

    /// A new ULID (time-sortable id) for `now`.
    pub fn ulid(&self, now: DateTime<Utc>) -> ulid::Ulid {
        let ms = u64::try_from(now.timestamp_millis()).unwrap_or(0);
        let random: u128 = self.with(|r| r.random());
        ulid::Ulid::from_parts(ms, random)
    }
}
