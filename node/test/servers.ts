// Real redis-server processes on free loopback ports, killed when the test file ends (also on failure:
// an exit hook kills whatever is still running). Each is started by testkit's rule (redis-start.mjs,
// shared with the peer suites): ready when INFO shows its own process_id and loading:0, a port another
// process took first retried with another.
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { before, after } from "node:test";
import { freePort, info, onFreePort, spawnReady } from "./redis-start.mjs";

export const ROOT = resolve(fileURLToPath(new URL("../..", import.meta.url)));
export const MODULE = join(ROOT, "target", "release", "libredis_ratelimit.so");
export const REDIS = process.env["REDIS_SERVER"] ?? "/usr/bin/redis-server";

/** The deadline of limiters in tests not about deadlines: long, so a loaded machine (two cores shared by
 * several suites) never turns a slow first call into a degraded decision. */
export const LONG_DEADLINE_MS = 5000;

const running = new Set<ChildProcess>();
process.on("exit", () => {
  for (const p of running) {
    try {
      p.kill("SIGCONT");
      p.kill("SIGKILL");
    } catch {}
  }
});

export { freePort, info };

export class Server {
  proc: ChildProcess | undefined;
  readonly dir = mkdtempSync(join(tmpdir(), "rl-node-"));
  constructor(readonly port: number, readonly args: string[], readonly binary = REDIS) {}

  /** `binary`: another redis-server (default REDIS). A first start whose port another process took
   * before the server bound it is retried on another port (a cluster node's bus port too); `port`:
   * the first attempt's port (default: a free one). */
  static async start(opts: { module?: boolean; args?: string[]; binary?: string; port?: number } = {}): Promise<Server> {
    const cluster = (opts.args ?? []).includes("--cluster-enabled");
    const extra = [...(opts.args ?? []), ...(opts.module ? ["--loadmodule", MODULE] : [])];
    return onFreePort(async (port) => {
      const args = ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", ...extra];
      const s = new Server(port, args, opts.binary);
      try {
        await s.run();
        return s;
      } catch (e) {
        await s.close();
        throw e;
      }
    }, { cluster, ...(opts.port !== undefined && { port: opts.port }) });
  }

  /** The server's log (its stdout and stderr), where a server that exits says why. */
  get logFile(): string {
    return join(this.dir, "server.log");
  }

  /** Starts the process (the same port and directory again after `stop`) and waits until it is ready. */
  async run(): Promise<void> {
    await this.spawn([...this.args, "--dir", this.dir]);
  }

  /** Starts the process with `args` as they are (a sentinel: its configuration file first). */
  async runPlain(): Promise<void> {
    await this.spawn(this.args);
  }

  private async spawn(args: string[]): Promise<void> {
    await spawnReady(this.binary, args, this.port, this.logFile, {
      spawned: (proc) => {
        this.proc = proc;
        running.add(proc);
        proc.once("exit", () => running.delete(proc));
      },
    });
  }

  async stop(): Promise<void> {
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const gone = new Promise((r) => p.once("exit", r));
    p.kill("SIGCONT");
    p.kill("SIGKILL");
    await gone;
  }

  pause(): void {
    this.proc?.kill("SIGSTOP");
  }
  resume(): void {
    this.proc?.kill("SIGCONT");
  }

  async close(): Promise<void> {
    await this.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** A test file's module server and stock server: started before its tests, closed after them. */
export function moduleAndStock(): { module: Server; stock: Server } {
  const servers = {} as { module: Server; stock: Server };
  before(async () => {
    [servers.module, servers.stock] = await Promise.all([Server.start({ module: true }), Server.start()]);
  });
  after(async () => {
    await Promise.all([servers.module?.close(), servers.stock?.close()]);
  });
  return servers;
}

/** A cluster of `n` primaries (no replicas) on free ports, slots split evenly. */
export class ClusterServers {
  constructor(readonly nodes: Server[]) {}
  static async start(n: number, opts: { module?: boolean } = {}): Promise<ClusterServers> {
    const nodes: Server[] = [];
    for (let i = 0; i < n; i++) {
      nodes.push(await Server.start({ ...opts, args: ["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"] }));
    }
    const { execFileSync } = await import("node:child_process");
    const cli = REDIS.replace(/redis-server$/, "redis-cli");
    execFileSync(cli, ["--cluster", "create", ...nodes.map((s) => `127.0.0.1:${s.port}`), "--cluster-yes"], { stdio: "ignore" });
    for (let i = 0; i < 200; i++) {
      const out = execFileSync(cli, ["-p", String(nodes[0]!.port), "cluster", "info"]).toString();
      if (out.includes("cluster_state:ok")) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    return new ClusterServers(nodes);
  }
  async close(): Promise<void> {
    await Promise.all(this.nodes.map((s) => s.close()));
  }
}

/** The reply of one command, on a connection of its own (closed after it). */
export async function ask(port: number, ...args: string[]): Promise<string> {
  const { Redis } = await import("ioredis");
  const c = new Redis(port, "127.0.0.1", { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: false });
  c.on("error", () => {});
  try {
    await c.connect();
    const reply = await c.call(args[0]!, ...args.slice(1));
    return Array.isArray(reply) ? reply.map(String).join("\n") : String(reply);
  } finally {
    c.disconnect();
  }
}

export async function until(what: string, ok: () => Promise<boolean> | boolean, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await Promise.resolve().then(ok).catch(() => false)) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out waiting for ${what}`);
}

export const SERVICE = "rl-primary";

/** A primary and a replica (both with the module) watched by three sentinels (quorum 2), on free
 * loopback ports, as `testkit/src/sentinel.rs`. */
export class Sentinels {
  constructor(readonly nodes: Server[], readonly sentinels: Server[]) {}

  static async start(): Promise<Sentinels> {
    const primary = await Server.start({ module: true, args: ["--repl-diskless-sync-delay", "0"] });
    const replica = await Server.start({ module: true, args: ["--replicaof", "127.0.0.1", String(primary.port), "--repl-diskless-sync-delay", "0"] });
    const topology = new Sentinels([primary, replica], []);
    try {
      await until("the replica's link", async () => (await ask(replica.port, "INFO", "replication")).includes("master_link_status:up"));
      for (let i = 0; i < 3; i++) {
        const port = await freePort();
        const s = new Server(port, [], REDIS);
        const { writeFileSync } = await import("node:fs");
        const conf = join(s.dir, "sentinel.conf");
        writeFileSync(conf, [
          `port ${port}`, "bind 127.0.0.1", `dir ${s.dir}`,
          `sentinel monitor ${SERVICE} 127.0.0.1 ${primary.port} 2`,
          `sentinel down-after-milliseconds ${SERVICE} 1000`,
          `sentinel failover-timeout ${SERVICE} 5000`,
          `sentinel parallel-syncs ${SERVICE} 1`, "",
        ].join("\n"));
        s.args.push(conf, "--sentinel");
        topology.sentinels.push(s);
        await s.runPlain();
      }
      await until("the sentinels to see the replica", async () => {
        for (const s of topology.sentinels) if (!(await ask(s.port, "INFO", "sentinel")).includes("slaves=1")) return false;
        return true;
      });
    } catch (e) {
      await topology.close();
      throw e;
    }
    return topology;
  }

  /** The primary's port as the first sentinel says. */
  async primaryPort(): Promise<number> {
    const reply = await ask(this.sentinels[0]!.port, "SENTINEL", "get-master-addr-by-name", SERVICE);
    return Number(reply.split("\n")[1]);
  }

  async close(): Promise<void> {
    await Promise.all([...this.sentinels, ...this.nodes].map((s) => s.close()));
  }
}
