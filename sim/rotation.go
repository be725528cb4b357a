package sim

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
)

// RotationOptions set up article 001's case on simulated routes: by
// default a fast route that gets blocked for a while, a slow route that
// never fails, and a flaky route that fails in bursts and recovers. Round
// robin, the control, against the scored policy with and without the
// breaker, at several gammas and decays.
type RotationOptions struct {
	Duration time.Duration // 0 means 180 s
	Rate     float64       // requests per second; 0 means 20
	Seed     uint64
	Progress Progress
	// Routes are the routes, each a Server with a Name and a Latency, and
	// optionally an ErrorRate and failure Windows; nil means
	// RotationRoutes(Duration).
	Routes []Server
	// Variants overrides the policies compared; nil means DefaultRotation.
	Variants []RotationVariant
}

// RotationVariant is one policy setting in the rotation scenario.
type RotationVariant struct {
	Label   string
	Policy  string  // "round_robin" or "scored"
	Gamma   float64 // scored's exponent
	Decay   float64 // success and latency decays; 0 means the default, 0.3
	Breaker bool
}

// DefaultRotation are the variants the scenario compares.
var DefaultRotation = []RotationVariant{
	{Label: "round_robin (control)", Policy: "round_robin"},
	{Label: "round_robin + breaker", Policy: "round_robin", Breaker: true},
	{Label: "scored γ=2 no breaker", Policy: "scored", Gamma: 2},
	{Label: "scored γ=1", Policy: "scored", Gamma: 1, Breaker: true},
	{Label: "scored γ=2 (default)", Policy: "scored", Gamma: 2, Breaker: true},
	{Label: "scored γ=3", Policy: "scored", Gamma: 3, Breaker: true},
	{Label: "scored γ=4", Policy: "scored", Gamma: 4, Breaker: true},
	{Label: "scored γ=2 d=0.1", Policy: "scored", Gamma: 2, Decay: 0.1, Breaker: true},
	{Label: "scored γ=2 d=0.6", Policy: "scored", Gamma: 2, Decay: 0.6, Breaker: true},
}

// RotationRoutes are the scenario's routes for a run of the given length:
// "fast" (200 ms) is blocked with 403s from 1/3 to 2/3 of the run; "slow"
// (1.5 s) never fails; "flaky" (400 ms) answers 503 for 10 s in every 60.
func RotationRoutes(d time.Duration) []Server {
	return []Server{
		{Name: "fast", Latency: 200 * time.Millisecond, Windows: []Window{Block(d/3, 2*d/3)}},
		{Name: "slow", Latency: 1500 * time.Millisecond},
		{Name: "flaky", Latency: 400 * time.Millisecond, Windows: Bursts(20*time.Second, 10*time.Second, 60*time.Second, d)},
	}
}

// Block is a window in which a route refuses with 403 ("access denied"),
// quickly, as a blocked proxy route does.
func Block(from, to time.Duration) Window {
	return Window{From: from, To: to, Status: 403, Latency: 50 * time.Millisecond}
}

// Bursts are 503 windows of length span every period, the first at
// first, up to d.
func Bursts(first, span, period, d time.Duration) []Window {
	var ws []Window
	for t := first; t < d && period > 0; t += period {
		ws = append(ws, Window{From: t, To: t + span, Status: 503, Latency: 100 * time.Millisecond})
	}
	return ws
}

// RotationRow is one variant's result.
type RotationRow struct {
	Label       string  `json:"label"`
	Requests    int     `json:"requests"`
	SuccessRate float64 `json:"success_rate"`
	// Mean and P95 are over successful requests: a blocked route's fast
	// 403s would otherwise make a policy that keeps hitting it look quick.
	Mean  time.Duration `json:"mean_ok_ns"`
	P95   time.Duration `json:"p95_ok_ns"`
	Share []float64     `json:"share"` // per route, in the order of Routes
	// Wasted counts requests sent to a route inside one of its failure
	// windows; WastedBeforeOpen those of them sent before the route's
	// breaker opened in that window.
	Wasted           int `json:"wasted"`
	WastedBeforeOpen int `json:"wasted_before_open"`
	// Recovery is, over the failure windows that end before the run does,
	// the longest time from a window's end to its route's next success:
	// how long the policy took to notice a route had recovered. -1: a
	// route never got a success back; 0 with no windows.
	Recovery time.Duration `json:"recovery_ns"`
}

// RotationReport is the scenario's result.
type RotationReport struct {
	Duration time.Duration `json:"duration_ns"`
	Rate     float64       `json:"rate"`
	Routes   []string      `json:"routes"`
	Rows     []RotationRow `json:"rows"`
}

// Rotation runs the scenario.
func Rotation(ctx context.Context, o RotationOptions) (RotationReport, error) {
	if o.Duration == 0 {
		o.Duration = 180 * time.Second
	}
	if o.Rate == 0 {
		o.Rate = 20
	}
	if o.Variants == nil {
		o.Variants = DefaultRotation
	}
	if o.Duration < 3*time.Second || !(o.Rate > 0) {
		return RotationReport{}, fmt.Errorf("duration must be at least 3s and rate positive")
	}
	routes := o.Routes
	if routes == nil {
		routes = RotationRoutes(o.Duration)
	}
	if len(routes) == 0 {
		return RotationReport{}, fmt.Errorf("no routes")
	}
	routes = slices.Clone(routes)
	names := make([]string, len(routes))
	for i := range routes {
		if routes[i].Latency <= 0 {
			return RotationReport{}, fmt.Errorf("route %s: latency must be positive", serverName(routes[i], i))
		}
		routes[i].Workers = 1 << 20 // a route is a pipe, not a queue
		names[i] = serverName(routes[i], i)
	}
	w := Workload{
		Requests: int(math.Round(o.Duration.Seconds() * o.Rate)), Rate: o.Rate,
		Service: time.Second, LogNormal: 0.25, Seed: o.Seed,
	}
	classes := health.MustClassifier(health.RouteStatuses)
	watches := make([]*rotationWatch, len(o.Variants))
	pools := make([]*balance.Pool, len(o.Variants))
	runs := make([]run, len(o.Variants))
	for i, v := range o.Variants {
		var p balance.Policy
		switch v.Policy {
		case "round_robin":
			p = &balance.RoundRobin{}
		case "scored":
			sc, err := balance.NewScored(v.Gamma)
			if err != nil {
				return RotationReport{}, fmt.Errorf("%s: %w", v.Label, err)
			}
			p = sc
		default:
			return RotationReport{}, fmt.Errorf("%s: policy %q is not round_robin or scored", v.Label, v.Policy)
		}
		hc := health.Config{SuccessDecay: v.Decay, LatencyDecay: v.Decay}
		if !v.Breaker {
			hc.Threshold = math.MaxInt32 // never opens
		}
		wt := newRotationWatch(routes, o.Duration)
		watches[i] = wt
		runs[i] = run{label: v.Label, policy: p, health: hc, classes: classes, hooks: func(int) Hooks {
			return Hooks{
				Picked: wt.picked,
				Completed: func(now time.Duration, s int, ok bool, _ time.Duration) {
					wt.completed(now, s, ok, func() bool {
						return v.Breaker && pools[i] != nil &&
							pools[i].Snapshot().Get(names[s]).State.Breaker(pools[i].Clock().Now()) != health.Closed
					})
				},
			}
		}}
	}
	res, err := runAllWithPools(ctx, w, routes, o.Seed, runs, o.Progress, pools)
	if err != nil {
		return RotationReport{}, err
	}
	rep := RotationReport{Duration: o.Duration, Rate: o.Rate, Routes: names}
	for i, r := range res {
		rep.Rows = append(rep.Rows, RotationRow{
			Label: r.Policy, Requests: r.Requests,
			SuccessRate: 1 - float64(r.Failures)/float64(max(r.Requests, 1)),
			Mean:        r.OK.Mean(), P95: r.OK.Quantile(0.95), Share: r.Share,
			Wasted: watches[i].wasted, WastedBeforeOpen: watches[i].beforeOpen, Recovery: watches[i].recovery(),
		})
	}
	return rep, nil
}

// rotationWatch follows one run: requests sent into failure windows, and
// how soon each route got a success back after each window. Its hooks run
// on the run's goroutine only.
type rotationWatch struct {
	windows    [][]Window
	opened     [][]bool          // route, window: its breaker opened in it
	recovered  [][]time.Duration // route, window: end to next success; -1 not yet
	wasted     int
	beforeOpen int
	end        time.Duration
}

func newRotationWatch(routes []Server, end time.Duration) *rotationWatch {
	wt := &rotationWatch{end: end}
	for _, r := range routes {
		wt.windows = append(wt.windows, r.Windows)
		wt.opened = append(wt.opened, make([]bool, len(r.Windows)))
		rec := make([]time.Duration, len(r.Windows))
		for j := range rec {
			rec[j] = -1
		}
		wt.recovered = append(wt.recovered, rec)
	}
	return wt
}

// window returns the index of route s's window holding now, or -1.
func (wt *rotationWatch) window(s int, now time.Duration) int {
	for j, w := range wt.windows[s] {
		if now >= w.From && now < w.To {
			return j
		}
	}
	return -1
}

func (wt *rotationWatch) picked(now time.Duration, s int) {
	if j := wt.window(s, now); j >= 0 {
		wt.wasted++
		if !wt.opened[s][j] {
			wt.beforeOpen++
		}
	}
}

func (wt *rotationWatch) completed(now time.Duration, s int, ok bool, open func() bool) {
	if !ok {
		if j := wt.window(s, now); j >= 0 && !wt.opened[s][j] {
			wt.opened[s][j] = open()
		}
		return
	}
	for j, w := range wt.windows[s] {
		if now >= w.To && wt.recovered[s][j] < 0 {
			wt.recovered[s][j] = now - w.To
		}
	}
}

// recovery is the longest recovery over the windows that ended before the
// run did, -1 if one of them never saw a success after it.
func (wt *rotationWatch) recovery() time.Duration {
	var longest time.Duration
	for s := range wt.windows {
		for j, w := range wt.windows[s] {
			if w.To >= wt.end {
				continue
			}
			if wt.recovered[s][j] < 0 {
				return -1
			}
			longest = max(longest, wt.recovered[s][j])
		}
	}
	return longest
}
