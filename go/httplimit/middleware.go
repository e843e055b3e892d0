// Package httplimit is redis-ratelimit's net/http middleware: routes by whole-segment path
// prefixes, a per-caller global limit decided in the same atomic call, costs, skipped paths,
// shadow limits, concurrency limits held until the handler returns, callers by principal (from
// the request's context), header or IP (through trusted proxies only), and the same headers and
// 429 bodies as the Rust and Python layers, byte for byte.
package httplimit

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	ratelimit "github.com/redis-ratelimit/redis-ratelimit/go"
)

// Route is a limit on the paths under Prefix (by whole segments: /api covers /api and /api/x, not
// /apiary; a prefix ending in / covers what is below it).
type Route struct {
	// Name is the limit's name in its key, headers and metrics: one route's own among Routes (and
	// among Concurrency), and never the global limit's (New refuses both).
	Name   string
	Prefix string
	// Policy is the route's limit, per caller; PolicyFor, when set, picks it per caller instead.
	Policy    ratelimit.Policy
	PolicyFor func(Caller) ratelimit.Policy
	// Cost is what a request costs (default 1).
	Cost func(*http.Request) uint64
	// Shadow: counted and logged, never enforced (checked after the enforced limits allowed).
	Shadow bool
}

func (r Route) policy(c Caller) ratelimit.Policy {
	if r.PolicyFor != nil {
		return r.PolicyFor(c)
	}
	return r.Policy
}

// Config configures the middleware. Limiter is required, and at least one limit.
type Config struct {
	Limiter *ratelimit.Limiter
	// Routes: rate limits by path prefix (the first that matches). Concurrency: concurrency limits
	// (Policy a ratelimit.Concurrency) by path prefix, held until the handler returns.
	Routes      []Route
	Concurrency []Route
	// Global is a per-caller limit every limited request also takes, in the same call.
	Global *Route
	// Skip: paths never limited (a path ending in / skips what is below it).
	Skip []string
	// TrustedProxies: whose forwarding headers are believed (none by default).
	TrustedProxies TrustedProxies
	// IPv6Prefix: IPv6 callers are counted by their network of this many bits (contract default 64).
	IPv6Prefix int
	// PrincipalHeader, when set, names the request header whose value is the principal (for a
	// gateway that authenticates); WithPrincipal's context value comes first.
	PrincipalHeader string
	// CallerFunc replaces the caller choice (principal, tenant, IP).
	CallerFunc func(r *http.Request, ip netip.Addr) Caller
	// KeyPrefix of every key (default "rl"): <prefix>:{<caller>}:<route>:<kind's owner>, as the
	// contract's http.limit_key (rl:{user:42}:api:token_bucket).
	KeyPrefix string
	// Structured adds the draft's RateLimit-Policy and RateLimit fields.
	Structured bool
	// OutageStatus is the status of a closed failure policy's answer (default 429; 503 tells
	// callers an outage is not their overuse).
	OutageStatus int
	// Logger for shadow denials (default slog.Default()).
	Logger *slog.Logger
	// Access: allow and deny lists (NewAccessLists), changed while the middleware runs: an
	// allowlisted caller of a limited path is not limited, a denylisted one is refused with 403
	// before any call to Redis.
	Access *AccessLists
	// Record, when set, is told every decision: the route, the limit the decision describes (the
	// route's, the global one's, or the route's for the lists) and the outcome: allowed, denied,
	// degraded_allowed, degraded_denied, shadow_* for a shadow limit, allowlisted, denylisted. As
	// the Rust layer's ratelimit_http_requests_total{route, limit, outcome}; the promlimit
	// package counts them for Prometheus.
	Record func(route, limit, outcome string)
}

// outcomeOf is the outcome label of a decision.
func outcomeOf(d ratelimit.Decision, shadow bool) string {
	labels := [2][4]string{
		{"denied", "allowed", "degraded_denied", "degraded_allowed"},
		{"shadow_denied", "shadow_allowed", "shadow_degraded_denied", "shadow_degraded_allowed"},
	}
	row, i := 0, 0
	if shadow {
		row = 1
	}
	if d.Allowed {
		i++
	}
	if d.Degraded {
		i += 2
	}
	return labels[row][i]
}

func (m *middleware) record(route, limit, outcome string) {
	if m.cfg.Record != nil {
		m.cfg.Record(route, limit, outcome)
	}
}

// New returns the middleware.
func New(cfg Config) (func(http.Handler) http.Handler, error) {
	if cfg.Limiter == nil {
		return nil, errors.New("httplimit: Config.Limiter is required")
	}
	if len(cfg.Routes)+len(cfg.Concurrency) == 0 && cfg.Global == nil {
		return nil, errors.New("httplimit: no limits (Routes, Concurrency or Global)")
	}
	check := func(r Route, concurrency bool) error {
		if r.Name == "" {
			return errors.New("httplimit: a route needs a name")
		}
		if r.PolicyFor == nil && (!r.Policy.Valid() || r.Policy.IsConcurrency() != concurrency) {
			return fmt.Errorf("httplimit: route %q: not a %s policy: %v", r.Name, map[bool]string{true: "concurrency", false: "rate"}[concurrency], r.Policy)
		}
		return nil
	}
	// A name is a limit's key (<prefix>:{<caller>}:<name>:<kind>): two rate limits of one name
	// would send one key twice in one call, a usage error at every request. Refused here, as the
	// Rust, Python and Node.js layers do. A concurrency limit may share a rate route's name (its
	// key ends with "concurrency", and it is acquired in a call of its own).
	global := ""
	if cfg.Global != nil {
		if cfg.Global.Name == "" {
			g := *cfg.Global // the caller's Route is not changed
			g.Name = "all"
			cfg.Global = &g
		}
		if err := check(*cfg.Global, false); err != nil {
			return nil, err
		}
		global = cfg.Global.Name
	}
	for _, list := range []struct {
		routes      []Route
		concurrency bool
	}{{cfg.Routes, false}, {cfg.Concurrency, true}} {
		seen := map[string]bool{}
		for _, r := range list.routes {
			if err := check(r, list.concurrency); err != nil {
				return nil, err
			}
			if seen[r.Name] {
				return nil, fmt.Errorf("httplimit: route %q is given twice: a name is a limit's key; give each route its own", r.Name)
			}
			seen[r.Name] = true
			if !list.concurrency && r.Name == global {
				return nil, fmt.Errorf("httplimit: route %q: the name is the global limit's (Global.Name): one key twice in every call; give the route another", r.Name)
			}
		}
	}
	if cfg.IPv6Prefix == 0 {
		cfg.IPv6Prefix = names.Caller.IPv6PrefixDefault
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = "rl"
	}
	if cfg.OutageStatus == 0 {
		cfg.OutageStatus = http.StatusTooManyRequests
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &middleware{cfg: cfg}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
	}, nil
}

type middleware struct {
	cfg   Config
	usage usageLog
}

// underPrefix: path is prefix or below it, by whole segments.
func underPrefix(path, prefix string) bool {
	rest, ok := strings.CutPrefix(path, prefix)
	return ok && (rest == "" || strings.HasPrefix(rest, "/") || strings.HasSuffix(prefix, "/"))
}

type planned struct {
	limit ratelimit.Limit
	name  string
	route Route
}

// clientIP is the request's client address, read through trusted proxies only.
func (m *middleware) clientIP(r *http.Request) netip.Addr {
	var peer netip.Addr
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		peer, _ = netip.ParseAddr(host)
	}
	return m.cfg.TrustedProxies.ClientIP(peer, r.Header)
}

// access is what the lists say about the request: every principal and tenant it names (context,
// header, custom caller) and its client address.
func (m *middleware) access(r *http.Request, ip netip.Addr, c Caller) Access {
	var principals, tenants []string
	if p, ok := r.Context().Value(principalKey).(string); ok {
		principals = append(principals, p)
	}
	if t, ok := r.Context().Value(tenantKey).(string); ok {
		tenants = append(tenants, t)
	}
	if m.cfg.PrincipalHeader != "" {
		if p := r.Header.Get(m.cfg.PrincipalHeader); p != "" {
			principals = append(principals, p)
		}
	}
	switch c.Kind {
	case "user":
		principals = append(principals, c.ID)
	case "tenant":
		tenants = append(tenants, c.ID)
	}
	return m.cfg.Access.accessOf(principals, tenants, ip)
}

func (m *middleware) caller(r *http.Request, ip netip.Addr) Caller {
	if ip.IsValid() {
		ip = GroupIP(ip, m.cfg.IPv6Prefix)
	}
	if m.cfg.CallerFunc != nil {
		return m.cfg.CallerFunc(r, ip)
	}
	if p, ok := r.Context().Value(principalKey).(string); ok {
		return Principal(p)
	}
	if t, ok := r.Context().Value(tenantKey).(string); ok {
		return Tenant(t)
	}
	if m.cfg.PrincipalHeader != "" {
		if p := r.Header.Get(m.cfg.PrincipalHeader); p != "" {
			return Principal(p)
		}
	}
	if ip.IsValid() {
		return IP(ip)
	}
	return Unknown()
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	path := r.URL.Path
	for _, s := range m.cfg.Skip {
		if path == s || (strings.HasSuffix(s, "/") && strings.HasPrefix(path, s)) {
			next.ServeHTTP(w, r)
			return
		}
	}
	var route, conc *Route
	for i := range m.cfg.Routes {
		if underPrefix(path, m.cfg.Routes[i].Prefix) {
			route = &m.cfg.Routes[i]
			break
		}
	}
	for i := range m.cfg.Concurrency {
		if underPrefix(path, m.cfg.Concurrency[i].Prefix) {
			conc = &m.cfg.Concurrency[i]
			break
		}
	}
	if route == nil && conc == nil && m.cfg.Global == nil {
		next.ServeHTTP(w, r)
		return
	}
	routeName := m.cfg.Global.nameOr("all")
	if route != nil {
		routeName = route.Name
	} else if conc != nil {
		routeName = conc.Name
	}
	ip := m.clientIP(r)
	caller := m.caller(r, ip)
	if m.cfg.Access != nil {
		switch m.access(r, ip, caller) {
		case Denylisted:
			m.record(routeName, routeName, "denylisted")
			Forbidden().Write(w)
			return
		case Allowlisted:
			m.record(routeName, routeName, "allowlisted")
			next.ServeHTTP(w, r)
			return
		}
	}
	tag := caller.Tag(m.cfg.KeyPrefix)
	cost := uint64(1)
	if route != nil && route.Cost != nil {
		cost = route.Cost(r)
	}
	// Each limit's key ends with its kind's owner (the contract's http.limit_key): a deploy that
	// changes a limit's kind starts it afresh, one that changes its numbers carries on.
	plan := func(r *Route, cost uint64) planned {
		p := r.policy(caller)
		return planned{ratelimit.Limit{Key: ratelimit.LimitKey(tag, r.Name, p), Policy: p, Cost: cost}, r.Name, *r}
	}
	var limits []planned
	if route != nil {
		limits = append(limits, plan(route, cost))
	}
	if g := m.cfg.Global; g != nil {
		limits = append(limits, plan(g, cost))
	}
	if conc != nil { // a request in flight weighs 1, whatever its rate cost
		limits = append(limits, plan(conc, 1))
	}
	var enforced, shadow []planned
	for _, p := range limits {
		if p.route.Shadow {
			shadow = append(shadow, p)
		} else {
			enforced = append(enforced, p)
		}
	}
	ctx := r.Context()
	redisAnswered := true
	if len(enforced) > 0 {
		calls := make([]ratelimit.Limit, len(enforced))
		hasConc := false
		for i, p := range enforced {
			calls[i] = p.limit
			hasConc = hasConc || p.limit.Policy.IsConcurrency()
		}
		var d ratelimit.Decision
		var permit *ratelimit.Permit
		var err error
		if hasConc {
			permit, d, err = m.cfg.Limiter.AcquireAll(ctx, calls...)
		} else {
			d, err = m.cfg.Limiter.CheckAll(ctx, calls...)
		}
		if err != nil { // a usage error: the application's bug, never a decision
			m.usageError(w, routeName, tag, err, false)
			return
		}
		limiting := enforced[min(d.Limiting, len(enforced)-1)]
		m.record(routeName, limiting.name, outcomeOf(d, false))
		if !d.Allowed {
			closed := d.Degraded && m.cfg.Limiter.FailurePolicy().IsClosed()
			if closed { // none could be checked: name the route's own limit
				for _, p := range enforced {
					if p.name == routeName {
						limiting = p
						break
					}
				}
			}
			desc := describe(limiting)
			var a Answer
			switch {
			case closed:
				a = Unavailable(d, desc, m.cfg.Structured, m.cfg.OutageStatus, m.cfg.Limiter.Misconfigured())
			case limiting.limit.Policy.IsConcurrency():
				a = ConcurrencyLimited(d, desc)
			default:
				a = Denied(d, desc, m.cfg.Structured)
			}
			a.Write(w)
			return
		}
		redisAnswered = !d.Degraded
		if permit != nil {
			defer func() { _, _ = permit.Release(ctx) }()
		}
		if !limiting.limit.Policy.IsConcurrency() {
			for _, kv := range ServedHeaders(d, describe(limiting), m.cfg.Structured) {
				w.Header()[kv[0]] = []string{kv[1]}
			}
		}
	}
	if len(shadow) > 0 && redisAnswered {
		calls := make([]ratelimit.Limit, len(shadow))
		for i, p := range shadow {
			calls[i] = p.limit
		}
		d, err := m.cfg.Limiter.CheckAll(ctx, calls...)
		p := shadow[min(d.Limiting, len(shadow)-1)]
		if err != nil {
			m.usageError(w, routeName, tag, err, true)
		} else {
			m.record(routeName, p.name, outcomeOf(d, true))
		}
		if err == nil && !d.Allowed && !d.Degraded {
			m.cfg.Logger.Info("httplimit: shadow limit would have denied a request (served: shadow limits are not enforced)",
				"route", routeName, "limit", p.name, "key", p.limit.Key)
		}
	}
	next.ServeHTTP(w, r)
}

func (r *Route) nameOr(def string) string {
	if r == nil {
		return def
	}
	return r.Name
}

func describe(p planned) Described {
	return Described{
		Name:       p.name,
		WindowSecs: max(1, int64(p.limit.Policy.Period()/time.Second)),
		Cost:       p.limit.Cost,
		Rate:       !p.limit.Policy.IsConcurrency(),
	}
}
