//! The breaker's background probe: while the breaker is open for an outage, one task asks Redis
//! every `EVERY` whether it answers again (`Transport::answers`: one command on a connection of its
//! own, never a decision), and when it does, ends the cool-down at once, so the next decision is
//! Redis' again instead of waiting for the rest of the cool-down. No request waits on it. It is
//! started by the limiter when the breaker opens, ends when the breaker no longer waits for Redis,
//! and is aborted when the limiter is dropped.

use crate::connection::Transport;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Between two questions: short, so recovery is noticed within about this much.
const EVERY: Duration = Duration::from_millis(50);
/// How long one question waits for its answer: a paused server answers it when the pause ends,
/// which is then noticed at once. A connection that stays silent longer is given up and made anew.
const PATIENCE: Duration = Duration::from_secs(5);

/// What the probe watches: is Redis still awaited, and what to do once it answers.
pub(crate) trait Watched: Send + Sync + 'static {
    fn awaits_redis(&self, now: Instant) -> bool;
    fn redis_answered(&self, now: Instant);
}

#[derive(Default)]
pub(crate) struct Probe {
    running: Arc<AtomicBool>,
    task: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Probe {
    /// Starts the probe for `watched` over `backend`, unless it runs already or there is no tokio
    /// runtime here (then the cool-down alone ends the outage).
    pub(crate) fn start<W: Watched>(&self, watched: Weak<W>, backend: Transport) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        if self.running.swap(true, Ordering::AcqRel) {
            return;
        }
        let running = Arc::clone(&self.running);
        let task = runtime.spawn(async move {
            loop {
                tokio::time::sleep(EVERY).await;
                let Some(target) = watched.upgrade() else { return };
                if !target.awaits_redis(Instant::now()) {
                    running.store(false, Ordering::Release);
                    // Opened again between the look and the flag: keep going (start() saw it running).
                    if target.awaits_redis(Instant::now()) && !running.swap(true, Ordering::AcqRel) {
                        continue;
                    }
                    return;
                }
                // The limiter may be dropped while the question waits: hold only its backend.
                drop(target);
                let answered = tokio::time::timeout(PATIENCE, backend.answers()).await.unwrap_or(false);
                if let (true, Some(target)) = (answered, watched.upgrade()) {
                    target.redis_answered(Instant::now());
                }
            }
        });
        *self.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task.abort_handle());
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        if let Some(task) = self.task.get_mut().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
    }
}
