package httplimit

import (
	"net/netip"
	"slices"
	"sync"
)

// Access is what the allow and deny lists say about a caller.
type Access int

const (
	// Limited: on neither list, limited as usual.
	Limited Access = iota
	// Allowlisted: on the allow list (and not on the deny list): not limited.
	Allowlisted
	// Denylisted: on the deny list, whatever the allow list says: refused with 403 before any
	// call to Redis.
	Denylisted
)

func (a Access) String() string {
	return [...]string{"limited", "allowlisted", "denylisted"}[a]
}

// AccessLists are allow and deny lists by principal, tenant or network, which the application
// changes while the middleware runs (safe for concurrent use; share one *AccessLists). A caller is
// matched by every identity its request has: its principal (WithPrincipal, PrincipalHeader, a
// CallerFunc's), its tenant, and its client address as the trusted-proxy rule resolved it (not
// grouped per /64; an IPv4-mapped address as IPv4). The deny list wins. Allowing an identity takes
// it off the deny list and denying it takes it off the allow list; networks are kept as networks
// (10.1.2.3/8 is 10.0.0.0/8). As the Rust layer's AccessLists.
type AccessLists struct {
	mu          sync.RWMutex
	allow, deny accessList
}

type accessList struct {
	principals, tenants map[string]bool
	networks            []netip.Prefix
}

func (l *accessList) matches(principals, tenants []string, ip netip.Addr) bool {
	for _, p := range principals {
		if l.principals[p] {
			return true
		}
	}
	for _, t := range tenants {
		if l.tenants[t] {
			return true
		}
	}
	if ip.IsValid() {
		for _, n := range l.networks {
			if n.Contains(ip) {
				return true
			}
		}
	}
	return false
}

// NewAccessLists are empty lists: every caller is limited.
func NewAccessLists() *AccessLists { return &AccessLists{} }

const (
	principalID = iota
	tenantID
)

func (a *AccessLists) put(kind int, id string, allow bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	to, from := &a.deny, &a.allow
	if allow {
		to, from = from, to
	}
	for _, l := range []*accessList{to, from} {
		if l.principals == nil {
			l.principals, l.tenants = map[string]bool{}, map[string]bool{}
		}
	}
	set := func(l *accessList) map[string]bool {
		if kind == principalID {
			return l.principals
		}
		return l.tenants
	}
	delete(set(from), id)
	set(to)[id] = true
}

func (a *AccessLists) putNetwork(n netip.Prefix, allow bool) {
	n = canonical(n)
	a.mu.Lock()
	defer a.mu.Unlock()
	to, from := &a.deny, &a.allow
	if allow {
		to, from = from, to
	}
	from.networks = slices.DeleteFunc(from.networks, func(x netip.Prefix) bool { return x == n })
	if !slices.Contains(to.networks, n) {
		to.networks = append(to.networks, n)
	}
}

// canonical is a network as the lists keep it: masked (10.1.2.3/8 is 10.0.0.0/8), an IPv4-mapped
// one (::ffff:10.0.0.0/104) as IPv4.
func canonical(n netip.Prefix) netip.Prefix {
	if n.Addr().Is4In6() && n.Bits() >= 96 {
		n = netip.PrefixFrom(n.Addr().Unmap(), n.Bits()-96)
	}
	return n.Masked()
}

// AllowPrincipal: principal p is not limited.
func (a *AccessLists) AllowPrincipal(p string) { a.put(principalID, p, true) }

// AllowTenant: tenant t is not limited.
func (a *AccessLists) AllowTenant(t string) { a.put(tenantID, t, true) }

// AllowNetwork: callers from n (a single address is a /32 or /128) are not limited.
func (a *AccessLists) AllowNetwork(n netip.Prefix) { a.putNetwork(n, true) }

// DenyPrincipal: principal p is refused (403).
func (a *AccessLists) DenyPrincipal(p string) { a.put(principalID, p, false) }

// DenyTenant: tenant t is refused (403).
func (a *AccessLists) DenyTenant(t string) { a.put(tenantID, t, false) }

// DenyNetwork: callers from n are refused (403).
func (a *AccessLists) DenyNetwork(n netip.Prefix) { a.putNetwork(n, false) }

// RemovePrincipal takes p off both lists: limited as usual again.
func (a *AccessLists) RemovePrincipal(p string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.allow.principals, p)
	delete(a.deny.principals, p)
}

// RemoveTenant takes t off both lists.
func (a *AccessLists) RemoveTenant(t string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.allow.tenants, t)
	delete(a.deny.tenants, t)
}

// RemoveNetwork takes n off both lists (the same network: an address inside it stays covered by
// any other listed network that holds it).
func (a *AccessLists) RemoveNetwork(n netip.Prefix) {
	n = canonical(n)
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, l := range []*accessList{&a.allow, &a.deny} {
		l.networks = slices.DeleteFunc(l.networks, func(x netip.Prefix) bool { return x == n })
	}
}

// Access is what the lists say about a caller with these identities ("" and the zero Addr for
// missing ones).
func (a *AccessLists) Access(principal, tenant string, ip netip.Addr) Access {
	var ps, ts []string
	if principal != "" {
		ps = []string{principal}
	}
	if tenant != "" {
		ts = []string{tenant}
	}
	return a.accessOf(ps, ts, ip)
}

func (a *AccessLists) accessOf(principals, tenants []string, ip netip.Addr) Access {
	if a == nil {
		return Limited
	}
	ip = ip.Unmap()
	a.mu.RLock()
	defer a.mu.RUnlock()
	switch {
	case a.deny.matches(principals, tenants, ip):
		return Denylisted
	case a.allow.matches(principals, tenants, ip):
		return Allowlisted
	}
	return Limited
}

// Forbidden is the answer to a caller on the deny list: 403 with its own problem type, nothing to
// wait for (no Retry-After, no RateLimit-* fields).
func Forbidden() Answer {
	body := map[string]any{"status": 403}
	problemTexts(body, names.ProblemTypes.Denied, names.Problems.Denied, nil)
	return problem(403, body, &headerSet{})
}
