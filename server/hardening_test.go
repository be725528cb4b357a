package server_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/internal/testtool"
)

// ssrfForms are the spellings of loopback, private and link-local
// addresses an attacker tries (host parts of a URL or authority).
var ssrfForms = []string{
	"127.0.0.1", "127.1", "2130706433", "0x7f000001", "0x7f.1", "0177.0.0.1", "127.000.000.001", "localhost",
	"127.0.0.1.", "[::1]", "[::1%25lo]", "[::1%251]", "[0:0:0:0:0:0:0:1]", "[::ffff:127.0.0.1]",
	"[::ffff:7f00:1]", "[::127.0.0.1]", "[64:ff9b::7f00:1]", "[2002:7f00:1::]", "[fe80::1%25eth0]",
	"[fd00::2%25eth0]", "[fd00::2]", "169.254.169.254",
}

// Every spelling of a forbidden target, through every kind of route, as
// an absolute-URI GET and as a CONNECT, is refused, and not one byte
// reaches a listener on loopback.
func TestSSRFEveryFormEveryRoute(t *testing.T) {
	can := testtool.NewCanary(t)
	routes := map[string]string{
		"direct": "direct://",
		"http":   "http://" + testtool.Tinyproxy(t, "", ""),
		"socks5": "socks5://" + testtool.Microsocks(t, "", ""),
	}
	for kind, u := range routes {
		t.Run(kind, func(t *testing.T) {
			r := startRotor(t, fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
listeners:
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes, connect_ports: [%s]}
pools:
  - name: routes
    endpoints:
      - {name: %s, url: %q}
`, can.Port, kind, u), nil)
			for _, form := range ssrfForms {
				target := form + ":" + can.Port
				for _, req := range []string{
					"GET http://" + target + "/ HTTP/1.1\r\nHost: " + target + "\r\n\r\n",
					"CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n",
				} {
					status := rawStatus(t, r.Addr("out").String(), req)
					if status != 403 && status != 400 {
						t.Errorf("%s over %s: %d, want it refused (403)", strings.Fields(req)[0]+" "+target, kind, status)
					}
				}
			}
		})
	}
	time.Sleep(100 * time.Millisecond) // a late dial would land now
	if n := can.Conns(); n != 0 {
		t.Fatalf("%d connections reached loopback through the forward proxy", n)
	}
}

// rawSend sends req on a new connection to addr and reads the answer's
// head; the caller closes the connection.
func rawSend(t *testing.T, addr, req string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		c.Close()
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: strings.Fields(req)[0]})
	if err != nil {
		c.Close()
		t.Fatalf("%q: %v", req, err)
	}
	return c, br, resp
}

// rawStatus sends req on a new connection to addr and returns the
// answer's status.
func rawStatus(t *testing.T, addr, req string) int {
	t.Helper()
	c, _, resp := rawSend(t, addr, req)
	defer c.Close()
	resp.Body.Close()
	return resp.StatusCode
}

// rawExchange sends req on a new connection and returns the answer, and
// whether the server closed the connection after it.
func rawExchange(t *testing.T, addr, req string) (*http.Response, string, bool) {
	t.Helper()
	c, br, resp := rawSend(t, addr, req)
	defer c.Close()
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := br.ReadByte()
	closed := err == io.EOF
	return resp, string(body), closed
}

// A client's malformed body is the client's: 400 to it, and nothing
// charged to the endpoint, however often it is sent.
func TestMalformedBodyIsTheClients(t *testing.T) {
	a := newBackend(t, "a")
	r := startRotor(t, webConfig("round_robin", a), nil)
	for range 9 {
		resp, _, closed := rawExchange(t, r.Addr("web").String(),
			"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nnot a chunk\r\n0\r\n\r\n")
		if resp.StatusCode != 400 || !closed {
			t.Fatalf("a bad chunk size: %d (closed %v), want 400 and the connection closed", resp.StatusCode, closed)
		}
	}
	s := r.Pools()[0].Snapshot.Get("a").Snapshot(time.Now())
	if s.Failures != 0 || s.BreakerName != "closed" {
		t.Fatalf("the endpoint was charged for the client's body: %d failures, breaker %s", s.Failures, s.BreakerName)
	}
	if code, body := get(t, r.url("web")); code != 200 || body != "a" {
		t.Fatalf("after the bad bodies: %d %q", code, body)
	}
}

// RFC 9112, 6.1: a request framed by both Content-Length and
// Transfer-Encoding is served by its chunks, and its connection closed.
func TestContentLengthWithTransferEncodingCloses(t *testing.T) {
	a := newBackend(t, "a")
	r := startRotor(t, webConfig("round_robin", a), nil)
	resp, body, closed := rawExchange(t, r.Addr("web").String(),
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
	if resp.StatusCode != 200 || body != "a" || !closed {
		t.Fatalf("CL+TE: %d %q, closed %v; want served and the connection closed", resp.StatusCode, body, closed)
	}
	// A plain request keeps its connection.
	resp, _, closed = rawExchange(t, r.Addr("web").String(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 200 || closed {
		t.Fatalf("a plain GET: %d, closed %v; want kept alive", resp.StatusCode, closed)
	}
}

// A slow body is cut at the body timeout (408) and a large one refused
// (413); neither is charged to the endpoint, and the backend's connection
// is not held.
func TestBodyLimits(t *testing.T) {
	a := newBackend(t, "a")
	cfg := strings.Replace(webConfig("round_robin", a),
		`listen: "127.0.0.1:0", routes:`, `listen: "127.0.0.1:0", max_body_bytes: 1000, timeouts: {body: 300ms}, routes:`, 1)
	r := startRotor(t, cfg, nil)
	addr := r.Addr("web").String()
	// Announced too large: refused before any byte is read.
	resp, _, closed := rawExchange(t, addr, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n")
	if resp.StatusCode != 413 || !closed {
		t.Fatalf("Content-Length 5000 over 1000: %d closed %v, want 413", resp.StatusCode, closed)
	}
	// Over the limit and sent whole with its head (a body in hand, which
	// is not wrapped in the limits' reader): refused by its length.
	resp, _, _ = rawExchange(t, addr, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n"+strings.Repeat("y", 1001))
	if resp.StatusCode != 413 {
		t.Fatalf("a whole body of 1001 over 1000: %d, want 413", resp.StatusCode)
	}
	// Chunked past the limit: cut while read.
	big := strings.Repeat("x", 1500)
	resp, _, _ = rawExchange(t, addr, fmt.Sprintf("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(big), big))
	if resp.StatusCode != 413 {
		t.Fatalf("a chunked body over the limit: %d, want 413", resp.StatusCode)
	}
	// Slow: one byte, then nothing.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	fmt.Fprint(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nx")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	sresp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); sresp.StatusCode != 408 || d < 250*time.Millisecond || d > 3*time.Second {
		t.Fatalf("a stalled body: %d after %v, want 408 after about 300ms", sresp.StatusCode, d)
	}
	s := r.Pools()[0].Snapshot.Get("a").Snapshot(time.Now())
	if s.Failures != 0 {
		t.Fatalf("the endpoint was charged %d failures for the clients' bodies", s.Failures)
	}
	// A body under the limits passes, and one at the limit.
	resp, body, _ := rawExchange(t, addr, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
	if resp.StatusCode != 200 || body != "a" {
		t.Fatalf("a small body: %d %q", resp.StatusCode, body)
	}
	resp, body, _ = rawExchange(t, addr, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"+strings.Repeat("y", 1000))
	if resp.StatusCode != 200 || body != "a" {
		t.Fatalf("a whole body at the limit: %d %q", resp.StatusCode, body)
	}
}

// max_header_bytes is exact: a head over it is 431 (and a URI over it
// 414), not 4 KiB later.
func TestMaxHeaderBytesIsExact(t *testing.T) {
	a := newBackend(t, "a")
	cfg := strings.Replace(webConfig("round_robin", a),
		`listen: "127.0.0.1:0", routes:`, `listen: "127.0.0.1:0", max_header_bytes: 2000, routes:`, 1)
	r := startRotor(t, cfg, nil)
	addr := r.Addr("web").String()
	for _, tc := range []struct {
		name, req string
		want      int
	}{
		{"under", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 1500) + "\r\n\r\n", 200},
		// 34 bytes and the value: at the limit, and a byte over it.
		{"at the limit", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 1966) + "\r\n\r\n", 200},
		{"a byte over", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 1967) + "\r\n\r\n", 431},
		{"a byte over by the Cache-Control a Pragma adds", "GET / HTTP/1.1\r\nHost: x\r\nPragma: no-cache\r\nX-Big: " +
			strings.Repeat("a", 1967-len("Pragma: no-cache\r\nCache-Control: no-cache\r\n")) + "\r\n\r\n", 431},
		{"a 3000-byte header", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 3000) + "\r\n\r\n", 431},
		{"a 2500-byte URI", "GET /" + strings.Repeat("a", 2500) + " HTTP/1.1\r\nHost: x\r\n\r\n", 414},
	} {
		if got := rawStatus(t, addr, tc.req); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
	if n := a.count(); n != 2 {
		t.Fatalf("the backend saw %d requests, want only the two within the limit", n)
	}
}

// X-Real-IP from a client that is not trusted is replaced by its address,
// as X-Forwarded-For is.
func TestXRealIPReplaced(t *testing.T) {
	a := newBackend(t, "a")
	r := startRotor(t, webConfig("round_robin", a), nil)
	get(t, r.url("web"), "X-Real-IP", "10.9.9.9")
	if got := a.lastRequest().Header.Get("X-Real-IP"); got != "127.0.0.1" {
		t.Fatalf("X-Real-IP at the backend: %q, want the client's address 127.0.0.1", got)
	}
}

// fds counts this process's open file descriptors.
func fds(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd here")
	}
	return len(entries)
}

// A proxied TCP connection costs its two sockets, no splice pipes, and
// gives them back when it closes, without waiting for a GC.
func TestTCPConnectionsUseTwoDescriptors(t *testing.T) {
	echo := testtool.Echo(t)
	r := startRotor(t, fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
listeners:
  - {name: db, kind: tcp, listen: "127.0.0.1:0", pool: dbs}
pools:
  - name: dbs
    endpoints:
      - {name: echo, address: %q}
`, echo), nil)
	before := fds(t)
	const n = 100
	conns := make([]net.Conn, n)
	payload := strings.Repeat("x", 100_000) // large enough for io.Copy to choose its fastest path
	for i := range conns {
		c, err := net.Dial("tcp", r.Addr("db").String())
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
		go func() { _, _ = io.WriteString(c, payload) }()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, make([]byte, len(payload))); err != nil {
			t.Fatal(err)
		}
	}
	// Each connection here is four descriptors in this process: the
	// client's, rotor's two, and the echo server's.
	if per := float64(fds(t)-before) / n; per > 4.5 {
		t.Fatalf("%.1f descriptors per proxied connection, want 4 (two of them rotor's)", per)
	}
	for _, c := range conns {
		c.Close()
	}
	eventually(t, 5*time.Second, "descriptors given back", func() bool { return fds(t) <= before+2 })
}

// HTTP/2 clients get the listener's stream limit.
func TestHTTP2StreamLimit(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := testtool.SelfSignedFiles(t, dir)
	a := newBackend(t, "a")
	cfg := strings.Replace(webConfig("round_robin", a), "routes:",
		fmt.Sprintf("max_concurrent_streams: 7, tls: {cert: %q, key: %q}, routes:", certFile, keyFile), 1)
	r := startRotor(t, cfg, nil)
	c, err := tls.Dial("tcp", r.Addr("web").String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	streams, err := h2MaxStreams(c)
	if err != nil {
		t.Fatal(err)
	}
	if streams != 7 {
		t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS %d, want 7", streams)
	}
}

// A client that reads nothing of its answer holds neither its connection
// nor the backend's past the listener's idle timeout (nginx's
// send_timeout): the answer's write that makes no progress that long
// ends the request, recorded as the client's (client_gone), not charged
// to the endpoint, and the backend's stream is closed. A client that
// reads slowly but keeps reading is not cut. Over HTTP/1.1, cleartext
// and TLS, and HTTP/2.
func TestStalledReaderIsBounded(t *testing.T) {
	var ended atomic.Int32 // backend streams that ended with a failed write
	var endedPaths sync.Map
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 32<<10)
		rc := http.NewResponseController(w)
		for range 4096 { // 128 MiB at most
			if _, err := w.Write(chunk); err != nil {
				endedPaths.Store(r.URL.Path, true)
				ended.Add(1)
				return
			}
			_ = rc.Flush()
		}
	}))
	t.Cleanup(be.Close)
	r := idleBoundRotor(t, be.URL, "admin: {listen: \"127.0.0.1:0\"}\nlog: {access: true}")
	dial := func(t *testing.T, listener string, alpn string) net.Conn {
		t.Helper()
		addr := r.Addr(listener).String()
		tc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tc.Close() })
		if listener == "web" {
			return tc
		}
		c := tls.Client(tc, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{alpn}})
		if err := c.Handshake(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	waitEnded := func(t *testing.T, want int32, start time.Time) {
		t.Helper()
		eventually(t, 8*time.Second, "the backend's stream ended", func() bool { return ended.Load() >= want })
		if d := time.Since(start); d < 900*time.Millisecond {
			t.Fatalf("the stream ended after %v, before the 1s bound", d)
		}
	}
	// A head over 16 KiB (long cookies) is net/http's server's to read,
	// as is every HTTP/1.1 request where there is no raw socket access
	// (-tags norawio, Windows): its answer's writes are bounded too.
	long := "Cookie: session=" + strings.Repeat("c", 20<<10) + "\r\n"
	var n int32
	for _, tc := range []struct{ name, listener, alpn, fields string }{
		{"HTTP/1.1", "web", "", ""},
		{"HTTP/1.1 over TLS", "secure", "http/1.1", ""},
		{"HTTP/1.1, a head over 16 KiB", "web", "", long},
		{"HTTP/1.1 over TLS, a head over 16 KiB", "secure", "http/1.1", long},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, tc.listener, tc.alpn)
			start := time.Now()
			fmt.Fprint(c, "GET /stream HTTP/1.1\r\nHost: x\r\n"+tc.fields+"\r\n")
			n++
			waitEnded(t, n, start)
			// What rotor had sent is read, then the connection's end.
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("after the stall: %v, want the connection's end", err)
			}
		})
	}
	t.Run("HTTP/2", func(t *testing.T) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		start := time.Now()
		resp, err := (&http.Client{Transport: tr}).Get("https://" + r.Addr("secure").String() + "/stream")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("%s, want HTTP/2", resp.Proto)
		}
		n++
		waitEnded(t, n, start) // the body unread: the stream's window runs out
	})
	for i, fields := range []string{"", long} {
		t.Run(fmt.Sprintf("a slow reader, a head of %d bytes", len(fields)+30), func(t *testing.T) {
			c := dial(t, "web", "")
			path := fmt.Sprintf("/slow%d", i)
			fmt.Fprint(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n"+fields+"\r\n")
			buf := make([]byte, 256<<10)
			start := time.Now()
			for time.Since(start) < 3*time.Second {
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				if _, err := io.ReadFull(c, buf); err != nil {
					t.Fatalf("a client reading 256 KiB every 200 ms was cut after %v: %v", time.Since(start), err)
				}
				time.Sleep(200 * time.Millisecond)
			}
			if _, cut := endedPaths.Load(path); cut {
				t.Fatal("the slow reader's backend stream ended: it was cut")
			}
		})
	}
	eventually(t, 3*time.Second, "the stalled requests logged", func() bool {
		return strings.Count(r.logs.String(), "reason=client_gone") >= int(n)
	})
	if s := r.Pools()[0].Snapshot.Get("a").Snapshot(time.Now()); s.Failures != 0 {
		t.Fatalf("the endpoint was charged %d failures for clients that read nothing", s.Failures)
	}
}

// An upgraded connection is a tunnel, bound by timeouts.tunnel alone: a
// client that reads nothing of it for longer than the listener's idle
// timeout (the bound of an answer's writes) and then reads on gets every
// byte, over cleartext (relayed in the event loop, or without rawio
// through the connection net/http's server hijacked) and over TLS (the
// short way's socket under the TLS connection either way).
func TestUpgradedReaderWaitsPastIdle(t *testing.T) {
	const size = 32 << 20
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: push\r\nConnection: Upgrade\r\n\r\n")
		if brw.Flush() != nil {
			return
		}
		chunk := make([]byte, 64<<10)
		for range size / len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(be.Close)
	r := idleBoundRotor(t, be.URL, `admin: {listen: "off"}`)
	for _, listener := range []string{"web", "secure"} {
		t.Run(listener, func(t *testing.T) {
			var c net.Conn
			c, err := net.Dial("tcp", r.Addr(listener).String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if listener == "secure" {
				c = tls.Client(c, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
			}
			fmt.Fprint(c, "GET /push HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: push\r\n\r\n")
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("%v %v, want 101", resp, err)
			}
			time.Sleep(2500 * time.Millisecond) // reading nothing, past the idle timeout
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			n, err := io.Copy(io.Discard, br)
			if n != size {
				t.Fatalf("read %d bytes of %d after the pause (%v): the tunnel was cut", n, size, err)
			}
		})
	}
}

// idleBoundRotor starts a rotor with head (its admin and log settings)
// and two http listeners whose idle timeout is 1s, cleartext (web) and
// TLS (secure), over the one backend at url.
func idleBoundRotor(t *testing.T, url, head string) *rotor {
	t.Helper()
	certFile, keyFile := testtool.SelfSignedFiles(t, t.TempDir())
	return startRotor(t, fmt.Sprintf(`%s
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app, timeouts: {idle: 1s}}
  - {name: secure, kind: http, listen: "127.0.0.1:0", pool: app, timeouts: {idle: 1s}, tls: {cert: %q, key: %q}}
pools:
  - name: app
    endpoints:
      - {name: a, url: %q}
`, head, certFile, keyFile, url), nil)
}
