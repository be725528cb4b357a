package server_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/admin"
	"github.com/rotor-lb/rotor/internal/testtool"
	"github.com/rotor-lb/rotor/server"
)

// ipBackend is an HTTP server on one loopback address (127.0.0.2, ...) and
// a given port, answering with its address after delay.
type ipBackend struct {
	port  string
	hits  atomic.Int64
	srv   *http.Server
	delay time.Duration
}

func newIPBackend(t *testing.T, ip, port string, delay time.Duration) *ipBackend {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, port))
	if err != nil {
		t.Skipf("cannot listen on %s:%s (%v): this test needs 127.0.0.0/8 on loopback", ip, port, err)
	}
	_, bound, _ := net.SplitHostPort(ln.Addr().String())
	b := &ipBackend{delay: delay, port: bound}
	b.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		time.Sleep(b.delay)
		fmt.Fprint(w, ip)
	})}
	go func() { _ = b.srv.Serve(ln) }()
	t.Cleanup(func() { _ = b.srv.Close() })
	return b
}

func dnsStatus(t *testing.T, r *rotor, pool string) *admin.DNSStatus {
	t.Helper()
	doc := statusDoc(t, r)
	for _, p := range doc.Pools {
		if p.Name == pool {
			return p.DNS
		}
	}
	t.Fatalf("no pool %s", pool)
	return nil
}

// A pool whose endpoints come from DNS follows the records under load:
// added addresses take traffic, removed ones drain (their requests in
// flight finish), a failing resolver keeps the last good set, and no
// request fails.
func TestEndpointsFromDNS(t *testing.T) {
	d := testtool.NewDNS(t)
	first := newIPBackend(t, "127.0.0.2", "0", 150*time.Millisecond)
	p := first.port // A records carry no port: both listen on the same one
	second := newIPBackend(t, "127.0.0.3", p, 0)
	d.SetIPs("app.test", "127.0.0.2")
	r := startRotor(t, fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
listeners: [{name: web, kind: http, listen: "127.0.0.1:0", pool: app}]
pools:
  - name: app
    policy: least_conn
    endpoints_from: {dns: app.test., port: %s, resolver: %q, refresh: 100ms}
    health: {slow_start: 300ms}
`, p, d.Addr), nil)
	if st := dnsStatus(t, r, "app"); len(st.Addresses) != 1 || st.Addresses[0] != "127.0.0.2:"+p || st.Error != "" {
		t.Fatalf("dns status at start: %+v", st)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var ok, failed atomic.Int64
	var mu sync.Mutex
	var errs []string
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 10 * time.Second}
			for ctx.Err() == nil {
				resp, err := client.Get(r.url("web"))
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if err != nil || resp.StatusCode != 200 {
					failed.Add(1)
					mu.Lock()
					errs = append(errs, fmt.Sprint(err, resp))
					mu.Unlock()
					continue
				}
				ok.Add(1)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	if second.hits.Load() != 0 {
		t.Fatal("127.0.0.3 took traffic before it was in DNS")
	}

	// Added: it takes traffic.
	d.SetIPs("app.test", "127.0.0.2", "127.0.0.3")
	eventually(t, 3*time.Second, "127.0.0.3 takes traffic", func() bool { return second.hits.Load() > 20 })

	// Removed: 127.0.0.2 drains, its slow requests in flight finish.
	d.SetIPs("app.test", "127.0.0.3")
	eventually(t, 3*time.Second, "127.0.0.2 out of /status", func() bool {
		st := dnsStatus(t, r, "app")
		return len(st.Addresses) == 1 && st.Addresses[0] == "127.0.0.3:"+p
	})
	time.Sleep(300 * time.Millisecond) // requests sent before the change finish
	drained := first.hits.Load()
	time.Sleep(300 * time.Millisecond)
	if got := first.hits.Load(); got != drained {
		t.Fatalf("127.0.0.2 took %d requests after leaving DNS", got-drained)
	}

	// The resolver fails: the last good set keeps serving, and says so.
	d.Fail(true)
	eventually(t, 3*time.Second, "the failure in /status", func() bool { return dnsStatus(t, r, "app").Error != "" })
	before := second.hits.Load()
	time.Sleep(300 * time.Millisecond)
	if second.hits.Load() == before {
		t.Fatal("no traffic while the resolver fails")
	}
	st := dnsStatus(t, r, "app")
	if len(st.Addresses) != 1 || st.Failures == 0 {
		t.Fatalf("dns status while failing: %+v", st)
	}
	d.Fail(false)
	eventually(t, 3*time.Second, "the resolver back", func() bool { return dnsStatus(t, r, "app").Error == "" })

	cancel()
	wg.Wait()
	if failed.Load() != 0 || ok.Load() < 50 {
		t.Fatalf("%d requests failed (%v), %d succeeded", failed.Load(), errs, ok.Load())
	}
	if logs := r.logs.String(); !strings.Contains(logs, `msg="dns: endpoints changed" pool=app name=app.test. added=127.0.0.3:`+p) {
		t.Fatalf("the change is not logged:\n%s", logs)
	}
}

// check-config builds the state store's settings too (without dialling):
// a TLS file that does not load is named.
func TestCheckStateTLS(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/rotor.yaml"
	cfg := `listeners: [{name: web, kind: http, listen: "127.0.0.1:0", pool: app}]
pools: [{name: app, endpoints: [{name: a, url: "http://127.0.0.1:1"}]}]
state: {store: redis, address: "127.0.0.1:6379", tls: {ca: missing-ca.pem}}
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	err := server.Check(path, func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), "state.tls.ca") || !strings.Contains(err.Error(), filepath.Join(dir, "missing-ca.pem")) {
		t.Fatalf("check: %v", err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(cfg, ", tls: {ca: missing-ca.pem}", "", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := server.Check(path, func(string) string { return "" }); err != nil {
		t.Fatalf("a redis state with nothing listening is still a valid config: %v", err)
	}
}

// The Redis password comes from the environment and appears nowhere: not
// in the log, not in /status, not in an error, whether it is right or
// wrong.
func TestStatePasswordStaysSecret(t *testing.T) {
	const pass = "redis-secret-0123456789"
	rd := testtool.Redis(t, "--requirepass", pass)
	b := newBackend(t, "a")
	cfg := fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
state: {store: redis, address: %q, password: "${REDIS_PASSWORD}", staleness: 20ms}
listeners: [{name: web, kind: http, listen: "127.0.0.1:0", pool: app}]
pools: [{name: app, endpoints: [{name: a, url: %q}]}]
`, rd.Addr, b.url())
	for _, tc := range []struct {
		pass    string
		healthy bool
	}{{pass, true}, {"wrong-" + pass, false}} {
		r := startRotor(t, cfg, map[string]string{"REDIS_PASSWORD": tc.pass})
		get(t, r.url("web"))
		eventually(t, 3*time.Second, "the state store's health", func() bool {
			st := r.State()
			return st.Healthy == tc.healthy && (tc.healthy || st.Error != "")
		})
		resp, err := http.Get("http://" + r.Addr("admin").String() + "/status")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for where, text := range map[string]string{"log": r.logs.String(), "/status": string(body)} {
			if strings.Contains(text, pass) {
				t.Fatalf("password %s: it is in the %s:\n%s", map[bool]string{true: "right", false: "wrong"}[tc.healthy], where, text)
			}
		}
		if !tc.healthy && !strings.Contains(string(body), "WRONGPASS") {
			t.Fatalf("a wrong password is not reported in /status: %s", body)
		}
		if !tc.healthy && !strings.Contains(r.logs.String(), "state store refused rotor's credentials") {
			t.Fatalf("a wrong password is not logged as refused:\n%s", r.logs.String())
		}
	}
}

// reloadWaitingOnDNS starts rotor, then a reload adding a pool whose name
// a resolver answers only after delay, and returns once the reload is
// waiting on it; done gives the reload's result.
func reloadWaitingOnDNS(t *testing.T, delay time.Duration) (r *rotor, done <-chan error) {
	t.Helper()
	d := testtool.NewDNS(t)
	d.SetIPs("slow.test", "127.0.0.2")
	b := newBackend(t, "a")
	cfg := fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
listeners: [{name: web, kind: http, listen: "127.0.0.1:0", pool: app}]
pools:
  - {name: app, endpoints: [{name: a, url: %q}]}
`, b.url())
	r = startRotor(t, cfg, nil)
	r.rewrite(t, cfg+fmt.Sprintf("  - {name: found, endpoints_from: {dns: slow.test., port: 80, resolver: %q}}\n", d.Addr))
	d.Delay(delay)
	result := make(chan error, 1)
	go func() { result <- r.Reload() }()
	time.Sleep(200 * time.Millisecond) // the reload is waiting on DNS
	return r, result
}

// A reload that waits on DNS (a new pool's name, a slow resolver) does not
// hold /status up.
func TestStatusAnswersDuringASlowLookup(t *testing.T) {
	r, done := reloadWaitingOnDNS(t, time.Second)
	start := time.Now()
	resp, err := http.Get("http://" + r.Addr("admin").String() + "/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if took := time.Since(start); took > 500*time.Millisecond || resp.StatusCode != 200 {
		t.Fatalf("/status took %v (%d) during a reload waiting on DNS", took, resp.StatusCode)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := dnsStatus(t, r, "found"); len(st.Addresses) != 1 {
		t.Fatalf("after the slow lookup: %+v", st)
	}
}

// Nor does it hold up a shutdown: the lookup happens before the server's
// lock is taken, and the reload, when its answer comes, finds the server
// stopping and changes nothing.
func TestShutdownDuringASlowLookup(t *testing.T) {
	r, done := reloadWaitingOnDNS(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := r.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("shutdown took %v behind a reload waiting on DNS", took)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Fatalf("the reload after the shutdown: %v, want refused", err)
	}
	if r.ReloadStatus().Generation != 1 {
		t.Fatalf("reload generation %d: the refused reload changed something", r.ReloadStatus().Generation)
	}
}
