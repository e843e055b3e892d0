package ratelimit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimit "github.com/redis-ratelimit/redis-ratelimit/go"
	"github.com/redis-ratelimit/redis-ratelimit/go/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Options.Batch: 200 concurrent checks of one bucket of 10 (sent in shared pipelines) get exactly
// 10, on the module, on a stock server through FCALL (the library missing at first: the first
// pipeline's "Function not found" sends each call again alone, which loads it) and through
// EVALSHA (NOSCRIPT, the same), over one connection; then, the server paused, every call returns within the deadline
// with the failure policy's decision, and once it resumes Redis decides again.
func TestBatch(t *testing.T) {
	for _, ec := range engineCases[:3] {
		t.Run(ec.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, ec.module)
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
			defer c.Close()
			const deadline = 300 * time.Millisecond
			const slack = 100 * time.Millisecond
			l := newLimiter(t, c, ratelimit.Options{Failure: ratelimit.FailClosed(), Engine: ec.engine, Batch: true,
				Deadline: deadline, BreakerFailures: 1000})
			bucket := ratelimit.Must(ratelimit.TokenBucket(10, 0.001))
			ctx := context.Background()
			var wg sync.WaitGroup
			var allowed atomic.Int64
			start := make(chan struct{})
			for i := 0; i < 200; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					d, err := l.Check(ctx, "rl:{batch}", bucket, 1)
					if err != nil || d.Degraded {
						t.Errorf("%+v %v", d, err)
					}
					if d.Allowed {
						allowed.Add(1)
					}
				}()
			}
			close(start)
			wg.Wait()
			if n := allowed.Load(); n != 10 {
				t.Fatalf("%d allowed of 200, want 10", n)
			}
			if e, _ := l.Engine(); e != ec.want {
				t.Fatalf("engine %v, want %v", e, ec.want)
			}
			// One pipeline at a time: one connection (200 calls sent one by one would open the
			// pool's 10 a core).
			if s := c.PoolStats(); s.TotalConns > 2 {
				t.Fatalf("%d connections: the calls were not batched", s.TotalConns)
			}
			srv.Pause()
			var late atomic.Int64
			for i := 0; i < 20; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					begin := time.Now()
					d, err := l.Check(ctx, "rl:{batch:paused}", bucket, 1)
					if err != nil || !d.Degraded || d.Allowed {
						t.Errorf("paused: %+v %v", d, err)
					}
					if time.Since(begin) > deadline+slack {
						late.Add(1)
					}
				}()
			}
			wg.Wait()
			if n := late.Load(); n > 0 {
				t.Fatalf("%d calls past the deadline while the server was paused", n)
			}
			srv.Resume()
			for end := time.Now().Add(5 * time.Second); ; {
				d, err := l.Check(ctx, "rl:{batch:after}", bucket, 1)
				if err == nil && !d.Degraded && d.Allowed {
					break
				}
				if time.Now().After(end) {
					t.Fatalf("not decided again after the pause: %+v %v", d, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
