//! The INFO callback: `INFO ratelimit` shows the per-command counters (section `ratelimit_stats`) and
//! the key classes (section `ratelimit_classes`) that `stats` keeps.

use redis_module::{raw, Context, Status};
use std::ffi::CString;
use std::os::raw::c_int;

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
        for counters in super::observed::registered_stats() {
            for (what, count) in counters.fields() {
                if let Ok(name) = CString::new(format!("{}_{what}", counters.name())) {
                    field(ctx, name.as_ptr(), count);
                }
            }
        }
        // One dict field per class: ratelimit_class_<n>:name=rl:login:ip,allowed=..,denied=..,errors=..
        let classes = super::observed::read(|o| o.classes.snapshot()).unwrap_or_default();
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
