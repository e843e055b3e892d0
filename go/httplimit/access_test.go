package httplimit_test

import (
	"io"
	"net/http"
	"net/netip"
	"testing"
	"time"

	ratelimit "github.com/redis-ratelimit/redis-ratelimit/go"
	"github.com/redis-ratelimit/redis-ratelimit/go/httplimit"
	"github.com/redis-ratelimit/redis-ratelimit/go/internal/redistest"
)

// The Rust layer's AccessLists rules: the deny list wins, allowing takes off the deny list and the
// other way round, networks kept masked, IPv4-mapped addresses matched as IPv4.
func TestAccessLists(t *testing.T) {
	lists := httplimit.NewAccessLists()
	ip := netip.MustParseAddr("10.1.2.3")
	if a := lists.Access("", "", ip); a != httplimit.Limited {
		t.Fatalf("empty lists: %v", a)
	}
	lists.AllowNetwork(netip.MustParsePrefix("10.1.2.3/8")) // kept as 10.0.0.0/8
	lists.DenyPrincipal("mallory")
	if a := lists.Access("", "", ip); a != httplimit.Allowlisted {
		t.Fatalf("our own network: %v", a)
	}
	if a := lists.Access("", "", netip.MustParseAddr("::ffff:10.9.9.9")); a != httplimit.Allowlisted {
		t.Fatalf("an IPv4-mapped address: %v", a)
	}
	if a := lists.Access("mallory", "", ip); a != httplimit.Denylisted {
		t.Fatalf("a denied principal from an allowed network: %v", a)
	}
	lists.AllowPrincipal("mallory") // off the deny list
	if a := lists.Access("mallory", "", netip.Addr{}); a != httplimit.Allowlisted {
		t.Fatalf("allowed again: %v", a)
	}
	lists.RemovePrincipal("mallory")
	if a := lists.Access("mallory", "", netip.Addr{}); a != httplimit.Limited {
		t.Fatalf("removed: %v", a)
	}
	lists.DenyTenant("acme")
	lists.DenyNetwork(netip.MustParsePrefix("10.0.0.0/8")) // moves the network to the deny list
	if lists.Access("", "acme", netip.Addr{}) != httplimit.Denylisted || lists.Access("", "", ip) != httplimit.Denylisted {
		t.Fatal("denied tenant and network")
	}
	lists.RemoveNetwork(netip.MustParsePrefix("10.200.0.0/8"))
	if lists.Access("", "", ip) != httplimit.Limited {
		t.Fatal("the network was removed by the same network written otherwise")
	}
	lists.RemoveTenant("acme")
	if lists.Access("", "acme", netip.Addr{}) != httplimit.Limited {
		t.Fatal("tenant removed")
	}
}

// Over a real socket, on a server that is stopped: the lists decide before any call to Redis. An
// allowlisted caller is served unlimited (no RateLimit fields), a denylisted one gets 403 with the
// Rust layer's body byte for byte, the others the closed policy's unavailable answer; the lists
// change while the middleware runs.
func TestMiddlewareAccessLists(t *testing.T) {
	rs := redistest.Start(t, true)
	lists := httplimit.NewAccessLists()
	lists.AllowPrincipal("ops")
	lists.DenyPrincipal("mallory")
	proxies, err := httplimit.ParseTrustedProxies("127.0.0.1/32")
	must(t, err)
	srv := serve(t, rs.Addr, ratelimit.FailClosed(), httplimit.Config{
		Routes:         []httplimit.Route{{Name: "api", Prefix: "/api", Policy: ratelimit.Must(ratelimit.TokenBucket(10, 1))}},
		TrustedProxies: proxies,
		Access:         lists,
	}, ok)
	rs.Stop()
	start := time.Now()
	r, _ := get(t, srv.URL+"/api/x", "X-User", "ops")
	if r.StatusCode != 200 || r.Header.Get("Ratelimit-Limit") != "" {
		t.Fatalf("allowlisted: %d %v", r.StatusCode, r.Header)
	}
	req, _ := http.NewRequest("GET", srv.URL+"/api/x", nil)
	req.Header.Set("X-User", "mallory")
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	const body = `{"detail":"requests from this caller are refused","status":403,"title":"Forbidden","type":"urn:redis-ratelimit:denied"}`
	if resp.StatusCode != 403 || string(raw) != body || resp.Header.Get("Content-Type") != "application/problem+json" ||
		resp.Header.Get("Retry-After") != "" {
		t.Fatalf("denylisted: %d %v %s", resp.StatusCode, resp.Header, raw)
	}
	if took := time.Since(start); took > 400*time.Millisecond {
		t.Fatalf("the lists waited for Redis: %v", took)
	}
	if r, body := get(t, srv.URL+"/api/x", "X-User", "ada"); r.StatusCode != 429 || body["type"] != ratelimit.HTTP().ProblemTypes.Unavailable {
		t.Fatalf("limited during the outage: %d %v", r.StatusCode, body)
	}
	lists.DenyNetwork(netip.MustParsePrefix("203.0.113.0/24"))
	if r, _ := get(t, srv.URL+"/api/x", "X-Forwarded-For", "203.0.113.7"); r.StatusCode != 403 {
		t.Fatalf("a denied network through the trusted proxy: %d", r.StatusCode)
	}
	if r, _ := get(t, srv.URL+"/elsewhere", "X-User", "mallory"); r.StatusCode != 200 {
		t.Fatalf("a path without limits is not refused: %d", r.StatusCode)
	}
}
