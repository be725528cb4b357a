package sim

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
)

// PolicyFactory builds a policy by its config name (config.NewPolicy).
type PolicyFactory func(name string) (balance.Policy, error)

// Progress reports done out of total simulated requests, across every run
// of a scenario. It may be called from several goroutines.
type Progress func(done, total int64)

// run is one policy's run in a comparison.
type run struct {
	label   string
	policy  balance.Policy
	health  health.Config
	classes *health.Classifier
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
			err := pool.Configure(balance.Config{Policy: r.policy, Endpoints: Endpoints(servers), Health: r.health, Classifier: r.classes})
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", r.label, err)
				return
			}
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
			res, err := Run(ctx, w, servers, pool, clock, hooks)
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
