// Package admin serves rotor's admin listener: Prometheus metrics, the
// status JSON, draining and reloading, and a liveness check.
package admin

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/proxy"
)

// PoolView is what the admin listener sees of one pool.
type PoolView struct {
	Name      string
	Primary   *balance.Pool
	Backup    *balance.Pool
	Addresses map[string]string // endpoint -> address, credentials redacted
	Backups   map[string]bool
	// Sticky is the pool's sticky policy, when it has one.
	Sticky *balance.Sticky
}

// Metrics counts requests for Prometheus and reads endpoint health at
// scrape time. It implements proxy.Observer.
type Metrics struct {
	Registry *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	retries  *prometheus.CounterVec
	pools    func() []PoolView
	// TCPBytes, when set, reads the bytes each tcp listener has relayed.
	TCPBytes func() map[string]int64
}

var _ proxy.Observer = (*Metrics)(nil)

// NewMetrics returns metrics reading pools at each scrape.
func NewMetrics(pools func() []PoolView) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rotor_requests_total", Help: "Requests (or tcp connections) finished, by listener, pool, endpoint and status.",
		}, []string{"listener", "pool", "endpoint", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rotor_request_duration_seconds", Help: "Time from accepting a request to its end, by listener and pool.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"listener", "pool"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rotor_retries_total", Help: "Attempts tried again on another endpoint, by pool.",
		}, []string{"pool"}),
		pools: pools,
	}
	m.Registry.MustRegister(m.requests, m.latency, m.retries, m,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Served counts one finished request.
func (m *Metrics) Served(listener, pool, endpoint string, status int, d time.Duration) {
	m.requests.WithLabelValues(listener, pool, endpoint, strconv.Itoa(status)).Inc()
	m.latency.WithLabelValues(listener, pool).Observe(d.Seconds())
}

// Retried counts one retry.
func (m *Metrics) Retried(pool string) { m.retries.WithLabelValues(pool).Inc() }

var (
	descInflight = prometheus.NewDesc("rotor_endpoint_inflight", "Requests in flight on the endpoint.", []string{"pool", "endpoint"}, nil)
	descScore    = prometheus.NewDesc("rotor_endpoint_score", "Health score: success EWMA x 1/(1 + latency EWMA in s); 0 while the breaker is open.", []string{"pool", "endpoint"}, nil)
	descSuccess  = prometheus.NewDesc("rotor_endpoint_success_ewma", "Success EWMA.", []string{"pool", "endpoint"}, nil)
	descLatency  = prometheus.NewDesc("rotor_endpoint_latency_ewma_seconds", "Latency EWMA of successes.", []string{"pool", "endpoint"}, nil)
	descBreaker  = prometheus.NewDesc("rotor_endpoint_breaker_state", "Circuit breaker: 1 for the state it is in.", []string{"pool", "endpoint", "state"}, nil)
	descPicks    = prometheus.NewDesc("rotor_endpoint_picks_total", "Times the endpoint was picked, by policy.", []string{"pool", "endpoint", "policy"}, nil)
	descOutcomes = prometheus.NewDesc("rotor_endpoint_outcomes_total", "Outcomes reported, by verdict.", []string{"pool", "endpoint", "verdict"}, nil)
	descOpens    = prometheus.NewDesc("rotor_endpoint_breaker_opens_total", "Times the breaker opened.", []string{"pool", "endpoint"}, nil)
	descDraining = prometheus.NewDesc("rotor_endpoint_draining", "1 while the endpoint is draining.", []string{"pool", "endpoint"}, nil)
	descDown     = prometheus.NewDesc("rotor_endpoint_down", "1 while active checks hold the endpoint down.", []string{"pool", "endpoint"}, nil)
	descFallback = prometheus.NewDesc("rotor_pool_fallbacks_total", "Picks of the least bad endpoint, nothing being available.", []string{"pool"}, nil)
	descNoEP     = prometheus.NewDesc("rotor_pool_unavailable_total", "Picks that found no endpoint at all.", []string{"pool"}, nil)
	descSticky   = prometheus.NewDesc("rotor_sticky_total", "Sticky policy decisions: pinned, hit, repinned, broken, rejected, unkeyed.", []string{"pool", "event"}, nil)
	descTCPBytes = prometheus.NewDesc("rotor_tcp_bytes_total", "Bytes relayed by a tcp listener, both ways.", []string{"listener"}, nil)
)

// Describe sends the descriptors of the health metrics.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInflight, descScore, descSuccess, descLatency, descBreaker, descPicks, descOutcomes, descOpens, descDraining, descDown, descFallback, descNoEP, descSticky, descTCPBytes} {
		ch <- d
	}
}

// Collect reads every endpoint's health now.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	for _, pv := range m.pools() {
		var fallbacks, unavailable int64
		for _, bp := range []*balance.Pool{pv.Primary, pv.Backup} {
			if bp == nil {
				continue
			}
			st := bp.Stats()
			fallbacks += st.Fallbacks
			unavailable += st.Unavailable
			for _, ep := range bp.Set().Endpoints() {
				s := ep.State.Snapshot(now)
				l := []string{pv.Name, ep.Name}
				gauge := func(d *prometheus.Desc, v float64, extra ...string) {
					ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append(l, extra...)...)
				}
				counter := func(d *prometheus.Desc, v float64, extra ...string) {
					ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, append(l, extra...)...)
				}
				gauge(descInflight, float64(s.Inflight))
				gauge(descScore, s.Score)
				gauge(descSuccess, s.SuccessEWMA)
				gauge(descLatency, s.LatencyEWMA)
				for _, b := range []health.BreakerState{health.Closed, health.Open, health.HalfOpen} {
					gauge(descBreaker, b2f(s.Breaker == b), b.String())
				}
				counter(descPicks, float64(s.Requests), bp.Policy())
				counter(descOutcomes, float64(s.Successes), "success")
				counter(descOutcomes, float64(s.Failures), "failure")
				counter(descOutcomes, float64(s.Ignored), "ignore")
				counter(descOpens, float64(s.Opens))
				gauge(descDraining, b2f(s.Draining))
				gauge(descDown, b2f(s.Down))
			}
		}
		ch <- prometheus.MustNewConstMetric(descFallback, prometheus.CounterValue, float64(fallbacks), pv.Name)
		ch <- prometheus.MustNewConstMetric(descNoEP, prometheus.CounterValue, float64(unavailable), pv.Name)
		if pv.Sticky != nil {
			st := pv.Sticky.Stats()
			for event, v := range map[string]int64{"pinned": st.Pinned, "hit": st.Hits, "repinned": st.Repinned,
				"broken": st.Broken, "rejected": st.Rejected, "unkeyed": st.Unkeyed} {
				ch <- prometheus.MustNewConstMetric(descSticky, prometheus.CounterValue, float64(v), pv.Name, event)
			}
		}
	}
	if m.TCPBytes != nil {
		for listener, n := range m.TCPBytes() {
			ch <- prometheus.MustNewConstMetric(descTCPBytes, prometheus.CounterValue, float64(n), listener)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
