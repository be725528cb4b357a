package server_test

import (
	"bufio"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/internal/rawio"
	"github.com/rotor-lb/rotor/internal/testtool"
)

// echoServer is a TCP server that echoes each line back, prefixed by name.
func echoServer(t *testing.T, name string) net.Listener {
	t.Helper()
	return testtool.ServeTCP(t, func(c net.Conn) {
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			fmt.Fprintf(c, "%s:%s\n", name, sc.Text())
		}
	})
}

func TestTCPProxy(t *testing.T) {
	one, two := echoServer(t, "one"), echoServer(t, "two")
	dead := deadAddr(t) // a refused dial, retried elsewhere
	cfg := fmt.Sprintf(`admin: {listen: "off"}
listeners:
  - {name: db, kind: tcp, listen: "127.0.0.1:0", pool: pg}
pools:
  - name: pg
    policy: round_robin
    retries: {attempts: 3}
    endpoints:
      - {name: one, address: %q}
      - {name: dead, address: %q}
      - {name: two, address: %q}
`, one.Addr(), dead, two.Addr())
	r := startRotor(t, cfg, nil)
	seen := map[string]int{}
	for i := range 12 {
		c, err := net.Dial("tcp", r.Addr("db").String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "hello %d\n", i)
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		who, rest, _ := strings.Cut(strings.TrimSpace(line), ":")
		if rest != fmt.Sprintf("hello %d", i) {
			t.Fatalf("echo %q", line)
		}
		seen[who]++
	}
	if seen["one"] == 0 || seen["two"] == 0 || seen["one"]+seen["two"] != 12 {
		t.Fatalf("connections per endpoint %v", seen)
	}
}

var loopRelays = regexp.MustCompile(`(?m)^rotor_relay_loop_relays\{loop="(\d+)"\} (\d+)$`)

// The relay loops show in the metrics: the connections a tcp listener
// relays count on the loops while they are open, and leave them as they
// end; each loop has its full flag and its moves.
func TestRelayLoopMetrics(t *testing.T) {
	if runtime.GOOS != "linux" || !rawio.Supported {
		t.Skip("the relay loops are Linux's, with raw socket access (not -tags norawio)")
	}
	one := echoServer(t, "one")
	cfg := fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
listeners:
  - {name: db, kind: tcp, listen: "127.0.0.1:0", pool: pg}
pools:
  - name: pg
    endpoints:
      - {name: one, address: %q}
`, one.Addr().String())
	r := startRotor(t, cfg, nil)
	admin := "http://" + r.Addr("admin").String() + "/metrics"
	// relays sums rotor_relay_loop_relays over the loops, numbered from
	// 0, and checks that each has all three series.
	relays := func() int {
		_, metrics := get(t, admin)
		sum := 0
		found := loopRelays.FindAllStringSubmatch(metrics, -1)
		for i, m := range found {
			if m[1] != strconv.Itoa(i) {
				t.Fatalf("/metrics numbers the relay loops %q, not from 0 on", found)
			}
			n, _ := strconv.Atoi(m[2])
			sum += n
			for _, name := range []string{"rotor_relay_loop_full", "rotor_relay_loop_moved_total"} {
				if !strings.Contains(metrics, fmt.Sprintf("%s{loop=%q} ", name, m[1])) {
					t.Fatalf("/metrics has loop %s's relays and no %s for it", m[1], name)
				}
			}
		}
		return sum
	}
	var conns []net.Conn
	for i := range 3 {
		c, err := net.Dial("tcp", r.Addr("db").String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "hello %d\n", i)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != fmt.Sprintf("one:hello %d\n", i) {
			t.Fatalf("through the tcp listener: %q, %v", line, err)
		}
		conns = append(conns, c)
	}
	open := 0
	eventually(t, 3*time.Second, "the three connections on the relay loops", func() bool {
		open = relays()
		return open >= 3
	})
	for _, c := range conns {
		c.Close()
	}
	eventually(t, 3*time.Second, "the three connections off the relay loops", func() bool {
		return relays() <= open-3
	})
}

func TestStickyCookie(t *testing.T) {
	a, b, c := newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")
	cfg := webConfig("round_robin", a, b, c) + `    sticky_cookie: {name: pin, secret: "${STICKY_SECRET}"}
`
	r := startRotor(t, cfg, map[string]string{"STICKY_SECRET": "0123456789abcdef-not-a-real-secret"})
	resp, err := client.Get(r.url("web"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var pin *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "pin" {
			pin = ck
		}
	}
	if pin == nil || !pin.HttpOnly {
		t.Fatalf("no HttpOnly pin cookie set: %v", resp.Header["Set-Cookie"])
	}
	for range 10 {
		if _, got := get(t, r.url("web"), "Cookie", "pin="+pin.Value); got != string(body) {
			t.Fatalf("pinned to %s, went to %s", body, got)
		}
	}
	// A forged cookie naming another endpoint is ignored.
	forged := strings.Replace(pin.Value, pin.Value[:2], "Yg", 1) // "b" in base64
	codes := map[string]int{}
	for range 9 {
		_, got := get(t, r.url("web"), "Cookie", "pin="+forged)
		codes[got]++
	}
	if len(codes) < 2 {
		t.Fatalf("a forged cookie pinned the client: %v", codes)
	}
}

func TestBackupTakesOverOnlyWhenPrimariesAreOut(t *testing.T) {
	a, spare := newBackend(t, "a"), newBackend(t, "spare")
	cfg := fmt.Sprintf(`admin: {listen: "off"}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app}
pools:
  - name: app
    endpoints:
      - {name: a, url: %q}
      - {name: spare, url: %q, backup: true}
`, a.url(), spare.url())
	r := startRotor(t, cfg, nil)
	for range 20 {
		if _, body := get(t, r.url("web")); body != "a" {
			t.Fatalf("backup served while the primary was up: %q", body)
		}
	}
	r.Pools()[0].Snapshot.Get("a").State.SetDown(true, time.Now())
	for range 10 {
		if code, body := get(t, r.url("web")); code != 200 || body != "spare" {
			t.Fatalf("primary down: %d %q, want the backup", code, body)
		}
	}
}

func TestPanicThresholdSpreadsOverAll(t *testing.T) {
	a, b, c, d := newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c"), newBackend(t, "d")
	cfg := webConfig("round_robin", a, b, c, d) + "    health: {panic_threshold: 0.5}\n"
	r := startRotor(t, cfg, nil)
	pv := r.Pools()[0]
	for _, n := range []string{"b", "c", "d"} {
		pv.Snapshot.Get(n).State.SetDown(true, time.Now())
	}
	for range 80 {
		get(t, r.url("web"))
	}
	if a.count() > 40 || b.count() == 0 || c.count() == 0 || d.count() == 0 {
		t.Fatalf("1 of 4 healthy, under the panic threshold: a %d b %d c %d d %d, want the load spread", a.count(), b.count(), c.count(), d.count())
	}
}

func TestWebSocketUpgradeAndStreaming(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ws":
			if r.Header.Get("Upgrade") != "websocket" {
				http.Error(w, "no upgrade", 400)
				return
			}
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			fmt.Fprint(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			rw.Flush()
			line, _ := rw.ReadString('\n')
			fmt.Fprintf(rw, "echo %s", line)
			rw.Flush()
		case "/sse":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: first\n\n")
			http.NewResponseController(w).Flush()
			time.Sleep(time.Second) // the first event must arrive before this ends
			fmt.Fprint(w, "data: second\n\n")
		}
	}))
	t.Cleanup(be.Close)
	a := &backend{&testtool.Backend{Server: be, Name: "ws"}}
	r := startRotor(t, webConfig("round_robin", a), nil)

	conn, err := net.Dial("tcp", r.Addr("web").String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	fmt.Fprint(conn, "ping\n")
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	if line, err := br.ReadString('\n'); err != nil || line != "echo ping\n" {
		t.Fatalf("through the tunnel: %q %v", line, err)
	}

	start := time.Now()
	sresp, err := client.Get(r.url("web") + "/sse")
	if err != nil {
		t.Fatal(err)
	}
	defer sresp.Body.Close()
	first, err := bufio.NewReader(sresp.Body).ReadString('\n')
	if err != nil || first != "data: first\n" || time.Since(start) > 800*time.Millisecond {
		t.Fatalf("first event %q after %v (%v): streams must flush at once", first, time.Since(start), err)
	}
}

func TestHTTP2OverTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := testtool.SelfSignedFiles(t, dir)
	a := newBackend(t, "a")
	cfg := strings.Replace(webConfig("round_robin", a), "routes:", fmt.Sprintf("tls: {cert: %q, key: %q}, routes:", certFile, keyFile), 1)
	r := startRotor(t, cfg, nil)
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("https://" + r.Addr("web").String())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.ProtoMajor != 2 || string(body) != "a" {
		t.Fatalf("%s %q, want HTTP/2 and a", resp.Proto, body)
	}
}

// A request body of no known length (chunked, or an HTTP/2 request's
// without a content-length) that ends within 64 KiB reaches the backend
// with its length, as nginx sends a body it has read, however it came:
// whole with its head, or its last chunk apart (as curl and Python's
// clients send it), after a 100 Continue, over HTTP/2, through the
// forward listener. A backend that takes no chunked request (411, as WSGI
// servers and Python's http.server answer one) takes them all. A longer
// body, and one declaring trailers, go on chunked as they came.
func TestChunkedBodyGoesWithItsLength(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/live" {
			// Answers the first five bytes as they come, then reads the rest.
			http.NewResponseController(w).EnableFullDuplex()
			first := make([]byte, 5)
			_, err := io.ReadFull(r.Body, first)
			answer := fmt.Sprintf("%d %q %v", r.ContentLength, first, err)
			w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
			io.WriteString(w, answer)
			w.(http.Flusher).Flush()
			io.Copy(io.Discard, r.Body)
			return
		}
		if r.ContentLength < 0 && !strings.HasPrefix(r.URL.Path, "/stream") {
			http.Error(w, "length required", http.StatusLengthRequired)
			return
		}
		b, err := io.ReadAll(r.Body)
		sum := sha256.Sum256(b)
		fmt.Fprintf(w, "%d %d %x expect=%q trailer=%q %v", r.ContentLength, len(b), sum[:4], r.Header.Get("Expect"), r.Trailer.Get("X-Sum"), err)
	}))
	t.Cleanup(be.Close)
	r := startRotor(t, fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app, routes: [{match: {path_prefix: /live}, pool: live}, {match: {path_prefix: /stream-small}, pool: small}]}
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes, allow_targets: [127.0.0.0/8]}
pools:
  - {name: app, endpoints: [{name: a, url: %[1]q}]}
  - {name: live, request_buffering: false, endpoints: [{name: a, url: %[1]q}]}
  - {name: small, request_buffer_bytes: 100000, endpoints: [{name: a, url: %[1]q}]}
  - {name: routes, endpoints: [{name: direct, url: "direct://"}]}
`, be.URL), nil)
	want := func(cl int, body, trailer string) string {
		sum := sha256.Sum256([]byte(body))
		return fmt.Sprintf("%d %d %x expect=\"\" trailer=%q <nil>", cl, len(body), sum[:4], trailer)
	}
	chunks := func(body string, size int) string {
		var b strings.Builder
		for ; len(body) > 0; body = body[min(size, len(body)):] {
			fmt.Fprintf(&b, "%x\r\n%s\r\n", min(size, len(body)), body[:min(size, len(body))])
		}
		return b.String()
	}
	long := strings.Repeat("0123456789", 7000) // 70,000 bytes: over 64 KiB
	longer := strings.Repeat(long, 3)          // over the small pool's request_buffer_bytes
	head := "POST /c HTTP/1.1\r\nHost: h.test\r\nTransfer-Encoding: chunked\r\n"
	for _, tc := range []struct {
		name, head, rest string
		expect           bool // the head asks for 100 Continue: the rest goes after it
		want             string
	}{
		{"whole with its head", head + "\r\n" + chunks("hello, world", 5) + "0\r\n\r\n", "", false, want(12, "hello, world", "")},
		{"its last chunk apart", head + "\r\n" + chunks("hello, world", 5), "0\r\n\r\n", false, want(12, "hello, world", "")},
		{"after 100 Continue", head + "Expect: 100-continue\r\n\r\n", chunks("hello, world", 7) + "0\r\n\r\n", true, want(12, "hello, world", "")},
		{"through the forward listener", strings.Replace(head, "/c", be.URL+"/c", 1) + "\r\n" + chunks("hello", 2), "0\r\n\r\n", false, want(5, "hello", "")},
		{"longer than 64 KiB, spooled", head + "\r\n" + chunks(long, 4096), "0\r\n\r\n", false, want(len(long), long, "")},
		{"longer than 64 KiB, spooled, after 100 Continue", head + "Expect: 100-continue\r\n\r\n", chunks(long, 4096) + "0\r\n\r\n", true, want(len(long), long, "")},
		{"spooled through the forward listener", strings.Replace(head, "/c", be.URL+"/c", 1) + "\r\n" + chunks(long, 4096), "0\r\n\r\n", false, want(len(long), long, "")},
		{"longer than request_buffer_bytes", strings.Replace(head, "/c", "/stream-small", 1) + "\r\n" + chunks(longer, 4096), "0\r\n\r\n", false, want(-1, longer, "")},
		{"declaring a trailer", strings.Replace(head, "/c", "/stream", 1) + "Trailer: X-Sum\r\n\r\n" + chunks("hello", 5), "0\r\nX-Sum: 5\r\n\r\n", false, want(-1, "hello", "5")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			listener := "web"
			if strings.Contains(tc.head, "http://") {
				listener = "out"
			}
			c, err := net.Dial("tcp", r.Addr(listener).String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			io.WriteString(c, tc.head)
			if tc.expect {
				resp, err := http.ReadResponse(br, nil)
				if err != nil || resp.StatusCode != http.StatusContinue {
					t.Fatalf("%v, %v; want 100 Continue", resp, err)
				}
			} else {
				time.Sleep(50 * time.Millisecond)
			}
			io.WriteString(c, tc.rest)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || string(body) != tc.want {
				t.Fatalf("answered %d %q, want 200 %q (a second 100 Continue, or the backend's 411, is wrong)", resp.StatusCode, body, tc.want)
			}
		})
	}

	// A pool that streams them (request_buffering: false): the body goes
	// on as it comes, chunked, and the backend answers its first bytes
	// before the client has sent the rest. (Not where net/http's server
	// reads the request, -tags norawio: its body's Close, once the
	// answer's head came, waits for the read in flight, which waits for
	// the client.)
	if rawio.Supported {
		c := dialWeb(t, r)
		br := bufio.NewReader(c)
		io.WriteString(c, strings.Replace(head, "/c", "/live", 1)+"\r\n"+chunks("hello", 5))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("streamed: %v (the body held back?)", err)
		}
		if body, _ := io.ReadAll(resp.Body); string(body) != `-1 "hello" <nil>` {
			t.Fatalf("streamed: %q, want the first chunk answered, chunked", body)
		}
		io.WriteString(c, "0\r\n\r\n")
	}

	// HTTP/2 without TLS, a body of no known length (no content-length).
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	defer tr.CloseIdleConnections()
	pr, pw := io.Pipe()
	go func() {
		for _, s := range []string{"hello", ", ", "world"} {
			pw.Write([]byte(s))
			time.Sleep(10 * time.Millisecond)
		}
		pw.Close()
	}()
	req, _ := http.NewRequest(http.MethodPost, r.url("web")+"/h2", pr)
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || string(body) != want(12, "hello, world", "") {
		t.Fatalf("HTTP/2: %s %d %q, want %q", resp.Proto, resp.StatusCode, body, want(12, "hello, world", ""))
	}
}

// Bodies read as the listener's handler reads them (chunked, or longer
// than the 64 KiB read before it runs) reach the backend whole (a chunked
// one read ahead with its length), and the
// client's connection stays open for the requests after them, none
// answered with a close: a chunked request framed once does not close
// its connection (one framed both ways does, net/http's, and so does
// every chunked one where net/http's server reads them all).
func TestStreamedBodiesKeepTheConnection(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%d %d %x %v", r.ContentLength, len(b), sha256.Sum256(b), err)
	}))
	t.Cleanup(be.Close)
	cfg := webConfig("round_robin", &backend{&testtool.Backend{Server: be, Name: "a"}})
	r := startRotor(t, strings.Replace(cfg, "    policy: round_robin\n", "    policy: round_robin\n    request_buffer_bytes: 100000\n", 1), nil)
	long := strings.Repeat("0123456789", 30000)
	medium := long[:80000]
	chunked := func(body string, size int) string {
		var b strings.Builder
		b.WriteString("POST /c HTTP/1.1\r\nHost: h.test\r\nTransfer-Encoding: chunked\r\n\r\n")
		for ; len(body) > 0; body = body[min(size, len(body)):] {
			fmt.Fprintf(&b, "%x\r\n%s\r\n", min(size, len(body)), body[:min(size, len(body))])
		}
		return b.String() + "0\r\nX-Sum: 1\r\n\r\n"
	}
	want := func(cl int, body string) string {
		return fmt.Sprintf("%d %d %x <nil>", cl, len(body), sha256.Sum256([]byte(body)))
	}
	var c net.Conn // one connection for them all
	var br *bufio.Reader
	for _, tc := range []struct{ name, req, want string }{
		// Read ahead whole, and sent with its length (proxy.ReadAhead).
		{"chunked", chunked("hello, world", 5), want(12, "hello, world")},
		{"long", fmt.Sprintf("PUT /l HTTP/1.1\r\nHost: h.test\r\nContent-Length: %d\r\n\r\n%s", len(long), long), want(len(long), long)},
		// Read ahead into a file, and sent with its length.
		{"medium chunked", chunked(medium, 16<<10), want(len(medium), medium)},
		// Longer than the pool's request_buffer_bytes: what was read
		// ahead first, then the rest as it comes, chunked.
		{"long chunked", chunked(long, 64<<10), want(-1, long)},
		{"after them", "GET /g HTTP/1.1\r\nHost: h.test\r\n\r\n", want(0, "")},
	} {
		var resp *http.Response
		if c == nil {
			c, br, resp = rawSend(t, r.Addr("web").String(), tc.req)
			defer c.Close()
		} else {
			io.WriteString(c, tc.req)
			var err error
			if resp, err = http.ReadResponse(br, nil); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
		got, _ := io.ReadAll(resp.Body)
		// Without raw socket access (-tags norawio) net/http's server
		// reads every request, and a chunked one closes its connection.
		wantClose := !rawio.Supported && strings.Contains(tc.req, "chunked")
		if string(got) != tc.want || resp.Close != wantClose {
			t.Errorf("%s: %q (close %v), want %q (close %v)", tc.name, got, resp.Close, tc.want, wantClose)
		}
		if resp.Close {
			c.Close()
			c = nil
		}
	}
	resp, _, _ := rawExchange(t, r.Addr("web").String(), "POST /b HTTP/1.1\r\nHost: h.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
	if resp == nil || !resp.Close {
		t.Errorf("a request framed both ways: %v, want its connection closed after it", resp)
	}
}

// HTTP/1.1 on a TLS listener: a plain GET (the short way's) and then a
// POST with a chunked body (read as the handler reads it) each
// reach the backend as a request that came over TLS (X-Forwarded-Proto
// https), the second on the first's connection.
func TestHTTP1OverTLS(t *testing.T) {
	certFile, keyFile := testtool.SelfSignedFiles(t, t.TempDir())
	a := newBackend(t, "a")
	cfg := strings.Replace(webConfig("round_robin", a), "routes:", fmt.Sprintf("tls: {cert: %q, key: %q}, routes:", certFile, keyFile), 1)
	r := startRotor(t, cfg, nil)
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}} // HTTP/1.1 alone
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	reused := make([]bool, 0, 2)
	for _, method := range []string{"GET", "POST"} {
		var body io.Reader
		if method == "POST" {
			body = struct{ io.Reader }{strings.NewReader("hello")} // no length: chunked
		}
		req, _ := http.NewRequest(method, "https://"+r.Addr("web").String()+"/x", body)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) { reused = append(reused, info.Reused) }}))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 1 || string(got) != "a" {
			t.Fatalf("%s: %s %q, want HTTP/1.1 and a", method, resp.Proto, got)
		}
		last := a.lastRequest()
		if last.Method != method || last.Header.Get("X-Forwarded-Proto") != "https" {
			t.Errorf("%s: the backend had %s with X-Forwarded-Proto %q, want https", method, last.Method, last.Header.Get("X-Forwarded-Proto"))
		}
	}
	if len(reused) != 2 || !reused[1] {
		t.Errorf("connections reused %v: want the POST on the GET's connection", reused)
	}
}

func TestBadConfigRefusedAtStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	_ = os.WriteFile(path, []byte("listeners:\n  - {name: web, kind: http, listen: 127.0.0.1:0, pool: nope}\npools: []\n"), 0o600)
	_, err := newServer(path)
	if err == nil || !strings.Contains(err.Error(), `bad.yaml:2: listeners.web.pool: pool "nope" does not exist`) {
		t.Fatalf("err %v", err)
	}
}

// Secrets in route URLs (a token standing as the user, or a user and a
// password) show nowhere: not in /status, /metrics or the logs, even when
// the routes fail and every failure is logged.
func TestSecretsStayOutOfLogsAndStatus(t *testing.T) {
	a := newBackend(t, "a")
	const token, pass = "tok-canary-5b2c", "pass-canary-7f3a9"
	dead := deadAddr(t)
	cfg := fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
log: {access: true, level: debug}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app}
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes, allow_targets: [127.0.0.0/8]}
pools:
  - name: app
    endpoints:
      - {name: a, url: %q}
  - name: routes
    endpoints:
      - {name: token, url: "http://${TOKEN}:@%s"}
      - {name: both, url: "socks5://${TOKEN}:${PASS}@%s"}
`, a.url(), dead, dead)
	r := startRotor(t, cfg, map[string]string{"TOKEN": token, "PASS": pass})
	get(t, r.url("web"))
	pu, _ := url.Parse(r.url("out"))
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}, Timeout: 10 * time.Second}
	for range 4 {
		if resp, err := c.Get(a.url()); err == nil {
			resp.Body.Close()
		}
	}
	code, status := get(t, "http://"+r.Addr("admin").String()+"/status")
	_, metrics := get(t, "http://"+r.Addr("admin").String()+"/metrics")
	for what, text := range map[string]string{"status": status, "metrics": metrics, "logs": r.logs.String()} {
		for _, secret := range []string{token, pass} {
			if strings.Contains(text, secret) {
				t.Errorf("%s shows %s:\n%s", what, secret, text)
			}
		}
	}
	if code != 200 || !strings.Contains(status, "http://xxxxx@") || !strings.Contains(status, "socks5://xxxxx@") {
		t.Fatalf("status does not show the masked routes (%d):\n%s", code, status)
	}
	if !strings.Contains(r.logs.String(), "forward failed") {
		t.Fatalf("the route failures were not logged:\n%s", r.logs.String())
	}
	// A reload refused over a URL that quotes the token: not in the API's
	// answer, /status or the log either.
	r.rewrite(t, strings.Replace(cfg, "http://${TOKEN}:@", "ftp://${TOKEN}:@", 1))
	resp, err := http.Post("http://"+r.Addr("admin").String()+"/admin/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	refusal, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	_, status = get(t, "http://"+r.Addr("admin").String()+"/status")
	if resp.StatusCode != 400 || !strings.Contains(string(refusal), `must be direct, http or socks5`) {
		t.Fatalf("the bad reload: %d %s", resp.StatusCode, refusal)
	}
	for what, text := range map[string]string{"the reload's answer": string(refusal), "status": status, "logs": r.logs.String()} {
		if strings.Contains(text, token) || strings.Contains(text, pass) {
			t.Errorf("%s shows a secret after a refused reload:\n%s", what, text)
		}
	}
	for _, want := range []string{
		`rotor_requests_total{code="200",endpoint="a",kind="http",listener="web",pool="app"} 1`,
		`rotor_request_duration_seconds_bucket{listener="web",pool="app"`,
		`rotor_endpoint_breaker_state{endpoint="a",pool="app",state="closed"} 1`,
		`rotor_endpoint_picks_total{endpoint="a",policy="round_robin",pool="app"} 1`,
		`rotor_endpoint_score{endpoint="a",pool="app"}`,
		`rotor_endpoint_inflight{endpoint="a",pool="app"} 0`,
		`rotor_pool_fallbacks_total{pool="app"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// New endpoints start healthy, so a reload adding one produces no 503;
// with wait_first_check they take nothing until their checks pass.
func TestWaitFirstCheck(t *testing.T) {
	a, b := newBackend(t, "a"), newBackend(t, "b")
	b.set(500, 0) // fails its checks
	checks := "    health:\n      check: {path: /healthz, interval: 50ms, timeout: 40ms, rise: 1, fall: 100}\n"
	r := startRotor(t, webConfig("round_robin", a)+checks, nil)
	r.rewrite(t, webConfig("round_robin", a, b)+checks+"      wait_first_check: true\n")
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if _, body := get(t, r.url("web")); body != "a" {
			t.Fatalf("an endpoint waiting for its first check served: %q", body)
		}
	}
	b.set(0, 0)
	eventually(t, 2*time.Second, "b in service after its check passed", func() bool {
		_, body := get(t, r.url("web"))
		return body == "b"
	})
}

// A reload that leaves a pool's policy settings as they were keeps the
// policy itself, and with it its state (here a sticky table), gamma set or
// not.
func TestReloadKeepsPolicy(t *testing.T) {
	a, b := newBackend(t, "a"), newBackend(t, "b")
	cfg := webConfig("sticky", a, b) + "    gamma: 2\n    key: {header: X-User}\n"
	r := startRotor(t, cfg, nil)
	before := r.Pools()[0].Sticky
	if before == nil {
		t.Fatal("no sticky policy")
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if after := r.Pools()[0].Sticky; after != before {
		t.Fatal("an unchanged reload replaced the policy, and lost its table")
	}
	r.rewrite(t, strings.Replace(cfg, "gamma: 2", "gamma: 3", 1))
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if after := r.Pools()[0].Sticky; after == before {
		t.Fatal("changed settings kept the old policy")
	}
}
