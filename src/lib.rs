//! redis-ratelimit: native rate limiting commands for Redis and Valkey.
//!
//! Layout: `algo` holds the pure algorithms (no Redis, time passed in), `command` the command layer,
//! and this file only registers the module and its commands.

pub mod algo;
// Under cfg(test) nothing registers the handlers (see below), so they look unused there.
#[cfg_attr(test, allow(dead_code))]
mod command;

// Unit tests of the pure code run with the system allocator; the module itself (and so the allocator
// that only works inside a server) exists outside cfg(test).
#[cfg(not(test))]
mod registration {
    use crate::command::registry::{register, KeySpec};
    use crate::command::token::Token;
    use redis_module::alloc::RedisAlloc;
    use redis_module::{redis_module, AclCategory, Context, RedisString, Status};

    /// Keys at positions 1, 5, 9, ...: one per `key capacity rate cost` group.
    const GROUPS_OF_FOUR: KeySpec = KeySpec {
        first: 1,
        last: -1,
        step: 4,
    };

    fn init(ctx: &Context, _args: &[RedisString]) -> Status {
        let fast_write = c"write deny-oom fast";
        let acl = c"ratelimit";
        for status in [register::<Token>(
            ctx,
            c"rl.token",
            fast_write,
            GROUPS_OF_FOUR,
            acl,
        )] {
            if status == Status::Err {
                return Status::Err;
            }
        }
        Status::Ok
    }

    redis_module! {
        name: "ratelimit",
        version: 1,
        allocator: (RedisAlloc, RedisAlloc),
        data_types: [],
        acl_categories: ["ratelimit",],
        init: init,
        commands: [],
    }
}
