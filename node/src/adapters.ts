/**
 * One small adapter per client: how a command (a list of strings) is sent to the node of its key, and
 * which of its errors are Redis' error replies. Nothing needs setting on the client for correctness:
 * the limiter bounds every call by its own deadline, whatever the client's offline queue and retries.
 *
 * - ioredis 5 and 6 (`Redis`, `Cluster`): in a cluster ioredis does not know where RL.* keep their keys, so
 *   each command carries the slot of its key and ioredis sends it to that slot's node (and follows a
 *   MOVED itself when the slots changed).
 * - node-redis 4 and 5 (`createClient`, `createCluster`): `sendCommand(args)`, and in a cluster
 *   `sendCommand(firstKey, isReadonly, args)`, which routes by the key; node-redis 5's Sentinel client
 *   (`createSentinel`): `sendCommand(isReadonly, args)`, sent to the primary it follows.
 * - ioredis with `sentinels`: a `Redis` like any other (it follows the primary itself).
 *
 * A node-redis client with no 'error' listener gets one (doing nothing): without it, node-redis'
 * 'error' event on a reset connection ends the process.
 */
import { RedisErrorReply, type Send } from "./engine.js";
import { slotOf } from "./slot.js";

export interface Adapter {
  /** `ioredis`, `ioredis-cluster`, `node-redis`, `node-redis-cluster`, `node-redis-sentinel`. */
  readonly name: string;
  readonly cluster: boolean;
  /** Sends one command to the node of `route`; rejects with `RedisErrorReply` for an error reply. */
  readonly send: Send;
  /** The node that serves `route` now (a cluster's: its address), so the library is loaded by one call
   * at a time per node; absent: one node. */
  readonly nodeOf?: (route: string | undefined) => string;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Any = any;

/** The adapters this package made: they neither keep nor change the command they are given. */
export const OWN_ADAPTERS = new WeakSet<Adapter>();
const own = (a: Adapter): Adapter => (OWN_ADAPTERS.add(a), a);

function isIoredis(client: Any): boolean {
  return typeof client?.call === "function" && typeof client?.sendCommand === "function" && "status" in client;
}

function isNodeRedis(client: Any): boolean {
  return typeof client?.sendCommand === "function" && ("isOpen" in client || "masters" in client || typeof client?.getMasters === "function");
}

function replyOf(e: unknown, isReply: (e: Any) => boolean): unknown {
  if (e instanceof Error && isReply(e)) return new RedisErrorReply(e.message);
  return e;
}

const ioReply = (e: Any): boolean => e?.name === "ReplyError";

/** The adapter for an ioredis 5 or 6 `Redis` or `Cluster`. */
export function ioredisAdapter(client: Any): Adapter {
  const cluster = client.isCluster === true;
  if (!cluster) {
    // ioredis copies the arguments into its own Command (at `call`, in a pipeline too). A command that
    // finds nothing in flight and nothing queued goes at once, alone; the commands that come while
    // others are in flight go together, as one ioredis pipeline (one socket write), at the end of this
    // event-loop turn. Nothing waits for a reply before it is sent: a stalled round trip holds nothing.
    let inflight = 0;
    let batch: { pipe: Any; waiters: Array<[(v: unknown) => void, (e: unknown) => void]> } | undefined;
    const flush = (): void => {
      const b = batch!;
      batch = undefined;
      inflight++;
      (b.pipe.exec() as Promise<Array<[unknown, unknown]>>).then(
        (results) => {
          inflight--;
          for (let i = 0; i < b.waiters.length; i++) {
            const [err, value] = results[i] ?? [new Error("no reply in the pipeline's results"), undefined];
            if (err) b.waiters[i]![1](replyOf(err, ioReply));
            else b.waiters[i]![0](value);
          }
        },
        (e: unknown) => {
          inflight--;
          for (const w of b.waiters) w[1](replyOf(e, ioReply));
        },
      );
    };
    const done = (v: unknown): unknown => (inflight--, v);
    const failed = (e: unknown): never => {
      inflight--;
      throw replyOf(e, ioReply);
    };
    return own({
      name: "ioredis",
      cluster,
      send: (args, _route) => {
        if (inflight === 0 && batch === undefined) {
          inflight++;
          return (client.call(...args) as Promise<unknown>).then(done, failed);
        }
        if (batch === undefined) {
          batch = { pipe: client.pipeline(), waiters: [] };
          setImmediate(flush);
        }
        const b = batch;
        return new Promise((ok, fail) => {
          b.pipe.call(...args);
          b.waiters.push([ok, fail]);
        });
      },
    });
  }
  return own({
    name: "ioredis-cluster",
    cluster,
    // ioredis' slot table: the node keys ("host:port") serving each slot, the primary first.
    nodeOf: (route) => {
      const slot = route === undefined ? -1 : slotOf(route);
      return String(client.slots?.[slot]?.[0] ?? slot);
    },
    send: (args, route) => {
      // `call` builds ioredis' own Command and hands it to `sendCommand`; this one sets the command's
      // slot (the slot of its key) on the way, which ioredis' cluster reads to pick the node.
      const via = Object.create(client);
      via.sendCommand = (cmd: Any, stream?: Any, node?: Any) => {
        if (route !== undefined) cmd.slot = slotOf(route);
        return client.sendCommand(cmd, stream, node);
      };
      return (client.call.call(via, ...args) as Promise<unknown>).catch((e: unknown) => {
        throw replyOf(e, ioReply);
      });
    },
  });
}

function nodeRedisReply(e: Any): boolean {
  for (let p = Object.getPrototypeOf(e); p && p !== Error.prototype; p = Object.getPrototypeOf(p)) {
    if (p.constructor?.name === "ErrorReply") return true;
  }
  return false;
}

const ignore = (): void => {};

/** node-redis 5's Sentinel client (`createSentinel`): a `RedisSentinel`, with leases of its clients. */
function isNodeRedisSentinel(client: Any): boolean {
  for (let p = Object.getPrototypeOf(client); p && p !== Object.prototype; p = Object.getPrototypeOf(p)) {
    if (p.constructor?.name === "RedisSentinel") return true;
  }
  return false;
}

/** The adapter for a node-redis 4 or 5 client or cluster, or node-redis 5's Sentinel client. */
export function nodeRedisAdapter(client: Any): Adapter {
  // node-redis emits 'error' on a reset connection and on each failed reconnect; an EventEmitter with
  // no listener throws it, which ends the process. The limiter reports those through its own outage
  // (the failure policy, the `outage` event): a listener that keeps the process alive is enough here.
  if (typeof client.on === "function" && typeof client.listenerCount === "function" && client.listenerCount("error") === 0) {
    client.on("error", ignore);
  }
  const sentinel = isNodeRedisSentinel(client);
  const cluster = !sentinel && (!("isOpen" in client) || typeof client.getMasters === "function" || "masters" in client);
  // node-redis keeps the array it is given until it is written: each call gets its own.
  const send: Send = sentinel
    ? (args, _route) => client.sendCommand(false, [...args])
    : cluster
      ? (args, route) => client.sendCommand(route, false, [...args])
      : (args, _route) => client.sendCommand([...args]);
  return own({
    name: sentinel ? "node-redis-sentinel" : cluster ? "node-redis-cluster" : "node-redis",
    cluster,
    nodeOf: cluster
      ? (route) => {
          const slot = route === undefined ? -1 : slotOf(route);
          let primary: Any;
          try {
            primary = slot < 0 ? undefined : client.getSlotMaster?.(slot);
          } catch {
            primary = undefined; // slots not known yet
          }
          return String(primary?.address ?? (primary ? `${primary.host}:${primary.port}` : slot));
        }
      : undefined,
    send: (args, route) => {
      let p: Promise<unknown>;
      try {
        p = send(args, route) as Promise<unknown>;
      } catch (e) {
        return Promise.reject(replyOf(e, nodeRedisReply));
      }
      return Promise.resolve(p).catch((e: unknown) => {
        throw replyOf(e, nodeRedisReply);
      });
    },
  });
}

/** The adapter for `client`: an `Adapter` as it is, an ioredis or a node-redis client or cluster. */
export function adapt(client: unknown): Adapter {
  const c = client as Any;
  if (c && typeof c.send === "function" && typeof c.name === "string" && "cluster" in c) return c as Adapter;
  if (isIoredis(c)) return ioredisAdapter(c);
  if (isNodeRedis(c)) return nodeRedisAdapter(c);
  throw new TypeError("not a Redis client: pass an ioredis Redis or Cluster, a node-redis client or cluster, or an Adapter");
}
