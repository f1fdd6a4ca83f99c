//! The gate every simulated AWS call goes through, and the bookkeeping the scheduler reads.
//!
//! A call registers a pending operation and waits; the driver ([`crate::world`]) picks one
//! pending operation of any task (seeded), decides its fate ([`Fault`]) and polls that task,
//! which then runs the operation against the in-memory state in one go (so every operation is
//! atomic), or drops the task there (a crash).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

/// What becomes of one gated call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// It runs and answers.
    None,
    /// It fails without effect.
    FailBefore,
    /// It takes effect, then reports a failure (the ambiguous case).
    FailAfter,
}

/// A pending gated call.
#[derive(Debug)]
pub struct Pending {
    /// The task that made it.
    pub task: usize,
    /// What it is (`store.apply`, `sqs.send`, ...).
    pub op: &'static str,
    waker: Option<Waker>,
    decision: Option<Fault>,
}

/// The scheduler's shared part: the pending calls and the task being polled.
#[derive(Debug, Default)]
pub struct Sched {
    /// The task being polled now.
    pub current: usize,
    next_id: u64,
    /// Pending calls by id (ids grow: iteration order is deterministic).
    pub pending: BTreeMap<u64, Pending>,
    /// Every call goes through at once, unfailed (see [`Gate::open`]).
    open: bool,
}

/// Cheap handle on [`Sched`].
#[derive(Debug, Clone, Default)]
pub struct Gate(Arc<Mutex<Sched>>);

impl Gate {
    /// A gate that lets every call through at once with [`Fault::None`]: no driver, no
    /// faults, so the in-memory store and queue serve real tasks on a real runtime in real
    /// time (the bench's noisy-neighbour part measures deliver's scheduling over them).
    pub fn open() -> Self {
        Self(Arc::new(Mutex::new(Sched { open: true, ..Sched::default() })))
    }

    /// Locks the scheduler state (never poisoned in practice: the simulation is one thread).
    pub fn lock(&self) -> MutexGuard<'_, Sched> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until the driver lets this call run, and says how it fares.
    pub fn enter(&self, op: &'static str) -> GateFuture {
        GateFuture { gate: self.clone(), op, id: None }
    }

    /// The undecided pending calls: (id, task, op).
    pub fn undecided(&self) -> Vec<(u64, usize, &'static str)> {
        self.lock().pending.iter().filter(|(_, p)| p.decision.is_none()).map(|(id, p)| (*id, p.task, p.op)).collect()
    }

    /// Lets pending call `id` go with `fault` and wakes whatever waits on it.
    pub fn decide(&self, id: u64, fault: Fault) {
        let waker = {
            let mut s = self.lock();
            match s.pending.get_mut(&id) {
                Some(p) => {
                    p.decision = Some(fault);
                    p.waker.take()
                }
                None => None,
            }
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Forgets every pending call of a task (it crashed).
    pub fn forget_task(&self, task: usize) {
        self.lock().pending.retain(|_, p| p.task != task);
    }
}

/// See [`Gate::enter`].
#[derive(Debug)]
pub struct GateFuture {
    gate: Gate,
    op: &'static str,
    id: Option<u64>,
}

impl Future for GateFuture {
    type Output = Fault;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Fault> {
        let gate = self.gate.clone();
        let mut s = gate.lock();
        if s.open {
            return Poll::Ready(Fault::None);
        }
        match self.id {
            None => {
                let id = s.next_id;
                s.next_id += 1;
                let task = s.current;
                s.pending.insert(id, Pending { task, op: self.op, waker: Some(cx.waker().clone()), decision: None });
                self.id = Some(id);
                Poll::Pending
            }
            Some(id) => match s.pending.get_mut(&id) {
                Some(p) => match p.decision {
                    Some(d) => {
                        s.pending.remove(&id);
                        self.id = None;
                        Poll::Ready(d)
                    }
                    None => {
                        p.waker = Some(cx.waker().clone());
                        Poll::Pending
                    }
                },
                None => Poll::Pending,
            },
        }
    }
}

impl Drop for GateFuture {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.gate.lock().pending.remove(&id);
        }
    }
}
