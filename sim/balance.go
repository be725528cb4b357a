package sim

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"
)

// DefaultPolicies are the policies the balance scenario compares.
var DefaultPolicies = []string{"round_robin", "random", "least_conn", "p2c", "weighted_round_robin", "peak_ewma", "scored", "sticky"}

// BalanceOptions set up the balance scenario: article 000's request
// balancing, every policy on the same request stream.
type BalanceOptions struct {
	Policies []string // nil means DefaultPolicies
	Factory  PolicyFactory
	Servers  int           // 0 means 5
	Workers  int           // per server; 0 means 1
	Service  time.Duration // mean; 0 means 10 ms
	// Load is the offered utilisation of the nominal capacity (all servers
	// at speed 1); 0 means 0.7.
	Load     float64
	Requests int // 0 means 200,000
	// Slow makes server i slower, for the whole run ({0: {Factor: 3}}) or
	// a window of it ({0: {Factor: 200, From: 15s, To: 45s}}).
	Slow map[int]Slowdown
	// Uneven makes request cost vary 10x (uniform in [1, 10]).
	Uneven bool
	// Hot is the share of requests from one user.
	Hot float64
	// Backups are servers (by index) that take requests only while no
	// other is available.
	Backups []int
	// Down makes server i fail every request (503, at once) from one time
	// to another: {0: {From: 10s, To: 20s}}.
	Down map[int]Window
	// Rules are the lifecycle's: retries, panic mode, slow start.
	Rules     Rules
	LogNormal float64
	Trace     []TraceEntry
	Seed      uint64
	Progress  Progress
}

// BalanceReport is the balance scenario's result.
type BalanceReport struct {
	Servers   int      `json:"servers"`
	Workers   int      `json:"workers"`
	Rate      float64  `json:"rate"`
	Condition string   `json:"condition"`
	Results   []Result `json:"results"`
}

func (o *BalanceOptions) defaults() {
	if o.Policies == nil {
		o.Policies = DefaultPolicies
	}
	if o.Servers == 0 {
		o.Servers = 5
	}
	if o.Workers == 0 {
		o.Workers = 1
	}
	if o.Service == 0 {
		o.Service = 10 * time.Millisecond
	}
	if o.Load == 0 {
		o.Load = 0.7
	}
	if o.Requests == 0 {
		o.Requests = 200000
	}
}

// Balance runs the balance scenario.
func Balance(ctx context.Context, o BalanceOptions) (BalanceReport, error) {
	o.defaults()
	if o.Factory == nil {
		return BalanceReport{}, fmt.Errorf("no policy factory")
	}
	if o.Servers < 1 || o.Workers < 1 || o.Load <= 0 {
		return BalanceReport{}, fmt.Errorf("servers, workers and load must be positive")
	}
	servers := make([]Server, o.Servers)
	for i := range servers {
		servers[i] = Server{Workers: o.Workers, Speed: 1}
	}
	cond := "uniform"
	for _, i := range sortedKeys(o.Slow) {
		sd := o.Slow[i]
		if i < 0 || i >= o.Servers || !(sd.Factor > 0) || math.IsInf(sd.Factor, 0) || sd.From < 0 || sd.To != 0 && sd.To <= sd.From {
			return BalanceReport{}, fmt.Errorf("slow: server %d x%v: want a server in 0..%d, a factor above 0 and a window that ends after it starts", i, sd.Factor, o.Servers-1)
		}
		servers[i].Slowdowns = append(servers[i].Slowdowns, sd)
		c := fmt.Sprintf("server %d %gx slower", i, sd.Factor)
		if sd.From > 0 || sd.To > 0 {
			c += fmt.Sprintf(" from %v", sd.From)
			if sd.To > 0 {
				c += fmt.Sprintf(" to %v", sd.To)
			}
		}
		cond = join(cond, c)
	}
	if err := o.Rules.Validate(); err != nil {
		return BalanceReport{}, err
	}
	for _, i := range o.Backups {
		if i < 0 || i >= o.Servers {
			return BalanceReport{}, fmt.Errorf("backup: server %d: want a server in 0..%d", i, o.Servers-1)
		}
		servers[i].Backup = true
	}
	if len(o.Backups) > 0 {
		cond = join(cond, fmt.Sprintf("%d backup", len(o.Backups)))
	}
	for _, i := range sortedKeys(o.Down) {
		w := o.Down[i]
		if i < 0 || i >= o.Servers || w.To <= w.From {
			return BalanceReport{}, fmt.Errorf("down: server %d %v-%v: want a server in 0..%d and a window that ends after it starts", i, w.From, w.To, o.Servers-1)
		}
		servers[i].Windows = append(servers[i].Windows, w)
		cond = join(cond, fmt.Sprintf("server %d down %v-%v", i, w.From, w.To))
	}
	if o.Rules.Attempts > 1 {
		cond = join(cond, fmt.Sprintf("%d attempts", o.Rules.Attempts))
	}
	meanCost := 1.0
	w := Workload{Requests: o.Requests, Service: o.Service, LogNormal: o.LogNormal, HotShare: o.Hot, Trace: o.Trace, Seed: o.Seed}
	if o.Uneven {
		w.CostSpread, meanCost = 10, 5.5
		cond = join(cond, "cost varies 10x")
	}
	if o.Hot > 0 {
		cond = join(cond, fmt.Sprintf("one user sends %.0f%%", 100*o.Hot))
	}
	if o.Trace != nil {
		cond = join(cond, "trace")
	}
	capacity := float64(o.Servers*o.Workers) / (o.Service.Seconds() * meanCost)
	w.Rate = o.Load * capacity
	runs := make([]run, len(o.Policies))
	for i, name := range o.Policies {
		p, err := o.Factory(name)
		if err != nil {
			return BalanceReport{}, fmt.Errorf("policy %s: %w", name, err)
		}
		runs[i] = run{label: name, policy: p, rules: o.Rules}
	}
	res, err := runAll(ctx, w, servers, o.Seed, runs, o.Progress)
	if err != nil {
		return BalanceReport{}, err
	}
	return BalanceReport{Servers: o.Servers, Workers: o.Workers, Rate: w.Rate, Condition: cond, Results: res}, nil
}

// sortedKeys returns m's keys in order, so that the condition line and
// every run are the same from one invocation to the next.
func sortedKeys[V any](m map[int]V) []int {
	return slices.Sorted(maps.Keys(m))
}

func join(a, b string) string {
	if a == "uniform" {
		return b
	}
	return a + ", " + b
}
