//! A model of the delivery protocol, checked exhaustively with [stateright] for small sizes.
//!
//! What is modelled: the claim + lease + record + sweeper re-drive of deliveries
//! (`shared/src/domain/delivery_lifecycle.rs`, `shared/src/service/deliver.rs`, `shared/src/service/sweep.rs`)
//! and the endpoint's disable / enable / circuit breaker / half-open probe transitions with
//! the jobs that follow them (`shared/src/domain/endpoint_lifecycle.rs`,
//! `shared/src/service/endpoint_state.rs`). Each action of [`Protocol`] is one atomic write (a
//! DynamoDB conditional UpdateItem or TransactWriteItems, with the guard the code writes:
//! status, `attempt_count`, `due_at`, the endpoint's `version`), one strongly consistent read,
//! or one SQS operation. The environment may crash any worker or sweeper at any step, lose or
//! duplicate any message, fire a timer early (a sweeper re-drive while the message is still
//! queued, a lease that expires under a live worker), make a worker give its claim back (lease
//! too short), have the receiver fail, and disable or enable the endpoint, each within a
//! budget ([`Budgets`]) so the state space is finite. The mapping of each action to the code
//! is in `model/README.md`.
//!
//! Time is abstract: a due item may come due at any moment, which is a superset of what the
//! real clocks allow, so a safety property that holds here holds for the code (up to the
//! abstractions listed in the README).

use stateright::{Model, Property};
use std::fmt;

/// Number of deliveries (all to the one endpoint).
pub const DELIVERIES: usize = 2;
/// Number of deliver workers (Lambda invocations, one message each).
pub const WORKERS: usize = 2;
/// Number of sweeper ticks that may run at once.
pub const SWEEPERS: usize = 2;
/// The retry policy's `max_attempts` (failed attempts counted from `attempts_base`).
pub const MAX_ATTEMPTS: u8 = 2;

/// A delivery's status (`DeliveryStatus`), plus `Absent` before ingest wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    /// Not ingested yet.
    Absent,
    /// Waiting for its next attempt (in the due index).
    Scheduled,
    /// Claimed by a worker, under a lease (in the due index at the due time the claim kept).
    Sending,
    /// Final: a 2xx was recorded.
    Delivered,
    /// Final: the policy gave up (dead letter).
    Exhausted,
    /// Kept, not attempted, while its endpoint does not accept it.
    Held,
}

/// The delivery item: what the guards read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Delivery {
    /// `status`.
    pub status: Status,
    /// `attempt_count`.
    pub attempt_count: u8,
    /// `attempts_base`: failures are counted from here (release sets it, a lost lease adds one).
    pub attempts_base: u8,
    /// Whether the item is in the due index (`due_at` set).
    pub due: bool,
}

/// The endpoint's state (`EndpointState`; the circuit breaker's pause has `auto_resume` on).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ep {
    /// Attempted under the retry policy.
    Enabled,
    /// Disabled by an operator: everything is held until `enable`.
    Disabled,
    /// Paused by the circuit breaker, a probe job pending.
    Paused,
    /// Half-open: only this delivery (the probe) is attempted.
    Probing(u8),
}

impl Ep {
    /// `Endpoint::accepts`.
    pub fn accepts(self, d: u8) -> bool {
        match self {
            Ep::Enabled => true,
            Ep::Probing(p) => p == d,
            Ep::Disabled | Ep::Paused => false,
        }
    }
}

/// A background job's kind (`JobKind`; `Notify` changes no state and is left out).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JobKind {
    /// Hold a stopped endpoint's scheduled deliveries.
    Hold,
    /// Give back held deliveries after an enable.
    Release,
    /// Release one held delivery of a paused endpoint as its half-open probe.
    Probe,
}

impl JobKind {
    fn index(self) -> usize {
        match self {
            JobKind::Hold => 0,
            JobKind::Release => 1,
            JobKind::Probe => 2,
        }
    }
}

/// An SQS message: (delivery, attempt number).
pub type Msg = (u8, u8);

/// What the record step will write, decided by `deliver::attempt` from the outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    /// The receiver answered 2xx.
    Ok,
    /// The receiver failed (5xx, timeout): retryable. `trip`: the failures-in-a-row counter
    /// reached the breaker's threshold; `long`: the policy's wait is longer than SQS's delay
    /// (no message now, the sweeper sends it).
    Fail {
        /// Breaker threshold reached.
        trip: bool,
        /// Wait longer than SQS's maximum delay.
        long: bool,
    },
}

/// A deliver worker's progress through `deliver::attempt` for the message it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Worker {
    /// No message.
    Idle,
    /// Mutant [`Mutant::ReadEndpointBeforeClaim`] only: the endpoint was read before the claim.
    ReadFirst {
        /// The message.
        msg: Msg,
        /// The endpoint as read.
        ep: Ep,
        /// Its version as read.
        version: u8,
    },
    /// The claim of attempt `msg.1` won; the endpoint is read next.
    Claimed {
        /// The message (= the claimed attempt).
        msg: Msg,
        /// `attempts_base` of the claimed item.
        base: u8,
        /// Ghost: the endpoint's version when the claim won.
        claim_version: u8,
    },
    /// The endpoint, read after the claim, does not accept the delivery: hold it, guarded by
    /// the version read.
    Holding {
        /// The message.
        msg: Msg,
        /// `attempts_base` of the claimed item.
        base: u8,
        /// The version read.
        version: u8,
        /// Ghost: the endpoint's version when the claim won.
        claim_version: u8,
    },
    /// The endpoint accepts it: the POST is next.
    Ready {
        /// The message.
        msg: Msg,
        /// `attempts_base` of the claimed item.
        base: u8,
        /// The endpoint as read.
        ep: Ep,
        /// The version read.
        version: u8,
        /// Ghost: the endpoint's version when the claim won.
        claim_version: u8,
    },
    /// The POST was answered; the record is next, decided on the endpoint as last read.
    Posted {
        /// The message.
        msg: Msg,
        /// `attempts_base` of the claimed item.
        base: u8,
        /// The receiver's answer.
        outcome: Outcome,
        /// The attempt was the half-open probe.
        probe: bool,
        /// The endpoint as last read.
        ep: Ep,
        /// Its version as last read.
        version: u8,
    },
    /// The record (or a give-back) was written; the next message, if any, is sent next,
    /// then the received message is deleted.
    Sending {
        /// The received message.
        msg: Msg,
        /// The next attempt's message.
        next: Option<Msg>,
    },
}

impl Worker {
    fn msg(&self) -> Option<Msg> {
        match *self {
            Worker::Idle => None,
            Worker::ReadFirst { msg, .. }
            | Worker::Claimed { msg, .. }
            | Worker::Holding { msg, .. }
            | Worker::Ready { msg, .. }
            | Worker::Posted { msg, .. }
            | Worker::Sending { msg, .. } => Some(msg),
        }
    }
}

/// A sweeper tick's progress: one due item or one job step, then the tick's one send.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Sweeper {
    /// Not running.
    Idle,
    /// Read a due item from the due index: `(status, attempt_count, due_at)` as read.
    /// `due_at` is kept as whether it is still the item's: every write that sets or removes
    /// `due_at` writes a new value (milliseconds of a moving clock), so the guard on `due_at`
    /// holds exactly when no such write came since the read.
    Due {
        /// The delivery.
        d: u8,
        /// Status read.
        status: Status,
        /// `attempt_count` read.
        count: u8,
        /// `due_at` is still the one read.
        fresh: bool,
    },
    /// A job step: claimed (the job is out of `State::jobs` while a sweeper holds its
    /// step's lease), the endpoint read.
    Job {
        /// The job's kind.
        j: JobKind,
        /// The endpoint as read.
        ep: Ep,
        /// Its version.
        version: u8,
    },
    /// A job step with its page of deliveries listed (`(delivery, attempt_count)` as read),
    /// working through it.
    JobPage {
        /// The job's kind.
        j: JobKind,
        /// The endpoint as read.
        ep: Ep,
        /// Its version.
        version: u8,
        /// What is left of the page.
        page: Vec<(u8, u8)>,
        /// Messages gathered for the tick's send.
        out: Vec<Msg>,
        /// The job is finished after this step.
        finished: bool,
    },
    /// The send of the tick's messages (`send_now` in `sweep::sweep`, once their transitions
    /// are written).
    Send {
        /// The messages.
        out: Vec<Msg>,
    },
}

/// What the environment may still do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Budgets {
    /// Worker or sweeper crashes (any step; an AWS error that returns the message is the same).
    pub crashes: u8,
    /// Messages SQS delivers twice.
    pub duplicates: u8,
    /// Messages lost (or never sent: a crash between a write and its send).
    pub losses: u8,
    /// Timers that fire early: a re-drive while the message is still on its way, a lease that
    /// expires under a live worker.
    pub early: u8,
    /// Claims given back because the lease was too short to start the POST.
    pub give_backs: u8,
    /// Failed answers from the receiver (after these it has recovered).
    pub failures: u8,
    /// Operator calls: disable or enable.
    pub admin: u8,
}

/// Ghost variables: what happened, for the properties.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ghost {
    /// Per delivery, bit `n` set when attempt `n` was POSTed.
    pub posted: [u16; DELIVERIES],
    /// A claim of an attempt won while another worker held a live claim of it, or after it
    /// was POSTed (a claim given back, or undone by a hold, spent nothing and may be won again).
    pub double_claim: bool,
    /// An attempt was POSTed twice.
    pub double_post: bool,
    /// A POST started while the endpoint did not accept it, and the endpoint had not changed
    /// since the attempt's claim won (a new attempt on a stopped endpoint).
    pub post_on_stopped: bool,
    /// A POST started while the endpoint did not accept it, the endpoint having changed after
    /// the worker's read (an attempt in flight across a disable that has answered).
    pub post_after_change: bool,
    /// A probe resumed the endpoint (for a reachability check).
    pub probe_resumed: bool,
    /// A lease was recovered by the sweeper (for a reachability check).
    pub lease_recovered: bool,
    /// A release job gave back a held delivery (for a reachability check).
    pub released: bool,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The delivery items.
    pub deliveries: [Delivery; DELIVERIES],
    /// The endpoint's state.
    pub ep: Ep,
    /// The endpoint's `version`.
    pub version: u8,
    /// Running jobs not held by a sweeper, counted by kind (Hold, Release, Probe): jobs of
    /// one kind on one endpoint are alike. Finished jobs are dropped.
    pub jobs: [u8; 3],
    /// The queue: a multiset of messages, kept sorted.
    pub queue: Vec<Msg>,
    /// Deliver workers.
    pub workers: [Worker; WORKERS],
    /// Sweeper ticks.
    pub sweepers: [Sweeper; SWEEPERS],
    /// What the environment may still do.
    pub budgets: Budgets,
    /// What happened.
    pub ghost: Ghost,
}

/// A deliberate bug, to show the checker finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutant {
    /// The code as it is.
    None,
    /// `delivery_lifecycle::claim` without `attempt_count` in its guard (status only).
    ClaimWithoutAttemptGuard,
    /// `deliver::attempt` reads the endpoint before its claim instead of after.
    ReadEndpointBeforeClaim,
    /// `endpoint_state::hold_page` holds without the endpoint's version in the transaction.
    HoldWithoutVersionGuard,
}

/// The model: budgets, the mutant, and whether the strict "no POST after a change answered"
/// property is checked (it is not a guarantee of the code, see the README).
#[derive(Clone, Debug)]
pub struct Protocol {
    /// The environment's budgets.
    pub budgets: Budgets,
    /// The bug planted, if any.
    pub mutant: Mutant,
    /// Check the strict property instead of the in-flight one.
    pub strict_window: bool,
}

impl Default for Protocol {
    fn default() -> Self {
        Protocol {
            budgets: Budgets { crashes: 1, duplicates: 1, losses: 1, early: 1, give_backs: 1, failures: 2, admin: 2 },
            mutant: Mutant::None,
            strict_window: false,
        }
    }
}

/// One step of one actor.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Ingest writes delivery `d` (scheduled, due) and sends the message for attempt 1.
    Ingest(u8),
    /// Worker `w` receives message `i` of the queue and applies the claim.
    Claim(u8, usize),
    /// Mutant only: worker `w` receives message `i` and reads the endpoint.
    ReadFirst(u8, usize),
    /// Worker `w` reads the endpoint after its claim (`current_endpoint`).
    ReadEndpoint(u8),
    /// Worker `w` writes the hold of its claim, guarded by the version read.
    HoldClaim(u8),
    /// Worker `w` finds its lease too short and gives the claim back (`unclaim`).
    GiveBack(u8),
    /// Worker `w` POSTs; the receiver answers `Outcome`.
    Post(u8, Outcome),
    /// Worker `w` writes the record (`record_with_health` / `apply_or_lost`).
    Record(u8),
    /// Worker `w` sends its next message and deletes the one it received.
    Finish(u8),
    /// Sweeper `s` reads due delivery `d` from the due index.
    SweepRead(u8, u8),
    /// Sweeper `s` applies `delivery_lifecycle::sweep`'s guarded transition.
    SweepApply(u8),
    /// Sweeper `s` claims a running job of this kind and reads the endpoint.
    JobStart(u8, JobKind),
    /// Sweeper `s` lists the job's page (for a probe: the delivery picked).
    JobList(u8, Option<u8>),
    /// Sweeper `s` writes the next delivery of the page.
    JobWrite(u8),
    /// Sweeper `s` writes the job item (`put_job`) and gives up the step's lease.
    JobPut(u8),
    /// Sweeper `s` sends the tick's messages.
    SweepSend(u8),
    /// The operator disables the endpoint (`endpoint_state::disable`, manual).
    Disable,
    /// The operator enables the endpoint (`endpoint_state::enable`).
    Enable,
    /// Worker `w` crashes; its message comes back after the visibility timeout.
    CrashWorker(u8),
    /// Sweeper `s` crashes; its unsent messages are lost, its job step's lease expires.
    CrashSweeper(u8),
    /// SQS delivers message `i` twice.
    Duplicate(usize),
    /// Message `i` is lost.
    Lose(usize),
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

fn push_sorted(queue: &mut Vec<Msg>, m: Msg) {
    let at = queue.partition_point(|x| *x <= m);
    queue.insert(at, m);
}

impl Protocol {
    fn exhausted_by_policy(failures: u8) -> bool {
        failures >= MAX_ATTEMPTS
    }

    /// A message for attempt `n` of `d` is on its way: queued, held by a worker, about to be
    /// sent, or in a sweeper's unsent batch.
    fn pending(s: &State, m: Msg) -> bool {
        s.queue.contains(&m)
            || s.workers
                .iter()
                .any(|w| w.msg() == Some(m) || matches!(w, Worker::Sending { next: Some(n), .. } if *n == m))
            || s.sweepers.iter().any(|sw| match sw {
                Sweeper::Send { out } | Sweeper::JobPage { out, .. } => out.contains(&m),
                _ => false,
            })
    }

    /// A live worker holds the claim of attempt `n` of `d`.
    fn claim_alive(s: &State, d: u8, n: u8) -> bool {
        s.workers.iter().any(|w| match *w {
            Worker::Claimed { msg, .. }
            | Worker::Holding { msg, .. }
            | Worker::Ready { msg, .. }
            | Worker::Posted { msg, .. } => msg == (d, n),
            _ => false,
        })
    }

    /// Whether a job step would change anything: a probe job with nothing held to probe
    /// with only looks again later (pruned: it would return to the same state).
    fn job_has_work(s: &State, kind: JobKind) -> bool {
        match kind {
            JobKind::Probe if s.ep == Ep::Paused => s.deliveries.iter().any(|d| d.status == Status::Held),
            _ => true,
        }
    }

    /// Actions of the system itself (workers, sweepers, jobs), without the environment's.
    fn system_actions(&self, s: &State, out: &mut Vec<Action>) {
        for (w, worker) in s.workers.iter().enumerate() {
            let w = w as u8;
            match *worker {
                Worker::Idle => {
                    for i in 0..s.queue.len() {
                        if i > 0 && s.queue[i] == s.queue[i - 1] {
                            continue;
                        }
                        if self.mutant == Mutant::ReadEndpointBeforeClaim {
                            out.push(Action::ReadFirst(w, i));
                        } else {
                            out.push(Action::Claim(w, i));
                        }
                    }
                }
                Worker::ReadFirst { .. } => out.push(Action::Claim(w, 0)),
                Worker::Claimed { .. } => out.push(Action::ReadEndpoint(w)),
                Worker::Holding { .. } => out.push(Action::HoldClaim(w)),
                Worker::Ready { ep, msg, .. } => {
                    out.push(Action::Post(w, Outcome::Ok));
                    if s.budgets.failures > 0 {
                        let probe = ep == Ep::Probing(msg.0);
                        for trip in [false, true] {
                            // The breaker counts only a non-probe failure on an enabled endpoint.
                            if trip && (probe || ep != Ep::Enabled) {
                                continue;
                            }
                            for long in [false, true] {
                                out.push(Action::Post(w, Outcome::Fail { trip, long }));
                            }
                        }
                    }
                }
                Worker::Posted { .. } => out.push(Action::Record(w)),
                Worker::Sending { .. } => out.push(Action::Finish(w)),
            }
            if matches!(worker, Worker::Ready { .. }) && s.budgets.give_backs > 0 {
                out.push(Action::GiveBack(w));
            }
        }
        for (i, sweeper) in s.sweepers.iter().enumerate() {
            let i = i as u8;
            match sweeper {
                Sweeper::Idle => {
                    for (d, item) in s.deliveries.iter().enumerate() {
                        if !item.due {
                            continue;
                        }
                        let d = d as u8;
                        // Due on time when nothing else will move it; earlier only within
                        // the `early` budget.
                        let timely = match item.status {
                            Status::Scheduled => !Self::pending(s, (d, item.attempt_count + 1)),
                            Status::Sending => !Self::claim_alive(s, d, item.attempt_count),
                            _ => false,
                        };
                        if timely || s.budgets.early > 0 {
                            out.push(Action::SweepRead(i, d));
                        }
                    }
                    for kind in [JobKind::Hold, JobKind::Release, JobKind::Probe] {
                        if s.jobs[kind.index()] > 0 && Self::job_has_work(s, kind) {
                            out.push(Action::JobStart(i, kind));
                        }
                    }
                }
                Sweeper::Due { .. } => out.push(Action::SweepApply(i)),
                Sweeper::Job { j, ep, .. } => {
                    if *j == JobKind::Probe && *ep == Ep::Paused {
                        let held: Vec<u8> = (0..DELIVERIES as u8)
                            .filter(|d| s.deliveries[*d as usize].status == Status::Held)
                            .collect();
                        if held.is_empty() {
                            out.push(Action::JobList(i, None));
                        }
                        for d in held {
                            out.push(Action::JobList(i, Some(d)));
                        }
                    } else {
                        out.push(Action::JobList(i, None));
                    }
                }
                Sweeper::JobPage { page, .. } => {
                    if page.is_empty() {
                        out.push(Action::JobPut(i));
                    } else {
                        out.push(Action::JobWrite(i));
                    }
                }
                Sweeper::Send { .. } => out.push(Action::SweepSend(i)),
            }
        }
    }

    fn environment_actions(&self, s: &State, out: &mut Vec<Action>) {
        for (d, item) in s.deliveries.iter().enumerate() {
            if item.status == Status::Absent {
                out.push(Action::Ingest(d as u8));
            }
        }
        if s.budgets.admin > 0 {
            if s.ep != Ep::Disabled {
                out.push(Action::Disable);
            }
            // Enabling an enabled endpoint only adds a release job that finds nothing held:
            // left out to keep the state space small.
            if s.ep != Ep::Enabled {
                out.push(Action::Enable);
            }
        }
        if s.budgets.crashes > 0 {
            for (w, worker) in s.workers.iter().enumerate() {
                if *worker != Worker::Idle {
                    out.push(Action::CrashWorker(w as u8));
                }
            }
            for (i, sweeper) in s.sweepers.iter().enumerate() {
                if *sweeper != Sweeper::Idle {
                    out.push(Action::CrashSweeper(i as u8));
                }
            }
        }
        for i in 0..s.queue.len() {
            if i > 0 && s.queue[i] == s.queue[i - 1] {
                continue;
            }
            if s.budgets.duplicates > 0 {
                out.push(Action::Duplicate(i));
            }
            if s.budgets.losses > 0 {
                out.push(Action::Lose(i));
            }
        }
    }

    /// Nothing the system does on its own is left: what is not final stays as it is until
    /// the environment acts.
    pub fn is_stable(&self, s: &State) -> bool {
        let mut actions = Vec::new();
        self.system_actions(s, &mut actions);
        actions.is_empty()
    }

    /// The endpoint-side writes of an endpoint change: new state, version bump, jobs created.
    fn change_endpoint(s: &mut State, ep: Ep, jobs: &[JobKind]) {
        s.ep = ep;
        s.version += 1;
        for kind in jobs {
            s.jobs[kind.index()] += 1;
        }
    }

    /// Writes a new `due_at` on delivery `d` (`Some`), or takes it out of the due index:
    /// a sweeper's read of it is no longer current.
    fn set_due(s: &mut State, d: u8, due: bool) {
        s.deliveries[d as usize].due = due;
        for sweeper in &mut s.sweepers {
            if let Sweeper::Due { d: read, fresh, .. } = sweeper
                && *read == d
            {
                *fresh = false;
            }
        }
    }

    /// The claim's guard and write (`delivery_lifecycle::claim` applied by `store.apply`).
    fn claim(&self, s: &mut State, w: usize, msg: Msg) -> bool {
        let (d, n) = msg;
        let item = &mut s.deliveries[d as usize];
        let guard = item.status == Status::Scheduled
            && (self.mutant == Mutant::ClaimWithoutAttemptGuard || item.attempt_count + 1 == n);
        if !guard {
            return false;
        }
        item.status = Status::Sending;
        item.attempt_count = n;
        let base = item.attempts_base;
        // The claim keeps the due time it found (`due_at: Field::Keep`): no write of `due_at`.
        // A sweeper's read of the scheduled item still fails its guard on the status.
        if s.ghost.posted[d as usize] & (1u16 << n.min(15)) != 0 || Self::claim_alive(s, d, n) {
            s.ghost.double_claim = true;
        }
        s.workers[w] = Worker::Claimed { msg, base, claim_version: s.version };
        true
    }

    /// The record of worker `w`'s attempt, as `deliver::attempt` and `record_with_health`
    /// decide it on the endpoint as last read (`ep`, `version`). Returns the next worker state.
    fn record(s: &mut State, msg: Msg, base: u8, outcome: Outcome, probe: bool, ep: Ep, version: u8) -> Worker {
        let (d, n) = msg;
        let di = d as usize;
        // The delivery transitions (`delivery_lifecycle::complete`, `hold_claimed` with the attempt).
        #[derive(Clone, Copy, PartialEq)]
        enum Plan {
            Delivered,
            Exhausted,
            Retry { long: bool },
            Held,
        }
        let plain = match outcome {
            Outcome::Ok => Plan::Delivered,
            Outcome::Fail { .. } if probe => Plan::Held,
            Outcome::Fail { long, .. } => {
                if Self::exhausted_by_policy(n.saturating_sub(base)) {
                    Plan::Exhausted
                } else {
                    Plan::Retry { long }
                }
            }
        };
        let settled = |p: Plan| matches!(p, Plan::Delivered | Plan::Exhausted);
        // `Effect::change`, on the endpoint as last read.
        let change: Option<(Ep, Vec<JobKind>)> = match outcome {
            Outcome::Ok if probe => (ep == Ep::Probing(d)).then(|| (Ep::Enabled, vec![JobKind::Release])),
            Outcome::Fail { .. } if probe => (ep == Ep::Probing(d)).then(|| (Ep::Paused, vec![JobKind::Probe])),
            Outcome::Fail { trip: true, .. } => {
                (ep == Ep::Enabled).then(|| (Ep::Paused, vec![JobKind::Hold, JobKind::Probe]))
            }
            _ => None,
        };
        // (endpoint write: None = no endpoint condition, Some(None) = version check only,
        // Some(Some(change)) = the change), and the delivery transition chosen.
        let (endpoint, chosen) = match change {
            Some((new_ep, jobs)) => {
                let hold = new_ep != Ep::Enabled && !settled(plain);
                (Some(Some((new_ep, jobs))), if hold { Plan::Held } else { plain })
            }
            None if !settled(plain) && !ep.accepts(d) => (Some(None), Plan::Held),
            None if plain == Plan::Held => (Some(None), Plan::Retry { long: false }),
            None => (None, plain),
        };
        // `store.commit` reports the endpoint's condition first, then the delivery's.
        if endpoint.is_some() && s.version != version {
            // Committed::EndpointChanged: read again and decide again.
            return Worker::Posted { msg, base, outcome, probe, ep: s.ep, version: s.version };
        }
        let item = s.deliveries[di];
        if !(item.status == Status::Sending && item.attempt_count == n) {
            // Committed::DeliveryLost / Applied::Lost: the lease was lost; dropped.
            return Worker::Idle;
        }
        if let Some(Some((new_ep, jobs))) = endpoint {
            if probe && new_ep == Ep::Enabled {
                s.ghost.probe_resumed = true;
            }
            Self::change_endpoint(s, new_ep, &jobs);
        }
        let (status, next) = match chosen {
            Plan::Delivered => (Status::Delivered, None),
            Plan::Exhausted => (Status::Exhausted, None),
            Plan::Held => (Status::Held, None),
            Plan::Retry { long } => (Status::Scheduled, (!long).then_some((d, n + 1))),
        };
        s.deliveries[di].status = status;
        Self::set_due(s, d, status == Status::Scheduled);
        Worker::Sending { msg, next }
    }
}

/// The state with its workers and its sweepers each in a canonical order: they are alike,
/// so states that differ only in which one is where are the same state (symmetry reduction).
pub fn representative(s: &State) -> State {
    let mut r = s.clone();
    r.workers.sort();
    r.sweepers.sort();
    r
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let empty = Delivery { status: Status::Absent, attempt_count: 0, attempts_base: 0, due: false };
        vec![State {
            deliveries: [empty; DELIVERIES],
            ep: Ep::Enabled,
            version: 0,
            jobs: [0; 3],
            queue: Vec::new(),
            workers: [Worker::Idle; WORKERS],
            sweepers: [Sweeper::Idle, Sweeper::Idle],
            budgets: self.budgets,
            ghost: Ghost::default(),
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        self.system_actions(s, actions);
        self.environment_actions(s, actions);
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Ingest(d) => {
                let item = &mut s.deliveries[d as usize];
                item.status = Status::Scheduled;
                Self::set_due(&mut s, d, true);
                push_sorted(&mut s.queue, (d, 1));
            }
            Action::Claim(w, i) => {
                let w = w as usize;
                match s.workers[w] {
                    Worker::ReadFirst { msg, ep, version } => {
                        // Mutant: the endpoint read before the claim is used for the POST.
                        if !self.claim(&mut s, w, msg) {
                            s.workers[w] = Worker::Idle;
                        } else if let Worker::Claimed { base, claim_version, .. } = s.workers[w] {
                            s.workers[w] = if ep.accepts(msg.0) {
                                Worker::Ready { msg, base, ep, version, claim_version }
                            } else {
                                Worker::Holding { msg, base, version, claim_version }
                            };
                        }
                    }
                    _ => {
                        let msg = s.queue.remove(i);
                        // A lost claim is a duplicate: the message is deleted.
                        self.claim(&mut s, w, msg);
                    }
                }
            }
            Action::ReadFirst(w, i) => {
                let msg = s.queue.remove(i);
                s.workers[w as usize] = Worker::ReadFirst { msg, ep: s.ep, version: s.version };
            }
            Action::ReadEndpoint(w) => {
                let Worker::Claimed { msg, base, claim_version } = s.workers[w as usize] else { return None };
                s.workers[w as usize] = if s.ep.accepts(msg.0) {
                    Worker::Ready { msg, base, ep: s.ep, version: s.version, claim_version }
                } else {
                    Worker::Holding { msg, base, version: s.version, claim_version }
                };
            }
            Action::HoldClaim(w) => {
                let Worker::Holding { msg, base, version, claim_version } = s.workers[w as usize] else { return None };
                let (d, n) = msg;
                let item = &mut s.deliveries[d as usize];
                // `store.commit` reports the endpoint's condition first, then the delivery's.
                if s.version != version {
                    s.workers[w as usize] = Worker::Claimed { msg, base, claim_version }; // read again
                } else if !(item.status == Status::Sending && item.attempt_count == n) {
                    s.workers[w as usize] = Worker::Idle; // DeliveryLost: duplicate
                } else {
                    // `hold_claimed(None)`: the claim is undone, no attempt counted.
                    item.status = Status::Held;
                    item.attempt_count = n - 1;
                    Self::set_due(&mut s, d, false);
                    s.workers[w as usize] = Worker::Idle;
                }
            }
            Action::GiveBack(w) => {
                let Worker::Ready { msg, .. } = s.workers[w as usize] else { return None };
                s.budgets.give_backs -= 1;
                let (d, n) = msg;
                let item = &mut s.deliveries[d as usize];
                if item.status == Status::Sending && item.attempt_count == n {
                    // `unclaim`: scheduled, due now, the attempt number not spent.
                    item.status = Status::Scheduled;
                    item.attempt_count = n - 1;
                    Self::set_due(&mut s, d, true);
                    s.workers[w as usize] = Worker::Sending { msg, next: Some((d, n)) };
                } else {
                    s.workers[w as usize] = Worker::Idle;
                }
            }
            Action::Post(w, outcome) => {
                let Worker::Ready { msg, base, ep, version, claim_version } = s.workers[w as usize] else {
                    return None;
                };
                if matches!(outcome, Outcome::Fail { .. }) {
                    s.budgets.failures -= 1;
                }
                let bit = 1u16 << msg.1.min(15);
                if s.ghost.posted[msg.0 as usize] & bit != 0 {
                    s.ghost.double_post = true;
                }
                s.ghost.posted[msg.0 as usize] |= bit;
                if !s.ep.accepts(msg.0) {
                    if s.version == claim_version {
                        s.ghost.post_on_stopped = true;
                    }
                    if s.version != version {
                        s.ghost.post_after_change = true;
                    }
                }
                let probe = ep == Ep::Probing(msg.0);
                s.workers[w as usize] = Worker::Posted { msg, base, outcome, probe, ep, version };
            }
            Action::Record(w) => {
                let Worker::Posted { msg, base, outcome, probe, ep, version } = s.workers[w as usize] else {
                    return None;
                };
                s.workers[w as usize] = Self::record(&mut s, msg, base, outcome, probe, ep, version);
            }
            Action::Finish(w) => {
                let Worker::Sending { next, .. } = s.workers[w as usize] else { return None };
                if let Some(m) = next {
                    push_sorted(&mut s.queue, m);
                }
                s.workers[w as usize] = Worker::Idle;
            }
            Action::SweepRead(i, d) => {
                let item = s.deliveries[d as usize];
                let timely = match item.status {
                    Status::Scheduled => !Self::pending(&s, (d, item.attempt_count + 1)),
                    Status::Sending => !Self::claim_alive(&s, d, item.attempt_count),
                    _ => false,
                };
                if !timely {
                    s.budgets.early -= 1;
                }
                s.sweepers[i as usize] =
                    Sweeper::Due { d, status: item.status, count: item.attempt_count, fresh: true };
            }
            Action::SweepApply(i) => {
                let Sweeper::Due { d, status, count, fresh } = s.sweepers[i as usize] else { return None };
                let item = &mut s.deliveries[d as usize];
                let guard = item.status == status && item.attempt_count == count && item.due && fresh;
                s.sweepers[i as usize] = if guard {
                    if status == Status::Sending {
                        // Lease expired: the attempt is spent, recorded lost, forgiven.
                        item.status = Status::Scheduled;
                        item.attempts_base += 1;
                        s.ghost.lease_recovered = true;
                    }
                    Self::set_due(&mut s, d, true);
                    Sweeper::Send { out: vec![(d, count + 1)] }
                } else {
                    Sweeper::Idle
                };
            }
            Action::JobStart(i, j) => {
                s.jobs[j.index()] -= 1;
                s.sweepers[i as usize] = Sweeper::Job { j, ep: s.ep, version: s.version };
            }
            Action::JobList(i, pick) => {
                let Sweeper::Job { j, ep, version } = s.sweepers[i as usize].clone() else { return None };
                let kind = j;
                let list = |status: Status| -> Vec<(u8, u8)> {
                    (0..DELIVERIES as u8)
                        .filter(|d| s.deliveries[*d as usize].status == status)
                        .map(|d| (d, s.deliveries[d as usize].attempt_count))
                        .collect()
                };
                // (page, finished) per `job_step`; cancelled jobs list nothing.
                let (page, finished) = match (kind, ep) {
                    (JobKind::Release, Ep::Enabled) => (list(Status::Held), true),
                    (JobKind::Release, _) => (Vec::new(), true),
                    (JobKind::Hold, Ep::Enabled) => (Vec::new(), true),
                    (JobKind::Hold, _) => {
                        (list(Status::Scheduled).into_iter().filter(|(d, _)| !ep.accepts(*d)).collect(), true)
                    }
                    (JobKind::Probe, Ep::Paused) => match pick {
                        Some(d) => (vec![(d, s.deliveries[d as usize].attempt_count)], true),
                        None => (Vec::new(), false),
                    },
                    (JobKind::Probe, _) => (Vec::new(), true),
                };
                s.sweepers[i as usize] = Sweeper::JobPage { j, ep, version, page, out: Vec::new(), finished };
            }
            Action::JobWrite(i) => {
                let Sweeper::JobPage { j, ep, version, mut page, mut out, mut finished } =
                    s.sweepers[i as usize].clone()
                else {
                    return None;
                };
                let (d, count) = page.remove(0);
                let kind = j;
                let item = s.deliveries[d as usize];
                match kind {
                    JobKind::Release => {
                        // `delivery_lifecycle::release` applied with no endpoint condition.
                        if item.status == Status::Held && item.attempt_count == count {
                            let item = &mut s.deliveries[d as usize];
                            item.status = Status::Scheduled;
                            item.attempts_base = count;
                            Self::set_due(&mut s, d, true);
                            out.push((d, count + 1));
                            s.ghost.released = true;
                        }
                    }
                    JobKind::Hold => {
                        // `hold_scheduled` in a transaction with the endpoint's version read.
                        let delivery_ok = item.status == Status::Scheduled && item.attempt_count == count;
                        let version_ok = self.mutant == Mutant::HoldWithoutVersionGuard || s.version == version;
                        if !version_ok {
                            // EndpointChanged: stop; the job goes on next tick.
                            page.clear();
                            finished = false;
                        } else if delivery_ok {
                            let item = &mut s.deliveries[d as usize];
                            item.status = Status::Held;
                            Self::set_due(&mut s, d, false);
                        }
                    }
                    JobKind::Probe => {
                        // `probe_out` + `release` in one transaction.
                        if s.version == version && item.status == Status::Held && item.attempt_count == count {
                            Self::change_endpoint(&mut s, Ep::Probing(d), &[]);
                            let item = &mut s.deliveries[d as usize];
                            item.status = Status::Scheduled;
                            item.attempts_base = count;
                            Self::set_due(&mut s, d, true);
                            out.push((d, count + 1));
                        } else {
                            finished = false;
                        }
                    }
                }
                s.sweepers[i as usize] = Sweeper::JobPage { j, ep, version, page, out, finished };
            }
            Action::JobPut(i) => {
                let Sweeper::JobPage { j, out, finished, .. } = s.sweepers[i as usize].clone() else { return None };
                if !finished {
                    s.jobs[j.index()] += 1;
                }
                s.sweepers[i as usize] = if out.is_empty() { Sweeper::Idle } else { Sweeper::Send { out } };
            }
            Action::SweepSend(i) => {
                let Sweeper::Send { out } = s.sweepers[i as usize].clone() else { return None };
                for m in out {
                    push_sorted(&mut s.queue, m);
                }
                s.sweepers[i as usize] = Sweeper::Idle;
            }
            Action::Disable => {
                s.budgets.admin -= 1;
                Self::change_endpoint(&mut s, Ep::Disabled, &[JobKind::Hold]);
            }
            Action::Enable => {
                s.budgets.admin -= 1;
                Self::change_endpoint(&mut s, Ep::Enabled, &[JobKind::Release]);
            }
            Action::CrashWorker(w) => {
                s.budgets.crashes -= 1;
                if let Some(m) = s.workers[w as usize].msg() {
                    push_sorted(&mut s.queue, m); // visible again after the visibility timeout
                }
                s.workers[w as usize] = Worker::Idle;
            }
            Action::CrashSweeper(i) => {
                s.budgets.crashes -= 1;
                if let Sweeper::Job { j, .. } | Sweeper::JobPage { j, .. } = s.sweepers[i as usize] {
                    s.jobs[j.index()] += 1; // due again after the step's lease
                }
                s.sweepers[i as usize] = Sweeper::Idle;
            }
            Action::Duplicate(i) => {
                s.budgets.duplicates -= 1;
                let m = s.queue[i];
                push_sorted(&mut s.queue, m);
            }
            Action::Lose(i) => {
                s.budgets.losses -= 1;
                s.queue.remove(i);
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut p = vec![
            Property::always("no two winning claims of one attempt", |_, s: &State| !s.ghost.double_claim),
            Property::always("no attempt is sent twice", |_, s: &State| !s.ghost.double_post),
            Property::always("every unfinished delivery is in the due index", |_, s: &State| {
                s.deliveries.iter().all(|d| !matches!(d.status, Status::Scheduled | Status::Sending) || d.due)
            }),
            Property::always("every held delivery has a way out", |_, s: &State| {
                // Running: not finished, whether or not a sweeper holds its step now.
                let job = |kind: JobKind| {
                    s.jobs[kind.index()] > 0
                        || s.sweepers.iter().any(|sw| match sw {
                            Sweeper::Job { j, .. } | Sweeper::JobPage { j, .. } => *j == kind,
                            _ => false,
                        })
                };
                s.deliveries.iter().all(|item| {
                    item.status != Status::Held
                        || match s.ep {
                            Ep::Disabled => true,
                            Ep::Paused => job(JobKind::Probe),
                            // The probe's outcome moves the endpoint: it must still be coming.
                            Ep::Probing(p) => {
                                matches!(s.deliveries[p as usize].status, Status::Scheduled | Status::Sending)
                            }
                            Ep::Enabled => job(JobKind::Release),
                        }
                })
            }),
            Property::always("exhausted only by the retry policy", |_, s: &State| {
                s.deliveries.iter().all(|d| {
                    d.status != Status::Exhausted
                        || Protocol::exhausted_by_policy(d.attempt_count.saturating_sub(d.attempts_base))
                })
            }),
            Property::always(
                "once stable, every delivery is delivered, exhausted or held by an operator",
                |m: &Protocol, s: &State| {
                    !m.is_stable(s)
                        || s.deliveries.iter().all(|d| match d.status {
                            Status::Absent | Status::Delivered | Status::Exhausted => true,
                            Status::Held => s.ep == Ep::Disabled,
                            Status::Scheduled | Status::Sending => false,
                        })
                },
            ),
            Property::always(
                "once stable with the endpoint enabled, every delivery was delivered",
                |m: &Protocol, s: &State| {
                    // The receiver recovered (its failures are a budget) and no operator holds the
                    // endpoint: nothing is left pending.
                    !m.is_stable(s)
                        || s.ep != Ep::Enabled
                        || s.deliveries
                            .iter()
                            .all(|d| matches!(d.status, Status::Absent | Status::Delivered | Status::Exhausted))
                },
            ),
            Property::always("no new attempt on a stopped endpoint", |_, s: &State| !s.ghost.post_on_stopped),
            Property::sometimes("both delivered", |_, s: &State| {
                s.deliveries.iter().all(|d| d.status == Status::Delivered)
            }),
            Property::sometimes("a probe resumes the endpoint", |_, s: &State| s.ghost.probe_resumed),
            Property::sometimes("a lost lease is recovered", |_, s: &State| s.ghost.lease_recovered),
            Property::sometimes("a held delivery is released and both are delivered", |_, s: &State| {
                s.ghost.released && s.deliveries.iter().all(|d| d.status == Status::Delivered)
            }),
        ];
        if self.strict_window {
            p.push(Property::always("no attempt starts after a stop answered", |_, s: &State| {
                !s.ghost.post_after_change
            }));
        }
        p
    }
}
