//! Limiter state in plain Redis string keys: read, written in place, expired, replicated by effect.
//!
//! Each limiter key is a string that `GET`, `DUMP`, `TTL` and `DEBUG DIGEST` understand (no module data
//! type). A key is opened once per command for reading and writing. An update of the same length is
//! written in place (no delete and re-insert of the key), and the TTL is rewritten only when it would
//! otherwise end too early, with up to `slack` of extra life, so most updates touch one value.
//!
//! Replication: every write sends replicas and the AOF `SET key <bytes> PXAT <ms>` (when the expiry
//! moved) or `SET key <bytes> KEEPTTL` (when it did not): absolute value, absolute expiry, the same
//! result on any clock. The RL.* command itself is never replicated.

use super::arg::Arg;
use super::error::RlError;
use ratelimit_core::limiter::{Change, Expiry, Write};
use redis_module::{raw, Context};
use std::os::raw::{c_char, c_int};
use std::sync::atomic::{AtomicPtr, Ordering};

const SET: &[u8] = b"SET\0";
const PXAT: &[u8] = b"PXAT\0";
const KEEPTTL: &[u8] = b"KEEPTTL\0";
const SETRANGE: &[u8] = b"SETRANGE\0";
const PEXPIREAT: &[u8] = b"PEXPIREAT\0";

fn api<T>(f: Option<T>) -> Result<T, RlError> {
    f.ok_or(RlError::Internal("a module API the command needs is missing"))
}

/// One limiter key, open for reading and writing until dropped.
pub struct StateKey<'a> {
    ctx: &'a Context,
    name: &'a Arg,
    handle: *mut raw::RedisModuleKey,
    /// The key did not exist when opened, and nothing was written since.
    empty: bool,
}

impl Drop for StateKey<'_> {
    fn drop(&mut self) {
        // SAFETY: `handle` came from RedisModule_OpenKey and is closed exactly once, here.
        unsafe {
            if let (false, Some(close)) = (self.handle.is_null(), raw::RedisModule_CloseKey) {
                close(self.handle);
            }
        }
    }
}

impl<'a> StateKey<'a> {
    /// Opens `name` for reading and writing; WRONGTYPE when it holds anything but a string.
    pub fn open(ctx: &'a Context, name: &'a Arg) -> Result<StateKey<'a>, RlError> {
        Self::open_mode(ctx, name, (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int)
    }

    /// Opens `name` for reading only (read-only commands, replicas); never write through it. None
    /// when the key does not exist (the server gives no handle for a missing key in read mode).
    pub fn open_read(ctx: &'a Context, name: &'a Arg) -> Result<Option<StateKey<'a>>, RlError> {
        match Self::open_mode(ctx, name, raw::REDISMODULE_READ as c_int) {
            Err(RlError::Internal(_)) => Ok(None),
            other => other.map(Some),
        }
    }

    fn open_mode(ctx: &'a Context, name: &'a Arg, mode: c_int) -> Result<StateKey<'a>, RlError> {
        let open = api(unsafe { raw::RedisModule_OpenKey })?;
        // SAFETY: ctx and name are live for 'a; the handle is owned by the returned value.
        let mut key = StateKey { ctx, name, handle: unsafe { open(ctx.ctx, name.raw(), mode) }, empty: true };
        if key.handle.is_null() {
            return Err(RlError::Internal("cannot open the key"));
        }
        let key_type = api(unsafe { raw::RedisModule_KeyType })?;
        // SAFETY: a live key handle.
        match unsafe { key_type(key.handle) } as isize {
            raw::REDISMODULE_KEYTYPE_EMPTY => Ok(key),
            raw::REDISMODULE_KEYTYPE_STRING => {
                key.empty = false;
                Ok(key)
            }
            _ => Err(RlError::WrongType),
        }
    }

    /// The stored bytes, or None when the key does not exist.
    pub fn read(&self) -> Result<Option<&[u8]>, RlError> {
        if self.empty {
            return Ok(None);
        }
        let dma = api(unsafe { raw::RedisModule_StringDMA })?;
        let mut len = 0usize;
        // SAFETY: the pointer and length describe the value, which lives while the key is open and is
        // not written before the returned slice's borrow of self ends.
        unsafe {
            let ptr = dma(self.handle, &mut len, raw::REDISMODULE_READ as c_int);
            if ptr.is_null() {
                return Err(RlError::WrongType);
            }
            Ok(Some(std::slice::from_raw_parts(ptr.cast::<u8>(), len)))
        }
    }

    /// The key's absolute expiry in Unix ms, or None when it has none (or does not exist).
    pub fn expire_at_ms(&self) -> Result<Option<i64>, RlError> {
        let get = api(unsafe { raw::RedisModule_GetAbsExpire })?;
        // SAFETY: a live key handle.
        let at = unsafe { get(self.handle) };
        Ok((at >= 0).then_some(at))
    }

    /// Stores what a limiter asked for (see `ratelimit_core::limiter::Write`).
    pub fn apply(&mut self, write: &Write) -> Result<(), RlError> {
        match (&write.change, write.expiry) {
            (Change::Set(bytes), expiry @ Expiry::Derived { .. }) => {
                self.write_expiring(bytes.as_ref(), expiry)
            }
            (Change::Set(bytes), expiry) => self.write(bytes.as_ref(), expiry),
            (Change::Range { offset, bytes }, expiry) => self.write_at(*offset, bytes.as_ref(), expiry),
            (Change::Delete, _) => self.delete(),
        }
    }

    /// Removes the key (nothing left to remember); replicated as `DEL key`.
    fn delete(&mut self) -> Result<(), RlError> {
        if self.empty {
            return Ok(());
        }
        let delete = api(unsafe { raw::RedisModule_DeleteKey })?;
        // SAFETY: a live key handle opened for writing.
        if unsafe { delete(self.handle) } != raw::REDISMODULE_OK as c_int {
            return Err(RlError::Internal("cannot delete the key"));
        }
        self.empty = true;
        self.signal_modified();
        let replicate = api(unsafe { raw::RedisModule_Replicate })?;
        // SAFETY: "s" is a RedisModuleString, the key's name, live for the call.
        unsafe {
            replicate(self.ctx.ctx, cstr(b"DEL\0"), cstr(b"s\0"), self.name.raw());
        }
        Ok(())
    }

    /// The new absolute expiry when the current one does not satisfy `expiry`, else None.
    fn expiry_change(&self, expiry: Expiry) -> Result<Option<i64>, RlError> {
        let current = self.expire_at_ms()?;
        Ok(expiry.change(false, || current))
    }

    fn set_expire(&mut self, at_ms: i64) -> Result<(), RlError> {
        let set_expire = api(unsafe { raw::RedisModule_SetAbsExpire })?;
        // SAFETY: a live key handle opened for writing.
        if unsafe { set_expire(self.handle, at_ms) } != raw::REDISMODULE_OK as c_int {
            return Err(RlError::Internal("cannot set the expiry"));
        }
        Ok(())
    }

    /// Stores `value` with an expiry satisfying `expiry`, and replicates the effect as
    /// `SET key value PXAT ms` or `SET key value KEEPTTL`.
    ///
    /// A value of another length replaces the old one, which drops its expiry on this server; an expiry
    /// that still satisfies `expiry` is put back as it was and replicated as `KEEPTTL` (the replica's
    /// SET keeps its own, equal one), so a growing lease set or log moves its expiry no more often
    /// than one of constant size.
    fn write(&mut self, value: &[u8], expiry: Expiry) -> Result<(), RlError> {
        let current = if self.empty { None } else { self.expire_at_ms()? };
        let change = expiry.change(false, || current);
        let existing = self.length()?;
        let replaced = self.store_value(value, existing)?;
        if let (true, None, Some(at)) = (replaced, change, current) {
            self.set_expire(at)?;
        }
        self.finish_write(value, change)
    }

    /// Stores `value` with a derived expiry (see `Expiry::change`): the expiry is neither read nor
    /// written when the stored state says it need not be; replicated as `SET key value KEEPTTL` or
    /// `SET key value PXAT at_ms`.
    fn write_expiring(&mut self, value: &[u8], expiry: Expiry) -> Result<(), RlError> {
        // Decided before the value is written: an in-place write keeps the expiry, a new or replaced
        // value is set one without reading it. An expiry that cannot be read counts as none (set).
        let existing = self.length()?;
        let change = expiry.change(existing != Some(value.len()), || self.expire_at_ms().ok().flatten());
        self.store_value(value, existing)?;
        self.finish_write(value, change)
    }

    fn finish_write(&mut self, value: &[u8], change: Option<i64>) -> Result<(), RlError> {
        self.empty = false;
        self.signal_modified();
        if let Some(at) = change {
            self.set_expire(at)?;
        }
        self.replicate_set(value, change)
    }

    /// Replicates `SET key value KEEPTTL`, or `SET key value PXAT at` when the expiry moved to `at`.
    fn replicate_set(&self, value: &[u8], change: Option<i64>) -> Result<(), RlError> {
        let replicate = api(unsafe { raw::RedisModule_Replicate })?;
        let (name, ptr, len) = (self.name.raw(), value.as_ptr().cast::<c_char>(), value.len());
        // SAFETY: the formats match the arguments: "s" a RedisModuleString, "b" a buffer and its length,
        // "c" a NUL-terminated C string, "l" a long long.
        unsafe {
            match change {
                None => match kept(&KEEPTTL_STRING, KEEPTTL) {
                    k if k.is_null() => {
                        replicate(self.ctx.ctx, cstr(SET), cstr(b"sbc\0"), name, ptr, len, cstr(KEEPTTL))
                    }
                    k => replicate(self.ctx.ctx, cstr(SET), cstr(b"sbs\0"), name, ptr, len, k),
                },
                Some(at) => match kept(&PXAT_STRING, PXAT) {
                    p if p.is_null() => {
                        replicate(self.ctx.ctx, cstr(SET), cstr(b"sbcl\0"), name, ptr, len, cstr(PXAT), at)
                    }
                    p => replicate(self.ctx.ctx, cstr(SET), cstr(b"sbsl\0"), name, ptr, len, p, at),
                },
            };
        }
        Ok(())
    }

    /// Overwrites `bytes` at `offset` of the existing value, in place, with an expiry satisfying
    /// `expiry`; replicates `SETRANGE key offset bytes` (and `PEXPIREAT key ms` when the expiry moved).
    fn write_at(&mut self, offset: usize, bytes: &[u8], expiry: Expiry) -> Result<(), RlError> {
        self.overwrite(offset, bytes)?;
        self.signal_modified();
        let change = self.expiry_change(expiry)?;
        if let Some(at) = change {
            self.set_expire(at)?;
        }
        let replicate = api(unsafe { raw::RedisModule_Replicate })?;
        let name = self.name.raw();
        // SAFETY: as in `write`.
        unsafe {
            let (ptr, len) = (bytes.as_ptr().cast::<c_char>(), bytes.len());
            replicate(
                self.ctx.ctx,
                cstr(SETRANGE),
                cstr(b"slb\0"),
                name,
                offset as libc::c_longlong,
                ptr,
                len,
            );
            if let Some(at) = change {
                replicate(self.ctx.ctx, cstr(PEXPIREAT), cstr(b"sl\0"), name, at as libc::c_longlong);
            }
        }
        Ok(())
    }

    /// Tells the server the key changed (WATCH, client-side caching): only writes do, because the
    /// module loads with REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED (a denial or a peek must not
    /// abort a client's WATCH / MULTI, as any read would not).
    fn signal_modified(&self) {
        // SAFETY: the command's context and its key name, live for the call.
        unsafe {
            if let Some(signal) = raw::RedisModule_SignalModifiedKey {
                signal(self.ctx.ctx, self.name.raw());
            }
        }
    }

    /// The stored value's length, or None when the key does not exist.
    fn length(&self) -> Result<Option<usize>, RlError> {
        Ok(self.read()?.map(<[u8]>::len))
    }

    /// Writes the value in place when the `existing` length (`length()`) matches, else replaces it
    /// (dropping any TTL, which the caller then sets or puts back). True when it was replaced.
    fn store_value(&mut self, value: &[u8], existing: Option<usize>) -> Result<bool, RlError> {
        // SAFETY: a live key handle opened for writing.
        unsafe {
            match existing {
                Some(len) if len == value.len() => {}
                // A new key: a plain string of the exact size (RedisModule_StringTruncate makes one
                // that later in-place writes keep, where a created string would be an "embedded" one
                // that the first in-place write copies).
                None => {
                    let truncate = api(raw::RedisModule_StringTruncate)?;
                    if truncate(self.handle, value.len()) != raw::REDISMODULE_OK as c_int {
                        return Err(RlError::Internal("cannot create the key"));
                    }
                }
                // Another size (a sliding log that grows or shrinks): a new value of the exact size.
                Some(_) => {
                    let create = api(raw::RedisModule_CreateString)?;
                    let set = api(raw::RedisModule_StringSet)?;
                    let free = api(raw::RedisModule_FreeString)?;
                    let fresh = create(self.ctx.ctx, value.as_ptr().cast::<c_char>(), value.len());
                    let status = set(self.handle, fresh);
                    free(self.ctx.ctx, fresh);
                    if status != raw::REDISMODULE_OK as c_int {
                        return Err(RlError::Internal("cannot write the key"));
                    }
                    return Ok(true);
                }
            }
        }
        self.overwrite(0, value).map(|()| false)
    }

    /// Copies `bytes` into the value at `offset`, in place.
    fn overwrite(&mut self, offset: usize, bytes: &[u8]) -> Result<(), RlError> {
        let dma = api(unsafe { raw::RedisModule_StringDMA })?;
        let mut len = 0usize;
        // SAFETY: a live key handle opened for writing; the pointer is valid for `len` bytes until the
        // next operation on the key, and only written within that length.
        unsafe {
            let ptr = dma(self.handle, &mut len, raw::REDISMODULE_WRITE as c_int);
            if ptr.is_null() || offset.checked_add(bytes.len()).is_none_or(|end| end > len) {
                return Err(RlError::Internal("write outside the stored value"));
            }
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr.cast::<u8>().add(offset), bytes.len());
        }
        Ok(())
    }
}

/// A server string made once and kept for the module's life ("KEEPTTL", "PXAT"): replicated by
/// reference (format `s`) instead of being created for every write.
fn kept(cell: &AtomicPtr<raw::RedisModuleString>, text: &'static [u8]) -> *mut raw::RedisModuleString {
    let current = cell.load(Ordering::Relaxed);
    if !current.is_null() {
        return current;
    }
    // SAFETY: a string owned by no context (NULL), never freed; `text` is NUL-terminated.
    let created = unsafe {
        match raw::RedisModule_CreateString {
            Some(create) => create(std::ptr::null_mut(), cstr(text), text.len() - 1),
            None => std::ptr::null_mut(),
        }
    };
    cell.store(created, Ordering::Relaxed);
    created
}

static KEEPTTL_STRING: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());
static PXAT_STRING: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());

fn cstr(bytes: &'static [u8]) -> *const c_char {
    debug_assert_eq!(bytes.last(), Some(&0));
    bytes.as_ptr().cast::<c_char>()
}
