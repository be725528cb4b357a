package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"sync"
	"time"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/proxy/forward"
	"github.com/rotor-lb/rotor/sim"
)

// Options set up a benchmark: every policy sends the same requests to URL
// over the same routes, at the same time, each through its own pool.
type Options struct {
	URL string
	// Routes are built for each policy (its own connections); a zero
	// Connect means 5s, a zero Try the request timeout.
	Routes   []forward.RouteOptions
	Policies []string
	Factory  func(name string) (balance.Policy, error)
	// Requests per policy; when 0, Duration at Rate requests a second.
	Requests    int
	Duration    time.Duration
	Rate        float64
	Concurrency int
	Health      health.Config
	Timeout     time.Duration // per request; 0 means 10s
	// Tick, when set, is called about once a second with what each policy
	// did in that second.
	Tick func(Tick)
	Seed uint64
}

// Tick is one second of a run.
type Tick struct {
	Elapsed  time.Duration
	Policies []PolicyTick
}

// PolicyTick is one policy's second.
type PolicyTick struct {
	Policy   string
	Requests int
	OK       int
	Mean     time.Duration
	Share    map[string]int
	Open     []string // routes whose breaker is open now
}

// Event is something worth telling that happened to a route.
type Event struct {
	At     time.Duration `json:"at_ns"`
	Policy string        `json:"policy"`
	Route  string        `json:"route"`
	What   string        `json:"what"`
}

// Row is one policy's result: article 001's table.
type Row struct {
	Policy      string             `json:"policy"`
	Requests    int                `json:"requests"`
	SuccessRate float64            `json:"success_rate"`
	Mean        time.Duration      `json:"mean_ns"`
	P95         time.Duration      `json:"p95_ns"`
	Share       map[string]float64 `json:"share"`
	// Wasted counts requests that failed on a route; BeforeOpen those of
	// them sent while the route's breaker was still closed (for a policy
	// with a breaker, at most about the threshold per outage).
	Wasted     int `json:"wasted"`
	BeforeOpen int `json:"wasted_before_open"`
}

// Report is a whole run.
type Report struct {
	URL      string        `json:"url"`
	Duration time.Duration `json:"duration_ns"`
	Routes   []string      `json:"routes"`
	Rows     []Row         `json:"rows"`
	Events   []Event       `json:"events"`
}

// IsControl reports whether policy runs as article 001's control: blind,
// with no breaker.
func IsControl(policy string) bool { return policy == "round_robin" }

type runner struct {
	name    string
	tr      *forward.Transport
	mu      sync.Mutex
	hist    sim.Histogram
	ok      int
	total   int
	share   map[string]int
	wasted  int
	before  int
	sec     PolicyTick
	secSum  time.Duration
	breaker map[string]health.BreakerState
}

// Run runs the benchmark.
func Run(ctx context.Context, o Options) (Report, error) {
	if len(o.Routes) == 0 || len(o.Policies) == 0 {
		return Report{}, fmt.Errorf("bench: routes and policies are required")
	}
	if _, err := url.ParseRequestURI(o.URL); err != nil {
		return Report{}, fmt.Errorf("bench: %q is not a URL", o.URL)
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 8
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Requests == 0 && (o.Duration <= 0 || o.Rate <= 0) {
		return Report{}, fmt.Errorf("bench: give requests, or a duration and a rate")
	}
	start := time.Now()
	rep := Report{URL: o.URL}
	for _, r := range o.Routes {
		rep.Routes = append(rep.Routes, r.Name)
	}
	var evMu sync.Mutex
	event := func(e Event) {
		evMu.Lock()
		rep.Events = append(rep.Events, e)
		evMu.Unlock()
	}
	runners := make([]*runner, len(o.Policies))
	for i, name := range o.Policies {
		p, err := o.Factory(name)
		if err != nil {
			return Report{}, fmt.Errorf("policy %s: %w", name, err)
		}
		var routes []*forward.Route
		for _, ro := range o.Routes {
			if ro.Connect == 0 {
				ro.Connect = 5 * time.Second
			}
			if ro.Try == 0 {
				ro.Try = o.Timeout
			}
			r, err := forward.NewRoute(ro)
			if err != nil {
				return Report{}, fmt.Errorf("route %s: %w", ro.Name, err)
			}
			routes = append(routes, r)
		}
		hc := o.Health
		if IsControl(name) {
			hc.Threshold = math.MaxInt32 // the control: no breaker
		}
		rn := &runner{name: name, share: map[string]int{}, breaker: map[string]health.BreakerState{}}
		rn.sec.Share = map[string]int{}
		tr, err := forward.NewTransport(routes, forward.Options{
			Policy: p, Health: hc, Attempts: 1, Rand: balance.NewSeededRand(o.Seed + uint64(i)),
			OnOutcome: func(route string, oc health.Outcome, v health.Verdict) {
				rn.observe(route, v, start, event)
			},
		})
		if err != nil {
			return Report{}, err
		}
		rn.tr = tr
		runners[i] = rn
	}
	defer func() {
		for _, rn := range runners {
			rn.tr.CloseIdleConnections()
		}
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tickDone := make(chan struct{})
	if o.Tick != nil {
		go func() {
			defer close(tickDone)
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					tk := Tick{Elapsed: time.Since(start).Round(time.Second)}
					for _, rn := range runners {
						tk.Policies = append(tk.Policies, rn.second())
					}
					o.Tick(tk)
				}
			}
		}()
	} else {
		close(tickDone)
	}
	var wg sync.WaitGroup
	for _, rn := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rn.drive(ctx, o)
		}()
	}
	wg.Wait()
	cancel()
	<-tickDone
	rep.Duration = time.Since(start)
	for _, rn := range runners {
		rep.Rows = append(rep.Rows, rn.row(rep.Routes))
	}
	sort.SliceStable(rep.Events, func(i, j int) bool { return rep.Events[i].At < rep.Events[j].At })
	return rep, nil
}

// drive sends this policy's requests: a fixed count with a pool of
// workers, or a fixed rate for a duration.
func (rn *runner) drive(ctx context.Context, o Options) {
	client := &http.Client{Transport: rn.tr, Timeout: o.Timeout}
	jobs := make(chan struct{}, o.Concurrency)
	var wg sync.WaitGroup
	for range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				rn.fetch(ctx, client, o.URL)
			}
		}()
	}
	if o.Requests > 0 {
		for range o.Requests {
			select {
			case jobs <- struct{}{}:
			case <-ctx.Done():
			}
		}
	} else {
		t := time.NewTicker(time.Duration(float64(time.Second) / o.Rate))
		end := time.After(o.Duration)
	loop:
		for {
			select {
			case <-t.C:
				select {
				case jobs <- struct{}{}:
				default: // every worker busy: this tick is skipped
				}
			case <-end:
				break loop
			case <-ctx.Done():
				break loop
			}
		}
		t.Stop()
	}
	close(jobs)
	wg.Wait()
}

func (rn *runner) fetch(ctx context.Context, c *http.Client, target string) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	start := time.Now()
	resp, err := c.Do(req)
	ok := err == nil && resp.StatusCode < 400
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	d := time.Since(start)
	rn.mu.Lock()
	defer rn.mu.Unlock()
	rn.total++
	rn.sec.Requests++
	if ok {
		rn.ok++
		rn.sec.OK++
		rn.hist.Record(d)
		rn.secSum += d
	}
}

// observe is told each attempt's outcome on a route.
func (rn *runner) observe(route string, v health.Verdict, start time.Time, event func(Event)) {
	st := rn.tr.Pool().Snapshot.Get(route).State
	now := time.Now()
	b := st.Breaker(now)
	rn.mu.Lock()
	defer rn.mu.Unlock()
	rn.share[route]++
	rn.sec.Share[route]++
	prev := rn.breaker[route]
	if v == health.Failure {
		rn.wasted++
		if prev == health.Closed {
			rn.before++
		}
	}
	if b != prev {
		switch {
		case b == health.Open && prev == health.Closed:
			event(Event{At: now.Sub(start), Policy: rn.name, Route: route, What: "breaker opened"})
		case b == health.Closed:
			event(Event{At: now.Sub(start), Policy: rn.name, Route: route, What: "recovery noticed: probe succeeded, breaker closed"})
		case b == health.Open && prev == health.HalfOpen:
			event(Event{At: now.Sub(start), Policy: rn.name, Route: route, What: "probe failed, breaker open again"})
		}
		rn.breaker[route] = b
	}
}

func (rn *runner) second() PolicyTick {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	t := rn.sec
	t.Policy = rn.name
	if t.OK > 0 {
		t.Mean = rn.secSum / time.Duration(t.OK)
	}
	now := time.Now()
	for _, ep := range rn.tr.Pool().Snapshot.Endpoints() {
		if ep.State.Breaker(now) == health.Open {
			t.Open = append(t.Open, ep.Name)
		}
	}
	rn.sec = PolicyTick{Share: map[string]int{}}
	rn.secSum = 0
	return t
}

func (rn *runner) row(routes []string) Row {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	r := Row{Policy: rn.name, Requests: rn.total, Mean: rn.hist.Mean(), P95: rn.hist.Quantile(0.95),
		Share: map[string]float64{}, Wasted: rn.wasted, BeforeOpen: rn.before}
	if rn.total > 0 {
		r.SuccessRate = float64(rn.ok) / float64(rn.total)
	}
	attempts := 0
	for _, n := range rn.share {
		attempts += n
	}
	for _, name := range routes {
		if attempts > 0 {
			r.Share[name] = float64(rn.share[name]) / float64(attempts)
		}
	}
	return r
}
