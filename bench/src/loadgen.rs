//! A small closed-loop load generator for requests that are several commands (MULTI ... EXEC), which
//! redis-benchmark cannot send: `clients` connections, each sending `pipeline` requests at a time and
//! waiting for all their replies. Latency is the round trip of a batch, counted for each request in it,
//! as redis-benchmark counts it. Like redis-benchmark, every connection runs on one thread's event
//! loop, so the generator takes one core at most and leaves the other to the server.

use std::fmt::Write as _;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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

/// An argument with its `vars` filled in, and whether it is the key or the id.
enum Part {
    Fixed(Vec<u8>),
    Key,
    Id,
}

/// The request's commands as RESP pieces, the vars filled in once.
fn template(request: Request, vars: &[(String, String)]) -> Vec<(usize, Vec<Part>)> {
    request
        .iter()
        .map(|command| {
            let parts = command
                .iter()
                .map(|arg| match *arg {
                    "{key}" => Part::Key,
                    "{id}" => Part::Id,
                    _ => {
                        let mut arg = arg.to_string();
                        for (name, value) in vars {
                            arg = arg.replace(name.as_str(), value);
                        }
                        Part::Fixed(arg.into_bytes())
                    }
                })
                .collect();
            (command.len(), parts)
        })
        .collect()
}

fn encode(out: &mut Vec<u8>, template: &[(usize, Vec<Part>)], key: &[u8], id: &[u8]) {
    let bulk = |out: &mut Vec<u8>, arg: &[u8]| {
        out.push(b'$');
        out.extend_from_slice(arg.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    };
    for (len, parts) in template {
        out.push(b'*');
        out.extend_from_slice(len.to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        for part in parts {
            match part {
                Part::Fixed(arg) => bulk(out, arg),
                Part::Key => bulk(out, key),
                Part::Id => bulk(out, id),
            }
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
        let template = template(request, &self.vars);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build().expect("no runtime");
        let started = Instant::now();
        let latencies: Vec<Vec<u32>> = runtime.block_on(async {
            let clients = (0..self.clients).map(|c| self.client(&template, per_client, c as u64 + 1));
            futures_util::future::join_all(clients).await
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
    async fn client(&self, template: &[(usize, Vec<Part>)], count: usize, seed: u64) -> Vec<u32> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).await.expect("cannot connect");
        stream.set_nodelay(true).ok();
        let mut rng = XorShift(seed * 0x9E37_79B9_7F4A_7C15);
        let (mut out, mut inbuf) = (Vec::new(), Vec::with_capacity(1 << 16));
        let mut latencies = Vec::with_capacity(count);
        let mut chunk = vec![0u8; 1 << 16];
        let (mut key, mut id) = (String::new(), String::new());
        let mut sent = 0;
        while sent < count {
            let batch = self.pipeline.min(count - sent);
            out.clear();
            for _ in 0..batch {
                key.clear();
                match self.keyspace {
                    Some(n) => write!(key, "bench:{:012}", rng.next() % n),
                    None => write!(key, "bench:hot"),
                }
                .ok();
                let (a, b) = (rng.next(), rng.next());
                id.clear();
                write!(
                    id,
                    "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                    a >> 32,
                    (a >> 16) & 0xffff,
                    a & 0xffff,
                    b >> 48,
                    b & 0xffff_ffff_ffff
                )
                .ok();
                encode(&mut out, template, key.as_bytes(), id.as_bytes());
            }
            let t0 = Instant::now();
            stream.write_all(&out).await.expect("write failed");
            let mut replies = 0;
            let (mut pos, expected) = (0, batch * template.len());
            inbuf.clear();
            while replies < expected {
                let n = stream.read(&mut chunk).await.expect("read failed");
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
