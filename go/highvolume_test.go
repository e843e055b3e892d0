package ratelimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"math/bits"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimit "github.com/redis-ratelimit/redis-ratelimit/go"
	"github.com/redis-ratelimit/redis-ratelimit/go/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// docs/high-volume.md on real servers: batched units and the pre-check, on the module and on a
// stock server with the library (FCALL).

// volumeServer is a server of an engine and the command its checks run there (commandstats).
type volumeServer struct {
	name, command string
	module        bool
}

var volumeServers = []volumeServer{{"module", "rl.token", true}, {"stock-fcall", "fcall", false}}

// contractAhead is the contract's batching.ahead: a batch is taken ahead below size / ahead units.
func contractAhead(t *testing.T) uint64 {
	var doc struct {
		Batching struct {
			Ahead uint64 `json:"ahead"`
		} `json:"batching"`
	}
	must(t, json.Unmarshal(ratelimit.ContractJSON(), &doc))
	return doc.Batching.Ahead
}

// slowBucket is a bucket that does not refill while a test runs (a token every 1,000 s).
func slowBucket(t *testing.T, capacity, batch uint64, lease time.Duration) ratelimit.Policy {
	t.Helper()
	p, err := ratelimit.Must(ratelimit.TokenBucket(capacity, 0.001)).WithBatch(batch, lease)
	must(t, err)
	return p
}

// remaining is what Redis' bucket holds now (RL.INSPECT through a limiter of its own).
func remaining(t *testing.T, c *redis.Client, key string, p ratelimit.Policy) uint64 {
	t.Helper()
	in, err := newLimiter(t, c, ratelimit.Options{Failure: ratelimit.FailClosed()}).Peek(context.Background(), key, p)
	must(t, err)
	return in.Remaining
}

// Several instances (limiters on connections of their own) share one key, batching, under
// concurrency: never admitted beyond the limit, each instance holds at most batch - 1 units, and
// closing them gives every held unit back (then Redis' remaining + admitted = the capacity: the
// bucket does not refill while the test runs).
func TestBatchedInstancesNeverAdmitBeyondTheLimit(t *testing.T) {
	for _, vs := range volumeServers {
		t.Run(vs.name, func(t *testing.T) {
			ctx := context.Background()
			srv := redistest.Start(t, vs.module)
			const capacity, batch, instances, workers, attempts = 300, 16, 3, 4, 150
			bucket := slowBucket(t, capacity, batch, time.Minute)
			var admitted atomic.Uint64
			limiters := make([]*ratelimit.Limiter, instances)
			var wg sync.WaitGroup
			for i := range limiters {
				limiters[i] = newLimiter(t, redis.NewClient(&redis.Options{Addr: srv.Addr}), ratelimit.Options{Failure: ratelimit.FailClosed()})
				for range workers {
					wg.Add(1)
					go func(l *ratelimit.Limiter) {
						defer wg.Done()
						for range attempts {
							d, err := l.Check(ctx, "rl:{shared}", bucket, 1)
							if err != nil || d.Degraded {
								t.Errorf("check: %+v %v", d, err)
								return
							}
							if d.Allowed {
								admitted.Add(1)
							}
						}
					}(limiters[i])
				}
			}
			wg.Wait()
			if n := admitted.Load(); n > capacity {
				t.Fatalf("admitted %d, above the limit %d", n, capacity)
			}
			var held uint64
			for _, l := range limiters {
				h := l.Held("rl:{shared}", bucket)
				if h > batch-1 {
					t.Fatalf("an instance holds %d units, above batch - 1 = %d", h, batch-1)
				}
				held += h
			}
			before := remaining(t, srv.Client(t), "rl:{shared}", bucket)
			for _, l := range limiters {
				must(t, l.Close()) // waits for batches taken ahead still in flight
			}
			// Every unit Redis granted was admitted or given back.
			after := remaining(t, srv.Client(t), "rl:{shared}", bucket)
			if after < before+held || admitted.Load()+after != capacity {
				t.Fatalf("after a clean close Redis holds %d (%d before, %d held) and %d were admitted: want %d in all",
					after, before, held, admitted.Load(), capacity)
			}
			var local uint64
			for _, l := range limiters {
				local += l.Counts().Local
			}
			if local == 0 {
				t.Fatal("no decision was local")
			}
		})
	}
}

// A limiter dropped without Close loses what it held (and a batch it had in flight): at most
// batch - 1 units of the key.
func TestADroppedLimiterLosesAtMostItsBatch(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, true)
	const capacity, batch = 100, 8
	bucket := slowBucket(t, capacity, batch, time.Minute)
	l, err := ratelimit.New(srv.Client(t), ratelimit.Options{Failure: ratelimit.FailClosed(), Logger: quiet})
	must(t, err)
	var admitted, held uint64
	for held == 0 || admitted < 20 { // until the limiter holds some units
		if d, err := l.Check(ctx, "rl:{dropped}", bucket, 1); err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
		admitted++
		held = l.Held("rl:{dropped}", bucket)
	}
	l = nil // dropped: never closed
	lost := capacity - admitted - remaining(t, srv.Client(t), "rl:{dropped}", bucket)
	if lost < held || lost > batch-1 {
		t.Fatalf("lost %d units (held %d), want the held ones and at most %d", lost, held, batch-1)
	}
}

// A hot key's calls per decision fall to about 1 / batch; a quiet key (its lease over between
// checks) keeps one call per check and holds nothing.
func TestAdaptiveBatches(t *testing.T) {
	for _, vs := range volumeServers {
		t.Run(vs.name, func(t *testing.T) {
			ctx := context.Background()
			srv := redistest.Start(t, vs.module)
			c := srv.Client(t)
			l := newLimiter(t, c, ratelimit.Options{Failure: ratelimit.FailClosed()})
			_, err := l.Verify(ctx) // on a stock server: the library loaded before the count starts
			must(t, err)
			const checks, batch = 1000, 16
			hot := slowBucket(t, 100_000, batch, time.Minute)
			start := calls(ctx, c, vs.command)
			for range checks {
				if d, err := l.Check(ctx, "rl:{hot}", hot, 1); err != nil || !d.Allowed {
					t.Fatalf("%+v %v", d, err)
				}
			}
			// Growing: about log2(batch) calls; then each batch, taken ahead when fewer than
			// batch / ahead units are left, brings at least batch - 1 - batch / ahead units.
			ahead := contractAhead(t)
			most := int64(checks/(batch-1-batch/ahead) + uint64(bits.Len(batch)) + 3)
			if n := calls(ctx, c, vs.command) - start; n > most {
				t.Fatalf("%d checks of a hot key cost %d calls, want at most %d", checks, n, most)
			}
			if local := l.Counts().Local; local < checks-uint64(most) {
				t.Fatalf("%d local decisions", local)
			}
			// A batch taken ahead for the hot key may still be in flight: Close waits for it (and
			// gives the hot key's units back) before the quiet key's calls are counted, on a limiter
			// of its own.
			must(t, l.Close())
			l = newLimiter(t, c, ratelimit.Options{Failure: ratelimit.FailClosed()})
			_, err = l.Verify(ctx)
			must(t, err)
			quiet := slowBucket(t, 100, batch, time.Millisecond)
			start = calls(ctx, c, vs.command)
			for range 10 {
				time.Sleep(5 * time.Millisecond) // past the 1 ms lease: the key is cool at every check
				if d, err := l.Check(ctx, "rl:{quiet}", quiet, 1); err != nil || !d.Allowed || d.Local {
					t.Fatalf("%+v %v", d, err)
				}
				if h := l.Held("rl:{quiet}", quiet); h != 0 {
					t.Fatalf("a quiet key holds %d units", h)
				}
			}
			if n := calls(ctx, c, vs.command) - start; n != 10 {
				t.Fatalf("10 checks of a quiet key cost %d calls", n)
			}
		})
	}
}

// The pre-check: a denied client hammering costs no round trip until the retry_after Redis gave;
// after it, the request goes to Redis and is allowed when Redis allows.
func TestThePrecheck(t *testing.T) {
	for _, vs := range volumeServers {
		t.Run(vs.name, func(t *testing.T) {
			ctx := context.Background()
			srv := redistest.Start(t, vs.module)
			c := srv.Client(t)
			l := newLimiter(t, c, ratelimit.Options{Failure: ratelimit.FailClosed(), LocalPrecheck: true})
			_, err := l.Verify(ctx) // on a stock server: the library loaded before the count starts
			must(t, err)
			// A token every 10 s: the hammering below ends well within a retry_after.
			slow := ratelimit.Must(ratelimit.TokenBucket(2, 0.1))
			start := calls(ctx, c, vs.command)
			for i := range 200 {
				d, err := l.Check(ctx, "rl:{hammer}", slow, 1)
				must(t, err)
				if d.Allowed != (i < 2) || d.Local != (i > 2) {
					t.Fatalf("check %d: %+v", i, d)
				}
				if !d.Allowed && (d.RetryAfter <= 0 || d.RetryAfter > 10*time.Second) {
					t.Fatalf("check %d: retry after %v", i, d.RetryAfter)
				}
			}
			if n := calls(ctx, c, vs.command) - start; n != 3 {
				t.Fatalf("200 checks, 197 of them denied, cost %d calls; want 3", n)
			}
			if local := l.Counts().Local; local != 197 {
				t.Fatalf("%d local decisions, want 197", local)
			}
			// A smaller cost still asks Redis; a larger one is denied here.
			if d, err := l.Check(ctx, "rl:{hammer}", slow, 2); err != nil || d.Allowed || !d.Local {
				t.Fatalf("cost 2: %+v %v", d, err)
			}
			// Never beyond the retry_after: past it the request goes to Redis and is allowed.
			fast := ratelimit.Must(ratelimit.TokenBucket(1, 5))
			must2 := func(d ratelimit.Decision, err error) ratelimit.Decision { must(t, err); return d }
			if d := must2(l.Check(ctx, "rl:{retry}", fast, 1)); !d.Allowed {
				t.Fatalf("%+v", d)
			}
			denied := must2(l.Check(ctx, "rl:{retry}", fast, 1))
			if denied.Allowed || denied.Local {
				t.Fatalf("Redis' denial: %+v", denied)
			}
			if d := must2(l.Check(ctx, "rl:{retry}", fast, 1)); d.Allowed || !d.Local || d.RetryAfter > denied.RetryAfter {
				t.Fatalf("the pre-check's denial: %+v after %+v", d, denied)
			}
			time.Sleep(denied.RetryAfter)
			if d := must2(l.Check(ctx, "rl:{retry}", fast, 1)); !d.Allowed || d.Local {
				t.Fatalf("past the retry_after: %+v", d)
			}
		})
	}
}

// The batch option is refused where a kind takes no refunds, and out of bounds: usage errors.
func TestRefusedBatches(t *testing.T) {
	log := ratelimit.Must(ratelimit.SlidingLog(10, time.Second))
	lease := ratelimit.Must(ratelimit.Concurrency(10, time.Second))
	bucket := ratelimit.Must(ratelimit.TokenBucket(10, 1))
	for _, c := range []struct {
		name   string
		policy ratelimit.Policy
		batch  uint64
		lease  time.Duration
		field  string
	}{
		{"sliding log", log, 2, time.Second, "batch"},
		{"concurrency", lease, 2, time.Second, "batch"},
		{"batch 0", bucket, 0, time.Second, "batch"},
		{"batch above the limit", bucket, 11, time.Second, "batch"},
		{"no lease", bucket, 2, 0, "lease"},
		{"lease in part of a ms", bucket, 2, 1500 * time.Microsecond, "lease"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.policy.WithBatch(c.batch, c.lease)
			var pe *ratelimit.PolicyError
			if !errors.Is(err, ratelimit.ErrUsage) || !errors.As(err, &pe) || pe.Field != c.field {
				t.Fatalf("got %v, want a usage error naming %s", err, c.field)
			}
		})
	}
	if _, err := bucket.WithBatch(10, ratelimit.DefaultLease()); err != nil {
		t.Fatal(err)
	}
}
