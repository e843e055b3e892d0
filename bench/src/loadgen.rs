//! A small closed-loop load generator for requests that are several commands (MULTI ... EXEC), which
//! redis-benchmark cannot send: `clients` connections, each sending `pipeline` requests at a time and
//! waiting for all their replies. Latency is the round trip of a batch, counted for each request in it,
//! as redis-benchmark counts it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

pub struct Load {
    pub port: u16,
    pub clients: usize,
    pub requests: usize,
    pub pipeline: usize,
    /// Random keys from this many, or one hot key.
    pub keyspace: Option<u64>,
    /// Other placeholders and their values (script SHAs: `{sha:acquire}`).
    pub vars: Vec<(String, String)>,
}

pub struct Measured {
    pub rps: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Server time per call of the scenario's main command (INFO commandstats), NaN when unknown.
    pub us_per_call: f64,
}

/// One request: commands whose arguments may contain `{key}`, `{id}` (a fresh 36-character id per
/// request, UUID-shaped) and the load's `vars`.
pub type Request = &'static [&'static [&'static str]];

fn encode(out: &mut Vec<u8>, request: Request, key: &str, id: &str, vars: &[(String, String)]) {
    for command in request {
        out.extend_from_slice(format!("*{}\r\n", command.len()).as_bytes());
        for arg in *command {
            let mut arg = arg.replace("{key}", key).replace("{id}", id);
            for (name, value) in vars {
                arg = arg.replace(name.as_str(), value);
            }
            out.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
        }
    }
}

/// Where the RESP value starting at `pos` ends, if it is complete.
fn frame_end(buf: &[u8], pos: usize) -> Option<usize> {
    let line_end = pos + buf.get(pos..)?.windows(2).position(|w| w == b"\r\n")?;
    let header = std::str::from_utf8(&buf[pos + 1..line_end]).ok()?;
    let after = line_end + 2;
    match buf.get(pos)? {
        b'+' | b'-' | b':' => Some(after),
        b'$' => {
            let len: i64 = header.parse().ok()?;
            if len < 0 {
                return Some(after);
            }
            let end = after + len as usize + 2;
            (end <= buf.len()).then_some(end)
        }
        b'*' => {
            let count: i64 = header.parse().ok()?;
            (0..count.max(0)).try_fold(after, |at, _| frame_end(buf, at))
        }
        _ => None,
    }
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

impl Load {
    pub fn run(&self, request: Request) -> Measured {
        let per_client = self.requests / self.clients;
        let started = Instant::now();
        let latencies: Vec<Vec<u32>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..self.clients)
                .map(|c| scope.spawn(move || self.client(request, per_client, c as u64 + 1)))
                .collect();
            workers.into_iter().map(|w| w.join().expect("a load client failed")).collect()
        });
        let elapsed = started.elapsed().as_secs_f64();
        let mut all: Vec<u32> = latencies.into_iter().flatten().collect();
        all.sort_unstable();
        let pct = |p: f64| {
            all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1))).copied().unwrap_or(0)
        };
        Measured {
            rps: (per_client * self.clients) as f64 / elapsed,
            p50_ms: f64::from(pct(0.50)) / 1000.0,
            p99_ms: f64::from(pct(0.99)) / 1000.0,
            us_per_call: f64::NAN,
        }
    }

    /// One connection's loop; returns the latency of each request in microseconds.
    fn client(&self, request: Request, count: usize, seed: u64) -> Vec<u32> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("cannot connect");
        stream.set_nodelay(true).ok();
        let mut rng = XorShift(seed * 0x9E37_79B9_7F4A_7C15);
        let (mut out, mut inbuf) = (Vec::new(), Vec::with_capacity(1 << 16));
        let mut latencies = Vec::with_capacity(count);
        let mut chunk = vec![0u8; 1 << 16];
        let mut sent = 0;
        while sent < count {
            let batch = self.pipeline.min(count - sent);
            out.clear();
            for _ in 0..batch {
                let key = match self.keyspace {
                    Some(n) => format!("bench:{:012}", rng.next() % n),
                    None => "bench:hot".to_string(),
                };
                let (a, b) = (rng.next(), rng.next());
                let id = format!(
                    "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                    a >> 32,
                    (a >> 16) & 0xffff,
                    a & 0xffff,
                    b >> 48,
                    b & 0xffff_ffff_ffff
                );
                encode(&mut out, request, &key, &id, &self.vars);
            }
            let t0 = Instant::now();
            stream.write_all(&out).expect("write failed");
            let mut replies = 0;
            let (mut pos, expected) = (0, batch * request.len());
            inbuf.clear();
            while replies < expected {
                let n = stream.read(&mut chunk).expect("read failed");
                assert!(n > 0, "the server closed the connection");
                inbuf.extend_from_slice(&chunk[..n]);
                while let Some(end) = frame_end(&inbuf, pos) {
                    assert_ne!(
                        inbuf[pos],
                        b'-',
                        "error reply: {}",
                        String::from_utf8_lossy(&inbuf[pos..end])
                    );
                    pos = end;
                    replies += 1;
                }
            }
            let us = t0.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
            latencies.extend(std::iter::repeat_n(us, batch));
            sent += batch;
        }
        latencies
    }
}

#[cfg(test)]
mod tests {
    use super::frame_end;

    #[test]
    fn frames() {
        assert_eq!(frame_end(b"+OK\r\n", 0), Some(5));
        assert_eq!(frame_end(b"*2\r\n:1\r\n$2\r\nab\r\n", 0), Some(16));
        assert_eq!(frame_end(b"*2\r\n:1\r\n$2\r\nab", 0), None);
        assert_eq!(frame_end(b"$-1\r\n", 0), Some(5));
    }
}
