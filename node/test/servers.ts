// Real redis-server processes on free loopback ports, killed when the test file ends (also on failure:
// an exit hook kills whatever is still running).
import { spawn, type ChildProcess } from "node:child_process";
import { createServer, connect } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const ROOT = resolve(fileURLToPath(new URL("../..", import.meta.url)));
export const MODULE = join(ROOT, "target", "release", "libredis_ratelimit.so");
export const REDIS = process.env["REDIS_SERVER"] ?? "/usr/bin/redis-server";

const running = new Set<ChildProcess>();
process.on("exit", () => {
  for (const p of running) {
    try {
      p.kill("SIGCONT");
      p.kill("SIGKILL");
    } catch {}
  }
});

export function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => ok(port));
    });
  });
}

export function ping(port: number, timeoutMs = 200): Promise<boolean> {
  return new Promise((ok) => {
    const sock = connect(port, "127.0.0.1");
    const t = setTimeout(() => (sock.destroy(), ok(false)), timeoutMs);
    sock.once("error", () => (clearTimeout(t), ok(false)));
    sock.once("connect", () => sock.write("PING\r\n"));
    sock.once("data", (d) => (clearTimeout(t), sock.destroy(), ok(d.toString().startsWith("+PONG"))));
  });
}

export class Server {
  proc: ChildProcess | undefined;
  readonly dir = mkdtempSync(join(tmpdir(), "rl-node-"));
  constructor(readonly port: number, readonly args: string[]) {}

  static async start(opts: { module?: boolean; args?: string[] } = {}): Promise<Server> {
    const port = await freePort();
    const args = ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", ...(opts.args ?? [])];
    if (opts.module) args.push("--loadmodule", MODULE);
    const s = new Server(port, args);
    await s.run();
    return s;
  }

  async run(): Promise<void> {
    const proc = spawn(REDIS, [...this.args, "--dir", this.dir], { stdio: ["ignore", "ignore", "inherit"] });
    this.proc = proc;
    running.add(proc);
    proc.once("exit", () => running.delete(proc));
    for (let i = 0; i < 200; i++) {
      if (await ping(this.port)) return;
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error(`redis-server on ${this.port} did not start`);
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
