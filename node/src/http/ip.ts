/** IP addresses as 4 or 16 bytes, written as Rust's `IpAddr` Display writes them (RFC 5952). */
import { isIPv4, isIPv6 } from "node:net";

export interface Ip {
  v6: boolean;
  bytes: Uint8Array;
}

export function parseIp(text: string): Ip | undefined {
  if (isIPv4(text)) return { v6: false, bytes: Uint8Array.from(text.split(".").map(Number)) };
  if (!isIPv6(text) || text.includes("%")) return undefined;
  let s = text;
  const v4 = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(s);
  if (v4) {
    const [a, b, c, d] = v4.slice(1).map(Number) as [number, number, number, number];
    s = s.slice(0, -v4[0].length) + ((a << 8) | b).toString(16) + ":" + ((c << 8) | d).toString(16);
  }
  const [head, rest] = s.split("::") as [string, string | undefined];
  const parse = (p: string) => (p === "" ? [] : p.split(":").filter((x) => x !== "").map((h) => parseInt(h, 16)));
  const h = parse(head);
  const r = rest === undefined ? [] : parse(rest);
  const groups = [...h];
  const fill = 8 - h.length - r.length;
  if (rest !== undefined) for (let i = 0; i < fill; i++) groups.push(0);
  groups.push(...r);
  if (groups.length !== 8) return undefined;
  const bytes = new Uint8Array(16);
  groups.forEach((g, i) => ((bytes[2 * i] = g >> 8), (bytes[2 * i + 1] = g & 0xff)));
  return { v6: true, bytes };
}

/** IPv4-mapped IPv6 (`::ffff:a.b.c.d`) as the IPv4 address it is. */
export function canonical(ip: Ip): Ip {
  if (ip.v6 && ip.bytes.subarray(0, 10).every((b) => b === 0) && ip.bytes[10] === 0xff && ip.bytes[11] === 0xff) {
    return { v6: false, bytes: ip.bytes.slice(12) };
  }
  return ip;
}

/** IPv4 as it is, IPv6 as its network of `prefix` bits. */
export function groupIp(ip: Ip, prefix: number): Ip {
  const c = canonical(ip);
  if (!c.v6) return c;
  const bits = Math.max(0, Math.min(prefix, 128));
  const out = new Uint8Array(16);
  for (let i = 0; i < 16; i++) {
    const keep = Math.max(0, Math.min(8, bits - 8 * i));
    out[i] = c.bytes[i]! & ((0xff << (8 - keep)) & 0xff);
  }
  return { v6: true, bytes: out };
}

export function formatIp(ip: Ip): string {
  if (!ip.v6) return Array.from(ip.bytes).join(".");
  const g: number[] = [];
  for (let i = 0; i < 8; i++) g.push((ip.bytes[2 * i]! << 8) | ip.bytes[2 * i + 1]!);
  // Rust writes ::ffff:a.b.c.d for IPv4-mapped addresses.
  if (g.slice(0, 5).every((x) => x === 0) && g[5] === 0xffff) {
    return `::ffff:${ip.bytes[12]}.${ip.bytes[13]}.${ip.bytes[14]}.${ip.bytes[15]}`;
  }
  let best = -1, bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (g[i] !== 0) { i++; continue; }
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen) { best = i; bestLen = j - i; }
    i = j;
  }
  const hex = g.map((x) => x.toString(16));
  if (bestLen < 2) return hex.join(":");
  return hex.slice(0, best).join(":") + "::" + hex.slice(best + bestLen).join(":");
}

export function ipEqual(a: Ip, b: Ip): boolean {
  return a.v6 === b.v6 && a.bytes.every((x, i) => x === b.bytes[i]);
}

/** A network as written (`10.0.0.0/8`, `fd00::/8`, a single address); host bits allowed. */
export class Network {
  constructor(readonly base: Ip, readonly bits: number) {}
  static parse(text: string): Network {
    const [addr = "", len] = text.trim().split("/");
    const ip = parseIp(addr);
    if (!ip) throw new TypeError(`not a network: ${text}`);
    const max = ip.v6 ? 128 : 32;
    const bits = len === undefined ? max : Number(len);
    if (!Number.isInteger(bits) || bits < 0 || bits > max) throw new TypeError(`not a network: ${text}`);
    return new Network(ip.v6 ? groupIp(ip, bits) : mask4(ip, bits), bits);
  }
  contains(ip: Ip): boolean {
    if (ip.v6 !== this.base.v6) return false;
    const m = ip.v6 ? groupIp(ip, this.bits) : mask4(ip, this.bits);
    return ipEqual(m, this.base);
  }
}

function mask4(ip: Ip, bits: number): Ip {
  const out = new Uint8Array(4);
  for (let i = 0; i < 4; i++) {
    const keep = Math.max(0, Math.min(8, bits - 8 * i));
    out[i] = ip.bytes[i]! & ((0xff << (8 - keep)) & 0xff);
  }
  return { v6: false, bytes: out };
}
