//! Registering a command by its declaration (`spec`), and dispatching the server's calls to it without per-call copies of the arguments: each call sees the server's argv directly,
//! and replies go straight to the server.

use super::arg::Arg;
use super::clock;
use super::error::RlError;
use super::reply::Reply;
use super::spec::{Command, Keys, Origin, Registration};
use crate::stats::Outcome;
use redis_module::{raw, Context, Status};
use std::ffi::CString;
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What a call came to, for statistics: computed once, recorded by the counters and the classes.
fn outcome(result: &Result<Reply, RlError>) -> Outcome {
    match result {
        Ok(Reply::Limit { verdict, .. } | Reply::Taken { verdict, .. } | Reply::Dialect { verdict, .. })
            if verdict.allowed =>
        {
            Outcome::Allowed
        }
        Ok(Reply::Limit { limiting, .. }) => Outcome::Denied { limiting: limiting.unwrap_or(0) },
        Ok(Reply::Taken { .. } | Reply::Dialect { .. }) => Outcome::Denied { limiting: 0 },
        Ok(Reply::Value(_)) => Outcome::Report,
        Err(_) => Outcome::Error,
    }
}

/// Answers the server's question "where are this call's keys" (getkeys-api): true when it was asked.
fn keys_position_request<C: Command>(ctx: *mut raw::RedisModuleCtx, args: &[Arg]) -> bool {
    let Keys::Function(_) = C::SPEC.keys else { return false };
    // SAFETY: API pointers set by RedisModule_Init; called with the command's own context.
    unsafe {
        let (Some(is_request), Some(key_at)) =
            (raw::RedisModule_IsKeysPositionRequest, raw::RedisModule_KeyAtPos)
        else {
            return false;
        };
        if is_request(ctx) == 0 {
            return false;
        }
        let mut position = 0;
        while let Some(index) = C::SPEC.keys.index(args, position) {
            // +1: the server counts the command name as argument 0.
            key_at(ctx, (index + 1) as c_int);
            position += 1;
        }
    }
    true
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
    if matches!(C::SPEC.keys, Keys::Function(_))
        && catch_unwind(AssertUnwindSafe(|| keys_position_request::<C>(ctx, args))).unwrap_or(true)
    {
        return raw::REDISMODULE_OK as c_int;
    }
    let result = catch_unwind(AssertUnwindSafe(|| C::run(&context, args)))
        .unwrap_or(Err(RlError::Internal("the command panicked; please report it")));
    let outcome = outcome(&result);
    if let Some(counters) = C::SPEC.stats {
        counters.record(outcome);
    }
    if C::SPEC.counted {
        let record = || {
            super::observed::record(
                outcome,
                |position| C::SPEC.keys.key(args, position),
                || clock::last_ns() / 1_000_000,
            )
        };
        // Statistics never fail a command.
        let _ = catch_unwind(AssertUnwindSafe(record));
    }
    match result {
        Ok(reply) => reply.send(&context),
        Err(err) => err.send(&context),
    }
    raw::REDISMODULE_OK as c_int
}

/// Registers `C` with its declaration, in its ACL categories when the server has module categories
/// (`categories`); a command that cannot join them is registered without, with a log line. A dialect
/// that `plan` skips, or whose name is taken, is skipped with a log line.
pub fn register<C: Command>(ctx: &Context, categories: bool, plan: &super::dialects::Plan) -> Registration {
    let spec = &C::SPEC;
    if let Some(reason) = plan.skip_reason(spec) {
        ctx.log_notice(&format!("dialect skipped: {reason}"));
        return Registration::Skipped;
    }
    match create::<C>(ctx, categories) {
        Status::Ok => Registration::Registered,
        Status::Err if spec.origin != Origin::Own => {
            ctx.log_warning(&format!(
                "dialect skipped: the name {} is taken (a built-in command, or another module such as \
                 redis-cell loaded first); the other commands load",
                spec.name.to_string_lossy()
            ));
            Registration::Skipped
        }
        Status::Err => {
            ctx.log_warning(&format!("cannot register command {}", spec.name.to_string_lossy()));
            Registration::Failed
        }
    }
}

fn create<C: Command>(ctx: &Context, categories: bool) -> Status {
    let spec = &C::SPEC;
    let (first, last, step) = spec.keys.positions();
    let flags = match spec.keys {
        Keys::Function(_) => CString::new(format!("{} getkeys-api", spec.flags.to_string_lossy())),
        _ => Ok(spec.flags.to_owned()),
    };
    let Ok(flags) = flags else { return Status::Err };
    let name = spec.name;
    // SAFETY: API pointers set by RedisModule_Init, called from OnLoad with the server's context.
    unsafe {
        let Some(create) = raw::RedisModule_CreateCommand else {
            return Status::Err;
        };
        let status = create(ctx.ctx, name.as_ptr(), Some(dispatch::<C>), flags.as_ptr(), first, last, step);
        if status != raw::REDISMODULE_OK as c_int {
            return Status::Err;
        }
        let acl = spec.acl.categories();
        let (true, Some(get), Some(set_acl)) =
            (categories, raw::RedisModule_GetCommand, raw::RedisModule_SetCommandACLCategories)
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
