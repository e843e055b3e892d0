// Starting a redis-server for a test, by testkit's rule (testkit/src/lib.rs): on a free loopback port,
// ready when INFO shows this child's own process_id (not another server that took the port first) and
// `loading:0` (INFO is answered while an AOF or RDB loads; a sentinel has no loading field: its
// process_id is enough), and a start whose port another process took before the server bound it retried
// on another port. Plain JavaScript, so the test files (test/servers.ts) and the peer suites
// (peer/peer-run.mjs, run by node without a TypeScript loader) share this one copy; the types are in
// redis-start.d.mts.
import { spawn } from "node:child_process";
import { closeSync, openSync, readFileSync } from "node:fs";
import { createServer, connect } from "node:net";

/** A port free on loopback now. */
export function freePort() {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const port = s.address().port;
      s.close(() => ok(port));
    });
  });
}

/** Whether `port` can be bound on loopback now. */
function bindable(port) {
  return new Promise((ok) => {
    const s = createServer();
    s.once("error", () => ok(false));
    s.listen(port, "127.0.0.1", () => s.close(() => ok(true)));
  });
}

/** A free port whose cluster bus port (10,000 higher, at most 65535) is free too (testkit's rule). */
export async function freeClusterPort() {
  for (;;) {
    const port = await freePort();
    if (port <= 55535 && (await bindable(port + 10000))) return port;
  }
}

/** The INFO text of the server on `port`, or undefined when it does not answer within `timeoutMs`. */
export function info(port, timeoutMs = 1000) {
  return new Promise((ok) => {
    const sock = connect(port, "127.0.0.1");
    let got = Buffer.alloc(0);
    const done = (text) => (clearTimeout(t), sock.destroy(), ok(text));
    const t = setTimeout(() => done(undefined), timeoutMs);
    sock.once("error", () => done(undefined));
    sock.once("connect", () => sock.write("INFO\r\n"));
    sock.on("data", (d) => {
      got = Buffer.concat([got, d]);
      const head = got.indexOf("\r\n");
      if (head < 0) return;
      if (got[0] !== 0x24) return done(undefined); // an error reply (-LOADING in old servers, -NOAUTH)
      const len = Number(got.subarray(1, head).toString());
      if (got.length >= head + 2 + len) done(got.subarray(head + 2, head + 2 + len).toString());
    });
  });
}

/** testkit's rule: the server on `port` is the process `pid` (INFO's process_id) and has loaded its
 * data (`loading:0`; a sentinel: its process_id alone). */
export async function ready(port, pid) {
  const text = await info(port);
  if (!text || pid === undefined) return false;
  const lines = new Set(text.split("\r\n").map((l) => l.trim()));
  return lines.has(`process_id:${pid}`) && (lines.has("loading:0") || lines.has("redis_mode:sentinel"));
}

/** A server that exited before it was ready, with its log. */
export class NotStarted extends Error {
  constructor(port, log) {
    super(`redis-server on port ${port} exited before it answered; its log:\n${log}`);
    this.log = log;
  }
}

/** Spawns `binary` with `args` (serving `port`), its stdout and stderr appended to `logFile`, and
 * resolves with the child once it is ready by testkit's rule; rejects with `NotStarted` (its log) when
 * it exits first, or an Error after `timeoutMs`. `spawned(child)` is called at once, so a caller can
 * kill a child that never becomes ready. */
export async function spawnReady(binary, args, port, logFile, { spawned, timeoutMs = 20_000 } = {}) {
  const log = openSync(logFile, "a");
  const proc = spawn(binary, args, { stdio: ["ignore", log, log] });
  closeSync(log);
  let exited = false;
  proc.once("exit", () => void (exited = true));
  spawned?.(proc);
  const end = Date.now() + timeoutMs;
  while (!(await ready(port, proc.pid))) {
    if (exited) throw new NotStarted(port, readFileSync(logFile, "utf8"));
    if (Date.now() > end) throw new Error(`redis-server on ${port} did not start; see ${logFile}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  return proc;
}

/** `start(port)` on a free port (`cluster`: its bus port free too; `port`: the first attempt's), again
 * on another port when another process took the port first (`NotStarted` whose log says the address is
 * already in use), at most 5 attempts. `start` cleans up after itself when it throws. */
export async function onFreePort(start, { cluster = false, port: first } = {}) {
  for (let attempt = 1; ; attempt++) {
    const port = attempt === 1 && first ? first : cluster ? await freeClusterPort() : await freePort();
    try {
      return await start(port);
    } catch (e) {
      if (attempt < 5 && e instanceof NotStarted && e.log.includes("already in use")) continue;
      throw e;
    }
  }
}
