package ratelimit

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// client/src/fallback.rs's own tests, on this port.

const t0 = int64(1_700_000_000_000_000_000)
const sec = int64(time.Second)

func TestLocalSharesAndLimitsCheckedTogether(t *testing.T) {
	local := newLocalLimiter(2)
	route, global := Must(TokenBucket(10, 5)), Must(TokenBucket(4, 1))
	allowed := 0
	for i := 0; i < 10; i++ {
		if local.decide([]Limit{{"k", route, 1}}, nil, t0, true).Allowed {
			allowed++
		}
	}
	if allowed != 5 {
		t.Fatalf("%d allowed: half of capacity 10 on one of two instances", allowed)
	}
	both := []Limit{{"r2", route, 1}, {"g", global, 1}}
	var ds []Decision
	for i := 0; i < 3; i++ {
		ds = append(ds, local.decide(both, nil, t0, true))
	}
	if !ds[0].Allowed || !ds[1].Allowed || ds[2].Allowed || ds[2].Limiting != 1 || ds[2].Limit != 2 || !ds[2].Degraded {
		t.Fatalf("%+v", ds)
	}
	if r := local.decide([]Limit{{"r2", route, 0}}, nil, t0, true).Remaining; r != 3 {
		t.Fatalf("the denial took from the route limit: %d left, want 3", r)
	}
	fixed := Must(FixedWindow(4, time.Second))
	allowed = 0
	for i := 0; i < 5; i++ {
		if local.decide([]Limit{{"f", fixed, 1}}, nil, t0, true).Allowed {
			allowed++
		}
	}
	if allowed != 2 {
		t.Fatalf("fixed window: %d allowed, want 2", allowed)
	}
}

// Every rate kind is the token bucket of its limit per period at the share (a token bucket is
// itself): 10 per second on one of 3 instances is 3 at once, then one every 300 ms.
func TestLocalEveryRateKindIsOneBucketAtTheShare(t *testing.T) {
	for _, p := range []Policy{Must(FixedWindow(10, time.Second)), Must(SlidingCounter(10, time.Second)),
		Must(SlidingLog(10, time.Second))} {
		local := newLocalLimiter(3)
		check := func(at int64) Decision { return local.decide([]Limit{{"k", p, 1}}, nil, at, true) }
		var burst []bool
		for i := 0; i < 5; i++ {
			burst = append(burst, check(t0).Allowed)
		}
		denied := check(t0)
		if fmt.Sprint(burst) != "[true true true false false]" || denied.Limit != 3 || denied.RetryAfter != 300*time.Millisecond {
			t.Fatalf("%s: burst %v, then %+v: want the share of 3, one back in 300 ms", p.Kind(), burst, denied)
		}
		// In the second after the burst, 3 more: the share plus limit / instances in the period.
		var later []bool
		for k := int64(1); k <= 10; k++ {
			later = append(later, check(t0+k*sec/10).Allowed)
		}
		if want := "[false false true false false true false false true false]"; fmt.Sprint(later) != want {
			t.Fatalf("%s: %v, want %s", p.Kind(), later, want)
		}
	}
}

func TestLocalLeases(t *testing.T) {
	local := newLocalLimiter(2)
	policy := Must(Concurrency(4, 10*time.Second))
	take := func(id string, at int64) Decision { return local.decide([]Limit{{"k", policy, 1}}, &id, at, true) }
	if !take("a", t0).Allowed || !take("b", t0).Allowed {
		t.Fatal("half of 4 on one of two instances")
	}
	denied := take("c", t0+sec)
	if denied.Allowed || denied.RetryAfter != 9*time.Second {
		t.Fatalf("%+v: want a denial until the first lease ends", denied)
	}
	if !take("a", t0+sec).Allowed {
		t.Fatal("a retry by a holder is the same request")
	}
	if local.leaseOp("k", "c", 10*time.Second, t0+sec) {
		t.Fatal("c holds nothing")
	}
	if !local.leaseOp("k", "a", 0, t0+sec) || local.leaseOp("k", "a", 0, t0+sec) {
		t.Fatal("release")
	}
	if !local.leaseOp("k", "b", 10*time.Second, t0+5*sec) {
		t.Fatal("renew b")
	}
	if !take("d", t0+12*sec).Allowed || take("e", t0+12*sec).Allowed || !take("f", t0+16*sec).Allowed {
		t.Fatal("a's slot is free; b (renewed to 15 s) and d hold both; b's lease ended at 15 s")
	}
	bucket := Must(TokenBucket(2, 0.001))
	both := []Limit{{"t", bucket, 1}, {"k2", policy, 1}}
	g, h := "g", "h"
	if !local.decide(both, &g, t0, true).Allowed || local.decide(both, &h, t0, true).Allowed {
		t.Fatal("the bucket is empty: no lease taken")
	}
	if local.leaseOp("k2", "h", 0, t0) {
		t.Fatal("the denied request holds nothing")
	}
}

func TestLocalTake(t *testing.T) {
	local := newLocalLimiter(2)
	bucket := Must(TokenBucket(10, 1))
	take := func(most uint64, at int64) Taken { return local.reserve("w", bucket, 1, most, 0, at, true) }
	if first := take(3, t0); first.Taken != 3 || first.Remaining != 2 || !first.Allowed {
		t.Fatalf("%+v: 3 of the share of 5", first)
	}
	if n := take(100, t0).Taken; n != 2 {
		t.Fatalf("took %d: what is left, not the 100 asked", n)
	}
	if empty := take(4, t0); empty.Taken != 0 || empty.Allowed || empty.RetryAfter != 2*time.Second {
		t.Fatalf("%+v: one token at half the rate", empty)
	}
	if n := take(4, t0+4*sec).Taken; n != 2 {
		t.Fatalf("took %d: refilled at 0.5 per second", n)
	}
}

func TestLocalMemoryIsBounded(t *testing.T) {
	local := newLocalLimiter(1)
	p := Must(FixedWindow(5, time.Second))
	for i := 0; i < maxLocalKeys()+10; i++ {
		local.decide([]Limit{{strconv.Itoa(i), p, 1}}, nil, t0, true)
	}
	if n := len(local.entries); n > maxLocalKeys() {
		t.Fatalf("%d keys held", n)
	}
}
