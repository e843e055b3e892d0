//! The server's clock, read once per command.

use ratelimit_core::time::{Nanos, NANOS_PER_MS};
use redis_module::raw;

/// The server's time in nanoseconds: the cached command time where the server has it (Redis 7.2+,
/// Valkey), so the limiter agrees with key expiry inside MULTI/EXEC and scripts; milliseconds on
/// Redis 7.0, which lacks the microsecond API.
pub fn now_ns() -> Nanos {
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
