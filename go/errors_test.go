package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimit "github.com/redis-ratelimit/redis-ratelimit/go"
	"github.com/redis-ratelimit/redis-ratelimit/go/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A limit whose kind changed under the same key (a token bucket's key checked as a fixed window):
// a conflict, on the module and on the library. The failure policy decides; no outage is logged
// or counted, the breaker stays closed however many calls meet it, one error line names the key
// and how to recover, and Counts.Conflicts counts each call.
func TestAConflictIsNoOutage(t *testing.T) {
	for _, module := range []bool{true, false} {
		t.Run(fmt.Sprintf("module=%v", module), func(t *testing.T) {
			ctx := context.Background()
			srv := redistest.Start(t, module)
			logs := &logBuffer{}
			l := newLimiter(t, srv.Client(t), ratelimit.Options{Failure: ratelimit.FailClosed(), BreakerFailures: 2, Logger: logs.logger()})
			const key = "rl:{user:42}:api"
			d, err := l.Check(ctx, key, ratelimit.Must(ratelimit.TokenBucket(10, 5)), 1)
			if err != nil || d.Degraded {
				t.Fatalf("the bucket: %+v %v", d, err)
			}
			window := ratelimit.Must(ratelimit.FixedWindow(100, time.Minute))
			for i := 0; i < 6; i++ {
				d, err := l.Check(ctx, key, window, 1)
				if err != nil || !d.Degraded || d.Allowed {
					t.Fatalf("conflict %d: %+v %v", i, d, err)
				}
			}
			_, err = l.CheckAllStrict(ctx, ratelimit.Limit{Key: key, Policy: window, Cost: 1})
			if !errors.Is(err, ratelimit.ErrConflict) || errors.Is(err, ratelimit.ErrUsage) {
				t.Fatalf("strict: %v", err)
			}
			var ce *ratelimit.CallError
			if !errors.As(err, &ce) || ce.Class != ratelimit.ClassConflict {
				t.Fatalf("strict: %#v", err)
			}
			n := l.Counts()
			if n.Conflicts != 7 || n.Outages != 0 || n.BreakerOpened != 0 || l.BreakerOpen() || n.Degraded != 6 {
				t.Fatalf("counts %+v, breaker open %v", n, l.BreakerOpen())
			}
			out := logs.String()
			if strings.Count(out, "level=ERROR") != 1 || !strings.Contains(out, key) || !strings.Contains(out, "recover=") ||
				strings.Contains(out, "(an outage)") || strings.Contains(out, "lasted") {
				t.Fatalf("logs:\n%s", out)
			}
			// A key it has not met yet is logged too, once.
			_, _ = l.Check(ctx, "rl:{user:43}:api", ratelimit.Must(ratelimit.TokenBucket(10, 5)), 1)
			_, _ = l.Check(ctx, "rl:{user:43}:api", window, 1)
			_, _ = l.Check(ctx, "rl:{user:43}:api", window, 1)
			if got := strings.Count(logs.String(), "level=ERROR"); got != 2 {
				t.Fatalf("%d error lines for two keys:\n%s", got, logs.String())
			}
		})
	}
}

// The caller's mistakes are returned (errors.Is ErrUsage, with Redis' code and text), never
// decided by the failure policy: refused before sending (an empty key, which no call creates; the
// same key twice) or answered so by Redis (a weight past the bound). Counted; the breaker stays closed.
func TestUsageErrorsAreReturned(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, true)
	c := srv.Client(t)
	l := newLimiter(t, c, ratelimit.Options{Failure: ratelimit.FailOpen(), BreakerFailures: 1})
	bucket := ratelimit.Must(ratelimit.TokenBucket(10, 5))
	slots := ratelimit.Must(ratelimit.Concurrency(2, time.Minute))
	want := func(what string, err error, code, message string) {
		t.Helper()
		var u *ratelimit.UsageError
		if !errors.Is(err, ratelimit.ErrUsage) || !errors.As(err, &u) || u.Code != code || u.Message != message {
			t.Fatalf("%s: %v, want the usage error %s %q", what, err, code, message)
		}
	}
	d, err := l.Check(ctx, "", bucket, 1)
	want("an empty key", err, "ERR", "ERR invalid key: must be a non-empty string")
	if d.Allowed {
		t.Fatalf("an empty key allowed: %+v", d)
	}
	_, err = l.CheckAll(ctx, ratelimit.Limit{Key: "rl:{a}:x", Policy: bucket, Cost: 1}, ratelimit.Limit{Key: "rl:{a}:x", Policy: ratelimit.Must(ratelimit.FixedWindow(5, time.Second)), Cost: 1})
	want("the same key twice", err, "ERR", "ERR the same key appears more than once")
	_, _, err = l.Acquire(ctx, "rl:{a}:slots", slots, 200_000)
	want("a weight past the bound (Redis' answer)", err, "ERR", "ERR invalid weight: must be a whole number from 1 to 100000")
	if n, _ := c.DBSize(ctx).Result(); n != 0 {
		t.Fatalf("%d keys written by refused calls", n)
	}
	if _, err := ratelimit.ParseCost("18446744073709551616"); err == nil || err.Error() != "ERR invalid cost: too large" {
		t.Fatalf("ParseCost: %v", err)
	}
	n := l.Counts()
	if n.UsageErrors != 3 || n.Degraded != 0 || n.Outages != 0 || l.BreakerOpen() {
		t.Fatalf("counts %+v", n)
	}
}

// Redis answering with an error reply whose class's breaker is "answered" (a conflict, a usage
// error) is a success for the breaker, as a decision is: when the one call let through after an
// outage's cool-down meets it, the breaker closes and the next call is decided. The user's ACL
// refuses PING, so the limiter's own probe cannot close the breaker first.
func TestAnAnsweredProbeClosesTheBreaker(t *testing.T) {
	bucket := ratelimit.Must(ratelimit.TokenBucket(10, 5))
	window := ratelimit.Must(ratelimit.FixedWindow(100, time.Minute))
	probes := map[string]func(context.Context, *ratelimit.Limiter) error{
		"conflict": func(ctx context.Context, l *ratelimit.Limiter) error {
			d, err := l.Check(ctx, "rl:{user:42}:api", window, 1) // the key holds a token bucket
			if err != nil || !d.Degraded || d.Allowed {
				return fmt.Errorf("the conflict: %+v %v", d, err)
			}
			return nil
		},
		"usage": func(ctx context.Context, l *ratelimit.Limiter) error {
			_, _, err := l.Acquire(ctx, "rl:{user:42}:slots", ratelimit.Must(ratelimit.Concurrency(2, time.Minute)), 200_000)
			if !errors.Is(err, ratelimit.ErrUsage) {
				return fmt.Errorf("a weight past the bound: %v", err)
			}
			return nil
		},
	}
	for name, probe := range probes {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			srv := redistest.Start(t, true)
			admin := srv.Client(t)
			must(t, admin.Do(ctx, "ACL", "SETUSER", "limiter", "on", ">pw", "~*", "+@all", "-ping").Err())
			must(t, admin.ConfigSet(ctx, "lua-time-limit", "10").Err()) // a long script: BUSY after 10 ms
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "limiter", Password: "pw"})
			t.Cleanup(func() { _ = c.Close() })
			logs := &logBuffer{}
			l := newLimiter(t, c, ratelimit.Options{Failure: ratelimit.FailClosed(), BreakerFailures: 1,
				BreakerCooldown: time.Nanosecond, Logger: logs.logger()})
			if d, err := l.Check(ctx, "rl:{user:42}:api", bucket, 1); err != nil || d.Degraded {
				t.Fatalf("before: %+v %v", d, err)
			}
			// An outage: Redis answers BUSY while a script runs, until SCRIPT KILL.
			script := make(chan error, 1)
			go func() { script <- admin.Eval(ctx, "while true do end", nil).Err() }()
			for end := time.Now().Add(5 * time.Second); ; {
				if err := admin.Ping(ctx).Err(); err != nil && strings.HasPrefix(err.Error(), "BUSY") {
					break
				} else if time.Now().After(end) {
					t.Fatalf("no BUSY reply: %v", err)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if d, err := l.Check(ctx, "rl:{user:1}:api", bucket, 1); err != nil || !d.Degraded || !l.BreakerOpen() {
				t.Fatalf("busy: %+v %v, breaker open %v", d, err, l.BreakerOpen())
			}
			must(t, admin.Do(ctx, "SCRIPT", "KILL").Err())
			if err := <-script; err == nil {
				t.Fatal("the script ended without an error")
			}
			if !l.BreakerOpen() {
				t.Fatal("the breaker closed before any call (PING is refused to this user)")
			}
			// The cool-down is over: this call is the breaker's probe.
			if err := probe(ctx, l); err != nil {
				t.Fatal(err)
			}
			if l.BreakerOpen() {
				t.Fatal("the breaker is still open after Redis answered its probe")
			}
			if d, err := l.Check(ctx, "rl:{user:2}:api", bucket, 1); err != nil || d.Degraded || !d.Allowed {
				t.Fatalf("after the probe: %+v %v", d, err)
			}
			n := l.Counts()
			if n.Outages != 1 || n.BreakerOpened != 1 || n.Degraded != map[string]uint64{"conflict": 2, "usage": 1}[name] {
				t.Fatalf("counts %+v", n)
			}
			if out := logs.String(); !strings.Contains(out, "outage over") {
				t.Fatalf("the outage's end is not logged:\n%s", out)
			}
		})
	}
}

// On a cluster client, keys of one call in different hash slots are refused before sending
// (CROSSSLOT, Redis' text), not left to the failure policy.
func TestCrossSlotIsRefusedBeforeSending(t *testing.T) {
	ctx := context.Background()
	cl := sharedCluster(t, true)
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer rc.Close()
	l := newLimiter(t, rc, ratelimit.Options{Failure: ratelimit.FailOpen()})
	bucket := ratelimit.Must(ratelimit.TokenBucket(10, 5))
	d, err := l.CheckAll(ctx, ratelimit.Limit{Key: "rl:{xslot:1}:api", Policy: bucket, Cost: 1}, ratelimit.Limit{Key: "rl:{xslot:2}:api", Policy: bucket, Cost: 1})
	var u *ratelimit.UsageError
	if !errors.As(err, &u) || u.Code != "CROSSSLOT" || u.Message != "CROSSSLOT Keys in request don't hash to the same slot" || d.Allowed {
		t.Fatalf("keys in two slots: %+v %v", d, err)
	}
	d, err = l.CheckAll(ctx, ratelimit.Limit{Key: "rl:{xslot:1}:api", Policy: bucket, Cost: 1}, ratelimit.Limit{Key: "rl:{xslot:1}:all", Policy: bucket, Cost: 1})
	if err != nil || d.Degraded || !d.Allowed {
		t.Fatalf("keys of one tag: %+v %v", d, err)
	}
}

// A stock cluster at cold start (no library on any node, no engine known) under many concurrent
// callers, failing closed: every decision exact (none degraded), at most one FUNCTION LOAD per
// node, the engine not yet known before the first decision and FCALL after.
func TestColdStockClusterUnderLoad(t *testing.T) {
	ctx := context.Background()
	cl := sharedCluster(t, false)
	nodes := nodeClients(t, cl)
	for _, n := range nodes {
		must(t, n.FlushAll(ctx).Err())
		must(t, n.Do(ctx, "FUNCTION", "FLUSH").Err())
		must(t, n.ConfigResetStat(ctx).Err())
	}
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true, PoolSize: 200})
	defer rc.Close()
	logs := &logBuffer{}
	l := newLimiter(t, rc, ratelimit.Options{Failure: ratelimit.FailClosed(), Logger: logs.logger()})
	if e, why := l.Engine(); e != ratelimit.Auto || e.String() != "not yet known" {
		t.Fatalf("before the first call: %v (%s)", e, why)
	}
	bucket := ratelimit.Must(ratelimit.TokenBucket(6, 0.001))
	const callers, each = 300, 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	degraded, allowed := 0, 0
	for u := 0; u < callers; u++ {
		wg.Add(1)
		go func(u int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				d, err := l.Check(ctx, fmt.Sprintf("rl:{user:%d}:api", u), bucket, 1)
				mu.Lock()
				if err != nil || d.Degraded {
					degraded++
				} else if d.Allowed {
					allowed++
				}
				mu.Unlock()
			}
		}(u)
	}
	wg.Wait()
	if degraded != 0 || allowed != callers*6 {
		t.Errorf("%d of %d decisions degraded, %d allowed (want 0 and %d); logs:\n%s", degraded, callers*each, allowed, callers*6, logs.String())
	}
	for i, n := range nodes {
		if loads := calls(ctx, n, "function|load"); loads > 1 {
			t.Errorf("node %d: %d FUNCTION LOAD, want at most 1", i, loads)
		}
		if !hasLibrary(ctx, n) {
			t.Errorf("node %d has no library", i)
		}
	}
	if e, _ := l.Engine(); e != ratelimit.Functions {
		t.Fatalf("engine %v after the calls", e)
	}
	if n := l.Counts(); n.Outages != 0 || n.BreakerOpened != 0 {
		t.Fatalf("counts %+v", n)
	}
}

// A refused connection is unreachable (not "no answer within the deadline"), and the outage line
// names the engine in use: not yet known before any decision, the library after one.
func TestARefusedConnectionIsUnreachable(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, false)
	addr := srv.Addr
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	logs := &logBuffer{}
	l := newLimiter(t, c, ratelimit.Options{Failure: ratelimit.FailClosed(), Logger: logs.logger(), BreakerFailures: 100, Deadline: ratelimit.DefaultDeadline})
	bucket := ratelimit.Must(ratelimit.TokenBucket(10, 5))
	if d, err := l.Check(ctx, "rl:{r}", bucket, 1); err != nil || d.Degraded {
		t.Fatalf("before: %+v %v", d, err)
	}
	srv.Stop()
	_, err := l.CheckAllStrict(ctx, ratelimit.Limit{Key: "rl:{r}", Policy: bucket, Cost: 1})
	if !errors.Is(err, ratelimit.ErrUnreachable) || errors.Is(err, ratelimit.ErrDeadline) {
		t.Fatalf("a refused connection: %v", err)
	}
	d, err := l.Check(ctx, "rl:{r}", bucket, 1)
	if err != nil || !d.Degraded || d.Allowed {
		t.Fatalf("degraded: %+v %v", d, err)
	}
	if out := logs.String(); !strings.Contains(out, `engine="the Lua library through FCALL"`) || !strings.Contains(out, "unreachable") {
		t.Fatalf("the outage line:\n%s", out)
	}
}

// A reply that is not what the command answers (here a foreign library named ratelimit whose
// rl_token answers "OK") has the contract's class for an answer no rule knows: the failure policy
// decides it (before: a CallError without a class, and CheckAll panicked looking its class up).
func TestAnUnreadableReplyIsDecidedByThePolicy(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, false)
	c := srv.Client(t)
	must(t, c.FunctionLoad(ctx, "#!lua name=ratelimit\nredis.register_function('rl_token', function() return 'OK' end)").Err())
	l := newLimiter(t, c, ratelimit.Options{Failure: ratelimit.FailClosed(), Engine: ratelimit.Functions})
	bucket := ratelimit.Must(ratelimit.TokenBucket(10, 5))
	d, err := l.Check(ctx, "rl:{user:42}:api", bucket, 1)
	if err != nil || !d.Degraded || d.Allowed {
		t.Fatalf("check: %+v %v", d, err)
	}
	_, err = l.CheckAllStrict(ctx, ratelimit.Limit{Key: "rl:{user:42}:api", Policy: bucket, Cost: 1})
	var ce *ratelimit.CallError
	if !errors.As(err, &ce) || !errors.Is(err, ratelimit.ErrReply) || ce.Class != ratelimit.ClassMisconfigured {
		t.Fatalf("strict: %#v", err)
	}
}

// A key outside the user's ACL key patterns (NOPERM for the key, not the command) on a module
// server: misconfigured, logged once saying to fix the key patterns (before: to load the module),
// and the engine is not moved: a key the user may reach is then decided by the module.
func TestAKeyOutsideTheUsersPatterns(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, true)
	must(t, srv.Client(t).Do(ctx, "ACL", "SETUSER", "keys", "on", ">pw", "~other:*", "+@all").Err())
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "keys", Password: "pw"})
	t.Cleanup(func() { _ = c.Close() })
	logs := &logBuffer{}
	l := newLimiter(t, c, ratelimit.Options{Failure: ratelimit.FailClosed(), Logger: logs.logger()})
	bucket := ratelimit.Must(ratelimit.TokenBucket(10, 5))
	for i := 0; i < 3; i++ {
		d, err := l.Check(ctx, "rl:{user:42}:api", bucket, 1)
		if err != nil || !d.Degraded || d.Allowed || !l.Misconfigured() {
			t.Fatalf("a key outside the patterns: %+v %v misconfigured=%v", d, err, l.Misconfigured())
		}
	}
	d, err := l.Check(ctx, "other:{user:42}:api", bucket, 1)
	if err != nil || d.Degraded || !d.Allowed {
		t.Fatalf("a key inside the patterns: %+v %v", d, err)
	}
	if e, why := l.Engine(); e != ratelimit.Module {
		t.Fatalf("engine %v (%s), want the module", e, why)
	}
	out := logs.String()
	if strings.Count(out, "level=ERROR") != 1 || !strings.Contains(out, "NOPERM") || !strings.Contains(out, "key patterns") {
		t.Fatalf("logs:\n%s", out)
	}
}
