//! Counters for `INFO ratelimit`: per command, the requests allowed and denied and the error replies,
//! so an operator can graph denials and alert on a client stuck in a retry loop (see the seed's
//! "Observability"). Relaxed atomics: two increments per call.

use super::error::RlError;
use super::reply::Reply;
use redis_module::{raw, Context, Status};
use std::ffi::CString;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub struct CommandStats {
    /// The field prefix in INFO: `token` gives `token_allowed`, `token_denied`, `token_errors`.
    name: &'static str,
    allowed: AtomicU64,
    denied: AtomicU64,
    errors: AtomicU64,
}

impl CommandStats {
    const fn new(name: &'static str) -> CommandStats {
        CommandStats {
            name,
            allowed: AtomicU64::new(0),
            denied: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }

    pub fn record(&self, outcome: &Result<Reply, RlError>) {
        let counter = match outcome {
            Ok(Reply::Limit { verdict, .. }) if verdict.allowed => &self.allowed,
            Ok(Reply::Limit { .. }) => &self.denied,
            Err(_) => &self.errors,
        };
        counter.fetch_add(1, Relaxed);
    }
}

pub static TOKEN: CommandStats = CommandStats::new("token");
pub static FIXED: CommandStats = CommandStats::new("fixed");
pub static SLIDE: CommandStats = CommandStats::new("slide");
pub static SLIDECOUNT: CommandStats = CommandStats::new("slidecount");
pub static REFUND: CommandStats = CommandStats::new("refund");
static ALL: [&CommandStats; 5] = [&TOKEN, &FIXED, &SLIDE, &SLIDECOUNT, &REFUND];

/// The INFO callback: section `ratelimit_stats`.
extern "C" fn info(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    // SAFETY: the server's info context, used only during this call; strings outlive each call.
    unsafe {
        let (Some(section), Some(field)) =
            (raw::RedisModule_InfoAddSection, raw::RedisModule_InfoAddFieldULongLong)
        else {
            return;
        };
        section(ctx, c"stats".as_ptr());
        for stats in ALL {
            for (what, counter) in
                [("allowed", &stats.allowed), ("denied", &stats.denied), ("errors", &stats.errors)]
            {
                if let Ok(name) = CString::new(format!("{}_{what}", stats.name)) {
                    field(ctx, name.as_ptr(), counter.load(Relaxed));
                }
            }
        }
    }
}

pub fn register(ctx: &Context) -> Status {
    // SAFETY: called from OnLoad with the server's context.
    match unsafe { raw::RedisModule_RegisterInfoFunc } {
        Some(register) if unsafe { register(ctx.ctx, Some(info)) } == raw::REDISMODULE_OK as c_int => {
            Status::Ok
        }
        _ => Status::Err,
    }
}
