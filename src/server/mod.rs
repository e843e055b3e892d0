//! Everything that touches the module API, and every `unsafe` of the module: argv views (`arg`), the
//! key store (`store`), replies and errors (`reply`, `error`), command declarations (`spec`), registration and
//! dispatch (`command`), the clock, the ACL category, the INFO callback and the module's entry point
//! (`module`). Commands and statistics use these and never the raw API.
#![allow(unsafe_code)]

pub mod acl;
pub mod arg;
pub mod clock;
pub mod command;
pub mod dialects;
pub mod error;
pub mod info;
pub mod module;
pub mod observed;
pub mod reply;
pub mod spec;
pub mod store;
pub mod try_cell;

pub use arg::Arg;
pub use error::{DialectError, RlError};
pub use reply::{Reply, Value};
pub use spec::{Acl, Command, Keys, Origin, Spec, FAST_WRITE};
pub use store::StateKey;
