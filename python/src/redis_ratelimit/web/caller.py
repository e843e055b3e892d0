"""Who is calling: the key a request is limited under, in this order of preference: the
authenticated principal, then the tenant, then the client's IP address (read through trusted proxies
only, see `forwarded.py`).

The caller's part of a key (`Caller.key_part`) is the whole of the key's hash tag, whatever the caller
sent: ids with braces are escaped and ids too long for `MAX_CALLER_KEY_BYTES` hashed, exactly as the
Rust layer (`client/src/http/caller.rs`) does, so a Rust service and a Python service limit one caller
in one bucket.
"""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, MutableMapping, Union

from ..contract import HTTP

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]

#: The most bytes of a caller's part of a key, the content of its hash tag (`user:ada` in
#: `rl:{user:ada}:api`). Longer ids are hashed.
MAX_CALLER_KEY_BYTES: int = HTTP["caller"]["max_part_bytes"]
#: The bits of an IPv6 address that name one caller unless configured (the contract's default).
IPV6_PREFIX_DEFAULT: int = HTTP["caller"]["ipv6_prefix_default"]

#: Where an authentication middleware that runs before the rate limit middleware puts the principal
#: and the tenant: `scope["state"]` (Starlette's `request.state`), under these names.
PRINCIPAL_STATE = "ratelimit_principal"
TENANT_STATE = "ratelimit_tenant"

Kind = Literal["user", "tenant", "ip", "unknown"]


@dataclass(frozen=True)
class Caller:
    """Who a request is counted against: `Caller.principal("ada")`, `Caller.tenant("acme")`,
    `Caller.ip(address)` or `Caller.unknown()` (no principal, no tenant, no peer address: all such
    requests share one key)."""

    kind: Kind
    id: str = ""

    @staticmethod
    def principal(id: str) -> Caller:
        return Caller("user", id)

    @staticmethod
    def tenant(id: str) -> Caller:
        return Caller("tenant", id)

    @staticmethod
    def ip(address: IPAddress) -> Caller:
        return Caller("ip", str(address))

    @staticmethod
    def unknown() -> Caller:
        return Caller("unknown")

    def __str__(self) -> str:
        """The caller as written: `user:ada`, `tenant:acme`, `ip:203.0.113.7`, `unknown`."""
        return "unknown" if self.kind == "unknown" else f"{self.kind}:{self.id}"

    def key_part(self) -> str:
        """The caller's part of its keys, the whole of their hash tag (`rl:{<key part>}:<limit>`):

        - `user:<id>`, `tenant:<id>`, `ip:<address>`, `unknown` whenever the id holds no brace and the
          part is at most 128 bytes (UTF-8);
        - `user.esc:<id>` / `tenant.esc:<id>` for an id with a `{` or `}`, with `%`, `{` and `}`
          written `%25`, `%7B` and `%7D`, when that fits in the 128 bytes;
        - `user.sha256:<hex>` / `tenant.sha256:<hex>` otherwise: the SHA-256 of the id's UTF-8 bytes.
        """
        if self.kind in ("user", "tenant"):
            return id_part(self.kind, self.id)
        return str(self)


_MARKERS: Mapping[str, str] = HTTP["caller"]["markers"]
#: The escaped form's escapes, `%` first (it starts every escape).
_ESCAPES: dict[int, str] = {ord(c): to for c, to in HTTP["caller"]["escapes"].items()}


def id_part(kind: str, id: str) -> str:
    """`kind:id`, `kind.esc:<escaped id>` or `kind.sha256:<hex>` (the contract's markers), as
    `Caller.key_part` says."""
    raw = id.encode("utf-8", "surrogatepass")
    if len(kind) + len(_MARKERS["plain"]) + len(raw) <= MAX_CALLER_KEY_BYTES:
        if b"{" not in raw and b"}" not in raw:
            return f"{kind}{_MARKERS['plain']}{id}"
        escaped = id.translate(_ESCAPES)
        if len(kind) + len(_MARKERS["escaped"]) + len(escaped.encode("utf-8", "surrogatepass")) <= MAX_CALLER_KEY_BYTES:
            return f"{kind}{_MARKERS['escaped']}{escaped}"
    return f"{kind}{_MARKERS['hashed']}{hashlib.sha256(raw).hexdigest()}"


def caller_tag(prefix: str, caller: Caller) -> str:
    """`<prefix>:{<caller's key part>}`, the start of every key of the caller."""
    return f"{prefix}:{{{caller.key_part()}}}"


def canonical(ip: IPAddress) -> IPAddress:
    """IPv4-mapped IPv6 addresses (a dual-stack socket's IPv4 peers) as the IPv4 address they are."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def group_ip(ip: IPAddress, prefix: int) -> IPAddress:
    """The address a caller is counted under: IPv4 as it is (also when written IPv4-mapped), IPv6 as
    its network of `prefix` bits."""
    ip = canonical(ip)
    if isinstance(ip, ipaddress.IPv6Address):
        bits = max(0, min(prefix, 128))
        mask = ((1 << 128) - 1) ^ ((1 << (128 - bits)) - 1)
        return ipaddress.IPv6Address(int(ip) & mask)
    return ip


def set_principal(target: Any, principal: str) -> None:
    """Names the authenticated principal of a request, for the rate limit middleware that runs after:
    `target` is the ASGI scope, or a Starlette/FastAPI `Request` (its `scope`)."""
    _state(target)[PRINCIPAL_STATE] = principal


def set_tenant(target: Any, tenant: str) -> None:
    """Names the tenant of a request, like `set_principal`."""
    _state(target)[TENANT_STATE] = tenant


def _state(target: Any) -> MutableMapping[str, Any]:
    scope = target if isinstance(target, MutableMapping) else target.scope
    state: MutableMapping[str, Any] = scope.setdefault("state", {})
    return state


def default_caller(scope: MutableMapping[str, Any], client_ip: IPAddress | None) -> Caller:
    """The standard key choice: principal, tenant, then the client IP."""
    state = scope.get("state")
    if state:
        principal = state.get(PRINCIPAL_STATE)
        if principal is not None:
            return Caller.principal(str(principal))
        tenant = state.get(TENANT_STATE)
        if tenant is not None:
            return Caller.tenant(str(tenant))
    return Caller.unknown() if client_ip is None else Caller.ip(client_ip)


def caller_from_header(
    header: str, *, kind: Literal["user", "tenant"] = "user", hashed: bool = True
) -> Callable[[MutableMapping[str, Any], Union[IPAddress, None]], Caller]:
    """A `caller` function (the middleware's and the FastAPI dependency's) keying requests by a header:
    `caller=caller_from_header("X-API-Key")`. A request with the header is counted as the principal
    (``kind="tenant"``: the tenant) it names: by default the SHA-256 of its value (hex), so an API key
    never appears in Redis' key names; ``hashed=False`` takes the value as it is. A request without it
    (or with an empty one) is keyed as by default: principal, tenant, then the client IP."""
    wanted = header.strip().lower().encode("latin-1")
    if not wanted:
        raise ValueError("caller_from_header: the header's name is empty")

    def caller(scope: MutableMapping[str, Any], client_ip: Union[IPAddress, None]) -> Caller:
        for name, value in scope.get("headers") or ():
            if name.lower() == wanted:
                value = value.strip()
                if value:
                    id = hashlib.sha256(value).hexdigest() if hashed else value.decode("latin-1")
                    return Caller(kind, id)
        return default_caller(scope, client_ip)

    caller.__name__ = f"caller_from_header({header!r})"
    return caller
