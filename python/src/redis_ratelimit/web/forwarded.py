"""Reading the forwarding chain from `Forwarded` (RFC 7239) or `X-Forwarded-For`, newest hop first,
lazily: the caller reads only as many hops as it believes (at most `MAX_HOPS`), so a header of 10,000
hops costs little more than one of 32. Never raises: a hop that is not an address (`unknown`, an
obfuscated name, garbage, bytes that are not ASCII, an entry over `MAX_NODE_BYTES`) is None. The chain
is believed only as far as `TrustedProxies` say. The same rules as `client/src/http/forwarded.rs`.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Iterable, Iterator, Mapping, Sequence, Union

from ..contract import HTTP
from .caller import IPAddress, canonical

#: The most hops read from the right of a forwarding chain; the hop reached last is then the client.
MAX_HOPS: int = HTTP["forwarded"]["max_hops"]

#: The longest entry read as an address (`"[ffff:...:255.255.255.255%zone]:65535"` fits).
MAX_NODE_BYTES: int = HTTP["forwarded"]["max_node_bytes"]

Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
Headers = Sequence[tuple[bytes, bytes]]

# Rust's `trim_ascii`: space, tab, LF, FF, CR (not VT, which Python's bytes.strip() would take too).
_WHITESPACE = b" \t\n\x0c\r"
_DIGITS = frozenset(b"0123456789")


def hops(headers: Headers) -> Iterator[IPAddress | None]:
    """The forwarding chain, newest hop first: the `Forwarded` header's `for=` values when the request
    has a `Forwarded` header (then it alone is read), else `X-Forwarded-For`'s entries. Every line of
    the header counts, the last line's last entry first. `headers` are ASGI's: lower-case names."""
    forwarded = any(name == b"forwarded" for name, _ in headers)
    wanted = b"forwarded" if forwarded else b"x-forwarded-for"
    lines = [value for name, value in headers if name == wanted]
    for line in reversed(lines):
        end = len(line)
        while True:
            start = line.rfind(b",", 0, end)
            entry = line[start + 1 : end]
            node = for_parameter(entry) if forwarded else entry
            yield None if node is None else parse_node(node)
            if start < 0:
                break
            end = start


def for_parameter(element: bytes) -> bytes | None:
    """The `for=` value of one `Forwarded` element (`for=192.0.2.60;proto=http`); the parameter name
    is case-insensitive (RFC 7239, 4)."""
    for pair in element.split(b";"):
        pair = pair.strip(_WHITESPACE)
        if len(pair) >= 4 and pair[:4].lower() == b"for=":
            return pair[4:]
    return None


def parse_node(node: bytes) -> IPAddress | None:
    """An address as forwarding headers write it: `192.0.2.1`, `192.0.2.1:80`, `2001:db8::1`,
    `[2001:db8::1]`, `"[2001:db8::1]:443"`, with an IPv6 zone id (`fe80::1%eth0`, `[fe80::1%25eth0]`)
    dropped. An IPv6 address with a port needs its brackets (`2001:db8::1:443` is an address)."""
    node = node.strip(_WHITESPACE)
    if len(node) > MAX_NODE_BYTES:
        return None
    try:
        text = node.decode("utf-8").strip('"')
    except UnicodeDecodeError:
        return None
    if text.startswith("["):
        addr, bracket, after = text[1:].partition("]")
        if not bracket:
            return None
        if after and not (after.startswith(":") and _is_port(after[1:])):
            return None
        return _parse_addr(addr)
    ip = _parse_addr(text)
    if ip is not None:
        return ip
    host, colon, port = text.rpartition(":")
    if not colon or not _is_port(port):
        return None
    return _ipv4(host)


def _parse_addr(text: str) -> IPAddress | None:
    """An address, an IPv6 one possibly with its zone id (dropped: it names an interface of the
    sender)."""
    addr, percent, zone = text.partition("%")
    if percent:
        return _ipv6(addr) if zone else None
    return _ipv4(text) or _ipv6(text)


def _ipv4(text: str) -> IPAddress | None:
    if not text.isascii() or not text[:1].isdigit():
        return None
    try:
        return ipaddress.IPv4Address(text)
    except ValueError:
        return None


def _ipv6(text: str) -> IPAddress | None:
    # Python's parser would take a zone id itself; Rust's (and ours) only without one.
    if not text.isascii() or "%" in text or ":" not in text:
        return None
    try:
        return ipaddress.IPv6Address(text)
    except ValueError:
        return None


def _is_port(text: str) -> bool:
    return 1 <= len(text) <= 5 and all(ord(c) in _DIGITS for c in text) and int(text) <= 65535


def network(net: str | Network) -> Network:
    """A network as written: `10.0.0.0/8`, `fd00::/8`, a single address (`/32`, `/128`); host bits
    are allowed (`10.1.2.3/8` is `10.0.0.0/8`)."""
    if isinstance(net, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
        return net
    return ipaddress.ip_network(net.strip(), strict=False)


class TrustedProxies:
    """Proxies whose forwarding headers are believed (none by default)."""

    __slots__ = ("nets",)

    def __init__(self, nets: Iterable[str | Network] = ()) -> None:
        self.nets: tuple[Network, ...] = tuple(network(n) for n in nets)

    def __repr__(self) -> str:
        return f"TrustedProxies({[str(n) for n in self.nets]!r})"

    def contains(self, ip: IPAddress) -> bool:
        return any(ip in net for net in self.nets)

    def client_ip(self, peer: IPAddress | None, headers: Headers) -> IPAddress | None:
        """The client's address: the peer's, or, when the peer is a trusted proxy, the nearest address
        in the forwarding chain that is not a trusted proxy (read from the right). An entry that is not
        an address ends the reading: the last trusted hop is the best we know. At most `MAX_HOPS` hops
        are read. IPv4-mapped addresses are read as IPv4."""
        if peer is None:
            return None
        client = canonical(peer)
        if not self.nets or not self.contains(client):
            return client
        for read, hop in enumerate(hops(headers)):
            if read >= MAX_HOPS or hop is None:
                break
            client = canonical(hop)
            if not self.contains(client):
                break
        return client


def rewritten_by_server(scope: Mapping[str, Any], peer: IPAddress) -> bool:
    """Whether the ASGI server already took `scope["client"]` from the request's forwarding header
    (uvicorn's proxy headers, on by default for `--forwarded-allow-ips`, 127.0.0.1), rather than from
    the connection: the request has `X-Forwarded-For` or `Forwarded`, and its client's address is one
    of their hops, or its port is 0 (uvicorn's when the header gives none). A peer that forwards its
    own address is no proxy, so this does not mistake a plain client for a rewritten one."""
    headers: Headers = scope.get("headers") or ()
    if not any(name == b"x-forwarded-for" or name == b"forwarded" for name, _ in headers):
        return False
    client = scope.get("client")
    try:
        if client is not None and int(client[1]) == 0:
            return True
    except (TypeError, IndexError, ValueError):
        pass
    for read, hop in enumerate(hops(headers)):
        if read >= MAX_HOPS:
            break
        if hop is not None and canonical(hop) == peer:
            return True
    return False


_PEERS: dict[str, IPAddress | None] = {}
_PEERS_MAX = 4096


def peer_ip(scope: Mapping[str, Any]) -> IPAddress | None:
    """The address of the connection's peer from an ASGI scope's `client`, if it is an IP address.
    Parsed once per address text (a bounded cache: the same peers come back, keep-alive or not)."""
    client = scope.get("client")
    if not client:
        return None
    try:
        host = client[0]
    except (TypeError, IndexError):
        return None
    if not isinstance(host, str):
        return None
    try:
        return _PEERS[host]
    except KeyError:
        pass
    try:
        ip: IPAddress | None = canonical(ipaddress.ip_address(host.partition("%")[0]))
    except ValueError:
        ip = None
    if len(_PEERS) >= _PEERS_MAX:
        _PEERS.clear()
    _PEERS[host] = ip
    return ip
