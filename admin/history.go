package admin

import (
	"sync"
	"time"
)

// History keeps the last minutes of every endpoint's health, sampled at a
// fixed interval, for the live page's sparklines: success and latency
// EWMAs, requests in flight, and picks in each interval. Endpoints a
// reload removed are forgotten at the next sample; its memory is bounded
// by the endpoints in the config times the samples kept.
type History struct {
	pools func() []PoolView
	every time.Duration
	keep  int

	mu     sync.Mutex
	series map[seriesKey]*series // guarded by mu
	order  []seriesKey           // guarded by mu: in the order /status lists them

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

type seriesKey struct{ pool, endpoint string }

// series is one endpoint's samples, oldest first, at most keep of each.
type series struct {
	T         []int64   `json:"t"` // Unix milliseconds
	Success   []float64 `json:"success"`
	LatencyMS []float64 `json:"latency_ms"`
	Inflight  []int64   `json:"inflight"`
	Picks     []int64   `json:"picks"` // requests since the sample before
	requests  int64
}

// HistoryDoc is the /ui/history document.
type HistoryDoc struct {
	EverySeconds float64       `json:"every_seconds"`
	Pools        []PoolHistory `json:"pools"`
}

// PoolHistory is one pool's series, endpoint by endpoint.
type PoolHistory struct {
	Name      string            `json:"name"`
	Endpoints []EndpointHistory `json:"endpoints"`
}

// EndpointHistory is one endpoint's series.
type EndpointHistory struct {
	Name string `json:"name"`
	*series
}

// NewHistory samples pools every interval and keeps keep samples.
func NewHistory(pools func() []PoolView, every time.Duration, keep int) *History {
	return &History{pools: pools, every: every, keep: keep, series: map[seriesKey]*series{},
		stop: make(chan struct{}), done: make(chan struct{})}
}

// Start samples now and then every interval until Stop.
func (h *History) Start() {
	h.Sample(time.Now())
	go func() {
		defer close(h.done)
		t := time.NewTicker(h.every)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case now := <-t.C:
				h.Sample(now)
			}
		}
	}()
}

// Stop ends the sampling started by Start and waits for it.
func (h *History) Stop() {
	h.once.Do(func() { close(h.stop) })
	<-h.done
}

// Sample records every endpoint's state at now.
func (h *History) Sample(now time.Time) {
	views := h.pools()
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := make(map[seriesKey]bool, len(h.series))
	h.order = h.order[:0]
	for _, pv := range views {
		for _, ep := range pv.Snapshot.Endpoints() {
			k := seriesKey{pv.Name, ep.Name}
			snap := ep.Snapshot(now)
			s := h.series[k]
			if s == nil {
				s = &series{requests: snap.Requests}
				h.series[k] = s
			}
			picks := snap.Requests - s.requests
			if picks < 0 { // a new state under the old name: count afresh
				picks = snap.Requests
			}
			s.requests = snap.Requests
			s.T = push(h.keep, s.T, now.UnixMilli())
			s.Success = push(h.keep, s.Success, snap.SuccessEWMA)
			s.LatencyMS = push(h.keep, s.LatencyMS, snap.LatencyEWMA*1000)
			s.Inflight = push(h.keep, s.Inflight, snap.Inflight)
			s.Picks = push(h.keep, s.Picks, picks)
			seen[k] = true
			h.order = append(h.order, k)
		}
	}
	for k := range h.series {
		if !seen[k] {
			delete(h.series, k)
		}
	}
}

// push appends v to a series, dropping the oldest past keep.
func push[T any](keep int, s []T, v T) []T {
	if len(s) >= keep {
		s = append(s[:0], s[len(s)-keep+1:]...)
	}
	return append(s, v)
}

// Doc returns a copy of the history.
func (h *History) Doc() HistoryDoc {
	h.mu.Lock()
	defer h.mu.Unlock()
	doc := HistoryDoc{EverySeconds: h.every.Seconds()}
	for _, k := range h.order {
		if len(doc.Pools) == 0 || doc.Pools[len(doc.Pools)-1].Name != k.pool {
			doc.Pools = append(doc.Pools, PoolHistory{Name: k.pool})
		}
		s := h.series[k]
		c := &series{T: clone(s.T), Success: clone(s.Success), LatencyMS: clone(s.LatencyMS),
			Inflight: clone(s.Inflight), Picks: clone(s.Picks)}
		p := &doc.Pools[len(doc.Pools)-1]
		p.Endpoints = append(p.Endpoints, EndpointHistory{Name: k.endpoint, series: c})
	}
	return doc
}

func clone[T any](s []T) []T { return append([]T(nil), s...) }
