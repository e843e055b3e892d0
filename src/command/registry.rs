//! Registering commands and dispatching the server's calls to them, without per-call copies of the
//! arguments: each call sees the server's argv directly, and replies go straight to the server.

use super::arg::Arg;
use super::clock;
use super::error::RlError;
use super::observe::{self, Keys};
use super::reply::Reply;
use super::stats::CommandStats;
use redis_module::{raw, Context, Status};
use std::ffi::CStr;
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A command: its body gets the arguments after the command name.
pub trait Command {
    /// Where `INFO ratelimit` counts this command's outcomes (limiters and refunds).
    const STATS: Option<&'static CommandStats> = None;
    /// Where the keys are whose classes count this command's outcomes (the limiters).
    const COUNTED: Option<Keys> = None;

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError>;
}

/// The function the server calls. Errors become error replies; a panic is caught here, because one
/// that crossed the FFI boundary would abort the server.
extern "C" fn dispatch<C: Command>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    // SAFETY: the server passes argc live strings that outlive this call.
    let args = unsafe { Arg::slice(argv, usize::try_from(argc).unwrap_or(0)) };
    let args = args.get(1..).unwrap_or(&[]);
    let outcome = catch_unwind(AssertUnwindSafe(|| C::run(&context, args)));
    let result = outcome.unwrap_or(Err(RlError::Internal("the command panicked; please report it")));
    if let Some(stats) = C::STATS {
        stats.record(&result);
    }
    if let Some(keys) = C::COUNTED {
        let record = || observe::record(args, keys, &result, || clock::last_ns() / 1_000_000);
        // Statistics never fail a command.
        let _ = catch_unwind(AssertUnwindSafe(record));
    }
    match result {
        Ok(reply) => reply.send(&context),
        Err(err) => err.send(&context),
    }
    raw::REDISMODULE_OK as c_int
}

/// Where a command's keys are: the first, the last (-1: the last argument) and the step between them.
pub struct KeySpec {
    pub first: c_int,
    pub last: c_int,
    pub step: c_int,
}

/// Registers `C` as `name` with the given flags and keys, in ACL category `acl` when there is one (see
/// `acl::add_category`); a command that cannot join it is registered without it, with a log line.
pub fn register<C: Command>(
    ctx: &Context,
    name: &CStr,
    flags: &CStr,
    keys: KeySpec,
    acl: Option<&CStr>,
) -> Status {
    // SAFETY: API pointers set by RedisModule_Init, called from OnLoad with the server's context.
    unsafe {
        let Some(create) = raw::RedisModule_CreateCommand else {
            return Status::Err;
        };
        let status = create(
            ctx.ctx,
            name.as_ptr(),
            Some(dispatch::<C>),
            flags.as_ptr(),
            keys.first,
            keys.last,
            keys.step,
        );
        if status != raw::REDISMODULE_OK as c_int {
            ctx.log_warning(&format!("cannot register command {}", name.to_string_lossy()));
            return Status::Err;
        }
        let (Some(acl), Some(get), Some(set_acl)) =
            (acl, raw::RedisModule_GetCommand, raw::RedisModule_SetCommandACLCategories)
        else {
            return Status::Ok;
        };
        let command = get(ctx.ctx, name.as_ptr());
        if command.is_null() || set_acl(command, acl.as_ptr()) != raw::REDISMODULE_OK as c_int {
            ctx.log_warning(&format!(
                "cannot put {} in ACL category {}: registered without a category",
                name.to_string_lossy(),
                acl.to_string_lossy()
            ));
        }
    }
    Status::Ok
}
