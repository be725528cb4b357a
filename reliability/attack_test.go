package reliability_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/internal/testtool"
)

// 500 slowloris connections are cut at the header timeout, and normal
// clients meanwhile keep their p99 within 3x of what it was without them
// (or within 100 ms).
func TestSlowloris(t *testing.T) {
	a, b := newBackend(t, "a"), newBackend(t, "b")
	cfg := strings.Replace(webConfig("", a, b), "timeouts: {shutdown: 10s}", "timeouts: {shutdown: 10s, read_header: 2s}", 1)
	p := start(t, cfg)
	base := load(context.Background(), p.url("web"), 100, 2*time.Second)
	n := scale(500, 2000)
	cut := make(chan time.Duration, n)
	for range n {
		go func() {
			c, err := net.Dial("tcp", p.addr("web"))
			if err != nil {
				cut <- -1
				return
			}
			defer c.Close()
			start := time.Now()
			fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n")
			for {
				if _, err := c.Write([]byte("X")); err != nil {
					break
				}
				_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
				if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
					break // closed by rotor
				}
				if time.Since(start) > 10*time.Second {
					cut <- -1
					return
				}
			}
			cut <- time.Since(start)
		}()
	}
	time.Sleep(300 * time.Millisecond) // all connected
	during := load(context.Background(), p.url("web"), 100, 2*time.Second)
	var slowest time.Duration
	for range n {
		d := <-cut
		if d < 0 {
			t.Fatal("a slowloris connection was not cut within 10s")
		}
		slowest = max(slowest, d)
	}
	nf, first := failed(during)
	figure(t, "slowloris", "%d connections sending a byte every 500ms, all cut by %v (read_header 2s); normal clients' p99 %v with them, %v without, %d failed",
		n, slowest.Round(10*time.Millisecond), p99(during).Round(100*time.Microsecond), p99(base).Round(100*time.Microsecond), nf)
	if slowest > 3500*time.Millisecond {
		t.Fatalf("slowloris connections held up to %v past a 2s header timeout", slowest)
	}
	// Starved clients would fail or wait for seconds (the header timeout
	// is 2 s); under the race detector on two cores the p99 of 100 busy
	// clients beside 500 slow ones swings past 3x a quiet baseline of a
	// few milliseconds without that (61 ms against 16 in one CI run).
	if nf != 0 || p99(during) > max(3*p99(base), 100*time.Millisecond) {
		t.Fatalf("normal clients: %d failed (%s), p99 %v against %v without slowloris", nf, first, p99(during), p99(base))
	}
}

// Slow readers (slowhttptest -X): clients that ask for a large answer
// and read none of it have their requests ended and their connections
// closed by rotor within about twice the idle timeout (a write that
// makes no progress for it: the answers fill the sockets' buffers
// first, which is progress), and normal clients meanwhile are served.
func TestSlowReaders(t *testing.T) {
	big := make([]byte, 4<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			_, _ = w.Write(big)
			return
		}
		fmt.Fprint(w, "a")
	}))
	t.Cleanup(srv.Close)
	a := &backend{&testtool.Backend{Server: srv, Name: "a"}}
	cfg := strings.Replace(webConfig("", a), "timeouts: {shutdown: 10s}", "timeouts: {shutdown: 10s, idle: 2s}", 1)
	p := start(t, strings.Replace(cfg, "log: {level: info}", "log: {level: info, access: true}", 1))
	base := load(context.Background(), p.url("web"), 100, 2*time.Second)
	n := scale(100, 200)
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	begin := time.Now()
	for range n {
		c, err := net.Dial("tcp", p.addr("web"))
		if err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).SetReadBuffer(4 << 10) // the answer stalls in the kernel's buffers soon
		conns = append(conns, c)
		fmt.Fprint(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	during := load(context.Background(), p.url("web"), 100, 2*time.Second)
	// Once every slow reader's request has ended, rotor holds none of
	// their connections either: its keep-alive connections on the
	// listener's port are none but the normal load's, which idle out.
	eventually(t, 20*time.Second, "every slow reader's connection closed", func() bool {
		return strings.Count(p.logs.String(), "path=/big") >= n && p.established(p.addr("web")) == 0
	})
	ended := time.Since(begin)
	gone := strings.Count(p.logs.String(), "path=/big proto=HTTP/1.1 status=200 reason=client_gone")
	nf, first := failed(during)
	figure(t, "slow readers", "%d connections asking for 4 MiB and reading none of it: %d requests cut (the rest had their answers fit in the sockets' buffers) and every connection closed by %v (idle 2s); normal clients' p99 %v with them, %v without, %d failed",
		n, gone, ended.Round(100*time.Millisecond), p99(during).Round(100*time.Microsecond), p99(base).Round(100*time.Microsecond), nf)
	if gone == 0 {
		t.Fatal("no slow reader's request was cut: every answer fit in the sockets' buffers, and the test tested nothing")
	}
	// The slow readers' answers are load of their own (400 MiB through
	// rotor into the sockets' buffers in the first second), which the
	// normal clients share the cores with; they are not starved: none
	// fails, and none waits for the idle timeout.
	if nf != 0 || p99(during) > 2*time.Second {
		t.Fatalf("normal clients: %d failed (%s), p99 %v against %v without slow readers", nf, first, p99(during), p99(base))
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// exchange sends raw on a new connection to addr and returns the status
// of the first answer.
func exchange(t *testing.T, addr, raw string) int {
	t.Helper()
	c := rawConn(t, addr)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0 // closed without an answer
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Oversized heads, URIs and bodies are refused with their status before
// a backend sees them.
func TestOversized(t *testing.T) {
	a := newBackend(t, "a")
	cfg := strings.Replace(webConfig("", a), "timeouts: {shutdown: 10s}", "timeouts: {shutdown: 10s}, max_header_bytes: 8192, max_body_bytes: 65536", 1)
	p := start(t, cfg)
	cases := []struct {
		name, raw string
		want      int
	}{
		{"a 9000-byte header", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 9000) + "\r\n\r\n", 431},
		{"100 headers of 100 bytes", "GET / HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-H: "+strings.Repeat("b", 95)+"\r\n", 100) + "\r\n", 431},
		{"a 10000-byte URI", "GET /" + strings.Repeat("u", 10000) + " HTTP/1.1\r\nHost: x\r\n\r\n", 414},
		{"a 100000-byte body announced", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n", 413},
		{"a 100000-byte chunked body", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", 100000, strings.Repeat("c", 100000)), 413},
		// 60 bytes of data in 60 KB of chunk extensions, which are read
		// and dropped: framing past 16 KiB over the data's allowance is
		// the client's fault.
		{"60 bytes chunked in 60 KB of extensions", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
			strings.Repeat("1;"+strings.Repeat("e", 1000)+"\r\nx\r\n", 60) + "0\r\n\r\n", 400},
	}
	held := 0
	for _, tc := range cases {
		if got := exchange(t, p.addr("web"), tc.raw); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		} else {
			held++
		}
	}
	// The chunked body is read ahead before a backend is picked (its
	// first 64 KiB and a byte), and the limit is within that: none of
	// them reaches the backend. (Past 64 KiB a chunked body streams, and
	// a backend may see the start of one the limit cuts later.)
	figure(t, "oversized heads, URIs and bodies", "%d of %d refused with 431, 414, 413 or 400; the backend saw %d of them", held, len(cases), a.count())
	if a.count() > 0 {
		t.Fatalf("the backend saw %d oversized requests", a.count())
	}
}

// recorder is a backend that keeps the raw bytes it receives and the
// request paths it parsed: what a desync would show.
type recorder struct {
	*httptest.Server
	mu    sync.Mutex
	paths []string
	raw   strings.Builder
}

type recordingConn struct {
	net.Conn
	r *recorder
}

func (c recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.r.mu.Lock()
	c.r.raw.Write(p[:n])
	c.r.mu.Unlock()
	return n, err
}

type recordingListener struct {
	net.Listener
	r *recorder
}

func (l recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return recordingConn{c, l.r}, nil
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{}
	r.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.paths = append(r.paths, req.Method+" "+req.URL.Path)
		r.mu.Unlock()
		fmt.Fprintf(w, "%s %d", req.URL.Path, len(body))
	}))
	r.Server.Listener = recordingListener{r.Server.Listener, r}
	r.Server.Start()
	t.Cleanup(r.Close)
	return r
}

// Request-smuggling framings, each followed on the same connection by a
// request that must not be read as part of it: the backend never sees a
// request the client did not send as one.
func TestFramingNoDesync(t *testing.T) {
	rec := newRecorder(t)
	p := start(t, fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
log: {level: info}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app}
pools:
  - {name: app, endpoints: [{name: rec, url: %q}]}
`, rec.URL))
	smuggled := "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	cases := []struct{ name, raw string }{
		{"CL+TE", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled},
		{"TE+CL", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 50\r\n\r\n0\r\n\r\n" + smuggled},
		{"two Content-Lengths", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 40\r\n\r\n" + smuggled},
		{"obs-fold Transfer-Encoding", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n" + smuggled},
		{"bad chunk size", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n" + smuggled + "\r\n0\r\n\r\n"},
		{"chunk size overflow", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000001\r\nx\r\n0\r\n\r\n" + smuggled},
		{"bare LF", "POST /a HTTP/1.1\nHost: x\nContent-Length: 0\n\n" + smuggled},
		{"chunked, identity", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n" + smuggled},
		{"Content-Length +5", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello" + smuggled},
		{"TE with a space", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\n" + smuggled},
		{"a NUL in a header", "POST /a HTTP/1.1\r\nHost: x\r\nX-A: b\x00c\r\nContent-Length: 0\r\n\r\n" + smuggled},
	}
	for _, tc := range cases {
		c := rawConn(t, p.addr("web"))
		_ = c.SetDeadline(time.Now().Add(time.Second))
		_, _ = io.WriteString(c, tc.raw)
		_, _ = io.ReadAll(c) // every answer, until rotor closes or a second passes
		c.Close()
	}
	time.Sleep(200 * time.Millisecond)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	desync := 0
	for _, path := range rec.paths {
		if strings.Contains(path, "smuggled") {
			desync++
		}
	}
	// Bare LF is not smuggling: a client that pipelines after a complete
	// request sent two requests; it is the only case where the second
	// may be answered.
	figure(t, "framing cases", "%d cases (CL+TE, duplicate CL, obs-fold, bad chunk sizes, bare LF, ...); the backend saw %d requests, %d desynchronised",
		len(cases), len(rec.paths), max(desync-1, 0))
	if desync > 1 {
		t.Fatalf("the backend saw a smuggled request %d times: %v\nraw:\n%q", desync, rec.paths, rec.raw.String())
	}
}

// Hop-by-hop headers, X-Forwarded-For, X-Real-IP and Host as the backend
// sees them.
func TestHeaderHygiene(t *testing.T) {
	var seen atomic.Pointer[http.Request]
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen.Store(r.Clone(context.Background())) }))
	t.Cleanup(be.Close)
	p := start(t, fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
log: {level: info}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app}
pools:
  - {name: app, endpoints: [{name: be, url: %q}]}
`, be.URL))
	exchange(t, p.addr("web"), "GET /h HTTP/1.1\r\nHost: app.example\r\nConnection: keep-alive, X-Secret-Hop\r\nX-Secret-Hop: 1\r\n"+
		"Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\nX-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Host: evil.example\r\n"+
		"X-Real-IP: 6.6.6.6\r\nForwarded: for=6.6.6.6\r\n\r\n")
	r := seen.Load()
	if r == nil {
		t.Fatal("the backend saw nothing")
	}
	checks := []struct {
		what string
		ok   bool
	}{
		{"a header Connection names is dropped", r.Header.Get("X-Secret-Hop") == ""},
		{"Keep-Alive is dropped", r.Header.Get("Keep-Alive") == ""},
		{"Proxy-Connection is dropped", r.Header.Get("Proxy-Connection") == ""},
		{"X-Forwarded-For is the client's address", r.Header.Get("X-Forwarded-For") == "127.0.0.1"},
		{"X-Forwarded-Host is the Host the client sent", r.Header.Get("X-Forwarded-Host") == "app.example"},
		{"X-Real-IP is the client's address", r.Header.Get("X-Real-IP") == "127.0.0.1"},
		{"the Host goes through", r.Host == "app.example"},
	}
	held := 0
	for _, c := range checks {
		if c.ok {
			held++
		} else {
			t.Errorf("%s: the backend saw %v (host %q)", c.what, r.Header, r.Host)
		}
	}
	figure(t, "hop-by-hop, X-Forwarded-*, X-Real-IP, Host", "%d of %d rules held", held, len(checks))
}

// ssrfForms are the spellings of loopback, private and link-local
// addresses an attacker tries.
var ssrfForms = []string{
	"127.0.0.1", "127.1", "2130706433", "0x7f000001", "0x7f.1", "0177.0.0.1", "127.000.000.001", "localhost",
	"127.0.0.1.", "[::1]", "[::1%25lo]", "[::1%251]", "[0:0:0:0:0:0:0:1]", "[::ffff:127.0.0.1]",
	"[::ffff:7f00:1]", "[::127.0.0.1]", "[64:ff9b::7f00:1]", "[2002:7f00:1::]", "[fe80::1%25eth0]",
	"[fd00::2%25eth0]", "[fd00::2]", "169.254.169.254", "[::ffff:a9fe:a9fe]",
}

// Every SSRF form, through every route kind, as GET and as CONNECT: not
// one connection reaches a canary on loopback.
func TestSSRF(t *testing.T) {
	can := testtool.NewCanary(t)
	port := can.Port
	routes := []string{"direct://", "http://" + testtool.Tinyproxy(t, "", ""), "socks5://" + testtool.Microsocks(t, "", "")}
	var eps strings.Builder
	for i, u := range routes {
		fmt.Fprintf(&eps, "      - {name: r%d, url: %q}\n", i, u)
	}
	attempts, refused := 0, 0
	for i := range routes {
		p := start(t, fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
log: {level: info}
listeners:
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes, connect_ports: [%s]}
pools:
  - name: routes
    endpoints:
      - {name: only, url: %q}
`, port, routes[i]))
		for _, form := range ssrfForms {
			target := form + ":" + port
			for _, raw := range []string{
				"GET http://" + target + "/ HTTP/1.1\r\nHost: " + target + "\r\n\r\n",
				"CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n",
			} {
				attempts++
				if got := exchange(t, p.addr("out"), raw); got == 403 || got == 400 {
					refused++
				} else {
					t.Errorf("%s via %s: %d", strings.Fields(raw)[0]+" "+target, routes[i], got)
				}
			}
		}
	}
	time.Sleep(200 * time.Millisecond)
	figure(t, "SSRF", "%d forms x %d route kinds x GET and CONNECT = %d attempts, %d refused, %d connections at the canary",
		len(ssrfForms), len(routes), attempts, refused, can.Conns())
	if can.Conns() != 0 {
		t.Fatalf("%d connections reached loopback", can.Conns())
	}
}

// Canary secrets (a client password, a route's user and password, a
// token standing as a route's user, a cookie secret) appear nowhere rotor
// writes: logs at debug level with the access log on, the answers to
// failing requests, a refused reload, check-config, /status, /metrics.
func TestCanarySecrets(t *testing.T) {
	canaries := map[string]string{
		"CLIENT_PW": "cpw-canary-1a2b", "ROUTE_PW": "rpw-canary-3c4d", "ROUTE_TOKEN": "tok-canary-5e6f",
		"STICKY": "sticky-canary-7a8b9c0d",
	}
	var env []string
	for k, v := range canaries {
		env = append(env, k+"="+v)
	}
	dead := "127.0.0.1:1"
	a := newBackend(t, "a")
	cfg := fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
log: {level: debug, access: true}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app}
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes, auth: {users: {alice: "${CLIENT_PW}"}}, allow_targets: [127.0.0.0/8]}
pools:
  - name: app
    sticky_cookie: {secret: "${STICKY}"}
    endpoints:
      - {name: a, url: %q}
  - name: routes
    endpoints:
      - {name: userpass, url: "http://user:${ROUTE_PW}@%s"}
      - {name: token, url: "http://${ROUTE_TOKEN}:@%s"}
      - {name: socks, url: "socks5://${ROUTE_TOKEN}:${ROUTE_PW}@%s"}
`, a.URL, dead, dead, dead)
	p := start(t, cfg, env...)
	var outputs []string
	for _, raw := range []string{
		"GET " + a.URL + "/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\nProxy-Authorization: Basic " + basic("alice", canaries["CLIENT_PW"]) + "\r\n\r\n",
		"CONNECT " + hostPort(a.Server) + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\nProxy-Authorization: Basic " + basic("alice", canaries["CLIENT_PW"]) + "\r\n\r\n",
		"GET " + a.URL + "/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\nProxy-Authorization: Basic " + basic("alice", "wrong") + "\r\n\r\n",
	} {
		c := rawConn(t, p.addr("out"))
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.WriteString(c, raw)
		b, _ := io.ReadAll(c)
		c.Close()
		outputs = append(outputs, string(b))
	}
	resp, err := http.Get(p.url("web"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	outputs = append(outputs, fmt.Sprint(resp.Header))
	p.rewrite(strings.Replace(cfg, "http://${ROUTE_TOKEN}:@", "ftp://${ROUTE_TOKEN}:@", 1))
	_, refusal := p.reload()
	outputs = append(outputs, refusal, p.admin("/status"), p.admin("/metrics"))
	check := exec.Command(rotorBin, "check-config", p.path)
	check.Env = append(os.Environ(), env...)
	out, _ := check.CombinedOutput()
	outputs = append(outputs, string(out))
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	_ = os.WriteFile(bad, []byte("pools: [{name: x, endpoints: [{name: e, url: \"http://user:${ROUTE_PW}@%zz\"}]}]\n"), 0o600)
	check = exec.Command(rotorBin, "check-config", bad)
	check.Env = append(os.Environ(), env...)
	out, _ = check.CombinedOutput()
	outputs = append(outputs, string(out), p.logs.String())
	hits := 0
	for _, o := range outputs {
		for name, v := range canaries {
			if strings.Contains(o, v) {
				hits++
				t.Errorf("%s shows in:\n%s", name, o)
			}
		}
	}
	figure(t, "canary secrets", "%d canaries searched in %d outputs (logs, answers, a refused reload, check-config, /status, /metrics): %d hits",
		len(canaries), len(outputs), hits)
}

func basic(user, pass string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
}
