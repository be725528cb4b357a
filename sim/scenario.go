package sim

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/proxy"
)

// PolicyFactory builds a policy by its config name (config.NewPolicy).
type PolicyFactory func(name string) (balance.Policy, error)

// Progress reports done out of total simulated requests, across every run
// of a scenario. It may be called from several goroutines.
type Progress func(done, total int64)

// Rules are what a request's lifecycle does besides the policy's pick,
// as rotor serve's pools have them: retries on another server within a
// budget, panic mode and slow start. The zero value is one try and
// neither.
type Rules struct {
	// Attempts is tries in all (0 means 1); a failed try (an error or a
	// failing status) is tried again on another server.
	Attempts int
	// Budget bounds retries to this share of requests (0 means 0.2).
	Budget float64
	// PanicThreshold and SlowStart are the pool's (balance.Config).
	PanicThreshold float64
	SlowStart      time.Duration
}

// Validate checks the rules.
func (r Rules) Validate() error {
	switch {
	case r.Attempts < 0 || r.Attempts > 10:
		return fmt.Errorf("attempts: must be between 1 and 10 (got %d)", r.Attempts)
	case r.Budget < 0 || r.Budget > 1:
		return fmt.Errorf("budget: must be between 0 and 1 (got %v)", r.Budget)
	case r.PanicThreshold < 0 || r.PanicThreshold > 1:
		return fmt.Errorf("panic: must be between 0 and 1 (got %v)", r.PanicThreshold)
	case r.SlowStart < 0:
		return fmt.Errorf("slow-start: must be zero or positive (got %v)", r.SlowStart)
	}
	return nil
}

// Lifecycle returns the proxies' lifecycle over pool's published
// snapshot, on clock, with these rules' retries: what Run sends requests
// through. Failed tries are tried again on a 5xx or an error.
func (r Rules) Lifecycle(pool *balance.Pool, clock *Clock) *proxy.Pool {
	budget := r.Budget
	if budget == 0 {
		budget = 0.2
	}
	return &proxy.Pool{Name: pool.Name(), Snapshot: pool.Snapshot(), Attempts: r.Attempts,
		RetryStatuses: retry5xx, Budget: proxy.NewBudget(budget), Clock: clock}
}

var retry5xx = health.MustClassifier("5xx")

// run is one policy's run in a comparison.
type run struct {
	label   string
	policy  balance.Policy
	health  health.Config
	classes *health.Classifier
	rules   Rules
	hooks   func(i int) Hooks
}

// runAll runs each of runs on its own pool and clock, over the same
// workload, in parallel on up to GOMAXPROCS goroutines, and returns the
// results in order.
func runAll(ctx context.Context, w Workload, servers []Server, seed uint64, runs []run, progress Progress) ([]Result, error) {
	return runAllWithPools(ctx, w, servers, seed, runs, progress, nil)
}

// runAllWithPools is runAll that also stores each run's pool in pools[i]
// (when pools is not nil) before the run starts, for hooks that look at it.
func runAllWithPools(ctx context.Context, w Workload, servers []Server, seed uint64, runs []run, progress Progress, pools []*balance.Pool) ([]Result, error) {
	results := make([]Result, len(runs))
	errs := make([]error, len(runs))
	total := int64(w.Requests) * int64(len(runs))
	if w.Trace != nil {
		total = int64(len(w.Trace)) * int64(len(runs))
	}
	var done atomic.Int64
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			clock := &Clock{}
			pool := balance.NewPool(r.label, balance.Options{Clock: clock, Rand: balance.NewSeededRand(seed + 1)})
			err := pool.Configure(balance.Config{Policy: r.policy, Endpoints: Endpoints(servers), Health: r.health, Classifier: r.classes,
				PanicThreshold: r.rules.PanicThreshold, SlowStart: r.rules.SlowStart})
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", r.label, err)
				return
			}
			lifecycle := r.rules.Lifecycle(pool, clock)
			if pools != nil {
				pools[i] = pool
			}
			var hooks Hooks
			if r.hooks != nil {
				hooks = r.hooks(i)
			}
			last := 0
			hooks.Progress = func(n int) {
				if progress != nil {
					progress(done.Add(int64(n-last)), total)
				}
				last = n
			}
			res, err := Run(ctx, w, servers, lifecycle, clock, hooks)
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", r.label, err)
				return
			}
			res.Policy = r.label
			results[i] = res
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return results, nil
}
