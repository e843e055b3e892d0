//! redis-ratelimit: native rate limiting commands for Redis and Valkey.
//!
//! Layout: the pure algorithms live in their own crate (`core/`, `ratelimit_core`: no Redis, time
//! passed in), `command` is the command layer (one file per command), and this file only registers the
//! module and its commands.

// Under cfg(test) nothing registers the handlers (see below), so they look unused there.
#[cfg_attr(test, allow(dead_code))]
mod command;

// The command layer's unit tests run with the system allocator; the module itself (and the allocator
// that only works inside a server) exists outside cfg(test).
#[cfg(not(test))]
mod registration {
    use crate::command::acl::{add_category, Category};
    use crate::command::config::{
        CLASS_LIMIT, CLASS_LIMIT_RANGE, CLASS_STATS, SEPARATOR, TOP_SIZE, TOP_SIZE_RANGE,
    };
    use crate::command::fixed::Fixed;
    use crate::command::inspect::Inspect;
    use crate::command::refund::Refund;
    use crate::command::registry::register;
    use crate::command::slide::Slide;
    use crate::command::slide_count::SlideCount;
    use crate::command::stats;
    use crate::command::token::Token;
    use crate::command::top::{ResetStats, Top};
    use redis_module::alloc::RedisAlloc;
    use redis_module::configuration::ConfigurationFlags;
    use redis_module::{redis_module, Context, RedisString, Status};

    fn init(ctx: &Context, _args: &[RedisString]) -> Status {
        // Keys are signalled as modified only when written (see `store`), not whenever a key opened
        // for writing is closed: a denial must not abort another client's WATCH.
        // SAFETY: called from OnLoad with the server's context.
        unsafe {
            if let Some(set_options) = redis_module::raw::RedisModule_SetModuleOptions {
                set_options(
                    ctx.ctx,
                    redis_module::raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as i32,
                );
            }
        }
        let fast = c"write deny-oom fast";
        // RL.SLIDE is not "fast": growing or shrinking a log copies it (amortised O(1), worst O(limit)).
        let slow = c"write deny-oom";
        // A category that exists already (the server's own @ratelimit, another module's) is joined, never
        // fatal: a name clash must not take the server down at start-up.
        // Besides @ratelimit, each command is in the server's category for what it does, so that
        // `+@read` grants the reporting commands and `-@write` takes the limiters away.
        let (write, read, admin) = match add_category(ctx, c"ratelimit") {
            Category::Unsupported => (None, None, None),
            Category::Created | Category::Existing => {
                (Some(c"ratelimit write"), Some(c"ratelimit read"), Some(c"ratelimit admin dangerous"))
            }
        };
        let registered = [
            register::<Token>(ctx, c"rl.token", fast, write),
            register::<Fixed>(ctx, c"rl.fixed", fast, write),
            register::<Slide>(ctx, c"rl.slide", slow, write),
            register::<SlideCount>(ctx, c"rl.slidecount", fast, write),
            register::<Refund>(ctx, c"rl.refund", fast, write),
            // Reporting: read-only (replicas and read-only users may call them), no key writes.
            register::<Inspect>(ctx, c"rl.inspect", c"readonly fast", read),
            register::<Top>(ctx, c"rl.top", c"readonly", read),
            register::<ResetStats>(ctx, c"rl.resetstats", c"admin", admin),
            stats::register(ctx),
        ];
        if registered.contains(&Status::Err) {
            return Status::Err;
        }
        Status::Ok
    }

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
    const VERSION: i32 = number(env!("CARGO_PKG_VERSION_MAJOR")) * 10_000
        + number(env!("CARGO_PKG_VERSION_MINOR")) * 100
        + number(env!("CARGO_PKG_VERSION_PATCH"));

    redis_module! {
        name: "ratelimit",
        version: VERSION,
        allocator: (RedisAlloc, RedisAlloc),
        data_types: [],
        init: init,
        commands: [],
        configurations: [
            i64: [
                ["class-limit", &CLASS_LIMIT, 256, CLASS_LIMIT_RANGE.0, CLASS_LIMIT_RANGE.1, ConfigurationFlags::DEFAULT, None],
                ["top-size", &TOP_SIZE, 32, TOP_SIZE_RANGE.0, TOP_SIZE_RANGE.1, ConfigurationFlags::DEFAULT, None],
            ],
            string: [
                ["class-separator", &SEPARATOR, ":", ConfigurationFlags::DEFAULT, None],
            ],
            bool: [
                ["class-stats", &CLASS_STATS, true, ConfigurationFlags::DEFAULT, None],
            ],
            enum: [],
            module_args_as_configuration: true,
        ]
    }
}
