//! A value shared by command calls without a lock: commands run one at a time on the server's main
//! thread, so the flag that guards it is never contended; should it ever be (a second thread), the
//! caller just goes without (a cache misses, a statistic is skipped) instead of waiting or panicking.
//! Unlike `std::sync::Mutex`, nothing is poisoned and nothing reads thread-local state.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};

pub struct TryCell<T> {
    busy: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: access to `value` is exclusive while `busy` is held (acquire/release).
unsafe impl<T: Send> Sync for TryCell<T> {}

impl<T> TryCell<T> {
    pub const fn new(value: T) -> TryCell<T> {
        TryCell { busy: AtomicBool::new(false), value: UnsafeCell::new(value) }
    }

    /// Runs `f` on the value, or returns None when another caller holds it.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        if self.busy.swap(true, Ordering::Acquire) {
            return None;
        }
        struct Release<'a>(&'a AtomicBool);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let _release = Release(&self.busy);
        // SAFETY: `busy` was false and is now ours until `_release` drops (also on unwind).
        Some(f(unsafe { &mut *self.value.get() }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusive_and_released_after_use_and_after_a_panic() {
        let cell = TryCell::new(0);
        assert_eq!(
            cell.with(|v| {
                *v += 1;
                cell.with(|_| ()).is_none()
            }),
            Some(true)
        );
        assert_eq!(cell.with(|v| *v), Some(1));
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cell.with(|_| panic!("boom"))));
        assert_eq!(cell.with(|v| *v), Some(1));
    }
}
