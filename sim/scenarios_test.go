package sim_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/config"
	"github.com/rotor-lb/rotor/placement"
	"github.com/rotor-lb/rotor/sim"
)

func runBalance(t *testing.T, o sim.BalanceOptions) map[string]sim.Result {
	t.Helper()
	o.Factory = factory
	if o.Requests == 0 {
		o.Requests = 100000
	}
	rep, err := sim.Balance(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]sim.Result{}
	for _, r := range rep.Results {
		out[r.Policy] = r
	}
	return out
}

// Same seed, same numbers; another seed, other numbers.
func TestSeedReproducible(t *testing.T) {
	opts := sim.BalanceOptions{Requests: 20000, Seed: 7, Slow: map[int]sim.Slowdown{0: {Factor: 3}}}
	a, b := runBalance(t, opts), runBalance(t, opts)
	ignore := cmpopts.IgnoreFields(sim.Result{}, "Wall", "Latency", "OK")
	if diff := cmp.Diff(a, b, ignore); diff != "" {
		t.Fatalf("two runs with seed 7 differ (-first +second):\n%s", diff)
	}
	opts.Seed = 8
	c := runBalance(t, opts)
	if cmp.Equal(a, c, ignore) {
		t.Fatal("seeds 7 and 8 gave the same numbers")
	}
}

// Article 000's point: when one server is 3x slower, load-aware policies
// beat blind ones.
func TestSlowServerLoadAwareWins(t *testing.T) {
	r := runBalance(t, sim.BalanceOptions{Slow: map[int]sim.Slowdown{0: {Factor: 3}}, Seed: 1})
	rr, p2c, lc, peak := r["round_robin"], r["p2c"], r["least_conn"], r["peak_ewma"]
	if !(p2c.P99 < rr.P99/10 && lc.P99 < rr.P99/10 && peak.P99 < rr.P99/10) {
		t.Fatalf("p99 under --slow 0=3: round_robin %v, p2c %v, least_conn %v, peak_ewma %v; want the load-aware ones 10x lower",
			rr.P99, p2c.P99, lc.P99, peak.P99)
	}
	if p2c.Share[0] > 0.15 || rr.Share[0] < 0.19 {
		t.Fatalf("share of the slow server: p2c %.3f (want it avoided), round_robin %.3f (blind: 1/5)", p2c.Share[0], rr.Share[0])
	}
}

func TestUnevenWorkLoadAwareWins(t *testing.T) {
	r := runBalance(t, sim.BalanceOptions{Uneven: true, Seed: 1})
	rr, lc, p2c := r["round_robin"], r["least_conn"], r["p2c"]
	if !(lc.Mean < rr.Mean && p2c.Mean < rr.Mean && lc.P99 < rr.P99 && p2c.P99 < rr.P99) {
		t.Fatalf("uneven work: round_robin mean %v p99 %v; least_conn %v %v; p2c %v %v; want load-aware lower",
			rr.Mean, rr.P99, lc.Mean, lc.P99, p2c.Mean, p2c.P99)
	}
}

// Sticky routing by user makes one hot server when one user sends 45%.
func TestHotUserStickyMakesAHotServer(t *testing.T) {
	r := runBalance(t, sim.BalanceOptions{Hot: 0.45, Seed: 1})
	st, p2c := r["sticky"], r["p2c"]
	top := 0.0
	for _, s := range st.Share {
		top = max(top, s)
	}
	if top < 0.44 || st.P99 < 20*p2c.P99 || st.MaxQueue < 10*p2c.MaxQueue {
		t.Fatalf("sticky: top share %.3f, p99 %v, max queue %d; p2c p99 %v, max queue %d; want one hot server",
			top, st.P99, st.MaxQueue, p2c.P99, p2c.MaxQueue)
	}
}

func TestBinsTwoChoicesBeatOne(t *testing.T) {
	rep, err := sim.Bins(context.Background(), sim.BinsOptions{Bins: 1000, Choices: []int{1, 2, 3}, Trials: 5, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	one, two, three := rep.Rows[0], rep.Rows[1], rep.Rows[2]
	if !(two.MeanFullest < one.MeanFullest-1.5 && three.MeanFullest <= two.MeanFullest) {
		t.Fatalf("fullest bin: one %.2f, two %.2f, three %.2f; want two well below one", one.MeanFullest, two.MeanFullest, three.MeanFullest)
	}
	heavy, err := sim.Bins(context.Background(), sim.BinsOptions{Bins: 500, Balls: 50000, Choices: []int{1, 2}, Trials: 2, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	// m >> n: one choice sits ~sqrt(2 (m/n) ln n) above the mean, two
	// choices within a few of it.
	if heavy.Rows[1].MaxFullest > 104 || heavy.Rows[0].MeanFullest < 115 {
		t.Fatalf("50000 into 500: one %.1f, two %d; want two within 4 of 100, one above 115", heavy.Rows[0].MeanFullest, heavy.Rows[1].MaxFullest)
	}
}

func TestKeysMissStorm(t *testing.T) {
	rep, err := sim.Keys(context.Background(), sim.KeysOptions{
		Factory: func(algo string, nodes []placement.Node) (placement.Placer, error) {
			return config.NewPlacer(algo, nodes, config.PlacerParams{})
		},
		Keys: 20000, Rate: 2000, Seconds: 30, Seed: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]sim.KeysRow{}
	for _, r := range rep.Rows {
		rows[r.Change+"/"+r.Algo] = r
	}
	// A replacement is a removal and an addition: the leaving node's keys
	// go to their runners-up and the new node takes a share from everyone,
	// about twice the least possible (which would hand the leaver's keys
	// straight to the newcomer).
	slack := map[string]float64{"add": 1.6, "remove": 1.6, "replace": 2.2}
	modnAtLeast := map[string]float64{"add": 0.8, "remove": 0.8, "replace": 0.4}
	for _, change := range []string{"add", "remove", "replace"} {
		modn := rows[change+"/modn"]
		for _, algo := range []string{"ring", "rendezvous", "maglev"} {
			r := rows[change+"/"+algo]
			if r.Moved > slack[change]*r.Ideal || r.MissesPerSecond[0]*2 > modn.MissesPerSecond[0] {
				t.Errorf("%s %s: moved %.3f (ideal %.3f), first-second misses %d vs modn %d", change, algo, r.Moved, r.Ideal, r.MissesPerSecond[0], modn.MissesPerSecond[0])
			}
		}
		if modn.Moved < modnAtLeast[change] {
			t.Errorf("%s: modn moved %.3f, want most keys", change, modn.Moved)
		}
		// Misses fade as moved keys are fetched again.
		ring := rows[change+"/ring"]
		if ring.MissesPerSecond[len(ring.MissesPerSecond)-1] >= ring.MissesPerSecond[0]/4 {
			t.Errorf("%s ring: misses did not fade: %v", change, ring.MissesPerSecond)
		}
	}
	// jump cannot lose a middle node without renumbering.
	if j := rows["remove/jump"]; j.Moved < 3*j.Ideal {
		t.Errorf("jump removing a middle node moved %.3f, want far more than the ideal %.3f", j.Moved, j.Ideal)
	}
	if j := rows["add/jump"]; j.Moved > 1.1*j.Ideal {
		t.Errorf("jump adding a node moved %.3f, want about the ideal %.3f", j.Moved, j.Ideal)
	}
}

// Article 001's case: the scored policy with its breaker keeps more
// requests succeeding than round robin, wastes about the threshold on a
// blocked route, and notices its recovery.
func TestRotation(t *testing.T) {
	rep, err := sim.Rotation(context.Background(), sim.RotationOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]sim.RotationRow{}
	for _, r := range rep.Rows {
		rows[r.Label] = r
	}
	rr := rows["round_robin (control)"]
	sc := rows["scored γ=2 (default)"]
	if !(sc.SuccessRate > rr.SuccessRate+0.1 && sc.Mean < rr.Mean*65/100) {
		t.Fatalf("success: scored %.3f, round robin %.3f; mean latency scored %v, round robin %v", sc.SuccessRate, rr.SuccessRate, sc.Mean, rr.Mean)
	}
	// Each outage (the block and three bursts) lets through the threshold
	// of 3 and what was already on its way.
	if sc.WastedBeforeOpen > 4*5 || rr.Wasted < 600 {
		t.Fatalf("wasted before the breaker opened: %d (want <= 20); round robin wasted %d", sc.WastedBeforeOpen, rr.Wasted)
	}
	// The breaker's cooldown is 15 s: a route is back within it and a
	// probe, and the fading latency keeps a recovered route in use.
	if sc.Recovery < 0 || sc.Recovery.Seconds() > 16 {
		t.Fatalf("scored noticed the slowest recovery after %v, want within the 15 s cooldown and a probe", sc.Recovery)
	}
}

// On millisecond backends scored weighs latency relative to the best and
// counts requests in flight, so it balances as well as the load-aware
// policies: uniform servers, one three times slower, uneven work. (Its
// weight used to be 1/(1 + seconds): as blind as random on uniform
// servers, and a p99 of 1.97 s with a slow one.)
func TestScoredOnMillisecondBackends(t *testing.T) {
	for name, o := range map[string]sim.BalanceOptions{
		"uniform":       {},
		"server 0 slow": {Slow: map[int]sim.Slowdown{0: {Factor: 3}}},
		"uneven work":   {Uneven: true},
	} {
		o.Policies = []string{"random", "p2c", "scored"}
		r := runBalance(t, o)
		if sc, p2c, rnd := r["scored"].P99, r["p2c"].P99, r["random"].P99; sc > p2c*13/10 || sc > rnd {
			t.Errorf("%s: scored p99 %v, p2c %v, random %v: want scored within 1.3x of p2c", name, sc, p2c, rnd)
		}
	}
}

// Article 001's benchmark in the simulator: 20 requests over a slow
// route (2.65 s) and a direct one (150 ms). At its defaults the scored
// policy's mean latency is within 0.25 of round robin's over seeds (the
// article: 0.18); gamma 1 is not.
func TestRotationArticleTwoRoutes(t *testing.T) {
	routes := []sim.Server{{Name: "slow", Latency: 2650 * time.Millisecond}, {Name: "direct", Latency: 150 * time.Millisecond}}
	variants := []sim.RotationVariant{
		{Label: "rr", Policy: "round_robin"},
		{Label: "scored", Policy: "scored", Gamma: balance.DefaultGamma, Breaker: true},
		{Label: "gamma 1", Policy: "scored", Gamma: 1, Breaker: true},
	}
	var rr, sc, g1 time.Duration
	for seed := uint64(1); seed <= 8; seed++ {
		rep, err := sim.Rotation(context.Background(), sim.RotationOptions{Duration: 4 * time.Second, Rate: 5, Seed: seed, Routes: routes, Variants: variants})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Rows[0].Requests != 20 {
			t.Fatalf("%d requests, want 20", rep.Rows[0].Requests)
		}
		rr, sc, g1 = rr+rep.Rows[0].Mean, sc+rep.Rows[1].Mean, g1+rep.Rows[2].Mean
		if r := rep.Rows[1].Mean.Seconds() / rep.Rows[0].Mean.Seconds(); r > 0.35 {
			t.Errorf("seed %d: scored/round robin %.2f, want at most 0.35 on any seed", seed, r)
		}
	}
	if r := sc.Seconds() / rr.Seconds(); r > 0.25 {
		t.Errorf("scored/round robin mean latency over 8 seeds %.3f, want at most 0.25", r)
	}
	if r := g1.Seconds() / rr.Seconds(); r < sc.Seconds()/rr.Seconds() {
		t.Errorf("gamma 1 (%.3f) did better than the default", r)
	}
}

func TestTraceReplay(t *testing.T) {
	trace, err := sim.ParseTrace(strings.NewReader("# time,key,cost\n0,a,1\n0.01,b,\n0.02,a,3\n\n0.5,c,1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(trace) != 4 || trace[2].Cost != 3 || trace[1].Cost != 1 || trace[3].Key != "c" {
		t.Fatalf("parsed %+v", trace)
	}
	r := runBalance(t, sim.BalanceOptions{Trace: trace, Policies: []string{"round_robin"}})
	if got := r["round_robin"].Requests; got != 4 {
		t.Fatalf("replayed %d requests, want 4", got)
	}
	for _, bad := range []struct{ in, want string }{
		{"0,a\n", "line 1: want time,key,cost"},
		{"x,a,1\n", "line 1: time"},
		{"1,a,1\n0.5,b,1\n", "line 2: time 500ms goes back"},
		{"0,a,-1\n", "line 1: cost"},
		{"# nothing\n", "no requests"},
	} {
		if _, err := sim.ParseTrace(strings.NewReader(bad.in)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: err %v, want %q", bad.in, err, bad.want)
		}
	}
}

func FuzzParseTrace(f *testing.F) {
	f.Add("0,a,1\n0.5,b,2\n")
	f.Add("1e300,a,1")
	f.Add("NaN,a,1")
	f.Add("0,a,Inf")
	f.Fuzz(func(t *testing.T, in string) {
		trace, err := sim.ParseTrace(strings.NewReader(in))
		if err != nil {
			return
		}
		for i, e := range trace {
			if e.At < 0 || !(e.Cost > 0) || i > 0 && e.At < trace[i-1].At {
				t.Fatalf("accepted a bad entry %+v from %q", e, in)
			}
		}
	})
}

func TestHistogramQuantiles(t *testing.T) {
	var h sim.Histogram
	for i := 1; i <= 100000; i++ {
		h.Record(timeMicros(i))
	}
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := q * 100000
		got := float64(h.Quantile(q)) / 1000
		if got < want*0.98 || got > want*1.02 {
			t.Errorf("q%.3f: %v µs, want %v within 2%%", q, got, want)
		}
	}
	if h.Mean() != timeMicros(50000)+500 || h.Count() != 100000 {
		t.Errorf("mean %v count %d", h.Mean(), h.Count())
	}
}
