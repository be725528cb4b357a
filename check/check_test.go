package check_test

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rotor-lb/rotor/check"
	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/internal/testtool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 3s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// HTTP checks: fall failures in a row take an endpoint down, rise passes
// bring it back; a status outside expect is a failure.
func TestHTTPRiseAndFall(t *testing.T) {
	var status atomic.Int64
	status.Store(200)
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path != "/base/healthz" {
			w.WriteHeader(404)
			return
		}
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL + "/base")
	st := health.NewState("a")
	expect, _ := health.NewClassifier("2xx")
	c := check.Start(check.Spec{Kind: "http", Path: "/healthz", Expect: expect, Interval: 20 * time.Millisecond, Timeout: 15 * time.Millisecond, Rise: 2, Fall: 3},
		[]check.Target{{Name: "a", State: st, URL: u}}, quiet)
	defer c.Stop()
	time.Sleep(60 * time.Millisecond)
	if st.Down() {
		t.Fatal("a passing endpoint was marked down")
	}
	status.Store(503)
	before := hits.Load()
	waitFor(t, "down after failures", st.Down)
	if n := hits.Load() - before; n < 3 {
		t.Fatalf("down after %d checks, fall is 3", n)
	}
	status.Store(204)
	waitFor(t, "up after passes", func() bool { return !st.Down() })
	if st.UpSince().IsZero() {
		t.Fatal("coming up did not start the slow-start window")
	}
}

func TestTCPCheck(t *testing.T) {
	ln := testtool.ServeTCP(t, func(net.Conn) {})
	addr := ln.Addr().String()
	st := health.NewState("db")
	c := check.Start(check.Spec{Kind: "tcp", Interval: 20 * time.Millisecond, Timeout: 15 * time.Millisecond, Rise: 1, Fall: 1},
		[]check.Target{{Name: "db", State: st, Addr: addr}}, quiet)
	defer c.Stop()
	time.Sleep(50 * time.Millisecond)
	if st.Down() {
		t.Fatal("a listening endpoint was marked down")
	}
	ln.Close()
	waitFor(t, "down once nothing listens", st.Down)
}
