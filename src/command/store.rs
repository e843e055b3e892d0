//! Reading and writing limiter state through the server's own string commands.
//!
//! State lives in plain string keys that `GET`, `TTL` and `DEBUG DIGEST` understand. Writes go
//! through `SET key value PXAT ms` called with replication on: the value and the expiry are absolute,
//! so the command that reaches replicas and the AOF reproduces the primary's key exactly, whatever
//! their clocks say. `SET` also stores integers in Redis' compact integer encoding, which the module
//! key API (`RedisModule_StringSet`) would not.

use super::error::RlError;
use redis_module::{raw, Context, RedisString};
use std::ffi::CStr;
use std::os::raw::c_char;

/// A call reply, freed when dropped.
struct Reply(*mut raw::RedisModuleCallReply);

impl Drop for Reply {
    fn drop(&mut self) {
        if self.0.is_null() {
            return;
        }
        // SAFETY: a non-null reply from RedisModule_Call, freed exactly once.
        unsafe {
            if let Some(free) = raw::RedisModule_FreeCallReply {
                free(self.0);
            }
        }
    }
}

impl Reply {
    fn kind(&self) -> i32 {
        // SAFETY: self.0 is a live reply (checked non-null by the caller).
        unsafe { raw::RedisModule_CallReplyType.map_or(-1, |f| f(self.0)) }
    }

    fn bytes(&self) -> &[u8] {
        let mut len = 0usize;
        // SAFETY: the pointer and length describe the reply's own buffer, alive as long as self.
        unsafe {
            match raw::RedisModule_CallReplyStringPtr {
                Some(f) => {
                    let ptr = f(self.0, &mut len);
                    if ptr.is_null() {
                        &[]
                    } else {
                        std::slice::from_raw_parts(ptr.cast::<u8>(), len)
                    }
                }
                None => &[],
            }
        }
    }

    /// The reply as an error, when it is one.
    fn error(&self) -> Option<RlError> {
        if self.kind() != raw::REDISMODULE_REPLY_ERROR as i32 {
            return None;
        }
        let message = String::from_utf8_lossy(self.bytes()).into_owned();
        Some(if message.starts_with("WRONGTYPE") {
            RlError::WrongType
        } else {
            RlError::Server(message)
        })
    }
}

fn call_fn() -> Result<
    unsafe extern "C" fn(
        *mut raw::RedisModuleCtx,
        *const c_char,
        *const c_char,
        ...
    ) -> *mut raw::RedisModuleCallReply,
    RlError,
> {
    // SAFETY: reading a function pointer set once by RedisModule_Init.
    unsafe { raw::RedisModule_Call.ok_or(RlError::Internal("RedisModule_Call is missing")) }
}

const GET: &CStr = c"GET";
const SET: &CStr = c"SET";
const PXAT: &CStr = c"PXAT";

/// The raw bytes stored at `key`, or None when there is no such key. WRONGTYPE for other types.
pub fn read_string(ctx: &Context, key: &RedisString) -> Result<Option<Vec<u8>>, RlError> {
    let call = call_fn()?;
    // SAFETY: "s" takes one RedisModuleString, which `key` is for the duration of the call.
    let reply = Reply(unsafe { call(ctx.ctx, GET.as_ptr(), c"s".as_ptr(), key.inner) });
    if reply.0.is_null() {
        return Err(RlError::Internal("GET failed"));
    }
    if let Some(err) = reply.error() {
        return Err(err);
    }
    if reply.kind() == raw::REDISMODULE_REPLY_NULL as i32 {
        return Ok(None);
    }
    Ok(Some(reply.bytes().to_vec()))
}

/// The integer stored at `key`, or None when there is no such key.
pub fn read_int(ctx: &Context, key: &RedisString) -> Result<Option<i64>, RlError> {
    match read_string(ctx, key)? {
        None => Ok(None),
        Some(bytes) => std::str::from_utf8(&bytes)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .map(Some)
            .ok_or(RlError::BadState),
    }
}

/// `SET key value PXAT expire_at_ms`, replicated as is.
pub fn write_int(ctx: &Context, key: &RedisString, value: i64, expire_at_ms: i64) -> Result<(), RlError> {
    let call = call_fn()?;
    // SAFETY: the format "!slcl" matches the arguments: a RedisModuleString, a long long, a C string
    // and a long long; "!" replicates the call to replicas and the AOF.
    let reply = Reply(unsafe {
        call(
            ctx.ctx,
            SET.as_ptr(),
            c"!slcl".as_ptr(),
            key.inner,
            value as libc::c_longlong,
            PXAT.as_ptr(),
            expire_at_ms as libc::c_longlong,
        )
    });
    if reply.0.is_null() {
        return Err(RlError::Internal("SET failed"));
    }
    reply.error().map_or(Ok(()), Err)
}
