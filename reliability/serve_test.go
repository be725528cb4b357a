package reliability_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// webConfig is an http listener over backends, checked actively, with the
// extra pool settings given.
func webConfig(pool string, bs ...*backend) string {
	var eps strings.Builder
	for _, b := range bs {
		fmt.Fprintf(&eps, "      - {name: %s, url: %q}\n", b.Name, b.URL)
	}
	return fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
log: {level: info}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app, timeouts: {shutdown: 10s}}
pools:
  - name: app
%s    endpoints:
%s`, pool, eps.String())
}

// SIGTERM under constant load: every request sent before the signal is
// answered, none cut.
func TestSIGTERMUnderLoad(t *testing.T) {
	bs := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")}
	for _, b := range bs {
		b.set(0, 100*time.Millisecond, false) // requests are in flight when the signal comes
	}
	p := start(t, webConfig("", bs...))
	rate, before := scale(200.0, 1000.0), scale(2*time.Second, 10*time.Second)
	var signalled atomic.Int64
	go func() {
		time.Sleep(before)
		signalled.Store(time.Now().UnixNano())
		p.signal(syscall.SIGTERM)
	}()
	rs := load(context.Background(), p.url("web"), rate, before+time.Second)
	if err := p.wait(15 * time.Second); err != nil {
		t.Fatalf("rotor did not exit after SIGTERM: %v", err)
	}
	var sent []result
	for _, r := range rs {
		if r.start.UnixNano() < signalled.Load()-int64(10*time.Millisecond) {
			sent = append(sent, r)
		}
	}
	n, first := failed(sent)
	figure(t, "SIGTERM under load", "%d failed of %d requests sent before the signal (%.0f/s, 100 ms each)", n, len(sent), rate)
	if n != 0 {
		t.Fatalf("%d of %d requests sent before SIGTERM failed (first: %s)", n, len(sent), first)
	}
}

// Reloads under load, by SIGHUP and by the API, half of them changing the
// endpoints: no request fails.
func TestReloadsUnderLoad(t *testing.T) {
	a, b, c, d := newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c"), newBackend(t, "d")
	cfgs := []string{webConfig("", a, b, c), webConfig("", a, b, d)}
	p := start(t, cfgs[0])
	reloads := scale(20, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan []result)
	go func() { done <- load(ctx, p.url("web"), scale(200.0, 1000.0), time.Hour) }()
	refused := 0
	for i := range 2 * reloads {
		p.rewrite(cfgs[(i/2)%2]) // every other reload changes the endpoints
		if i%2 == 0 {
			p.signal(syscall.SIGHUP)
		} else if code, body := p.reload(); code != 200 {
			refused++
			t.Errorf("API reload %d: %d %s", i, code, body)
		}
		time.Sleep(scale(50*time.Millisecond, 100*time.Millisecond))
	}
	time.Sleep(200 * time.Millisecond)
	cancel()
	rs := <-done
	n, first := failed(rs)
	figure(t, "reloads under load", "%d failed of %d requests over %d SIGHUP and %d API reloads, half changing endpoints", n, len(rs), reloads, reloads)
	if n != 0 || refused != 0 {
		t.Fatalf("%d requests failed (first: %s); %d reloads refused", n, first, refused)
	}
	if d.count() == 0 || c.count() == 0 {
		t.Fatal("the endpoints did not change with the reloads")
	}
}

// A bad reload under load: refused, and nothing fails meanwhile.
func TestBadReloadUnderLoad(t *testing.T) {
	a, b := newBackend(t, "a"), newBackend(t, "b")
	good := webConfig("", a, b)
	p := start(t, good)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan []result)
	go func() { done <- load(ctx, p.url("web"), 200, time.Hour) }()
	time.Sleep(300 * time.Millisecond)
	p.rewrite(strings.Replace(good, "    endpoints:", "    policy: p3c\n    endpoints:", 1))
	code, body := p.reload()
	p.signal(syscall.SIGHUP)
	time.Sleep(500 * time.Millisecond)
	cancel()
	rs := <-done
	n, first := failed(rs)
	figure(t, "bad reload", "refused with %d; %d failed of %d requests meanwhile", code, n, len(rs))
	if code != 400 || !strings.Contains(body, "p3c") {
		t.Fatalf("the bad reload: %d %s", code, body)
	}
	if n != 0 {
		t.Fatalf("%d requests failed during a refused reload (first: %s)", n, first)
	}
}

// One of three backends killed under load: idempotent requests see no
// error (retries hide it), and the endpoint is marked down.
func TestBackendKilled(t *testing.T) {
	a, b, c := newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")
	p := start(t, webConfig("    health: {check: {path: /healthz, interval: 100ms, timeout: 50ms, fall: 2}}\n", a, b, c))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan []result)
	go func() { done <- load(ctx, p.url("web"), scale(300.0, 1000.0), time.Hour) }()
	time.Sleep(500 * time.Millisecond)
	killed := time.Now()
	c.CloseClientConnections()
	c.Close()
	down := eventually(t, 5*time.Second, "c marked down", func() bool {
		return strings.Contains(p.metricsLine(`rotor_endpoint_down{endpoint="c",pool="app"}`), " 1")
	})
	time.Sleep(scale(time.Second, 5*time.Second))
	cancel()
	rs := <-done
	n, first := failed(rs)
	figure(t, "one of three backends killed", "%d failed of %d GETs; marked down %v after the kill", n, len(rs), down.Round(10*time.Millisecond))
	_ = killed
	if n != 0 {
		t.Fatalf("%d idempotent requests failed when a backend died (first: %s)", n, first)
	}
}

// metricsLine returns the /metrics line that starts with series.
func (p *proc) metricsLine(series string) string {
	for _, line := range strings.Split(p.admin("/metrics"), "\n") {
		if strings.HasPrefix(line, series) {
			return line
		}
	}
	return ""
}

// Every backend failing: retries stay within the budget, backend tries a
// request at most 1 + the budget (plus the reserve).
func TestEveryBackendFailing(t *testing.T) {
	bs := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")}
	for _, b := range bs {
		b.set(503, 0, false)
	}
	p := start(t, webConfig("    retries: {attempts: 3, budget: 0.2}\n    health: {breaker: {threshold: 1000000}}\n", bs...))
	requests := scale(1000, 10000)
	rs := load(context.Background(), p.url("web"), 500, time.Duration(requests)*time.Second/500)
	tries := 0
	for _, b := range bs {
		tries += b.count()
	}
	ratio := float64(tries) / float64(len(rs))
	figure(t, "every backend failing", "%d backend tries for %d requests: %.3f a request (budget 0.2, 3 attempts)", tries, len(rs), ratio)
	if limit := 1.2 + 10/float64(len(rs)); ratio > limit+0.001 {
		t.Fatalf("%.3f tries a request, want at most %.3f", ratio, limit)
	}
}

// A hanging backend: its requests end at the try timeout with 504, and
// the others' are not slowed.
func TestHangingBackend(t *testing.T) {
	a, b, hang := newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "hang")
	hang.set(0, 0, true)
	p := start(t, webConfig("    retries: {attempts: 1}\n    timeouts: {try: 500ms}\n", a, b, hang))
	rs := load(context.Background(), p.url("web"), 60, scale(2*time.Second, 10*time.Second))
	var timedOut, others []result
	for _, r := range rs {
		if r.status == 504 {
			timedOut = append(timedOut, r)
		} else {
			others = append(others, r)
		}
	}
	n, first := failed(others)
	slowest := time.Duration(0)
	for _, r := range timedOut {
		slowest = max(slowest, r.latency)
	}
	figure(t, "a hanging backend", "%d of %d requests 504 after at most %v (try timeout 500ms); the others' p99 %v, %d failed",
		len(timedOut), len(rs), slowest.Round(time.Millisecond), p99(others).Round(time.Millisecond), n)
	if len(timedOut) == 0 || slowest > 1500*time.Millisecond {
		t.Fatalf("%d requests timed out, the slowest after %v", len(timedOut), slowest)
	}
	if n != 0 || p99(others) > 200*time.Millisecond {
		t.Fatalf("the other backends' requests: %d failed (%s), p99 %v", n, first, p99(others))
	}
}

// rotor serve with no GOMAXPROCS set runs on fewer Ps than Go counts
// while the cores it may run on are full and its own work fits in fewer
// (internal/procs), as its metrics say; with GOMAXPROCS set it keeps
// that count. The cores are kept full by this test's own goroutines, one
// a core, while both rotors sit idle. (Getting the Ps back when the
// cores have time to spare is the tuner's unit tests' to hold: the rest
// of the suite, running beside this, keeps the cores too busy to say.)
func TestFewerPsOnFullCores(t *testing.T) {
	cores := runtime.NumCPU()
	if cores < 2 {
		t.Skipf("one core: Go counts one P, and there is none to give up")
	}
	cfg := webConfig("", newBackend(t, "a"))
	free := start(t, cfg, "GOMAXPROCS=")
	held := start(t, cfg, fmt.Sprintf("GOMAXPROCS=%d", cores))
	// (No look before the cores are full: the rest of the suite may
	// have filled them already.)
	const series = "go_sched_gomaxprocs_threads"
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range cores {
		wg.Go(func() {
			for x := 0; !stop.Load(); x++ {
			}
		})
	}
	defer func() { stop.Store(true); wg.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for free.metric(series) >= float64(cores) {
		if time.Now().After(deadline) {
			t.Fatalf("cores full for 10 s, rotor idle: still %d Ps, want fewer", cores)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := held.metric(series); got != float64(cores) {
		t.Errorf("GOMAXPROCS=%d set: %v Ps on full cores, want %d", cores, got, cores)
	}
}
