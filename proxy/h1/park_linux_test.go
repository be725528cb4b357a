//go:build !norawio

package h1

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

func init() {
	// The park's set gone soon after its last connection, so that a test
	// ends with no goroutine of it left (TestMain's goleak); and
	// connections parked after a tick or two, not a second, so that the
	// tests of requests that come as their connections park run quickly.
	parkLinger = 50 * time.Millisecond
	parkTicks = 1
}

// parkTest is a short-way server for the park's tests, over TLS when
// client is not nil.
type parkTest struct {
	t      testing.TB
	s      *Server
	addr   string
	client *tls.Config
}

func startParkTest(t testing.TB, over parkOver, idle time.Duration) *parkTest {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(&http.Server{
		Handler:     http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.URL.Path) }),
		IdleTimeout: idle,
		ErrorLog:    log.New(io.Discard, "", 0),
	})
	p := &parkTest{t: t, s: s, addr: ln.Addr().String()}
	if over.tls {
		s.HTTP.TLSConfig, p.client = SelfSignedTLS(t)
		go s.ServeTLS(ln)
	} else {
		go s.Serve(ln)
	}
	t.Cleanup(func() {
		// Closed, and each connection's goroutine past its last look at
		// readySockets (parkWays changes it next).
		s.Close()
		deadline := time.Now().Add(5 * time.Second)
		for {
			s.mu.Lock()
			n := len(s.conns)
			s.mu.Unlock()
			if n == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("%d connections still open 5s after Close", n)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	return p
}

// client is a connection to the server and its reader.
type client struct {
	net.Conn
	br *bufio.Reader
}

func (p *parkTest) dial() *client {
	p.t.Helper()
	c, err := DialOver(p.addr, p.client)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return &client{c, bufio.NewReader(c)}
}

// get asks c for path; an error unless the answer is path.
func (c *client) get(path string) error {
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: a\r\n\r\n", path)
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil || string(b) != path {
		return fmt.Errorf("GET %s: answer %q, %v", path, b, err)
	}
	return nil
}

// mustGet asks c for path and fails the test unless the answer is path.
func (c *client) mustGet(t testing.TB, path string) {
	t.Helper()
	if err := c.get(path); err != nil {
		t.Fatal(err)
	}
}

// states counts the server's connections by state, and in all.
func (p *parkTest) states() (map[int32]int, int) {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	n := map[int32]int{}
	for c := range p.s.conns {
		n[c.state.Load()]++
	}
	return n, len(p.s.conns)
}

// waitParked waits for n of the server's connections to be parked, and
// all of them to be.
func (p *parkTest) waitParked(n int) {
	p.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, all := p.states()
		if st[stateParked] == n && all == n {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("connections by state %v, want %d parked", st, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// parkOver is how a park test's connections wait before they park.
type parkOver struct{ tls bool }

// parkWays runs a test with idle connections waiting in the ready queue
// before they park (as the package's tests run it: ready_linux_test.go),
// in Go's poller (the queue standing aside, as with more than one P), and
// over TLS, in a read of the TLS connection.
func parkWays(t *testing.T, test func(t *testing.T, over parkOver)) {
	t.Run("queue", func(t *testing.T) { test(t, parkOver{}) })
	t.Run("poller", func(t *testing.T) {
		queueAside(t)
		test(t, parkOver{})
	})
	t.Run("tls", func(t *testing.T) { test(t, parkOver{tls: true}) })
}

// queueAside has the ready queue stand aside until tb ends, as it does
// with more than one P: connections wait in Go's poller.
func queueAside(tb testing.TB) {
	openAt := readySockets.openAt
	readySockets.openAt = 2 // never that busy: aside throughout
	readySockets.aside.Store(true)
	tb.Cleanup(func() { // after the test's server's (startParkTest)
		readySockets.openAt = openAt
		readySockets.aside.Store(false)
	})
}

// Idle connections park (within three ticks here: parkTicks is 1) and
// hold no goroutine there; a
// request on a parked connection is read and answered, and the connection
// parks again after it; a client's end is found in the park and the
// connection closed; the shutdown closes the parked ones at once.
func TestIdleConnectionsPark(t *testing.T) {
	parkWays(t, func(t *testing.T, over parkOver) {
		p := startParkTest(t, over, time.Minute)
		p.dial().mustGet(t, "/warm")
		p.waitParked(1)
		base := runtime.NumGoroutine()
		const n = 40
		clients := make([]*client, n)
		for i := range clients {
			clients[i] = p.dial()
			clients[i].mustGet(t, fmt.Sprintf("/%d/first", i))
		}
		p.waitParked(n + 1)
		// Goroutines that parked a connection wait a tick to serve
		// another, parkWorkers at the most, then end.
		deadline := time.Now().Add(5 * time.Second)
		for g := runtime.NumGoroutine() - base; g > 2; g = runtime.NumGoroutine() - base {
			if time.Now().After(deadline) {
				t.Fatalf("%d goroutines more with %d connections parked, want none for them", g, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
		for round := range 2 {
			for i, c := range clients {
				c.mustGet(t, fmt.Sprintf("/%d/%d", i, round))
			}
			p.waitParked(n + 1)
		}
		// Half the clients end: each parked connection finds it and closes.
		for _, c := range clients[:n/2] {
			c.Conn.(interface{ CloseWrite() error }).CloseWrite()
		}
		for i, c := range clients[:n/2] {
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.br.ReadByte(); err != io.EOF {
				t.Fatalf("client %d ended: read %v, want the end", i, err)
			}
		}
		p.waitParked(n/2 + 1)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.s.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown with %d connections parked: %v", n/2+1, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("Shutdown took %v with only parked connections", d)
		}
		for i, c := range clients[n/2:] {
			if _, err := c.br.ReadByte(); err != io.EOF {
				t.Fatalf("client %d after the shutdown: read %v, want the end", n/2+i, err)
			}
		}
		waitParkEmpty(t)
	})
}

// A parked connection past its idle timeout is closed, as one waiting
// with its goroutine is.
func TestParkedConnectionsTimeOut(t *testing.T) {
	parkWays(t, func(t *testing.T, over parkOver) {
		p := startParkTest(t, over, 500*time.Millisecond)
		c := p.dial()
		c.mustGet(t, "/a")
		p.waitParked(1)
		start := time.Now()
		if _, err := c.br.ReadByte(); err != io.EOF {
			t.Fatalf("read %v, want the end after the idle timeout", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("closed %v after it parked, want within the idle timeout of 500ms and a tick", d)
		}
		waitParkEmpty(t)
	})
}

// Requests that come as the ticker asks their connections to park, or
// as they leave for the park, are all answered: clients send a request
// every 50 to 250 ms, around the tick of 100 ms and the two or three a
// connection waits here before it parks.
func TestRequestsAsConnectionsPark(t *testing.T) {
	parkWays(t, func(t *testing.T, over parkOver) {
		p := startParkTest(t, over, time.Minute)
		const n, each = 16, 12
		var wg sync.WaitGroup
		for i := range n {
			c := p.dial()
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			wg.Go(func() {
				for j := range each {
					if err := c.get(fmt.Sprintf("/%d/%d", i, j)); err != nil {
						t.Errorf("client %d: %v", i, err)
						return
					}
					time.Sleep(50*time.Millisecond + time.Duration(rng.IntN(200))*time.Millisecond)
				}
			})
		}
		wg.Wait()
		p.waitParked(n)
	})
}

// The park's set outlives its last connection for parkLinger: a
// connection that parks again meanwhile finds it there, and it ends once
// empty that long.
func TestParkSetOutlivesItsLastConnection(t *testing.T) {
	setLinger := func(d time.Duration) (was time.Duration) {
		parks.mu.Lock()
		defer parks.mu.Unlock()
		was, parkLinger = parkLinger, d
		return was
	}
	linger := setLinger(time.Second)
	t.Cleanup(func() { setLinger(linger) })
	p := startParkTest(t, parkOver{}, time.Minute)
	c := p.dial()
	c.mustGet(t, "/a")
	p.parkAll()
	parks.mu.Lock()
	ep := parks.ep
	parks.mu.Unlock()
	c.mustGet(t, "/b") // out of the park: it is empty
	p.parkAll()
	parks.mu.Lock()
	again, live := parks.ep, parks.live
	parks.mu.Unlock()
	if ep == nil || again != ep || live != 1 {
		t.Fatalf("parked again in set %p (live %d), want the first, %p", again, live, ep)
	}
	start := time.Now()
	c.Close() // the park finds the end: the connection leaves it, and closes
	waitParkEmpty(t)
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Fatalf("the set ended %v after its last connection left, want after a second", d)
	}
}

// waitParkEmpty waits for the park to hold no connection and its set to
// be gone.
func waitParkEmpty(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		parks.mu.Lock()
		live, ep := parks.live, parks.ep
		parks.mu.Unlock()
		if live == 0 && ep == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("park holds %d connections, set %v, want none", live, ep != nil)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Requests on connections asked to park over and over, far more often
// than the ticker asks: a request read while its connection was asked to
// park is served, and its connection goes on (the deadline that was to
// end its wait is lifted), or parks and comes out for the next.
func TestRequestsWhileAskedToPark(t *testing.T) {
	parkWays(t, func(t *testing.T, over parkOver) {
		p := startParkTest(t, over, time.Minute)
		stop := make(chan struct{})
		asked := make(chan struct{})
		go func() {
			defer close(asked)
			for {
				select {
				case <-stop:
					return
				default:
				}
				p.s.mu.Lock()
				for c := range p.s.conns {
					c.askPark()
				}
				p.s.mu.Unlock()
				time.Sleep(20 * time.Microsecond)
			}
		}()
		const n, each = 8, 300
		var wg sync.WaitGroup
		for i := range n {
			c := p.dial()
			wg.Go(func() {
				for j := range each {
					if err := c.get(fmt.Sprintf("/%d/%d", i, j)); err != nil {
						t.Errorf("client %d: %v", i, err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(stop)
		<-asked
	})
}

// A request on a connection that waits with its goroutine, and on one
// that waits in the park (what a park adds to a request: the socket out
// of the park, a goroutine woken), each asked once the connection is
// idle, with the connection waiting in the ready queue or in Go's poller
// (the queue aside, as with more than one P) before it parks. The time a
// request takes is reported on its own (request-ns), as each iteration of
// the parked runs parks the connection first; the timer is not stopped
// around that, which costs more than what is measured (a stop of the
// world to read the memory statistics). cpu-ns/op is the process's CPU
// an iteration, the client's and the wait for the connection's state
// included: what parked adds over awake is the park's, both ways.
func BenchmarkRequestAfterIdle(b *testing.B) {
	for _, wait := range []string{"queue", "poller"} {
		for _, parked := range []bool{false, true} {
			name := wait + "/awake"
			if parked {
				name = wait + "/parked"
			}
			b.Run(name, func(b *testing.B) {
				if wait == "poller" {
					queueAside(b)
				}
				p := startParkTest(b, parkOver{}, time.Minute)
				c := p.dial()
				c.mustGet(b, "/a")
				var took time.Duration
				n := 0
				cpu := processCPU()
				for b.Loop() {
					if parked {
						p.parkAll()
					} else {
						p.allIdle()
					}
					start := time.Now()
					if err := c.get("/a"); err != nil {
						b.Fatal(err)
					}
					took += time.Since(start)
					n++
				}
				b.ReportMetric(float64(took.Nanoseconds())/float64(n), "request-ns")
				b.ReportMetric(float64((processCPU()-cpu).Nanoseconds())/float64(n), "cpu-ns/op")
			})
		}
	}
}

// processCPU is the process's CPU time, user and system: the server's
// and its client's.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// allIdle waits until each of the server's connections is idle.
func (p *parkTest) allIdle() {
	for {
		p.s.mu.Lock()
		all := true
		for c := range p.s.conns {
			all = all && c.state.Load() == stateIdle
		}
		p.s.mu.Unlock()
		if all {
			return
		}
		time.Sleep(20 * time.Microsecond) // not a spin: the CPU an iteration takes is measured
	}
}

// parkAll asks the server's idle connections to park, as the ticker does,
// and waits until each has.
func (p *parkTest) parkAll() {
	for {
		p.s.mu.Lock()
		all := true
		for c := range p.s.conns {
			switch c.state.Load() {
			case stateIdle:
				c.askPark()
				all = false
			case stateParked:
			default:
				all = false
			}
		}
		p.s.mu.Unlock()
		if all {
			return
		}
		time.Sleep(20 * time.Microsecond) // not a spin: the CPU an iteration takes is measured
	}
}
