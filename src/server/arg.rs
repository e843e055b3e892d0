//! A command argument as the server passes it, borrowed for the duration of the command.

use redis_module::{raw, Context};

/// One element of a command's argv. `repr(transparent)` so the server's argv array can be viewed as
/// a slice of these without copying or retaining anything.
#[repr(transparent)]
pub struct Arg(*mut raw::RedisModuleString);

impl Arg {
    /// Views the server's argv as arguments.
    ///
    /// # Safety
    /// `argv` must point to `argc` live strings that outlive the returned slice (true for the argv of
    /// the command being executed).
    pub unsafe fn slice<'a>(argv: *mut *mut raw::RedisModuleString, argc: usize) -> &'a [Arg] {
        if argv.is_null() || argc == 0 {
            return &[];
        }
        std::slice::from_raw_parts(argv.cast::<Arg>(), argc)
    }

    pub fn bytes(&self) -> &[u8] {
        let mut len = 0usize;
        // SAFETY: a live module string; the returned buffer lives as long as the string.
        unsafe {
            match raw::RedisModule_StringPtrLen {
                Some(ptr_len) => {
                    let ptr = ptr_len(self.0, &mut len);
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

    /// The argument as the server parses a double (`string2d`: what its own commands accept).
    pub fn double(&self) -> Option<f64> {
        let mut value = 0.0;
        // SAFETY: a live module string, and a valid out pointer.
        let status = unsafe { raw::RedisModule_StringToDouble.map(|f| f(self.0, &mut value)) };
        (status == Some(raw::REDISMODULE_OK as i32)).then_some(value)
    }

    /// The argument as the server parses a 64-bit integer (`string2ll`).
    pub fn long_long(&self) -> Option<i64> {
        let mut value: libc::c_longlong = 0;
        // SAFETY: as above.
        let status = unsafe { raw::RedisModule_StringToLongLong.map(|f| f(self.0, &mut value)) };
        (status == Some(raw::REDISMODULE_OK as i32)).then_some(value)
    }

    /// An argument that points nowhere, for tests of argument positions (its bytes are empty).
    #[cfg(test)]
    pub fn null() -> Arg {
        Arg(std::ptr::null_mut())
    }

    pub fn raw(&self) -> *mut raw::RedisModuleString {
        self.0
    }
}

/// A key name the module made from bytes it stored (a ledger's keys), freed when dropped.
pub struct OwnedArg {
    arg: Arg,
    ctx: *mut raw::RedisModuleCtx,
}

impl OwnedArg {
    pub fn new(ctx: &Context, bytes: &[u8]) -> OwnedArg {
        // SAFETY: the server copies the buffer into a new string, owned here and freed on drop.
        let raw = unsafe {
            raw::RedisModule_CreateString
                .map_or(std::ptr::null_mut(), |create| create(ctx.ctx, bytes.as_ptr().cast(), bytes.len()))
        };
        OwnedArg { arg: Arg(raw), ctx: ctx.ctx }
    }
}

impl std::ops::Deref for OwnedArg {
    type Target = Arg;
    fn deref(&self) -> &Arg {
        &self.arg
    }
}

impl Drop for OwnedArg {
    fn drop(&mut self) {
        // SAFETY: a string this value created and nothing else frees.
        unsafe {
            if let (false, Some(free)) = (self.arg.0.is_null(), raw::RedisModule_FreeString) {
                free(self.ctx, self.arg.0);
            }
        }
    }
}
