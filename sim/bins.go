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
	// Theory is the asymptotic fullest bin: for m = n, ln n / ln ln n with
	// one choice and ln ln n / ln d + 1 with d; for m >> n, m/n plus
	// sqrt(2 (m/n) ln n) with one choice and ln ln n / ln d with d.
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

func binsTheory(n, m, d int) float64 {
	ln := math.Log(float64(n))
	lnln := math.Log(ln)
	avg := float64(m) / float64(n)
	if d == 1 {
		if m <= n {
			return ln / lnln
		}
		return avg + math.Sqrt(2*avg*ln)
	}
	return math.Ceil(avg) + lnln/math.Log(float64(d))
}
