//! The server's clock, read once per command.

use ratelimit_core::time::{Nanos, NANOS_PER_MS};
use redis_module::raw;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

/// The last reading, for what runs after a command (statistics) without reading the clock again.
static LAST: AtomicI64 = AtomicI64::new(0);

/// The time the last command read (0 before any).
pub fn last_ns() -> Nanos {
    LAST.load(Relaxed)
}

/// The server's time in nanoseconds: the cached command time where the server has it (Redis 7.2+,
/// Valkey), so the limiter agrees with key expiry inside MULTI/EXEC and scripts; milliseconds on
/// Redis 7.0, which lacks the microsecond API.
pub fn now_ns() -> Nanos {
    let now = read();
    LAST.store(now, Relaxed);
    now
}

fn read() -> Nanos {
    // SAFETY: the pointers are set by RedisModule_Init and only read here; a missing one is skipped.
    unsafe {
        if let Some(cached_us) = raw::RedisModule_CachedMicroseconds {
            return cached_us().saturating_mul(1_000);
        }
        if let Some(ms) = raw::RedisModule_Milliseconds {
            return ms().saturating_mul(NANOS_PER_MS);
        }
    }
    // Unreachable on any server that loads modules; the system clock is the same clock anyway.
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().min(i64::MAX as u128) as Nanos)
}
