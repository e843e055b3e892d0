//! The command layer: parse, read state, decide with the pure algorithms, write and replicate the
//! effect, reply. One file per command; lib.rs registers them through `registry`.

pub mod acl;
mod arg;
mod args;
mod classes;
mod clock;
pub mod config;
mod counting;
mod error;
pub mod fixed;
mod heavy;
pub mod inspect;
mod observe;
pub mod refund;
pub mod registry;
mod reply;
pub mod slide;
pub mod slide_count;
pub mod stats;
mod store;
pub mod token;
pub mod top;
mod try_cell;
