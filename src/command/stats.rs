//! `INFO ratelimit`: per command, the requests allowed and denied and the error replies (section
//! `ratelimit_stats`), and per key class (section `ratelimit_classes`, see `classes`), so an operator
//! can graph denials and alert on a client stuck in a retry loop (see the seed's "Observability").
//! Per-command counters are relaxed atomics: one increment per call. All are per server process.

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
            Ok(Reply::Value(_)) => return,
            Err(_) => &self.errors,
        };
        counter.fetch_add(1, Relaxed);
    }

    fn reset(&self) {
        for counter in [&self.allowed, &self.denied, &self.errors] {
            counter.store(0, Relaxed);
        }
    }
}

/// Zeroes every counter and forgets the heavy hitters (RL.RESETSTATS).
pub fn reset() {
    ALL.iter().for_each(|s| s.reset());
    super::observe::reset();
}

/// A class name as an INFO value: characters that INFO's `key=value,...` format uses are replaced.
fn info_safe(name: &[u8]) -> String {
    name.iter()
        .map(|&b| match b {
            b',' | b'=' => '_',
            b if b.is_ascii_graphic() => b as char,
            _ => '_',
        })
        .collect()
}

pub static TOKEN: CommandStats = CommandStats::new("token");
pub static FIXED: CommandStats = CommandStats::new("fixed");
pub static SLIDE: CommandStats = CommandStats::new("slide");
pub static SLIDECOUNT: CommandStats = CommandStats::new("slidecount");
pub static REFUND: CommandStats = CommandStats::new("refund");
static ALL: [&CommandStats; 5] = [&TOKEN, &FIXED, &SLIDE, &SLIDECOUNT, &REFUND];

/// The INFO callback: sections `ratelimit_stats` and `ratelimit_classes`.
extern "C" fn info(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    // SAFETY: the server's info context, used only during this call; strings outlive each call.
    unsafe {
        let (Some(section), Some(field), Some(dict), Some(end_dict), Some(text)) = (
            raw::RedisModule_InfoAddSection,
            raw::RedisModule_InfoAddFieldULongLong,
            raw::RedisModule_InfoBeginDictField,
            raw::RedisModule_InfoEndDictField,
            raw::RedisModule_InfoAddFieldCString,
        ) else {
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
        // One dict field per class: ratelimit_class_<n>:name=rl:login:ip,allowed=..,denied=..,errors=..
        let classes = super::observe::read(|o| o.classes.snapshot()).unwrap_or_default();
        section(ctx, c"classes".as_ptr());
        for (i, (class, outcomes)) in classes.iter().enumerate() {
            let (Ok(name), Ok(class)) = (CString::new(format!("class_{i}")), CString::new(info_safe(class)))
            else {
                continue;
            };
            dict(ctx, name.as_ptr());
            text(ctx, c"name".as_ptr(), class.as_ptr());
            field(ctx, c"allowed".as_ptr(), outcomes.allowed);
            field(ctx, c"denied".as_ptr(), outcomes.denied);
            field(ctx, c"errors".as_ptr(), outcomes.errors);
            end_dict(ctx);
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
