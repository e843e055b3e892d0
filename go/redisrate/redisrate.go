// Package redisrate is go-redis/redis_rate v10's API on redis-ratelimit: the same NewLimiter,
// Allow, AllowN, AllowAtMost, Reset, Limit (PerSecond, PerMinute, PerHour) and Result, so a
// redis_rate user switches by changing one import. Decided by the ratelimit module's RL.TOKEN and
// RL.TAKE (or the Lua library where the module is not loaded), in whole milliseconds, each call
// bounded by a 100 ms deadline.
//
// Differences from redis_rate (the differential test holds the rest equal):
//   - keys are "rl:rate:<key>" (redis_rate's "rate:<key>" hold a float TAT, which the commands
//     refuse as foreign state); Migrate carries a key's standing over; see
//     docs/migrating-redis-rate.md. The kind is fixed (every limit is a token bucket, as
//     redis_rate's GCRA), so these keys carry no kind suffix (the contract's http.limit_key is for
//     layers whose limits can change kind): a change of a Limit's numbers carries on, and an
//     upgrade leaves the keys as they are.
//   - a request that costs more than the burst is denied with RetryAfter -1 (it never fits);
//     redis_rate answers a RetryAfter after which it is still denied.
//   - a denial's Remaining is 0, as redis_rate's (Check on the ratelimit package says what is left).
//   - times are whole milliseconds (redis_rate: float seconds).
//   - an invalid Limit (Rate, Burst or Period <= 0) is an error, where redis_rate divides by zero.
package redisrate

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	ratelimit "github.com/redis-ratelimit/redis-ratelimit/go"
	"github.com/redis/go-redis/v9"
)

// Prefix of every key this package writes.
const Prefix = "rl:rate:"

// Limit is redis_rate's limit: Rate events per Period, with bursts of up to Burst.
type Limit struct {
	Rate   int
	Burst  int
	Period time.Duration
}

func (l Limit) String() string {
	return fmt.Sprintf("%d req/%s (burst %d)", l.Rate, fmtDur(l.Period), l.Burst)
}

// IsZero says whether l is the zero Limit.
func (l Limit) IsZero() bool { return l == Limit{} }

func fmtDur(d time.Duration) string {
	switch d {
	case time.Second:
		return "s"
	case time.Minute:
		return "m"
	case time.Hour:
		return "h"
	}
	return d.String()
}

// PerSecond is rate events a second, bursts of rate.
func PerSecond(rate int) Limit { return Limit{Rate: rate, Period: time.Second, Burst: rate} }

// PerMinute is rate events a minute, bursts of rate.
func PerMinute(rate int) Limit { return Limit{Rate: rate, Period: time.Minute, Burst: rate} }

// PerHour is rate events an hour, bursts of rate.
func PerHour(rate int) Limit { return Limit{Rate: rate, Period: time.Hour, Burst: rate} }

// Result is redis_rate's result.
type Result struct {
	// Limit is the limit that was used to obtain this result.
	Limit Limit
	// Allowed is the number of events that may happen now.
	Allowed int
	// Remaining is how many more events could be allowed now.
	Remaining int
	// RetryAfter is the time until the next request will be permitted; -1 unless the limit
	// was exceeded (and for a request that can never fit).
	RetryAfter time.Duration
	// ResetAfter is the time until the limiter is back to its initial state for the key.
	ResetAfter time.Duration
}

// Limiter is redis_rate's limiter.
type Limiter struct {
	rdb redis.UniversalClient
	l   *ratelimit.Limiter
}

// NewLimiter makes a limiter on rdb (a *redis.Client, *redis.ClusterClient, ...). As redis_rate,
// a call Redis does not answer returns its error.
func NewLimiter(rdb redis.UniversalClient) *Limiter {
	l, err := ratelimit.New(rdb, ratelimit.Options{Failure: ratelimit.FailClosed()})
	if err != nil {
		panic(err) // only for a nil client, as redis_rate would on its first call
	}
	return &Limiter{rdb: rdb, l: l}
}

func (l Limiter) policy(limit Limit) (ratelimit.Policy, error) {
	if limit.Rate <= 0 || limit.Burst <= 0 || limit.Period <= 0 {
		return ratelimit.Policy{}, fmt.Errorf("redisrate: invalid limit %v", limit)
	}
	return ratelimit.TokenBucket(uint64(limit.Burst), float64(limit.Rate)/limit.Period.Seconds())
}

// Allow is AllowN(ctx, key, limit, 1).
func (l Limiter) Allow(ctx context.Context, key string, limit Limit) (*Result, error) {
	return l.AllowN(ctx, key, limit, 1)
}

// AllowN reports whether n events may happen now (n = 0 peeks).
func (l Limiter) AllowN(ctx context.Context, key string, limit Limit, n int) (*Result, error) {
	p, err := l.policy(limit)
	if err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, fmt.Errorf("redisrate: n must be >= 0, not %d", n)
	}
	d, err := l.l.CheckAllStrict(ctx, ratelimit.Limit{Key: Prefix + key, Policy: p, Cost: uint64(n)})
	if err != nil {
		return nil, err
	}
	res := &Result{Limit: limit, Remaining: int(d.Remaining), RetryAfter: -1, ResetAfter: d.ResetAfter}
	if d.Allowed {
		res.Allowed = n
	} else {
		res.Remaining = 0 // as redis_rate: a denial says 0 (RL.TOKEN says what is left)
		if !d.NeverFits() {
			res.RetryAfter = d.RetryAfter
		}
	}
	return res, nil
}

// AllowAtMost reports how many of n events (at most) may happen now, and takes them.
func (l Limiter) AllowAtMost(ctx context.Context, key string, limit Limit, n int) (*Result, error) {
	p, err := l.policy(limit)
	if err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, fmt.Errorf("redisrate: n must be >= 1, not %d", n)
	}
	t, err := l.l.Take(ctx, Prefix+key, p, uint64(n))
	if err != nil {
		return nil, err
	}
	if t.Degraded {
		return nil, fmt.Errorf("redisrate: Redis did not decide")
	}
	res := &Result{Limit: limit, Allowed: int(t.Taken), Remaining: int(t.Remaining), RetryAfter: -1, ResetAfter: t.ResetAfter}
	if t.Taken == 0 {
		res.RetryAfter = t.RetryAfter
	}
	return res, nil
}

// RedisRatePrefix is the prefix of redis_rate v10's keys ("rate:<key>", each a float TAT).
const RedisRatePrefix = "rate:"

// readTAT reads redis_rate's TAT and the server's clock in one script (read-only).
var readTAT = redis.NewScript(`local tat = redis.call('GET', KEYS[1])
local now = redis.call('TIME')
return {tat or '', now[1], now[2]}`)

// Migrate carries what redis_rate v10 counted for key to this package's key: redis_rate's
// "rate:<key>" holds a TAT (seconds since 2017-01-01, a float); the events it stands for
// (ceil((TAT - now) / (Period / Rate)), at most Burst) are taken from a new full bucket of limit at
// "rl:rate:<key>", so the caller keeps its standing across the switch. A key this package
// already holds is left as it is, and so is redis_rate's key (it expires by itself within its
// reset time). Returns the events carried over (0: nothing to carry).
func (l *Limiter) Migrate(ctx context.Context, key string, limit Limit) (int, error) {
	p, err := l.policy(limit)
	if err != nil {
		return 0, err
	}
	in, err := l.l.Peek(ctx, Prefix+key, p)
	if err != nil || in.Exists {
		return 0, err
	}
	v, err := readTAT.Run(ctx, l.rdb, []string{RedisRatePrefix + key}).Slice()
	if err != nil {
		return 0, err
	}
	if len(v) != 3 {
		return 0, fmt.Errorf("redisrate: unexpected reply %v", v)
	}
	text, _ := v[0].(string)
	if text == "" {
		return 0, nil
	}
	tat, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return 0, fmt.Errorf("redisrate: %s%s does not hold redis_rate's TAT: %q", RedisRatePrefix, key, text)
	}
	secs, _ := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
	usecs, _ := strconv.ParseInt(fmt.Sprint(v[2]), 10, 64)
	const jan1st2017 = 1483228800 // redis_rate's epoch
	now := float64(secs-jan1st2017) + float64(usecs)/1e6
	emission := limit.Period.Seconds() / float64(limit.Rate)
	used := int(math.Ceil((tat - now) / emission))
	if used <= 0 {
		return 0, nil
	}
	t, err := l.l.Take(ctx, Prefix+key, p, uint64(min(used, limit.Burst)))
	if err != nil {
		return 0, err
	}
	if t.Degraded {
		return 0, fmt.Errorf("redisrate: Redis did not decide")
	}
	return int(t.Taken), nil
}

// Reset gets a key back to its initial state.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	return l.rdb.Del(ctx, Prefix+key).Err()
}
