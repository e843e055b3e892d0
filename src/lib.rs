//! redis-ratelimit: native rate limiting commands for Redis and Valkey.
//!
//! Layout: `algo` holds the pure algorithms (no Redis, time passed in), `command` the command layer,
//! and this file only registers the module and its commands.

pub mod algo;
// Under cfg(test) nothing registers the handlers (see below), so they look unused there.
#[cfg_attr(test, allow(dead_code))]
mod command;

#[cfg(not(test))]
mod registration {
    use crate::command;
    use redis_module::alloc::RedisAlloc;
    use redis_module::{redis_module, AclCategory};

    redis_module! {
        name: "ratelimit",
        version: 1,
        allocator: (RedisAlloc, RedisAlloc),
        data_types: [],
        acl_categories: ["ratelimit",],
        commands: [
            // name, handler, flags, first key, last key, key step, mandatory ACL, optional ACL
            ["rl.token", command::rl_token, "write deny-oom fast", 1, -1, 4, "", "ratelimit"],
        ],
    }
}
