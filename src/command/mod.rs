//! The command layer: parse, read state, decide with the pure algorithms, write and replicate the
//! effect, reply. One file per command; lib.rs registers them through `registry`.

pub mod acl;
mod arg;
mod args;
mod clock;
mod counting;
mod error;
pub mod fixed;
pub mod refund;
pub mod registry;
mod reply;
pub mod slide;
pub mod slide_count;
pub mod stats;
mod store;
pub mod token;
