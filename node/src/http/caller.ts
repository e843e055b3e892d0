/** Who is calling: the authenticated principal, else the tenant, else the client's IP (read through
 * trusted proxies only). A caller's part of a key is the whole of its hash tag, escaped or hashed as
 * the Rust layer does (`client/src/http/caller.rs`), so a Rust, Python and Node service limit one
 * caller in one bucket. The bound and the escapes are the contract's. */
import { createHash } from "node:crypto";
import { HTTP } from "../contract.js";
import { formatIp, type Ip } from "./ip.js";

const MAX = HTTP.caller.max_part_bytes;
const ESCAPES = HTTP.caller.escapes;
const MARKERS = HTTP.caller.markers;

export class Caller {
  private constructor(readonly kind: "user" | "tenant" | "ip" | "unknown", readonly id = "") {}
  static principal(id: string): Caller {
    return new Caller("user", id);
  }
  static tenant(id: string): Caller {
    return new Caller("tenant", id);
  }
  static ip(ip: Ip | string): Caller {
    return new Caller("ip", typeof ip === "string" ? ip : formatIp(ip));
  }
  static unknown(): Caller {
    return new Caller("unknown");
  }
  /** `user:ada`, `tenant:acme`, `ip:203.0.113.7`, `unknown`. */
  toString(): string {
    return this.kind === "unknown" ? "unknown" : `${this.kind}:${this.id}`;
  }
  /** The caller's part of its keys: `kind:id`, `kind.esc:<escaped>` or `kind.sha256:<hex>`. */
  keyPart(): string {
    return this.kind === "user" || this.kind === "tenant" ? idPart(this.kind, this.id) : this.toString();
  }
}

export function idPart(kind: string, id: string): string {
  const raw = Buffer.from(id, "utf8");
  if (kind.length + MARKERS.plain.length + raw.length <= MAX) {
    if (!id.includes("{") && !id.includes("}")) return `${kind}${MARKERS.plain}${id}`;
    let escapes = 0;
    for (const ch of id) if (ch in ESCAPES) escapes += ESCAPES[ch]!.length - 1;
    if (kind.length + MARKERS.escaped.length + raw.length + escapes <= MAX) {
      let escaped = "";
      for (const ch of id) escaped += ESCAPES[ch] ?? ch;
      return `${kind}${MARKERS.escaped}${escaped}`;
    }
  }
  return `${kind}${MARKERS.hashed}${createHash("sha256").update(raw).digest("hex")}`;
}

/** `<prefix>:{<caller's key part>}`, the start of every key of the caller (the contract's `key`). */
export function callerTag(prefix: string, caller: Caller): string {
  // Replaced by functions: a `$&` in a prefix or a caller's id is text, not a replacement pattern.
  return HTTP.caller.key.replace("{prefix}", () => prefix).replace("{{{part}}}", () => `{${caller.keyPart()}}`);
}
