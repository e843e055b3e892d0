//! The start-up check: is the module loaded on the server the limiter talks to, which version, and
//! do its commands answer for this connection's user. Works for the least-privileged user that
//! docs/deployment.md recommends (`~rl:* +@ratelimit`), which cannot run `MODULE LIST`: the commands
//! prove the module, and the version is read only where the user may.

use crate::connection::is_configuration_fault;
use crate::engine::{library_hash, Backend, LIBRARY};
use crate::error::CallError;
use crate::limiter::Limiter;
use ratelimit_core::commands::VERSION_FUNCTION;
use redis::Value;
use std::fmt;

/// The key the check reads and peeks at (nothing is written): inside docs/deployment.md's `~rl:*`.
const VERIFY_KEY: &str = "rl:verify";

/// What [`Limiter::verify`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModuleInfo {
    /// The module's version from `MODULE LIST`; `None` when this user may not run it, or the module
    /// is not the engine.
    pub version: Option<ModuleVersion>,
    /// The commands that answered: `RL.INSPECT` (read-only) and `RL.TOKEN` (a peek, cost 0), as the
    /// engine takes them.
    pub commands: Vec<&'static str>,
    /// The engine the limiter uses: the module, or the Lua library through `FCALL` or `EVALSHA`.
    pub engine: Backend,
    /// Why: "the module answered", or e.g. "module not loaded; FCALL or FUNCTION LOAD refused to this
    /// user (NOPERM); using the Lua library through EVALSHA scripts".
    pub why: String,
    /// Through `FCALL`: the library the server had (its `rl_version`) and whether it is this client's
    /// now. `None` on the other engines (the module; EVALSHA scripts, named by their content).
    pub library: Option<LibraryInfo>,
}

/// The Lua library a server had loaded, as its `rl_version` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LibraryInfo {
    /// Its version and the hash of its source; `None` for a library older than `rl_version`.
    pub found: Option<(String, String)>,
    /// It was another than this client's and was replaced with this client's (`FUNCTION LOAD
    /// REPLACE`).
    pub replaced: bool,
    /// The server now has this client's library; false when it had another and this user may not
    /// replace it (the operator's runbook in docs/lua.md says how).
    pub current: bool,
}

/// A module version, `MAJOR.MINOR.PATCH` (`MODULE LIST` shows it as `MAJOR * 10000 + MINOR * 100 + PATCH`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ModuleVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl ModuleVersion {
    /// From the number `MODULE LIST` shows (`100` is 0.1.0).
    pub fn from_number(n: u32) -> ModuleVersion {
        ModuleVersion { major: n / 10_000, minor: n / 100 % 100, patch: n % 100 }
    }
}

impl fmt::Display for ModuleVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Why the start-up check failed. Its `Debug` is its sentence too, so `fn main() -> Result<(),
/// Box<dyn Error>>` that returns it prints what to fix, not the variant's fields.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    #[error("the ratelimit module is not loaded on this server ({command} is an unknown command): load it with --loadmodule /path/to/libredis_ratelimit.so, or let the limiter use the Lua library (Backend::Auto; see docs/lua.md)")]
    ModuleNotLoaded { command: &'static str },
    #[error("this Redis user may not run {command} ({detail}): grant it the module's commands, e.g. ACL SETUSER <user> ~rl:* +@ratelimit")]
    NoPermission { command: &'static str, detail: String },
    #[error("{command} answered {reply}, not what the ratelimit module answers")]
    UnexpectedReply { command: &'static str, reply: String },
    #[error("Redis could not be asked: {0}")]
    Unreachable(#[source] CallError),
}

impl fmt::Debug for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Limiter {
    /// The start-up check: the engine answers `RL.INSPECT` (read-only, on a key that need not exist)
    /// and `RL.TOKEN` (a peek, cost 0: writes nothing) for this connection's user; which engine it is
    /// and why (under [`Backend::Auto`], these calls choose it); and the module's version where the
    /// user may run `MODULE LIST`. Call it once when the application starts; an error says what to fix
    /// (no engine answers: module not loaded and the library refused; a missing ACL permission; Redis
    /// unreachable).
    pub async fn verify(&self) -> Result<ModuleInfo, VerifyError> {
        match self.query(&crate::command::inspect(VERIFY_KEY, None)).await {
            Ok(Value::Nil | Value::Array(_) | Value::Map(_)) => {}
            Ok(other) => return Err(unexpected("RL.INSPECT", &other)),
            Err(e) => return Err(classify("RL.INSPECT", e)),
        }
        let mut peek = redis::cmd("RL.TOKEN");
        peek.arg(VERIFY_KEY).arg(1).arg(1).arg(0);
        match self.query(&peek).await {
            Ok(Value::Array(fields)) if fields.len() >= 5 => {}
            Ok(other) => return Err(unexpected("RL.TOKEN", &other)),
            Err(e) => return Err(classify("RL.TOKEN", e)),
        }
        let (engine, why) = self.chosen_engine();
        let version = match engine {
            Backend::Module => self.module_version().await,
            _ => None,
        };
        let library = match engine {
            Backend::Functions => Some(self.library_version().await),
            _ => None,
        };
        Ok(ModuleInfo { version, commands: vec!["RL.INSPECT", "RL.TOKEN"], engine, why, library })
    }

    /// The library's `rl_version` on the server; another than this client's is replaced where this
    /// user may load functions.
    async fn library_version(&self) -> LibraryInfo {
        let ours = library_hash(LIBRARY);
        let found = match self.query(redis::cmd("FCALL_RO").arg(VERSION_FUNCTION).arg(0)).await {
            Ok(Value::Array(fields)) => match &fields[..] {
                [version, hash] => string(version.clone()).zip(string(hash.clone())),
                _ => None,
            },
            _ => None,
        };
        if found.as_ref().is_some_and(|(_, hash)| hash == ours) {
            return LibraryInfo { found, replaced: false, current: true };
        }
        let replaced =
            self.query(redis::cmd("FUNCTION").arg("LOAD").arg("REPLACE").arg(LIBRARY)).await.is_ok();
        LibraryInfo { found, replaced, current: replaced }
    }

    /// The `ver` of the `ratelimit` entry of `MODULE LIST`, if this user may read it.
    async fn module_version(&self) -> Option<ModuleVersion> {
        let Ok(Value::Array(modules)) = self.query(&redis::cmd("MODULE").arg("LIST").clone()).await else {
            return None;
        };
        modules.into_iter().find_map(|module| {
            let fields: Vec<(String, Value)> = match module {
                Value::Map(m) => m.into_iter().filter_map(|(k, v)| Some((string(k)?, v))).collect(),
                Value::Array(flat) => flat
                    .chunks(2)
                    .filter_map(|kv| match kv {
                        [k, v] => Some((string(k.clone())?, v.clone())),
                        _ => None,
                    })
                    .collect(),
                _ => return None,
            };
            let name = fields.iter().find(|(k, _)| k == "name").and_then(|(_, v)| string(v.clone()))?;
            let ver = fields.iter().find(|(k, _)| k == "ver").and_then(|(_, v)| match v {
                Value::Int(n) => u32::try_from(*n).ok(),
                _ => None,
            })?;
            (name == "ratelimit").then(|| ModuleVersion::from_number(ver))
        })
    }
}

fn string(v: Value) -> Option<String> {
    redis::from_redis_value(v).ok()
}

fn unexpected(command: &'static str, reply: &Value) -> VerifyError {
    VerifyError::UnexpectedReply { command, reply: format!("{reply:?}") }
}

fn classify(command: &'static str, e: CallError) -> VerifyError {
    match &e {
        CallError::Redis(r) if r.code() == Some("NOPERM") => {
            VerifyError::NoPermission { command, detail: r.detail().unwrap_or_default().to_string() }
        }
        CallError::Redis(r) if is_configuration_fault(r) => VerifyError::ModuleNotLoaded { command },
        _ => VerifyError::Unreachable(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_list_numbers_read_as_versions() {
        assert_eq!(ModuleVersion::from_number(100).to_string(), "0.1.0");
        assert_eq!(ModuleVersion::from_number(10203).to_string(), "1.2.3");
        assert_eq!(ModuleVersion::from_number(200).to_string(), "0.2.0");
    }

    #[test]
    fn an_error_returned_from_main_prints_its_sentence() {
        let err = VerifyError::ModuleNotLoaded { command: "RL.INSPECT" };
        assert_eq!(format!("{err:?}"), err.to_string());
        assert!(format!("{err:?}").contains("--loadmodule"), "{err:?}");
        let boxed: Box<dyn std::error::Error> = Box::new(err);
        assert_eq!(format!("{boxed:?}"), boxed.to_string(), "what main prints for Err(e)");
    }
}
