package ratelimit

import (
	"strings"
	"sync"
	"time"
)

// The pre-check (Options.LocalPrecheck; docs/high-volume.md): a check Redis denied stays denied in
// this process until the retry_after Redis gave, without a round trip. Safe: other instances can
// only consume more, so the same request cannot succeed earlier (a refund can make it, and then the
// pre-check denies for at most the retry_after it was given). A smaller cost still asks Redis (it
// may fit). As client/src/precheck.rs. Times are Unix ns, passed in (the vectors drive it).

type denial struct {
	until    int64 // Unix ns
	cost     uint64
	decision Decision
}

// denialCache holds Redis' denials by the check's keys, in order; at most the contract's
// batching.max_keys: past that, expired entries go, then all.
type denialCache struct {
	mu     sync.Mutex
	denied map[string]denial
}

func newDenialCache() *denialCache { return &denialCache{denied: map[string]denial{}} }

// denialKey is a check's keys in order (a key cannot hold a newline that matters here: two checks
// share an entry only when they name the same keys).
func denialKey(limits []Limit) (string, uint64) {
	var b strings.Builder
	var cost uint64
	for _, l := range limits {
		b.WriteString(l.Key)
		b.WriteByte('\n')
		cost = max(cost, l.Cost)
	}
	return b.String(), cost
}

// check is the denial in force for key at now for a request of cost: Redis' denial with
// RetryAfter the time left (whole ms, rounded up) and ResetAfter shorter by the time passed.
func (c *denialCache) check(key string, cost uint64, now int64) (Decision, bool) {
	c.mu.Lock()
	d, ok := c.denied[key]
	c.mu.Unlock()
	if !ok || d.until <= now || cost < d.cost {
		return Decision{}, false
	}
	out := d.decision
	out.RetryAfter = ceilMs(d.until - now)
	out.ResetAfter = max(0, out.ResetAfter-(d.decision.RetryAfter-time.Duration(d.until-now)))
	out.Local = true
	return out, true
}

// remember keeps Redis' denial of key for a request of cost: only a decided denial (not the failure
// policy's) that will fit some day.
func (c *denialCache) remember(key string, cost uint64, d Decision, now int64) {
	if d.Allowed || d.Degraded || d.Local || d.RetryAfter < 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.denied) >= contract.Batching.MaxKeys {
		for k, e := range c.denied {
			if e.until <= now {
				delete(c.denied, k)
			}
		}
		if len(c.denied) >= contract.Batching.MaxKeys {
			clear(c.denied)
		}
	}
	c.denied[key] = denial{until: now + int64(d.RetryAfter), cost: cost, decision: d}
}
