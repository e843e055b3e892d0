package main

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ratelimit "github.com/redis-ratelimit/redis-ratelimit/go"
	"github.com/redis/go-redis/v9"
)

// The high-volume rows (docs/high-volume.md): one hot key checked by 2 limiters ("app instances",
// each its own client and connections) from several goroutines each, per call, with the pre-check,
// with batched units, and with both, one after another in the same run, on a bucket far above the
// load and on one the load drains. Counted: the server's calls of the RL.* commands per decision
// (INFO commandstats, refunds included), each check's time in process, and the checks admitted
// against what the bucket could grant over the run (its capacity + rate x the run's time).

const (
	volumeInstances = 2
	volumeWorkers   = 8 // goroutines per instance
	volumeChecks    = 4000
	volumeBatch     = 16
)

// volumeBucket is a scenario's bucket.
type volumeBucket struct {
	name     string
	capacity uint64
	rate     float64
}

var volumeBuckets = []volumeBucket{{"above the load", capacity, perSec}, {"drained", 20_000, 2_000}}

type volumeMode struct {
	name     string
	precheck bool
	batch    uint64
}

var volumeModes = []volumeMode{{"per call", false, 0}, {"pre-check", true, 0}, {"batch 16", false, volumeBatch},
	{"pre-check + batch 16", true, volumeBatch}}

type volumeRow struct {
	bucket                            volumeBucket
	mode                              volumeMode
	decisions, admitted, calls, local uint64
	grantable                         float64
	p50, p99, p99Local                time.Duration
}

// volumeTimes are one goroutine's check times: all, and those decided without a round trip.
type volumeTimes struct{ all, local []time.Duration }

func runVolume(ctx context.Context, addr string, quiet *slog.Logger) []volumeRow {
	probe := newClient(addr)
	defer probe.Close()
	var rows []volumeRow
	for _, b := range volumeBuckets {
		for _, m := range volumeModes {
			r := runVolumeRow(ctx, addr, quiet, probe, b, m)
			fmt.Fprintf(os.Stderr, "%s, %s: %d decisions, %d calls, %d admitted of %.0f, p50 %v, p99 %v, p99 of local ones %v\n",
				b.name, m.name, r.decisions, r.calls, r.admitted, r.grantable, r.p50, r.p99, r.p99Local)
			rows = append(rows, r)
		}
	}
	return rows
}

// runVolumeRow checks bucket b in mode m from every goroutine of every instance.
func runVolumeRow(ctx context.Context, addr string, quiet *slog.Logger, probe *redis.Client, b volumeBucket, m volumeMode) volumeRow {
	policy := ratelimit.Must(ratelimit.TokenBucket(b.capacity, b.rate))
	if m.batch > 0 {
		policy = ratelimit.Must(policy.WithBatch(m.batch, ratelimit.DefaultLease()))
	}
	key := "rl:{volume}:" + strings.ReplaceAll(b.name+":"+m.name, " ", "-")
	limiters := make([]*ratelimit.Limiter, volumeInstances)
	for i := range limiters {
		l, err := ratelimit.New(newClient(addr), ratelimit.Options{Failure: ratelimit.FailOpen(), Logger: quiet, LocalPrecheck: m.precheck})
		if err != nil {
			log.Fatal(err)
		}
		if _, err := l.Verify(ctx); err != nil {
			log.Fatal(err)
		}
		limiters[i] = l
	}
	var admitted atomic.Uint64
	times := make([]volumeTimes, volumeInstances*volumeWorkers)
	before := rlCalls(ctx, probe)
	start := serverTime(ctx, probe) // the bucket's clock
	var wg sync.WaitGroup
	for w := range times {
		wg.Add(1)
		go func() {
			defer wg.Done()
			times[w] = checkMany(ctx, limiters[w%volumeInstances], key, policy, &admitted)
		}()
	}
	wg.Wait()
	elapsed := serverTime(ctx, probe).Sub(start)
	row := volumeRow{bucket: b, mode: m, admitted: admitted.Load(), grantable: float64(b.capacity) + b.rate*elapsed.Seconds()}
	for _, l := range limiters {
		n := l.Counts()
		row.decisions += n.Decisions
		row.local += n.Local
		if n.Degraded > 0 {
			log.Fatalf("%s, %s: %d decisions Redis did not make", b.name, m.name, n.Degraded)
		}
		if err := l.Close(); err != nil { // the held units go back
			log.Fatal(err)
		}
	}
	row.calls = rlCalls(ctx, probe) - before
	var all, local []time.Duration
	for _, t := range times {
		all, local = append(all, t.all...), append(local, t.local...)
	}
	slices.Sort(all)
	slices.Sort(local)
	row.p50, row.p99, row.p99Local = percentile(all, 50), percentile(all, 99), percentile(local, 99)
	if float64(row.admitted) > row.grantable {
		log.Fatalf("%s, %s: admitted %d, above the %.0f the bucket could grant", b.name, m.name, row.admitted, row.grantable)
	}
	return row
}

// checkMany is one goroutine's checks, timed; admitted counts the allowed ones.
func checkMany(ctx context.Context, l *ratelimit.Limiter, key string, policy ratelimit.Policy, admitted *atomic.Uint64) volumeTimes {
	t := volumeTimes{all: make([]time.Duration, 0, volumeChecks)}
	for range volumeChecks {
		t0 := time.Now()
		d, err := l.Check(ctx, key, policy, 1)
		took := time.Since(t0)
		if err != nil {
			log.Fatal(err)
		}
		t.all = append(t.all, took)
		if d.Local {
			t.local = append(t.local, took)
		}
		if d.Allowed && !d.Degraded {
			admitted.Add(1)
		}
	}
	return t
}

// percentile is the p-th percentile of sorted (0 when empty).
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[len(sorted)*p/100]
}

// rlCalls is the server's calls of RL.* commands so far.
func rlCalls(ctx context.Context, c *redis.Client) uint64 {
	info, _ := c.Info(ctx, "commandstats").Result()
	var n uint64
	for _, line := range strings.Split(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_rl."); ok {
			_, stats, _ := strings.Cut(rest, ":calls=")
			v, _ := strconv.ParseUint(strings.SplitN(stats, ",", 2)[0], 10, 64)
			n += v
		}
	}
	return n
}

func serverTime(ctx context.Context, c *redis.Client) time.Time {
	t, err := c.Time(ctx).Result()
	if err != nil {
		log.Fatal(err)
	}
	return t
}

func renderVolume(w func(format string, a ...any), rows []volumeRow) {
	w("## High volume: one hot key, 2 instances (docs/high-volume.md)\n\n")
	w("Measured in process, not through wrk: %d limiters (\"app instances\", each its own go-redis\n", volumeInstances)
	w("client) check one key from %d goroutines each, %d checks a goroutine (%d decisions a row), on\n", volumeWorkers, volumeChecks, volumeInstances*volumeWorkers*volumeChecks)
	w("the same server, one row after another: per call, with the pre-check (`LocalPrecheck`), with\n")
	w("batched units (`WithBatch(%d, DefaultLease())`) and with both; on a bucket far above the load\n", volumeBatch)
	w("(every check allowed) and on one the load drains (%d tokens refilling %.0f a second: allowed\n", volumeBuckets[1].capacity, volumeBuckets[1].rate)
	w("and denied checks). \"calls a decision\": the server's calls of RL.* commands (INFO\n")
	w("commandstats; refunds, Verify and Close's refunds included) over the decisions; p50 and p99: a\n")
	w("check's time in the caller; \"p99 local\": of the decisions made without a round trip;\n")
	w("\"admitted\": the allowed checks, against what the bucket could grant over the run (capacity +\n")
	w("rate x the run's time on the server's clock): never above, in every mode.\n\n")
	w("| bucket | mode | calls a decision | local decisions | p50 | p99 | p99 local | admitted / could be granted |\n")
	w("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range rows {
		p99Local := "–"
		if r.local > 0 {
			p99Local = fmtMicros(r.p99Local)
		}
		grantable := fmt.Sprintf("%.0f", r.grantable)
		if r.bucket.capacity == capacity {
			grantable = "10^9 +"
		}
		w("| %s | %s | %.3f | %d%% | %s | %s | %s | %d / %s |\n", r.bucket.name, r.mode.name, float64(r.calls)/float64(r.decisions),
			100*r.local/max(1, r.decisions), fmtMicros(r.p50), fmtMicros(r.p99), p99Local, r.admitted, grantable)
	}
	w("\n")
}

func fmtMicros(d time.Duration) string {
	return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
}
