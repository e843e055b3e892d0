// RL.* from Go with go-redis: token bucket decisions, a sliding log, a route + global limit in one
// atomic call, the five reply fields by name mapped to HTTP headers, and an explicit fail-open /
// fail-closed choice when Redis is unreachable. `make examples` runs it against a throwaway server:
//
//	go run main.go 127.0.0.1:6379 <a closed port>
//
// It uses go-redis as Debian packages it (gopkg.in/redis.v5, package golang-gopkg-redis.v5-dev):
// this project's machines reach Debian's packages but not the Go module proxy. With go-redis v9 the
// call is `rdb.Do(ctx, "RL.TOKEN", key, capacity, rate, cost).Int64Slice()`; the rest is the same.
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	redis "gopkg.in/redis.v5"
)

// [readme:go]
// Decision holds the five fields every RL.* limiter replies, by name.
type Decision struct {
	Allowed      bool
	Limit        int64
	Remaining    int64
	RetryAfterMs int64 // -1: the cost is above the limit, it can never be allowed
	ResetAfterMs int64
	Limiting     int64 // in a multi-key call, the key group the reply describes
}

// Token sends RL.TOKEN key capacity rate cost [key capacity rate cost ...].
func Token(rdb *redis.Client, args ...interface{}) (Decision, error) {
	cmd := redis.NewSliceCmd(append([]interface{}{"RL.TOKEN"}, args...)...)
	rdb.Process(cmd)
	reply, err := cmd.Result()
	if err != nil {
		return Decision{}, err // Redis is unavailable: the caller's failure policy decides
	}
	n := make([]int64, len(reply))
	for i, v := range reply {
		n[i], _ = v.(int64)
	}
	d := Decision{Allowed: n[0] == 1, Limit: n[1], Remaining: n[2], RetryAfterMs: n[3], ResetAfterMs: n[4]}
	if len(n) > 5 {
		d.Limiting = n[5]
	}
	return d, nil
}

// Headers maps a decision the README's way: seconds rounded up; Retry-After at least 1.
func Headers(d Decision) map[string]string {
	h := map[string]string{
		"RateLimit-Limit":     strconv.FormatInt(d.Limit, 10),
		"RateLimit-Remaining": strconv.FormatInt(d.Remaining, 10),
		"RateLimit-Reset":     strconv.FormatInt((d.ResetAfterMs+999)/1000, 10),
	}
	if !d.Allowed && d.RetryAfterMs >= 0 {
		h["Retry-After"] = strconv.FormatInt(max64(1, (d.RetryAfterMs+999)/1000), 10)
	}
	return h
}

// Check is a decision that survives an unreachable Redis by an explicit choice, never silently.
func Check(rdb *redis.Client, key string, failOpen bool) (allowed, degraded bool) {
	d, err := Token(rdb, key, 10, 5, 1)
	if err != nil {
		return failOpen, true // count it, alert on it, send X-RateLimit-Degraded
	}
	return d.Allowed, false
}

// [/readme:go]

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func must(ok bool, what string) {
	if !ok {
		fmt.Fprintln(os.Stderr, "failed:", what)
		os.Exit(1)
	}
}

func main() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Args[1]})
	rdb.Del("go:user:ada", "go:slide", "go:{c1}:search", "go:{c1}:all", "go:cell:user123")

	allowed, denied := 0, 0
	var first Decision
	for i := 0; i < 12; i++ {
		d, err := Token(rdb, "go:user:ada", 10, 5, 1)
		must(err == nil, "RL.TOKEN")
		if d.Allowed {
			allowed++
		} else if denied++; denied == 1 {
			first = d
		}
	}
	must(allowed == 10 && first.RetryAfterMs > 0 && first.RetryAfterMs <= 200, "capacity 10")
	fmt.Printf("go token: %d allowed, %d denied; first denial Retry-After %s\n", allowed, denied, Headers(first)["Retry-After"])

	slide := 0
	for i := 0; i < 4; i++ {
		cmd := redis.NewSliceCmd("RL.SLIDE", "go:slide", 3, 60, fmt.Sprintf("req-%d", i))
		rdb.Process(cmd)
		reply, err := cmd.Result()
		must(err == nil, "RL.SLIDE")
		if reply[0].(int64) == 1 {
			slide++
		}
	}
	must(slide == 3, "sliding log")
	fmt.Printf("go slide: %d of 4 allowed in a 3 per 60 s window\n", slide)

	var last Decision
	ok := 0
	for i := 0; i < 4; i++ {
		d, err := Token(rdb, "go:{c1}:search", 10, 0.001, 1, "go:{c1}:all", 3, 0.001, 1)
		must(err == nil, "multi-key RL.TOKEN")
		if d.Allowed {
			ok++
		}
		last = d
	}
	must(ok == 3 && !last.Allowed && last.Limiting == 2, "route + global")
	fmt.Println("go multi-key: route + global, 3 allowed, then the global limit (group 2) denies")

	never, err := Token(rdb, "go:user:bob", 10, 5, 11)
	_, hasRetry := Headers(never)["Retry-After"]
	must(err == nil && never.RetryAfterMs == -1 && !hasRetry, "cost above capacity")
	fmt.Println("go cost above capacity: RetryAfterMs -1, no Retry-After")

	// CL.THROTTLE as redis-cell's users call it: a burst of 15, 30 per 60 s, quantity 1. With go-redis
	// v9: `rdb.Do(ctx, "CL.THROTTLE", "user123", 15, 30, 60, 1).Int64Slice()`.
	throttle := func() (limited, limit, remaining, retryAfter, resetAfter int64) {
		cmd := redis.NewSliceCmd("CL.THROTTLE", "go:cell:user123", 15, 30, 60, 1)
		rdb.Process(cmd)
		reply, err := cmd.Result()
		must(err == nil && len(reply) == 5, "CL.THROTTLE")
		n := make([]int64, 5)
		for i, v := range reply {
			n[i], _ = v.(int64)
		}
		return n[0], n[1], n[2], n[3], n[4]
	}
	limited, limit, remaining, retryAfter, resetAfter := throttle()
	must(limited == 0 && limit == 16 && remaining == 15 && retryAfter == -1 && resetAfter == 2, "CL.THROTTLE first call")
	firstCell := fmt.Sprintf("[%d, %d, %d, %d, %d]", limited, limit, remaining, retryAfter, resetAfter)
	cellAllowed := 1
	for i := 0; i < 16; i++ {
		if limited, _, remaining, retryAfter, _ = throttle(); limited == 0 {
			cellAllowed++
		}
	}
	must(cellAllowed == 16 && limited == 1 && remaining == 0 && retryAfter > 0, "CL.THROTTLE after the burst")
	fmt.Printf("go CL.THROTTLE: first %s; 16 allowed, the 17th limited, retry_after %d s\n", firstCell, retryAfter)

	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + os.Args[2], DialTimeout: 100 * time.Millisecond, MaxRetries: 0})
	for _, failOpen := range []bool{true, false} {
		allowed, degraded := Check(dead, "go:user:ada", failOpen)
		must(allowed == failOpen && degraded, "fail policy")
		fmt.Printf("go redis down, failOpen=%v -> allowed=%v degraded=%v\n", failOpen, allowed, degraded)
	}
}
