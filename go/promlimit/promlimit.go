// Package promlimit exports redis-ratelimit's counters to Prometheus through client_golang, with
// the Rust client's metric names, so the core package needs nothing beyond go-redis:
//
//	ratelimit_client_decisions_total{limiter, outcome}   allowed, denied, degraded_allowed, degraded_denied
//	ratelimit_outages_total{limiter}                     outages started (Redis stopped deciding)
//	ratelimit_outage_decisions_total{limiter, allowed}   decisions of the failure policy during one
//	ratelimit_configuration_faults_total{limiter}        calls answered that the limiter is misconfigured
//	ratelimit_conflicts_total{limiter}                   calls whose key held another limiter's state
//	ratelimit_usage_errors_total{limiter}                calls refused as the caller's mistake (ErrUsage)
//	ratelimit_local_decisions_total{limiter}             decisions made without a round trip (pre-check, batched units)
//	ratelimit_breaker_opened_total{limiter}, ratelimit_breaker_rejected_total{limiter}
//	ratelimit_breaker_open{limiter}                      1 while calls are kept from Redis
//	ratelimit_http_requests_total{route, limit, outcome} the middleware's decisions (HTTPRecorder)
//
// The limiter's counters are read when Prometheus scrapes (nothing is added per decision).
package promlimit

import (
	"github.com/prometheus/client_golang/prometheus"
	ratelimit "github.com/redis-ratelimit/redis-ratelimit/go"
)

type collector struct {
	l                                                     *ratelimit.Limiter
	decisions, outages, outageDecisions, faults           *prometheus.Desc
	conflicts, usageErrors, local                         *prometheus.Desc
	breakerOpened, breakerRejected, breakerOpen, engineOn *prometheus.Desc
}

// NewCollector is a prometheus.Collector of l's counters, labelled limiter=name (one collector per
// limiter; register each, with its own name).
func NewCollector(name string, l *ratelimit.Limiter) prometheus.Collector {
	labels := prometheus.Labels{"limiter": name}
	desc := func(metric, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc(metric, help, variable, labels)
	}
	return &collector{
		l:               l,
		decisions:       desc("ratelimit_client_decisions_total", "Decisions, by outcome (degraded: the failure policy's).", "outcome"),
		outages:         desc("ratelimit_outages_total", "Outages started: Redis stopped deciding."),
		outageDecisions: desc("ratelimit_outage_decisions_total", "Decisions the failure policy made (Redis did not decide).", "allowed"),
		faults:          desc("ratelimit_configuration_faults_total", "Calls answered that the limiter is misconfigured: no engine, NOPERM, an unknown reply (not an outage)."),
		conflicts:       desc("ratelimit_conflicts_total", "Calls whose key held another limiter's state or another type (not an outage)."),
		usageErrors:     desc("ratelimit_usage_errors_total", "Calls refused as the caller's mistake (ErrUsage)."),
		local:           desc("ratelimit_local_decisions_total", "Decisions made in this process without a round trip (pre-check denials, batched units; counted in the decisions too)."),
		breakerOpened:   desc("ratelimit_breaker_opened_total", "Times the circuit breaker opened."),
		breakerRejected: desc("ratelimit_breaker_rejected_total", "Calls kept from Redis by the open breaker."),
		breakerOpen:     desc("ratelimit_breaker_open", "1 while the breaker keeps calls from Redis."),
		engineOn:        desc("ratelimit_engine_info", "The engine in use (1).", "engine"),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.decisions, c.outages, c.outageDecisions, c.faults, c.conflicts, c.usageErrors, c.local,
		c.breakerOpened, c.breakerRejected, c.breakerOpen, c.engineOn} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	n := c.l.Counts()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	decided := n.Decisions - n.Degraded
	allowed := n.Allowed - n.DegradedAllowed
	counter(c.decisions, allowed, "allowed")
	counter(c.decisions, decided-min(allowed, decided), "denied")
	counter(c.decisions, n.DegradedAllowed, "degraded_allowed")
	counter(c.decisions, n.Degraded-n.DegradedAllowed, "degraded_denied")
	counter(c.outages, n.Outages)
	counter(c.outageDecisions, n.DegradedAllowed, "true")
	counter(c.outageDecisions, n.Degraded-n.DegradedAllowed, "false")
	counter(c.faults, n.Misconfigurations)
	counter(c.conflicts, n.Conflicts)
	counter(c.usageErrors, n.UsageErrors)
	counter(c.local, n.Local)
	counter(c.breakerOpened, n.BreakerOpened)
	counter(c.breakerRejected, n.BreakerRejected)
	open := 0.0
	if c.l.BreakerOpen() {
		open = 1
	}
	ch <- prometheus.MustNewConstMetric(c.breakerOpen, prometheus.GaugeValue, open)
	engine, _ := c.l.Engine()
	ch <- prometheus.MustNewConstMetric(c.engineOn, prometheus.GaugeValue, 1, engine.String())
}

// HTTPRecorder registers ratelimit_http_requests_total{route, limit, outcome} with reg and returns
// the function to set as httplimit.Config.Record.
func HTTPRecorder(reg prometheus.Registerer) (func(route, limit, outcome string), error) {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimit_http_requests_total",
		Help: "The rate limit middleware's decisions, by route, the limit that decided and outcome.",
	}, []string{"route", "limit", "outcome"})
	if err := reg.Register(v); err != nil {
		return nil, err
	}
	return func(route, limit, outcome string) { v.WithLabelValues(route, limit, outcome).Inc() }, nil
}
