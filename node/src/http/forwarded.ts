/** The forwarding chain from `Forwarded` (RFC 7239) or `X-Forwarded-For`, newest hop first, believed
 * only as far as the trusted proxies say; at most `max_hops` read, an entry over `max_node_bytes` or
 * not an address ends the reading. The rules of `client/src/http/forwarded.rs`. */
import { HTTP } from "../contract.js";
import { Network, canonical, parseIp, type Ip } from "./ip.js";

const MAX_HOPS = HTTP.forwarded.max_hops;
const MAX_NODE = HTTP.forwarded.max_node_bytes;

export type HeaderLines = readonly (readonly [name: string, value: Uint8Array | string])[];

const WS = new Set([0x20, 0x09, 0x0a, 0x0c, 0x0d]);
function trim(b: Uint8Array): Uint8Array {
  let s = 0, e = b.length;
  while (s < e && WS.has(b[s]!)) s++;
  while (e > s && WS.has(b[e - 1]!)) e--;
  return b.subarray(s, e);
}
const bytesOf = (v: Uint8Array | string): Uint8Array => (typeof v === "string" ? Buffer.from(v, "latin1") : v);

function* hops(headers: HeaderLines): Generator<Ip | undefined> {
  const forwarded = headers.some(([n]) => n.toLowerCase() === "forwarded");
  const wanted = forwarded ? "forwarded" : "x-forwarded-for";
  const lines = headers.filter(([n]) => n.toLowerCase() === wanted).map(([, v]) => bytesOf(v));
  for (let li = lines.length - 1; li >= 0; li--) {
    const line = lines[li]!;
    let end = line.length;
    for (;;) {
      const start = line.lastIndexOf(0x2c, end - 1);
      const entry = line.subarray(start + 1, end);
      const node = forwarded ? forParameter(entry) : entry;
      yield node === undefined ? undefined : parseNode(node);
      if (start < 0) break;
      end = start;
    }
  }
}

function forParameter(element: Uint8Array): Uint8Array | undefined {
  let at = 0;
  while (at <= element.length) {
    let next = element.indexOf(0x3b, at);
    if (next < 0) next = element.length;
    const pair = trim(element.subarray(at, next));
    if (pair.length >= 4 && Buffer.from(pair.subarray(0, 4)).toString("latin1").toLowerCase() === "for=") return pair.subarray(4);
    at = next + 1;
  }
  return undefined;
}

const isPort = (t: string): boolean => /^[0-9]{1,5}$/.test(t) && Number(t) <= 65535;

function parseNode(raw: Uint8Array): Ip | undefined {
  const node = trim(raw);
  if (node.length > MAX_NODE) return undefined;
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(node);
  } catch {
    return undefined;
  }
  text = text.replace(/^"+|"+$/g, "");
  if (text.startsWith("[")) {
    const close = text.indexOf("]");
    if (close < 0) return undefined;
    const after = text.slice(close + 1);
    if (after && !(after.startsWith(":") && isPort(after.slice(1)))) return undefined;
    return parseAddr(text.slice(1, close));
  }
  const ip = parseAddr(text);
  if (ip) return ip;
  const colon = text.lastIndexOf(":");
  if (colon < 0 || !isPort(text.slice(colon + 1))) return undefined;
  return ipv4(text.slice(0, colon));
}

function parseAddr(text: string): Ip | undefined {
  const pct = text.indexOf("%");
  if (pct >= 0) return text.length > pct + 1 ? ipv6(text.slice(0, pct)) : undefined;
  return ipv4(text) ?? ipv6(text);
}
function ipv4(t: string): Ip | undefined {
  if (!/^[0-9]/.test(t)) return undefined;
  const ip = parseIp(t);
  return ip && !ip.v6 ? ip : undefined;
}
function ipv6(t: string): Ip | undefined {
  if (!/^[\x00-\x7f]*$/.test(t) || t.includes("%") || !t.includes(":")) return undefined;
  const ip = parseIp(t);
  return ip && ip.v6 ? ip : undefined;
}

/** Proxies whose forwarding headers are believed (none by default). */
export class TrustedProxies {
  readonly nets: Network[];
  constructor(nets: Iterable<string> = []) {
    this.nets = [...nets].map((n) => Network.parse(n));
  }
  contains(ip: Ip): boolean {
    return this.nets.some((n) => n.contains(ip));
  }
  /** The client's address: the peer's, or when the peer is a trusted proxy, the nearest hop that is not. */
  clientIp(peer: Ip | undefined, headers: HeaderLines): Ip | undefined {
    if (!peer) return undefined;
    let client = canonical(peer);
    if (!this.nets.length || !this.contains(client)) return client;
    let read = 0;
    for (const hop of hops(headers)) {
      if (read++ >= MAX_HOPS || !hop) break;
      client = canonical(hop);
      if (!this.contains(client)) break;
    }
    return client;
  }
}
