//! Everything that touches the module API, and every `unsafe` of the module: argv views (`arg`), the
//! key store (`store`), replies and errors (`reply`, `error`), command declaration, registration and
//! dispatch (`command`), the clock, the ACL category, the INFO callback and the module's entry point
//! (`module`). Commands and statistics use these and never the raw API.
#![allow(unsafe_code)]

pub mod acl;
pub mod arg;
pub mod cell;
pub mod clock;
pub mod command;
pub mod dialects;
pub mod error;
pub mod info;
pub mod module;
pub mod observed;
pub mod reply;
pub mod store;

pub use arg::Arg;
pub use command::{Acl, Command, Dialect, Keys, Spec, FAST_WRITE};
pub use error::{DialectError, RlError};
pub use reply::{Reply, Value};
pub use store::StateKey;
