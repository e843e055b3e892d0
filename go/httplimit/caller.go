package httplimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"strings"
)

// Caller is who a request is counted against: a principal, a tenant, an IP address (read through
// trusted proxies only), or unknown (all such requests share one key).
type Caller struct {
	Kind string // "user", "tenant", "ip", "unknown"
	ID   string
}

// Principal is an authenticated principal's caller.
func Principal(id string) Caller { return Caller{"user", id} }

// Tenant is a tenant's caller.
func Tenant(id string) Caller { return Caller{"tenant", id} }

// IP is an address's caller.
func IP(a netip.Addr) Caller { return Caller{"ip", a.String()} }

// Unknown is the caller of a request without principal, tenant or address.
func Unknown() Caller { return Caller{Kind: "unknown"} }

// String is the caller as written: user:ada, tenant:acme, ip:203.0.113.7, unknown.
func (c Caller) String() string {
	if c.Kind == "unknown" {
		return "unknown"
	}
	return c.Kind + ":" + c.ID
}

// KeyPart is the caller's part of its keys, the whole of their hash tag: kind:id when it holds no
// brace and fits; kind.esc:<escaped id> when it has braces and fits escaped; kind.sha256:<hex>
// otherwise (the contract's caller forms, bound and escapes).
func (c Caller) KeyPart() string {
	if c.Kind != "user" && c.Kind != "tenant" {
		return c.String()
	}
	maxBytes, markers := names.Caller.MaxPartBytes, names.Caller.Markers
	if len(c.Kind)+len(markers.Plain)+len(c.ID) <= maxBytes {
		if !strings.ContainsAny(c.ID, "{}") {
			return c.Kind + markers.Plain + c.ID
		}
		extra := 0
		for from, to := range names.Caller.Escapes {
			extra += strings.Count(c.ID, from) * (len(to) - len(from))
		}
		if len(c.Kind)+len(markers.Escaped)+len(c.ID)+extra <= maxBytes {
			// % first, so the escapes' own % are not escaped again.
			escaped := strings.ReplaceAll(c.ID, "%", names.Caller.Escapes["%"])
			for from, to := range names.Caller.Escapes {
				if from != "%" {
					escaped = strings.ReplaceAll(escaped, from, to)
				}
			}
			return c.Kind + markers.Escaped + escaped
		}
	}
	sum := sha256.Sum256([]byte(c.ID))
	return c.Kind + markers.Hashed + hex.EncodeToString(sum[:])
}

// Tag is <prefix>:{<key part>}, the start of every key of the caller.
func (c Caller) Tag(prefix string) string { return prefix + ":{" + c.KeyPart() + "}" }

// GroupIP is the address a caller is counted under: IPv4 as it is (also written IPv4-mapped),
// IPv6 as its network of prefix bits.
func GroupIP(a netip.Addr, prefix int) netip.Addr {
	a = a.Unmap().WithZone("")
	if a.Is6() {
		p, err := a.Prefix(max(0, min(prefix, 128)))
		if err == nil {
			return p.Addr()
		}
	}
	return a
}

type ctxKey int

const (
	principalKey ctxKey = iota
	tenantKey
)

// WithPrincipal names the authenticated principal of a request, for the middleware that runs
// after (an authentication middleware calls r.WithContext(httplimit.WithPrincipal(ctx, id))).
func WithPrincipal(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, principalKey, id)
}

// WithTenant names the tenant of a request, like WithPrincipal.
func WithTenant(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, tenantKey, id)
}
