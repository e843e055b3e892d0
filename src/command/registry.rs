//! Registering commands and dispatching the server's calls to them, without per-call copies of the
//! arguments: each call sees the server's argv directly, and replies go straight to the server.

use super::arg::Arg;
use super::clock;
use super::error::RlError;
use super::observe;
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
    /// Where its keys are, for the server (COMMAND GETKEYS, Cluster routing) and for counting.
    const KEYS: KeySpec = KeySpec::NONE;
    /// Whether its outcomes count in the key classes and RL.TOP (the limiters).
    const COUNTED: bool = false;

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
    if C::COUNTED {
        let record = || observe::record(args, &C::KEYS, &result, || clock::last_ns() / 1_000_000);
        // Statistics never fail a command.
        let _ = catch_unwind(AssertUnwindSafe(record));
    }
    match result {
        Ok(reply) => reply.send(&context),
        Err(err) => err.send(&context),
    }
    raw::REDISMODULE_OK as c_int
}

/// Where a command's keys are, counting the command name as argument 0: the first, the last (-1: the
/// last argument) and the step between them.
pub struct KeySpec {
    pub first: c_int,
    pub last: c_int,
    pub step: c_int,
}

impl KeySpec {
    /// No keys.
    pub const NONE: KeySpec = KeySpec { first: 0, last: 0, step: 0 };
    /// One key, the first argument.
    pub const FIRST: KeySpec = KeySpec { first: 1, last: 1, step: 1 };
    /// One key, after a subcommand.
    pub const SECOND: KeySpec = KeySpec { first: 2, last: 2, step: 1 };
    /// Keys at 1, 5, 9, ...: one per `key capacity rate cost` group.
    pub const GROUPS_OF_FOUR: KeySpec = KeySpec { first: 1, last: -1, step: 4 };

    /// The `position`-th key among `args` (the arguments after the command name), if there is one.
    pub fn key<'a>(&self, args: &'a [Arg], position: usize) -> Option<&'a Arg> {
        let (first, step) =
            (usize::try_from(self.first).ok()?.checked_sub(1)?, usize::try_from(self.step).ok()?);
        let index = first.checked_add(position.checked_mul(step)?)?;
        let within = match usize::try_from(self.last) {
            Ok(last) => index < last,
            Err(_) => true, // -1: up to the last argument
        };
        if step == 0 && position > 0 || !within {
            return None;
        }
        args.get(index)
    }
}

/// Registers `C` as `name` with the given flags and its keys (`C::KEYS`), in ACL category `acl` when
/// there is one (see `acl::add_category`); a command that cannot join it is registered without it,
/// with a log line.
pub fn register<C: Command>(ctx: &Context, name: &CStr, flags: &CStr, acl: Option<&CStr>) -> Status {
    let keys = C::KEYS;
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
