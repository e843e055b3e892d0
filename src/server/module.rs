//! The module's entry point: `module!` expands to the `redis_module!` invocation (name, version,
//! allocator, configs) with an init that sets the module's options, adds the ACL category, registers
//! the commands it is given and the INFO callback. lib.rs invokes it with the list of commands.

use super::acl::{add_category, Category};
use super::dialects::Plan;
use super::observed::set_registered;
use super::spec::{Registration, Spec};
use redis_module::{raw, Context, Status};

/// A decimal digit string (Cargo's version parts) as a number, at compile time.
const fn number(digits: &str) -> i32 {
    let bytes = digits.as_bytes();
    let (mut value, mut i) = (0, 0);
    while i < bytes.len() {
        value = value * 10 + (bytes[i] - b'0') as i32;
        i += 1;
    }
    value
}

/// The version MODULE LIST shows, from Cargo.toml's: major * 10000 + minor * 100 + patch
/// (0.1.0 -> 100, 1.2.3 -> 10203), as Redis' own modules number theirs.
pub const VERSION: i32 = number(env!("CARGO_PKG_VERSION_MAJOR")) * 10_000
    + number(env!("CARGO_PKG_VERSION_MINOR")) * 100
    + number(env!("CARGO_PKG_VERSION_PATCH"));

/// Before the commands register: the module's options, its ACL category, and which dialects this load
/// registers (`specs`: every command it has). The first value is true when the commands can join
/// categories. None (with a log line) when the module's configuration is refused.
pub fn prepare(ctx: &Context, specs: &[&Spec]) -> Option<(bool, Plan)> {
    // Keys are signalled as modified only when written (see `store`), not whenever a key opened for
    // writing is closed: a denial must not abort another client's WATCH.
    // SAFETY: called from OnLoad with the server's context.
    unsafe {
        if let Some(set_options) = raw::RedisModule_SetModuleOptions {
            set_options(ctx.ctx, raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as i32);
        }
    }
    // A category that exists already (the server's own @ratelimit, another module's) is joined, never
    // fatal: a name clash must not take the server down at start-up.
    let category = add_category(ctx, c"ratelimit");
    match Plan::new(ctx, specs, category == Category::Existing) {
        Ok(plan) => Some((category != Category::Unsupported, plan)),
        Err(refused) => {
            ctx.log_warning(&format!("the module does not load: {refused}"));
            None
        }
    }
}

/// After the commands: the INFO callback and the list of what registered; the load fails when one of
/// the module's own commands failed to register.
pub fn finish(ctx: &Context, specs: &'static [&'static Spec], registered: &[Registration]) -> Status {
    let kept = specs.iter().zip(registered).filter(|(_, r)| **r == Registration::Registered);
    set_registered(kept.map(|(spec, _)| *spec).collect());
    if registered.contains(&Registration::Failed) || super::info::register(ctx) == Status::Err {
        return Status::Err;
    }
    Status::Ok
}

/// The module with the given commands (types implementing `Command`), registered in that order.
#[cfg_attr(test, allow(unused_macros))]
macro_rules! module {
    ($($command:ty),* $(,)?) => {
        static SPECS: &[&$crate::server::Spec] = &[$(&<$command as $crate::server::Command>::SPEC),*];

        fn init(ctx: &redis_module::Context, _args: &[redis_module::RedisString]) -> redis_module::Status {
            let Some((categories, plan)) = $crate::server::module::prepare(ctx, SPECS) else {
                return redis_module::Status::Err;
            };
            let registered = [$($crate::server::command::register::<$command>(ctx, categories, &plan)),*];
            $crate::server::module::finish(ctx, SPECS, &registered)
        }

        redis_module::redis_module! {
            name: "ratelimit",
            version: $crate::server::module::VERSION,
            allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
            data_types: [],
            init: init,
            commands: [],
            configurations: [
                i64: [
                    ["class-limit", &$crate::stats::config::CLASS_LIMIT, 256, $crate::stats::config::CLASS_LIMIT_RANGE.0, $crate::stats::config::CLASS_LIMIT_RANGE.1, redis_module::configuration::ConfigurationFlags::DEFAULT, None],
                    ["top-size", &$crate::stats::config::TOP_SIZE, 32, $crate::stats::config::TOP_SIZE_RANGE.0, $crate::stats::config::TOP_SIZE_RANGE.1, redis_module::configuration::ConfigurationFlags::DEFAULT, None],
                ],
                string: [
                    ["class-separator", &$crate::stats::config::SEPARATOR, ":", redis_module::configuration::ConfigurationFlags::DEFAULT, None],
                    ["dialects", &$crate::server::dialects::DIALECTS, "all", redis_module::configuration::ConfigurationFlags::IMMUTABLE, None],
                ],
                bool: [
                    ["class-stats", &$crate::stats::config::CLASS_STATS, true, redis_module::configuration::ConfigurationFlags::DEFAULT, None],
                ],
                enum: [],
                module_args_as_configuration: true,
            ]
        }
    };
}
#[cfg_attr(test, allow(unused_imports))]
pub(crate) use module;
