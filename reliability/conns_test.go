package reliability_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/rotor-lb/rotor/internal/testtool"
)

// Thousands of idle keep-alive connections: what each costs in memory,
// no goroutine once parked, and goroutines and descriptors back to where
// they were once they close.
func TestIdleKeepAlive(t *testing.T) {
	a := newBackend(t, "a")
	p := start(t, webConfig("", a))
	exchange(t, p.addr("web"), "GET / HTTP/1.1\r\nHost: x\r\n\r\n") // warm: one backend connection
	time.Sleep(200 * time.Millisecond)
	baseRSS, baseG, baseFD := p.rss(), p.metric("go_goroutines"), p.fds()
	n := scale(1000, 10000)
	conns := holdIdle(t, n, func() net.Conn {
		c := rawConn(t, p.addr("web"))
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		getOn(t, c)
		return c
	})
	time.Sleep(parkWait)
	rss, g, fds := p.rss(), p.metric("go_goroutines"), p.fds()
	per := float64(rss-baseRSS) / float64(n)
	for _, c := range conns {
		c.Close()
	}
	back := eventually(t, 15*time.Second, "goroutines and descriptors back", func() bool {
		return p.metric("go_goroutines") <= baseG+5 && p.fds() <= baseFD+5
	})
	figure(t, "idle keep-alive connections", "%d idle: %.1f KB RSS each, %.0f goroutines and %d descriptors more; all back within %v of closing",
		n, per/1024, g-baseG, fds-baseFD, back.Round(10*time.Millisecond))
	if fds-baseFD < n || fds-baseFD > n+20 {
		t.Fatalf("%d descriptors for %d idle connections, want one each", fds-baseFD, n)
	}
	// Idle a second, each waits in the park with no goroutine.
	if g-baseG > float64(n)/10 {
		t.Fatalf("%d idle connections hold %.0f goroutines, want none (parked)", n, g-baseG)
	}
}

// parkWait is long enough for an idle connection of the short way to
// park, after holdIdle's settling: a second idle (proxy/h1's parkTicks),
// the tick that asks it, and the park.
const parkWait = time.Second

// getOn sends a GET on c and reads its answer to the end, leaving c idle.
func getOn(t *testing.T, c net.Conn) {
	t.Helper()
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// holdIdle opens n connections with open, which leaves each idle after
// its exchange, and gives rotor half a second to settle. They are closed
// when the test ends, if not before.
func holdIdle(t *testing.T, n int, open func() net.Conn) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range n {
		conns = append(conns, open())
	}
	time.Sleep(500 * time.Millisecond)
	return conns
}

// idleRelayed measures what n idle relayed connections cost rotor: each
// opened by open (whose conn is then ready for echo64k) after one
// exchange of 64 KiB each way, and held. A relayed connection is two
// sockets in the relay loop: two descriptors, no goroutine waiting for
// it, and, on the heap, no buffer and nothing of a handler's state; more
// than maxHeap bytes each fails the test.
func idleRelayed(t *testing.T, p *proc, what string, n int, maxHeap float64, open func() (net.Conn, *bufio.Reader)) {
	t.Helper()
	opened := func() net.Conn {
		t.Helper()
		c, br := open()
		echo64k(t, c, br)
		return c
	}
	opened().Close() // warm
	time.Sleep(200 * time.Millisecond)
	baseRSS, baseHeap, baseFD, baseG := p.rss(), p.metric("go_memstats_heap_inuse_bytes"), p.fds(), p.metric("go_goroutines")
	holdIdle(t, n, opened)
	rss, heap, fds, g := p.rss(), p.metric("go_memstats_heap_inuse_bytes"), p.fds(), p.metric("go_goroutines")
	perRSS, perHeap, perG := float64(rss-baseRSS)/float64(n), (heap-baseHeap)/float64(n), (g-baseG)/float64(n)
	figure(t, "idle "+what, "%d idle after 64 KiB each way: %.1f KB RSS and %.1f KB of Go heap each, %.2f goroutines each, %d descriptors more",
		n, perRSS/1024, perHeap/1024, perG, fds-baseFD)
	if fds-baseFD < 2*n || fds-baseFD > 2*n+20 {
		t.Fatalf("%d descriptors for %d idle %s, want two each", fds-baseFD, n, what)
	}
	if perG > 0.1 {
		t.Fatalf("%d idle %s hold %.0f goroutines (%.2f each), want none", n, what, g-baseG, perG)
	}
	if perHeap > maxHeap {
		t.Fatalf("%d idle %s hold %.1f KB of heap each: buffers or a handler's state kept while they wait", n, what, perHeap/1024)
	}
}

// echo64k sends 64 KiB on c and reads the same back through br.
func echo64k(t *testing.T, c net.Conn, br *bufio.Reader) {
	t.Helper()
	payload := strings.Repeat("x", 64<<10)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	go func() { _, _ = io.WriteString(c, payload) }()
	if n, err := io.ReadFull(br, make([]byte, len(payload))); err != nil {
		t.Fatalf("echo: %d bytes, %v", n, err)
	}
}

// Thousands of idle proxied TCP connections, each after one exchange of
// 64 KiB each way: what each costs rotor.
func TestIdleTCP(t *testing.T) {
	echo := testtool.Echo(t)
	p := start(t, fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
listeners:
  - {name: db, kind: tcp, listen: "127.0.0.1:0", pool: dbs}
pools:
  - {name: dbs, endpoints: [{name: e, address: %q}]}
`, echo))
	// The heap, not the RSS, which the race detector's shadow memory
	// multiplies: about 3 KB each when run alone, up to 8 KB among the
	// other tests under the race detector (what the exchanges left for the
	// next collection). A 4 KiB buffer held by each direction while it
	// waits would be 8 KB more (two 32 KiB copy buffers, 64 KB).
	idleRelayed(t, p, "TCP connections", scale(1000, 5000), 10<<10, func() (net.Conn, *bufio.Reader) {
		c := rawConn(t, p.addr("db"))
		return c, bufio.NewReader(c)
	})
}

// Thousands of idle upgraded connections (WebSocket-like, through the
// reverse proxy), each after an exchange of 64 KiB each way: what each
// costs rotor once the handler has returned (a waiting handler kept 30 KB
// of its request and of the server's connection).
func TestIdleUpgraded(t *testing.T) {
	// GOGC=10: collected often, so that the heap in use is what is live
	// rather than what each upgrade's exchange left for a collection that
	// the heap's floor would put off.
	p := start(t, webConfig("", &backend{testtool.NewUpgradeEcho(t)}), "GOGC=10")
	idleRelayed(t, p, "upgraded connections", scale(500, 2000), 16<<10, func() (net.Conn, *bufio.Reader) {
		c := rawConn(t, p.addr("web"))
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprint(c, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %v, %v", resp, err)
		}
		return c, br
	})
}

// Thousands of idle CONNECT tunnels through the forward proxy's direct
// route, each after an exchange of 64 KiB each way: what each costs rotor
// once the handler has returned.
func TestIdleConnect(t *testing.T) {
	echo := testtool.Echo(t)
	_, port, _ := net.SplitHostPort(echo)
	p := start(t, fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
listeners:
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes, connect_ports: [%s], allow_targets: [127.0.0.0/8]}
pools:
  - name: routes
    endpoints:
      - {name: direct, url: "direct://"}
`, port), "GOGC=10")
	idleRelayed(t, p, "CONNECT tunnels", scale(500, 2000), 16<<10, func() (net.Conn, *bufio.Reader) {
		c := rawConn(t, p.addr("out"))
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", echo, echo)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %v, %v", resp, err)
		}
		return c, br
	})
}

// A TCP half-close reaches the other side and the answer still comes
// back; and a thousand connections at once all go through.
func TestTCPHalfCloseAndConcurrency(t *testing.T) {
	// The backend reads to EOF, then answers how much it read and closes.
	backend := testtool.Serve(t, func(c net.Conn) {
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		fmt.Fprintf(c, "read %d\n", n)
	})
	p := start(t, fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
log: {level: info}
listeners:
  - {name: db, kind: tcp, listen: "127.0.0.1:0", pool: dbs}
pools:
  - {name: dbs, endpoints: [{name: e, address: %q}]}
`, backend))
	n := scale(1000, 5000)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			c, err := net.Dial("tcp", p.addr("db"))
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			payload := strings.Repeat("x", 1000+i)
			if _, err := io.WriteString(c, payload); err != nil {
				errs <- err
				return
			}
			_ = c.(*net.TCPConn).CloseWrite() // half-close: the backend sees EOF
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil || line != fmt.Sprintf("read %d\n", len(payload)) {
				errs <- fmt.Errorf("answer %q, %v", line, err)
			}
		}()
	}
	begin := time.Now()
	close(start)
	wg.Wait()
	close(errs)
	failures := 0
	var first error
	for err := range errs {
		if first == nil {
			first = err
		}
		failures++
	}
	figure(t, "TCP half-close and concurrency", "%d concurrent connections, each half-closed after its payload: %d failed, %v in all",
		n, failures, time.Since(begin).Round(10*time.Millisecond))
	if failures != 0 {
		t.Fatalf("%d of %d connections failed (first: %v)", failures, n, first)
	}
}

// Idle HTTP/1.1 connections over TLS, each after one request: what each
// costs rotor. The short way's, as on a cleartext listener: parked, with
// no goroutine, and no read buffer of its own held meanwhile.
func TestIdleHTTPS(t *testing.T) {
	idleHTTP(t, "idle HTTP/1.1 connections over TLS", "http/1.1", 16<<10, 0.1, "a read buffer or a request's state",
		func(c net.Conn, _ string) { getOn(t, c) })
}

// Idle HTTP/2 connections over TLS, each after one request: what each
// costs rotor. One goroutine each (its reading one, waiting for a frame)
// and one descriptor; no write buffer held while it waits.
func TestIdleHTTP2(t *testing.T) {
	idleHTTP(t, "idle HTTP/2 connections", "h2", 24<<10, 1.1, "a write buffer or a stream's state", h2Get(t))
}

// Idle HTTP/2 connections without TLS (prior knowledge), each after one
// request: as over TLS, less TLS's state, with the buffer its frames are
// read through, and with the 8 KiB of buffers net/http's server took for
// the connection before it found HTTP/2's preface (held while it runs).
func TestIdleH2C(t *testing.T) {
	idleHTTP(t, "idle HTTP/2 connections without TLS", "", 24<<10, 1.1, "a write buffer or a stream's state", h2Get(t))
}

// h2Get makes one HTTP/2 request on a connection, with Go's client.
func h2Get(t *testing.T) func(c net.Conn, addr string) {
	tr := &http2.Transport{AllowHTTP: true}
	return func(c net.Conn, addr string) {
		cc, err := tr.NewClientConn(c)
		if err != nil {
			t.Fatal(err)
		}
		scheme := "https"
		if _, ok := c.(*tls.Conn); !ok {
			scheme = "http"
		}
		req, _ := http.NewRequest("GET", scheme+"://"+addr+"/", nil)
		resp, err := cc.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// idleHTTP measures what idle connections to an http listener cost
// rotor, rotor at GOGC=10: each offers proto alone over TLS (proto "":
// HTTP/2 with prior knowledge, without TLS), makes one request with ask
// and is held. One descriptor each; more than maxG goroutines each, or
// more than maxHeap bytes of heap each, fails the test, as kept (what it
// would be) while idle.
func idleHTTP(t *testing.T, what, proto string, maxHeap, maxG float64, kept string, ask func(c net.Conn, addr string)) {
	t.Helper()
	a := newBackend(t, "a")
	cfg := webConfig("", a)
	if proto != "" {
		certFile, keyFile := testtool.SelfSignedFiles(t, t.TempDir())
		cfg = strings.Replace(cfg, "pool: app,", fmt.Sprintf("pool: app, tls: {cert: %q, key: %q},", certFile, keyFile), 1)
	}
	p := start(t, cfg, "GOGC=10")
	open := func() net.Conn {
		var c net.Conn
		var err error
		if proto != "" {
			c, err = tls.Dial("tcp", p.addr("web"), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{proto}})
		} else {
			c, err = net.Dial("tcp", p.addr("web"))
		}
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		ask(c, p.addr("web"))
		return c
	}
	open().Close() // warm
	time.Sleep(200 * time.Millisecond)
	baseRSS, baseHeap, baseFD, baseG := p.rss(), p.metric("go_memstats_heap_inuse_bytes"), p.fds(), p.metric("go_goroutines")
	n := scale(500, 2000)
	holdIdle(t, n, open)
	time.Sleep(parkWait)
	rss, heap, fds, g := p.rss(), p.metric("go_memstats_heap_inuse_bytes"), p.fds(), p.metric("go_goroutines")
	perRSS, perHeap, perG := float64(rss-baseRSS)/float64(n), (heap-baseHeap)/float64(n), (g-baseG)/float64(n)
	figure(t, what, "%d idle after one request: %.1f KB RSS and %.1f KB of Go heap each, %.2f goroutines each, %d descriptors more",
		n, perRSS/1024, perHeap/1024, perG, fds-baseFD)
	if fds-baseFD < n || fds-baseFD > n+20 {
		t.Fatalf("%d descriptors for %d idle connections, want one each", fds-baseFD, n)
	}
	if perG > maxG {
		t.Fatalf("%.2f goroutines each, want at most %.1f", perG, maxG)
	}
	if perHeap > maxHeap {
		t.Fatalf("%.1f KB of heap each: %s kept while idle", perHeap/1024, kept)
	}
}
