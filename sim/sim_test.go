package sim_test

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/config"
	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/sim"
)

func factory(name string) (balance.Policy, error) {
	return config.NewPolicy(name, config.PolicyParams{})
}

func runOne(t *testing.T, w sim.Workload, servers []sim.Server, policy string) sim.Result {
	t.Helper()
	return runWith(t, w, servers, policy, health.Config{}, sim.Rules{})
}

// The simulator checked against queueing theory: an M/M/1 queue with
// arrival rate lambda and service rate mu has mean time in system
// 1/(mu - lambda); M/M/c's is given by Erlang's C formula.
func TestQueueingTheory(t *testing.T) {
	for _, tc := range []struct {
		name    string
		workers int
		lambda  float64
		mu      float64
	}{
		{"M/M/1 rho=0.5", 1, 50, 100},
		{"M/M/1 rho=0.8", 1, 80, 100},
		{"M/M/4 rho=0.75", 4, 300, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := sim.Workload{Requests: 1_000_000, Rate: tc.lambda, Service: time.Duration(1e9 / tc.mu), Seed: 42}
			res := runOne(t, w, []sim.Server{{Workers: tc.workers}}, "round_robin")
			want := mmcMean(tc.workers, tc.lambda, tc.mu)
			got := res.Mean.Seconds()
			if math.Abs(got-want)/want > 0.03 {
				t.Fatalf("mean time in system %.5fs, theory %.5fs (off by %.1f%%)", got, want, 100*math.Abs(got-want)/want)
			}
			if res.Requests != w.Requests || res.Failures != 0 {
				t.Fatalf("requests %d failures %d", res.Requests, res.Failures)
			}
		})
	}
}

// mmcMean is the mean time in system of an M/M/c queue (Erlang C).
func mmcMean(c int, lambda, mu float64) float64 {
	a := lambda / mu
	rho := a / float64(c)
	sum, term := 0.0, 1.0
	for k := range c {
		if k > 0 {
			term *= a / float64(k)
		}
		sum += term
	}
	last := term * a / float64(c) / (1 - rho)
	pWait := last / (sum + last)
	return pWait/(float64(c)*mu-lambda) + 1/mu
}

func timeMicros(n int) time.Duration { return time.Duration(n) * time.Microsecond }

// runWith runs policy over servers with the health tuning and lifecycle
// rules given.
func runWith(t *testing.T, w sim.Workload, servers []sim.Server, policy string, hc health.Config, rules sim.Rules) sim.Result {
	t.Helper()
	clock := &sim.Clock{}
	pool := balance.NewPool("t", balance.Options{Clock: clock, Rand: balance.NewSeededRand(1)})
	p, err := factory(policy)
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.Configure(balance.Config{Policy: p, Endpoints: sim.Endpoints(servers), Health: hc,
		PanicThreshold: rules.PanicThreshold, SlowStart: rules.SlowStart}); err != nil {
		t.Fatal(err)
	}
	res, err := sim.Run(context.Background(), w, servers, rules.Lifecycle(pool, clock), clock, sim.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// runRules runs under lifecycle rules with a breaker that never opens:
// what retries hide is not hidden by it.
func runRules(t *testing.T, w sim.Workload, servers []sim.Server, policy string, rules sim.Rules) sim.Result {
	t.Helper()
	return runWith(t, w, servers, policy, health.Config{Threshold: 1 << 30}, rules)
}

// Retries run on virtual time through the proxies' own lifecycle: with
// every server failing 10% of requests, one retry within a budget of 0.2
// leaves about 10% x 10% = 1% failed, and the retries stay in the budget.
func TestSimRetries(t *testing.T) {
	w := sim.Workload{Requests: 100_000, Rate: 200, Service: 10 * time.Millisecond, Seed: 7}
	servers := []sim.Server{{ErrorRate: 0.1, Workers: 4}, {ErrorRate: 0.1, Workers: 4}, {ErrorRate: 0.1, Workers: 4}}
	once := runRules(t, w, servers, "round_robin", sim.Rules{})
	twice := runRules(t, w, servers, "round_robin", sim.Rules{Attempts: 2, Budget: 0.2})
	if f := float64(once.Failures) / float64(once.Requests); math.Abs(f-0.1) > 0.005 || once.Retries != 0 {
		t.Fatalf("one try: %.4f failed, %d retries; want 0.1 and none", f, once.Retries)
	}
	if f := float64(twice.Failures) / float64(twice.Requests); math.Abs(f-0.01) > 0.002 {
		t.Fatalf("two tries: %.4f failed, want about 0.01", f)
	}
	if r := float64(twice.Retries) / float64(twice.Requests); math.Abs(r-0.1) > 0.005 {
		t.Fatalf("two tries: %.4f retries a request, want about 0.1 (every first failure)", r)
	}
	// A budget of 0.05 caps retries at 5% of requests (plus the reserve).
	capped := runRules(t, w, servers, "round_robin", sim.Rules{Attempts: 2, Budget: 0.05})
	if capped.Retries > 5_000+10 || capped.Retries < 4_900 {
		t.Fatalf("budget 0.05: %d retries for 100,000 requests, want at most 5,010", capped.Retries)
	}
}

// Backups take requests only while every primary is out, in virtual time:
// the pool's fallback order, not a scenario's.
func TestSimBackups(t *testing.T) {
	down := []sim.Window{{From: 10 * time.Second, To: 20 * time.Second}}
	w := sim.Workload{Requests: 30_000, Rate: 1000, Service: time.Millisecond, Seed: 3}
	servers := []sim.Server{{Windows: down}, {Windows: down}, {Backup: true}}
	var backupBefore, backupDuring, backupAfter int
	clock := &sim.Clock{}
	pool := balance.NewPool("t", balance.Options{Clock: clock, Rand: balance.NewSeededRand(1)})
	p, _ := factory("round_robin")
	if err := pool.Configure(balance.Config{Policy: p, Endpoints: sim.Endpoints(servers)}); err != nil {
		t.Fatal(err)
	}
	res, err := sim.Run(context.Background(), w, servers, sim.Rules{Attempts: 2}.Lifecycle(pool, clock), clock, sim.Hooks{
		Picked: func(now time.Duration, s int) {
			if s != 2 {
				return
			}
			switch {
			case now < 10*time.Second:
				backupBefore++
			case now < 20*time.Second:
				backupDuring++
			default:
				backupAfter++
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if backupBefore != 0 {
		t.Fatalf("the backup took %d requests while the primaries were up", backupBefore)
	}
	// While both primaries are down their breakers open (the default
	// threshold of 3) and the backup takes nearly all 10,000 requests;
	// once they are back, probes close the breakers within a cooldown.
	if backupDuring < 9_000 {
		t.Fatalf("the backup took %d of about 10,000 requests while the primaries were down", backupDuring)
	}
	if res.Failures > 20 {
		t.Fatalf("%d requests failed: retries onto the backup should hide all but a few", res.Failures)
	}
	if backupAfter > 16_000 {
		t.Fatalf("the backup kept %d requests after the primaries came back", backupAfter)
	}
}

// A slow spell slows a server only inside its window: requests it starts
// there take Factor times longer, those before and after take the usual.
func TestSimSlowWindow(t *testing.T) {
	w := sim.Workload{Requests: 30_000, Rate: 1000, Service: time.Millisecond, Seed: 5}
	servers := []sim.Server{{Workers: 1000, Slowdowns: []sim.Slowdown{{Factor: 50, From: 10 * time.Second, To: 20 * time.Second}}}, {Workers: 1000}}
	clock := &sim.Clock{}
	pool := balance.NewPool("t", balance.Options{Clock: clock, Rand: balance.NewSeededRand(1)})
	p, _ := factory("round_robin")
	if err := pool.Configure(balance.Config{Policy: p, Endpoints: sim.Endpoints(servers)}); err != nil {
		t.Fatal(err)
	}
	var sum [2][3]time.Duration // server x before, during, after
	var n [2][3]int
	_, err := sim.Run(context.Background(), w, servers, sim.Rules{}.Lifecycle(pool, clock), clock, sim.Hooks{
		Completed: func(now time.Duration, s int, ok bool, lat time.Duration) {
			phase := 0
			switch sent := now - lat; {
			case sent >= 20*time.Second:
				phase = 2
			case sent >= 10*time.Second:
				phase = 1
			}
			sum[s][phase] += lat
			n[s][phase]++
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	mean := func(s, phase int) float64 { return sum[s][phase].Seconds() / float64(n[s][phase]) }
	for phase := range 3 {
		want := 1.0
		if phase == 1 {
			want = 50
		}
		if r := mean(0, phase) / mean(1, phase); r < want*0.8 || r > want*1.25 {
			t.Errorf("phase %d: server 0 took %.1fx server 1's time, want about %.0fx", phase, r, want)
		}
	}
	if _, err := sim.Run(context.Background(), w, []sim.Server{{Slowdowns: []sim.Slowdown{{Factor: 0}}}}, sim.Rules{}.Lifecycle(pool, clock), clock, sim.Hooks{}); err == nil {
		t.Error("a slowdown of factor 0 was accepted")
	}
}

// A route that was slow and recovers gets its traffic back under scored
// at its defaults, without a breaker to reset anything: its old latency
// fades toward the best, a request now and then measures it afresh, and
// within a few time constants (the peak decay, 10 s) it carries its half.
func TestScoredLatencyRecovery(t *testing.T) {
	const recoverAt = 30 * time.Second
	w := sim.Workload{Requests: 1200, Rate: 10, Service: 150 * time.Millisecond, Seed: 9}
	servers := []sim.Server{{Workers: 1000}, {Workers: 1000, Slowdowns: []sim.Slowdown{{Factor: 10, To: recoverAt}}}}
	clock := &sim.Clock{}
	pool := balance.NewPool("t", balance.Options{Clock: clock, Rand: balance.NewSeededRand(1)})
	p, _ := factory("scored")
	if err := pool.Configure(balance.Config{Policy: p, Endpoints: sim.Endpoints(servers)}); err != nil {
		t.Fatal(err)
	}
	var perSecond [120][2]int
	_, err := sim.Run(context.Background(), w, servers, sim.Rules{}.Lifecycle(pool, clock), clock, sim.Hooks{
		Picked: func(now time.Duration, s int) {
			if sec := int(now / time.Second); sec < len(perSecond) {
				perSecond[sec][s]++
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	share := func(from, to int) float64 {
		var n, slow int
		for _, c := range perSecond[from:to] {
			n, slow = n+c[0]+c[1], slow+c[1]
		}
		return float64(slow) / float64(max(n, 1))
	}
	if s := share(10, 30); s > 0.1 {
		t.Errorf("while ten times slower it took %.2f of the traffic", s)
	}
	back := -1
	for sec := int(recoverAt / time.Second); sec+5 <= len(perSecond); sec++ {
		if share(sec, sec+5) >= 0.3 {
			back = sec - int(recoverAt/time.Second)
			break
		}
	}
	t.Logf("back to 30%% of the traffic %d s after it recovered; share over the last 30 s %.2f", back, share(90, 120))
	if back < 0 || back > 30 {
		t.Errorf("the recovered route got 30%% of the traffic back after %d s, want within 30 s", back)
	}
	if s := share(90, 120); s < 0.35 {
		t.Errorf("a minute after it recovered it takes %.2f of the traffic, want near half", s)
	}
}

// The fluid-limit prediction of the fullest bin, against the simulation
// and against what is known: with one choice the Poisson tail (n = m =
// 1000: 5 balls; 10^5: 8), with two choices ln ln n / ln 2 plus a small
// constant (3 and 3), and two choices never predicted worse than one.
func TestBinsPrediction(t *testing.T) {
	for _, tc := range []struct {
		bins, balls int
		want        map[int]float64 // choices -> predicted
	}{
		{1000, 1000, map[int]float64{1: 5, 2: 3, 3: 2}},
		{100_000, 100_000, map[int]float64{1: 8, 2: 3, 3: 3}},
		{1000, 100_000, map[int]float64{1: 132, 2: 102, 4: 101}},
	} {
		choices := []int{}
		for d := range tc.want {
			choices = append(choices, d)
		}
		slices.Sort(choices)
		rep, err := sim.Bins(context.Background(), sim.BinsOptions{Bins: tc.bins, Balls: tc.balls, Choices: choices, Trials: 3, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		prev := math.Inf(1)
		for _, r := range rep.Rows {
			if r.Theory != tc.want[r.Choices] {
				t.Errorf("n=%d m=%d d=%d: predicted %v, want %v", tc.bins, tc.balls, r.Choices, r.Theory, tc.want[r.Choices])
			}
			if math.Abs(r.MeanFullest-r.Theory) > 4+0.03*r.Theory {
				t.Errorf("n=%d m=%d d=%d: simulated %.2f, predicted %v", tc.bins, tc.balls, r.Choices, r.MeanFullest, r.Theory)
			}
			if r.Theory > prev {
				t.Errorf("n=%d m=%d: %d choices predicted worse than fewer", tc.bins, tc.balls, r.Choices)
			}
			prev = r.Theory
		}
	}
}
