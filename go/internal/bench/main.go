// Command bench writes docs/bench-go.md (scripts/go.sh bench, make bench): net/http servers in this
// process, each behind one rate limiting middleware, loaded by wrk over loopback, all deciding on
// one module-enabled Redis (-redis):
//
//   - no limiter (the handler alone: the ceiling);
//   - httplimit on the module (RL.TOKEN) and on the Lua library (FCALL rl_token);
//   - redisrate, this package's drop-in for redis_rate, on the module;
//   - go-redis/redis_rate v10 (its own GCRA script) behind the same middleware shape;
//   - the seed's token-bucket Lua script (EVALSHA) behind the same middleware shape;
//   - and, in process, one hot key checked by 2 limiters per call, with the pre-check and with
//     batched units (volume.go).
//
// The hand-written middlewares do what httplimit does for one route: the caller from the peer's
// address, one call with a deadline, the same headers (httplimit.ServedHeaders) and 429 answer
// (httplimit.Denied), failing open. Every limit is far above the load, so every request is allowed
// and each row measures the cost of a decision. Rounds are interleaved (each round in the other
// order than the one before) and each row's median round is shown. Allocations per decision and
// per request are measured in process with testing.Benchmark.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	ratelimit "github.com/redis-ratelimit/redis-ratelimit/go"
	"github.com/redis-ratelimit/redis-ratelimit/go/httplimit"
	"github.com/redis-ratelimit/redis-ratelimit/go/redisrate"
	"github.com/redis/go-redis/v9"
)

// The seed's token bucket script (../shared/seeds/000_*.txt), as its program sends it.
const seedScript = `
local key      = KEYS[1]
local capacity = tonumber(ARGV[1])
local rate     = tonumber(ARGV[2])   -- tokens per second
local cost     = tonumber(ARGV[3])

local t   = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000

local state  = redis.call('HMGET', key, 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts     = tonumber(state[2])
if tokens == nil then
  tokens = capacity
  ts = now
end

tokens = math.min(capacity, tokens + (now - ts) * rate)

local allowed = 0
local retry   = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
else
  retry = (cost - tokens) / rate
end

redis.call('HSET', key, 'tokens', tokens, 'ts', now)
redis.call('PEXPIRE', key, math.ceil(capacity / rate * 1000) + 1000)  -- idle keys clean themselves up
return {allowed, tostring(tokens), tostring(retry)}
`

// Far above the load: every request is allowed.
const (
	capacity = 1_000_000_000
	perSec   = 1_000_000
	deadline = 100 * time.Millisecond
)

var described = httplimit.Described{Name: "api", WindowSecs: capacity / perSec, Cost: 1, Rate: true}

type decider func(ctx context.Context, key string) (ratelimit.Decision, error)

// shaped is the middleware shape of the hand-written rows: the caller from the peer's address,
// one decision within the deadline, httplimit's headers and 429, open when Redis does not answer.
func shaped(prefix string, decide decider, failedOpen *atomic.Int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			ctx, cancel := context.WithTimeout(r.Context(), deadline)
			d, err := decide(ctx, prefix+":{ip:"+host+"}:api")
			cancel()
			if err != nil { // fail open (counted: the page shows how many)
				failedOpen.Add(1)
				next.ServeHTTP(w, r)
				return
			}
			if !d.Allowed {
				httplimit.Denied(d, described, false).Write(w)
				return
			}
			for _, kv := range httplimit.ServedHeaders(d, described, false) {
				w.Header()[kv[0]] = []string{kv[1]}
			}
			next.ServeHTTP(w, r)
		})
	}
}

func redisRateDecider(c *redis.Client) decider {
	l := redis_rate.NewLimiter(c)
	limit := redis_rate.Limit{Rate: perSec, Burst: capacity, Period: time.Second}
	return func(ctx context.Context, key string) (ratelimit.Decision, error) {
		res, err := l.Allow(ctx, key, limit)
		if err != nil {
			return ratelimit.Decision{}, err
		}
		return ratelimit.Decision{Allowed: res.Allowed > 0, Limit: uint64(res.Limit.Burst), Remaining: uint64(max(0, res.Remaining)),
			RetryAfter: max(0, res.RetryAfter), ResetAfter: res.ResetAfter}, nil
	}
}

func ourRedisRateDecider(c *redis.Client) decider {
	l := redisrate.NewLimiter(c)
	limit := redisrate.Limit{Rate: perSec, Burst: capacity, Period: time.Second}
	return func(ctx context.Context, key string) (ratelimit.Decision, error) {
		res, err := l.Allow(ctx, key, limit)
		if err != nil {
			return ratelimit.Decision{}, err
		}
		return ratelimit.Decision{Allowed: res.Allowed > 0, Limit: uint64(res.Limit.Burst), Remaining: uint64(max(0, res.Remaining)),
			RetryAfter: max(0, res.RetryAfter), ResetAfter: res.ResetAfter}, nil
	}
}

func seedDecider(c *redis.Client) decider {
	script := redis.NewScript(seedScript)
	return func(ctx context.Context, key string) (ratelimit.Decision, error) {
		v, err := script.Run(ctx, c, []string{key}, capacity, perSec, 1).Slice()
		if err != nil {
			return ratelimit.Decision{}, err
		}
		if len(v) != 3 {
			return ratelimit.Decision{}, errors.New("seed script: unexpected reply")
		}
		allowed, _ := v[0].(int64)
		tokens, _ := strconv.ParseFloat(fmt.Sprint(v[1]), 64)
		retry, _ := strconv.ParseFloat(fmt.Sprint(v[2]), 64)
		return ratelimit.Decision{Allowed: allowed == 1, Limit: capacity, Remaining: uint64(tokens),
			RetryAfter: time.Duration(retry * float64(time.Second)),
			ResetAfter: time.Duration((capacity - tokens) / perSec * float64(time.Second))}, nil
	}
}

type row struct {
	name                          string
	mw                            func(http.Handler) http.Handler // nil: no limiter
	decide                        decider                         // one decision, for the allocation count
	limiter                       *ratelimit.Limiter              // httplimit's: its count of degraded decisions
	failedOpen                    *atomic.Int64                   // the hand-written middleware's
	notDecided                    int64
	url                           string
	rounds                        []wrkResult
	allocsDecision, allocsRequest float64
	nsDecision                    float64
}

type wrkResult struct {
	rps    float64
	p99    time.Duration
	non2xx int
	errors int
}

func newClient(addr string) *redis.Client {
	// ContextTimeoutEnabled as the package's README recommends, for every row.
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: 1})
}

func main() {
	addr := flag.String("redis", "127.0.0.1:6379", "a module-enabled Redis (one server for every row)")
	out := flag.String("out", "", "the page to write (stdout when empty)")
	seconds := flag.Int("seconds", 6, "wrk's duration per row and round")
	rounds := flag.Int("rounds", 3, "interleaved rounds")
	conns := flag.Int("connections", 32, "wrk's connections")
	profile := flag.String("cpuprofile", "", "write a CPU profile of this process over the rounds")
	only := flag.String("only", "", "run only the rows whose name contains this")
	volumeOnly := flag.Bool("volume-only", false, "run only the high-volume rows, and print their table")
	flag.Parse()
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	probe := newClient(*addr)
	if err := probe.Do(ctx, "RL.INSPECT", "rl:{bench}").Err(); err != nil && !errors.Is(err, redis.Nil) {
		log.Fatalf("the Redis at %s does not answer the module's commands: %v", *addr, err)
	}
	redisVersion := infoField(ctx, probe, "server", "redis_version")
	if err := probe.FlushAll(ctx).Err(); err != nil {
		log.Fatal(err)
	}
	probe.Close()
	if *volumeOnly {
		var b strings.Builder
		renderVolume(func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }, runVolume(ctx, *addr, quiet))
		fmt.Print(b.String())
		return
	}

	policy := ratelimit.Must(ratelimit.TokenBucket(capacity, perSec))
	var made *ratelimit.Limiter
	ours := func(engine ratelimit.Engine, prefix string, unbatched bool) (func(http.Handler) http.Handler, decider) {
		l, err := ratelimit.New(newClient(*addr), ratelimit.Options{Failure: ratelimit.FailOpen(), Engine: engine, Logger: quiet, DisableBatching: unbatched})
		if err != nil {
			log.Fatal(err)
		}
		made = l
		if v, err := l.Verify(ctx); err != nil || v.Engine != engine {
			log.Fatalf("engine %v: %v %v", engine, v, err)
		}
		mw, err := httplimit.New(httplimit.Config{Limiter: l, Logger: quiet, KeyPrefix: prefix,
			Routes: []httplimit.Route{{Name: "api", Prefix: "/api", Policy: policy}}})
		if err != nil {
			log.Fatal(err)
		}
		return mw, func(ctx context.Context, key string) (ratelimit.Decision, error) { return l.Check(ctx, key, policy, 1) }
	}
	// Each row its own keys.
	modMW, modDecide := ours(ratelimit.Module, "module", false)
	modLimiter := made
	libMW, libDecide := ours(ratelimit.Functions, "library", false)
	libLimiter := made
	modOneMW, modOneDecide := ours(ratelimit.Module, "module-unbatched", true)
	modOneLimiter := made
	libOneMW, libOneDecide := ours(ratelimit.Functions, "library-unbatched", true)
	libOneLimiter := made
	var rrFailed, ourRRFailed, seedFailed atomic.Int64
	rrDecide := redisRateDecider(newClient(*addr))
	ourRRDecide := ourRedisRateDecider(newClient(*addr))
	seed := seedDecider(newClient(*addr))
	rows := []*row{
		{name: "no limiter"},
		{name: "httplimit, module (RL.TOKEN)", mw: modMW, decide: modDecide, limiter: modLimiter},
		{name: "httplimit, Lua library (FCALL rl_token)", mw: libMW, decide: libDecide, limiter: libLimiter},
		{name: "httplimit, module, DisableBatching", mw: modOneMW, decide: modOneDecide, limiter: modOneLimiter},
		{name: "httplimit, Lua library, DisableBatching", mw: libOneMW, decide: libOneDecide, limiter: libOneLimiter},
		{name: "redis_rate v10 (its GCRA script)", mw: shaped("redis_rate", rrDecide, &rrFailed), decide: rrDecide, failedOpen: &rrFailed},
		{name: "redisrate (this package's drop-in), module", mw: shaped("redisrate", ourRRDecide, &ourRRFailed), decide: ourRRDecide, failedOpen: &ourRRFailed},
		{name: "the seed's token-bucket script (EVALSHA)", mw: shaped("seed", seed, &seedFailed), decide: seed, failedOpen: &seedFailed},
	}
	if *only != "" {
		var kept []*row
		for _, r := range rows {
			if r.mw == nil || strings.Contains(r.name, *only) {
				kept = append(kept, r)
			}
		}
		rows = kept
	}

	items := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`["a"]`))
	})
	for _, r := range rows {
		h := http.Handler(items)
		if r.mw != nil {
			h = r.mw(items)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		r.url = "http://" + ln.Addr().String() + "/api/items"
		// One request by hand: the row answers 200 with the limit's headers.
		resp, err := http.Get(r.url)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || (r.mw != nil && resp.Header.Get("ratelimit-remaining") == "") {
			log.Fatalf("%s: %d %v", r.name, resp.StatusCode, resp.Header)
		}
	}

	// Allocations per decision and per request, in process (one after another on one connection).
	for _, r := range rows {
		if r.decide == nil {
			continue
		}
		key := "rl:{alloc}:" + strings.Fields(r.name)[0]
		res := testing.Benchmark(func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				ctx, cancel := context.WithTimeout(ctx, deadline)
				if _, err := r.decide(ctx, key); err != nil {
					b.Fatal(err)
				}
				cancel()
			}
		})
		r.allocsDecision, r.nsDecision = float64(res.MemAllocs)/float64(res.N), float64(res.T.Nanoseconds())/float64(res.N)
		h := r.mw(items)
		req := httptest.NewRequest("GET", "/api/items", nil)
		base := testing.Benchmark(func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				items.ServeHTTP(httptest.NewRecorder(), req)
			}
		})
		res = testing.Benchmark(func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				h.ServeHTTP(httptest.NewRecorder(), req)
			}
		})
		r.allocsRequest = float64(res.MemAllocs)/float64(res.N) - float64(base.MemAllocs)/float64(base.N)
		fmt.Fprintf(os.Stderr, "%s: %.1f allocs a decision, %.1f a request, %.0f µs a decision\n", r.name, r.allocsDecision, r.allocsRequest, r.nsDecision/1000)
	}

	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	for _, r := range rows { // warm-up: connections, the script caches
		if _, err := runWrk(r.url, 1, *conns); err != nil {
			log.Fatal(err)
		}
	}
	for round := 0; round < *rounds; round++ {
		order := make([]*row, len(rows))
		copy(order, rows)
		if round%2 == 1 {
			for i, j := 0, len(order)-1; i < j; i, j = i+1, j-1 {
				order[i], order[j] = order[j], order[i]
			}
		}
		for _, r := range order {
			res, err := runWrk(r.url, *seconds, *conns)
			if err != nil {
				log.Fatal(err)
			}
			r.rounds = append(r.rounds, res)
			fmt.Fprintf(os.Stderr, "round %d, %s: %.0f req/s, p99 %v, non-2xx %d\n", round+1, r.name, res.rps, res.p99, res.non2xx)
		}
	}
	for _, r := range rows {
		if r.limiter != nil {
			r.notDecided = int64(r.limiter.Counts().Degraded)
		} else if r.failedOpen != nil {
			r.notDecided = r.failedOpen.Load()
		}
	}
	volume := runVolume(ctx, *addr, quiet)
	page := render(rows, volume, *seconds, *rounds, *conns, redisVersion)
	if *out == "" {
		fmt.Print(page)
		return
	}
	if err := os.WriteFile(*out, []byte(page), 0o644); err != nil {
		log.Fatal(err)
	}
}

func infoField(ctx context.Context, c *redis.Client, section, field string) string {
	info, _ := c.Info(ctx, section).Result()
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return "?"
}

// runWrk: wrk -t1 -cN -dS --latency url; requests/s, p99, non-2xx and socket errors.
func runWrk(url string, seconds, conns int) (wrkResult, error) {
	cmd := exec.Command("wrk", "-t1", "-c"+strconv.Itoa(conns), "-d"+strconv.Itoa(seconds)+"s", "--latency", url)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return wrkResult{}, fmt.Errorf("wrk: %v\n%s", err, out.String())
	}
	var res wrkResult
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "Requests/sec:":
			res.rps, _ = strconv.ParseFloat(f[1], 64)
		case len(f) == 2 && f[0] == "99%":
			res.p99 = parseWrkDuration(f[1])
		case strings.HasPrefix(sc.Text(), "  Non-2xx or 3xx responses:"):
			res.non2xx, _ = strconv.Atoi(f[len(f)-1])
		case len(f) > 0 && f[0] == "Socket" && len(f) >= 4:
			for i := 3; i+1 < len(f); i += 2 { // Socket errors: connect 0, read 0, write 0, timeout 0
				n, _ := strconv.Atoi(strings.TrimSuffix(f[i+1], ","))
				res.errors += n
			}
		}
	}
	if res.rps == 0 {
		return res, fmt.Errorf("wrk printed no Requests/sec:\n%s", out.String())
	}
	return res, nil
}

func parseWrkDuration(s string) time.Duration {
	for _, u := range []struct {
		suffix string
		unit   time.Duration
	}{{"us", time.Microsecond}, {"ms", time.Millisecond}, {"s", time.Second}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return time.Duration(f * float64(u.unit))
		}
	}
	return 0
}

// median is the round of median req/s (its p99 with it).
func (r *row) median() wrkResult {
	s := append([]wrkResult(nil), r.rounds...)
	sort.Slice(s, func(i, j int) bool { return s[i].rps < s[j].rps })
	return s[len(s)/2]
}

func find(rows []*row, prefix string) *row {
	for _, r := range rows {
		if strings.HasPrefix(r.name, prefix) {
			return r
		}
	}
	return nil
}

func render(rows []*row, volume []volumeRow, seconds, rounds, conns int, redisVersion string) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	dep := map[string]string{}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			dep[m.Path] = m.Version
		}
	}
	w("<!-- generated by scripts/go.sh bench (go/internal/bench/main.go); do not edit by hand -->\n")
	w("# Go: the net/http middleware, requests per second\n\n")
	w("Written by `scripts/go.sh bench` (`make bench`'s Go step; the program is `go/internal/bench`). One Go\n")
	w("process serves one trivial endpoint (`GET /api/items` answering `[\"a\"]`) behind each middleware on\n")
	w("its own loopback port; wrk loads each with one thread and %d connections for %d s, after a 1 s\n", conns, seconds)
	w("warm-up; %d rounds over all the rows, each round in the other order than the one before, and each\n", rounds)
	w("row's median round is shown. Every row decides on the same module-enabled `redis-server` (Redis\n")
	w("%s): the library rows call its FCALL functions there, the module rows its RL.* commands. Each\n", redisVersion)
	w("request takes one token of one token bucket (one key: every request comes from 127.0.0.1), far\n")
	w("above the load, so every request is allowed and each row measures the cost of a decision. Each\n")
	w("row has its own go-redis client (`ContextTimeoutEnabled`, as the README recommends) and a 100 ms\n")
	w("deadline. The hand-written middlewares (redis_rate, redisrate, the seed's script) have\n")
	w("httplimit's shape for one route: the caller from the peer's address, one call, the same headers\n")
	w("and 429 answer (`httplimit.ServedHeaders`, `httplimit.Denied`), open when Redis does not answer.\n\n")
	w("All of it, wrk and Redis included, ran on one machine (%s, %d cores, %s, go-redis %s,\n", runtime.GOARCH, runtime.NumCPU(), runtime.Version(), dep["github.com/redis/go-redis/v9"])
	w("redis_rate %s) while other work ran on it: the machine was shared, so read the ratios more than\n", dep["github.com/go-redis/redis_rate/v10"])
	w("the absolute figures.\n\n")
	w("| row | requests/s | p99 latency | vs redis_rate | non-2xx | not decided | allocs a decision | allocs a request | µs a decision |\n")
	w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	rr := find(rows, "redis_rate")
	for _, r := range rows {
		m := r.median()
		vs := "–"
		if rr != nil {
			vs = fmt.Sprintf("%.2fx", m.rps/rr.median().rps)
		}
		allocs, allocsReq, us := "–", "–", "–"
		if r.decide != nil {
			allocs, allocsReq, us = fmt.Sprintf("%.0f", r.allocsDecision), fmt.Sprintf("%.0f", r.allocsRequest), fmt.Sprintf("%.0f", r.nsDecision/1000)
		}
		w("| %s | %s | %s | %s | %d | %d | %s | %s | %s |\n", r.name, thousands(m.rps), fmtP99(m.p99), vs, m.non2xx+m.errors, r.notDecided, allocs, allocsReq, us)
	}
	w("\n\"allocs a decision\": heap allocations of one decision (the limiter's call alone, with its\n")
	w("context), \"allocs a request\": of one request through the middleware less the handler's own,\n")
	w("both measured in process with `testing.Benchmark` (one call after another); \"µs a decision\" is\n")
	w("that sequential call's time, a round trip to Redis included. \"non-2xx\" counts wrk's non-2xx\n")
	w("answers and socket errors; \"not decided\": decisions over all the runs (warm-up included) that\n")
	w("Redis did not make: past the 100 ms deadline, or cancelled with their request when wrk closes\n")
	w("its connections at the end of a run (every middleware fails open: the request is served).\n\n")
	mod, lib := find(rows, "httplimit, module"), find(rows, "httplimit, Lua")
	if rr != nil && mod != nil && lib != nil {
		w("## Against the goals (issue 34)\n\n")
		w("| goal | measured | |\n| --- | ---: | --- |\n")
		goal := func(what string, r *row, want float64) {
			got := r.median().rps / rr.median().rps
			met := "met"
			if got < want {
				met = "**not met**"
			}
			w("| %s | %.2fx | %s |\n", what, got, met)
		}
		goal("httplimit on the module at least 1.2x redis_rate's requests/s", mod, 1.2)
		goal("httplimit on the Lua library at least 1.0x redis_rate's requests/s", lib, 1.0)
		if mb, lb := find(rows, "httplimit, module, DisableBatching"), find(rows, "httplimit, Lua library, DisableBatching"); mb != nil && lb != nil {
			goal("the same on the module with `DisableBatching` (one round trip a call)", mb, 1.2)
			goal("the same on the Lua library with `DisableBatching`", lb, 1.0)
		}
		w("\n")
	}
	renderVolume(w, volume)
	w("## Where the time goes\n\n")
	w("A CPU profile of this program on the module row (`-cpuprofile`, `go tool pprof -top`; issue 34)\n")
	w("showed the Go process using about one of the two cores, 40%% of it in system calls (the HTTP\n")
	w("connection's reads and writes and the Redis connection's), the middleware's own work (routing,\n")
	w("the caller, the key, the headers) and the limiter's (the command, the deadline, the reply's\n")
	w("parsing) a few per cent each. A call sent alone is one write and one read on the Redis connection\n")
	w("on each side, and with wrk, this process and Redis sharing two cores, that cost is the same for\n")
	w("every row: with `DisableBatching` the module's cheaper command (no Lua) does not show through it,\n")
	w("and the module row is level with redis_rate. By default the limiter batches concurrent calls (a\n")
	w("call that finds two round trips in flight waits for one, then goes with the others that came\n")
	w("meanwhile in one pipeline; a call that finds fewer goes at once), which removes most of those\n")
	w("round trips (two in flight rather than one: a few per cent more, this process working while\n")
	w("Redis runs a pipeline): the\n")
	w("module row passes redis_rate by the goal's margin. The library row gains less: FCALL rl_token's\n")
	w("own work in Redis stays one per call (about 8.6 µs of the server's time against RL.TOKEN's 1.6:\n")
	w("[bench-engines.md](bench-engines.md)). This bench's bucket (10^9 tokens at 10^6 a second) took the\n")
	w("library's exact general path until its fast path took large buckets (0.93x before). `redisrate`\n")
	w("(the drop-in) builds and validates its token bucket on every call (its allocations); batched by\n")
	w("default too, it passes redis_rate.\n\n")
	w("## Every round\n\n")
	w("| row |")
	for i := 0; i < rounds; i++ {
		w(" round %d |", i+1)
	}
	w("\n| --- |")
	for i := 0; i < rounds; i++ {
		w(" ---: |")
	}
	w("\n")
	for _, r := range rows {
		w("| %s |", r.name)
		for _, x := range r.rounds {
			w(" %s (p99 %s) |", thousands(x.rps), fmtP99(x.p99))
		}
		w("\n")
	}
	return b.String()
}

func thousands(f float64) string {
	s := strconv.FormatInt(int64(f+0.5), 10)
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

func fmtP99(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}
