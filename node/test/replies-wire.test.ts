// errors.json over real sockets: a TCP server on loopback that answers every limiter command with a
// vector's RESP2 bytes (RESP3's to a client that said HELLO 3) (or fails the way its transport says: no answer, a reset, a closed connection, a
// refused port), read by ioredis and node-redis with their own protocol parsers. Each answer's outcome
// is the vector's: the failure policy's decision with its class (the reply as the server wrote it), or
// the UsageError raised; its breaker effect, counter and log event too.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server as NetServer, type Socket } from "node:net";
import { Redis } from "ioredis";
import { createClient } from "redis";
import { assertOutcome, callOf, cases, settle, type Any } from "./vectors.ts";
import { freePort } from "./servers.ts";
import { Limiter, classOfReply, classOfTransport } from "../src/index.ts";

/** The commands in `buf` (RESP arrays of bulk strings), and what is left of it. */
function commandsIn(buf: Buffer): [string[][], Buffer] {
  const out: string[][] = [];
  let at = 0;
  for (;;) {
    const start = at;
    const line = (): string | undefined => {
      const end = buf.indexOf("\r\n", at);
      if (end < 0) return undefined;
      const text = buf.subarray(at, end).toString();
      at = end + 2;
      return text;
    };
    const head = line();
    if (head === undefined || !head.startsWith("*")) return [out, buf.subarray(start)];
    const args: string[] = [];
    for (let i = 0; i < Number(head.slice(1)); i++) {
      const len = line();
      if (len === undefined || at + Number(len.slice(1)) + 2 > buf.length) return [out, buf.subarray(start)];
      args.push(buf.subarray(at, at + Number(len.slice(1))).toString());
      at += Number(len.slice(1)) + 2;
    }
    out.push(args);
  }
}

/** Connections that said HELLO 3 (were answered with the vectors' RESP3 bytes). */
let hello3 = 0;

/** The answer to the first RL.* command on a server: a failure before the vector's answer. */
const LOADING = "-LOADING Redis is loading the dataset in memory\r\n";

/** A server whose first RL.* command gets LOADING and every other `input`'s answer (the clients' own
 * setup commands get +OK). */
async function answering(input: Any): Promise<{ port: number; close(): Promise<void> }> {
  if (input.transport === "refused") return { port: await freePort(), close: async () => {} };
  const sockets = new Set<Socket>();
  let first = true;
  const server: NetServer = createServer((socket) => {
    sockets.add(socket);
    socket.on("error", () => {});
    let pending: Buffer = Buffer.alloc(0);
    let resp3 = false;
    socket.on("data", (d) => {
      const [cmds, rest] = commandsIn(Buffer.concat([pending, d]));
      pending = rest;
      for (const cmd of cmds) {
        const name = cmd[0]!.toUpperCase();
        if (name === "HELLO" && cmd[1] === "3") {
          resp3 = true;
          hello3++;
          socket.write("%1\r\n+proto\r\n:3\r\n");
        } else if (!name.startsWith("RL.")) socket.write("+OK\r\n");
        else if (first) {
          first = false;
          socket.write(LOADING);
        }
        else if (input.resp2 !== undefined) socket.write(resp3 ? input.resp3 : input.resp2);
        else if (input.transport === "reset") socket.resetAndDestroy();
        else if (input.transport === "closed") socket.end();
        // timeout: no answer
      }
    });
  });
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  return {
    port: (server.address() as { port: number }).port,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise((ok) => server.close(ok));
    },
  };
}

const CLIENTS = [
  {
    name: "ioredis 5",
    async make(port: number) {
      const c = new Redis(port, "127.0.0.1", { enableReadyCheck: false });
      c.on("error", () => {});
      return { client: c, close: async () => void c.disconnect() };
    },
  },
  {
    name: "node-redis 5",
    async make(port: number) {
      const c = createClient({ url: `redis://127.0.0.1:${port}`, socket: { reconnectStrategy: false } });
      await c.connect().catch(() => {}); // a refused port: the limiter's call reports it
      return { client: c, close: async () => void (c.isOpen ? c.destroy() : undefined) };
    },
  },
  {
    name: "node-redis 5, RESP3",
    async make(port: number) {
      const c = createClient({ url: `redis://127.0.0.1:${port}`, RESP: 3, socket: { reconnectStrategy: false } });
      await c.connect().catch(() => {});
      return { client: c, close: async () => void (c.isOpen ? c.destroy() : undefined) };
    },
  },
];

const servers: { close(): Promise<void> }[] = [];
after(async () => {
  for (const s of servers) await s.close();
});

/** The event each log kind of the contract is observable by on a limiter (`none`: none of them). */
const LOG_EVENTS: Record<string, string | undefined> = { outage: "outage", once_per_cause: "misconfigured", once_per_key: "conflict", none: undefined };

for (const made of CLIENTS) {
  test(`errors.json on the wire, ${made.name}: each answer's class, outcome, breaker, counter and log`, async () => {
    let n = 0;
    for (const { input, output } of cases("errors")) {
      const what = `${made.name} ${JSON.stringify(input).slice(0, 160)}`;
      const [key, policy, cost] = callOf(input.call);
      const server = await answering(input);
      servers.push(server);
      const { client, close } = await made.make(server.port);
      try {
        // A breaker that two failures in a row open, after one failure (the server's LOADING; a refused
        // port's refusal): a failure opens it, an answer ends the run (one more failure leaves it closed).
        const rl = new Limiter(client, {
          failure: input.failure, engine: "module", deadlineMs: 300, breaker: { failures: 2, cooldownMs: 60_000 }, logger: false,
        });
        const events: Record<string, number> = { outage: 0, misconfigured: 0, conflict: 0 };
        for (const e of Object.keys(events)) rl.on(e, () => void events[e]!++);
        const prior = await rl.check(key, policy, cost).catch((e: unknown) => (e instanceof Error ? e : new Error(String(e))));
        assert.ok(!(prior instanceof Error) && prior.degraded, `${what}: the prior failure: ${String(prior)}`);
        assert.equal(rl.breaker!.isOpen, false, `${what}: one failure opened the breaker`);
        assert.deepEqual([rl.counters["outage"], events.outage], [1, 1], what);
        const cls = input.reply !== undefined ? classOfReply(input.reply) : classOfTransport(input.transport);
        assert.equal(cls.name, output.class, what);
        // The driver hands the reply over as the server wrote it (MOVED and ASK included: neither driver
        // follows them on a standalone client), not a deadline nor a closed connection.
        assertOutcome(await settle(rl.check(key, policy, cost)), input, output, what);
        // A transport failure may reach the limiter as its deadline (a client that queues and retries):
        // an outage either way, counted as one.
        // The prior failure's outage is under way: an outage answer continues it (counted and told once).
        const counted = Object.fromEntries(Object.entries(rl.counters).filter(([, v]) => v !== 0));
        assert.deepEqual(counted, { outage: 1, [output.counter]: 1 }, `${what}: ${JSON.stringify(rl.counters)}`);
        assert.equal(rl.breaker!.isOpen, output.breaker === "failure", `${what}: breaker ${output.breaker}`);
        if (output.breaker === "answered") {
          rl.breaker!.failure();
          assert.equal(rl.breaker!.isOpen, false, `${what}: the answer ended the failures in a row: one more does not open it`);
        }
        const event = LOG_EVENTS[output.log];
        assert.deepEqual(events, { outage: 1, misconfigured: 0, conflict: 0, ...(event && { [event]: 1 }) }, what);
        n++;
      } finally {
        await close();
        await server.close();
      }
    }
    assert.equal(n, cases("errors").length);
    if (made.name.endsWith("RESP3")) assert.ok(hello3 > 40, `${hello3} connections spoke RESP3`);
  });
}
