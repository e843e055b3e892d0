//! The pure algorithms: no Redis, no clock, no I/O. Each takes its parameters, the previous state and
//! the current time, and returns a verdict and the next state.

pub mod decimal;
pub mod fixed_window;
pub mod sliding_counter;
pub mod sliding_log;
pub mod time;
pub mod token_bucket;
pub mod verdict;
