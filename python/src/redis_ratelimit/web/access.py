"""Allow and deny lists by principal, tenant or network, which the application changes while the
middleware runs: an allowed caller is not limited, a denied one is turned away with 403 before any
call to Redis. As `AccessLists` in `client/src/http/access.rs`.
"""

from __future__ import annotations

import enum
import threading
from typing import Iterable

from .caller import IPAddress, canonical
from .forwarded import Network, network


class Access(enum.Enum):
    """What the lists say about a caller."""

    #: On the allow list (and not on the deny list): not limited.
    ALLOWED = "allowed"
    #: On the deny list: refused, whatever the allow list says.
    DENIED = "denied"
    #: On neither: limited as usual.
    LIMITED = "limited"


class _List:
    __slots__ = ("principals", "tenants", "networks")

    def __init__(self) -> None:
        self.principals: set[str] = set()
        self.tenants: set[str] = set()
        self.networks: list[Network] = []

    def matches(self, principals: Iterable[str], tenants: Iterable[str], ip: IPAddress | None) -> bool:
        return (
            any(p in self.principals for p in principals)
            or any(t in self.tenants for t in tenants)
            or (ip is not None and any(ip in n for n in self.networks))
        )

    def empty(self) -> bool:
        return not (self.principals or self.tenants or self.networks)


class AccessLists:
    """Allow and deny lists, shared: the middleware holds this object, the application keeps it and
    changes the lists while the middleware runs. A caller is matched by its principal, its tenant and
    its client address (through trusted proxies, not grouped per /64). The deny list wins; allowing an
    identity takes it off the deny list and denying it off the allow list."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._allow = _List()
        self._deny = _List()

    def __repr__(self) -> str:
        def sizes(lst: _List) -> tuple[int, int, int]:
            return (len(lst.principals), len(lst.tenants), len(lst.networks))

        return f"AccessLists(allow={sizes(self._allow)}, deny={sizes(self._deny)})"

    def _lists(self, allow: bool) -> tuple[_List, _List]:
        return (self._allow, self._deny) if allow else (self._deny, self._allow)

    def _put_principal(self, p: str, allow: bool) -> None:
        with self._lock:
            to, frm = self._lists(allow)
            frm.principals.discard(p)
            to.principals.add(p)

    def _put_tenant(self, t: str, allow: bool) -> None:
        with self._lock:
            to, frm = self._lists(allow)
            frm.tenants.discard(t)
            to.tenants.add(t)

    def _put_network(self, net: str | Network, allow: bool) -> None:
        n = network(net)
        with self._lock:
            to, frm = self._lists(allow)
            frm.networks = [x for x in frm.networks if x != n]
            if n not in to.networks:
                to.networks.append(n)

    def allow_principal(self, p: str) -> None:
        self._put_principal(p, True)

    def allow_tenant(self, t: str) -> None:
        self._put_tenant(t, True)

    def allow_network(self, net: str | Network) -> None:
        self._put_network(net, True)

    def deny_principal(self, p: str) -> None:
        self._put_principal(p, False)

    def deny_tenant(self, t: str) -> None:
        self._put_tenant(t, False)

    def deny_network(self, net: str | Network) -> None:
        self._put_network(net, False)

    def remove_principal(self, p: str) -> None:
        with self._lock:
            for lst in (self._allow, self._deny):
                lst.principals.discard(p)

    def remove_tenant(self, t: str) -> None:
        with self._lock:
            for lst in (self._allow, self._deny):
                lst.tenants.discard(t)

    def remove_network(self, net: str | Network) -> None:
        n = network(net)
        with self._lock:
            for lst in (self._allow, self._deny):
                lst.networks = [x for x in lst.networks if x != n]

    def is_empty(self) -> bool:
        return self._allow.empty() and self._deny.empty()

    def access(self, principal: str | None = None, tenant: str | None = None, ip: IPAddress | None = None) -> Access:
        """What the lists say about a caller with these identities (any of them may be missing)."""
        return self.access_of(
            [] if principal is None else [principal], [] if tenant is None else [tenant], ip
        )

    def access_of(self, principals: Iterable[str], tenants: Iterable[str], ip: IPAddress | None) -> Access:
        ip = None if ip is None else canonical(ip)
        principals, tenants = list(principals), list(tenants)
        if self._deny.matches(principals, tenants, ip):
            return Access.DENIED
        if self._allow.matches(principals, tenants, ip):
            return Access.ALLOWED
        return Access.LIMITED
