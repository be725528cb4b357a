package h1

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/internal/rawio"
	"github.com/rotor-lb/rotor/internal/testtool"
	"github.com/rotor-lb/rotor/proxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rawBackend accepts connections on loopback and hands each to answer,
// which reads requests and writes whatever bytes the test wants. It
// counts the connections it accepted.
type rawBackend struct {
	addr     string
	accepted atomic.Int32
}

func newRawBackend(t *testing.T, answer func(c net.Conn, br *bufio.Reader)) *rawBackend {
	t.Helper()
	b := &rawBackend{}
	b.addr = testtool.Serve(t, func(c net.Conn) {
		defer c.Close()
		b.accepted.Add(1)
		answer(c, bufio.NewReader(c))
	})
	return b
}

func (b *rawBackend) url() string { return "http://" + b.addr + "/" }

// readRequest reads one request's head, false at the connection's end.
func readRequest(br *bufio.Reader) bool {
	req, err := http.ReadRequest(br)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, req.Body)
	return true
}

func newTestTransport(t *testing.T, try time.Duration) *Transport {
	dialer := &net.Dialer{Timeout: time.Second}
	tr := New(&http.Transport{DialContext: dialer.DialContext, ResponseHeaderTimeout: try})
	t.Cleanup(tr.Close)
	return tr
}

func fetch(t *testing.T, tr http.RoundTripper, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", req.Method, req.URL, err)
	}
	return resp, string(b)
}

func TestShortWayKeepsOneConnection(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, r.Method+" "+r.URL.Path+" "+string(b))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	tr := newTestTransport(t, time.Second)
	for i := range 20 {
		req := httptest.NewRequest(http.MethodGet, srv.URL+"/x", nil)
		req.RequestURI = ""
		if _, body := fetch(t, tr, req); body != "GET /x " {
			t.Fatalf("request %d: body %q", i, body)
		}
		if n := tr.Idle(); n != 1 {
			t.Fatalf("request %d: %d idle connections of the short way, want 1", i, n)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("20 requests in turn opened %d connections, want 1", n)
	}
	// A short body goes the same way, on the same connection; a longer
	// one through net/http's Transport. Without raw socket access, which
	// tells a kept connection the server closed, any body goes net/http's
	// way.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/y", strings.NewReader("data"))
	if _, body := fetch(t, tr, req); body != "POST /y data" {
		t.Errorf("POST: body %q", body)
	}
	if n, want := conns.Load(), map[bool]int32{true: 1, false: 2}[rawio.Supported]; n != want {
		t.Errorf("after a short POST: %d connections, want %d", n, want)
	}
	long := strings.Repeat("l", maxBody+1)
	req, _ = http.NewRequest(http.MethodPost, srv.URL+"/z", strings.NewReader(long))
	if _, body := fetch(t, tr, req); body != "POST /z "+long {
		t.Errorf("long POST: %d bytes back", len(body))
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("after a long POST: %d connections, want 2 (one each way)", n)
	}
}

// A URL without a port is dialled at port 80, as net/http dials it, and
// the Host header stays as the URL has it.
func TestShortWayDefaultPort(t *testing.T) {
	var host atomic.Value // the last request's Host
	b := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			host.Store(req.Host)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	var dialled []string
	tr := New(&http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialled = append(dialled, addr)
		return (&net.Dialer{}).DialContext(ctx, network, b.addr)
	}})
	t.Cleanup(tr.Close)
	for _, u := range []string{"http://app.test/x", "http://app.test/y", "http://[::1]/z"} {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		if _, body := fetch(t, tr, req); body != "ok" {
			t.Fatalf("%s: body %q", u, body)
		}
		if got, want := host.Load(), req.URL.Host; got != want {
			t.Errorf("%s: Host %q at the server, want %q", u, got, want)
		}
	}
	if want := []string{"app.test:80", "[::1]:80"}; !slices.Equal(dialled, want) {
		t.Errorf("dialled %q, want %q (one connection per host:port, reused)", dialled, want)
	}
}

// Idle connections are bounded in all, whatever the hosts a client makes
// the transport reach: over the total, the one idle longest is closed.
func TestShortWayIdleTotal(t *testing.T) {
	var closed atomic.Int32
	b := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		for readRequest(br) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
		closed.Add(1)
	})
	var hosts []string
	tr := New(&http.Transport{MaxIdleConns: 3, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		hosts = append(hosts, addr)
		return (&net.Dialer{}).DialContext(ctx, network, b.addr)
	}})
	t.Cleanup(tr.Close)
	get := func(host string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+host+"/", nil)
		if _, body := fetch(t, tr, req); body != "ok" {
			t.Fatalf("%s: body %q", host, body)
		}
	}
	for i := range 5 {
		get(fmt.Sprintf("h%d.test:80", i))
	}
	if n := tr.Idle(); n != 3 {
		t.Errorf("%d idle after 5 hosts, want the total, 3", n)
	}
	for deadline := time.Now().Add(5 * time.Second); closed.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := closed.Load(); n != 2 {
		t.Errorf("%d connections closed, want the 2 idle longest", n)
	}
	// The three kept are the last three: asked again, none is dialled.
	for i := 2; i < 5; i++ {
		get(fmt.Sprintf("h%d.test:80", i))
	}
	if len(hosts) != 5 {
		t.Errorf("dialled %q, want the five hosts once each", hosts)
	}
	// A host whose one idle connection is in use has no entry left.
	req, _ := http.NewRequest(http.MethodGet, "http://h4.test:80/", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	tr.mu.Lock()
	entries := len(tr.idle)
	tr.mu.Unlock()
	if entries != 2 {
		t.Errorf("%d hosts in the idle table while h4's connection is in use, want 2 (none kept empty)", entries)
	}
}

// A connection given back goes to its host's list, whatever became of
// the list it was taken from: kept aside and then another host's,
// emptied by an eviction, or let go with the pool's idle connections.
func TestIdleListGuessedRight(t *testing.T) {
	pipes := func(t *testing.T, total int) *Transport {
		t.Helper()
		return New(&http.Transport{MaxIdleConns: total, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, s := net.Pipe()
			t.Cleanup(func() { c.Close(); s.Close() })
			return c, nil
		}})
	}
	ctx := context.Background()
	get := func(t *testing.T, tr *Transport, host string, want *conn) *conn {
		t.Helper()
		c, reused, err := tr.get(ctx, host, false)
		if err != nil {
			t.Fatal(err)
		}
		if want != nil && (c != want || !reused) {
			t.Fatalf("%s: got %p (reused %v), want the idle %p", host, c, reused, want)
		}
		return c
	}
	t.Run("another host's", func(t *testing.T) {
		tr := pipes(t, 0)
		t.Cleanup(tr.Close)
		a := get(t, tr, "a.test:80", nil)
		tr.put(a)
		get(t, tr, "a.test:80", a) // a's list emptied, kept aside
		b := get(t, tr, "b.test:80", nil)
		tr.put(b) // b's list is the one a was taken from
		tr.put(a)
		get(t, tr, "a.test:80", a)
		get(t, tr, "b.test:80", b)
	})
	t.Run("emptied by an eviction", func(t *testing.T) {
		tr := pipes(t, 1)
		t.Cleanup(tr.Close)
		c1 := get(t, tr, "a.test:80", nil)
		c2 := get(t, tr, "a.test:80", nil)
		tr.put(c2)
		get(t, tr, "a.test:80", c2) // the list emptied, kept aside
		tr.put(c1)                  // the same list again, a's
		tr.put(c2)                  // over the total: c1 evicted, emptying c2's list
		get(t, tr, "a.test:80", c2)
		if n := tr.Idle(); n != 0 {
			t.Errorf("%d idle, want 0", n)
		}
	})
	t.Run("the pool's idle closed meanwhile", func(t *testing.T) {
		tr := pipes(t, 0)
		t.Cleanup(tr.Close)
		c1 := get(t, tr, "a.test:80", nil)
		c2 := get(t, tr, "a.test:80", nil)
		tr.put(c1)
		tr.put(c2)
		get(t, tr, "a.test:80", c2)
		tr.CloseIdleConnections() // c1 closed, c2's list out of the pool
		tr.put(c2)
		get(t, tr, "a.test:80", c2)
	})
}

// Taking a host's last idle connection and giving it back, as every
// request does to a backend with one connection, allocates nothing: the
// emptied list is kept aside for the next.
func TestIdleListKeptAside(t *testing.T) {
	tr := New(&http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, s := net.Pipe()
		t.Cleanup(func() { c.Close(); s.Close() })
		return c, nil
	}})
	ctx := context.Background()
	c, _, err := tr.get(ctx, "a.test:80", false)
	if err != nil {
		t.Fatal(err)
	}
	tr.put(c)
	allocs := testing.AllocsPerRun(100, func() {
		got, reused, err := tr.get(ctx, "a.test:80", false)
		if err != nil || !reused || got != c {
			t.Fatalf("get: %p reused %v, %v; want the idle %p", got, reused, err, c)
		}
		tr.put(got)
	})
	if allocs != 0 {
		t.Errorf("%v allocations a get and put, want 0", allocs)
	}
	if n := tr.Idle(); n != 1 {
		t.Errorf("%d idle, want 1", n)
	}
}

func TestStaleConnectionGoesAgain(t *testing.T) {
	// The backend answers one request per connection and closes it
	// without saying so: the pooled connection is dead when next used.
	b := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		if readRequest(br) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	tr := newTestTransport(t, time.Second)
	for i := range 3 {
		req, _ := http.NewRequest(http.MethodGet, b.url(), nil)
		if _, body := fetch(t, tr, req); body != "ok" {
			t.Fatalf("request %d: body %q", i, body)
		}
		time.Sleep(20 * time.Millisecond) // the backend's close arrives
	}
	if n := b.accepted.Load(); n != 3 {
		t.Errorf("%d connections, want 3", n)
	}

	// A server that closes every idle connection at once, as one whose
	// idle timeout runs out on them together: the request goes again on
	// a new connection, not on the next idle one, closed too.
	closeAll := make(chan struct{})
	var conns atomic.Int32
	together := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		if conns.Add(1) <= 3 {
			go func() { <-closeAll; c.Close() }()
		}
		for readRequest(br) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	var held []*http.Response
	for range 3 { // three at once: three connections, then idle
		req, _ := http.NewRequest(http.MethodGet, together.url(), nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, resp)
	}
	for _, resp := range held {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if n := tr.Idle(); n != 3 {
		t.Fatalf("%d idle connections, want 3", n)
	}
	close(closeAll)
	time.Sleep(20 * time.Millisecond) // the backend's closes arrive
	req, _ := http.NewRequest(http.MethodGet, together.url(), nil)
	if _, body := fetch(t, tr, req); body != "ok" {
		t.Fatalf("after every idle connection was closed: body %q", body)
	}

	// A server that says 408 on the idle connection before closing it:
	// the next request goes again on a new one, and gets the answer.
	timedOut := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		if !readRequest(br) {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
		if !readRequest(br) { // the second, on a connection timed out
			return
		}
		io.WriteString(c, "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
		for readRequest(br) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nlater")
		}
	})
	req, _ = http.NewRequest(http.MethodGet, timedOut.url(), nil)
	for _, want := range []string{"first", "first"} {
		if resp, body := fetch(t, tr, req); resp.StatusCode != 200 || body != want {
			t.Fatalf("after a 408 on an idle connection: %d %q, want 200 %q", resp.StatusCode, body, want)
		}
	}

	// A fresh connection that fails is not tried again.
	silent := newRawBackend(t, func(c net.Conn, br *bufio.Reader) { readRequest(br) })
	req, _ = http.NewRequest(http.MethodGet, silent.url(), nil)
	if _, err := tr.RoundTrip(req); err == nil {
		t.Fatal("a backend that closes without an answer: no error")
	}
	if n := silent.accepted.Load(); n != 1 {
		t.Errorf("a new connection that failed was tried %d times, want 1", n)
	}
}

// A server that closes a kept-alive connection as the next request comes
// on it, reading it and answering nothing (its idle timeout running out
// as the request arrives): an idempotent request whose body is in hand
// goes again, whole, on a new connection, as a body net/http's Transport
// can get anew does, with or without a look at the socket (rawio); a
// POST's does not (it may have been acted on).
func TestStaleConnectionGoesAgainWithABodyInHand(t *testing.T) {
	var bodies atomic.Int32
	b := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		for i := 0; ; i++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if got, _ := io.ReadAll(req.Body); string(got) == "x=1" {
				bodies.Add(1)
			}
			if i > 0 {
				return // closed as the second request came
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	tr := newTestTransport(t, time.Second)
	send := func(method string) (*http.Response, error) {
		req, _ := http.NewRequest(method, b.url(), nil)
		req.Body, req.ContentLength = proxy.NewBody(&wholeBody{b: []byte("x=1")}).Lend(), 3
		return tr.RoundTrip(req)
	}
	for i, method := range []string{http.MethodPut, http.MethodPut, http.MethodDelete} {
		resp, err := send(method)
		if err != nil {
			t.Fatalf("%s %d: %v", method, i, err)
		}
		if got, _ := io.ReadAll(resp.Body); string(got) != "ok" {
			t.Fatalf("%s %d: body %q", method, i, got)
		}
		resp.Body.Close()
	}
	// The first PUT on one connection; the second and the DELETE each on
	// one closed as it came, then on a new one.
	if n, got := b.accepted.Load(), bodies.Load(); n != 3 || got != 5 {
		t.Fatalf("%d connections, %d bodies whole; want 3 and 5", n, got)
	}
	// Where the short way can look at a socket, a POST's body goes its
	// way too, on the same pooled connection (elsewhere net/http's, on
	// connections of its own).
	resp, err := send(http.MethodPost)
	if err == nil {
		resp.Body.Close()
	}
	if rawio.Supported && err == nil {
		t.Fatal("a POST on a connection closed as it came went again")
	}
}

// The last bytes of a request are written inside the wait for the
// answer (sendThenWait): an answer that comes at once, before or after
// the wait begins, is never missed. A missed one would hold the request
// until its try of five seconds ran out.
func TestShortWayNeverMissesAnAnswer(t *testing.T) {
	b := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		for i := 0; readRequest(br); i++ {
			if i%7 == 3 {
				time.Sleep(time.Millisecond) // now and then after the wait began
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	tr := newTestTransport(t, 5*time.Second)
	req, _ := http.NewRequest(http.MethodGet, b.url(), nil)
	for i := range 2000 {
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if body, err := io.ReadAll(resp.Body); err != nil || string(body) != "ok" {
			t.Fatalf("request %d: %q, %v", i, body, err)
		}
		resp.Body.Close()
	}
	if n := b.accepted.Load(); n != 1 {
		t.Errorf("%d connections for 2000 requests in a row, want 1", n)
	}

	// A request whose client is gone before it is sent fails as
	// cancelled, with nothing sent.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, b.url(), nil)
	if _, err := tr.RoundTrip(req); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled before it was sent: %v, want context.Canceled", err)
	}
}

func TestShortWayTimeoutAndCancel(t *testing.T) {
	hang := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		readRequest(br)
		_, _ = io.Copy(io.Discard, br) // until the proxy closes
	})
	tr := newTestTransport(t, 100*time.Millisecond)
	req, _ := http.NewRequest(http.MethodGet, hang.url(), nil)
	start := time.Now()
	_, err := tr.RoundTrip(req)
	if kind := proxy.Classify(err, req.Context()); kind != health.Timeout {
		t.Errorf("no head within the try: %v, classified %v, want a timeout", err, kind)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the try of 100ms took %v", d)
	}

	tr = newTestTransport(t, 0) // no try: only the client's going away ends the wait
	ctx, cancel := context.WithCancel(context.Background())
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, hang.url(), nil)
	time.AfterFunc(50*time.Millisecond, cancel)
	start = time.Now()
	_, err = tr.RoundTrip(req)
	if !errors.Is(err, context.Canceled) || proxy.Classify(err, ctx) != health.Canceled {
		t.Errorf("the client went away: %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("cancelled after 50ms, returned after %v", d)
	}
	if n := tr.Idle(); n != 0 {
		t.Errorf("%d idle connections after a cancelled request, want 0", n)
	}

	// Cancelled while its body streams: the body's read says so, as the
	// head's wait does, not the deadline that ended it (which would read
	// as the backend's failure).
	streams := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		readRequest(br)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab")
		_, _ = io.Copy(io.Discard, br) // the rest never comes
	})
	ctx, cancel = context.WithCancel(context.Background())
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, streams.url(), nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, cancel)
	got, err := io.ReadAll(resp.Body)
	if string(got) != "ab" || !errors.Is(err, context.Canceled) {
		t.Errorf("the body cancelled mid-way: %q, %v; want ab and context.Canceled", got, err)
	}
	resp.Body.Close()
}

// The try bounds a request up to its answer's head: a body that streams
// past it is read whole, and a connection idle past it serves the next
// request. A try that ran out just as the head came is lifted, for the
// body and the next request.
func TestShortWayTryEndsWithTheHead(t *testing.T) {
	b := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		for readRequest(br) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab")
			time.Sleep(150 * time.Millisecond)
			io.WriteString(c, "cd")
		}
	})
	tr := newTestTransport(t, 50*time.Millisecond)
	get := func() {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, b.url(), nil)
		if _, body := fetch(t, tr, req); body != "abcd" {
			t.Errorf("body %q, want abcd", body)
		}
	}
	get()
	time.Sleep(100 * time.Millisecond) // idle past the try
	get()

	c, reused, err := tr.get(context.Background(), b.addr, false)
	if err != nil || !reused {
		t.Fatalf("the idle connection: reused %v, %v", reused, err)
	}
	c.beginTry(time.Nanosecond)
	for !c.expired.Load() {
		time.Sleep(time.Millisecond)
	}
	if !c.endTry() {
		t.Error("endTry after the try ran out: not lifted")
	}
	tr.put(c)
	get()
	if n := b.accepted.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

// A try is cut at its own end: not at an earlier try's, for which its
// connection's timer is still armed, and not later than its own.
func TestShortWayTryCutAtItsOwnEnd(t *testing.T) {
	const try = 400 * time.Millisecond
	b := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		for n := 1; readRequest(br); n++ {
			switch n {
			case 2:
				time.Sleep(try * 3 / 4) // past the first try's end, within its own
			case 3:
				_, _ = io.Copy(io.Discard, br) // no answer: until the proxy closes
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	tr := newTestTransport(t, try)
	req, _ := http.NewRequest(http.MethodGet, b.url(), nil)
	fetch(t, tr, req)
	time.Sleep(try / 2) // the timer is armed for the first try's end
	if _, body := fetch(t, tr, req); body != "ok" {
		t.Errorf("the second answer: %q, want ok", body)
	}

	start := time.Now()
	_, err := tr.RoundTrip(req)
	d := time.Since(start)
	if kind := proxy.Classify(err, req.Context()); kind != health.Timeout {
		t.Errorf("no head within the third try: %v, classified %v, want a timeout", err, kind)
	}
	if d < try || d > 2*time.Second {
		t.Errorf("the third try of %v was cut after %v", try, d)
	}
	if n := b.accepted.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

func TestShortWayFraming(t *testing.T) {
	tests := []struct {
		name, answer, body string
		trailer            string
		reuse              bool
		method             string // "" is GET
	}{
		{"content-length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "hello", "", true, ""},
		{"chunked with a trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n" +
			"2\r\nhe\r\n3\r\nllo\r\n0\r\nX-Sum: 5\r\n\r\n", "hello", "5", true, ""},
		{"until the close", "HTTP/1.0 200 OK\r\n\r\nhello", "hello", "", false, ""},
		{"no length in HTTP/1.1", "HTTP/1.1 200 OK\r\n\r\nhello", "hello", "", false, ""},
		{"connection: close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello", "hello", "", false, ""},
		{"bytes after the body", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\n", "hello", "", false, ""},
		{"no body on 204", "HTTP/1.1 204 No Content\r\n\r\n", "", "", true, ""},
		{"no body for HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "", "", true, http.MethodHead},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
				if readRequest(br) {
					io.WriteString(c, tt.answer)
				}
				if tt.reuse {
					readRequest(br) // until the proxy lets the connection go
				}
			})
			tr := newTestTransport(t, time.Second)
			req, _ := http.NewRequest(cmp.Or(tt.method, http.MethodGet), b.url(), nil)
			resp, body := fetch(t, tr, req)
			if body != tt.body || resp.Trailer.Get("X-Sum") != tt.trailer {
				t.Errorf("body %q, trailer %q; want %q, %q", body, resp.Trailer.Get("X-Sum"), tt.body, tt.trailer)
			}
			if n := tr.Idle(); (n == 1) != tt.reuse {
				t.Errorf("%d idle connections after the answer, want reuse %v", n, tt.reuse)
			}
		})
	}
}

func TestShortWayInformational(t *testing.T) {
	b := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		if readRequest(br) {
			io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"+
				"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
		readRequest(br)
	})
	tr := newTestTransport(t, time.Second)
	var hints []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		hints = append(hints, h.Get("Link"))
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, b.url(), nil)
	if resp, body := fetch(t, tr, req); resp.StatusCode != 200 || body != "ok" {
		t.Errorf("final answer %d %q", resp.StatusCode, body)
	}
	if len(hints) != 1 || hints[0] != "</a.css>; rel=preload" {
		t.Errorf("103's Link headers passed on: %q", hints)
	}

	// A trace handed to RoundTripTraced, not in the request's context,
	// hears the same: the short way's GET and net/http's upload of no
	// known length alike.
	hinted := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		for readRequest(br) {
			io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </b.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	for _, r := range []*http.Request{
		httptest.NewRequest(http.MethodGet, hinted.url(), nil),
		httptest.NewRequest(http.MethodPost, hinted.url(), io.MultiReader(strings.NewReader("x"))),
	} {
		r.RequestURI, r.ContentLength = "", -1
		if r.Method == http.MethodGet {
			r.ContentLength = 0
		}
		hints = nil
		resp, err := tr.RoundTripTraced(r, trace, nil)
		if err != nil {
			t.Fatalf("%s: %v", r.Method, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if len(hints) != 1 || hints[0] != "</b.css>" {
			t.Errorf("%s: the trace given heard of %q, want the 103's Link", r.Method, hints)
		}
	}

	// A head without end fails the try at the transport's bound;
	// informational answers without end, each passed on, at the try.
	// Without a bound set, net/http's 10 MB holds.
	const bound = 64 << 10
	bounded := New(&http.Transport{DialContext: (&net.Dialer{}).DialContext, ResponseHeaderTimeout: time.Second, MaxResponseHeaderBytes: bound})
	t.Cleanup(bounded.Close)
	filler := "X-Filler: " + strings.Repeat("a", 1000) + "\r\n"
	b = newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		for readRequest(br) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\n")
			for range 1500 { // 1.5 MB of head
				if _, err := io.WriteString(c, filler); err != nil {
					return
				}
			}
			io.WriteString(c, "Content-Length: 2\r\n\r\nok")
		}
	})
	req, _ = http.NewRequest(http.MethodGet, b.url(), nil)
	if _, err := bounded.RoundTrip(req); !errors.Is(err, errHeaderTooLarge) {
		t.Errorf("a head of 1.5 MB, bound %d: %v, want it refused at the bound", bound, err)
	}
	req, _ = http.NewRequest(http.MethodGet, b.url(), nil)
	if resp, body := fetch(t, tr, req); resp.StatusCode != 200 || body != "ok" {
		t.Errorf("a head of 1.5 MB, no bound set: %d %q, want it taken (net/http's 10 MB)", resp.StatusCode, body)
	}
	b = newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		readRequest(br)
		for { // until the proxy closes
			if _, err := io.WriteString(c, "HTTP/1.1 102 Processing\r\n\r\n"); err != nil {
				return
			}
		}
	})
	hints = nil
	req, _ = http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, b.url(), nil)
	start := time.Now()
	_, err := bounded.RoundTrip(req)
	if !isTimeout(err) || len(hints) <= bound/len("HTTP/1.1 102 Processing\r\n\r\n") {
		t.Errorf("informational answers without end: %v after %d passed on, want a timeout after more than a head's bound of them", err, len(hints))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the try of 1s took %v", d)
	}
}

// waitIdleGone waits until tr's one idle connection has its server's
// end at its socket. On loopback the end of a closed connection is
// usually there once close returns, but not always under load (the
// kernel may defer the delivery), and the test is of what the transport
// does once it is there.
func waitIdleGone(t *testing.T, tr *Transport) {
	t.Helper()
	for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(time.Millisecond) {
		tr.mu.Lock()
		var c *conn
		for _, l := range tr.idle {
			c = l.conns[0]
		}
		tr.mu.Unlock()
		if c == nil || c.gone() {
			return
		}
	}
	t.Fatal("the server's end never reached the idle connection")
}

// A head cut short fails as what cut it: ReadResponse would take the
// bytes before the failed read as a whole status line and call them
// malformed.
func TestShortWayHeadCutShort(t *testing.T) {
	tr := newTestTransport(t, 200*time.Millisecond)
	for _, tc := range []struct {
		name string
		then func(c net.Conn, br *bufio.Reader)
		want func(error) bool
	}{
		{"at the try's deadline", func(c net.Conn, br *bufio.Reader) { br.ReadByte() }, isTimeout},
		{"by the server's end", func(net.Conn, *bufio.Reader) {}, func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) }},
	} {
		for _, part := range []string{"HTTP/1.1 ", "HTTP/1.1 200 O", "HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 "} {
			b := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
				if readRequest(br) {
					io.WriteString(c, part)
					tc.then(c, br)
				}
			})
			req, _ := http.NewRequest(http.MethodGet, b.url(), nil)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
			if !tc.want(err) {
				t.Errorf("%q, then cut %s: %v", part, tc.name, err)
			}
		}
	}
}

func TestShortWayIdleAndClose(t *testing.T) {
	closed := make(chan struct{}, 4)
	b := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		for readRequest(br) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
		closed <- struct{}{}
	})
	tr := newTestTransport(t, time.Second)
	wait := func(what string) {
		t.Helper()
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Fatal(what)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, b.url(), nil)

	// CloseIdleConnections closes what is idle and goes on pooling, and
	// the sweep goes on too.
	fetch(t, tr, req)
	tr.CloseIdleConnections()
	wait("an idle connection stayed open after CloseIdleConnections")
	tr.idleTimeout = 50 * time.Millisecond
	fetch(t, tr, req)
	if n := tr.Idle(); n != 1 {
		t.Errorf("%d idle after CloseIdleConnections and a request, want 1", n)
	}
	wait("an idle connection was kept past the idle timeout")
	if n := tr.Idle(); n != 0 {
		t.Errorf("%d idle after the sweep, want 0", n)
	}

	// A connection given back after Close is closed, not kept.
	tr.idleTimeout = time.Hour
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	tr.Close()
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	wait("a connection given back after Close stayed open")
	if n := tr.Idle(); n != 0 {
		t.Errorf("%d idle after Close, want 0", n)
	}
}

// BenchmarkRoundTrip: GETs and their small answers, 16 at a time per
// core, the short way against net/http's Transport, to the same server in
// this process (whose cost both pay alike): with -cpu 1, the CPU each way
// costs a request. go test ./proxy/h1 -run '^$' -bench RoundTrip -cpu 1
func BenchmarkRoundTrip(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	dialer := &net.Dialer{Timeout: time.Second}
	tr := New(&http.Transport{DialContext: dialer.DialContext, MaxIdleConnsPerHost: 64, ResponseHeaderTimeout: time.Second})
	defer tr.Close()
	for _, way := range []struct {
		name string
		rt   http.RoundTripper
	}{{"short", tr}, {"net-http", tr.HTTP}} {
		b.Run(way.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
				for pb.Next() {
					resp, err := way.rt.RoundTrip(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		})
	}
}

// RemoveHopByHop drops the fields Connection names (in any case, over
// several Connection fields) and the fixed hop-by-hop ones, and keeps the
// rest.
func TestRemoveHopByHop(t *testing.T) {
	h := http.Header{
		"Connection":          {"close, X-A", " x-b ,", "Keep-Alive"},
		"X-A":                 {"1"},
		"X-B":                 {"2"},
		"X-C":                 {"3"},
		"Keep-Alive":          {"timeout=5"},
		"Proxy-Authorization": {"Basic eDp5"},
		"Proxy-Authenticate":  {"Basic"},
		"Proxy-Connection":    {"keep-alive"},
		"Te":                  {"trailers"},
		"Trailer":             {"X-T"},
		"Transfer-Encoding":   {"chunked"},
		"Upgrade":             {"websocket"},
	}
	RemoveHopByHop(h)
	if want := (http.Header{"X-C": {"3"}}); !reflect.DeepEqual(h, want) {
		t.Errorf("left %v, want %v", h, want)
	}
}

// A request with a short body goes the short way: the backend gets it
// whole, on the connection kept from the last request, and again when
// the server closed that connection while it sat idle (the body is not
// sent twice: the closed connection is found before it is used). A body
// that cannot be read fails the request before anything is sent.
func TestShortWayBodies(t *testing.T) {
	testtool.NeedsRaw(t)
	type seen struct{ method, body string }
	got := make(chan seen, 16)
	closed := make(chan struct{}, 16)
	closeAfter := atomic.Bool{}
	backend := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			b, _ := io.ReadAll(req.Body)
			// Whether to close is settled before the test hears of the
			// request: read after, a flag set on hearing of the last
			// kept request would close that connection too, racing the
			// test's next request onto it.
			closing := closeAfter.Load()
			got <- seen{req.Method, string(b)}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			if closing {
				c.Close() // as a server whose idle timeout is short closes
				closed <- struct{}{}
				return
			}
		}
	})
	tr := newTestTransport(t, 5*time.Second)
	send := func(method, body string) error {
		req, _ := http.NewRequest(method, backend.url(), nil)
		req.Body, req.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != "ok" {
			return fmt.Errorf("answer %q, %v", b, err)
		}
		return nil
	}
	for i, s := range []seen{{"POST", "a=1"}, {"PUT", strings.Repeat("p", maxBody)}, {"PATCH", "{}"}} {
		if err := send(s.method, s.body); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if g := <-got; g != s {
			t.Fatalf("request %d: the backend saw %s with %d bytes, want %s with %d", i, g.method, len(g.body), s.method, len(s.body))
		}
	}
	if n := backend.accepted.Load(); n != 1 {
		t.Fatalf("%d backend connections for three requests, want one kept", n)
	}
	if n := tr.Idle(); n != 1 {
		t.Fatalf("%d connections idle on the short way, want the one the bodies went on", n)
	}

	closeAfter.Store(true)
	for i := range 3 {
		if err := send("POST", "again"); err != nil {
			t.Fatalf("after the backend closed its idle connection, request %d: %v", i, err)
		}
		<-got
		<-closed
		waitIdleGone(t, tr)
	}
	select {
	case g := <-got:
		t.Fatalf("the backend saw one more request: %+v", g)
	default:
	}

	req, _ := http.NewRequest("POST", backend.url(), nil)
	req.Body, req.ContentLength = io.NopCloser(io.MultiReader(strings.NewReader("ab"), &onceErr{err: errors.New("client gone")})), 10
	if _, err := tr.RoundTrip(req); err == nil || !strings.Contains(err.Error(), "client gone") {
		t.Fatalf("a body that breaks: %v, want its error", err)
	}
	select {
	case g := <-got:
		t.Fatalf("a request whose body broke reached the backend: %+v", g)
	case <-time.After(50 * time.Millisecond):
	}
}

// An upgrade goes the short way: the 101's body is the connection,
// handed over with what the server sent right behind its head, owned by
// the caller (neither the try's deadline nor the request's context cut
// it afterwards), the same bytes as net/http's Transport gives; refused,
// it is an ordinary answer on a connection kept for the next request.
func TestShortWayUpgrade(t *testing.T) {
	backend := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if req.Header.Get("Upgrade") != "echo" || req.Header.Get("Connection") != "Upgrade" {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nrefused")
				continue
			}
			// The head and the protocol's first bytes in one write.
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\nhello")
			_, _ = io.Copy(c, br) // echo until the client's end
			return
		}
	})
	upgrade := func(ctx context.Context, header string) *http.Request {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, backend.url(), nil)
		if header != "" {
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", header)
		}
		return req
	}
	// session switches on tr and talks: the first bytes, then an echo,
	// then a half-close answered by the server's end.
	session := func(tr http.RoundTripper, after func(rwc io.ReadWriteCloser)) string {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		resp, err := tr.RoundTrip(upgrade(ctx, "echo"))
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %v, %v", resp, err)
		}
		rwc, ok := resp.Body.(io.ReadWriteCloser)
		if !ok {
			t.Fatalf("the 101's body is a %T, not a connection", resp.Body)
		}
		defer rwc.Close()
		cancel() // the request is over; the connection is the caller's
		time.Sleep(150 * time.Millisecond)
		if after != nil {
			after(rwc)
		}
		if _, err := io.WriteString(rwc, " ping"); err != nil {
			t.Fatalf("writing to the switched connection: %v", err)
		}
		if cw, ok := rwc.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			t.Fatalf("%T cannot half-close", rwc)
		}
		b, err := io.ReadAll(rwc)
		if err != nil {
			t.Fatalf("reading the switched connection: %v", err)
		}
		return string(b)
	}

	tr := newTestTransport(t, 100*time.Millisecond)
	got := session(tr, func(rwc io.ReadWriteCloser) {
		sw := rwc.(*Switched)
		if _, plain := sw.PlainTCP(); plain {
			t.Errorf("PlainTCP with the server's first bytes still unread")
		}
		if b := string(sw.Buffered()); b != "hello" {
			t.Errorf("read with the 101's head: %q, want %q", b, "hello")
		}
		if _, plain := sw.PlainTCP(); !plain {
			t.Errorf("not PlainTCP once what came with the head was taken")
		}
	})
	if got != " ping" {
		t.Errorf("after Buffered: %q, want the echo alone", got)
	}
	want := session(newTestTransport(t, 100*time.Millisecond).HTTP, nil)
	if got := session(tr, nil); got != want || got != "hello ping" {
		t.Errorf("the short way's switched connection read %q, net/http's %q; want %q", got, want, "hello ping")
	}
	if n := tr.Idle(); n != 0 {
		t.Errorf("%d idle connections after upgrades, want 0: a switched connection is not the pool's", n)
	}

	// Refused: an ordinary answer, and its connection kept; an answer of
	// 101 to a request that did not ask for one is still an error.
	if _, body := fetch(t, tr, upgrade(context.Background(), "other")); body != "refused" {
		t.Errorf("a refused upgrade: %q", body)
	}
	if n := tr.Idle(); n != 1 {
		t.Errorf("%d idle connections after a refused upgrade, want 1", n)
	}
	unasked := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		readRequest(br)
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\n\r\n")
	})
	req, _ := http.NewRequest(http.MethodGet, unasked.url(), nil)
	if _, err := tr.RoundTrip(req); !errors.Is(err, errUnasked101) {
		t.Errorf("a 101 unasked: %v, want %v", err, errUnasked101)
	}
}

// hasPort finds a port where url.URL's Port does.
func TestHasPort(t *testing.T) {
	for _, host := range []string{"a:80", "a:", "a", "", ":80", "[::1]:80", "[::1]", "::1", "a:8x", "a:80:", "1.2.3.4:65535"} {
		if got, want := hasPort(host), (&url.URL{Host: host}).Port() != ""; got != want {
			t.Errorf("hasPort(%q) = %v, want %v", host, got, want)
		}
	}
}

// Short says which requests the short way sends, and so which the
// transport keeps nothing of once RoundTrip returns.
func TestShort(t *testing.T) {
	tr := newTestTransport(t, time.Second)
	proxied := New(&http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "127.0.0.1:1"})})
	req := func(method, target string, body string) *http.Request {
		var r *http.Request
		if body == "" {
			r = httptest.NewRequest(method, target, nil)
		} else {
			r = httptest.NewRequest(method, target, strings.NewReader(body))
		}
		r.RequestURI = ""
		return r
	}
	chunkedReq := func(body io.ReadCloser) *http.Request {
		r := req("POST", "http://a/", "")
		r.Body, r.ContentLength, r.TransferEncoding = body, -1, []string{"chunked"}
		return r
	}
	cases := []struct {
		name string
		tr   *Transport
		r    *http.Request
		want bool
	}{
		{"GET", tr, req("GET", "http://a/", ""), true},
		{"HEAD", tr, req("HEAD", "http://a/", ""), true},
		{"a small POST", tr, req("POST", "http://a/", "x=1"), rawio.Supported},
		{"a POST too long", tr, req("POST", "http://a/", strings.Repeat("x", maxBody+1)), false},
		{"a bodiless POST", tr, req("POST", "http://a/", ""), false},
		{"a chunked body in hand", tr, chunkedReq(&wholeBody{b: []byte("x=1")}), rawio.Supported},
		{"a chunked body in hand, some of it read", tr, chunkedReq(&wholeBody{b: []byte("=1"), read: true}), false},
		{"a chunked body not in hand", tr, chunkedReq(io.NopCloser(strings.NewReader("x=1"))), false},
		{"https", tr, req("GET", "https://a/", ""), false},
		{"through a proxy", proxied, req("GET", "http://a/", ""), false},
	}
	for _, c := range cases {
		if got := c.tr.Short(c.r); got != c.want {
			t.Errorf("%s: Short = %v, want %v", c.name, got, c.want)
		}
	}
}
