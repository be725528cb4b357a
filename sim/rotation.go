package sim

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
)

// RotationOptions set up article 001's case on simulated routes: a fast
// route that gets blocked for a while, a slow route that never fails, and a
// flaky route that fails in bursts and recovers. Round robin, the control,
// against the scored policy with and without the breaker, at several
// gammas and decays.
type RotationOptions struct {
	Duration time.Duration // 0 means 180 s
	Rate     float64       // requests per second; 0 means 20
	Seed     uint64
	Progress Progress
	// Variants overrides the policies compared; nil means DefaultRotation.
	Variants []RotationVariant
}

// RotationVariant is one policy setting in the rotation scenario.
type RotationVariant struct {
	Label   string
	Policy  string // "round_robin" or "scored"
	Gamma   float64
	Decay   float64 // success and latency decays
	Breaker bool
}

// DefaultRotation are the variants the scenario compares.
var DefaultRotation = []RotationVariant{
	{Label: "round_robin (control)", Policy: "round_robin"},
	{Label: "round_robin + breaker", Policy: "round_robin", Breaker: true},
	{Label: "scored γ=1 d=0.3 no breaker", Policy: "scored", Gamma: 1, Decay: 0.3},
	{Label: "scored γ=1 d=0.3 + breaker", Policy: "scored", Gamma: 1, Decay: 0.3, Breaker: true},
	{Label: "scored γ=2 d=0.3 + breaker", Policy: "scored", Gamma: 2, Decay: 0.3, Breaker: true},
	{Label: "scored γ=4 d=0.3 + breaker", Policy: "scored", Gamma: 4, Decay: 0.3, Breaker: true},
	{Label: "scored γ=1 d=0.1 + breaker", Policy: "scored", Gamma: 1, Decay: 0.1, Breaker: true},
	{Label: "scored γ=1 d=0.6 + breaker", Policy: "scored", Gamma: 1, Decay: 0.6, Breaker: true},
}

// RotationRoutes are the scenario's routes for a run of the given length:
// "fast" (200 ms) is blocked with 403s from 1/3 to 2/3 of the run; "slow"
// (1.5 s) never fails; "flaky" (400 ms) answers 503 for 10 s in every 60.
func RotationRoutes(d time.Duration) []Server {
	var bursts []Window
	for t := 20 * time.Second; t < d; t += 60 * time.Second {
		bursts = append(bursts, Window{From: t, To: t + 10*time.Second, Status: 503, Latency: 100 * time.Millisecond})
	}
	return []Server{
		{Name: "fast", Workers: 1 << 20, Latency: 200 * time.Millisecond,
			Windows: []Window{{From: d / 3, To: 2 * d / 3, Status: 403, Latency: 50 * time.Millisecond}}},
		{Name: "slow", Workers: 1 << 20, Latency: 1500 * time.Millisecond},
		{Name: "flaky", Workers: 1 << 20, Latency: 400 * time.Millisecond, Windows: bursts},
	}
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
	Share []float64     `json:"share"` // per route: fast, slow, flaky
	// Wasted counts requests sent to the fast route while it was blocked;
	// WastedBeforeOpen those of them sent before its breaker first opened.
	Wasted           int `json:"wasted"`
	WastedBeforeOpen int `json:"wasted_before_open"`
	// Recovery is how long after the fast route's block ended its first
	// success came: how long the policy took to notice. -1: never.
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
	routes := RotationRoutes(o.Duration)
	block := routes[0].Windows[0]
	w := Workload{
		Requests: int(math.Round(o.Duration.Seconds() * o.Rate)), Rate: o.Rate,
		Service: time.Second, LogNormal: 0.25, Seed: o.Seed,
	}
	classes := health.MustClassifier(health.RouteStatuses)
	type watch struct {
		wasted, beforeOpen int
		opened             bool
		recovered          time.Duration
	}
	watches := make([]*watch, len(o.Variants))
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
		wt := &watch{recovered: -1}
		watches[i] = wt
		runs[i] = run{label: v.Label, policy: p, health: hc, classes: classes, hooks: func(int) Hooks {
			return Hooks{
				Picked: func(now time.Duration, s int) {
					if s == 0 && now >= block.From && now < block.To {
						wt.wasted++
						if !wt.opened {
							wt.beforeOpen++
						}
					}
				},
				Completed: func(now time.Duration, s int, ok bool, _ time.Duration) {
					if s != 0 {
						return
					}
					if !ok && v.Breaker && now >= block.From && !wt.opened && pools[i] != nil {
						wt.opened = pools[i].Snapshot().Get("fast").State.Breaker(pools[i].Clock().Now()) != health.Closed
					}
					if ok && now >= block.To && wt.recovered < 0 {
						wt.recovered = now - block.To
					}
				},
			}
		}}
	}
	res, err := runAllWithPools(ctx, w, routes, o.Seed, runs, o.Progress, pools)
	if err != nil {
		return RotationReport{}, err
	}
	rep := RotationReport{Duration: o.Duration, Rate: o.Rate, Routes: []string{"fast", "slow", "flaky"}}
	for i, r := range res {
		rep.Rows = append(rep.Rows, RotationRow{
			Label: r.Policy, Requests: r.Requests,
			SuccessRate: 1 - float64(r.Failures)/float64(max(r.Requests, 1)),
			Mean:        r.OK.Mean(), P95: r.OK.Quantile(0.95), Share: r.Share,
			Wasted: watches[i].wasted, WastedBeforeOpen: watches[i].beforeOpen, Recovery: watches[i].recovered,
		})
	}
	return rep, nil
}
