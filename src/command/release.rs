//! RL.RELEASE key id: frees the lease `id` holds on `key`. Replies 1 when it released one, 0 when `id`
//! held none (released already, expired, never acquired): idempotent, and only the id that holds a
//! lease can release it. The last release deletes the key.

use super::acquire::lease_id;
use super::parse::split;
use crate::server::{clock, Acl, Arg, Command, Keys, Reply, RlError, Spec, StateKey, Value, FAST_WRITE};
use ratelimit_core::leases::Leases;
use redis_module::Context;

pub struct Release;

impl Command for Release {
    const SPEC: Spec = Spec::other(c"rl.release", FAST_WRITE, Acl::Write).with_keys(Keys::FIRST);

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        let ([key, id], []) = split::<2>(args)? else { return Err(RlError::WrongArity) };
        let id = lease_id(id)?;
        let now = clock::now_ns();
        let mut state = StateKey::open(ctx, key)?;
        let (released, write) = Leases::release(state.read()?, now, id)?;
        if let Some(write) = &write {
            state.apply(write)?;
        }
        Ok(Reply::Value(Value::Int(i64::from(released))))
    }
}
