package ratelimit_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimit "github.com/redis-ratelimit/redis-ratelimit/go"
	"github.com/redis-ratelimit/redis-ratelimit/go/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Batching (the default): 200 concurrent checks of one bucket of 10 (sent in shared pipelines)
// get exactly 10, on the module, on a stock server through FCALL (the library missing at first: the
// first pipeline's "Function not found" sends each call again alone, which loads it) and through
// EVALSHA (NOSCRIPT, the same), over one or two connections; then, the server paused, every call
// returns within the deadline with the failure policy's decision, and once it resumes Redis
// decides again. Each with ContextTimeoutEnabled on the client and without it (then the round trip
// in flight outlives the deadline, and stops holding the others back there).
func TestBatch(t *testing.T) {
	for _, ec := range engineCases[:3] {
		for _, ctxTimeouts := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/ContextTimeoutEnabled=%v", ec.name, ctxTimeouts), func(t *testing.T) {
				t.Parallel()
				testBatch(t, ec, ctxTimeouts)
			})
		}
	}
}

func testBatch(t *testing.T, ec engineCase, ctxTimeouts bool) {
	srv := redistest.Start(t, ec.module)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: ctxTimeouts})
	defer c.Close()
	const deadline = 300 * time.Millisecond
	const slack = 100 * time.Millisecond
	l := newLimiter(t, c, ratelimit.Options{Failure: ratelimit.FailClosed(), Engine: ec.engine,
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
}

// DisableBatching: each of the 200 concurrent calls goes alone, over the pool's connections.
func TestDisableBatching(t *testing.T) {
	srv := redistest.Start(t, true)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer c.Close()
	l := newLimiter(t, c, ratelimit.Options{Failure: ratelimit.FailClosed(), DisableBatching: true})
	bucket := ratelimit.Must(ratelimit.TokenBucket(10, 0.001))
	var wg sync.WaitGroup
	var allowed atomic.Int64
	start := make(chan struct{})
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			d, err := l.Check(context.Background(), "rl:{unbatched}", bucket, 1)
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
	if s := c.PoolStats(); s.TotalConns <= 2 {
		t.Fatalf("%d connections for 200 concurrent calls sent alone", s.TotalConns)
	}
}

// stallingConn is a real connection to Redis whose reads wait, while stalled, for release: a
// connection lost in the network (a half-open TCP connection), with the server itself well.
type stallingConn struct {
	net.Conn
	stalled bool
	release chan struct{}
}

func (c *stallingConn) Read(p []byte) (int, error) {
	if c.stalled {
		<-c.release
	}
	return c.Conn.Read(p)
}

// A round trip that outlives the deadline (its connection lost, a client without
// ContextTimeoutEnabled that waits for its own timeouts) stops holding the calls queued behind it at
// the deadline: they go in their own pipeline, on another connection, and Redis decides them.
func TestBatchStuckRoundTrip(t *testing.T) {
	srv := redistest.Start(t, true)
	release := make(chan struct{})
	defer close(release)
	var dialed atomic.Int64
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ReadTimeout: time.Minute,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The first two connections (the two calls sent alone) are lost.
			return &stallingConn{Conn: conn, stalled: dialed.Add(1) <= 2, release: release}, nil
		}})
	defer c.Close()
	const deadline = 400 * time.Millisecond
	l := newLimiter(t, c, ratelimit.Options{Failure: ratelimit.FailClosed(), Engine: ratelimit.Module,
		Deadline: deadline, BreakerFailures: 1000})
	bucket := ratelimit.Must(ratelimit.TokenBucket(100, 1))
	ctx := context.Background()
	lone := make(chan ratelimit.Decision, 2)
	for i := 0; i < 2; i++ { // two round trips in flight at most: both on lost connections
		go func() {
			d, _ := l.Check(ctx, "rl:{stuck}", bucket, 1)
			lone <- d
		}()
	}
	time.Sleep(deadline / 4)
	queued, err := l.Check(ctx, "rl:{stuck}", bucket, 1)
	if err != nil || queued.Degraded || !queued.Allowed {
		t.Fatalf("the call queued behind a lost round trip was not decided by Redis: %+v %v", queued, err)
	}
	for i := 0; i < 2; i++ {
		if d := <-lone; !d.Degraded {
			t.Fatalf("a call on a lost connection: %+v, want the failure policy's decision", d)
		}
	}
}
