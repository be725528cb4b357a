package server_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/internal/testtool"
)

// A forward listener from the config file: Basic auth for clients, a route
// whose password comes from the environment, targets on loopback allowed
// explicitly, and the password nowhere in status, metrics or logs.
func TestForwardListener(t *testing.T) {
	target := newBackend(t, "target")
	relay := newBackend(t, "relay") // not a proxy: answers 200 "relay" to anything
	cfg := fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
log: {access: true, level: debug}
listeners:
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes,
     auth: {users: {alice: "${ALICE_PASSWORD}"}}, allow_targets: [127.0.0.0/8]}
pools:
  - name: routes
    endpoints:
      - {name: direct, url: "direct://"}
      - {name: relay, url: "http://user:${RELAY_PASS}@%s"}
`, strings.TrimPrefix(relay.url(), "http://"))
	env := map[string]string{"ALICE_PASSWORD": "alice-secret-1", "RELAY_PASS": "relay-canary-2"}
	r := startRotor(t, cfg, env)
	pu, _ := url.Parse("http://" + r.Addr("out").String())
	pu.User = url.UserPassword("alice", "alice-secret-1")
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	seen := map[string]int{}
	for range 40 {
		resp, err := c.Get(target.url() + "/page")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		seen[string(b)]++
	}
	if seen["target"] == 0 || seen["relay"] == 0 {
		t.Fatalf("answers by route %v: want both routes used (scored by default)", seen)
	}
	// Each is logged, once its answer is out, with its route and its one
	// try.
	var lines []string
	eventually(t, 5*time.Second, "the 40 requests in the access log", func() bool {
		lines = lines[:0]
		for line := range strings.SplitSeq(r.logs.String(), "\n") {
			if strings.Contains(line, "msg=access") && strings.Contains(line, "/page") {
				lines = append(lines, line)
			}
		}
		return len(lines) == 40
	})
	for _, line := range lines {
		if !strings.Contains(line, " attempts=1") || !strings.Contains(line, " endpoint=") {
			t.Fatalf("a request's record wants its route and one try: %s", line)
		}
	}
	if p := r.Pools()[0]; p.Snapshot.Policy() != "scored" {
		t.Fatalf("a forward pool's default policy is %q, want scored", p.Snapshot.Policy())
	}
	if h := target.lastRequest().Header.Get("Proxy-Authorization"); h != "" {
		t.Fatalf("Proxy-Authorization reached the target: %q", h)
	}
	pu.User = nil
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}).Get(target.url())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusProxyAuthRequired {
		t.Fatalf("no credentials: %d, want 407", resp.StatusCode)
	}
	_, status := get(t, "http://"+r.Addr("admin").String()+"/status")
	_, metrics := get(t, "http://"+r.Addr("admin").String()+"/metrics")
	for where, text := range map[string]string{"status": status, "metrics": metrics, "logs": r.logs.String()} {
		for _, secret := range []string{"relay-canary-2", "alice-secret-1"} {
			if strings.Contains(text, secret) {
				t.Fatalf("a secret appears in %s", where)
			}
		}
	}
}

// examples/routes-local.yaml runs as its comment says, offline, over the
// local tinyproxy and microsocks, every route taking traffic.
func TestRoutesLocalExample(t *testing.T) {
	target := newBackend(t, "target")
	env := map[string]string{
		"TINYPROXY": testtool.Tinyproxy(t, "", ""), "MICROSOCKS": testtool.Microsocks(t, "", ""),
		"ROTOR_LISTEN": "127.0.0.1:0", "ROTOR_ADMIN": "127.0.0.1:0",
	}
	s := serve(t, "../examples/routes-local.yaml", env, io.Discard)
	pu, _ := url.Parse("http://" + s.Addr("out").String())
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}, Timeout: 10 * time.Second}
	for range 60 {
		resp, err := c.Get(target.url())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	for _, ep := range s.Pools()[0].Snapshot.Endpoints() {
		if ep.State.Snapshot(time.Now()).Successes == 0 {
			t.Errorf("route %s carried nothing", ep.Name)
		}
	}
}

// directForward is a forward listener with one direct route, allowed to
// reach loopback targets, and the admin listener.
const directForward = `admin: {listen: "127.0.0.1:0"}
listeners:
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes, allow_targets: [127.0.0.0/8]}
pools:
  - name: routes
    endpoints:
      - {name: direct, url: "direct://"}
`

// The forward proxy passes a request's fields on as they came, less the
// hop-by-hop ones: a client that sent no User-Agent reaches the target
// with none (not Go's), and one that sent its own with its own.
func TestForwardKeepsUserAgent(t *testing.T) {
	target := newBackend(t, "target")
	r := startRotor(t, directForward, nil)
	host := strings.TrimPrefix(target.url(), "http://")
	for _, tc := range []struct{ field, want string }{{"", ""}, {"User-Agent: curl/8.0\r\n", "curl/8.0"}} {
		raw := "GET http://" + host + "/ua HTTP/1.1\r\nHost: " + host + "\r\n" + tc.field + "Connection: X-Hop\r\nX-Hop: 1\r\nX-Kept: 1\r\n\r\n"
		if status := rawStatus(t, r.Addr("out").String(), raw); status != http.StatusOK {
			t.Fatalf("status %d", status)
		}
		got := target.lastRequest().Header
		if ua, ok := got["User-Agent"]; tc.want == "" && ok || tc.want != "" && (len(ua) != 1 || ua[0] != tc.want) {
			t.Errorf("sent %q, the target got User-Agent %q", tc.field, ua)
		}
		if got.Get("X-Hop") != "" || got.Get("X-Kept") != "1" {
			t.Errorf("the target got %v: want X-Kept and not X-Hop, which Connection names", got)
		}
	}
}

// An answer the target cuts after its head has gone to the client is cut
// for the client too, chunked or with a length: the client must not take
// what came for the whole body. It is recorded as broken.
func TestForwardCutAnswerIsAborted(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		if r.URL.Path == "/chunked" {
			brw.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + "5\r\nhello\r\n")
		} else {
			brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("x", 50000))
		}
		brw.Flush()
	}))
	t.Cleanup(be.Close)
	r := startRotor(t, directForward, nil)
	host := strings.TrimPrefix(be.URL, "http://")
	for i, path := range []string{"/chunked", "/length"} {
		c, err := net.Dial("tcp", r.Addr("out").String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "GET http://"+host+path+" HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		body, err := io.ReadAll(resp.Body)
		c.Close()
		if resp.StatusCode != http.StatusOK || err != io.ErrUnexpectedEOF {
			t.Fatalf("%s: status %d, %d bytes, %v: want 200, what was sent, then the end of the connection", path, resp.StatusCode, len(body), err)
		}
		admin := "http://" + r.Addr("admin").String() + "/metrics"
		want := fmt.Sprintf(`rotor_refused_total{listener="out",reason="broken"} %d`, i+1)
		eventually(t, 3*time.Second, path+": the cut answer recorded", func() bool {
			_, metrics := get(t, admin)
			return strings.Contains(metrics, want)
		})
	}
}

// A client's malformed body through the forward listener is the
// client's: 400 to it, its connection closed, no route charged, and no
// warning in the log (a debug line, as the reverse proxy's), however
// often it is sent; the route serves the next request.
func TestForwardMalformedBodyIsTheClients(t *testing.T) {
	target := newBackend(t, "target")
	r := startRotor(t, `admin: {listen: "off"}
log: {access: true, level: debug}
listeners:
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes, allow_targets: [127.0.0.0/8]}
pools:
  - {name: routes, endpoints: [{name: direct, url: "direct://"}]}
`, nil)
	for _, body := range []string{"zz\r\nnot a chunk\r\n0\r\n\r\n", "5\r\nhelloXX\r\n0\r\n\r\n"} {
		for range 5 {
			resp, _, closed := rawExchange(t, r.Addr("out").String(),
				"POST "+target.url()+"/upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"+body)
			if resp.StatusCode != 400 || !closed {
				t.Fatalf("%q: %d (closed %v), want 400 and the connection closed", body, resp.StatusCode, closed)
			}
		}
	}
	s := r.Pools()[0].Snapshot.Get("direct").Snapshot(time.Now())
	if s.Failures != 0 || s.BreakerName != "closed" || target.count() != 0 {
		t.Fatalf("the route was charged for the client's body (%d failures, breaker %s), or the target saw %d of them", s.Failures, s.BreakerName, target.count())
	}
	if logs := r.logs.String(); strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "bad request body") {
		t.Fatalf("want a debug line for each bad body and no warning:\n%s", logs)
	}
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: r.Addr("out").String()})}}).Get(target.url() + "/after")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the bad bodies: %v, %v", resp, err)
	}
	resp.Body.Close()
}
