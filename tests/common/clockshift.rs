//! A redis-server whose wall clock the test can step: tests/support/clockshift.c, preloaded.

use std::io::{Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
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
        // A server that never reads the wall clock through libc cannot be stepped this way; Valkey 9
        // reads it only now and then, so the probe gives it up to a second.
        shifted.write_offset(-3600);
        if !shifted.follows(-3600, Duration::from_secs(1)) {
            testkit::skip(
                "this server's clock does not follow the shim (it does not read the wall clock through libc)",
            );
            return None;
        }
        shifted.shift(0);
        Some(shifted)
    }

    /// Sets the server's wall clock to real time plus `seconds` (negative: behind), and returns once
    /// the server reads it: Valkey 9 reads the wall clock through libc only now and then (about one
    /// TIME in six still gave the old time right after a step), so a command sent at once could
    /// run on the clock before the step.
    pub fn shift(&self, seconds: i64) {
        self.write_offset(seconds);
        assert!(
            self.follows(seconds, Duration::from_secs(10)),
            "the server's clock did not follow a step to {seconds} s"
        );
    }

    /// Whether, within `bound`, the server's TIME comes within half a second of real time plus
    /// `seconds`.
    fn follows(&self, seconds: i64, bound: Duration) -> bool {
        let mut con = self.server.conn();
        let started = Instant::now();
        loop {
            let (secs, micros): (i64, i64) = testkit::redis::cmd("TIME").query(&mut con).unwrap();
            let real = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
            let off_us = secs * 1_000_000 + micros - (real.as_micros() as i64 + seconds * 1_000_000);
            if off_us.abs() < 500_000 {
                return true;
            }
            if started.elapsed() >= bound {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn write_offset(&self, seconds: i64) {
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
