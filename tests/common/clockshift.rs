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
        // A server that never reads the wall clock through libc cannot be stepped this way; Valkey 9
        // reads it only now and then, so the probe asks for up to a second.
        let mut con = shifted.server.conn();
        let before = server_time_us(&mut con);
        shifted.write_offset(-3600);
        let moved = (0..100).any(|_| {
            let moved = (before - 3_600_000_000 - server_time_us(&mut con)).abs() <= 2_000_000;
            if !moved {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            moved
        });
        if !moved {
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
        let mut con = self.server.conn();
        let started = std::time::Instant::now();
        loop {
            let server_us = server_time_us(&mut con);
            let real = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
            let want_us = real.as_micros() as i64 + seconds * 1_000_000;
            if (server_us - want_us).abs() < 500_000 {
                return;
            }
            assert!(
                started.elapsed().as_secs() < 10,
                "the server's clock did not follow a step to {seconds} s"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    fn write_offset(&self, seconds: i64) {
        // Rewritten in place, never truncated: the server maps the file.
        let mut f = std::fs::OpenOptions::new().write(true).open(&self.offset_file).expect("the offset file");
        f.seek(SeekFrom::Start(0)).unwrap();
        f.write_all(format!("{:<31}\n", seconds * 1_000_000).as_bytes()).unwrap();
    }
}

/// The server's TIME in microseconds.
fn server_time_us(con: &mut testkit::redis::Connection) -> i64 {
    let (secs, micros): (i64, i64) = testkit::redis::cmd("TIME").query(con).unwrap();
    secs * 1_000_000 + micros
}

impl Drop for ShiftedServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.offset_file);
    }
}
