package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/internal/testtool"
)

func TestMain(m *testing.M) { testtool.VerifyNoLeaks(m) }

func webConfig(policy string, backends ...*backend) string {
	var eps strings.Builder
	for _, b := range backends {
		fmt.Fprintf(&eps, "      - {name: %s, url: %q}\n", b.Name, b.url())
	}
	return fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", routes: [{match: {path_prefix: /}, pool: app}]}
pools:
  - name: app
    policy: %s
    endpoints:
%s`, policy, eps.String())
}

func TestDistributionPerPolicy(t *testing.T) {
	for _, policy := range []string{"round_robin", "random", "least_conn", "p2c", "weighted_round_robin", "peak_ewma", "scored"} {
		t.Run(policy, func(t *testing.T) {
			a, b, c := newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")
			cfg := webConfig(policy, a, b, c)
			if policy == "scored" {
				// One answer slowed by a loaded machine costs a backend
				// most of its share until its latency fades (peak_decay,
				// 10 s by default), longer than this test runs: fade it
				// within a tenth of a second here, as the test is about
				// the spread, not the fading.
				cfg = strings.Replace(cfg, "policy: scored", "policy: scored\n    health: {ewma: {peak_decay: 50ms}}", 1)
			}
			r := startRotor(t, cfg, nil)
			for range 300 {
				if code, _ := get(t, r.url("web")+"/x"); code != 200 {
					t.Fatalf("status %d", code)
				}
			}
			lo, hi := 60, 140
			switch policy {
			case "peak_ewma":
				// Sequential requests: it prefers whichever answered
				// fastest; an unmeasured endpoint costs nothing, so each
				// is tried at least once.
				lo, hi = 1, 298
			case "scored":
				// Latency relative to the best: identical loopback
				// backends differ only by noise, within the 1 ms floor,
				// so none is starved, but the shares are not even.
				lo, hi = 20, 200
			}
			t.Logf("%s: a %d, b %d, c %d", policy, a.count(), b.count(), c.count())
			for _, be := range []*backend{a, b, c} {
				if n := be.count(); n < lo || n > hi {
					t.Errorf("%s got %d of 300, want %d..%d", be.Name, n, lo, hi)
				}
			}
		})
	}
}

// A killed backend costs idempotent clients nothing: the failed attempt is
// retried on another endpoint, and the breaker takes the dead one out.
func TestFailoverWhenBackendKilled(t *testing.T) {
	a, b, c := newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")
	r := startRotor(t, webConfig("round_robin", a, b, c), nil)
	for range 30 {
		get(t, r.url("web"))
	}
	b.Close()
	for i := range 200 {
		code, body := get(t, r.url("web"))
		if code != 200 || body == "b" {
			t.Fatalf("request %d after killing b: %d %q", i, code, body)
		}
	}
	var st struct {
		Pools []struct {
			Endpoints []struct {
				Name    string `json:"name"`
				Breaker string `json:"breaker"`
			} `json:"endpoints"`
		} `json:"pools"`
	}
	resp, err := http.Get("http://" + r.Addr("admin").String() + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	for _, ep := range st.Pools[0].Endpoints {
		if ep.Name == "b" && ep.Breaker == "closed" {
			t.Errorf("b's breaker is still closed after it died")
		}
	}
}

func TestErrorStatuses(t *testing.T) {
	slow := newBackend(t, "slow")
	slow.set(0, 2*time.Second)
	dead := newBackend(t, "dead")
	deadURL := dead.url()
	dead.Close()
	cfg := fmt.Sprintf(`admin: {listen: "off"}
listeners:
  - name: web
    kind: http
    listen: "127.0.0.1:0"
    routes:
      - {match: {path_prefix: /slow}, pool: slowpool}
      - {match: {path_prefix: /dead}, pool: deadpool}
pools:
  - name: slowpool
    endpoints: [{name: slow, url: %q}]
    timeouts: {try: 200ms, total: 300ms}
    retries: {attempts: 1}
  - name: deadpool
    endpoints: [{name: dead, url: %q}]
    retries: {attempts: 1}
`, slow.url(), deadURL)
	r := startRotor(t, cfg, nil)
	if code, _ := get(t, r.url("web")+"/slow"); code != http.StatusGatewayTimeout {
		t.Errorf("slow endpoint: %d, want 504", code)
	}
	if code, _ := get(t, r.url("web")+"/dead"); code != http.StatusBadGateway {
		t.Errorf("dead endpoint: %d, want 502", code)
	}
	if code, _ := get(t, r.url("web")+"/nowhere"); code != http.StatusNotFound {
		t.Errorf("no route: %d, want 404", code)
	}
	// Drain the only endpoint: nothing may take the request, 503.
	for _, pv := range r.Pools() {
		if pv.Name == "slowpool" {
			pv.Snapshot.Get("slow").State.SetDraining(true)
		}
	}
	if code, _ := get(t, r.url("web")+"/slow"); code != http.StatusServiceUnavailable {
		t.Errorf("every endpoint draining: %d, want 503", code)
	}
}

func adminPost(t *testing.T, r *rotor, path string) int {
	t.Helper()
	resp, err := http.Post("http://"+r.Addr("admin").String()+path, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// load runs concurrent GETs until stop, counting failures.
func load(t *testing.T, url string, workers int, stop <-chan struct{}) (ok, failed *atomic.Int64, wait func()) {
	ok, failed = new(atomic.Int64), new(atomic.Int64)
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var firstErr string
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := client.Get(url)
				if err != nil {
					failed.Add(1)
					errMu.Lock()
					if firstErr == "" {
						firstErr = err.Error()
					}
					errMu.Unlock()
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failed.Add(1)
					errMu.Lock()
					if firstErr == "" {
						firstErr = resp.Status
					}
					errMu.Unlock()
					continue
				}
				ok.Add(1)
			}
		}()
	}
	return ok, failed, func() {
		wg.Wait()
		if failed.Load() > 0 {
			t.Logf("first failure: %s", firstErr)
		}
	}
}

func TestDrainUnderLoad(t *testing.T) {
	a, b := newBackend(t, "a"), newBackend(t, "b")
	a.set(0, 5*time.Millisecond)
	b.set(0, 5*time.Millisecond)
	r := startRotor(t, webConfig("least_conn", a, b), nil)
	stop := make(chan struct{})
	ok, failed, wait := load(t, r.url("web"), 8, stop)
	time.Sleep(200 * time.Millisecond)
	if code := adminPost(t, r, "/admin/endpoints/app/b/drain"); code != 200 {
		t.Fatalf("drain: %d", code)
	}
	time.Sleep(50 * time.Millisecond) // requests already on b finish
	before := b.count()
	time.Sleep(300 * time.Millisecond)
	after := b.count()
	close(stop)
	wait()
	if failed.Load() != 0 || ok.Load() < 100 {
		t.Fatalf("%d ok, %d failed while draining", ok.Load(), failed.Load())
	}
	if after != before {
		t.Fatalf("drained b took %d new requests", after-before)
	}
	if code := adminPost(t, r, "/admin/endpoints/app/nope/drain"); code != 404 {
		t.Fatalf("drain of an unknown endpoint: %d", code)
	}
	if code := adminPost(t, r, "/admin/endpoints/app/b/undrain"); code != 200 {
		t.Fatalf("undrain: %d", code)
	}
	for range 20 {
		get(t, r.url("web"))
	}
	if b.count() == after {
		t.Fatal("undrained b takes no requests")
	}
}

func TestReloadUnderLoad(t *testing.T) {
	a, b, c := newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")
	r := startRotor(t, webConfig("round_robin", a, b), nil)
	stop := make(chan struct{})
	ok, failed, wait := load(t, r.url("web"), 8, stop)
	time.Sleep(100 * time.Millisecond)
	for i := range 10 {
		cfg := webConfig("round_robin", a, b, c)
		if i%2 == 1 {
			cfg = webConfig("p2c", a, c)
		}
		r.rewrite(t, cfg)
		if code := adminPost(t, r, "/admin/reload"); code != 200 {
			t.Fatalf("reload %d: %d", i, code)
		}
		time.Sleep(30 * time.Millisecond)
	}
	// A bad config is refused; the old one keeps serving.
	r.rewrite(t, "listeners: [}")
	if code := adminPost(t, r, "/admin/reload"); code != 400 {
		t.Fatalf("bad reload: %d, want 400", code)
	}
	if st := r.ReloadStatus(); st.Error == "" || st.Generation != 11 {
		t.Fatalf("reload status %+v", st)
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wait()
	if failed.Load() != 0 || ok.Load() < 100 {
		t.Fatalf("%d ok, %d failed across reloads", ok.Load(), failed.Load())
	}
	if c.count() == 0 {
		t.Fatal("the endpoint a reload added took no request")
	}
	if !strings.Contains(r.logs.String(), "reload refused") {
		t.Fatal("the refused reload was not logged")
	}
}

// Endpoint health survives a reload for endpoints that remain.
func TestReloadKeepsHealth(t *testing.T) {
	a, b := newBackend(t, "a"), newBackend(t, "b")
	b.set(503, 0)
	r := startRotor(t, webConfig("scored", a, b), nil)
	for range 40 {
		get(t, r.url("web"))
	}
	score := func() float64 {
		for _, pv := range r.Pools() {
			if ep := pv.Snapshot.Get("b"); ep != nil {
				return ep.State.Score(time.Now())
			}
		}
		return -1
	}
	before := score()
	if before > 0.5 {
		t.Fatalf("failing b scores %v", before)
	}
	r.rewrite(t, webConfig("scored", a, b))
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if after := score(); after != before {
		t.Fatalf("b's score went from %v to %v across a reload", before, after)
	}
}

func TestActiveChecksMarkDownAndUp(t *testing.T) {
	a, b := newBackend(t, "a"), newBackend(t, "b")
	cfg := webConfig("round_robin", a, b) + `    health:
      check: {path: /healthz, interval: 50ms, timeout: 40ms, rise: 2, fall: 2}
`
	r := startRotor(t, cfg, nil)
	down := func() bool {
		for _, pv := range r.Pools() {
			return pv.Snapshot.Get("b").State.Down()
		}
		return false
	}
	b.set(500, 0)
	eventually(t, 2*time.Second, "b marked down", down)
	before := b.count()
	for range 20 {
		if code, body := get(t, r.url("web")); code != 200 || body != "a" {
			t.Fatalf("with b down: %d %q", code, body)
		}
	}
	if b.count()-before > 3 { // only health checks reach it
		t.Fatalf("down b took %d requests", b.count()-before)
	}
	b.set(0, 0)
	eventually(t, 2*time.Second, "b marked up", func() bool { return !down() })
}

// Hop-by-hop headers, Connection-named headers and spoofed X-Forwarded-For
// do not reach the backend (the Go CVEs: empty and repeated Connection).
func TestHeaderHygiene(t *testing.T) {
	a := newBackend(t, "a")
	r := startRotor(t, webConfig("round_robin", a), nil)
	addr := r.Addr("web").String()
	raw := "GET /h HTTP/1.1\r\nHost: example.test\r\nConnection: X-Secret, keep-alive\r\nConnection: \r\nConnection: X-Other\r\n" +
		"X-Secret: 1\r\nX-Other: 2\r\nKeep-Alive: timeout=5\r\nProxy-Authorization: Basic Zm9vOmJhcg==\r\nTE: gzip\r\n" +
		"X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Host: evil.test\r\nUpgrade-Insecure-Requests: 1\r\n\r\n"
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	got := a.lastRequest()
	for _, h := range []string{"X-Secret", "X-Other", "Keep-Alive", "Proxy-Authorization", "Te"} {
		if v := got.Header.Get(h); v != "" {
			t.Errorf("%s reached the backend: %q", h, v)
		}
	}
	if xff := got.Header.Get("X-Forwarded-For"); xff != "127.0.0.1" {
		t.Errorf("X-Forwarded-For %q: a spoofed value from an untrusted client must be replaced", xff)
	}
	if xfh := got.Header.Get("X-Forwarded-Host"); xfh != "example.test" {
		t.Errorf("X-Forwarded-Host %q, want the request's host", xfh)
	}
	if got.Host != "example.test" {
		t.Errorf("Host %q: the original host should pass", got.Host)
	}
	if got.Header.Get("Upgrade-Insecure-Requests") != "1" {
		t.Error("an end-to-end header was dropped")
	}
}

// A request whose head has none of the fields a proxy leaves out goes on
// in its own header map; one with such a field, in a copy. Whichever way,
// and whichever way the transport sends it (a DELETE or an empty POST
// goes net/http's way, and takes a copy of the map the server takes
// back), the backend gets each request's own fields and rotor's, and
// nothing of the request before it on the same connection.
func TestHeadersSentInPlace(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %q %q %q %q %q %q %q", r.Method, r.Header["User-Agent"], r.Header["X-A"],
			r.Header["X-Forwarded-For"], r.Header["X-Forwarded-Host"], r.Header["X-Forwarded-Proto"],
			r.Header["X-Real-Ip"], r.Header["Keep-Alive"])
	}))
	t.Cleanup(backend.Close)
	r := startRotor(t, fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", routes: [{match: {path_prefix: /}, pool: app}]}
pools:
  - name: app
    policy: round_robin
    endpoints:
      - {name: a, url: %q}
`, backend.URL), nil)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	t.Cleanup(c.CloseIdleConnections)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 60 {
				method := []string{http.MethodGet, http.MethodDelete, http.MethodPost}[(g+i)%3]
				req, _ := http.NewRequest(method, r.url("web")+"/x", nil)
				var ua, xa []string
				if i%2 == 0 {
					ua = []string{fmt.Sprintf("agent-%d-%d", g, i)}
					req.Header["User-Agent"] = ua
				} else {
					req.Header["User-Agent"] = []string{""} // none sent, and none comes (not Go's)
				}
				if i%3 != 2 {
					xa = []string{fmt.Sprintf("a-%d-%d", g, i)}
					req.Header["X-A"] = xa
				}
				if i%4 == 3 { // a hop-by-hop field: the copy
					req.Header["Keep-Alive"] = []string{"timeout=5"}
					req.Header["X-Forwarded-For"] = []string{"6.6.6.6"}
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				want := fmt.Sprintf("%s %q %q %q %q %q %q %q", method, ua, xa, []string{"127.0.0.1"},
					[]string{r.Addr("web").String()}, []string{"http"}, []string{"127.0.0.1"}, []string(nil))
				if string(body) != want {
					t.Errorf("%s %d/%d: the backend got\n%s\nwant\n%s", method, g, i, body, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestTrustedProxyKeepsForwardedFor(t *testing.T) {
	a := newBackend(t, "a")
	cfg := strings.Replace(webConfig("round_robin", a), "routes:", "trusted_proxies: [127.0.0.0/8], routes:", 1)
	r := startRotor(t, cfg, nil)
	get(t, r.url("web"), "X-Forwarded-For", "203.0.113.7", "X-Forwarded-Proto", "https")
	got := a.lastRequest()
	if xff := got.Header.Get("X-Forwarded-For"); xff != "203.0.113.7, 127.0.0.1" {
		t.Errorf("X-Forwarded-For %q from a trusted peer, want it kept and extended", xff)
	}
	if p := got.Header.Get("X-Forwarded-Proto"); p != "https" {
		t.Errorf("X-Forwarded-Proto %q from a trusted peer", p)
	}
}

// A client that sends headers too slowly is cut by read_header.
func TestSlowClientCut(t *testing.T) {
	a := newBackend(t, "a")
	cfg := strings.Replace(webConfig("round_robin", a), "routes:", "timeouts: {read_header: 200ms}, routes:", 1)
	r := startRotor(t, cfg, nil)
	conn, err := net.Dial("tcp", r.Addr("web").String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n") // never finished
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	start := time.Now()
	_, err = io.ReadAll(conn)
	if err != nil {
		t.Fatalf("the connection was not closed by rotor: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("slow client kept for %v", d)
	}
}

// SIGTERM's shutdown lets requests in flight finish.
func TestShutdownFinishesInFlight(t *testing.T) {
	a := newBackend(t, "a")
	a.set(0, 300*time.Millisecond)
	r := startRotor(t, webConfig("round_robin", a), nil)
	var wg sync.WaitGroup
	var fails atomic.Int64
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Get(r.url("web"))
			if err != nil {
				fails.Add(1)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(b) != "a" {
				fails.Add(1)
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if fails.Load() != 0 {
		t.Fatalf("%d in-flight requests failed across shutdown", fails.Load())
	}
	if _, err := net.DialTimeout("tcp", r.Addr("web").String(), time.Second); err == nil {
		t.Fatal("still accepting after shutdown")
	}
}
