/**
 * The framework-free core of the Express middleware and the Fastify plugin, with the Rust layer's main
 * features (`client/src/http/`): routes by path prefix (whole segments), a per-caller global limit in
 * the same atomic call, costs, skipped paths, shadow limits (checked, never enforced), allow and deny
 * lists, callers by principal, tenant, header or IP through trusted proxies, concurrency limits (a
 * permit held until the response is finished or its connection closed), and the same headers and 429
 * bodies. Keys (the contract's `limit_key`): `<prefix>:{<caller>}:<limit name>:<kind's owner>`, e.g.
 * `rl:{user:42}:api:token_bucket`, a concurrency limit's `rl:{user:42}:export:concurrency`.
 */
import { Limiter, type Permit } from "../limiter.js";
import type { Limit } from "../command.js";
import { Decision } from "../decision.js";
import { ConfigurationError, UsageError } from "../errors.js";
import { Concurrency, Policy } from "../policy.js";
import { Caller, callerTag } from "./caller.js";
import { TrustedProxies, type HeaderLines } from "./forwarded.js";
import { groupIp, parseIp, canonical, Network, type Ip } from "./ip.js";
import { addHeaders, concurrencyLimited, denied, forbidden, unavailable, type Answer, type Described } from "./response.js";
import { HTTP, limitKey } from "../contract.js";
import * as commands from "../command.js";

const H = HTTP.headers;

/** What the middleware needs of a request, whatever the framework. */
export interface RequestFacts {
  method: string;
  path: string;
  peer: string | undefined;
  headers: HeaderLines;
  /** The framework's request, for the user's functions. */
  raw: unknown;
}

export type PolicySource = Policy | ((caller: Caller) => Policy);

export interface Route {
  /** The limit's name in keys, headers and bodies. */
  name: string;
  /** The path prefix it covers, by whole segments (`/api` covers `/api` and `/api/x`, not `/apix`). */
  prefix: string;
  policy: PolicySource;
  /** What a request costs (default 1). */
  cost?: (req: unknown) => number;
  /** Checked and counted, never enforced. */
  shadow?: boolean;
}

/** A concurrency limit on a path prefix: at most `limit` requests of a caller in flight there. */
export interface ConcurrencyRoute {
  /** The limit's name in keys and bodies. */
  name: string;
  /** The path prefix it covers, by whole segments. */
  prefix: string;
  /** A `Concurrency` policy (or one per caller). */
  policy: PolicySource;
}

export interface RateLimitOptions {
  limiter: Limiter;
  routes?: Route[];
  /** A per-caller limit over every route, in the same atomic call. */
  global?: { policy: PolicySource; name?: string; shadow?: boolean };
  /** Concurrency limits by path prefix (the first that matches), taken in the same atomic call as the
   * rate limits; the permit (weight 1 whatever the request's cost) is held, and renewed, until the
   * response is finished or its connection closed. */
  concurrency?: ConcurrencyRoute[];
  /** A per-caller concurrency limit over every route (named as the global limit, `all` by default). */
  globalConcurrency?: { policy: PolicySource };
  /** Key prefix (default `rl`). */
  prefix?: string;
  /** Paths not limited: exact, or every path under one ending in `/`. */
  skip?: string[];
  /** The caller of a request: by default its principal (`principal`), then its tenant, then its IP. */
  caller?: (req: unknown, clientIp: string | undefined) => Caller;
  /** The authenticated principal of a request, if any (e.g. `(req) => req.user?.id`). */
  principal?: (req: unknown) => string | undefined;
  /** The tenant of a request, if any. */
  tenant?: (req: unknown) => string | undefined;
  /** A header naming the caller (e.g. `x-api-key`), read as its tenant when no principal is known. */
  header?: string;
  /** Proxies whose forwarding headers are believed (CIDRs). None by default. */
  trustedProxies?: string[];
  /** IPv6 callers are counted by this prefix (default: the contract's, 64). */
  ipv6Prefix?: number;
  /** Also the draft's structured `RateLimit-Policy` / `RateLimit` fields. */
  structured?: boolean;
  /** The status of a denial by the closed failure policy during an outage (default 429). */
  outageStatus?: number;
  /** Callers never limited: principals `user:<id>`, tenants `tenant:<id>`, networks (CIDR). */
  allow?: string[];
  /** Callers refused with a 403: the same forms. */
  deny?: string[];
}

interface Planned {
  key: string;
  policy: Policy;
  cost: number;
  name: string;
  shadow: boolean;
  /** What headers and bodies say of it, made when first needed. */
  described: Described | undefined;
}

/** A caller of the peer cache: who, its key tag, and its calls per route (see `Built`). */
interface Peer {
  caller: Caller;
  tag: string;
  built: (Built | undefined)[];
}

/** The enforced limits of a caller on a route and their command, built once and sent again while the
 * peer stays cached: only where nothing in them changes per request (fixed policies, no cost
 * function, no shadow or concurrency limit, not a sliding log's request ids). */
interface Built {
  limits: Planned[];
  calls: Limit[];
  cmd: string[];
}

const PASS: Outcome = Object.freeze({ kind: "pass" });

/** A policy's `RateLimit-Policy` window in whole seconds (at least 1), computed once per policy. */
const WINDOW_SECS = new WeakMap<Policy, number>();
function windowSecs(p: Policy): number {
  let w = WINDOW_SECS.get(p);
  if (w === undefined) {
    w = Math.max(1, Number(p.periodNs / 1_000_000_000n));
    WINDOW_SECS.set(p, w);
  }
  return w;
}

export type Outcome =
  | { kind: "pass" }
  /** Served with these headers; `permit`, when a concurrency limit was taken, is to be released
   * when the response is finished or its connection closed. */
  | { kind: "served"; headers: [string, string][]; permit?: Permit }
  | { kind: "answer"; answer: Answer };

function underPrefix(path: string, prefix: string): boolean {
  if (!path.startsWith(prefix)) return false;
  const rest = path.slice(prefix.length);
  return rest === "" || rest.startsWith("/") || prefix.endsWith("/");
}

class Lists {
  readonly names = new Set<string>();
  readonly nets: Network[] = [];
  constructor(items: string[]) {
    for (const item of items) {
      if (item.startsWith("user:") || item.startsWith("tenant:")) this.names.add(item);
      else this.nets.push(Network.parse(item));
    }
  }
  has(caller: Caller, principal: string | undefined, tenant: string | undefined, ip: Ip | undefined): boolean {
    if (principal !== undefined && this.names.has(`user:${principal}`)) return true;
    if (tenant !== undefined && this.names.has(`tenant:${tenant}`)) return true;
    if (caller.kind !== "ip" && caller.kind !== "unknown" && this.names.has(caller.toString())) return true;
    return ip !== undefined && this.nets.some((n) => n.contains(ip));
  }
}

const PEERS_CACHED = 10_000;

export class RateLimitCore {
  readonly limiter: Limiter;
  private readonly o: RateLimitOptions;
  private readonly proxies: TrustedProxies;
  private readonly prefix: string;
  private readonly globalName: string;
  private readonly allow: Lists | undefined;
  private readonly deny: Lists | undefined;
  /** When the caller is the peer's address and nothing else (no proxies, principal, tenant, header,
   * caller function or lists): the caller and key tag of each peer, parsed once. */
  private readonly byPeer: Map<string, Peer> | undefined;
  private readonly routes: readonly Route[];
  private readonly concurrency: readonly ConcurrencyRoute[];
  private readonly skip: readonly string[];
  /** Per route (and, last, no route: the global limit alone), whether its calls can be `Built`. */
  private readonly buildable: boolean[];

  constructor(options: RateLimitOptions) {
    if (!(options?.limiter instanceof Limiter)) throw new UsageError("rate limit middleware: `limiter` must be a Limiter");
    if (!options.routes?.length && !options.global && !options.concurrency?.length && !options.globalConcurrency) {
      throw new UsageError("rate limit middleware: no routes, no concurrency limits and no global limit: nothing to limit");
    }
    const kindOf = (what: string, p: PolicySource, concurrency: boolean) => {
      if (p instanceof Policy ? p instanceof Concurrency !== concurrency : typeof p !== "function") {
        throw new UsageError(`rate limit middleware: ${what}: not a ${concurrency ? "concurrency policy (new Concurrency)" : "rate policy"}: ${String(p)}`);
      }
    };
    for (const [list, concurrency] of [[options.routes ?? [], false], [options.concurrency ?? [], true]] as const) {
      const names = new Set<string>();
      for (const r of list) {
        if (!r.name || typeof r.prefix !== "string" || !r.prefix.startsWith("/")) throw new UsageError(`rate limit middleware: route ${JSON.stringify(r.name)} needs a name and a prefix starting with /`);
        if (names.has(r.name)) throw new UsageError(`rate limit middleware: the name ${JSON.stringify(r.name)} is given twice`);
        names.add(r.name);
        kindOf(`route ${r.name}`, r.policy, concurrency);
      }
    }
    if (options.global) kindOf("the global limit", options.global.policy, false);
    const globalName = options.global?.name ?? "all";
    const named = (list: { name: string }[] | undefined) => (list ?? []).some((r) => r.name === globalName);
    if ((options.global && named(options.routes)) || (options.globalConcurrency && named(options.concurrency))) {
      // Its key would be the global limit's: one key twice in a call.
      throw new UsageError(`rate limit middleware: the name ${JSON.stringify(globalName)} is the global limit's; give the route another`);
    }
    if (options.globalConcurrency) kindOf("the global concurrency limit", options.globalConcurrency.policy, true);
    this.o = options;
    this.limiter = options.limiter;
    this.proxies = new TrustedProxies(options.trustedProxies ?? []);
    this.prefix = options.prefix ?? "rl";
    this.globalName = options.global?.name ?? "all";
    this.allow = options.allow ? new Lists(options.allow) : undefined;
    this.deny = options.deny ? new Lists(options.deny) : undefined;
    const o = options;
    const byPeerOnly = !o.trustedProxies?.length && !o.principal && !o.tenant && !o.header && !o.caller && !o.allow && !o.deny;
    this.byPeer = byPeerOnly ? new Map() : undefined;
    this.routes = [...(o.routes ?? [])];
    this.concurrency = [...(o.concurrency ?? [])];
    this.skip = [...(o.skip ?? [])];
    const fixed = (p: PolicySource | undefined) => p === undefined || (p instanceof Policy && p.kind.request === "cost");
    const noLeases = !this.concurrency.length && !o.globalConcurrency;
    const globalFixed = !o.global || (fixed(o.global.policy) && !o.global.shadow);
    this.buildable = [...this.routes.map((r) => noLeases && globalFixed && fixed(r.policy) && !r.shadow && !r.cost), noLeases && globalFixed];
  }

  private callerOf(req: RequestFacts, ip: Ip | undefined, principal: string | undefined, tenant: string | undefined): Caller {
    const grouped = ip ? groupIp(ip, this.o.ipv6Prefix ?? HTTP.caller.ipv6_prefix_default) : undefined;
    if (this.o.caller) return this.o.caller(req.raw, grouped ? Caller.ip(grouped).id : undefined);
    if (principal !== undefined) return Caller.principal(principal);
    if (tenant !== undefined) return Caller.tenant(tenant);
    return grouped ? Caller.ip(grouped) : Caller.unknown();
  }

  /** Decides one request: pass it untouched, serve it with headers, or answer it (429, 403, 503). */
  handle(req: RequestFacts): Promise<Outcome> {
    try {
      return this.decide(req);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  private decide(req: RequestFacts): Promise<Outcome> {
    const path = req.path;
    for (const s of this.skip) if (path === s || (s.endsWith("/") && path.startsWith(s))) return Promise.resolve(PASS);
    let at = this.routes.length;
    let route: Route | undefined;
    for (let i = 0; i < this.routes.length; i++) {
      if (underPrefix(path, this.routes[i]!.prefix)) {
        route = this.routes[i]!;
        at = i;
        break;
      }
    }
    let conc: ConcurrencyRoute | undefined;
    for (const r of this.concurrency) {
      if (underPrefix(path, r.prefix)) {
        conc = r;
        break;
      }
    }
    if (!route && !this.o.global && !conc && !this.o.globalConcurrency) return Promise.resolve(PASS);
    const routeName = route?.name ?? conc?.name ?? this.globalName;
    let caller: Caller;
    let tag: string;
    let peer = this.byPeer && req.peer !== undefined ? this.byPeer.get(req.peer) : undefined;
    if (peer) {
      caller = peer.caller;
      tag = peer.tag;
    } else {
      const peerIp = req.peer ? parseIp(req.peer.split("%")[0]!) : undefined;
      const clientIp = this.proxies.clientIp(peerIp ? canonical(peerIp) : undefined, req.headers);
      const principal = this.o.principal?.(req.raw);
      let tenant = this.o.tenant?.(req.raw);
      if (tenant === undefined && this.o.header) {
        const h = req.headers.find(([n]) => n.toLowerCase() === this.o.header!.toLowerCase());
        if (h) tenant = typeof h[1] === "string" ? h[1] : Buffer.from(h[1]).toString("latin1");
      }
      caller = this.callerOf(req, clientIp, principal, tenant);
      if (this.deny?.has(caller, principal, tenant, clientIp)) return Promise.resolve({ kind: "answer", answer: forbidden() });
      if (this.allow?.has(caller, principal, tenant, clientIp)) return Promise.resolve(PASS);
      tag = callerTag(this.prefix, caller);
      if (this.byPeer && req.peer !== undefined) {
        if (this.byPeer.size >= PEERS_CACHED) this.byPeer.clear();
        peer = { caller, tag, built: [] };
        this.byPeer.set(req.peer, peer);
      }
    }
    let built = peer?.built[at];
    if (built === undefined) {
      const limits = this.plan(req, route, conc, caller, tag);
      if (!peer || !this.buildable[at]) return this.checked(limits, routeName);
      const calls = limits.map((l) => [l.key, l.policy, l.cost] as Limit);
      built = { limits, calls, cmd: commands.decide(calls) };
      peer.built[at] = built;
    }
    const b = built;
    return this.limiter.checkBuilt(b.calls, b.cmd, (d) => this.rated(d, b.limits, routeName));
  }

  /** The limits a request meets: its route's, the global one, its concurrency limits. */
  private plan(req: RequestFacts, route: Route | undefined, conc: ConcurrencyRoute | undefined, caller: Caller, tag: string): Planned[] {
    const cost = route?.cost ? route.cost(req.raw) : 1;
    const source = (p: PolicySource) => (p instanceof Policy ? p : p(caller));
    const limits: Planned[] = [];
    // Each key ends with its kind's owner (the contract's `limit_key`): a limit whose kind changes
    // starts afresh on new keys, one whose numbers change carries on.
    const add = (name: string, p: PolicySource, cost: number, shadow: boolean) => {
      const policy = source(p);
      limits.push({ key: limitKey(tag, name, policy.kind.name), policy, cost, name, shadow, described: undefined });
    };
    if (route) add(route.name, route.policy, cost, !!route.shadow);
    if (this.o.global) add(this.globalName, this.o.global.policy, cost, !!this.o.global.shadow);
    // Leases of weight 1: a request in flight is one, whatever its rate cost.
    if (conc) add(conc.name, conc.policy, 1, false);
    if (this.o.globalConcurrency) add(this.globalName, this.o.globalConcurrency.policy, 1, false);
    return limits;
  }

  /** The outcome of the enforced rate limits' decision (no concurrency limit among them). */
  private rated(d: Decision, enforced: Planned[], routeName: string): Outcome {
    const limiting = enforced[Math.min(d.limiting, enforced.length - 1)]!;
    if (!d.allowed) return this.refused(d, enforced, limiting, routeName);
    return { kind: "served", headers: this.headers(d, limiting) };
  }

  /** The answer to a request its enforced limits did not allow. */
  private refused(d: Decision, enforced: Planned[], limiting: Planned, routeName: string): Outcome {
    const closed = d.degraded && this.limiter.failure === "closed";
    if (closed) {
      // None of them could be checked: name the route's own limit, not the global one.
      limiting = enforced.find((l) => l.name === routeName) ?? limiting;
      const status = this.o.outageStatus ?? 429;
      return { kind: "answer", answer: unavailable(d, this.described(limiting), !!this.o.structured, status, d.error instanceof ConfigurationError) };
    }
    if (limiting.policy instanceof Concurrency) return { kind: "answer", answer: concurrencyLimited(d, this.described(limiting)) };
    return { kind: "answer", answer: denied(d, this.described(limiting), !!this.o.structured) };
  }

  /** The RateLimit-* fields of an allowed request; they describe rate limits: a lease that was the
   * tightest has none. */
  private headers(d: Decision, limiting: Planned): [string, string][] {
    if (limiting.policy instanceof Concurrency) return [];
    const limit = this.described(limiting);
    if (!d.degraded && !this.o.structured) {
      // What addHeaders writes here, without its checks for names already there.
      return [[H.limit, d.limit === limiting.policy.limit ? limit.limitText! : String(d.limit)], [H.remaining, String(d.remaining)], [H.reset, String(d.resetAfterSecs())]];
    }
    const headers: [string, string][] = [];
    addHeaders(headers, d, limit, !!this.o.structured);
    return headers;
  }

  /** The rest of a request whose calls are not `Built`: shadow limits, concurrency limits. */
  private async checked(limits: Planned[], routeName: string): Promise<Outcome> {
    const enforced = limits.filter((l) => !l.shadow);
    const shadow = limits.filter((l) => l.shadow);
    let headers: [string, string][] = [];
    let answered = true;
    let permit: Permit | undefined;
    if (enforced.length) {
      const [d, limiting, held] = await this.checkOrAcquire(enforced);
      if (!d.allowed) return this.refused(d, enforced, limiting, routeName);
      answered = !d.degraded;
      permit = held;
      headers = this.headers(d, limiting);
    }
    if (shadow.length && answered) {
      const d: Decision = await this.limiter.checkAll(shadow.map((l) => [l.key, l.policy, l.cost] as Limit));
      if (!d.allowed && !d.degraded) this.limiter.emit("shadow", { route: routeName, limit: shadow[Math.min(d.limiting, shadow.length - 1)]!.name, decision: d });
    }
    return permit ? { kind: "served", headers, permit } : { kind: "served", headers };
  }

  /** The enforced limits in one call: checked, or, with a concurrency limit among them, acquired
   * (the permit holds the slots). The decision, the limit it describes, and the permit if allowed. */
  private async checkOrAcquire(limits: Planned[]): Promise<[Decision, Planned, Permit | undefined]> {
    const calls = limits.map((l) => [l.key, l.policy, l.cost] as Limit);
    if (!limits.some((l) => l.policy instanceof Concurrency)) {
      const d = await this.limiter.checkAll(calls);
      return [d, limits[Math.min(d.limiting, limits.length - 1)]!, undefined];
    }
    const permit = await this.limiter.acquire(calls);
    const d = permit.decision;
    const limiting = limits[Math.min(d.limiting, limits.length - 1)]!;
    if (!d.allowed) return [d, limiting, undefined];
    // Granted with a lease as the tightest limit: the RateLimit-* fields still describe the rate
    // limits, read with a peek (cost 0, writes nothing; a sliding log cannot be peeked).
    const rate = limits.filter((l) => !(l.policy instanceof Concurrency) && l.policy.kind.request === "cost");
    if (limiting.policy instanceof Concurrency && rate.length) {
      const peeked = await this.limiter.checkAll(rate.map((l) => [l.key, l.policy, 0] as Limit));
      return [peeked.with({ allowed: true, retryAfterMs: 0 }), rate[Math.min(peeked.limiting, rate.length - 1)]!, permit];
    }
    return [d, limiting, permit];
  }

  private described(l: Planned): Described {
    if (l.described) return l.described;
    const rate = !(l.policy instanceof Concurrency);
    l.described = { name: l.name, windowSecs: windowSecs(l.policy), cost: l.cost, rate, limitText: String(l.policy.limit) };
    return l.described;
  }
}
