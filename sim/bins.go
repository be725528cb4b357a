package sim

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/rotor-lb/rotor/balance"
)

// BinsOptions set up the balls-into-bins scenario: m balls thrown into n
// bins, each ball into the least full of d bins drawn at random
// (Mitzenmacher 1996), through balance.P2C, the policy the proxies run.
type BinsOptions struct {
	Bins    int   // n; 0 means 1000
	Balls   int   // m; 0 means n
	Choices []int // d values; nil means 1, 2, 3
	Trials  int   // 0 means 10
	Seed    uint64
}

// BinsRow is one d's result.
type BinsRow struct {
	Choices     int     `json:"choices"`
	MeanFullest float64 `json:"mean_fullest"`
	MinFullest  int64   `json:"min_fullest"`
	MaxFullest  int64   `json:"max_fullest"`
	// Theory is the fullest bin the fluid limit predicts for these n, m
	// and d (Mitzenmacher 1996, Azar et al. 1994): the highest load i that
	// at least one bin is expected to reach, n x s_i >= 1, where s_i, the
	// share of bins holding i balls or more, follows ds_i/dt = s_(i-1)^d -
	// s_i^d while the m balls are thrown. With one choice that is the
	// Poisson tail; with d >= 2 it falls by a power of d each level, the
	// ln ln n / ln d of the asymptotic bound, without its unknown constant.
	Theory float64 `json:"theory"`
}

// BinsReport is the scenario's result.
type BinsReport struct {
	Bins   int       `json:"bins"`
	Balls  int       `json:"balls"`
	Trials int       `json:"trials"`
	Rows   []BinsRow `json:"rows"`
}

// Bins runs the scenario.
func Bins(ctx context.Context, o BinsOptions) (BinsReport, error) {
	if o.Bins == 0 {
		o.Bins = 1000
	}
	if o.Balls == 0 {
		o.Balls = o.Bins
	}
	if o.Choices == nil {
		o.Choices = []int{1, 2, 3}
	}
	if o.Trials == 0 {
		o.Trials = 10
	}
	if o.Bins < 2 || o.Balls < 1 || o.Trials < 1 {
		return BinsReport{}, fmt.Errorf("bins must be at least 2, balls and trials at least 1")
	}
	rep := BinsReport{Bins: o.Bins, Balls: o.Balls, Trials: o.Trials}
	eps := make([]balance.EndpointConfig, o.Bins)
	for i := range eps {
		eps[i] = balance.EndpointConfig{Name: "b" + strconv.Itoa(i)}
	}
	for _, d := range o.Choices {
		policy, err := balance.NewP2C(d)
		if err != nil {
			return BinsReport{}, fmt.Errorf("choices: %w", err)
		}
		row := BinsRow{Choices: d, MinFullest: math.MaxInt64, Theory: binsTheory(o.Bins, o.Balls, d)}
		var sum float64
		for trial := range o.Trials {
			if err := ctx.Err(); err != nil {
				return BinsReport{}, err
			}
			pool := balance.NewPool("bins", balance.Options{Clock: &Clock{}, Rand: balance.NewSeededRand(o.Seed + uint64(trial))})
			if err := pool.Configure(balance.Config{Policy: policy, Endpoints: eps}); err != nil {
				return BinsReport{}, err
			}
			for range o.Balls {
				// The ball stays: its in-flight count is the bin's load.
				if _, err := pool.Pick(balance.Request{}); err != nil {
					return BinsReport{}, err
				}
			}
			var fullest int64
			for _, ep := range pool.Snapshot().Endpoints() {
				fullest = max(fullest, ep.State.Inflight())
			}
			sum += float64(fullest)
			row.MinFullest = min(row.MinFullest, fullest)
			row.MaxFullest = max(row.MaxFullest, fullest)
		}
		row.MeanFullest = sum / float64(o.Trials)
		rep.Rows = append(rep.Rows, row)
	}
	return rep, nil
}

// binsTheory integrates the fluid limit of d-choice balls into bins and
// returns the highest load at least one of n bins is expected to reach
// after m balls.
func binsTheory(n, m, d int) float64 {
	T := float64(m) / float64(n) // balls per bin: the time the limit runs
	levels := int(T) + 64
	s := make([]float64, levels+1) // s[i]: share of bins with load >= i
	s[0] = 1
	steps := max(1000, int(T*1000))
	dt := T / float64(steps)
	pow := func(x float64) float64 { return math.Pow(x, float64(d)) }
	next := make([]float64, levels+1)
	for range steps {
		next[0] = 1
		for i := 1; i <= levels; i++ {
			next[i] = s[i] + dt*(pow(s[i-1])-pow(s[i]))
		}
		s, next = next, s
	}
	top := 0
	for i := 1; i <= levels; i++ {
		if float64(n)*s[i] >= 1 {
			top = i
		}
	}
	return float64(top)
}
