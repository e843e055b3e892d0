//! RL.RESETSTATS: zeroes the counters of INFO ratelimit and empties RL.TOP, like CONFIG RESETSTAT.

use crate::server::{observed, Acl, Arg, Command, Reply, RlError, Spec, Value};
use redis_module::Context;

pub struct ResetStats;

impl Command for ResetStats {
    const SPEC: Spec = Spec::other(c"rl.resetstats", c"admin", Acl::Admin);

    fn run(_ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        if !args.is_empty() {
            return Err(RlError::WrongArity);
        }
        observed::reset();
        Ok(Reply::Value(Value::Status("OK")))
    }
}
