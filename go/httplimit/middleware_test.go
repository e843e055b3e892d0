package httplimit_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimit "github.com/redis-ratelimit/redis-ratelimit/go"
	"github.com/redis-ratelimit/redis-ratelimit/go/httplimit"
	"github.com/redis-ratelimit/redis-ratelimit/go/internal/redistest"
	"github.com/redis/go-redis/v9"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func serve(t *testing.T, addr string, failure ratelimit.FailurePolicy, cfg httplimit.Config, h http.Handler) *httptest.Server {
	t.Helper()
	if cfg.Limiter == nil {
		cfg.Limiter = newLimiter(t, addr, failure)
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	mw, err := httplimit.New(cfg)
	must(t, err)
	// An authentication middleware in front: X-User is the principal.
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u := r.Header.Get("X-User"); u != "" {
				r = r.WithContext(httplimit.WithPrincipal(r.Context(), u))
			}
			next.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(auth(mw(h)))
	t.Cleanup(srv.Close)
	return srv
}

func newLimiter(t *testing.T, addr string, failure ratelimit.FailurePolicy) *ratelimit.Limiter {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	l, err := ratelimit.New(c, ratelimit.Options{Failure: failure, Logger: quiet, Deadline: 5 * time.Second}) // not about deadlines: a long one
	must(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func get(t *testing.T, url string, headers ...string) (*http.Response, map[string]any) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	must(t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	return resp, body
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })

// Over real sockets on the module: routes by whole segments, the global per-caller limit in the
// same call, costs, skips, callers by principal and by IP through a trusted proxy.
func TestMiddleware(t *testing.T) {
	rs := redistest.Start(t, true)
	proxies, err := httplimit.ParseTrustedProxies("127.0.0.1/32")
	must(t, err)
	srv := serve(t, rs.Addr, ratelimit.FailClosed(), httplimit.Config{
		Routes: []httplimit.Route{
			{Name: "api", Prefix: "/api", Policy: ratelimit.Must(ratelimit.TokenBucket(10, 0.01))},
			{Name: "export", Prefix: "/export", Policy: ratelimit.Must(ratelimit.FixedWindow(10, time.Minute)),
				Cost: func(*http.Request) uint64 { return 5 }},
		},
		Global:         &httplimit.Route{Policy: ratelimit.Must(ratelimit.FixedWindow(15, time.Minute))},
		Skip:           []string{"/api/health"},
		TrustedProxies: proxies,
		Structured:     true,
	}, ok)
	// Requests 1, 10, 11, 12 of one caller on /api (the seed's lab).
	var codes []int
	var last *http.Response
	var body map[string]any
	for i := 1; i <= 12; i++ {
		last, body = get(t, srv.URL+"/api/items", "X-User", "ada")
		codes = append(codes, last.StatusCode)
	}
	want := []int{200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 429, 429}
	for i := range want {
		if codes[i] != want[i] {
			t.Fatalf("codes %v", codes)
		}
	}
	if last.Header.Get("Retry-After") == "" || last.Header.Get("Ratelimit-Limit") != "10" || body["type"] != ratelimit.HTTP().ProblemTypes.RateLimited ||
		last.Header.Get("Ratelimit-Policy") == "" {
		t.Fatalf("denial: %v %v", last.Header, body)
	}
	// Skipped, and a path that only shares letters with the prefix: not /api's limit.
	if r, _ := get(t, srv.URL+"/api/health", "X-User", "ada"); r.StatusCode != 200 || r.Header.Get("Ratelimit-Limit") != "" {
		t.Fatalf("skip: %v", r.Header)
	}
	// /apiary is not under /api: only the global limit (15, of which ada used 10) describes it.
	r, _ := get(t, srv.URL+"/apiary", "X-User", "ada")
	if r.StatusCode != 200 || r.Header.Get("Ratelimit-Limit") != "15" || r.Header.Get("Ratelimit-Remaining") != "4" {
		t.Fatalf("/apiary: %d %v", r.StatusCode, r.Header)
	}
	// Costs: export costs 5 of its 10 and of the global 15 (ada has 4 left there): the global denies.
	r, body = get(t, srv.URL+"/export", "X-User", "ada")
	if r.StatusCode != 429 || body["limit"] != "all" {
		t.Fatalf("export for ada: %d %v", r.StatusCode, body)
	}
	// Another caller is untouched; by IP through the trusted proxy (the loopback peer).
	r, _ = get(t, srv.URL+"/export", "X-Forwarded-For", "203.0.113.7")
	if r.StatusCode != 200 || r.Header.Get("Ratelimit-Remaining") != "5" {
		t.Fatalf("export by IP: %d %v", r.StatusCode, r.Header)
	}
	keys, err := rs.Client(t).Keys(context.Background(), "rl:{ip:203.0.113.7}:*").Result()
	must(t, err)
	sort.Strings(keys)
	if !reflect.DeepEqual(keys, []string{"rl:{ip:203.0.113.7}:all:fixed_window", "rl:{ip:203.0.113.7}:export:fixed_window"}) {
		t.Fatalf("keys of the forwarded client: %v", keys)
	}
}

// A deploy changes the kind of a route's limit (same name) on a live server: the new kind starts
// afresh on its own key, no conflict, no degraded decision; a later deploy that changes only the
// numbers carries on with the count.
func TestAChangeOfKindStartsAfresh(t *testing.T) {
	rs := redistest.Start(t, true)
	record, outcomes := countOutcomes()
	deploy := func(p ratelimit.Policy) *httptest.Server {
		return serve(t, rs.Addr, ratelimit.FailClosed(), httplimit.Config{Record: record,
			Routes: []httplimit.Route{{Name: "api", Prefix: "/api", Policy: p}}}, ok)
	}
	statuses := func(srv *httptest.Server, n int) (out []int) {
		for i := 0; i < n; i++ {
			r, _ := get(t, srv.URL+"/api", "X-User", "ada")
			out = append(out, r.StatusCode)
		}
		return out
	}
	first := deploy(ratelimit.Must(ratelimit.TokenBucket(3, 0.001)))
	if got := statuses(first, 2); !reflect.DeepEqual(got, []int{200, 200}) {
		t.Fatalf("the bucket: %v", got)
	}
	second := deploy(ratelimit.Must(ratelimit.FixedWindow(2, time.Hour)))
	if got := statuses(second, 3); !reflect.DeepEqual(got, []int{200, 200, 429}) {
		t.Fatalf("the window, after the bucket: %v (outcomes %v)", got, outcomes())
	}
	third := deploy(ratelimit.Must(ratelimit.TokenBucket(4, 0.001))) // numbers only: carries on (2 used of 4)
	if got := statuses(third, 3); !reflect.DeepEqual(got, []int{200, 200, 429}) {
		t.Fatalf("the bucket's new numbers: %v", got)
	}
	if o := outcomes(); o["degraded_allowed"]+o["degraded_denied"] != 0 || o["allowed"] != 6 || o["denied"] != 2 {
		t.Fatalf("outcomes %v", o)
	}
}

// countOutcomes is a Config.Record that counts outcomes, and a snapshot of the counts.
func countOutcomes() (func(route, limit, outcome string), func() map[string]int) {
	var mu sync.Mutex
	counts := map[string]int{}
	record := func(_, _, outcome string) {
		mu.Lock()
		defer mu.Unlock()
		counts[outcome]++
	}
	snapshot := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(counts)
	}
	return record, snapshot
}

// Concurrency permits are held until the handler returns; a closed failure policy on a stopped
// server answers the unavailable problem.
func TestMiddlewareConcurrencyAndOutage(t *testing.T) {
	rs := redistest.Start(t, false) // stock: the library through FCALL
	release := make(chan struct{})
	var inside atomic.Int32
	srv := serve(t, rs.Addr, ratelimit.FailClosed(), httplimit.Config{
		Concurrency: []httplimit.Route{{Name: "slow", Prefix: "/slow", Policy: ratelimit.Must(ratelimit.Concurrency(2, 5*time.Second))}},
	}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside.Add(1)
		<-release
	}))
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); get(t, srv.URL+"/slow", "X-User", "bob") }()
	}
	for inside.Load() < 2 {
		time.Sleep(5 * time.Millisecond)
	}
	r, body := get(t, srv.URL+"/slow", "X-User", "bob")
	if r.StatusCode != 429 || body["type"] != ratelimit.HTTP().ProblemTypes.ConcurrencyLimited {
		t.Fatalf("third in flight: %d %v", r.StatusCode, body)
	}
	close(release)
	wg.Wait()
	if r, _ := get(t, srv.URL+"/slow", "X-User", "bob"); r.StatusCode != 200 {
		t.Fatalf("after the two returned: %d", r.StatusCode)
	}
	rs.Stop()
	r, body = get(t, srv.URL+"/slow", "X-User", "bob")
	if r.StatusCode != 429 || body["type"] != ratelimit.HTTP().ProblemTypes.Unavailable {
		t.Fatalf("stopped server, fail closed: %d %v", r.StatusCode, body)
	}
}

// A limit the limiter refuses to check (a sliding log given a Cost of 2, a PolicyFor that returns
// no policy, for an enforced or a shadow route) is the application's bug: 500, never the failure
// policy's decision (fail open would let it through unlimited), no decision recorded, one error
// line per cause however many requests and callers meet it.
func TestAUsageErrorIsAnswered500(t *testing.T) {
	rs := redistest.Start(t, true)
	record, outcomes := countOutcomes()
	var mu sync.Mutex
	var logs strings.Builder
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	l := newLimiter(t, rs.Addr, ratelimit.FailOpen())
	var served atomic.Int32
	srv := serve(t, rs.Addr, ratelimit.FailOpen(), httplimit.Config{Limiter: l, Logger: logger, Record: record,
		Routes: []httplimit.Route{
			{Name: "search", Prefix: "/search", Policy: ratelimit.Must(ratelimit.SlidingLog(10, time.Minute)),
				Cost: func(*http.Request) uint64 { return 2 }},
			{Name: "plan", Prefix: "/plan", PolicyFor: func(httplimit.Caller) ratelimit.Policy { return ratelimit.Policy{} }},
			{Name: "shadow", Prefix: "/shadow", Shadow: true, PolicyFor: func(httplimit.Caller) ratelimit.Policy { return ratelimit.Policy{} }},
		}}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) }))
	for _, user := range []string{"ada", "bob", "cy\"quote"} {
		for _, path := range []string{"/search", "/plan"} {
			for i := 0; i < 2; i++ {
				if r, _ := get(t, srv.URL+path, "X-User", user); r.StatusCode != 500 {
					t.Fatalf("%s as %s: %d, want 500", path, user, r.StatusCode)
				}
			}
		}
		if r, _ := get(t, srv.URL+"/shadow", "X-User", user); r.StatusCode != 200 {
			t.Fatalf("a shadow route's bug as %s: %d, want it served", user, r.StatusCode)
		}
	}
	if served.Load() != 3 {
		t.Fatalf("%d requests served, want the 3 to the shadow route", served.Load())
	}
	n := l.Counts()
	if n.UsageErrors != 15 || n.Degraded != 0 || n.Decisions != 0 {
		t.Fatalf("counts %+v", n)
	}
	if o := outcomes(); len(o) != 0 {
		t.Fatalf("outcomes recorded: %v", o)
	}
	mu.Lock()
	defer mu.Unlock()
	out := logs.String()
	if strings.Count(out, "level=ERROR") != 3 || !strings.Contains(out, "route=search") || !strings.Contains(out, "route=plan") ||
		!strings.Contains(out, "route=shadow") || !strings.Contains(out, "sliding log") {
		t.Fatalf("logs:\n%s", out)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A route named like the global limit, or two routes of one name, would send one key twice in
// every call (a 500 at each request): New refuses them, as the Rust, Python and Node.js layers do.
// A concurrency limit may share a rate route's name (another key, another call).
func TestNewRefusesANameGivenTwice(t *testing.T) {
	l := newLimiter(t, "127.0.0.1:1", ratelimit.FailOpen()) // New sends nothing
	bucket := ratelimit.Must(ratelimit.TokenBucket(10, 1))
	window := ratelimit.Must(ratelimit.FixedWindow(100, time.Hour))
	slots := ratelimit.Must(ratelimit.Concurrency(2, time.Minute))
	refused := []struct {
		name string
		cfg  httplimit.Config
		want string
	}{
		{"the default global name", httplimit.Config{Routes: []httplimit.Route{{Name: "all", Prefix: "/all", Policy: window}},
			Global: &httplimit.Route{Policy: window}},
			`httplimit: route "all": the name is the global limit's (Global.Name): one key twice in every call; give the route another`},
		{"a global limit named", httplimit.Config{Routes: []httplimit.Route{{Name: "api", Prefix: "/api", Policy: bucket}},
			Global: &httplimit.Route{Name: "api", Policy: bucket}},
			`httplimit: route "api": the name is the global limit's (Global.Name): one key twice in every call; give the route another`},
		{"two routes", httplimit.Config{Routes: []httplimit.Route{{Name: "api", Prefix: "/api", Policy: bucket},
			{Name: "api", Prefix: "/v2", Policy: bucket}}},
			`httplimit: route "api" is given twice: a name is a limit's key; give each route its own`},
		{"two concurrency limits", httplimit.Config{Concurrency: []httplimit.Route{{Name: "up", Prefix: "/up", Policy: slots},
			{Name: "up", Prefix: "/upload", Policy: slots}}},
			`httplimit: route "up" is given twice: a name is a limit's key; give each route its own`},
	}
	for _, c := range refused {
		c.cfg.Limiter = l
		if _, err := httplimit.New(c.cfg); err == nil || err.Error() != c.want {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	global := &httplimit.Route{Policy: window}
	if _, err := httplimit.New(httplimit.Config{Limiter: l, Global: global,
		Routes:      []httplimit.Route{{Name: "api", Prefix: "/api", Policy: bucket}},
		Concurrency: []httplimit.Route{{Name: "api", Prefix: "/api", Policy: slots}, {Name: "all", Prefix: "/", Policy: slots}}}); err != nil {
		t.Fatalf("a concurrency limit sharing a rate limit's name: %v", err)
	}
	if global.Name != "" {
		t.Fatalf("New changed the caller's Global: %q", global.Name)
	}
}
