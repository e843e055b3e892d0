package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimit "github.com/redis-ratelimit/redis-ratelimit/go"
	"github.com/redis-ratelimit/redis-ratelimit/go/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The package's clusters (three primaries each, one with the module, one stock), started once,
// when a test first asks, and stopped after the package's tests.
var clusters = struct {
	sync.Mutex
	started map[bool]*redistest.Cluster
	errs    map[bool]error
}{started: map[bool]*redistest.Cluster{}, errs: map[bool]error{}}

func TestMain(m *testing.M) {
	code := m.Run()
	clusters.Lock()
	for _, c := range clusters.started {
		c.Stop()
	}
	clusters.Unlock()
	os.Exit(code)
}

func sharedCluster(t *testing.T, module bool) *redistest.Cluster {
	t.Helper()
	clusters.Lock()
	defer clusters.Unlock()
	if c := clusters.started[module]; c != nil {
		return c
	}
	if err := clusters.errs[module]; err != nil {
		t.Skip(err)
	}
	c, err := redistest.StartCluster(module)
	if err != nil {
		clusters.errs[module] = err
		if errors.Is(err, redistest.ErrUnavailable) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	clusters.started[module] = c
	return c
}

// nodeClients are plain clients of each node, closed at cleanup.
func nodeClients(t *testing.T, c *redistest.Cluster) []*redis.Client {
	var out []*redis.Client
	for _, n := range c.Nodes {
		out = append(out, n.Client(t))
	}
	return out
}

// infoInt is a field of INFO section on one node (0 when absent).
func infoInt(ctx context.Context, c *redis.Client, section, field string) int64 {
	info, _ := c.Info(ctx, section).Result()
	for _, line := range strings.Split(info, "\r\n") {
		v, ok := strings.CutPrefix(line, field+":")
		if !ok {
			continue
		}
		v = strings.TrimPrefix(v, "count=") // errorstat_MOVED:count=3
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	return 0
}

func calls(ctx context.Context, c *redis.Client, command string) int64 {
	info, _ := c.Info(ctx, "commandstats").Result()
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "cmdstat_"+command+":calls="); ok {
			n, _ := strconv.ParseInt(strings.SplitN(v, ",", 2)[0], 10, 64)
			return n
		}
	}
	return 0
}

func hasLibrary(ctx context.Context, c *redis.Client) bool {
	list, err := c.Do(ctx, "FUNCTION", "LIST", "LIBRARYNAME", "ratelimit").Slice()
	return err == nil && len(list) == 1
}

// A 3-primary cluster on go-redis's ClusterClient: the module, the library through FCALL (loaded
// by the limiter on each primary where a call finds it missing, and again after a FUNCTION FLUSH
// mid-run), the EVALSHA scripts. Every call of the package decides on its key's node: keys of 60
// callers over the three primaries, 0 MOVED or ASK in any node's error stats, each node's own
// commands counted in its stats.
func TestCluster(t *testing.T) {
	for _, ec := range []struct {
		name   string
		module bool
		engine ratelimit.Engine
		want   ratelimit.Engine
		cmd    string // what each node's commandstats count
	}{
		{"module", true, ratelimit.Auto, ratelimit.Module, "rl.token"},
		{"stock-fcall", false, ratelimit.Auto, ratelimit.Functions, "fcall"},
		{"stock-evalsha", false, ratelimit.Scripts, ratelimit.Scripts, "evalsha"},
	} {
		t.Run(ec.name, func(t *testing.T) {
			ctx := context.Background()
			cl := sharedCluster(t, ec.module)
			nodes := nodeClients(t, cl)
			for _, n := range nodes {
				must(t, n.FlushAll(ctx).Err())
				must(t, n.ConfigResetStat(ctx).Err())
				if !ec.module {
					must(t, n.Do(ctx, "FUNCTION", "FLUSH").Err())
					must(t, n.ScriptFlush(ctx).Err())
				}
			}
			rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
			defer rc.Close()
			l := newLimiter(t, rc, ratelimit.Options{Failure: ratelimit.FailClosed(), Engine: ec.engine})
			bucket := ratelimit.Must(ratelimit.TokenBucket(3, 0.001))
			window := ratelimit.Must(ratelimit.FixedWindow(2, time.Minute))
			slots := ratelimit.Must(ratelimit.Concurrency(1, 10*time.Second))
			const users = 60
			for u := 0; u < users; u++ {
				key := fmt.Sprintf("rl:{user:%d}", u)
				for i := 0; i < 4; i++ {
					d, err := l.Check(ctx, key+":api", bucket, 1)
					if err != nil || d.Degraded || d.Allowed != (i < 3) {
						t.Fatalf("%s check %d: %+v %v", key, i, d, err)
					}
				}
				d, err := l.CheckAll(ctx, ratelimit.Limit{Key: key + ":w", Policy: window, Cost: 2},
					ratelimit.Limit{Key: key + ":b", Policy: bucket, Cost: 1})
				if err != nil || !d.Allowed || d.Degraded {
					t.Fatalf("%s all: %+v %v", key, d, err)
				}
				if u%6 == 0 { // the other calls on a tenth of the callers (every node has some)
					tk, err := l.Take(ctx, key+":t", bucket, 5)
					if err != nil || tk.Taken != 3 {
						t.Fatalf("%s take: %+v %v", key, tk, err)
					}
					p, d, err := l.Acquire(ctx, key+":c", slots, 1)
					if err != nil || p == nil {
						t.Fatalf("%s acquire: %+v %v", key, d, err)
					}
					if p2, _, _ := l.Acquire(ctx, key+":c", slots, 1); p2 != nil {
						t.Fatalf("%s: a second permit of 1", key)
					}
					if held, err := p.Release(ctx); !held || err != nil {
						t.Fatalf("%s release: %v %v", key, held, err)
					}
					must(t, l.Refund(ctx, key+":w", window, 1))
					in, err := l.Peek(ctx, key+":w", window)
					if err != nil || !in.Exists || in.Remaining != 1 {
						t.Fatalf("%s peek: %+v %v", key, in, err)
					}
				}
			}
			if e, _ := l.Engine(); e != ec.want {
				t.Fatalf("engine %v, want %v", e, ec.want)
			}
			if ec.engine == ratelimit.Auto && !ec.module {
				for i, n := range nodes {
					if !hasLibrary(ctx, n) {
						t.Fatalf("node %d: the library was not loaded there", i)
					}
				}
				// FUNCTION FLUSH on the primary of one caller mid-run: its next call loads it
				// there again and decides.
				owner, err := cl.Owner(ctx, "rl:{user:0}:api")
				must(t, err)
				must(t, owner.Client(t).Do(ctx, "FUNCTION", "FLUSH").Err())
				d, err := l.Check(ctx, "rl:{user:0}:api", bucket, 0)
				if err != nil || d.Degraded || d.Remaining != 0 {
					t.Fatalf("after FUNCTION FLUSH: %+v %v", d, err)
				}
				if !hasLibrary(ctx, owner.Client(t)) {
					t.Fatal("the flushed primary has no library after the call")
				}
			}
			// The count is read: one deliberate call to a node that does not own its key.
			owner, err := cl.Owner(ctx, "rl:{user:1}:api")
			must(t, err)
			var other *redis.Client
			for i, n := range cl.Nodes {
				if n != owner {
					other = nodes[i]
				}
			}
			if err := other.Get(ctx, "rl:{user:1}:api").Err(); err == nil || !strings.HasPrefix(err.Error(), "MOVED") {
				t.Fatalf("a misrouted GET: %v", err)
			}
			misrouted := int64(0)
			for i, n := range nodes {
				moved, ask := infoInt(ctx, n, "errorstats", "errorstat_MOVED"), infoInt(ctx, n, "errorstats", "errorstat_ASK")
				if nodes[i] == other {
					misrouted, moved = moved, moved-1
				}
				if moved != 0 || ask != 0 {
					t.Errorf("node %d: %d MOVED, %d ASK: a call went to another node than its key's", i, moved, ask)
				}
				if c := calls(ctx, n, ec.cmd); c < int64(users/len(nodes)/2) {
					t.Errorf("node %d: %d %s calls: the keys are not spread over the primaries", i, c, ec.cmd)
				}
			}
			if misrouted != 1 {
				t.Fatalf("the deliberate MOVED was counted %d times", misrouted)
			}
		})
	}
}

// LoadLibrary loads the library on every primary of a cluster ahead of time.
func TestLoadLibraryOnEveryPrimary(t *testing.T) {
	ctx := context.Background()
	cl := sharedCluster(t, false)
	nodes := nodeClients(t, cl)
	for _, n := range nodes {
		must(t, n.Do(ctx, "FUNCTION", "FLUSH").Err())
	}
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer rc.Close()
	must(t, ratelimit.LoadLibrary(ctx, rc))
	for i, n := range nodes {
		if !hasLibrary(ctx, n) {
			t.Fatalf("node %d: no library after LoadLibrary", i)
		}
	}
}
