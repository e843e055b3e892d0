//! RL.RENEW key lease id: the lease `id` holds on `key` now ends `lease` seconds from now. Replies 1
//! when it was still held, 0 when it is gone (the holder lost its slot and must stop or acquire again;
//! a renew never re-acquires by itself).

use super::acquire::{lease_id, lease_ns};
use super::parse::split;
use crate::server::{clock, Acl, Arg, Command, Keys, Reply, RlError, Spec, StateKey, Value, FAST_WRITE};
use ratelimit_core::leases::Leases;
use redis_module::Context;

pub struct Renew;

impl Command for Renew {
    const SPEC: Spec = Spec::other(c"rl.renew", FAST_WRITE, Acl::Write).with_keys(Keys::FIRST);

    fn run(ctx: &Context, args: &[Arg]) -> Result<Reply, RlError> {
        let ([key, lease, id], []) = split::<3>(args)? else { return Err(RlError::WrongArity) };
        let (lease, id) = (lease_ns(lease)?, lease_id(id)?);
        let now = clock::now_ns();
        let mut state = StateKey::open(ctx, key)?;
        let (renewed, write) = Leases::renew(state.read()?, now, id, lease)?;
        if let Some(write) = &write {
            state.apply(write)?;
        }
        Ok(Reply::Value(Value::Int(i64::from(renewed))))
    }
}
