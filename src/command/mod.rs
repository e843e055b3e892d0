//! The commands: one file per RL.* command, each declaring its name, flags, ACL categories and keys
//! beside its body (see `server::Command`). A limiter command parses its arguments into a
//! `ratelimit_core` limiter and hands it to `limit`, which connects any limiter to a key.
#![deny(unsafe_code)]

mod limit;
mod memo;
mod parse;

/// Declares each command's module and makes `register_all!`, which registers them with the server
/// in this order (`src/lib.rs`): a new command is one line in the list below.
macro_rules! commands {
    ($($module:ident :: $command:ident),* $(,)?) => {
        $(pub mod $module;)*

        /// The module's entry point (`RedisModule_OnLoad`) registering every command listed (unused
        /// by the unit tests, which register nothing).
        #[cfg_attr(test, allow(unused_macros))]
        macro_rules! register_all {
            () => {
                $crate::server::module::module! { $($crate::command::$module::$command),* }
            };
        }
        #[cfg_attr(test, allow(unused_imports))]
        pub(crate) use register_all;
    };
}

commands! {
    token::Token,
    fixed::Fixed,
    slide::Slide,
    slide_count::SlideCount,
    refund::Refund,
    all::All,
    hold::Hold,
    settle::Settle,
    take::Take,
    reserve::ReserveTokens,
    acquire::AcquireLease,
    release::Release,
    renew::Renew,
    inspect::Inspect,
    top::Top,
    reset_stats::ResetStats,
    cl_throttle::ClThrottle,
    rl_throttle::RlThrottle,
    gcra::Gcra,
}
