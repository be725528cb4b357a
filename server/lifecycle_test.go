package server_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rotor-lb/rotor/internal/testtool"
)

// proxyClient sends requests through the forward listener at addr.
func proxyClient(addr string) *http.Client {
	pu, _ := url.Parse("http://" + addr)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), DisableKeepAlives: true}, Timeout: 10 * time.Second}
}

// connect opens a CONNECT tunnel to target through the forward listener
// at addr and returns the connection and the status it answered.
func connect(t *testing.T, addr, target string) (net.Conn, int) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	if resp.StatusCode == 200 && br.Buffered() > 0 {
		t.Fatal("bytes after the CONNECT answer")
	}
	return c, resp.StatusCode
}

// Forward pools honour backups: a dead primary route and a healthy
// backup route (a real SOCKS5 proxy, microsocks) answer every request.
func TestForwardPoolHonoursBackups(t *testing.T) {
	target := newBackend(t, "target")
	socks := testtool.Microsocks(t, "u", "p")
	cfg := fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
listeners:
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes, allow_targets: [127.0.0.0/8]}
pools:
  - name: routes
    endpoints:
      - {name: dead, url: "http://%s"}
      - {name: spare, url: "socks5://u:p@%s", backup: true}
`, deadAddr(t), socks)
	r := startRotor(t, cfg, nil)
	c := proxyClient(r.Addr("out").String())
	for i := range 20 {
		resp, err := c.Get(target.url())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d, want 200 from the backup route", i, resp.StatusCode)
		}
	}
	snap := r.Pools()[0].Snapshot
	if st := snap.Pool().Stats(); st.Backups == 0 {
		t.Fatalf("no pick went to the backup: %+v", st)
	}
	n := snap.Get("dead").State.Snapshot(time.Now()).Failures
	if n < 3 || n > 5 {
		t.Fatalf("the dead primary failed %d times, want its breaker to open after about 3", n)
	}
	// Each of those was tried again on the backup: a retry counted.
	_, metrics := get(t, "http://"+r.Addr("admin").String()+"/metrics")
	if want := fmt.Sprintf(`rotor_retries_total{listener="out",pool="routes"} %d`, n); !strings.Contains(metrics, want) {
		t.Fatalf("/metrics lacks %s", want)
	}
}

// TCP connections and CONNECT tunnels retry within the pool's budget:
// with every endpoint refusing, 30 connections at attempts 3 and budget
// 0.01 make 30 first tries plus the budget's reserve of 10 retries, not
// 90 tries.
func TestTCPAndConnectRetriesStayInTheBudget(t *testing.T) {
	cfg := fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
listeners:
  - {name: db, kind: tcp, listen: "127.0.0.1:0", pool: dbs}
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes, connect_ports: [443]}
pools:
  - name: dbs
    retries: {attempts: 3, budget: 0.01}
    health: {breaker: {threshold: 1000}}
    endpoints:
      - {name: a, address: %q}
      - {name: b, address: %q}
      - {name: c, address: %q}
  - name: routes
    retries: {attempts: 3, budget: 0.01}
    health: {breaker: {threshold: 1000}}
    endpoints:
      - {name: a, url: "http://%s"}
      - {name: b, url: "http://%s"}
      - {name: c, url: "http://%s"}
`, deadAddr(t), deadAddr(t), deadAddr(t), deadAddr(t), deadAddr(t), deadAddr(t))
	r := startRotor(t, cfg, nil)
	for range 30 {
		c, err := net.Dial("tcp", r.Addr("db").String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("a connection to dead endpoints got data")
		}
		c.Close()
		tc, status := connect(t, r.Addr("out").String(), "93.184.216.34:443") // never leaves loopback: every route is dead
		tc.Close()
		if status != http.StatusBadGateway {
			t.Fatalf("CONNECT over dead routes: %d, want 502", status)
		}
	}
	for _, pv := range r.Pools() {
		tries := int64(0)
		eventually(t, 3*time.Second, "every try reported", func() bool {
			tries = 0
			for _, ep := range pv.Snapshot.Endpoints() {
				tries += ep.State.Snapshot(time.Now()).Requests
			}
			return tries >= 40
		})
		if tries != 40 {
			t.Fatalf("pool %s: %d tries for 30 connections, want 30 + 10 from the budget's reserve", pv.Name, tries)
		}
	}
}

// The latency a TCP connection or a CONNECT tunnel reports is the time to
// establish it, not its life: a connection held open for a second leaves
// the endpoint's latency estimate in milliseconds.
func TestConnectionLatencyIsTheTimeToEstablish(t *testing.T) {
	echo := testtool.Echo(t)
	_, port, _ := net.SplitHostPort(echo)
	tiny := testtool.Tinyproxy(t, "", "")
	cfg := fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
listeners:
  - {name: db, kind: tcp, listen: "127.0.0.1:0", pool: dbs}
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes, connect_ports: [%s], allow_targets: [127.0.0.0/8]}
pools:
  - name: dbs
    endpoints:
      - {name: echo, address: %q}
  - name: routes
    endpoints:
      - {name: tiny, url: "http://%s"}
`, port, echo, tiny)
	r := startRotor(t, cfg, nil)
	hold := func(c net.Conn) {
		defer c.Close()
		for range 5 {
			fmt.Fprint(c, "ping\n")
			_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
			if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(250 * time.Millisecond) // open for over a second in all
		}
	}
	c, err := net.Dial("tcp", r.Addr("db").String())
	if err != nil {
		t.Fatal(err)
	}
	hold(c)
	tc, status := connect(t, r.Addr("out").String(), echo)
	if status != 200 {
		t.Fatalf("CONNECT through tinyproxy: %d", status)
	}
	hold(tc)
	for _, pv := range r.Pools() {
		ep := pv.Snapshot.Endpoints()[0]
		eventually(t, 3*time.Second, "the connection ended", func() bool { return ep.State.Inflight() == 0 })
		s := ep.Snapshot(time.Now())
		if s.Samples != 1 || s.LatencyEWMA > 0.2 || s.Score < 0.8 {
			t.Fatalf("%s/%s after a connection held over 1s: %d samples, latency %.3fs, score %.2f; want the time to establish it",
				pv.Name, ep.Name, s.Samples, s.LatencyEWMA, s.Score)
		}
	}
}

// wsEcho is a WebSocket echo server.
func wsEcho(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, data, err := c.Read(context.Background())
			if err != nil {
				return
			}
			if err := c.Write(context.Background(), typ, data); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func wsRoundTrip(ctx context.Context, c *websocket.Conn, msg string) error {
	if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		return err
	}
	_, got, err := c.Read(ctx)
	if err != nil {
		return err
	}
	if string(got) != msg {
		return fmt.Errorf("echo %q, want %q", got, msg)
	}
	return nil
}

// A WebSocket over a TLS listener (wss://, coder/websocket's client):
// the upgrade is net/http's, handed the TLS connection and the head the
// short way read of it, and messages (one longer than a TLS record) go
// both ways through it; the client's close ends it, and the listener
// drains at once after.
func TestWebSocketOverTLS(t *testing.T) {
	be := wsEcho(t)
	certFile, keyFile := testtool.SelfSignedFiles(t, t.TempDir())
	cfg := fmt.Sprintf(`admin: {listen: "off"}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app, tls: {cert: %q, key: %q}}
pools:
  - name: app
    endpoints:
      - {name: ws, url: %q}
`, certFile, keyFile, be.URL)
	r := startRotor(t, cfg, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	c, _, err := websocket.Dial(ctx, "wss://"+r.Addr("web").String()+"/ws", &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range []string{"one", strings.Repeat("x", 20<<10), "three"} {
		if err := wsRoundTrip(ctx, c, msg); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatalf("close: %v", err)
	}
	start := time.Now()
	if err := r.Shutdown(ctx); err != nil || time.Since(start) > 3*time.Second {
		t.Fatalf("drain after the WebSocket closed: %v after %v", err, time.Since(start))
	}
}

// A SIGTERM lets an open WebSocket finish up to timeouts.shutdown, while
// /status and /metrics still answer; one still open at the deadline is
// cut. The session is logged and counted as a 101 with its bytes.
func TestShutdownDrainsWebSockets(t *testing.T) {
	be := wsEcho(t)
	cfg := fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
log: {access: true}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app, timeouts: {shutdown: %s}}
pools:
  - name: app
    endpoints:
      - {name: ws, url: %q}
`, "%s", be.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Closed by the client during the drain: the drain ends at once.
	r := startRotor(t, fmt.Sprintf(cfg, "10s"), nil)
	c, _, err := websocket.Dial(ctx, "ws://"+r.Addr("web").String()+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := wsRoundTrip(ctx, c, "before"); err != nil {
		t.Fatal(err)
	}
	admin := "http://" + r.Addr("admin").String()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- r.Shutdown(context.Background()) }()
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("shutdown returned (%v) with a WebSocket open", err)
	default:
	}
	if err := wsRoundTrip(ctx, c, "during the drain"); err != nil {
		t.Fatalf("the WebSocket broke when the drain began: %v", err)
	}
	for _, path := range []string{"/status", "/metrics"} {
		sctx, scancel := context.WithTimeout(ctx, time.Second)
		req, _ := http.NewRequestWithContext(sctx, http.MethodGet, admin+path, nil)
		resp, err := http.DefaultClient.Do(req)
		scancel()
		if err != nil {
			t.Fatalf("%s during the drain: %v", path, err)
		}
		resp.Body.Close()
	}
	_ = c.Close(websocket.StatusNormalClosure, "bye")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("shutdown after the WebSocket closed: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("shutdown did not end when the last WebSocket closed")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("shutdown took %v", d)
	}
	logs := r.logs.String()
	if !strings.Contains(logs, "status=101") || strings.Contains(logs, "status=499") {
		t.Fatalf("the WebSocket session is not logged as a 101:\n%s", logs)
	}
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "status=101") && (strings.Contains(line, "bytes_in=0 ") || strings.Contains(line, "bytes_out=0 ")) {
			t.Fatalf("the 101 is logged without the bytes relayed: %s", line)
		}
	}

	// Left open: cut at the deadline, not before.
	r2 := startRotor(t, fmt.Sprintf(cfg, "500ms"), nil)
	c2, _, err := websocket.Dial(ctx, "ws://"+r2.Addr("web").String()+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.CloseNow()
	if err := wsRoundTrip(ctx, c2, "hello"); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := r2.Shutdown(context.Background()); err == nil {
		t.Fatal("shutdown cut a WebSocket at its deadline and said nothing")
	}
	if d := time.Since(start); d < 450*time.Millisecond || d > 5*time.Second {
		t.Fatalf("shutdown with a WebSocket left open took %v, want about the 500ms timeout", d)
	}
	rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
	defer rcancel()
	if _, _, err := c2.Read(rctx); err == nil {
		t.Fatal("the WebSocket is still open after the deadline")
	}
}

// A CONNECT tunnel over a direct route (two plain sockets, relayed in the
// event loop) is waited for by a drain and works meanwhile; left open, it
// is cut at the deadline, not before, and logged with the bytes it
// relayed.
func TestShutdownDrainsThenCutsTunnels(t *testing.T) {
	t.Run("CONNECT", func(t *testing.T) {
		echo := testtool.Echo(t)
		_, port, _ := net.SplitHostPort(echo)
		r := startRotor(t, fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
log: {access: true}
listeners:
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes, connect_ports: [%s], allow_targets: [127.0.0.0/8],
     timeouts: {shutdown: 600ms}}
pools:
  - name: routes
    endpoints:
      - {name: direct, url: "direct://"}
`, port), nil)
		tc, status := connect(t, r.Addr("out").String(), echo)
		if status != http.StatusOK {
			t.Fatalf("CONNECT: %d", status)
		}
		drainThenCut(t, r, tc, bufio.NewReader(tc))
	})
	// An upgraded connection, relayed after its handler has returned.
	upgradeCfg := `admin: {listen: "127.0.0.1:0"}
log: {access: true}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app, timeouts: {shutdown: %s}}
pools:
  - name: app
    endpoints:
      - {name: echo, url: %q}
`
	t.Run("upgrade", func(t *testing.T) {
		r := startRotor(t, fmt.Sprintf(upgradeCfg, "600ms", newUpgradeEcho(t).url()), nil)
		c, br := upgrade(t, r.Addr("web").String())
		drainThenCut(t, r, c, br)
	})
	// The bound of the config in force: a reload's, not the start's.
	t.Run("after a reload", func(t *testing.T) {
		cfg, echo := upgradeCfg, newUpgradeEcho(t).url()
		r := startRotor(t, fmt.Sprintf(cfg, "1h", echo), nil)
		r.rewrite(t, fmt.Sprintf(cfg, "600ms", echo))
		if err := r.Reload(); err != nil {
			t.Fatal(err)
		}
		c, br := upgrade(t, r.Addr("web").String())
		drainThenCut(t, r, c, br)
	})
}

// drainThenCut holds the long-lived connection c (an echo) through a
// drain: it works when the drain begins, is cut at the shutdown's 600ms
// deadline and not before, and is logged with its bytes.
func drainThenCut(t *testing.T, r *rotor, c net.Conn, br *bufio.Reader) {
	defer c.Close()
	roundTrip := func(msg string) error {
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := fmt.Fprintln(c, msg); err != nil {
			return err
		}
		line, err := br.ReadString('\n')
		if err == nil && line != msg+"\n" {
			err = fmt.Errorf("echoed %q", line)
		}
		return err
	}
	if err := roundTrip("before"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- r.Shutdown(context.Background()) }()
	time.Sleep(200 * time.Millisecond)
	if err := roundTrip("during the drain"); err != nil {
		t.Fatalf("the connection broke when the drain began: %v", err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("shutdown cut a connection at its deadline and said nothing")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("shutdown did not cut the connection left open")
	}
	if d := time.Since(start); d < 550*time.Millisecond {
		t.Fatalf("the connection was cut after %v, before the 600ms deadline", d)
	}
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the connection is still open after the deadline")
	}
	want := int64(len("before\nduring the drain\n"))
	eventually(t, 3*time.Second, "the connection logged", func() bool {
		return strings.Contains(r.logs.String(), fmt.Sprintf("bytes_in=%d bytes_out=%d", want, want))
	})
}

// Every listener kind writes an access line and counts in the metrics,
// refusals with their reason; a TCP connection is not an HTTP 200.
func TestAccessLogAndMetricsForEveryListenerKind(t *testing.T) {
	a := newBackend(t, "a")
	cfg := fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
log: {access: true}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app}
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes, auth: {users: {alice: wonder}},
     allow_targets: ["%s/32"], connect_ports: [%s]}
  - {name: db, kind: tcp, listen: "127.0.0.1:0", pool: dbs}
pools:
  - name: app
    endpoints:
      - {name: a, url: %q}
  - name: routes
    endpoints:
      - {name: direct, url: "direct://"}
  - name: dbs
    endpoints:
      - {name: a, address: %q}
`, "127.0.0.1", port(a), a.url(), strings.TrimPrefix(a.url(), "http://"))
	r := startRotor(t, cfg, nil)
	get(t, r.url("web"))
	out := r.Addr("out").String()
	authed := func(req string) int {
		c, err := net.Dial("tcp", out)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprint(c, req)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: strings.Fields(req)[0]})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	auth := "Proxy-Authorization: Basic YWxpY2U6d29uZGVy\r\n" // alice:wonder
	for _, tc := range []struct {
		req  string
		want int
	}{
		{"GET " + a.url() + "/page HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n", 200},
		{"CONNECT " + strings.TrimPrefix(a.url(), "http://") + " HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n", 200},
		{"CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n", 403},                        // port
		{"CONNECT 10.0.0.1:" + port(a) + " HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n", 403},           // address
		{"CONNECT " + strings.TrimPrefix(a.url(), "http://") + " HTTP/1.1\r\nHost: x\r\n\r\n", 407}, // auth
	} {
		if got := authed(tc.req); got != tc.want {
			t.Fatalf("%q: %d, want %d", tc.req, got, tc.want)
		}
	}
	c, err := net.Dial("tcp", r.Addr("db").String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(c, "GET / HTTP/1.0\r\n\r\n")
	_, _ = io.ReadAll(c)
	c.Close()
	eventually(t, 3*time.Second, "every access line written", func() bool {
		return strings.Count(r.logs.String(), "msg=access") >= 7
	})
	logs := r.logs.String()
	// Each kind's record names the endpoint that carried it and its tries.
	for _, want := range []string{
		`kind=http .*proto=HTTP/1.1 status=200 .* endpoint=a attempts=1`,
		`kind=forward .*proto=HTTP/1.1 status=200 .* endpoint=direct attempts=1`,
		`kind=connect .*proto=HTTP/1.1 status=200 .* endpoint=direct attempts=1`,
		`kind=tcp .* endpoint=a attempts=1`,
	} {
		if !regexp.MustCompile(want).MatchString(logs) {
			t.Errorf("no access line matching %q:\n%s", want, logs)
		}
	}
	for _, want := range []string{
		"listener=web kind=http", "listener=out kind=forward", "kind=connect", "kind=tcp",
		"status=403 reason=port_forbidden", "status=403 reason=target_forbidden", "status=407 reason=auth",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("no access line with %q:\n%s", want, logs)
		}
	}
	_, metrics := get(t, "http://"+r.Addr("admin").String()+"/metrics")
	for _, want := range []string{
		`rotor_requests_total{code="200",endpoint="direct",kind="connect",listener="out",pool="routes"} 1`,
		`rotor_requests_total{code="200",endpoint="direct",kind="forward",listener="out",pool="routes"} 1`,
		`rotor_refused_total{listener="out",reason="port_forbidden"} 1`,
		`rotor_refused_total{listener="out",reason="target_forbidden"} 1`,
		`rotor_refused_total{listener="out",reason="auth"} 1`,
		`rotor_tcp_connections_total{endpoint="a",listener="db",pool="dbs",result="ok"} 1`,
		`rotor_bytes_total{direction="out",listener="db"}`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(metrics, `listener="db",pool="dbs"} `) && strings.Contains(metrics, `rotor_requests_total{code="200",endpoint="a",kind="tcp"`) {
		t.Error("a TCP connection is counted as an HTTP 200")
	}
}

func port(b *backend) string {
	_, p, _ := net.SplitHostPort(strings.TrimPrefix(b.url(), "http://"))
	return p
}

// A client's Accept-Encoding reaches the backend as it came, none added,
// and a compressed answer reaches the client as the backend sent it, its
// Content-Length kept.
func TestAcceptEncodingPassedAsItCame(t *testing.T) {
	var seen atomic.Value
	body := strings.Repeat("rotor ", 2000)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Header.Get("Accept-Encoding"))
		if r.Header.Get("Accept-Encoding") == "gzip" {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			_, _ = zw.Write([]byte(body))
			_ = zw.Close()
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Set("Content-Length", fmt.Sprint(buf.Len()))
			_, _ = w.Write(buf.Bytes())
			return
		}
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(be.Close)
	r := startRotor(t, webConfig("round_robin", &backend{&testtool.Backend{Server: be, Name: "a"}}), nil)
	raw := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	resp, err := raw.Get(r.url("web"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got := seen.Load().(string); got != "" || string(b) != body {
		t.Fatalf("no Accept-Encoding from the client: the backend saw %q, the body is %d bytes", got, len(b))
	}
	req, _ := http.NewRequest(http.MethodGet, r.url("web"), nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err = raw.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if seen.Load().(string) != "gzip" || resp.Header.Get("Content-Encoding") != "gzip" ||
		resp.ContentLength != int64(len(b)) || len(b) >= len(body) {
		t.Fatalf("gzip asked: backend saw %q, client got encoding %q, length %d for %d bytes",
			seen.Load(), resp.Header.Get("Content-Encoding"), resp.ContentLength, len(b))
	}
}

// A client that half-closes its connection after its request (shutdown
// of its sending side) is answered if the answer comes before rotor
// notices (the short way watches a request after a tick or two; net/http's
// server at once); one whose backend takes longer is taken for gone, as
// nginx takes it (499, the backend's exchange ended), and is sent
// nothing: never an empty 200 in place of the answer. Both through the
// reverse proxy and the forward proxy.
func TestHalfClosedClient(t *testing.T) {
	fast, slow := newBackend(t, "fast"), newBackend(t, "slow")
	slow.set(http.StatusOK, 800*time.Millisecond)
	r := startRotor(t, fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
log: {access: true}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", routes: [{match: {path_prefix: /slow}, pool: slow}, {match: {path_prefix: /}, pool: fast}]}
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes, allow_targets: [127.0.0.0/8]}
pools:
  - {name: fast, endpoints: [{name: fast, url: %q}]}
  - {name: slow, endpoints: [{name: slow, url: %q}]}
  - {name: routes, endpoints: [{name: direct, url: "direct://"}]}
`, fast.url(), slow.url()), nil)
	halfClosed := func(listener, req string) string {
		c, err := net.Dial("tcp", r.Addr(listener).String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, req)
		_ = c.(*net.TCPConn).CloseWrite()
		got, _ := io.ReadAll(c)
		return string(got)
	}
	if got := halfClosed("web", "GET /fast HTTP/1.1\r\nHost: x\r\n\r\n"); got != "" && (!strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n") || !strings.HasSuffix(got, "\r\n\r\nfast")) {
		t.Errorf("a quick answer to a half-closed client: %q, want the backend's or nothing", got)
	}
	for _, tc := range []struct{ listener, req string }{
		{"web", "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"out", "GET " + slow.url() + "/slow HTTP/1.1\r\nHost: x\r\n\r\n"},
	} {
		if got := halfClosed(tc.listener, tc.req); got != "" {
			t.Errorf("%s: a half-closed client whose answer came late was sent %q, want nothing", tc.listener, got)
		}
	}
	eventually(t, 5*time.Second, "both late answers recorded as the client's going", func() bool {
		return strings.Count(r.logs.String(), "status=499 reason=client_gone") >= 2
	})
}

// A client that goes away while its answer streams (an SSE page closed,
// a download cancelled) is recorded as gone, on every listener kind that
// carries answers: the answer was cut on its side, not broken by the
// backend, whose read rotor ended for it. (A backend that cuts its answer
// is recorded as broken: TestCutAnswerIsAbortedAndRecorded and
// TestForwardCutAnswerIsAborted.)
func TestClientGoneMidAnswerIsTheClients(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	a := &backend{testtool.NewStreamer(t, "a", release)}
	certFile, keyFile := testtool.SelfSignedFiles(t, t.TempDir())
	r := startRotor(t, fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
log: {access: true}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app}
  - {name: webtls, kind: http, listen: "127.0.0.1:0", pool: app, tls: {cert: %q, key: %q}}
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes, allow_targets: [127.0.0.0/8]}
pools:
  - name: app
    endpoints:
      - {name: a, url: %q}
  - name: routes
    endpoints:
      - {name: direct, url: "direct://"}
`, certFile, keyFile, a.url()), nil)
	pu, _ := url.Parse(r.url("out"))
	for _, tc := range []struct {
		listener, url string
		tr            *http.Transport
	}{
		{"web", r.url("web") + "/stream", &http.Transport{}},
		{"webtls", "https://" + r.Addr("webtls").String() + "/stream",
			&http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}},
		{"out", a.url() + "/stream", &http.Transport{Proxy: http.ProxyURL(pu)}},
	} {
		resp, err := (&http.Client{Transport: tc.tr, Timeout: 10 * time.Second}).Get(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.listener, err)
		}
		first := make([]byte, 1)
		if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "a" {
			t.Fatalf("%s: the stream's start: %q, %v", tc.listener, first, err)
		}
		if tc.listener == "webtls" && resp.ProtoMajor != 2 {
			t.Fatalf("webtls: the stream came over HTTP/%d, want 2", resp.ProtoMajor)
		}
		resp.Body.Close()
		tc.tr.CloseIdleConnections() // the client's connection goes, mid-answer
		line := regexp.MustCompile(`listener=` + tc.listener + ` .*path=/stream proto=\S+ status=200 reason=(\S+)`)
		eventually(t, 5*time.Second, tc.listener+": the stream's access line", func() bool {
			return line.MatchString(r.logs.String())
		})
		if m := line.FindStringSubmatch(r.logs.String()); m[1] != "client_gone" {
			t.Errorf("%s: a client gone mid-answer recorded as %s, want client_gone:\n%s", tc.listener, m[1], m[0])
		}
	}
	_, metrics := get(t, "http://"+r.Addr("admin").String()+"/metrics")
	if strings.Contains(metrics, `reason="broken"`) {
		t.Errorf("answers cut by their clients counted as broken:\n%s", metrics)
	}
}

// An endpoint counts a request in flight until its answer has been
// passed on, not only until its head came: a stream, a long download or
// an upgraded connection is load on it while it lasts (as nginx's and
// HAProxy's connection counts and Envoy's active requests see it), so
// least_conn sends the next requests elsewhere meanwhile.
func TestInFlightUntilTheAnswerEnds(t *testing.T) {
	release := make(chan struct{})
	a, b := &backend{testtool.NewStreamer(t, "a", release)}, &backend{testtool.NewStreamer(t, "b", release)}
	r := startRotor(t, webConfig("least_conn", a, b), nil)
	inflight := func(name string) int64 {
		return r.Pools()[0].Snapshot.Get(name).Snapshot(time.Now()).Inflight
	}
	resp, err := http.Get(r.url("web") + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make([]byte, 1)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	busy, other := string(first), "a"
	if busy == "a" {
		other = "b"
	}
	if n := inflight(busy); n != 1 {
		t.Fatalf("%s streaming its answer: %d in flight, want 1", busy, n)
	}
	for range 6 {
		if _, got := get(t, r.url("web")+"/"); got != other {
			t.Fatalf("least_conn sent a request to %s while %s was streaming, want %s", got, busy, other)
		}
	}
	close(release)
	if rest, err := io.ReadAll(resp.Body); err != nil || string(rest) != ",end" {
		t.Fatalf("the rest of the stream: %q, %v", rest, err)
	}
	resp.Body.Close()
	eventually(t, 5*time.Second, "the stream's count ended", func() bool { return inflight(busy) == 0 && inflight(other) == 0 })

	// An upgraded connection counts while its relay lasts.
	echo := newUpgradeEcho(t)
	r = startRotor(t, webConfig("least_conn", echo), nil)
	c, br := upgrade(t, r.Addr("web").String())
	if n := inflight("echo"); n != 1 {
		t.Fatalf("an upgraded connection open: %d in flight, want 1", n)
	}
	fmt.Fprint(c, "ping")
	got := make([]byte, 4)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "ping" {
		t.Fatalf("the echo through the upgraded connection: %q, %v", got, err)
	}
	c.Close()
	eventually(t, 5*time.Second, "the upgraded connection's count ended", func() bool { return inflight("echo") == 0 })
}

// Every kind of relayed connection (a tcp listener's, an upgraded one, a
// CONNECT tunnel) is closed once it has moved nothing either way for the
// listener's timeouts.tunnel, and recorded with reason idle; one that
// keeps talking stays open past it. The bound is the config in force: a
// reload sets it for the connections open already.
func TestTunnelIdleTimeout(t *testing.T) {
	echo := testtool.Echo(t)
	_, echoPort, _ := net.SplitHostPort(echo)
	cfg := `admin: {listen: "127.0.0.1:0"}
log: {access: true}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app, timeouts: {tunnel: %[1]s}}
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes, connect_ports: [%[2]s], allow_targets: [127.0.0.0/8],
     timeouts: {tunnel: %[1]s}}
  - {name: db, kind: tcp, listen: "127.0.0.1:0", pool: echo, timeouts: {tunnel: %[1]s}}
pools:
  - name: app
    endpoints:
      - {name: up, url: %[3]q}
  - name: routes
    endpoints:
      - {name: direct, url: "direct://"}
  - name: echo
    endpoints:
      - {name: e, address: %[4]q}
`
	up := newUpgradeEcho(t).url()
	r := startRotor(t, fmt.Sprintf(cfg, "1h", echoPort, up, echo), nil)
	type conn struct {
		name string
		c    net.Conn
		br   *bufio.Reader
	}
	var conns []conn
	open := func(name string) conn {
		var c net.Conn
		var br *bufio.Reader
		switch name {
		case "tcp", "busy tcp":
			var err error
			if c, err = net.Dial("tcp", r.Addr("db").String()); err != nil {
				t.Fatal(err)
			}
			br = bufio.NewReader(c)
		case "upgrade":
			c, br = upgrade(t, r.Addr("web").String())
		case "connect":
			var status int
			if c, status = connect(t, r.Addr("out").String(), echo); status != http.StatusOK {
				t.Fatalf("CONNECT: %d", status)
			}
			br = bufio.NewReader(c)
		}
		t.Cleanup(func() { c.Close() })
		cn := conn{name, c, br}
		conns = append(conns, cn)
		return cn
	}
	roundTrip := func(cn conn, msg string) error {
		_ = cn.c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := fmt.Fprintln(cn.c, msg); err != nil {
			return err
		}
		line, err := cn.br.ReadString('\n')
		if err == nil && line != msg+"\n" {
			err = fmt.Errorf("echoed %q", line)
		}
		return err
	}
	for _, name := range []string{"tcp", "upgrade", "connect", "busy tcp"} {
		if err := roundTrip(open(name), "hello"); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	r.rewrite(t, fmt.Sprintf(cfg, "1s", echoPort, up, echo))
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	busy := conns[3]
	for time.Since(start) < 2500*time.Millisecond {
		if err := roundTrip(busy, "still here"); err != nil {
			t.Fatalf("a connection that kept talking was closed after %v: %v", time.Since(start), err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	for _, cn := range conns[:3] {
		_ = cn.c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if b, err := cn.br.ReadByte(); err == nil {
			t.Fatalf("%s: still open %v after a reload set a 1s bound (read %q)", cn.name, time.Since(start), b)
		} else if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s: still open %v after a reload set a 1s bound", cn.name, time.Since(start))
		}
	}
	eventually(t, 3*time.Second, "the idle connections logged", func() bool {
		return strings.Count(r.logs.String(), "reason=idle") == 3
	})
	logs := r.logs.String()
	for _, want := range []string{
		`kind=http .*status=101 reason=idle bytes_in=[1-9]`,
		`kind=connect .*status=200 reason=idle bytes_in=[1-9]`,
		`kind=tcp .*reason=idle bytes_in=6 bytes_out=6 `,
	} {
		if !regexp.MustCompile(want).MatchString(logs) {
			t.Errorf("no access line matching %q:\n%s", want, logs)
		}
	}
	_, metrics := get(t, "http://"+r.Addr("admin").String()+"/metrics")
	for _, want := range []string{
		`rotor_tcp_connections_total{endpoint="e",listener="db",pool="echo",result="idle"} 1`,
		`rotor_refused_total{listener="web",reason="idle"} 1`,
		`rotor_refused_total{listener="out",reason="idle"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if err := roundTrip(busy, "last"); err != nil {
		t.Fatalf("the busy connection: %v", err)
	}
}
