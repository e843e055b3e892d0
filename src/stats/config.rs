//! The module's configuration: `--loadmodule <path> ratelimit.class-separator : ...` at load time, or
//! `CONFIG SET / CONFIG GET ratelimit.*` at run time (module configs, Redis 7.0+ and Valkey). Values
//! live in atomics that the hot path reads without a lock; the server validates numeric ranges and
//! booleans, and `Separator` validates itself.

use redis_module::configuration::ConfigurationContext;
use redis_module::{ConfigurationValue, RedisError, RedisString};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, Ordering::Relaxed};

/// `ratelimit.class-stats`: count outcomes per key class and track the most denied keys.
pub static CLASS_STATS: AtomicBool = AtomicBool::new(true);
/// `ratelimit.class-limit`: how many key classes are counted apart; the rest are summed as `other`.
pub static CLASS_LIMIT: AtomicI64 = AtomicI64::new(256);
pub const CLASS_LIMIT_RANGE: (i64, i64) = (1, 100_000);
/// `ratelimit.top-size`: how many denied keys the heavy-hitters summary tracks.
pub static TOP_SIZE: AtomicI64 = AtomicI64::new(32);
pub const TOP_SIZE_RANGE: (i64, i64) = (1, 10_000);
/// `ratelimit.class-separator`: a key's class is the key up to the last of these.
pub static SEPARATOR: Separator = Separator(AtomicU8::new(b':'));

/// One printable ASCII character.
pub struct Separator(AtomicU8);

impl Separator {
    pub fn get(&self) -> u8 {
        self.0.load(Relaxed)
    }
}

impl ConfigurationValue<RedisString> for Separator {
    fn get(&self, _ctx: &ConfigurationContext) -> RedisString {
        let byte = [self.0.load(Relaxed)];
        RedisString::create(None, std::str::from_utf8(&byte).unwrap_or(":"))
    }

    fn set(&self, _ctx: &ConfigurationContext, value: RedisString) -> Result<(), RedisError> {
        match value.as_slice() {
            [byte] if byte.is_ascii_graphic() => {
                self.0.store(*byte, Relaxed);
                Ok(())
            }
            _ => Err(RedisError::Str(
                "ratelimit.class-separator must be one printable ASCII character, such as ':'",
            )),
        }
    }
}

pub fn class_stats() -> bool {
    CLASS_STATS.load(Relaxed)
}

pub fn class_limit() -> usize {
    CLASS_LIMIT.load(Relaxed).clamp(CLASS_LIMIT_RANGE.0, CLASS_LIMIT_RANGE.1) as usize
}

pub fn top_size() -> usize {
    TOP_SIZE.load(Relaxed).clamp(TOP_SIZE_RANGE.0, TOP_SIZE_RANGE.1) as usize
}
