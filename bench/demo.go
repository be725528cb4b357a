package bench

import (
	"net/netip"
	"time"

	"github.com/rotor-lb/rotor/proxy/forward"
)

// Demo is the self-contained setup of `rotor demo`: a target site and four
// routes on loopback, with the behaviours article 001 describes.
type Demo struct {
	Target *Server
	// Routes are the routes to use, each allowed to reach loopback.
	Routes []forward.RouteOptions
	Specs  []RouteSpec
	close  []func()
}

// DemoSpecs are the demo's routes for a run of length d: "fast" refuses
// with 403 from 30% to 75% of the run (blocked, then let through again);
// "slow" never fails but adds 2.5 s; "flaky" fails with 503 in bursts of
// d/10 every d/3; "direct" reaches the target without a proxy.
func DemoSpecs(d time.Duration) []RouteSpec {
	return []RouteSpec{
		{Name: "fast", Latency: 30 * time.Millisecond, Jitter: 0.2, BlockFrom: d * 3 / 10, BlockFor: d * 45 / 100},
		{Name: "slow", Latency: 2500 * time.Millisecond, Jitter: 0.2},
		{Name: "flaky", Latency: 100 * time.Millisecond, Jitter: 0.3, BurstEvery: d / 3, BurstFor: d / 10},
	}
}

// TargetLatency is how long the demo's target takes to answer.
const TargetLatency = 150 * time.Millisecond

// StartDemo starts the target and the routes.
func StartDemo(d time.Duration, seed uint64) (*Demo, error) {
	dm := &Demo{Specs: DemoSpecs(d)}
	loopback := &forward.Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	t, err := StartTarget(TargetLatency)
	if err != nil {
		return nil, err
	}
	dm.Target = t
	dm.close = append(dm.close, t.Close)
	for i, spec := range dm.Specs {
		r, err := StartRoute(spec, seed+uint64(i))
		if err != nil {
			dm.Close()
			return nil, err
		}
		dm.close = append(dm.close, r.Close)
		dm.Routes = append(dm.Routes, forward.RouteOptions{Name: spec.Name, URL: r.URL, Guard: loopback})
	}
	dm.Routes = append(dm.Routes, forward.RouteOptions{Name: "direct", URL: "direct://", Guard: loopback})
	return dm, nil
}

// Close stops everything the demo started.
func (dm *Demo) Close() {
	for i := len(dm.close) - 1; i >= 0; i-- {
		dm.close[i]()
	}
}
