//! Which dialects (other products' names for a limiter: CL.THROTTLE, RL.THROTTLE, GCRA) this load
//! registers. `ratelimit.dialects` lists them (`all`, the default; `none`; or names separated by
//! commas or spaces), fixed at load: commands can only be registered while the module loads, so the
//! config is immutable and CONFIG SET refuses it. A dialect whose name is taken is skipped with a log
//! line, and so is GCRA on a server that has core's own GCRA under any name (renamed with
//! `rename-command`, registering the original name would trip an assertion in the server).

use super::spec::{Origin, Spec};
use redis_module::configuration::ConfigurationContext;
use redis_module::{ConfigurationValue, Context, RedisError, RedisString, RedisValue};
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::Mutex;

/// The dialects there are, by command name; bit `i` of the config is `NAMES[i]`.
pub const NAMES: [&str; 3] = ["cl.throttle", "rl.throttle", "gcra"];
const ALL: u8 = (1 << NAMES.len()) - 1;

/// `ratelimit.dialects`: a bit per entry of `NAMES`.
pub static DIALECTS: Dialects = Dialects(AtomicU8::new(ALL));

pub struct Dialects(AtomicU8);

/// A value the config refused at load (module arguments are applied without their errors reaching
/// the load), which then fails the load.
static REFUSED: Mutex<Option<String>> = Mutex::new(None);

/// The set of dialects a config value names; an error naming what is wrong.
fn parse(value: &[u8]) -> Result<u8, String> {
    let text = String::from_utf8_lossy(value).to_ascii_lowercase();
    let mut set = 0;
    for word in text.split([',', ' ']).filter(|w| !w.is_empty()) {
        set |= match word {
            "all" => ALL,
            "none" => 0,
            name => match NAMES.iter().position(|n| *n == name) {
                Some(i) => 1 << i,
                None => {
                    return Err(format!(
                        "ratelimit.dialects: unknown dialect '{name}': use all, none, or any of {}",
                        NAMES.join(", ")
                    ))
                }
            },
        };
    }
    Ok(set)
}

fn render(set: u8) -> String {
    match set {
        ALL => "all".to_string(),
        0 => "none".to_string(),
        _ => NAMES
            .iter()
            .enumerate()
            .filter(|(i, _)| set & (1 << i) != 0)
            .map(|(_, n)| *n)
            .collect::<Vec<_>>()
            .join(","),
    }
}

impl ConfigurationValue<RedisString> for Dialects {
    fn get(&self, _ctx: &ConfigurationContext) -> RedisString {
        RedisString::create(None, render(self.0.load(Relaxed)).as_str())
    }

    fn set(&self, _ctx: &ConfigurationContext, value: RedisString) -> Result<(), RedisError> {
        let set = parse(value.as_slice()).inspect_err(|refused| {
            if let Ok(mut slot) = REFUSED.lock() {
                *slot = Some(refused.clone());
            }
        });
        self.0.store(set.clone().map_err(RedisError::String)?, Relaxed);
        Ok(())
    }
}

/// What this load does with the dialects, decided before anything registers.
pub struct Plan {
    listed: u8,
    /// A command of the server's own `@ratelimit` category (core's GCRA, under any name).
    builtin: Option<String>,
}

impl Plan {
    /// `ours`: the names this module registers (anything else in `@ratelimit` is someone else's).
    /// `category_existed`: the `@ratelimit` category was there before this module (a server with
    /// core's GCRA has one).
    /// An error when the config refused its value at load.
    pub fn new(ctx: &Context, ours: &[&Spec], category_existed: bool) -> Result<Plan, String> {
        if let Some(refused) = REFUSED.lock().ok().and_then(|mut slot| slot.take()) {
            return Err(refused);
        }
        let builtin = if category_existed { foreign_ratelimit_command(ctx, ours) } else { None };
        Ok(Plan { listed: DIALECTS.0.load(Relaxed), builtin })
    }

    /// Why `spec` is not registered, when it is a dialect that this load skips.
    pub fn skip_reason(&self, spec: &Spec) -> Option<String> {
        let name = spec.name.to_string_lossy();
        let listed = NAMES.iter().position(|n| *n == name).is_some_and(|i| self.listed & (1 << i) != 0);
        match spec.origin {
            Origin::Own => None,
            _ if !listed => Some(format!("{name} is not in ratelimit.dialects ({})", render(self.listed))),
            Origin::DialectUnlessBuiltIn => self.builtin.as_ref().map(|other| {
                format!("the server has a built-in rate limit command ('{other}' in @ratelimit): {name} is skipped")
            }),
            Origin::Dialect => None,
        }
    }
}

/// The first command in `@ratelimit` that is not one of `ours`, asked of the server.
fn foreign_ratelimit_command(ctx: &Context, ours: &[&Spec]) -> Option<String> {
    let Ok(RedisValue::Array(names)) = ctx.call("COMMAND", &["LIST", "FILTERBY", "ACLCAT", "ratelimit"][..])
    else {
        return None;
    };
    names.into_iter().find_map(|name| {
        let name = match name {
            RedisValue::SimpleString(s) | RedisValue::BulkString(s) => s,
            RedisValue::StringBuffer(b) => String::from_utf8_lossy(&b).into_owned(),
            _ => return None,
        };
        let ours = ours.iter().any(|spec| spec.name.to_string_lossy().eq_ignore_ascii_case(&name));
        (!ours).then_some(name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_values() {
        assert_eq!(parse(b"all"), Ok(ALL));
        assert_eq!(parse(b"none"), Ok(0));
        assert_eq!(parse(b"CL.THROTTLE, gcra"), Ok(0b101));
        assert_eq!(parse(b""), Ok(0));
        assert!(parse(b"cl.throttle,redis-cell").unwrap_err().contains("unknown dialect 'redis-cell'"));
        assert_eq!(render(0b101), "cl.throttle,gcra");
        assert_eq!(render(ALL), "all");
    }
}
