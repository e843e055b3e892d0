//! The reply every RL.* command gives: `[allowed, limit, remaining, retry_after_ms, reset_after_ms]`,
//! plus, for a call over several limiters, the 1-based position of the one the reply describes.

use crate::algo::time::ceil_ms;
use crate::algo::verdict::Verdict;
use redis_module::RedisValue;

pub fn limit_reply(verdict: &Verdict, limiting: Option<usize>) -> RedisValue {
    let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let mut fields = vec![
        RedisValue::Integer(i64::from(verdict.allowed)),
        RedisValue::Integer(clamp(verdict.limit)),
        RedisValue::Integer(clamp(verdict.remaining)),
        RedisValue::Integer(verdict.retry_after_ns.map_or(-1, ceil_ms)),
        RedisValue::Integer(ceil_ms(verdict.reset_after_ns)),
    ];
    if let Some(index) = limiting {
        fields.push(RedisValue::Integer(clamp(index as u64 + 1)));
    }
    RedisValue::Array(fields)
}
