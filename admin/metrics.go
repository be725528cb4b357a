// Package admin serves rotor's admin listener: Prometheus metrics, the
// status JSON, draining and reloading, and a liveness check.
package admin

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/proxy"
)

// PoolView is what the admin listener sees of one pool: the snapshot in
// force (its endpoints' Addr are shown as they are, so they must carry no
// credentials).
type PoolView struct {
	Name     string
	Snapshot *balance.Snapshot
	// Sticky is the pool's sticky policy, when it has one.
	Sticky *balance.Sticky
	// DNS, when the pool takes endpoints from DNS, reports its lookups.
	DNS func() *DNSStatus
}

// DNSStatus is a pool's DNS lookups, as /status shows them.
type DNSStatus struct {
	Name      string    `json:"name"`
	Type      string    `json:"type"`
	Addresses []string  `json:"addresses"` // the last good answer, in force
	LastOK    time.Time `json:"last_ok,omitzero"`
	// Error is the last lookup's error while it fails: the last good
	// answer still serves.
	Error    string `json:"error,omitempty"`
	Failures int64  `json:"failures"`
}

// Metrics counts requests for Prometheus and reads endpoint health at
// scrape time. It implements proxy.Observer.
type Metrics struct {
	Registry *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	conns    *prometheus.CounterVec
	connDur  *prometheus.HistogramVec
	retries  *prometheus.CounterVec
	refused  *prometheus.CounterVec
	bytes    *prometheus.CounterVec
	pools    func() []PoolView

	mu     sync.RWMutex
	series map[httpKey]*keyedSeries
	// recent holds the series last found, each in a slot its key picks
	// without hashing its strings (recentSlot): a request whose series is
	// there finds it by comparing its key, where the map hashes four
	// strings and takes the lock (210 instructions and 28 lines of code
	// more a GET: docs/BENCHMARKS.md, "A request's series at hand").
	recent [recentSlots]atomic.Pointer[keyedSeries]
}

// recentSlots is how many series Metrics.recent holds: a power of two.
const recentSlots = 16

// keyedSeries is a series with its key, as the map and recent hold it.
type keyedSeries struct {
	key httpKey
	httpSeries
}

// recentSlot is k's slot in Metrics.recent, from what tells keys apart
// without reading their strings through: the status, the lengths, and
// the endpoint's last byte (names that differ only in a number or a
// letter at the end, as endpoints' most often do). Keys that share a
// slot take turns in it, and each finds the map when the other is there.
func recentSlot(k *httpKey) int {
	h := uint(k.status)*31 + uint(len(k.endpoint))
	if n := len(k.endpoint); n > 0 {
		h = h*31 + uint(k.endpoint[n-1])
	}
	h = h*31 + uint(len(k.pool)) + uint(len(k.listener))<<5
	return int(h^h>>4) & (recentSlots - 1)
}

// httpKey names the series a finished HTTP request counts in.
type httpKey struct {
	listener, kind, pool, endpoint string
	status                         int
}

// httpSeries is an httpKey's counters, looked up in their vectors once: a
// vector hashes every label value on each lookup, and a request would
// make four.
type httpSeries struct {
	requests prometheus.Counter
	latency  prometheus.Observer
	in, out  prometheus.Counter
}

var _ proxy.Observer = (*Metrics)(nil)

// NewMetrics returns metrics reading pools at each scrape.
func NewMetrics(pools func() []PoolView) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rotor_requests_total", Help: "HTTP requests finished (forward and CONNECT included), by listener, kind, pool, endpoint and the status sent (101 for an upgrade, 200 for a tunnel, 499 when the client went away).",
		}, []string{"listener", "kind", "pool", "endpoint", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rotor_request_duration_seconds", Help: "Time from accepting an HTTP request to its end, by listener and pool.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"listener", "pool"}),
		conns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rotor_tcp_connections_total", Help: "TCP connections finished, by listener, pool, endpoint and result (ok, idle: closed after timeouts.tunnel, or why it failed).",
		}, []string{"listener", "pool", "endpoint", "result"}),
		connDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rotor_tcp_connection_duration_seconds", Help: "Life of a TCP connection, by listener and pool.",
			Buckets: []float64{.01, .1, 1, 10, 60, 300, 1800, 3600},
		}, []string{"listener", "pool"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rotor_retries_total", Help: "Tries made again on another endpoint, by listener and pool.",
		}, []string{"listener", "pool"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rotor_refused_total", Help: "Requests and connections rotor refused or failed itself, by listener and reason (no_endpoint, auth, port_forbidden, target_forbidden, client, timeout, ...).",
		}, []string{"listener", "reason"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rotor_bytes_total", Help: "Bytes relayed, by listener and direction (in: from clients, out: to clients).",
		}, []string{"listener", "direction"}),
		pools:  pools,
		series: make(map[httpKey]*keyedSeries),
	}
	m.Registry.MustRegister(m.requests, m.latency, m.conns, m.connDur, m.retries, m.refused, m.bytes, m,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Served counts one finished request or connection.
func (m *Metrics) Served(r *proxy.Record) {
	if r.Kind == proxy.KindTCP {
		result := r.Reason
		if result == "" {
			result = "ok"
		}
		m.conns.WithLabelValues(r.Listener, r.Pool, r.Endpoint, result).Inc()
		m.connDur.WithLabelValues(r.Listener, r.Pool).Observe(r.Duration.Seconds())
	} else {
		s := m.httpSeries(r)
		s.requests.Inc()
		s.latency.Observe(r.Duration.Seconds())
		if r.BytesIn > 0 {
			s.in.Add(float64(r.BytesIn))
		}
		if r.BytesOut > 0 {
			s.out.Add(float64(r.BytesOut))
		}
	}
	if r.Attempts > 1 {
		m.retries.WithLabelValues(r.Listener, r.Pool).Add(float64(r.Attempts - 1))
	}
	if r.Reason != "" {
		m.refused.WithLabelValues(r.Listener, r.Reason).Inc()
	}
	if r.Kind == proxy.KindTCP {
		if r.BytesIn > 0 {
			m.bytes.WithLabelValues(r.Listener, "in").Add(float64(r.BytesIn))
		}
		if r.BytesOut > 0 {
			m.bytes.WithLabelValues(r.Listener, "out").Add(float64(r.BytesOut))
		}
	}
}

// httpSeries returns r's series, made the first time they are asked for.
func (m *Metrics) httpSeries(r *proxy.Record) *httpSeries {
	k := httpKey{r.Listener, r.Kind, r.Pool, r.Endpoint, r.Status}
	slot := &m.recent[recentSlot(&k)]
	if e := slot.Load(); e != nil && e.key == k {
		return &e.httpSeries
	}
	m.mu.RLock()
	e := m.series[k]
	m.mu.RUnlock()
	if e == nil {
		e = m.newSeries(k, r)
	}
	slot.Store(e)
	return &e.httpSeries
}

// newSeries makes k's series, r's, unless another request made them
// meanwhile.
func (m *Metrics) newSeries(k httpKey, r *proxy.Record) *keyedSeries {
	e := &keyedSeries{key: k, httpSeries: httpSeries{
		requests: m.requests.WithLabelValues(r.Listener, r.Kind, r.Pool, r.Endpoint, strconv.Itoa(r.Status)),
		latency:  m.latency.WithLabelValues(r.Listener, r.Pool),
		in:       m.bytes.WithLabelValues(r.Listener, "in"),
		out:      m.bytes.WithLabelValues(r.Listener, "out"),
	}}
	m.mu.Lock()
	defer m.mu.Unlock()
	if old := m.series[k]; old != nil {
		return old
	}
	m.series[k] = e
	return e
}

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
	descPanic    = prometheus.NewDesc("rotor_pool_panic_picks_total", "Picks in panic mode: too few primaries healthy, spread over all.", []string{"pool"}, nil)
	descBackup   = prometheus.NewDesc("rotor_pool_backup_picks_total", "Picks of a backup endpoint, no primary being available.", []string{"pool"}, nil)
	descNoEP     = prometheus.NewDesc("rotor_pool_unavailable_total", "Picks that found no endpoint at all.", []string{"pool"}, nil)
	descSticky   = prometheus.NewDesc("rotor_sticky_total", "Sticky policy decisions: pinned, hit, repinned, broken, rejected, unkeyed, evicted, adopted (a key new here sent where another instance pinned it).", []string{"pool", "event"}, nil)
	descStickyN  = prometheus.NewDesc("rotor_sticky_entries", "Keys in the sticky table.", []string{"pool"}, nil)
	descDNSN     = prometheus.NewDesc("rotor_dns_endpoints", "Endpoints the pool's last good DNS answer gave.", []string{"pool"}, nil)
	descDNSFail  = prometheus.NewDesc("rotor_dns_failures_total", "DNS lookups of the pool's name that failed (the last good answer kept serving).", []string{"pool"}, nil)
	descDNSOK    = prometheus.NewDesc("rotor_dns_healthy", "1 while the pool's last DNS lookup succeeded.", []string{"pool"}, nil)

	descLoopRelays = prometheus.NewDesc("rotor_relay_loop_relays", "Plain TCP connections (tcp listeners, upgrades, tunnels) relayed by the event loop now.", []string{"loop"}, nil)
	descLoopFull   = prometheus.NewDesc("rotor_relay_loop_full", "1 from when the event loop has had no pause for 100 ms to its next pause: new connections go to another loop meanwhile.", []string{"loop"}, nil)
	descLoopMoved  = prometheus.NewDesc("rotor_relay_loop_moved_total", "Connections the event loop handed to another loop that kept up.", []string{"loop"}, nil)
)

// Describe sends the descriptors of the health and relay loop metrics.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInflight, descScore, descSuccess, descLatency, descBreaker, descPicks, descOutcomes, descOpens, descDraining, descDown, descFallback, descPanic, descBackup, descNoEP, descSticky, descStickyN, descDNSN, descDNSFail, descDNSOK, descLoopRelays, descLoopFull, descLoopMoved} {
		ch <- d
	}
}

// Collect reads every endpoint's health, and the relay loops, now.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for i, l := range proxy.RelayLoops() {
		loop := strconv.Itoa(i)
		ch <- prometheus.MustNewConstMetric(descLoopRelays, prometheus.GaugeValue, float64(l.Relays), loop)
		ch <- prometheus.MustNewConstMetric(descLoopFull, prometheus.GaugeValue, b2f(l.Full), loop)
		ch <- prometheus.MustNewConstMetric(descLoopMoved, prometheus.CounterValue, float64(l.Moved), loop)
	}
	now := time.Now()
	for _, pv := range m.pools() {
		snap := pv.Snapshot
		for _, ep := range snap.Endpoints() {
			s := ep.Snapshot(now)
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
			counter(descPicks, float64(s.Requests), snap.Policy())
			counter(descOutcomes, float64(s.Successes), "success")
			counter(descOutcomes, float64(s.Failures), "failure")
			counter(descOutcomes, float64(s.Ignored), "ignore")
			counter(descOpens, float64(s.Opens))
			gauge(descDraining, b2f(s.Draining))
			gauge(descDown, b2f(s.Down))
		}
		st := snap.Pool().Stats()
		pool := func(d *prometheus.Desc, v int64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), pv.Name)
		}
		pool(descFallback, st.Fallbacks)
		pool(descPanic, st.Panics)
		pool(descBackup, st.Backups)
		pool(descNoEP, st.Unavailable)
		if pv.Sticky != nil {
			st := pv.Sticky.Stats()
			for event, v := range map[string]int64{"pinned": st.Pinned, "hit": st.Hits, "repinned": st.Repinned,
				"broken": st.Broken, "rejected": st.Rejected, "unkeyed": st.Unkeyed, "evicted": st.Evicted, "adopted": st.Adopted} {
				ch <- prometheus.MustNewConstMetric(descSticky, prometheus.CounterValue, float64(v), pv.Name, event)
			}
			ch <- prometheus.MustNewConstMetric(descStickyN, prometheus.GaugeValue, float64(st.Entries), pv.Name)
		}
		if pv.DNS != nil {
			d := pv.DNS()
			ch <- prometheus.MustNewConstMetric(descDNSN, prometheus.GaugeValue, float64(len(d.Addresses)), pv.Name)
			ch <- prometheus.MustNewConstMetric(descDNSFail, prometheus.CounterValue, float64(d.Failures), pv.Name)
			ch <- prometheus.MustNewConstMetric(descDNSOK, prometheus.GaugeValue, b2f(d.Error == ""), pv.Name)
		}
	}
}

// WatchState reports the state store at each scrape:
// rotor_state_degraded (1 while a shared store is out of reach and this
// instance serves on its local state), rotor_state_operations_total by
// kind, and rotor_state_dropped_outcomes_total.
func (m *Metrics) WatchState(state func() StateStatus) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rotor_state_degraded", Help: "1 while the shared state store is out of reach and this instance serves on its local state.",
	}, func() float64 { return b2f(!state().Healthy) }), &stateCollector{state})
}

var (
	descStateOps     = prometheus.NewDesc("rotor_state_operations_total", "Operations sent to the shared state store, by kind: outcome, read, claim, touch.", []string{"op"}, nil)
	descStateDropped = prometheus.NewDesc("rotor_state_dropped_outcomes_total", "Outcomes that never reached the shared state store (out of reach, or the queue full).", nil, nil)
)

type stateCollector struct{ state func() StateStatus }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descStateOps
	ch <- descStateDropped
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.state()
	for op, n := range st.Operations {
		ch <- prometheus.MustNewConstMetric(descStateOps, prometheus.CounterValue, float64(n), op)
	}
	ch <- prometheus.MustNewConstMetric(descStateDropped, prometheus.CounterValue, float64(st.Dropped))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
