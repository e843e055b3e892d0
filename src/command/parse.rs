//! Arguments as the commands receive them, parsed by core's grammar (`ratelimit_core::args`,
//! `ratelimit_core::kind`): the byte views of `Arg`s, the first `N` arguments, and the window
//! limiters' `key limit window [cost]`.

use crate::server::{Arg, RlError};
use ratelimit_core::args::cost;
use ratelimit_core::kind::Declare;

/// The first `N` arguments and the rest; the arity error when there are fewer.
pub fn split<const N: usize>(args: &[Arg]) -> Result<(&[Arg; N], &[Arg]), RlError> {
    args.split_first_chunk::<N>().ok_or(RlError::WrongArity)
}

/// Up to `N` arguments as byte slices (the rest empty), and how many there were; None when more.
#[inline]
pub fn bytes<const N: usize>(args: &[Arg]) -> Option<([&[u8]; N], usize)> {
    (args.len() <= N).then(|| prefix(args))
}

/// The first (up to) `N` arguments as byte slices (the rest empty), and how many there were.
#[inline]
pub fn prefix<const N: usize>(args: &[Arg]) -> ([&[u8]; N], usize) {
    let mut out: [&[u8]; N] = [&[]; N];
    for (b, a) in out.iter_mut().zip(args) {
        *b = a.bytes();
    }
    (out, args.len().min(N))
}

/// The arguments of the window-counting limiters: `key limit window [cost]`.
pub struct CountArgs<'a, L> {
    pub key: &'a Arg,
    pub limiter: L,
    pub cost: u64,
}

impl<'a, L: Declare> CountArgs<'a, L> {
    pub fn parse(args: &'a [Arg]) -> Result<CountArgs<'a, L>, RlError> {
        let ([key, limit, window], rest) = split::<3>(args)?;
        let cost = match rest {
            [] => 1,
            [units] => cost(units.bytes())?,
            _ => return Err(RlError::WrongArity),
        };
        Ok(CountArgs { key, limiter: L::parse([limit.bytes(), window.bytes()])?, cost })
    }
}
