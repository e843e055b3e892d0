package redisrate_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis-ratelimit/redis-ratelimit/go/internal/redistest"
	"github.com/redis-ratelimit/redis-ratelimit/go/redisrate"
	"github.com/redis/go-redis/v9"
)

// redis_rate v10 itself and this package side by side on one server, the same call sequences,
// each call of one right after the other's: equal Allowed and Remaining, RetryAfter and
// ResetAfter equal within what the clock allows. Each side's times are its bucket's end minus its
// own call's time, and the two ends differ by the gap between the calls that set them, so the sides
// differ by at most the longest measured pair (from before their call to after ours) plus 2 ms (ours
// count whole milliseconds, in the clock read and in the reply). A loaded machine stretches a pair
// now and then; the bound follows it. One documented difference widens it one way: once an
// AllowAtMost gets fewer than it asked, redis_rate has also used up the part of the next event that
// refilled since the bucket was full (at most the time since the sequence began), and ours has not,
// so from then on our times may be that much shorter.
// The documented differences (a cost above the burst; invalid limits) are tested as such.
func TestDifferentialAgainstRedisRate(t *testing.T) {
	for _, module := range []bool{true, false} {
		t.Run(fmt.Sprintf("module=%v", module), func(t *testing.T) {
			srv := redistest.Start(t, module)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer rdb.Close()
			theirs := redis_rate.NewLimiter(rdb)
			ours := redisrate.NewLimiter(rdb)
			ctx := context.Background()
			type step struct {
				op    string // allow, allown, atmost, sleep, reset
				n     int
				sleep time.Duration
			}
			sequences := []struct {
				limit [2]any // our Limit, their Limit
				steps []step
			}{}
			add := func(rate, burst int, period time.Duration, steps ...step) {
				sequences = append(sequences, struct {
					limit [2]any
					steps []step
				}{[2]any{redisrate.Limit{Rate: rate, Burst: burst, Period: period}, redis_rate.Limit{Rate: rate, Burst: burst, Period: period}}, steps})
			}
			burst := []step{}
			for i := 0; i < 12; i++ {
				burst = append(burst, step{op: "allow"})
			}
			add(10, 10, time.Minute, burst...)
			add(100, 100, time.Hour, step{op: "allown", n: 30}, step{op: "allown", n: 60}, step{op: "allown", n: 20},
				step{op: "allown", n: 0}, step{op: "atmost", n: 15}, step{op: "atmost", n: 5}, step{op: "reset"}, step{op: "allow"})
			add(10, 5, time.Minute, step{op: "atmost", n: 3}, step{op: "atmost", n: 3}, step{op: "atmost", n: 3}, step{op: "allown", n: 5})
			add(5, 10, time.Second, append(burst, step{op: "sleep", sleep: 250 * time.Millisecond}, step{op: "allow"}, step{op: "allow"}, step{op: "allow"})...)
			for si, seq := range sequences {
				key := fmt.Sprintf("diff-%v-%d", module, si)
				lo, lt := seq.limit[0].(redisrate.Limit), seq.limit[1].(redis_rate.Limit)
				if lo.String() != lt.String() {
					t.Fatalf("Limit.String: %q, theirs %q", lo, lt)
				}
				longestPair, fractionTaken, began := time.Duration(0), time.Duration(0), time.Now()
				for i, st := range seq.steps {
					var a *redisrate.Result
					var b *redis_rate.Result
					var ea, eb error
					switch st.op {
					case "sleep":
						time.Sleep(st.sleep)
						continue
					case "reset":
						ea, eb = ours.Reset(ctx, key), theirs.Reset(ctx, key)
						if ea != nil || eb != nil {
							t.Fatal(ea, eb)
						}
						continue
					}
					started := time.Now()
					switch st.op {
					case "allow":
						b, eb = theirs.Allow(ctx, key, lt)
						a, ea = ours.Allow(ctx, key, lo)
					case "allown":
						b, eb = theirs.AllowN(ctx, key, lt, st.n)
						a, ea = ours.AllowN(ctx, key, lo, st.n)
					case "atmost":
						b, eb = theirs.AllowAtMost(ctx, key, lt, st.n)
						a, ea = ours.AllowAtMost(ctx, key, lo, st.n)
					}
					longestPair = max(longestPair, time.Since(started))
					if ea != nil || eb != nil {
						t.Fatalf("seq %d step %d: %v / %v", si, i, ea, eb)
					}
					if st.op == "atmost" && b.Allowed < st.n {
						fractionTaken = time.Since(began)
					}
					tolerance := longestPair + 2*time.Millisecond
					near := func(x, y time.Duration) bool {
						if (x < 0) != (y < 0) {
							return false
						}
						return x-y <= tolerance && y-x <= tolerance+fractionTaken
					}
					if a.Allowed != b.Allowed || a.Remaining != b.Remaining || !near(a.RetryAfter, b.RetryAfter) || !near(a.ResetAfter, b.ResetAfter) {
						t.Fatalf("seq %d (%v) step %d %s(%d), times within %v (ours up to %v shorter):\n ours   %+v\n theirs %+v", si, lo, i, st.op, st.n, tolerance, tolerance+fractionTaken, *a, *b)
					}
				}
			}
			// Documented differences: a cost above the burst never fits (ours RetryAfter -1).
			a, err := ours.AllowN(ctx, "big", redisrate.PerSecond(5), 6)
			if err != nil || a.Allowed != 0 || a.RetryAfter != -1 {
				t.Fatalf("above the burst: %+v %v", a, err)
			}
			if _, err := ours.Allow(ctx, "zero", redisrate.Limit{}); err == nil {
				t.Fatal("the zero Limit was accepted")
			}
		})
	}
}
