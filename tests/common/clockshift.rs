//! A redis-server whose wall clock the test can step: tests/support/clockshift.c, preloaded.

use std::io::{Seek, SeekFrom, Write};
use std::path::PathBuf;
use testkit::Server;

/// A server with a steppable clock; None (with a message) when one cannot be had.
pub struct ShiftedServer {
    pub server: Server,
    offset_file: PathBuf,
}

impl ShiftedServer {
    pub fn start() -> Option<ShiftedServer> {
        if testkit::skip_when_external() {
            return None;
        }
        let shim = super::shim::build("clockshift")?;
        let offset_file = std::env::temp_dir().join(format!(
            "rl-clock-{}-{}",
            std::process::id(),
            testkit::unique_key("c").replace(':', "-")
        ));
        std::fs::write(&offset_file, format!("{:<31}\n", 0)).ok()?;
        let env = [("LD_PRELOAD", shim.to_str()?), ("CLOCKSHIFT_FILE", offset_file.to_str()?)];
        let shifted = ShiftedServer { server: Server::builder().envs(&env).start(), offset_file };
        // Some servers do not read the wall clock through libc on every call (Valkey 9 derives it from
        // the monotonic clock): their clock cannot be stepped this way.
        let mut con = shifted.server.conn();
        let time = |con: &mut testkit::redis::Connection| {
            testkit::redis::cmd("TIME").query::<(i64, i64)>(con).map(|(s, _)| s).unwrap_or(0)
        };
        let before = time(&mut con);
        shifted.shift(-3600);
        let moved = (before - 3600 - time(&mut con)).abs() <= 2;
        shifted.shift(0);
        if !moved {
            testkit::skip(
                "this server's clock does not follow the shim (it does not read the wall clock through libc)",
            );
            return None;
        }
        Some(shifted)
    }

    /// Sets the server's wall clock to real time plus `seconds` (negative: behind).
    pub fn shift(&self, seconds: i64) {
        // Rewritten in place, never truncated: the server maps the file.
        let mut f = std::fs::OpenOptions::new().write(true).open(&self.offset_file).expect("the offset file");
        f.seek(SeekFrom::Start(0)).unwrap();
        f.write_all(format!("{:<31}\n", seconds * 1_000_000).as_bytes()).unwrap();
    }
}

impl Drop for ShiftedServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.offset_file);
    }
}
