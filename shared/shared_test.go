package shared_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/internal/testtool"
	"github.com/rotor-lb/rotor/shared"
)

// Every client's sender and reader stop with Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// instances are n clients of one Redis, as n rotor processes would be,
// each with the pool "app" holding endpoint "a".
func instances(t *testing.T, addrs []string, n int, prefix string) ([]*shared.Client, []*health.State) {
	t.Helper()
	var cs []*shared.Client
	var sts []*health.State
	master := ""
	if len(addrs) == 2 && addrs[0] == "sentinel" {
		master, addrs = "rotor", addrs[1:]
	}
	for range n {
		c, err := shared.New(shared.Options{Addrs: addrs, MasterName: master, Prefix: prefix, Staleness: 50 * time.Millisecond, Timeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		st, _ := c.Store("app").Acquire("a")
		c.Start()
		t.Cleanup(c.Close)
		cs = append(cs, c)
		sts = append(sts, st)
	}
	return cs, sts
}

// eachRedis runs f on one redis-server, on a Redis Cluster of three, and
// through a Sentinel (addrs "sentinel", then the Sentinel's address).
func eachRedis(t *testing.T, f func(t *testing.T, addrs []string)) {
	t.Run("server", func(t *testing.T) { f(t, []string{testtool.Redis(t).Addr}) })
	t.Run("cluster", func(t *testing.T) { f(t, testtool.RedisCluster(t)) })
	t.Run("sentinel", func(t *testing.T) { f(t, []string{"sentinel", testtool.RedisSentinel(t)}) })
}

func shared1(t *testing.T, c *shared.Client) health.Shared {
	t.Helper()
	sh, err := c.Store("app").Shared(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	return sh
}

// 1,000 failures reported at once from many goroutines of three instances
// count exactly 1,000 in the shared copy, and open its breaker once.
func TestConcurrentFailuresCountExactly(t *testing.T) { eachRedis(t, concurrentFailures) }

func concurrentFailures(t *testing.T, addrs []string) {
	cs, sts := instances(t, addrs, 3, "count:")
	cfg := health.Config{}.Normalize()
	var wg sync.WaitGroup
	for g := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := sts[g%3]
			for i := g; i < 1000; i += 30 {
				tk := st.AdmitFallback(&cfg)
				tk.Observe(health.Failure, time.Millisecond, time.Now())
				tk.Release()
			}
		}()
	}
	wg.Wait()
	testtool.Eventually(t, 5*time.Second, "1,000 failures in Redis", func() bool { return shared1(t, cs[0]).Failures >= 1000 })
	time.Sleep(200 * time.Millisecond) // and no more
	sh := shared1(t, cs[0])
	if sh.Failures != 1000 || sh.Samples != 1000 || sh.Successes != 0 {
		t.Fatalf("shared copy: %d failures, %d samples, %d successes; want exactly 1000, 1000, 0", sh.Failures, sh.Samples, sh.Successes)
	}
	if sh.Opens != 1 || !sh.Open {
		t.Fatalf("the shared breaker opened %d times (open %v), want once", sh.Opens, sh.Open)
	}
	var dropped int64
	for _, c := range cs {
		dropped += c.Status().Dropped
	}
	if dropped != 0 {
		t.Fatalf("%d outcomes dropped", dropped)
	}
}

// A breaker opened through one instance is honoured by the others within
// a second; the probe that closes it through another closes it for all.
func TestBreakerIsShared(t *testing.T) { eachRedis(t, breakerShared) }

func breakerShared(t *testing.T, addrs []string) {
	cs, sts := instances(t, addrs, 3, "breaker:")
	cfg := health.Config{Cooldown: 400 * time.Millisecond}.Normalize()
	clock := health.SystemClock{}
	for range cfg.Threshold {
		tk, ok := sts[0].Admit(clock, &cfg)
		if !ok {
			t.Fatal("a closed breaker refused")
		}
		tk.Observe(health.Failure, time.Millisecond, time.Now())
		tk.Release()
	}
	if sts[0].Breaker(time.Now()) != health.Open {
		t.Fatal("three failures did not open the local breaker")
	}
	took := testtool.Eventually(t, time.Second, "B and C see the breaker open", func() bool {
		return sts[1].Breaker(time.Now()) == health.Open && sts[2].Breaker(time.Now()) == health.Open
	})
	t.Logf("B and C saw the open breaker after %v", took)
	if sts[1].Available(clock, 0) || sts[2].Available(clock, 0) {
		t.Fatal("B or C would still send to the open endpoint")
	}
	if snap := sts[1].Snapshot(time.Now()); snap.Source != "shared" || snap.SuccessEWMA > 0.5 {
		t.Fatalf("B's snapshot %+v: want the shared estimates", snap)
	}
	// After the cooldown B probes; its success closes the breaker for A and C.
	time.Sleep(cfg.Cooldown)
	tk, ok := sts[1].Admit(clock, &cfg)
	if !ok || !tk.Probe() {
		t.Fatalf("B after the cooldown: admitted %v, probe %v", ok, tk.Probe())
	}
	tk.Observe(health.Success, time.Millisecond, time.Now())
	tk.Release()
	testtool.Eventually(t, time.Second, "A and C see the breaker closed", func() bool {
		return sts[0].Breaker(time.Now()) == health.Closed && sts[2].Breaker(time.Now()) == health.Closed
	})
	if sh := shared1(t, cs[0]); sh.Open || sh.Opens != 1 {
		t.Fatalf("shared copy after the probe: %+v", sh)
	}
}

// A sticky key claimed through one instance is the others' too; the pins
// are bounded like the local table.
func TestStickyClaims(t *testing.T) { eachRedis(t, stickyClaims) }

func stickyClaims(t *testing.T, addrs []string) {
	cs, _ := instances(t, addrs, 2, "sticky:")
	a, b := cs[0].Sticky("app", 5), cs[1].Sticky("app", 5)
	if got, err := a.Claim("user:1", "e1", time.Minute, false); err != nil || got != "e1" {
		t.Fatalf("first claim: %q %v", got, err)
	}
	if got, err := b.Claim("user:1", "e2", time.Minute, false); err != nil || got != "e1" {
		t.Fatalf("B's claim of A's key: %q %v, want e1", got, err)
	}
	if got, _ := b.Claim("user:1", "e2", time.Minute, true); got != "e2" {
		t.Fatalf("B's replacing claim: %q", got)
	}
	if got, _ := a.Owner(context.Background(), "user:1"); got != "e2" {
		t.Fatalf("after the replacement A reads %q", got)
	}
	for i := range 20 {
		if _, err := a.Claim(fmt.Sprintf("k%d", i), "e1", time.Minute, false); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := a.Pins(context.Background()); n != 5 {
		t.Fatalf("%d pins in Redis, want the bound 5", n)
	}
	if got, _ := a.Owner(context.Background(), "k19"); got != "e1" {
		t.Fatalf("the newest pin was dropped: %q", got)
	}
	if got, _ := a.Owner(context.Background(), "k0"); got != "" {
		t.Fatalf("the oldest pin was kept: %q", got)
	}
	// Expired pins go.
	if _, err := a.Claim("short", "e1", 50*time.Millisecond, false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if got, _ := b.Claim("short", "e3", time.Minute, false); got != "e3" {
		t.Fatalf("an expired pin still held: %q", got)
	}
}

// Redis killed: the client turns degraded, claims fail at once without
// waiting, outcomes are dropped and counted, and states are local. Redis
// back: the client recovers and the states are shared again.
func TestRedisDownFailsOpen(t *testing.T) {
	r := testtool.Redis(t)
	cs, sts := instances(t, []string{r.Addr}, 1, "down:")
	c, st := cs[0], sts[0]
	testtool.Eventually(t, time.Second, "the state shared", st.IsShared)
	r.Kill()
	testtool.Eventually(t, 2*time.Second, "degraded", c.Degraded)
	if st.IsShared() || st.Snapshot(time.Now()).Source != "local" {
		t.Fatal("a state still says shared with Redis down")
	}
	start := time.Now()
	if _, err := c.Sticky("app", 10).Claim("k", "e1", time.Minute, false); err == nil {
		t.Fatal("a claim succeeded with Redis down")
	}
	if took := time.Since(start); took > 5*time.Millisecond {
		t.Fatalf("a claim waited %v with Redis known down", took)
	}
	cfg := health.Config{}.Normalize()
	tk := st.AdmitFallback(&cfg)
	tk.Observe(health.Success, time.Millisecond, time.Now())
	tk.Release()
	if got := c.Status(); got.Healthy || got.Dropped != 1 || got.Error == "" {
		t.Fatalf("status while down: %+v", got)
	}
	r.Start()
	testtool.Eventually(t, 3*time.Second, "recovered", func() bool { return !c.Degraded() && st.IsShared() })
}
