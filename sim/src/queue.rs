//! [`Queue`] in memory with SQS's semantics: at-least-once (a send may store a message twice),
//! `DelaySeconds`, a visibility timeout after each receive, redelivery of what was not
//! deleted, and a dead-letter queue after `max_receives` receives.

use crate::sched::{Fault, Gate};
use async_trait::async_trait;
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::sync::{Arc, Mutex};
use webhooks::clock::Clock;
use webhooks::domain::delivery_lifecycle::Enqueue;
use webhooks::queue::{Queue, QueueError, encode};

/// A message in the queue.
#[derive(Debug, Clone)]
pub struct Message {
    /// Message id.
    pub id: u64,
    /// Body (JSON of an attempt message).
    pub body: String,
    /// Not received before this time (ms).
    pub visible_at: i64,
    /// Times received.
    pub receives: u32,
}

/// The queue's state.
#[derive(Debug, Default)]
pub struct QueueState {
    /// Messages in the queue.
    pub messages: Vec<Message>,
    /// Messages moved to the dead-letter queue.
    pub dead: Vec<Message>,
    next_id: u64,
}

/// The in-memory queue.
pub struct MemQueue {
    gate: Gate,
    clock: Arc<dyn Clock>,
    /// State (the driver receives and deletes through it).
    pub state: Arc<Mutex<QueueState>>,
    rng: Mutex<StdRng>,
    /// Chance that a sent message is stored twice.
    pub duplicate: Mutex<f64>,
    visibility_ms: i64,
    max_receives: u32,
}

impl MemQueue {
    /// An empty queue.
    pub fn new(gate: Gate, clock: Arc<dyn Clock>, seed: u64, visibility_ms: i64, max_receives: u32) -> Self {
        Self {
            gate,
            clock,
            state: Arc::new(Mutex::new(QueueState::default())),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            duplicate: Mutex::new(0.0),
            visibility_ms,
            max_receives,
        }
    }

    fn st(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Receives up to `max` visible messages (ReceiveMessage): each is hidden for the
    /// visibility timeout; one received more than `max_receives` times goes to the
    /// dead-letter queue instead.
    pub async fn receive(&self, max: usize) -> Result<Vec<Message>, QueueError> {
        let fault = self.gate.enter("sqs.receive").await;
        if fault == Fault::FailBefore {
            return Err(QueueError("simulated receive failure".into()));
        }
        let now = self.clock.now().timestamp_millis();
        let mut st = self.st();
        let mut out = Vec::new();
        let mut i = 0;
        while i < st.messages.len() && out.len() < max {
            if st.messages[i].visible_at > now {
                i += 1;
                continue;
            }
            if st.messages[i].receives >= self.max_receives {
                let m = st.messages.remove(i);
                st.dead.push(m);
                continue;
            }
            let m = &mut st.messages[i];
            m.receives += 1;
            m.visible_at = now + self.visibility_ms;
            out.push(m.clone());
            i += 1;
        }
        // A receive that fails after taking messages leaves them hidden (they come back).
        if fault == Fault::FailAfter {
            return Err(QueueError("simulated receive failure after taking messages".into()));
        }
        Ok(out)
    }

    /// Deletes a received message (DeleteMessage).
    pub async fn delete(&self, id: u64) -> Result<(), QueueError> {
        let fault = self.gate.enter("sqs.delete").await;
        if fault == Fault::FailBefore {
            return Err(QueueError("simulated delete failure".into()));
        }
        self.st().messages.retain(|m| m.id != id);
        if fault == Fault::FailAfter {
            return Err(QueueError("simulated delete failure after deleting".into()));
        }
        Ok(())
    }

    /// When the next message becomes visible (ms), if any waits.
    pub fn next_visible(&self) -> Option<i64> {
        self.st().messages.iter().map(|m| m.visible_at).min()
    }

    /// Whether a message is visible now.
    pub fn has_visible(&self) -> bool {
        let now = self.clock.now().timestamp_millis();
        self.st().messages.iter().any(|m| m.visible_at <= now)
    }
}

#[async_trait]
impl Queue for MemQueue {
    async fn send(&self, messages: &[Enqueue]) -> Result<(), QueueError> {
        for chunk in messages.chunks(10) {
            let fault = self.gate.enter("sqs.send").await;
            if fault == Fault::FailBefore {
                return Err(QueueError("simulated send failure".into()));
            }
            let now = self.clock.now().timestamp_millis();
            let dup = *self.duplicate.lock().unwrap_or_else(|e| e.into_inner());
            for m in chunk {
                let body = encode(&m.message);
                let copies = if self.rng.lock().unwrap_or_else(|e| e.into_inner()).random_bool(dup) { 2 } else { 1 };
                let mut st = self.st();
                for _ in 0..copies {
                    let id = st.next_id;
                    st.next_id += 1;
                    let visible_at = now + i64::from(m.delay_seconds.min(900)) * 1000;
                    st.messages.push(Message { id, body: body.clone(), visible_at, receives: 0 });
                }
            }
            if fault == Fault::FailAfter {
                return Err(QueueError("simulated send failure after sending".into()));
            }
        }
        Ok(())
    }
}
