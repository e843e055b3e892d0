package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimit "github.com/redis-ratelimit/redis-ratelimit/go"
	"github.com/redis-ratelimit/redis-ratelimit/go/internal/redistest"
	"github.com/redis/go-redis/v9"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newLimiter(t *testing.T, c redis.UniversalClient, opts ratelimit.Options) *ratelimit.Limiter {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	if opts.Deadline == 0 {
		opts.Deadline = 5 * time.Second // not about deadlines: a long one (the outage tests set their own)
	}
	l, err := ratelimit.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

type engineCase struct {
	name   string
	module bool
	engine ratelimit.Engine
	want   ratelimit.Engine
	// redis62: on RL_REDIS62_SERVER's Redis 6.2 (no FUNCTION: the EVALSHA scripts), skipped when unset.
	redis62 bool
}

var engineCases = []engineCase{
	{"module", true, ratelimit.Auto, ratelimit.Module, false},
	{"stock-fcall", false, ratelimit.Auto, ratelimit.Functions, false},
	{"stock-evalsha", false, ratelimit.Scripts, ratelimit.Scripts, false},
	{"redis-6.2-auto", false, ratelimit.Auto, ratelimit.Scripts, true},
}

// Every call of the package on each engine: the same decisions.
func TestEngines(t *testing.T) {
	for _, ec := range engineCases {
		t.Run(ec.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var srv *redistest.Server
			if ec.redis62 {
				binary := os.Getenv("RL_REDIS62_SERVER")
				if binary == "" {
					t.Skip("RL_REDIS62_SERVER is not set: no Redis 6.2 here (scripts/servers.sh redis-6.2 builds one)")
				}
				srv = redistest.StartBinary(t, binary, false)
				if v := infoField(ctx, srv.Client(t), "server", "redis_version"); !strings.HasPrefix(v, "6.2.") {
					t.Fatalf("RL_REDIS62_SERVER runs Redis %q, not 6.2", v)
				}
			} else {
				srv = redistest.Start(t, ec.module)
			}
			c := srv.Client(t)
			l := newLimiter(t, c, ratelimit.Options{Failure: ratelimit.FailClosed(), Engine: ec.engine})
			v, err := l.Verify(ctx)
			if err != nil || v.Engine != ec.want {
				t.Fatalf("Verify: %v %v, want %v", v, err, ec.want)
			}
			if ec.redis62 && !strings.Contains(v.Why, "FCALL unknown to this server") {
				t.Fatalf("Verify on Redis 6.2 says why %q", v.Why)
			}
			bucket := ratelimit.Must(ratelimit.TokenBucket(10, 5))

			t.Run("burst", func(t *testing.T) {
				allowed := 0
				var denial ratelimit.Decision
				for i := 0; i < 12; i++ {
					d, err := l.Check(ctx, "rl:{burst}", bucket, 1)
					must(t, err)
					if d.Degraded {
						t.Fatalf("degraded: %+v", d)
					}
					if d.Allowed {
						allowed++
					} else {
						denial = d
					}
				}
				if allowed != 10 || denial.Limit != 10 || denial.RetryAfter <= 0 || denial.RetryAfter > 200*time.Millisecond {
					t.Fatalf("allowed %d, denial %+v", allowed, denial)
				}
				if s, ok := denial.RetryAfterSecs(); !ok || s != 1 {
					t.Fatalf("Retry-After %d %v", s, ok)
				}
			})
			t.Run("check-all-mixed", func(t *testing.T) {
				fixed := ratelimit.Must(ratelimit.FixedWindow(3, time.Minute))
				log := ratelimit.Must(ratelimit.SlidingLog(5, time.Minute))
				count := ratelimit.Must(ratelimit.SlidingCounter(100, time.Minute))
				limits := []ratelimit.Limit{{Key: "rl:{mix}:a", Policy: fixed, Cost: 1}, {Key: "rl:{mix}:b", Policy: log, Cost: 1},
					{Key: "rl:{mix}:c", Policy: count, Cost: 1}}
				for i := 0; i < 3; i++ {
					d, err := l.CheckAll(ctx, limits...)
					must(t, err)
					if !d.Allowed {
						t.Fatalf("call %d denied: %+v", i, d)
					}
				}
				d, err := l.CheckAll(ctx, limits...)
				must(t, err)
				if d.Allowed || d.Limiting != 0 || d.Limit != 3 {
					t.Fatalf("4th: %+v", d)
				}
				// all or nothing: the log counted 3, not 4
				in, err := l.Peek(ctx, "rl:{mix}:c", count)
				must(t, err)
				if !in.Exists || in.Remaining != 97 {
					t.Fatalf("peek: %+v", in)
				}
			})
			t.Run("take-refund-reserve", func(t *testing.T) {
				tk, err := l.Take(ctx, "rl:{take}", bucket, 25)
				must(t, err)
				if tk.Taken != 10 || !tk.Allowed {
					t.Fatalf("take: %+v", tk)
				}
				must(t, l.Refund(ctx, "rl:{take}", bucket, 4))
				d, err := l.Check(ctx, "rl:{take}", bucket, 4)
				must(t, err)
				if !d.Allowed {
					t.Fatalf("after the refund: %+v", d)
				}
				r, err := l.Reserve(ctx, "rl:{take}", bucket, 1, 500*time.Millisecond)
				must(t, err)
				if !r.Allowed || r.RetryAfter <= 0 || r.RetryAfter > 200*time.Millisecond {
					t.Fatalf("reserve: %+v", r)
				}
				r, err = l.Reserve(ctx, "rl:{take}", bucket, 5, 100*time.Millisecond)
				must(t, err)
				if r.Allowed {
					t.Fatalf("reserve beyond max wait: %+v", r)
				}
				b, err := l.ReserveBatch(ctx, "rl:{batch}", bucket, 2, 8, time.Second)
				must(t, err)
				if b.Taken != 8 {
					t.Fatalf("batch: %+v", b)
				}
				if err := l.Refund(ctx, "k", ratelimit.Must(ratelimit.SlidingLog(1, time.Second)), 1); !errors.Is(err, ratelimit.ErrUsage) {
					t.Fatalf("refund of a log: %v", err)
				}
			})
			t.Run("wait-sleeps-once", func(t *testing.T) {
				small := ratelimit.Must(ratelimit.TokenBucket(1, 10))
				_, err := l.Check(ctx, "rl:{wait}", small, 1)
				must(t, err)
				start := time.Now()
				d, err := l.Wait(ctx, time.Second, ratelimit.Limit{Key: "rl:{wait}", Policy: small, Cost: 1})
				must(t, err)
				if !d.Allowed || d.RetryAfter != 0 || time.Since(start) < 80*time.Millisecond {
					t.Fatalf("wait: %+v after %v", d, time.Since(start))
				}
			})
			t.Run("acquire-release", func(t *testing.T) {
				conc := ratelimit.Must(ratelimit.Concurrency(2, 300*time.Millisecond))
				p1, d, err := l.Acquire(ctx, "rl:{lease}", conc, 1)
				must(t, err)
				p2, _, err := l.Acquire(ctx, "rl:{lease}", conc, 1)
				must(t, err)
				if p1 == nil || p2 == nil || !d.Allowed {
					t.Fatalf("acquire: %v %v %+v", p1, p2, d)
				}
				time.Sleep(700 * time.Millisecond) // past two leases: the renewals hold them
				p3, d3, err := l.Acquire(ctx, "rl:{lease}", conc, 1)
				must(t, err)
				if p3 != nil || d3.Allowed {
					t.Fatalf("a third slot while two are renewed: %+v", d3)
				}
				held, err := p1.Release(ctx)
				must(t, err)
				if !held {
					t.Fatal("the lease was lost")
				}
				p3, _, err = l.Acquire(ctx, "rl:{lease}", conc, 1)
				must(t, err)
				if p3 == nil {
					t.Fatal("no slot after a release")
				}
				_, _ = p2.Release(ctx)
				_, _ = p3.Release(ctx)
				if _, err := l.Check(ctx, "k", conc, 1); !errors.Is(err, ratelimit.ErrUsage) {
					t.Fatalf("check of a concurrency limit: %v", err)
				}
			})
			if ec.want != ratelimit.Module {
				t.Run("flushed-mid-run", func(t *testing.T) {
					_, err := l.Check(ctx, "rl:{flush}", bucket, 1)
					must(t, err)
					if !ec.redis62 {
						must(t, c.FunctionFlush(ctx).Err())
					}
					must(t, c.ScriptFlush(ctx).Err())
					d, err := l.Check(ctx, "rl:{flush}", bucket, 1)
					must(t, err)
					if d.Degraded || !d.Allowed || d.Remaining != 8 {
						t.Fatalf("after the flush: %+v", d)
					}
					if e, _ := l.Engine(); e != ec.want {
						t.Fatalf("engine %v after the flush", e)
					}
				})
			}
		})
	}
}

// Two limiters (two application instances, two clients) share one bucket; 200 concurrent
// requests get exactly the capacity.
func TestConcurrentRequestsShareOneBucket(t *testing.T) {
	srv := redistest.Start(t, true)
	a := newLimiter(t, srv.Client(t), ratelimit.Options{Failure: ratelimit.FailClosed()})
	b := newLimiter(t, srv.Client(t), ratelimit.Options{Failure: ratelimit.FailClosed()})
	bucket := ratelimit.Must(ratelimit.TokenBucket(10, 0.001))
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			l := a
			if i%2 == 1 {
				l = b
			}
			d, err := l.Check(context.Background(), "rl:{shared}", bucket, 1)
			if err != nil || d.Degraded {
				t.Errorf("%+v %v", d, err)
			}
			if d.Allowed {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	if allowed != 10 {
		t.Fatalf("%d allowed of 200, want 10", allowed)
	}
}

// ACLs: a user without FCALL/FUNCTION gets the EVALSHA scripts, and says why; a user without any
// engine is a configuration fault, not an outage.
func TestEngineChoiceUnderACLs(t *testing.T) {
	srv := redistest.Start(t, false)
	admin := srv.Client(t)
	ctx := context.Background()
	must(t, admin.Do(ctx, "ACL", "SETUSER", "scripts", "on", ">pw", "~*", "+@all", "-fcall", "-function").Err())
	must(t, admin.Do(ctx, "ACL", "SETUSER", "none", "on", ">pw", "~*", "+@all", "-fcall", "-function", "-evalsha", "-eval").Err())
	scripts := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "scripts", Password: "pw"})
	defer scripts.Close()
	l := newLimiter(t, scripts, ratelimit.Options{Failure: ratelimit.FailOpen()})
	v, err := l.Verify(ctx)
	if err != nil || v.Engine != ratelimit.Scripts || !strings.Contains(v.Why, "NOPERM") || !strings.Contains(v.Why, "module not loaded") {
		t.Fatalf("Verify: %v %v", v, err)
	}
	none := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "none", Password: "pw"})
	defer none.Close()
	logs := &logBuffer{}
	l = newLimiter(t, none, ratelimit.Options{Failure: ratelimit.FailClosed(), BreakerFailures: 2, Logger: logs.logger()})
	if _, err := l.Verify(ctx); !errors.Is(err, ratelimit.ErrConfiguration) {
		t.Fatalf("Verify without any engine: %v", err)
	}
	// Misconfigured: the failure policy decides, the breaker stays closed, one error line (once
	// per cause a minute), counted, no outage.
	for i := 0; i < 5; i++ {
		d, err := l.Check(ctx, "k", ratelimit.Must(ratelimit.TokenBucket(1, 1)), 1)
		must(t, err)
		if !d.Degraded || d.Allowed || !l.Misconfigured() || l.BreakerOpen() {
			t.Fatalf("misconfigured: %+v misconfigured=%v breaker=%v", d, l.Misconfigured(), l.BreakerOpen())
		}
	}
	if n := l.Counts(); n.Misconfigurations != 6 || n.Outages != 0 || n.BreakerOpened != 0 {
		t.Fatalf("counts %+v", n)
	}
	if out := logs.String(); strings.Count(out, "level=ERROR") != 1 || !strings.Contains(out, "misconfigured") || strings.Contains(out, "(an outage)") {
		t.Fatalf("logs:\n%s", out)
	}
	// The module engine asked for on a stock server: a configuration fault too.
	l = newLimiter(t, admin, ratelimit.Options{Failure: ratelimit.FailClosed(), Engine: ratelimit.Module})
	if _, err := l.CheckAllStrict(ctx, ratelimit.Limit{Key: "k", Policy: ratelimit.Must(ratelimit.TokenBucket(1, 1)), Cost: 1}); !errors.Is(err, ratelimit.ErrConfiguration) || !errors.Is(err, ratelimit.ErrServer) {
		t.Fatalf("module on a stock server: %v", err)
	}
}

func TestOptionsNeedAFailurePolicy(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	if _, err := ratelimit.New(c, ratelimit.Options{}); err == nil {
		t.Fatal("a limiter without a failure policy")
	}
	if _, err := ratelimit.TokenBucket(0, 5); err == nil || err.Error() != "token_bucket: invalid capacity: must be a whole number >= 1" {
		t.Fatalf("policy error: %v", err)
	}
}

// A stopped server and a paused one (SIGSTOP: connections held, nothing answered): every call
// returns within the deadline, whatever the client's options, with the failure policy's decision;
// the breaker opens, and its probe closes it as soon as the server answers again.
func TestOutages(t *testing.T) {
	const deadline = 100 * time.Millisecond
	const slack = 60 * time.Millisecond // scheduling on a loaded 2-core machine
	for _, ctxTimeouts := range []bool{false, true} {
		for _, failure := range []ratelimit.FailurePolicy{ratelimit.FailOpen(), ratelimit.FailClosed()} {
			name := fmt.Sprintf("%v/ContextTimeoutEnabled=%v", failure, ctxTimeouts)
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				srv := redistest.Start(t, true)
				c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: ctxTimeouts})
				defer c.Close()
				var logs strings.Builder
				var logMu sync.Mutex
				logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
					logMu.Lock()
					defer logMu.Unlock()
					return logs.Write(p)
				}), nil))
				l := newLimiter(t, c, ratelimit.Options{Failure: failure, Deadline: deadline, BreakerFailures: 3,
					BreakerCooldown: 10 * time.Second, Logger: logger})
				ctx := context.Background()
				bucket := ratelimit.Must(ratelimit.TokenBucket(10, 5))
				d, err := l.Check(ctx, "rl:{o}", bucket, 1)
				if err != nil || d.Degraded {
					t.Fatalf("before: %+v %v", d, err)
				}
				srv.Pause()
				for i := 0; i < 6; i++ {
					start := time.Now()
					d, err := l.Check(ctx, "rl:{o}", bucket, 1)
					took := time.Since(start)
					if err != nil || !d.Degraded || d.Allowed != failure.IsOpen() {
						t.Fatalf("paused, call %d: %+v %v", i, d, err)
					}
					if took > deadline+slack {
						t.Fatalf("paused, call %d took %v (deadline %v)", i, took, deadline)
					}
				}
				if !l.BreakerOpen() {
					t.Fatal("the breaker is not open after 6 calls without an answer")
				}
				srv.Resume()
				// The probe ends the outage well before the 10 s cool-down.
				for end := time.Now().Add(3 * time.Second); l.BreakerOpen() && time.Now().Before(end); {
					time.Sleep(20 * time.Millisecond)
				}
				d, err = l.Check(ctx, "rl:{o}", bucket, 1)
				if err != nil || d.Degraded {
					t.Fatalf("after the pause: %+v %v (breaker open %v)", d, err, l.BreakerOpen())
				}
				srv.Stop()
				for i := 0; i < 3; i++ {
					start := time.Now()
					d, err := l.Check(ctx, "rl:{o}", bucket, 1)
					if err != nil || !d.Degraded || d.Allowed != failure.IsOpen() || time.Since(start) > deadline+slack {
						t.Fatalf("stopped, call %d: %+v %v after %v", i, d, err, time.Since(start))
					}
				}
				counts := l.Counts()
				if counts.Outages != 2 || counts.Degraded != 9 || counts.BreakerOpened < 1 {
					t.Fatalf("counts %+v", counts)
				}
				logMu.Lock()
				out := logs.String()
				logMu.Unlock()
				if !strings.Contains(out, "an outage") || !strings.Contains(out, "outage over") || !strings.Contains(out, "degraded_decisions=6") {
					t.Fatalf("logs:\n%s", out)
				}
			})
		}
	}
}

// logBuffer collects a limiter's log lines (safe for concurrent use).
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// LocalFallback against a stopped server: each call within the deadline decides in the process,
// with this instance's share (1 of 2): half the bucket, half the concurrency slots (leases of the
// local semaphore, released there), the partial grants from the share.
func TestLocalFallbackOnAStoppedServer(t *testing.T) {
	const deadline = 100 * time.Millisecond
	srv := redistest.Start(t, true)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer c.Close()
	if _, err := ratelimit.New(c, ratelimit.Options{Failure: ratelimit.LocalFallback(0)}); err == nil {
		t.Fatal("LocalFallback(0) accepted")
	}
	l := newLimiter(t, c, ratelimit.Options{Failure: ratelimit.LocalFallback(2), Deadline: deadline, BreakerFailures: 3})
	ctx := context.Background()
	bucket := ratelimit.Must(ratelimit.TokenBucket(10, 5))
	if d, err := l.Check(ctx, "rl:{lf}:a", bucket, 1); err != nil || d.Degraded || d.Remaining != 9 {
		t.Fatalf("before: %+v %v", d, err)
	}
	srv.Stop()
	timed := func(what string, f func()) {
		t.Helper()
		start := time.Now()
		f()
		if took := time.Since(start); took > deadline+60*time.Millisecond {
			t.Fatalf("%s took %v (deadline %v)", what, took, deadline)
		}
	}
	allowed := 0
	var last ratelimit.Decision
	for i := 0; i < 7; i++ {
		timed("check", func() {
			d, err := l.Check(ctx, "rl:{lf}:a", bucket, 1)
			if err != nil || !d.Degraded || d.Limit != 5 {
				t.Fatalf("check %d: %+v %v", i, d, err)
			}
			if d.Allowed {
				allowed++
			}
			last = d
		})
	}
	if allowed != 5 || last.RetryAfter <= 0 || last.RetryAfter > 400*time.Millisecond {
		t.Fatalf("%d allowed of 7 (want the share, 5), last %+v", allowed, last)
	}
	log := ratelimit.Must(ratelimit.SlidingLog(4, time.Second)) // a bucket of 4 per second: 2 here
	n := 0
	for i := 0; i < 4; i++ {
		if d, _ := l.Check(ctx, "rl:{lf}:log", log, 1); d.Allowed {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("sliding log share: %d allowed, want 2", n)
	}
	slots := ratelimit.Must(ratelimit.Concurrency(4, 3*time.Second))
	var permits []*ratelimit.Permit
	for i := 0; i < 3; i++ {
		timed("acquire", func() {
			p, d, err := l.Acquire(ctx, "rl:{lf}:slots", slots, 1)
			if err != nil || !d.Degraded {
				t.Fatalf("acquire %d: %+v %v", i, d, err)
			}
			if (p != nil) != (i < 2) {
				t.Fatalf("acquire %d: permit %v, want 2 of the share", i, p != nil)
			}
			if p != nil {
				permits = append(permits, p)
			}
		})
	}
	if held, err := permits[0].Release(ctx); !held || err != nil {
		t.Fatalf("release: %v %v", held, err)
	}
	p, d, _ := l.Acquire(ctx, "rl:{lf}:slots", slots, 1)
	if p == nil || !d.Degraded {
		t.Fatalf("a released local slot is free again: %+v", d)
	}
	_, _ = p.Release(ctx)
	_, _ = permits[1].Release(ctx)
	tk, err := l.Take(ctx, "rl:{lf}:take", bucket, 100)
	if err != nil || !tk.Degraded || tk.Taken != 5 {
		t.Fatalf("take: %+v %v, want the share's 5", tk, err)
	}
	counts := l.Counts()
	if counts.Outages != 1 || counts.Degraded < 15 || counts.DegradedAllowed < 10 {
		t.Fatalf("counts %+v", counts)
	}
	if !strings.Contains(l.FailurePolicy().String(), "1/2") {
		t.Fatal(l.FailurePolicy().String())
	}
}

// LocalFallback serves a fixed window and a sliding log on a stopped server as one token bucket
// each at the share: 4 per 2 s on one of 2 instances is 2 at once, then one a second.
func TestLocalFallbackServesEveryRateKindAsOneBucket(t *testing.T) {
	srv := redistest.Start(t, true)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer c.Close()
	l := newLimiter(t, c, ratelimit.Options{Failure: ratelimit.LocalFallback(2), Deadline: 100 * time.Millisecond})
	srv.Stop()
	ctx := context.Background()
	for _, p := range []ratelimit.Policy{ratelimit.Must(ratelimit.FixedWindow(4, 2*time.Second)),
		ratelimit.Must(ratelimit.SlidingLog(4, 2*time.Second))} {
		key := "rl:{lf}:" + p.Kind()
		start := time.Now()
		allowed, denied := 0, ratelimit.Decision{}
		for i := 0; i < 5; i++ {
			d, err := l.Check(ctx, key, p, 1)
			if err != nil || !d.Degraded || d.Limit != 2 {
				t.Fatalf("%s check %d: %+v %v", p.Kind(), i, d, err)
			}
			if d.Allowed {
				allowed++
			} else if denied.RetryAfter == 0 {
				denied = d
			}
		}
		took := time.Since(start)
		if allowed < 2 || allowed > 2+int(took/time.Second) {
			t.Fatalf("%s: %d allowed in %v, want the share (2), plus one a second", p.Kind(), allowed, took)
		}
		if denied.RetryAfter <= 0 || denied.RetryAfter > time.Second {
			t.Fatalf("%s: denial %+v, want one back within a second", p.Kind(), denied)
		}
		time.Sleep(denied.RetryAfter)
		if d, _ := l.Check(ctx, key, p, 1); !d.Allowed {
			t.Fatalf("%s: %+v after retry_after, want one back", p.Kind(), d)
		}
	}
}

// A call whose context the caller cancelled (its client went away) gets the failure policy's
// decision, but is no outage: no breaker count, no outage logged, and Auto keeps the engine it
// chose (after an outage it would try the module again first).
func TestACancelledCallIsNoOutage(t *testing.T) {
	srv := redistest.Start(t, false)
	var logs strings.Builder
	var logMu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logs.Write(p)
	}), nil))
	l := newLimiter(t, srv.Client(t), ratelimit.Options{Failure: ratelimit.FailClosed(), BreakerFailures: 2, Logger: logger})
	if v, err := l.Verify(context.Background()); err != nil || v.Engine != ratelimit.Functions {
		t.Fatalf("Verify: %v %v", v, err)
	}
	bucket := ratelimit.Must(ratelimit.TokenBucket(10, 5))
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for i := 0; i < 5; i++ {
		d, err := l.Check(gone, "rl:{gone}", bucket, 1)
		if err != nil || !d.Degraded || d.Allowed {
			t.Fatalf("cancelled call %d: %+v %v", i, d, err)
		}
	}
	counts := l.Counts()
	if counts.Outages != 0 || counts.BreakerOpened != 0 || l.BreakerOpen() || counts.Degraded != 5 {
		t.Fatalf("counts %+v, breaker open %v", counts, l.BreakerOpen())
	}
	if e, _ := l.Engine(); e != ratelimit.Functions {
		t.Fatalf("engine %v after cancelled calls", e)
	}
	logMu.Lock()
	out := logs.String()
	logMu.Unlock()
	if strings.Contains(out, "outage") {
		t.Fatalf("logged an outage:\n%s", out)
	}
	d, err := l.Check(context.Background(), "rl:{gone}", bucket, 1)
	if err != nil || d.Degraded || !d.Allowed || d.Remaining != 9 {
		t.Fatalf("after: %+v %v", d, err)
	}
}

// A user of the strict calls alone (CheckAllStrict, Peek, Refund) meets an outage as a check's
// user does: one WARN line and one count when it starts, whatever the number of calls in it, and
// one line when Redis answers again (the probe's PING with the breaker open, else the next call).
func TestStrictCallsStartAndEndAnOutage(t *testing.T) {
	for _, failures := range []int{3, 100} {
		t.Run(fmt.Sprintf("BreakerFailures=%d", failures), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, true)
			c := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer c.Close()
			var logs logBuffer
			l := newLimiter(t, c, ratelimit.Options{Failure: ratelimit.FailOpen(), Deadline: 100 * time.Millisecond,
				BreakerFailures: failures, BreakerCooldown: 10 * time.Second, Logger: logs.logger()})
			ctx := context.Background()
			bucket := ratelimit.Must(ratelimit.TokenBucket(10, 5))
			limit := ratelimit.Limit{Key: "rl:{strict}", Policy: bucket, Cost: 1}
			if d, err := l.CheckAllStrict(ctx, limit); err != nil || !d.Allowed {
				t.Fatalf("before: %+v %v", d, err)
			}
			srv.Pause()
			for i := 0; i < 5; i++ {
				if _, err := l.CheckAllStrict(ctx, limit); !errors.Is(err, ratelimit.ErrDeadline) && !errors.Is(err, ratelimit.ErrBreakerOpen) {
					t.Fatalf("paused, call %d: %v", i, err)
				}
			}
			if _, err := l.Peek(ctx, limit.Key, bucket); err == nil {
				t.Fatal("Peek answered while paused")
			}
			if err := l.Refund(ctx, limit.Key, bucket, 1); err == nil {
				t.Fatal("Refund answered while paused")
			}
			if n := l.Counts(); n.Outages != 1 || n.Degraded != 0 || n.Decisions != 1 {
				t.Fatalf("during: counts %+v", n)
			}
			if out := logs.String(); strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, "an outage") ||
				strings.Contains(out, "outage over") {
				t.Fatalf("during: logs\n%s", out)
			}
			srv.Resume()
			var err error
			for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				if _, err = l.CheckAllStrict(ctx, limit); err == nil {
					break
				}
			}
			if err != nil {
				t.Fatalf("after the pause: %v", err)
			}
			if _, err := l.Peek(ctx, limit.Key, bucket); err != nil {
				t.Fatalf("Peek after: %v", err)
			}
			if n := l.Counts(); n.Outages != 1 || n.Degraded != 0 {
				t.Fatalf("after: counts %+v", n)
			}
			out := logs.String()
			if strings.Count(out, "level=WARN") != 1 || strings.Count(out, "outage over") != 1 || !strings.Contains(out, "degraded_decisions=0") {
				t.Fatalf("after: logs\n%s", out)
			}
		})
	}
}
