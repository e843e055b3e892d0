//! What commands reply. Every RL.* limiter replies `[allowed, limit, remaining, retry_after_ms,
//! reset_after_ms]`, plus, for a call over several limiters, the 1-based position of the one the reply
//! describes.

use ratelimit_core::time::ceil_ms;
use ratelimit_core::verdict::Verdict;
use redis_module::{raw, Context};
use std::os::raw::c_long;

pub enum Reply {
    Limit { verdict: Verdict, limiting: Option<usize> },
}

fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Reply {
    pub fn send(self, ctx: &Context) {
        // SAFETY: reply functions of the server, called with the command's own context.
        unsafe {
            let (Some(array), Some(int)) =
                (raw::RedisModule_ReplyWithArray, raw::RedisModule_ReplyWithLongLong)
            else {
                return;
            };
            match self {
                Reply::Limit { verdict, limiting } => {
                    array(ctx.ctx, if limiting.is_some() { 6 } else { 5 } as c_long);
                    int(ctx.ctx, i64::from(verdict.allowed));
                    int(ctx.ctx, clamp(verdict.limit));
                    int(ctx.ctx, clamp(verdict.remaining));
                    int(ctx.ctx, verdict.retry_after_ns.map_or(-1, ceil_ms));
                    int(ctx.ctx, ceil_ms(verdict.reset_after_ns));
                    if let Some(index) = limiting {
                        int(ctx.ctx, clamp(index as u64 + 1));
                    }
                }
            }
        }
    }
}
