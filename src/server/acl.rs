//! The module's ACL category. A name clash must never stop the module from loading: a server with a
//! built-in `@ratelimit` (Redis with the core GCRA command) or another module may have taken the name
//! first, and the meaning is the same, so the RL.* commands join the existing category.

use redis_module::{raw, Context};
use std::ffi::CStr;
use std::os::raw::c_int;

/// What became of the category at load time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category {
    /// This module created it.
    Created,
    /// The server or another module already had it (or it could not be added): the commands try to
    /// join it, and load without a category if that fails too.
    Existing,
    /// The server has no module ACL categories (Redis 7.0).
    Unsupported,
}

/// Adds `name` as an ACL category where the server allows module categories. Never fails the load.
pub fn add_category(ctx: &Context, name: &CStr) -> Category {
    // SAFETY: called from OnLoad with the server's context; the pointer was set by RedisModule_Init.
    let Some(add) = (unsafe { raw::RedisModule_AddACLCategory }) else {
        ctx.log_notice("this server has no module ACL categories: commands are not in @ratelimit");
        return Category::Unsupported;
    };
    // SAFETY: as above; `name` is a valid C string for the duration of the call.
    if unsafe { add(ctx.ctx, name.as_ptr()) } == raw::REDISMODULE_OK as c_int {
        return Category::Created;
    }
    ctx.log_notice(&format!(
        "ACL category '{}' already exists (the server's own or another module's): the RL.* commands join it",
        name.to_string_lossy()
    ));
    Category::Existing
}
