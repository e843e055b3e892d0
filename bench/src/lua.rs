//! The Lua scripts of the distributed limiter service this project grew from (EVALSHA with TIME inside
//! the script), verbatim in logic: the baselines the native commands replace.

/// The script's token bucket: a hash of two fields (tokens, ts), time from TIME, PEXPIRE on every call.
pub const TOKEN_BUCKET: &str = include_str!("../scripts/token_bucket.lua");

/// The script's exact sliding window: a sorted set of request times.
pub const SLIDING_LOG: &str = include_str!("../scripts/sliding_log.lua");

/// GCRA as redis_rate and upstash publish it (a float TAT in seconds). ARGV: burst, rate, period, cost.
pub const GCRA: &str = include_str!("../scripts/gcra.lua");

/// The fixed-window seed's INCR and PEXPIRE made atomic (no TIME). ARGV: limit, window (ms), cost.
pub const FIXED_WINDOW: &str = include_str!("../scripts/fixed_window.lua");
