// The seed's lab on this package: two application instances share one Redis; the seed's Lua
// token bucket replaced by ratelimit.Limiter. REDIS_ADDR names the server (the module's, or a
// stock one: the library is loaded by itself).
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"time"

	ratelimit "github.com/redis-ratelimit/redis-ratelimit/go"
	"github.com/redis-ratelimit/redis-ratelimit/go/httplimit"
	"github.com/redis/go-redis/v9"
)

type quiet struct{}

func (quiet) Printf(context.Context, string, ...interface{}) {}

func limiter(addr string, failure ratelimit.FailurePolicy) *ratelimit.Limiter {
	l, err := ratelimit.New(redis.NewClient(&redis.Options{Addr: addr}), ratelimit.Options{
		Failure: failure, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	return l
}

func main() {
	redis.SetLogger(quiet{})
	ctx := context.Background()
	addr := os.Getenv("REDIS_ADDR")
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	rdb.FlushDB(ctx)
	instA, instB := limiter(addr, ratelimit.FailOpen()), limiter(addr, ratelimit.FailOpen())
	v, err := instA.Verify(ctx)
	if err != nil {
		fmt.Println("verify:", err)
		os.Exit(1)
	}
	fmt.Println("engine:", v.Engine)
	bucket := ratelimit.Must(ratelimit.TokenBucket(10, 5))

	// 1. A burst of 12 requests for one key, alternating between the instances.
	allowed, denied := 0, 0
	var first ratelimit.Decision
	for i := 0; i < 12; i++ {
		l := instA
		if i%2 == 1 {
			l = instB
		}
		d, _ := l.Check(ctx, "user:alice", bucket, 1)
		if d.Allowed {
			allowed++
		} else {
			if denied == 0 {
				first = d
			}
			denied++
		}
	}
	fmt.Printf("burst of 12: %d allowed, %d denied\n", allowed, denied)
	fmt.Printf("first denial: retry after %d ms\n", first.RetryAfter.Round(10*time.Millisecond).Milliseconds()) // the burst itself takes a few ms

	// 2. Refill: after 1 s, 5 tokens came back; 8 requests get 5.
	time.Sleep(time.Second)
	got := 0
	for i := 0; i < 8; i++ {
		if d, _ := instA.Check(ctx, "user:alice", bucket, 1); d.Allowed {
			got++
		}
	}
	fmt.Printf("after 1 s: %d of 8 allowed\n", got)

	// 3. Isolation: another key has its own bucket.
	d, _ := instB.Check(ctx, "user:bob", bucket, 1)
	fmt.Printf("bob: allowed=%v remaining=%d\n", d.Allowed, d.Remaining)

	// 4. 200 concurrent requests on a fresh key: exactly the capacity gets through.
	var n atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			l := instA
			if i%2 == 1 {
				l = instB
			}
			if d, _ := l.Check(ctx, "user:carol", bucket, 1); d.Allowed {
				n.Add(1)
			}
		}(i)
	}
	wg.Wait()
	fmt.Printf("200 concurrent: %d allowed\n", n.Load())

	// 5. HTTP: requests 1, 10, 11, 12 of one caller.
	mw, err := httplimit.New(httplimit.Config{Limiter: instA, PrincipalHeader: "X-User",
		Routes: []httplimit.Route{{Name: "api", Prefix: "/api", Policy: bucket}}})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })))
	defer srv.Close()
	for i := 1; i <= 12; i++ {
		req, _ := http.NewRequest("GET", srv.URL+"/api/items", nil)
		req.Header.Set("X-User", "dave")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		if i == 1 || i >= 10 {
			fmt.Printf("request %d: %d remaining=%s retry-after=%s\n", i, resp.StatusCode,
				resp.Header.Get("Ratelimit-Remaining"), resp.Header.Get("Retry-After"))
		}
	}

	// 6. Redis down: fail open allows, fail closed denies, each within the deadline.
	for _, f := range []ratelimit.FailurePolicy{ratelimit.FailOpen(), ratelimit.FailClosed()} {
		l := limiter("127.0.0.1:1", f)
		start := time.Now()
		d, _ := l.Check(ctx, "user:alice", bucket, 1)
		fmt.Printf("redis down, %s: allowed=%v degraded=%v within deadline=%v\n", f, d.Allowed, d.Degraded,
			time.Since(start) <= l.Deadline()+50*time.Millisecond)
	}
}
