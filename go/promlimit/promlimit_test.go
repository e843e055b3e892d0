package promlimit_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	ratelimit "github.com/redis-ratelimit/redis-ratelimit/go"
	"github.com/redis-ratelimit/redis-ratelimit/go/httplimit"
	"github.com/redis-ratelimit/redis-ratelimit/go/internal/redistest"
	"github.com/redis-ratelimit/redis-ratelimit/go/promlimit"
	"github.com/redis/go-redis/v9"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func limiter(t *testing.T, addr string, failure ratelimit.FailurePolicy) *ratelimit.Limiter {
	return limiterWith(t, addr, ratelimit.Options{Failure: failure})
}

func limiterWith(t *testing.T, addr string, opts ratelimit.Options) *ratelimit.Limiter {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	opts.Logger, opts.Deadline = quiet, 5*time.Second // not about deadlines: a long one
	l, err := ratelimit.New(c, opts)
	must(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// Over real sockets: a middleware on the module (3 allowed, 2 denied, the second by the pre-check,
// a denylisted caller) and a limiter on a stopped server (failing open), scraped from /metrics as
// Prometheus would.
func TestMetricsOverHTTP(t *testing.T) {
	srv := redistest.Start(t, true)
	api := limiterWith(t, srv.Addr, ratelimit.Options{Failure: ratelimit.FailClosed(), LocalPrecheck: true})
	down := limiter(t, "127.0.0.1:1", ratelimit.FailOpen())
	keys := limiter(t, srv.Addr, ratelimit.FailClosed())
	reg := prometheus.NewRegistry()
	must(t, reg.Register(promlimit.NewCollector("keys", keys)))
	must(t, reg.Register(promlimit.NewCollector("api", api)))
	must(t, reg.Register(promlimit.NewCollector("down", down)))
	record, err := promlimit.HTTPRecorder(reg)
	must(t, err)
	lists := httplimit.NewAccessLists()
	lists.DenyPrincipal("mallory")
	mw, err := httplimit.New(httplimit.Config{
		Limiter: api, Logger: quiet, Record: record, Access: lists, PrincipalHeader: "X-User",
		Routes: []httplimit.Route{{Name: "search", Prefix: "/search", Policy: ratelimit.Must(ratelimit.TokenBucket(3, 0.01))}},
	})
	must(t, err)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "results") })))
	web := httptest.NewServer(mux)
	defer web.Close()
	for i := 0; i < 5; i++ {
		resp, err := http.Get(web.URL + "/search")
		must(t, err)
		resp.Body.Close()
	}
	req, _ := http.NewRequest("GET", web.URL+"/search", nil)
	req.Header.Set("X-User", "mallory")
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	resp.Body.Close()
	if d, _ := down.Check(context.Background(), "rl:{x}", ratelimit.Must(ratelimit.FixedWindow(5, time.Second)), 1); !d.Degraded || !d.Allowed {
		t.Fatalf("down: %+v", d)
	}
	// A conflict (a bucket's key checked as a window) and a usage error (an empty key).
	ctx := context.Background()
	_, _ = keys.Check(ctx, "rl:{c}", ratelimit.Must(ratelimit.TokenBucket(5, 1)), 1)
	if d, _ := keys.Check(ctx, "rl:{c}", ratelimit.Must(ratelimit.FixedWindow(5, time.Second)), 1); !d.Degraded {
		t.Fatalf("conflict: %+v", d)
	}
	if _, err := keys.Check(ctx, "", ratelimit.Must(ratelimit.FixedWindow(5, time.Second)), 1); err == nil {
		t.Fatal("an empty key was not refused")
	}
	resp, err = http.Get(web.URL + "/metrics")
	must(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(raw)
	for _, line := range []string{
		`ratelimit_http_requests_total{limit="search",outcome="allowed",route="search"} 3`,
		`ratelimit_http_requests_total{limit="search",outcome="denied",route="search"} 2`,
		`ratelimit_http_requests_total{limit="search",outcome="denylisted",route="search"} 1`,
		`ratelimit_client_decisions_total{limiter="api",outcome="allowed"} 3`,
		`ratelimit_client_decisions_total{limiter="api",outcome="denied"} 2`,
		`ratelimit_client_decisions_total{limiter="api",outcome="degraded_allowed"} 0`,
		`ratelimit_client_decisions_total{limiter="down",outcome="degraded_allowed"} 1`,
		`ratelimit_outages_total{limiter="down"} 1`,
		`ratelimit_outage_decisions_total{allowed="true",limiter="down"} 1`,
		`ratelimit_outages_total{limiter="api"} 0`,
		`ratelimit_breaker_open{limiter="api"} 0`,
		`ratelimit_engine_info{engine="the ratelimit module",limiter="api"} 1`,
		`ratelimit_engine_info{engine="not yet known",limiter="down"} 1`,
		`ratelimit_conflicts_total{limiter="keys"} 1`,
		`ratelimit_usage_errors_total{limiter="keys"} 1`,
		`ratelimit_outages_total{limiter="keys"} 0`,
		`ratelimit_conflicts_total{limiter="api"} 0`,
		`ratelimit_local_decisions_total{limiter="api"} 1`,
		`ratelimit_local_decisions_total{limiter="keys"} 0`,
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("no %s in\n%s", line, text)
		}
	}
}

// The core package and the middleware need nothing beyond go-redis: client_golang is this
// package's alone.
func TestTheCorePackageDoesNotImportPrometheus(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command(goBin, "list", "-deps", "github.com/redis-ratelimit/redis-ratelimit/go",
		"github.com/redis-ratelimit/redis-ratelimit/go/httplimit").Output()
	must(t, err)
	if strings.Contains(string(out), "prometheus") {
		t.Fatalf("the core packages import prometheus:\n%s", out)
	}
}
