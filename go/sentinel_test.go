package ratelimit_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimit "github.com/redis-ratelimit/redis-ratelimit/go"
	"github.com/redis-ratelimit/redis-ratelimit/go/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// infoField is a field of an INFO section ("" when absent).
func infoField(ctx context.Context, c *redis.Client, section, field string) string {
	info, _ := c.Info(ctx, section).Result()
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}

// Sentinel: the package on go-redis' failover client (redis.NewUniversalClient with a MasterName:
// a redis.UniversalClient), on a module-enabled primary and replica watched by three sentinels.
// Limiters on each engine (the module under Auto, the library through FCALL, its EVALSHA scripts)
// decide through a SENTINEL FAILOVER and then through the new primary being killed: every call
// returns within the deadline, then the calls are decided again (not degraded) by the new primary,
// with the module or the library there (the library reached it by replication; a script is loaded
// on it by the NOSCRIPT path), and each key's count goes on from what was replicated before.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	topo := redistest.StartSentinels(t, true)
	ctx := context.Background()
	client := redis.NewUniversalClient(&redis.UniversalOptions{MasterName: redistest.Service, Addrs: topo.Addrs})
	defer client.Close()
	if _, ok := client.(*redis.Client); !ok {
		t.Fatalf("NewUniversalClient with a MasterName gave a %T, not the failover client", client)
	}
	const deadline = 250 * time.Millisecond
	const slack = 100 * time.Millisecond // scheduling on a loaded 2-core machine, under -race
	window := ratelimit.Must(ratelimit.FixedWindow(1000, time.Hour))
	type engineUnder struct {
		name   string
		engine ratelimit.Engine
		want   ratelimit.Engine
		l      *ratelimit.Limiter
		key    string
		base   uint64 // counted and replicated before the phase
	}
	engines := []*engineUnder{
		{name: "module", engine: ratelimit.Auto, want: ratelimit.Module},
		{name: "fcall", engine: ratelimit.Functions, want: ratelimit.Functions},
		{name: "evalsha", engine: ratelimit.Scripts, want: ratelimit.Scripts},
	}
	for _, e := range engines {
		e.l = newLimiter(t, client, ratelimit.Options{Failure: ratelimit.FailClosed(), Engine: e.engine, Deadline: deadline})
		e.key = "rl:{sentinel}:" + e.name
		for i := 0; i < 5; i++ {
			d, err := e.l.Check(ctx, e.key, window, 1)
			if err != nil || d.Degraded || !d.Allowed {
				t.Fatalf("%s before the failover: %+v %v", e.name, d, err)
			}
		}
		if v, err := e.l.Verify(ctx); err != nil || v.Engine != e.want {
			t.Fatalf("%s: Verify %v %v", e.name, v, err)
		}
	}
	// replicated: at least this many counted on every node
	replicated := func() {
		t.Helper()
		if n, err := client.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
			t.Fatalf("WAIT: %d replicas %v", n, err)
		}
		for _, e := range engines {
			in, err := e.l.Peek(ctx, e.key, window)
			if err != nil {
				t.Fatalf("%s: peek %v", e.name, err)
			}
			e.base = 1000 - in.Remaining
		}
	}
	// onNode: limiters on a plain client of one node, to read what that node holds.
	onNode := func(n *redistest.Server) map[string]*ratelimit.Limiter {
		c := n.Client(t)
		out := map[string]*ratelimit.Limiter{}
		for _, e := range engines {
			out[e.name] = newLimiter(t, c, ratelimit.Options{Failure: ratelimit.FailClosed(), Engine: e.want})
		}
		return out
	}
	phase := func(what string, act func(old string)) {
		t.Helper()
		replicated()
		old := topo.PrimaryAddr()
		act(old)
		var primary *redistest.Server
		var direct map[string]*ratelimit.Limiter
		decided := map[string]bool{}
		degraded := 0
		// Until each limiter's decision is the new primary's: while the old primary still takes
		// writes (a SENTINEL FAILOVER demotes it some seconds later), the failover client may
		// decide there until it hears +switch-master.
		for end := time.Now().Add(30 * time.Second); len(decided) < len(engines); {
			if time.Now().After(end) {
				t.Fatalf("%s: not decided by the new primary after 30 s (primary %s, was %s; decided %v; %d degraded)",
					what, topo.PrimaryAddr(), old, decided, degraded)
			}
			if primary == nil {
				if now := topo.PrimaryAddr(); now != old && now != "" {
					primary = topo.Node(now)
					if primary == nil {
						t.Fatalf("%s: the sentinels name %s, no node of the test", what, now)
					}
					direct = onNode(primary)
				}
			}
			for _, e := range engines {
				start := time.Now()
				d, err := e.l.Check(ctx, e.key, window, 1)
				if took := time.Since(start); err != nil || took > deadline+slack {
					t.Fatalf("%s, %s: %+v %v after %v (deadline %v)", what, e.name, d, err, took, deadline)
				}
				if d.Degraded {
					degraded++
					continue
				}
				if !d.Allowed {
					t.Fatalf("%s, %s: denied %+v", what, e.name, d)
				}
				if primary == nil || decided[e.name] {
					continue
				}
				in, err := direct[e.name].Peek(ctx, e.key, window)
				if err == nil && in.Exists && in.Remaining == d.Remaining {
					decided[e.name] = true
					if counted := 1000 - d.Remaining; counted < e.base+1 {
						t.Fatalf("%s, %s: %d counted; %d were replicated before", what, e.name, counted, e.base)
					}
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		if role := infoField(ctx, primary.Client(t), "replication", "role"); role != "master" {
			t.Fatalf("%s: the new primary's role is %q", what, role)
		}
		for _, e := range engines {
			if got, _ := e.l.Engine(); got != e.want {
				t.Fatalf("%s, %s: engine %v after the failover", what, e.name, got)
			}
		}
		t.Logf("%s: %s -> %s, %d degraded decisions on the way", what, old, primary.Addr, degraded)
	}
	phase("SENTINEL FAILOVER", func(string) {
		if err := topo.Failover(ctx); err != nil {
			t.Fatal(err)
		}
	})
	// The old primary is made a replica of the new one at once (the sentinels do it some seconds
	// later: they wait to see it still claims to be a primary); once linked, the new primary is
	// killed.
	primary := topo.Node(topo.PrimaryAddr())
	for _, n := range topo.Nodes {
		if n != primary {
			if err := n.Client(t).ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(primary.Port)).Err(); err != nil {
				t.Fatal(err)
			}
			if err := redistest.WaitLinked(n, 15*time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}
	phase("the primary killed", func(old string) { topo.Node(old).Stop() })
}
