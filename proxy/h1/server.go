package h1

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rotor-lb/rotor/internal/rawio"
	"github.com/rotor-lb/rotor/proxy"
)

// Server serves HTTP/1.x the short way, in front of a net/http server that
// it shares its handler and settings with, on cleartext connections
// (Serve) and on TLS ones (ServeTLS: HTTP/1.1 after the handshake, and
// whatever else the client chose, HTTP/2, handed to net/http). A
// request the strict reader takes (parseHead: origin form or http://
// absolute form, a head within the buffer, a body framed once if any) is
// read, handed to the handler and answered in the connection's own
// goroutine: no background read and no context a request, and no buffer
// held while the connection waits for its next request. A body of up to
// maxInHand is read whole before the handler runs (startBody), any other
// as the handler reads it (streamBody). The first request it does not
// take hands the connection, with every byte read from it, to the
// net/http server, which keeps it: bodies framed twice, an Expect other
// than 100-continue, upgrades and whatever is malformed are net/http's
// to answer, as they are on every other listener.
//
// What it takes from HTTP: Handler, ReadHeaderTimeout (the time to read a
// head, from the first byte after an idle wait or from the accept),
// IdleTimeout (between requests; ReadTimeout when 0; kept by the server's
// 100 ms ticker, as HAProxy keeps its timeouts, rather than by a deadline
// set after every answer, so an idle connection closes up to a tick
// after it) and ErrorLog. A
// client that goes away while its request waits is found out as
// net/http's server finds it out (a read on the idle connection) once the
// request has taken 100 to 200 ms, and the request's context is cancelled.
//
// Unlike net/http's, the handler must not keep the request's Header map
// once it has returned (its values it may keep): the map is emptied and
// read the next head into, as the answer's header map is.
type Server struct {
	HTTP *http.Server
	// Log, when set, is told when accepting fails for want of
	// descriptors or memory (proxy.AcceptBackoff).
	Log *slog.Logger
	// The bounds on request bodies (SetBodyLimits), which may change while
	// it serves: bodyTimeout in nanoseconds, maxBody in bytes.
	bodyTimeoutNs atomic.Int64
	maxBody       atomic.Int64

	mu         sync.Mutex
	conns      map[*clientConn]struct{}  // guarded by mu
	listeners  map[net.Listener]struct{} // guarded by mu
	inShutdown atomic.Bool
	tick       atomic.Int64           // 100 ms ticks since Serve
	date       atomic.Pointer[[]byte] // the Date header's value, updated each tick
	handoff    *handoff
	buffers    atomic.Int64 // read buffers connections hold
	start      sync.Once
	stop       chan struct{}
	loops      sync.WaitGroup // accept loops (serve)
}

// NewServer returns a server in front of hs.
func NewServer(hs *http.Server) *Server {
	s := &Server{HTTP: hs, conns: map[*clientConn]struct{}{}, listeners: map[net.Listener]struct{}{},
		stop: make(chan struct{})}
	s.handoff = newHandoff(&s.inShutdown)
	return s
}

// tickEvery is the ticker's period: the Date header's resolution, and the
// time after which a request's connection is watched for the client
// going away (one to two ticks).
const tickEvery = 100 * time.Millisecond

// parkTicks is how long a connection waits for its next request, in
// ticks, before it parks (park_linux.go): a second. A park and the wake
// after it cost rotor 20-30 us of CPU (docs/BENCHMARKS.md, "Idle
// connections parked"), paid at most once a second a client so, while a
// client that comes back sooner keeps its goroutine and pays nothing.
// Tests set it lower.
var parkTicks = int64(time.Second / tickEvery)

// Serve accepts connections on ln until the server shuts down, when it
// returns http.ErrServerClosed.
func (s *Server) Serve(ln net.Listener) error { return s.serve(ln, nil) }

// ServeTLS accepts TLS connections on ln as net/http's ServeTLS does, with
// the server's TLSConfig (which must give a certificate) offering HTTP/2
// when the server has a TLSNextProto for it: the handshake is done in the
// connection's goroutine, a connection that chose a protocol of
// TLSNextProto's (HTTP/2) goes to net/http's server, which hands it on,
// and HTTP/1.1 is served the short way over the TLS connection, as on a
// cleartext one (its requests carry the connection's TLS state).
func (s *Server) ServeTLS(ln net.Listener) error {
	if s.HTTP.TLSConfig == nil {
		return errors.New("h1: ServeTLS needs the server's TLSConfig")
	}
	cfg := s.HTTP.TLSConfig.Clone()
	cfg.NextProtos = slices.Clone(cfg.NextProtos)
	if _, ok := s.HTTP.TLSNextProto["h2"]; ok && !slices.Contains(cfg.NextProtos, "h2") {
		cfg.NextProtos = append(cfg.NextProtos, "h2")
	}
	if !slices.Contains(cfg.NextProtos, "http/1.1") {
		cfg.NextProtos = append(cfg.NextProtos, "http/1.1")
	}
	return s.serve(ln, cfg)
}

// serve accepts connections on ln, over TLS with cfg when it is not nil.
func (s *Server) serve(ln net.Listener, cfg *tls.Config) error {
	s.mu.Lock()
	if s.inShutdown.Load() {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.loops.Add(1)
	s.mu.Unlock()
	defer s.loops.Done()
	s.start.Do(func() {
		s.setDate(time.Now())
		s.liftOnHijack()
		go s.HTTP.Serve(s.handoff) //nolint:errcheck // ends with the handoff listener
		go s.ticker()
	})
	backoff := proxy.AcceptBackoff{Log: s.Log}
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.inShutdown.Load() {
				return http.ErrServerClosed
			}
			if backoff.Wait(err) {
				continue
			}
			return err
		}
		backoff.Accepted()
		tc, ok := nc.(*net.TCPConn)
		if !ok {
			s.giveAll(nc, cfg)
			continue
		}
		c, err := s.newConn(tc)
		switch {
		case err != nil: // no raw access to it: net/http's
			s.giveAll(nc, cfg)
			continue
		}
		if cfg != nil {
			// A sock of its own, not the connection's: a TLS connection
			// handed on (HTTP/2) keeps nothing else of the short way's.
			c.tlsSock = newSock(tc, c.rc)
			c.tls = tls.Server(rawTCP{tc, c.tlsSock}, cfg)
			c.out = tlsOut{c.tls}
		}
		go c.serve()
	}
}

// Buffers returns the read buffers connections hold: one for each that
// has read part of a request, none for one waiting for its next.
func (s *Server) Buffers() int64 { return s.buffers.Load() }

// giveAll hands a connection the short way does not serve at all to
// net/http's server, over TLS with cfg when it is not nil (net/http does
// the handshake).
func (s *Server) giveAll(nc net.Conn, cfg *tls.Config) {
	if tc, ok := nc.(*net.TCPConn); ok {
		var rc syscall.RawConn
		if rawio.Supported {
			rc, _ = tc.SyscallConn()
		}
		nc = newPrefixConn(tc, rc, prefix{}, writeStall(s.HTTP))
	}
	if cfg != nil {
		nc = tls.Server(nc, cfg)
	}
	s.handoff.give(nc)
}

// Shutdown stops accepting, closes idle connections, and waits for the
// requests in flight on both servers to end (each connection closes after
// its answer) or for ctx to be done.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closeListeners()
	httpDone := make(chan error, 1)
	go func() { httpDone <- s.HTTP.Shutdown(ctx) }()
	// A connection accepted as the listeners closed is the short way's
	// or net/http's, and served, once its accept loop has returned.
	s.loops.Wait()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !s.closeIdle() {
		select {
		case <-ctx.Done():
			s.handoff.end()
			<-httpDone
			return ctx.Err()
		case <-t.C:
		}
	}
	// Nothing is left to hand net/http's server over: its Serve ends,
	// and its Shutdown waits for what it was handed.
	s.handoff.end()
	return <-httpDone
}

// Close closes every connection of both servers at once. A connection
// whose handler runs is cut (its socket shut down, its request's context
// cancelled) and closed by its own goroutine as the handler returns: its
// descriptor is in use until then.
func (s *Server) Close() error {
	s.closeListeners()
	s.loops.Wait()
	s.mu.Lock()
	for c := range s.conns {
		c.cut()
	}
	s.mu.Unlock()
	s.handoff.end()
	return s.HTTP.Close()
}

func (s *Server) closeListeners() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.inShutdown.Swap(true) {
		close(s.stop)
	}
	for ln := range s.listeners {
		ln.Close()
	}
	clear(s.listeners)
}

// closeIdle closes the connections waiting for a request (a new one only
// after 5 s, as net/http does, so that a request on its way is not cut)
// and reports whether none is left.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		st := c.state.Load()
		if st == stateParked {
			parks.close(c) // its goroutine, started again, closes it
			continue
		}
		if st == stateIdle || st == stateParking || st == stateNew && time.Since(c.accepted) > 5*time.Second {
			if c.state.CompareAndSwap(st, stateClosed) {
				if c.tls != nil {
					c.endTLSWait()
				} else {
					// Its wait in readySockets ends first: Close waits
					// for the raw read it waits in.
					c.ready.poke()
					c.tc.Close()
				}
			}
		}
	}
	return len(s.conns) == 0
}

func (s *Server) ticker() {
	t := time.NewTicker(tickEvery)
	defer t.Stop()
	// An idle connection is closed after idleTicks whole ticks: between
	// the idle timeout and a tick more.
	idleTicks := int64(0)
	if d := s.idleTimeout(); d > 0 {
		idleTicks = int64((d + tickEvery - 1) / tickEvery)
	}
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.setDate(now)
			tick := s.tick.Add(1)
			s.mu.Lock()
			for c := range s.conns {
				switch st, at := c.state.Load(), c.idleAt.Load(); {
				case st == stateHandler && c.started.Load() <= tick-2 && !c.streaming.Load():
					c.startWatch()
				case (st == stateIdle || st == stateParked) && idleTicks > 0 && tick-c.idleSince.Load() > idleTicks:
					// Idle for the idle timeout: the ticker, not a deadline
					// set after every answer, ends it.
					switch {
					case st == stateParked:
						parks.close(c)
					case !c.state.CompareAndSwap(stateIdle, stateClosed):
					case c.tls != nil:
						c.endTLSWait()
					default:
						c.cut()
					}
				case st == stateIdle && at < tick-1 && c.idleAt.CompareAndSwap(at, math.MaxInt64):
					// Idle through a whole tick, and asked once a spell.
					c.closeIfEnded()
				case st == stateIdle && canPark && at == math.MaxInt64 && tick-c.idleSince.Load() >= parkTicks &&
					c.idleAt.CompareAndSwap(at, math.MaxInt64-1):
					// Idle for parkTicks, and asked once a spell.
					c.askPark()
				}
			}
			s.mu.Unlock()
		}
	}
}

func (s *Server) setDate(now time.Time) {
	b := now.UTC().AppendFormat(nil, http.TimeFormat)
	s.date.Store(&b)
}

func (s *Server) logf(format string, args ...any) {
	if s.HTTP.ErrorLog != nil {
		s.HTTP.ErrorLog.Printf(format, args...)
	}
}

func (s *Server) idleTimeout() time.Duration {
	if s.HTTP.IdleTimeout != 0 {
		return s.HTTP.IdleTimeout
	}
	return s.HTTP.ReadTimeout
}

func (s *Server) headTimeout() time.Duration {
	if s.HTTP.ReadHeaderTimeout != 0 {
		return s.HTTP.ReadHeaderTimeout
	}
	return s.HTTP.ReadTimeout
}

// SetBodyLimits bounds request bodies from now on: timeout, the time
// between two reads of one, whether the server reads it whole before its
// handler runs or as the handler reads it (the head timeout when 0);
// max, when over 0, the longest body: one whose length is over it is
// not read before the handler runs, which may refuse it without a byte
// of it read, and the handler's reads of one stop there
// (proxy.ErrBodyTooLarge). Safe to call while the server serves: a
// reload's new bounds hold for the reads that follow.
func (s *Server) SetBodyLimits(timeout time.Duration, max int64) {
	s.bodyTimeoutNs.Store(int64(timeout))
	s.maxBody.Store(max)
}

func (s *Server) bodyTimeout() time.Duration {
	if d := time.Duration(s.bodyTimeoutNs.Load()); d > 0 {
		return d
	}
	return s.headTimeout()
}

// A connection's state, for the shutdown (which closes idle ones) and the
// ticker (which watches a request that takes long).
const (
	stateNew     int32 = iota // accepted, no byte read yet
	stateIdle                 // between requests, nothing read of the next
	stateHead                 // reading a head, or writing an answer
	stateHandler              // the handler runs
	stateWatched              // the handler runs and a goroutine reads the connection
	stateClosed               // closed by the shutdown
	stateParking              // idle, and its goroutine asked to leave it in the park (askPark)
	stateParked               // idle in the park, with no goroutine
)

// bufSize is the read buffer. A head that fills it is read on in one of
// longBufSize, as HAProxy's 16 KiB buffer holds a head and nginx's
// large_client_header_buffers take a long one: a head of a few KiB (long
// cookies, a bearer token) is common enough. A head longer than that
// goes to net/http's server.
const (
	bufSize     = 4 << 10
	longBufSize = 16 << 10
)

// maxInHand is the longest request body the server reads whole before its
// handler runs when it did not come with its head, as nginx reads a body
// before it passes the request on; inHandBudget bounds the bytes of such
// bodies (and their heads) all connections hold while they are still
// being read. A longer body, one waiting past the budget and a chunked
// one are read as the handler reads them (streamBody); one asking for
// any Expect but 100-continue goes to net/http's server.
const maxInHand = 64 << 10

var inHandBudget int64 = 64 << 20 // tests set it lower

// inHandHeld is the bytes connections hold of bodies still being read.
var inHandHeld atomic.Int64

// pendingBody is a request whose body is being read whole before its
// handler runs.
type pendingBody struct {
	r       *http.Request // nil: none
	buf     []byte        // the head as it came, then the body
	head    int           // the head's length
	got     int           // the body's bytes read
	by      time.Time     // when the next read of it must have come (zero: no bound)
	expired bool          // a read waited past by
	began   time.Time     // when its head had come
}

var (
	bufs     = sync.Pool{New: func() any { return new([bufSize]byte) }}
	longBufs = sync.Pool{New: func() any { return new([longBufSize]byte) }}
)

// clientConn is one client connection served the short way.
type clientConn struct {
	s        *Server
	tc       *net.TCPConn
	rc       syscall.RawConn
	raw      sock      // the socket's reads and writes, through rc (cleartext: under TLS, a sock of its own)
	tls      *tls.Conn // over tc, on a TLS listener; nil on a cleartext one
	tlsSock  *sock     // what tls reads and writes through
	out      connOut   // what answers are written through: raw, or tls
	remote   string
	addr     string // remote, when no piece of it needs a look to be written (plainAddr): its requests' ReadHead's
	accepted time.Time
	ctx      context.Context // the connection's, for every request on it
	cancel   context.CancelFunc
	hook     CancelHook    // the short way's transport cuts its exchange through it
	base     *http.Request // what every request on it starts from: its context and client
	block    *headBlock    // the request being served, given back once it is answered
	headBy   time.Time     // when the head being read must be whole
	headOpen bool          // a head began and headBy is still to work out (boundHead)
	armed    bool          // the connection's read deadline is the one its next read needs
	deadline bool          // a read deadline is set on the connection

	pend    pendingBody // a request whose body is being read before it is served
	stream  *streamBody // the body of the request being served, when its handler reads it from the connection
	buf     []byte      // nil while nothing is buffered; bufSize or longBufSize bytes
	first   [1]byte     // over TLS, the first byte after an idle wait, read before a buffer is taken
	r, w    int         // buf[r:w] is read and not yet taken
	scanned int         // of buf[r:w], the whole lines of the head scanHead checked

	stepFn   func(fd uintptr) bool // c.step, made once
	mustRead bool                  // step reads before it looks for a head
	drained  bool                  // the last read left the socket empty (it filled less than the buffer)
	end      int                   // why step ended the loop (endRead...)

	served     int    // requests served
	connection string // the first Connection value of the request being served (parseHead)
	afterPOST  bool   // the last was a POST: CRLFs before the next head are dropped
	peeked     bool   // four bytes of this head came (net/http's Peek(4) between requests)
	state      atomic.Int32
	streaming  atomic.Bool  // the handler runs and its body is still to read from the connection: no watch
	started    atomic.Int64 // the tick the request in the handler started at
	idleAt     atomic.Int64 // the tick the connection last went idle at; MaxInt64 once the ticker asked
	idleSince  atomic.Int64 // the tick the connection last went idle at

	watchMu   sync.Mutex
	stopping  bool          // guarded by watchMu: the watch is being stopped
	watchR    watchReader   // guarded by watchMu: what the watch reads (a second descriptor of the socket, or the TLS connection)
	watchDone chan struct{} // closed when the watch ends
	watchByte [1]byte       // a byte the watch read: the next request's
	watchN    int

	ready waiter // its place in readySockets, where it waits for its next request

	parkMu sync.Mutex // held while the state goes to parking or out of it, with the read deadline
	park   parkSlot   // its place in the park, while parked (guarded by the park's lock)
}

func (s *Server) newConn(tc *net.TCPConn) (*clientConn, error) {
	if !rawio.Supported {
		return nil, errors.ErrUnsupported
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil, err
	}
	c := &clientConn{s: s, tc: tc, rc: rc, remote: tc.RemoteAddr().String(), accepted: time.Now()}
	if plainAddr(c.remote) {
		c.addr = c.remote
	}
	c.raw.init(tc, rc)
	c.raw.stall = writeStall(s.HTTP)
	c.ready.init()
	c.raw.ready = &c.ready
	c.out = &c.raw
	c.stepFn = c.step
	ctx := context.WithValue(context.Background(), http.ServerContextKey, s.HTTP)
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, tc.LocalAddr())
	ctx, c.cancel = context.WithCancel(ctx)
	c.ctx = withCancelHook(ctx, &c.hook)
	c.base = (&http.Request{RemoteAddr: c.remote}).WithContext(c.ctx)
	// Accepted as a shutdown began, it is served all the same, as
	// net/http serves one (the shutdown waits for the accept loops).
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	return c, nil
}

// serve runs the connection's requests one after another until it closes,
// is handed to net/http or parks. They run inside one raw read of the
// socket (step), so that the poller's readiness is reset once, when the
// connection starts (or comes out of the park), and never again: after an
// answer, the connection waits for the next request without a read that
// finds nothing, as the readiness of any byte that came since its last
// read is still there.
func (c *clientConn) serve() {
	start := c.accepted
	if c.tls != nil {
		handedOff, ok := c.handshake()
		if !ok {
			c.finish(handedOff)
			return
		}
		start = time.Now()
	}
	if d := c.s.headTimeout(); d > 0 {
		c.headBy = start.Add(d)
		c.tc.SetReadDeadline(c.headBy)
		c.deadline = true
	}
	c.armed, c.mustRead = true, true
	if c.run() {
		// Parked: its goroutine, grown by serving, serves the next to come
		// out of the park.
		parks.next().resume()
	}
}

// resume serves c, out of the park, and then, on the same goroutine,
// the connections that come out of it next (park.next), while one comes
// within a tick: to read what came on each, or (its state closed) to
// close it.
func (c *clientConn) resume() {
	for ; c != nil; c = parks.next() {
		if c.state.Load() == stateClosed {
			c.finish(false)
			continue
		}
		c.wake()
		c.run()
	}
}

// wake lifts the read deadline that ended c's wait to park, unless c has
// been asked to park again since it came out (its state idle, the ticker
// may have): then its wait ends at once and it parks again, where lifted
// it would wait asked and never go (nor be timed out, which takes idle
// and parked connections).
func (c *clientConn) wake() {
	c.parkMu.Lock()
	if c.state.Load() != stateParking {
		c.tc.SetReadDeadline(time.Time{})
	}
	c.parkMu.Unlock()
	c.deadline, c.end = false, endNone
}

// run serves the connection until it ends, is handed off or parks
// (parked: the goroutine is free).
func (c *clientConn) run() (parked bool) {
	for {
		if c.tls != nil {
			// Over TLS the reads wait in the TLS connection's own: step
			// returns false only to wait for the next request, which its
			// next read does.
			for !c.step(0) {
			}
		} else {
			if err := c.rc.Read(c.stepFn); c.end == endNone && err != nil {
				// The deadline, the connection closed by the shutdown, or
				// the deadline of a wait ended to park.
				c.end = endRead
				if c.state.Load() == stateParking {
					c.end = endPark
				}
				c.pend.expired = c.pend.r != nil && errors.Is(err, os.ErrDeadlineExceeded)
			}
			readySockets.remove(&c.ready, c.rc)
		}
		if c.end != endPark {
			break
		}
		if parks.add(c) {
			return true // the park's, with no goroutine, until it comes out
		}
		if !c.stayAwake(stateIdle) {
			c.end = endClose // the shutdown closed it meanwhile
			break
		}
		c.end = endNone // the park could not take it: it waits here
	}
	handedOff := false
	switch c.end {
	case endRead:
		if c.pend.r != nil || c.w > c.r && c.mayHandOff() {
			// Part of a head, or a head and part of its body, then the
			// end, a reset or the deadline: net/http's to answer (or not)
			// as it would.
			handedOff = c.handOff()
		}
	case endHandOff:
		handedOff = c.handOff()
	case endLinger:
		c.lingeringClose()
	}
	c.finish(handedOff)
	return false
}

// finish ends the server's part in the connection, closing it unless it
// was handed off.
func (c *clientConn) finish(handedOff bool) {
	c.s.mu.Lock()
	delete(c.s.conns, c)
	c.s.mu.Unlock()
	c.dropBody()
	c.cancelRequest()
	c.r = c.w
	c.release()
	if !handedOff {
		c.close()
	}
}

// askPark asks idle connection c's goroutine to leave it in the park: its
// wait in Go's poller ends by the deadline, its wait in readySockets by a
// poke. Called by the ticker.
func (c *clientConn) askPark() {
	c.parkMu.Lock()
	if c.state.CompareAndSwap(stateIdle, stateParking) {
		c.tc.SetReadDeadline(aLongTimeAgo)
		c.ready.poke()
	}
	c.parkMu.Unlock()
}

// stayAwake takes a connection asked to park back to serving (a request
// came before it parked: stateHead) or to waiting with its goroutine (the
// park could not take it: stateIdle), its deadline lifted; false: it was
// closed meanwhile.
func (c *clientConn) stayAwake(state int32) bool {
	c.parkMu.Lock()
	defer c.parkMu.Unlock()
	if !c.state.CompareAndSwap(stateParking, state) {
		return false
	}
	c.tc.SetReadDeadline(time.Time{})
	c.deadline = false
	return true
}

// handshake does a TLS connection's handshake as net/http's server does,
// within the least of the server's head, read and write timeouts; a
// client that spoke plain HTTP gets net/http's 400, and every failure is
// logged as net/http logs it. A connection that chose a protocol other
// than HTTP/1.x (HTTP/2) goes to net/http's server (handedOff), which
// hands it to its TLSNextProto; ok: HTTP/1.1 is the short way's.
func (c *clientConn) handshake() (handedOff, ok bool) {
	to := handshakeTimeout(c.s.HTTP)
	if to > 0 {
		dl := time.Now().Add(to)
		c.tc.SetReadDeadline(dl)
		c.tc.SetWriteDeadline(dl)
	}
	if err := c.tls.HandshakeContext(c.ctx); err != nil {
		reason := err.Error()
		var re tls.RecordHeaderError
		if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
			_, _ = io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
			reason = "client sent an HTTP request to an HTTPS server"
		}
		c.s.logf("http: TLS handshake error from %s: %v", c.remote, reason)
		return false, false
	}
	if to > 0 {
		c.tc.SetReadDeadline(time.Time{})
		c.tc.SetWriteDeadline(time.Time{})
	}
	st := c.tls.ConnectionState()
	switch st.NegotiatedProtocol {
	case "", "http/1.1", "http/1.0":
		// Its answers are the short way's to bound (HTTP/2's server
		// bounds its own writes).
		c.tlsSock.stall = writeStall(c.s.HTTP)
	default:
		return c.s.handoff.give(c.tls), false
	}
	c.base.TLS = &st
	return false, true
}

// writeStall is how long a write of an answer may make no progress
// before the request fails, as nginx's send_timeout bounds the wait
// between two writes: the server's idle timeout, the bound HTTP/2's
// server gives its writes.
func writeStall(hs *http.Server) time.Duration { return hs.IdleTimeout }

// handshakeTimeout bounds a TLS handshake as net/http's server does: the
// least of its head, read and write timeouts that are set.
func handshakeTimeout(hs *http.Server) time.Duration {
	var d time.Duration
	for _, v := range [...]time.Duration{hs.ReadHeaderTimeout, hs.ReadTimeout, hs.WriteTimeout} {
		if v > 0 && (d == 0 || v < d) {
			d = v
		}
	}
	return d
}

// looksLikeHTTP reports whether what came in place of a TLS record's
// header is the start of a plain HTTP request, as net/http tells it.
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}

// close closes the connection; over TLS, with the alert that says so, as
// net/http closes one.
func (c *clientConn) close() {
	if c.tls != nil {
		c.tls.Close()
		return
	}
	c.tc.Close()
}

// Why a connection's loop ended.
const (
	endNone    = iota
	endRead    // a read failed, the client closed, or the wait ended (deadline, shutdown)
	endHandOff // the head is net/http's
	endLinger  // the answer was the last: close without losing it
	endClose   // close at once
	endPark    // wait in the park (askPark)
)

// step is the connection's loop inside the raw read: it reads when it
// must, serves every whole head buffered, and returns false to wait for
// the socket (the poller calls it again once it is readable) or true when
// the connection is done with, c.end saying why.
func (c *clientConn) step(fd uintptr) bool {
	for {
		var r *http.Request
		if c.pend.r != nil {
			if !c.readBody(fd) {
				return c.end != endNone
			}
			r = c.takeBody()
		} else {
			if c.mustRead {
				if !c.read(fd) {
					return c.end != endNone
				}
			}
			var n int
			var theirs bool
			r, n, theirs = c.nextHead(fd)
			switch {
			case theirs:
				c.end = endHandOff
				return true
			case r == nil:
				c.mustRead = c.pend.r == nil
				continue
			}
			c.r, c.scanned = c.r+n, 0
		}
		if c.r == c.w {
			c.release() // nothing of the next request yet: hold no buffer meanwhile
		}
		c.served++
		c.afterPOST, c.peeked = r.Method == http.MethodPost, false
		readySockets.serving(1)
		c.end = c.serveRequest(r)
		c.hook.arrived = time.Time{}
		readySockets.serving(-1)
		if c.end != endNone {
			return true
		}
		if c.r < c.w { // the next request came with the last one
			c.setHeadBy()
			c.mustRead = false
			continue
		}
		// Wait for the next request: the socket is read once it is
		// readable, not before (the readiness of bytes that came since the
		// last read was not reset), unless the last read filled the
		// buffer: the socket may hold more, whose readiness the wait
		// before that read took, and it is read until it is found empty.
		tick := c.s.tick.Load()
		c.idleAt.Store(tick)
		c.idleSince.Store(tick)
		if !c.state.CompareAndSwap(stateHead, stateIdle) {
			c.end = endClose // the shutdown closed it meanwhile
			return true
		}
		// No deadline while it waits: the ticker bounds the wait.
		if c.deadline {
			c.tc.SetReadDeadline(time.Time{})
			c.deadline = false
		}
		c.armed, c.mustRead = true, true
		if !c.drained {
			continue
		}
		if c.tls != nil {
			return false // its next read waits
		}
		if !c.awaitRequest(fd) {
			return c.end != endNone // endNone: wait in Go's poller
		}
	}
}

// awaitRequest waits for the next request of an idle cleartext connection
// in readySockets, which wakes connections in the order their requests
// came, and reads it; false: the connection is done (c.end set), or the
// queue could not take it and it is to wait in Go's poller.
func (c *clientConn) awaitRequest(fd uintptr) bool {
	for readySockets.wait(&c.ready, fd) {
		switch c.state.Load() {
		case stateClosed:
			c.end = endClose // closed by the shutdown while it waited
			return false
		case stateParking:
			c.end = endPark // asked to park while it waited
			return false
		}
		if c.read(fd) {
			return true
		}
		if c.end != endNone {
			return false
		}
		// A token of bytes an earlier read took: wait again.
	}
	return false
}

// read reads what the socket has into the buffer, a buffer taken only
// when bytes came; false: nothing came (EAGAIN, c.end unset: wait) or the
// connection is done (c.end set).
func (c *clientConn) read(fd uintptr) bool {
	st := c.state.Load()
	if !c.armed {
		c.boundHead()
		c.tc.SetReadDeadline(c.headBy)
		c.armed, c.deadline = true, !c.headBy.IsZero()
	}
	c.compact()
	var n int
	var err error
	if c.tls != nil {
		n, err = c.readTLS()
		c.drained = true // its reads wait for what they find missing
	} else {
		if c.buf == nil {
			c.take()
		}
		n, err = rawio.Read(fd, c.buf[c.w:])
		c.drained = n < len(c.buf)-c.w
	}
	switch {
	case err == syscall.EAGAIN:
		if c.w == 0 {
			c.release()
		}
		return false
	case err != nil || n <= 0:
		c.end = endRead
		if c.tls != nil && c.state.Load() == stateParking && errors.Is(err, os.ErrDeadlineExceeded) {
			// Its wait ended to park: a TLS connection goes on after
			// a read past its deadline, with what it read kept.
			c.end = endPark
		}
		return false
	}
	c.w += n
	c.mustRead = false
	if st != stateHead {
		// Asked to park (before the read or since), it stays for the
		// request that came; otherwise the shutdown closed it meanwhile.
		if (st == stateParking || !c.state.CompareAndSwap(st, stateHead)) && !c.stayAwake(stateHead) {
			c.end = endClose
			return false
		}
		if st == stateIdle || st == stateParking {
			c.setHeadBy()
		}
	}
	return true
}

// readTLS reads what the TLS connection has into the buffer. With none
// buffered (the wait for the next request) it reads one byte first, so
// that the wait holds no buffer, and the rest of the record at the next
// read, which waits for nothing more then.
func (c *clientConn) readTLS() (int, error) {
	var n int
	var err error
	if c.buf != nil {
		n, err = c.tls.Read(c.buf[c.w:])
	} else if n, err = c.tls.Read(c.first[:]); n == 1 {
		c.take()
		c.buf[0] = c.first[0]
	}
	if n > 0 {
		// Bytes and the client's end in one read (its last request and
		// its close_notify): the next read finds the end again.
		err = nil
	}
	return n, err
}

// nextHead looks for a whole head in what is buffered and returns its
// request and length; no request: more must be read, or, theirs, the head
// is net/http's. fd is the connection's descriptor (cleartext), for a
// body the handler reads.
func (c *clientConn) nextHead(fd uintptr) (r *http.Request, n int, theirs bool) {
	if c.w-c.r >= 4 {
		c.peeked = true
	}
	if c.afterPOST && c.peeked {
		// RFC 9112, 2.2: old clients send a CRLF after a POST's body;
		// net/http drops up to four CR or LF before the next head.
		c.afterPOST = false
		for i := 0; i < 4 && (c.buf[c.r] == '\r' || c.buf[c.r] == '\n'); i++ {
			c.r++
		}
	}
	if c.buf == nil || c.afterPOST {
		return nil, 0, false
	}
	n, c.scanned = scanHead(c.buf[c.r:c.w], c.scanned)
	if n > 0 {
		// A whole head: the short way's, or (a body that did not come
		// with it, chunked, say) net/http's.
		var size int
		a := headBlocks.Get().(*headBlock)
		r, c.connection, size = parseHead(c.buf[c.r:c.r+n], c.base, a)
		if max := c.s.HTTP.MaxHeaderBytes; r != nil && max > 0 && size > max {
			r = nil // net/http's, and the handler's to refuse (HeadBounded)
		}
		if r != nil && r.ContentLength != 0 {
			end := int64(c.r+n) + r.ContentLength
			// A body that came whole with its head is in hand, though its
			// client asked for 100 Continue (it did not wait for it): it
			// can go again on a retry. The Expect goes on with it, as
			// net/http's server leaves it to the handler.
			inHand := !a.expect || continues(r)
			switch {
			case r.ContentLength > 0 && end <= int64(c.w) && inHand:
				// A copy: a transport may still read a request's body
				// after the handler has returned, and the buffer is the
				// next request's by then.
				r.Body = &wholeBody{b: bytes.Clone(c.buf[c.r+n : end])}
				n = int(end) - c.r
			case r.ContentLength > 0 && end > int64(c.w) && c.startBody(r, n):
				// Served once its body is read (step).
				a.read.addr = c.addr
				c.block = a
				return nil, 0, false
			case r.ContentLength < 0 && inHand && c.chunkedInHand(r, &n, fd):
				// A chunked body that came whole with its head: in hand.
			case !c.startStream(r, a.expect, fd):
				r = nil // net/http's
			}
		}
		if r != nil && r.ContentLength == 0 && a.expect {
			r = nil // net/http's: it answers an Expect it does not meet 417
		}
		if r == nil {
			putHeadBlock(a, true) // net/http reads the head again: nothing holds this reading
			return nil, 0, true
		}
		a.read.addr = c.addr
		c.block = a // serveRequest gives it back
		return r, n, false
	}
	// Not a head the strict reader takes, or longer than the buffer.
	if n == 0 && c.r == 0 && c.w == len(c.buf) && c.grow() {
		return nil, 0, false
	}
	theirs = n < 0 || c.r == 0 && c.w == len(c.buf)
	return nil, 0, theirs && c.mayHandOff()
}

// startBody begins to read the body of r, whose head is the n bytes
// buffered at c.r, whole before r is served, unless it goes to net/http
// (false). What is buffered past the head is the body's first bytes; the
// buffer is left empty. A request that expects 100 Continue is sent it
// now, and its Expect field dropped: the body is read here, not by the
// backend (as nginx does).
func (c *clientConn) startBody(r *http.Request, n int) bool {
	cl := r.ContentLength
	if max := c.s.maxBody.Load(); cl > maxInHand || max > 0 && cl > max || r.Method == http.MethodConnect {
		return false
	}
	_, ok := r.Header["Expect"]
	if ok && !continues(r) {
		return false // net/http answers 417, or ignores it (HTTP/1.0)
	}
	size := int64(n) + cl
	if inHandHeld.Add(size) > inHandBudget {
		inHandHeld.Add(-size)
		return false
	}
	buf := make([]byte, size)
	copy(buf, c.buf[c.r:c.w])
	c.pend = pendingBody{r: r, buf: buf, head: n, got: c.w - c.r - n, began: time.Now()}
	c.r, c.scanned = c.w, 0
	c.release()
	c.armed = true
	c.pend.by = c.bodyDeadline()
	if ok {
		delete(r.Header, "Expect")
		// A failed write leaves the client's end, or its silence, to
		// the body's read.
		_, _ = c.out.Write(continue100)
	}
	return true
}

var continue100 = []byte("HTTP/1.1 100 Continue\r\n\r\n")

// continues reports whether r's Expect is one HTTP/1.1 100-continue, the
// one expectation the server meets itself (net/http answers any other
// 417, and ignores one on HTTP/1.0).
func continues(r *http.Request) bool {
	expect := r.Header["Expect"]
	return r.ProtoMinor != 0 && len(expect) == 1 && strings.EqualFold(strings.TrimSpace(expect[0]), "100-continue")
}

// lookSize bounds what chunkedInHand looks at: a body of up to maxInHand
// and its framing.
const lookSize = maxInHand + bufSize

var looks = sync.Pool{New: func() any { return new([lookSize]byte) }}

// chunkedInHand takes the chunked body of r, whose head is the *n bytes
// buffered at c.r, in hand when it has come whole, with no trailer field,
// and is within the body limit (SetBodyLimits): r's body is then its data, which a transport
// sends on with its head in one write. A body that filled the buffer
// may be in the socket too: the socket is looked at (rawio.Look, which
// takes nothing), and what it holds of the body, up to maxInHand, is
// taken once the body is known whole, and nothing past its end. *n
// counts the head and what the buffer held of the body then. Anything
// else (a body still coming, a trailer, framing the body's reader
// refuses) is left to it (startStream), which reads it, or fails the
// read, as its handler does.
func (c *clientConn) chunkedInHand(r *http.Request, n *int, fd uintptr) bool {
	if r.Method == http.MethodConnect {
		return false
	}
	if _, ok := r.Header["Trailer"]; ok {
		return false
	}
	src := c.buf[c.r+*n : c.w]
	buffered := len(src)
	size, used, ok := wholeChunks(src, nil)
	if !ok && c.tls == nil && c.w == len(c.buf) {
		look := looks.Get().(*[lookSize]byte)
		defer looks.Put(look)
		k := copy(look[:], src)
		if m, err := rawio.Look(fd, look[k:]); err == nil && m > 0 {
			src = look[:k+m]
			size, used, ok = wholeChunks(src, nil)
		}
	}
	if max := c.s.maxBody.Load(); !ok || size > maxInHand || max > 0 && size > max {
		return false
	}
	data := make([]byte, size)
	wholeChunks(src[:used], data)
	r.Body = &wholeBody{b: data}
	if used <= buffered {
		*n += used
		return true
	}
	// The rest of it is in the socket: take it, and no more. What the
	// socket was seen to hold is there to take; if a read fails all the
	// same, the body is still whole (the look's), and the connection
	// closes after the answer, what is left of the body never read as a
	// request.
	*n += buffered
	for got := buffered; got < used; {
		k, err := rawio.Read(fd, src[got:used])
		if err != nil || k <= 0 {
			r.Close = true
			break
		}
		got += k
	}
	c.drained = false
	return true
}

// wholeChunks reads a chunked body at the start of p: its data's size and
// the bytes it takes, framing and all, when it is all there, with an
// empty trailer and framing as the body's reader takes it (streamBody's
// rules); false otherwise. The data is copied into data when it is not
// nil (its length at least the size, from a first call without it).
func wholeChunks(p, data []byte) (size int64, used int, ok bool) {
	var frame chunkFraming
	for {
		i := bytes.IndexByte(p[used:], '\n')
		if i < 1 || p[used+i-1] != '\r' {
			return 0, 0, false
		}
		k, err := frame.size(p[used : used+i-1])
		if err != nil || k > int64(len(p)) {
			return 0, 0, false
		}
		used += i + 1
		if k == 0 {
			// The empty trailer. Any other (a trailer's lines, or one
			// opening with a bare LF, which ends the body only once a
			// CRLF CRLF is ahead) is the stream's to read.
			if len(p)-used >= 2 && p[used] == '\r' && p[used+1] == '\n' {
				return size, used + 2, true
			}
			return 0, 0, false
		}
		end := used + int(k)
		if end+2 > len(p) || p[end] != '\r' || p[end+1] != '\n' {
			return 0, 0, false
		}
		if data != nil {
			copy(data[size:], p[used:end])
		}
		size += k
		used = end + 2
	}
}

// bodyDeadline sets the read deadline of the next read of a pending body
// and returns it (zero: none).
func (c *clientConn) bodyDeadline() time.Time {
	var by time.Time
	if d := c.s.bodyTimeout(); d > 0 {
		by = time.Now().Add(d)
	} else if !c.deadline {
		return by
	}
	c.tc.SetReadDeadline(by)
	c.deadline = !by.IsZero()
	return by
}

// readBody reads what the socket has of the pending body; true once the
// body is whole. False with c.end unset: wait for more (cleartext); with
// c.end set: the client ended, failed or was too slow (the request is
// handed to net/http with what came of it, run).
func (c *clientConn) readBody(fd uintptr) bool {
	p := &c.pend
	came := false
	for {
		dst := p.buf[p.head+p.got:]
		var n int
		var err error
		if c.tls != nil {
			n, err = c.tls.Read(dst)
		} else {
			n, err = rawio.Read(fd, dst)
		}
		if err == syscall.EAGAIN {
			if came {
				p.by = c.bodyDeadline()
			}
			return false
		}
		if n > 0 {
			// A short read is not the socket found empty: the client's end
			// may have come behind the bytes, with no event of its own.
			p.got += n
			if n == len(dst) {
				return true
			}
			came = true
			if c.tls != nil {
				p.by = c.bodyDeadline()
			}
			continue
		}
		c.end = endRead
		var ne net.Error
		p.expired = errors.As(err, &ne) && ne.Timeout()
		return false
	}
}

// takeBody ends the read of the pending body and returns its request,
// the body in hand. The socket may hold the next request already.
func (c *clientConn) takeBody() *http.Request {
	p := &c.pend
	r := p.r
	r.Body = &wholeBody{b: p.buf[p.head:]}
	inHandHeld.Add(-int64(len(p.buf)))
	c.hook.arrived = p.began // served next; zero again once it is
	*p = pendingBody{}
	if c.deadline {
		c.tc.SetReadDeadline(time.Time{})
		c.deadline = false
	}
	c.drained = false
	return r
}

// dropBody gives up the pending body, if any, and returns what was read
// of its request (its head, then what came of the body) and whether a
// read of it waited too long.
func (c *clientConn) dropBody() (read []byte, expired bool) {
	p := &c.pend
	if p.r == nil {
		return nil, false
	}
	read, expired = p.buf[:p.head+p.got], p.expired
	inHandHeld.Add(-int64(len(p.buf)))
	*p = pendingBody{}
	if c.block != nil {
		putHeadBlock(c.block, true)
		c.block = nil
	}
	return read, expired
}

// wholeBody is a request body that came whole with its head, or was read
// whole before its request was served.
type wholeBody struct {
	b    []byte
	read bool // some of it was read
}

// BodyInHand reports whether r's body came whole with its head, or was
// read whole before its handler ran: it is r.ContentLength bytes already
// read, and reading it waits for nothing.
func BodyInHand(r *http.Request) bool {
	_, ok := r.Body.(*wholeBody)
	return ok
}

// BodyBounded reports whether r's body is the short way's, which holds
// it to the server's body limits (SetBodyLimits) itself: one read whole
// before the handler ran (r.ContentLength bytes in hand, whose reads wait
// for nothing), or one the handler reads from the connection
// (streamBody), with the errors proxy.LimitBody gives.
func BodyBounded(r *http.Request) bool {
	switch r.Body.(type) {
	case *wholeBody, *streamBody:
		return true
	}
	return false
}

func (w *wholeBody) Read(p []byte) (int, error) {
	if len(w.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, w.b)
	w.b = w.b[n:]
	w.read = w.read || n > 0
	return n, nil
}

// Held returns the body's length while none of it was read
// (proxy.InHand).
func (w *wholeBody) Held() int64 {
	if w.read {
		return -1
	}
	return int64(len(w.b))
}

func (w *wholeBody) Close() error { return nil }

// Take takes the rest of the body whole (proxy.InHand).
func (w *wholeBody) Take(n int64) ([]byte, bool) {
	if int64(len(w.b)) != n {
		return nil, false
	}
	p := w.b
	w.b, w.read = nil, true
	return p, true
}

// mayHandOff reports whether what is buffered may go to net/http's
// server now: between requests it waits for four bytes before it reads a
// head, and closes quietly on fewer.
func (c *clientConn) mayHandOff() bool { return c.served == 0 || c.peeked }

// compact moves what is buffered to the buffer's start.
func (c *clientConn) compact() {
	if c.r > 0 {
		c.w = copy(c.buf, c.buf[c.r:c.w])
		c.r = 0
	}
}

func (c *clientConn) take() {
	c.buf = bufs.Get().(*[bufSize]byte)[:]
	c.s.buffers.Add(1)
}

// grow moves what the full buffer holds, a head not yet whole, into a
// long one; false: it is one already, or the listener's bound on heads
// would refuse a head that long anyway (net/http's server refuses it).
func (c *clientConn) grow() bool {
	if len(c.buf) != bufSize || c.s.HTTP.MaxHeaderBytes > 0 && c.s.HTTP.MaxHeaderBytes <= bufSize {
		return false
	}
	long := longBufs.Get().(*[longBufSize]byte)[:]
	copy(long, c.buf[:c.w])
	bufs.Put((*[bufSize]byte)(c.buf))
	c.buf = long
	return true
}

// release gives the buffer back when nothing is in it.
func (c *clientConn) release() {
	if c.buf != nil && c.r == c.w {
		if len(c.buf) == bufSize {
			bufs.Put((*[bufSize]byte)(c.buf))
		} else {
			longBufs.Put((*[longBufSize]byte)(c.buf))
		}
		c.buf, c.r, c.w = nil, 0, 0
		c.s.buffers.Add(-1)
	}
}

// handOff gives the connection and what was read of it to net/http's
// server; a head that was being read keeps the deadline it had.
func (c *clientConn) handOff() bool {
	pending, by := c.pend.r != nil, c.pend.by
	pre, expired := c.dropBody()
	if c.buf != nil {
		pre = append(pre, c.buf[c.r:c.w]...)
		c.r = c.w
	}
	p := prefix{pre: pre}
	if pending {
		// A body that ran out of time runs out of it at once there too.
		p.clamp, p.hard = by, expired
	} else {
		c.boundHead()
		p.clamp = c.headBy
	}
	if c.tls != nil {
		return c.s.handoff.give(&tlsPrefixConn{Conn: c.tls, prefix: p})
	}
	return c.s.handoff.give(newPrefixConn(c.tc, c.rc, p, writeStall(c.s.HTTP)))
}

// setHeadBy bounds the head that begins now by the head timeout. The
// bound is worked out, and the deadline set on the connection, only if
// the head needs another read (boundHead): most come whole in the read
// that began them, and the clock is not read for them.
func (c *clientConn) setHeadBy() {
	c.headBy, c.headOpen = time.Time{}, true
	c.armed = false
}

// boundHead works out the bound of the head setHeadBy began, from now:
// the microseconds since its first bytes were read aside.
func (c *clientConn) boundHead() {
	if !c.headOpen {
		return
	}
	c.headOpen = false
	if d := c.s.headTimeout(); d > 0 {
		c.headBy = time.Now().Add(d)
	}
}

// serveRequest runs the handler and finishes its answer; endNone: the
// connection carries on.
func (c *clientConn) serveRequest(r *http.Request) (end int) {
	conn := c.connection
	w := responses.Get().(*response)
	*w = response{c: c, req: r, header: w.own, own: w.own, cl: -1, head: r.Method == http.MethodHead,
		// As net/http reads them, with its looser test than Close's.
		wantsClose: r.Close || hasToken(conn, "close"),
		want10:     r.ProtoMinor == 0 && hasToken(conn, "keep-alive")}
	c.started.Store(c.s.tick.Load())
	c.state.Store(stateHandler)
	aborted := c.runHandler(w, r)
	if c.stream != nil {
		// No read of the body from here on (a transport may still be
		// at it). Read whole or not, the answer says (headGoesOut):
		// if not, and not to be drained, the connection ends after it.
		c.stream.end()
		defer func() { c.stream = nil }()
	}
	if !c.state.CompareAndSwap(stateHandler, stateHead) {
		c.stopWatch()
	}
	block := c.block
	c.block = nil
	if aborted {
		// What the handler started may still hold the answer, and the
		// request: neither is given to another request.
		w.putWriter()
		return endClose
	}
	defer func() {
		valsFree := w.headerDone
		w.release()
		putHeadBlock(block, valsFree)
	}()
	if err := w.finish(); err != nil {
		return endClose
	}
	// A request whose context ended (the watch found the client's end of
	// the connection) is answered whole all the same, as net/http's server
	// answers it: a client that half-closes after its request still reads
	// (one that left makes the writes fail). The connection ends after it.
	if w.closeAfter || c.s.inShutdown.Load() || c.ctx.Err() != nil {
		return endLinger
	}
	if s := c.stream; s != nil && !s.whole.Load() && !s.drain() {
		return endLinger
	}
	return endNone
}

// responses are the answers of handlers that returned, their header maps
// emptied, for the next requests of any connection: a connection waiting
// for its next request holds none.
var responses = sync.Pool{New: func() any { return &response{own: make(http.Header)} }}

// release gives the answer back once the handler has returned and the
// answer is finished: its header map is emptied, so that it holds
// nothing of the request, a backend's map it took and the request's own
// go back to the maps the short way reads heads into (HeaderMap), and the
// backend's answer it was passed (PassAnswer) to answerBlocks.
func (w *response) release() {
	own := w.own
	if len(own) > 16 {
		own = make(http.Header) // a map grown large is not kept
	} else {
		clear(own)
	}
	if w.taken {
		PutHeaderMap(w.header)
	}
	PutHeaderMap(w.req.Header)
	if w.answer != nil {
		putAnswerBlock(w.answer) // after the maps that hold its values
	}
	if w.heldBuf != nil {
		heldBufs.Put(w.heldBuf)
	}
	*w = response{own: own}
	responses.Put(w)
}

// runHandler calls the handler; true: it panicked, and the answer is cut.
// http.ErrAbortHandler is how a handler cuts an answer on purpose (the
// reverse proxy does when a backend's body breaks); any other panic is
// logged, as net/http's server logs it.
func (c *clientConn) runHandler(w *response, r *http.Request) (aborted bool) {
	defer func() {
		if v := recover(); v != nil {
			aborted = true
			if v != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.s.logf("http: panic serving %v: %v\n%s", c.remote, v, buf)
			}
		}
	}()
	c.s.HTTP.Handler.ServeHTTP(w, r)
	return false
}

// lingeringClose closes the connection after a last answer without
// losing it to a reset, as nginx's lingering close does: the client's
// further bytes (the rest of an upload answered early, a 413 or a 401)
// are read and dropped until it closes its side, each read within
// lingerWait and all of them within lingerTime, up to lingerMax bytes. A
// socket closed with bytes unread sends a reset, and a client that gets
// it before it has read the answer loses the answer (Go's, curl).
func (c *clientConn) lingeringClose() {
	if c.tls != nil {
		_ = c.tls.CloseWrite() // the close_notify alert; what comes after it is read raw, and dropped
	}
	_ = c.tc.CloseWrite()
	end := time.Now().Add(lingerTime)
	buf := proxy.GetBuffer()
	defer proxy.PutBuffer(buf)
	for n := 0; n < lingerMax; {
		now := time.Now()
		if !now.Before(end) {
			return
		}
		by := now.Add(lingerWait)
		if by.After(end) {
			by = end
		}
		_ = c.tc.SetReadDeadline(by)
		k, err := c.tc.Read(buf)
		if err != nil {
			return
		}
		n += k
	}
}

// The bounds of a lingering close: each read, all of it, and the bytes
// it drops.
const (
	lingerWait = 500 * time.Millisecond
	lingerTime = 2 * time.Second
	lingerMax  = 64 << 20
)

// cancelRequest cancels the context of the connection's requests, and
// with it a backend exchange of the short way's transport in flight.
func (c *clientConn) cancelRequest() {
	c.cancel()
	c.hook.Fire()
}

// CancelHook lets the short way's transport cut its backend exchange when
// the server of the request cancels the request's context, for less than
// registering with the context (context.AfterFunc adds a child to it and
// removes it under its lock, and makes two allocations, on every
// request). The server cancels, then fires; the transport sets its cut,
// then looks at the context: one of them sees the other. A context
// cancelled by its parent, not by its server, does not fire the hook:
// a server gives the hook only to contexts it alone cancels.
//
// The h1 Server gives every request of a connection the connection's
// hook; another server (HTTP/2's) gives each of its requests a context
// that carries one (HookedContext).
type CancelHook struct {
	done <-chan struct{} // the Done of the context whose cancel fires it
	cut  atomic.Pointer[func()]
	// When the head of the request being served had come, if its body
	// was read whole before it was served (Began); else zero. Written by
	// the connection's goroutine, around the handler it runs.
	arrived time.Time
}

// A HookedContext is a request's context that carries its own hook: the
// server that made it fires the hook after it ends the context, every
// time. The transport finds the hook on the request's context itself, not
// on one derived from it, whose end would not fire it.
type HookedContext interface {
	context.Context
	CancelHook() *CancelHook
}

// withCancelHook returns ctx carrying h, for the requests whose context
// it is: call h.Fire after cancelling ctx, every time ctx is cancelled.
func withCancelHook(ctx context.Context, h *CancelHook) context.Context {
	h.done = ctx.Done()
	return context.WithValue(ctx, hookKey{}, h)
}

// hookOf is the hook that fires when ctx ends, nil when none does: a
// HookedContext's, or the one withCancelHook gave ctx (and not a parent
// of ctx: the hook's Done is ctx's).
func hookOf(ctx context.Context) *CancelHook {
	if hc, ok := ctx.(HookedContext); ok {
		return hc.CancelHook()
	}
	if h, ok := ctx.Value(hookKey{}).(*CancelHook); ok && h.done == ctx.Done() {
		return h
	}
	return nil
}

type hookKey struct{}

// HeadBounded reports whether r came the short way, whose heads are held
// to the server's MaxHeaderBytes by HeadSize's count (a larger one goes to
// net/http's server, and so to a handler that counts it): r's head is
// within the bound, and need not be counted again.
func HeadBounded(r *http.Request) bool {
	_, ok := r.Context().Value(hookKey{}).(*CancelHook) // withCancelHook's: the h1 Server's alone
	return ok
}

// Began is when r began, for its record's time: now, the time its
// handler started, or, for a request the short way served after reading
// its body whole, when its head had come, so that the time counts the
// body's upload as nginx's $request_time does (a handler that reads its
// body itself has the upload in its own time). Only the record's: what
// an endpoint is timed from (its latency, a try's bounds) starts when
// the handler does, the client's upload being none of its doing. Called
// by r's handler before it returns.
func Began(r *http.Request, now time.Time) time.Time {
	if h, ok := r.Context().Value(hookKey{}).(*CancelHook); ok && !h.arrived.IsZero() {
		return h.arrived
	}
	return now
}

// HeadSize is the size of a request's head as it came, normalized: the
// request line and every header line, Host's among them, each "Name:
// value" with one space.
func HeadSize(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2
	n += len("Host: ") + len(r.Host) + 2
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n
}

// Fire cuts the exchange that set its cut, if one has: call it after
// cancelling the hook's context.
func (h *CancelHook) Fire() {
	if f := h.cut.Load(); f != nil {
		(*f)()
	}
}

// endTLSWait ends the wait of a TLS connection for its next request (or
// its handshake), from another goroutine, by shutting its socket's read
// side: the wait's read ends, and the connection's goroutine closes it
// with the alert that says so, as net/http closes an idle TLS connection
// (a cleartext one is closed or cut at once).
func (c *clientConn) endTLSWait() { _ = c.tc.CloseRead() }

// cut ends the connection from another goroutine without waiting for its
// raw read: both directions are shut down, which wakes a wait and fails
// the handler's writes, and then the request's context is cancelled (in
// that order: a handler that returns when its context ends finds the
// socket shut already, and its answer is not written after the cut).
func (c *clientConn) cut() {
	_ = c.rc.Control(func(fd uintptr) { _ = rawio.Shutdown(fd) })
	c.cancelRequest()
}

// closeIfEnded closes an idle connection whose client has closed its
// side (a read would find the end and nothing before it). The wait for
// the next request does not read first, and the poller does not tell an
// end from bytes: a client that sends its last request and its end
// together is found out here, by the ticker, two to three ticks after the
// answer (net/http's server and HAProxy close at once; without this,
// the idle timeout would). Called by the ticker with the server's lock
// held, once for each idle spell that lasts a whole tick.
func (c *clientConn) closeIfEnded() {
	if c.tls != nil {
		return // its wait is a read, which finds the end at once
	}
	if n, err := peek(c.rc); n == 0 && err == nil && c.state.CompareAndSwap(stateIdle, stateClosed) {
		c.cut() // wakes the wait, which reads the end and closes
	}
}

// startWatch starts reading the connection while a request takes long,
// to learn whether the client went away. Called by the ticker with the
// server's lock held.
func (c *clientConn) startWatch() {
	done := make(chan struct{})
	c.watchMu.Lock()
	c.stopping, c.watchDone = false, done
	c.watchMu.Unlock()
	if c.state.CompareAndSwap(stateHandler, stateWatched) {
		go c.watch(done)
	}
}

func (c *clientConn) watch(done chan struct{}) {
	defer close(done)
	var rd watchReader
	if c.tls != nil {
		rd = c.tls // no read of it runs while the handler does
	} else {
		// The connection's descriptor is held by its raw read, in which
		// the handler runs: the watch reads the socket through a second
		// one, in the poller on its own.
		f, err := c.tc.File()
		if err != nil {
			return
		}
		defer f.Close()
		rd = f
	}
	c.watchMu.Lock()
	if c.stopping {
		c.watchMu.Unlock()
		return
	}
	c.watchR = rd
	c.watchMu.Unlock()
	n, err := rd.Read(c.watchByte[:])
	if n == 1 {
		c.watchN = 1 // the client is there: it sent its next request
		return
	}
	c.watchMu.Lock()
	stopped := c.stopping
	c.watchMu.Unlock()
	if !stopped && err != nil {
		c.cancelRequest() // the client closed the connection, or it broke
	}
}

// stopWatch ends the watch and takes back what it read.
func (c *clientConn) stopWatch() {
	c.watchMu.Lock()
	c.stopping = true
	if c.watchR != nil {
		_ = c.watchR.SetReadDeadline(aLongTimeAgo)
		c.watchR = nil
	}
	done := c.watchDone
	c.watchMu.Unlock()
	<-done
	if c.tls != nil {
		// The watch read the connection itself: its reads wait again.
		_ = c.tc.SetReadDeadline(time.Time{})
		c.deadline = false
	}
	c.state.Store(stateHead)
	if c.watchN == 1 {
		c.watchN = 0
		if c.buf == nil {
			c.take()
		}
		c.compact() // a head was taken from it: there is room
		c.buf[c.w] = c.watchByte[0]
		c.w++
	}
	c.setHeadBy()
}

// watchReader is what the watch reads the client's connection through.
type watchReader interface {
	io.Reader
	SetReadDeadline(t time.Time) error
}

// connOut is what a connection's answers are written through.
type connOut interface {
	io.Writer
	// Writev writes the buffers in order, as one Write of them all.
	Writev(bufs [][]byte) (int, error)
}

// rawTCP is a TCP connection whose reads and writes go through its raw
// descriptor (sock), as the cleartext short way's do: what crypto/tls
// reads its records from and writes them to.
type rawTCP struct {
	*net.TCPConn
	s *sock
}

func (r rawTCP) Read(p []byte) (int, error)  { return r.s.Read(p) }
func (r rawTCP) Write(p []byte) (int, error) { return r.s.Write(p) }

// tlsOut writes answers to a TLS connection.
type tlsOut struct{ *tls.Conn }

// Writev writes each buffer in turn: a TLS record each.
func (o tlsOut) Writev(bufs [][]byte) (int, error) {
	var n int
	for _, b := range bufs {
		m, err := o.Write(b)
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// prefix is what a connection handed to net/http reads first (what was
// read of it before) and the deadline of the head being read, which
// bounds the deadlines net/http sets until it clears one.
type prefix struct {
	pre   []byte
	clamp time.Time // zero once a deadline was cleared (the head was read), unless hard
	hard  bool      // clamp bounds every deadline, a cleared one too: a body read before the hand-off ran out of time
}

func (p *prefix) read(b []byte, next io.Reader) (int, error) {
	if len(p.pre) > 0 {
		n := copy(b, p.pre)
		p.pre = p.pre[n:]
		return n, nil
	}
	return next.Read(b)
}

// deadline is the read deadline to set in place of t.
func (p *prefix) deadline(t time.Time) time.Time {
	switch {
	case p.hard:
		if t.IsZero() || p.clamp.Before(t) {
			t = p.clamp
		}
	case t.IsZero():
		p.clamp = time.Time{}
	case !p.clamp.IsZero() && p.clamp.Before(t):
		t = p.clamp
	}
	return t
}

// setDeadline sets both of c's deadlines to t, as SetDeadline does, the
// read one bounded as deadline says.
func (p *prefix) setDeadline(c interface {
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}, t time.Time) error {
	if err := c.SetReadDeadline(p.deadline(t)); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// prefixConn is a cleartext connection handed to net/http. Its writes
// are bounded as the short way's are (writeBound), where net/http's
// server bounds none but with a WriteTimeout over the whole answer.
type prefixConn struct {
	*net.TCPConn
	prefix
	bound writeBound
}

func newPrefixConn(tc *net.TCPConn, rc syscall.RawConn, p prefix, stall time.Duration) *prefixConn {
	c := &prefixConn{TCPConn: tc, prefix: p}
	c.bound.stall, c.bound.rc = stall, rc
	return c
}

func (p *prefixConn) Write(b []byte) (int, error) { return p.bound.write(p.TCPConn, b) }

// ReadFrom copies through Write, so that the bound holds for a body
// net/http's server copies in (the socket's own ReadFrom would not).
func (p *prefixConn) ReadFrom(r io.Reader) (int64, error) { return proxy.Copy(p, r) }

func (p *prefixConn) SetWriteDeadline(t time.Time) error {
	return p.bound.setDeadline(p.TCPConn, t)
}

func (p *prefixConn) Read(b []byte) (int, error) { return p.read(b, p.TCPConn) }

// PlainTCP returns the socket once what was read of it before is gone:
// from then on its bytes are the socket's, which proxy.Splice relays in
// its event loop (a CONNECT tunnel, say).
func (p *prefixConn) PlainTCP() (*net.TCPConn, bool) { return p.TCPConn, len(p.pre) == 0 }

func (p *prefixConn) SetReadDeadline(t time.Time) error {
	return p.TCPConn.SetReadDeadline(p.deadline(t))
}

func (p *prefixConn) SetDeadline(t time.Time) error {
	if err := p.TCPConn.SetReadDeadline(p.deadline(t)); err != nil {
		return err
	}
	return p.bound.setDeadline(p.TCPConn, t)
}

// liftOnHijack has net/http's server lift the bound on an answer's writes
// (writeBound, a sock's stall) from a connection a handler hijacks: an
// upgraded connection or a tunnel is the relay's, bound by its own
// timeout as one relayed in the event loop is, and a client that reads
// none of it for a while loses nothing.
func (s *Server) liftOnHijack() {
	next := s.HTTP.ConnState
	s.HTTP.ConnState = func(c net.Conn, st http.ConnState) {
		if st == http.StateHijacked {
			liftBound(c)
		}
		if next != nil {
			next(c, st)
		}
	}
}

// liftBound lifts the bound on c's writes, or on those of the connection
// under it.
func liftBound(c net.Conn) {
	for {
		switch v := c.(type) {
		case *prefixConn:
			v.bound.lift()
			return
		case rawTCP:
			v.s.stall = 0 // set before the hijack, read by writes after it
			return
		case *tlsPrefixConn:
			c = v.Conn.NetConn()
		case *tls.Conn:
			c = v.NetConn()
		default:
			return
		}
	}
}

// writeBound fails a write that makes no progress for stall, as the
// short way's sock does (nginx's send_timeout): a client that reads
// nothing of its answer holds neither its connection nor the backend's
// past it. Progress is bytes the socket took, or (where the kernel tells,
// rawio.Unsent) bytes the peer took of what the socket held, though the
// socket, woken only once a good part of it is free, may not yet have
// room for more. A deadline the connection's user sets still holds: the
// bound only ever brings it nearer, and one that passed (a write cut
// from another goroutine) ends the write.
type writeBound struct {
	stall time.Duration // 0: no bound; guarded by mu once the connection is net/http's
	rc    syscall.RawConn
	mu    sync.Mutex
	set   time.Time // guarded by mu: the write deadline the user set, zero for none
}

// lift ends the bound (a hijacked connection's).
func (w *writeBound) lift() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stall = 0
}

func (w *writeBound) bounded() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stall
}

func (w *writeBound) setDeadline(c *net.TCPConn, t time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.set = t
	return c.SetWriteDeadline(t)
}

func (w *writeBound) write(c *net.TCPConn, p []byte) (int, error) {
	if w.bounded() <= 0 {
		return c.Write(p)
	}
	n := 0
	for {
		held := w.unsent()
		w.arm(c)
		m, err := c.Write(p[n:])
		n += m
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) || w.passed() ||
			m == 0 && (held < 0 || w.unsent() >= held) {
			w.disarm(c)
			return n, err
		}
	}
}

// arm sets the write deadline to the stall's from now, or the user's if
// that is nearer.
func (w *writeBound) arm(c *net.TCPConn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	dl := w.set
	if at := time.Now().Add(w.stall); w.stall > 0 && (dl.IsZero() || at.Before(dl)) {
		dl = at
	}
	_ = c.SetWriteDeadline(dl)
}

// disarm puts the user's deadline back.
func (w *writeBound) disarm(c *net.TCPConn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = c.SetWriteDeadline(w.set)
}

// passed says whether the user's deadline has passed.
func (w *writeBound) passed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.set.IsZero() && !time.Now().Before(w.set)
}

// unsent is what the socket holds that its peer has not taken, -1 when
// it cannot be told.
func (w *writeBound) unsent() int {
	n := -1
	if w.rc != nil {
		_ = w.rc.Control(func(fd uintptr) { n = unsent(fd) })
	}
	return n
}

// tlsPrefixConn is a TLS connection handed to net/http after its
// handshake: its ConnectionState gives the requests net/http reads from
// it their TLS state, and its CloseWrite sends the alert that ends it.
type tlsPrefixConn struct {
	*tls.Conn
	prefix
}

func (p *tlsPrefixConn) Read(b []byte) (int, error) { return p.read(b, p.Conn) }

func (p *tlsPrefixConn) SetReadDeadline(t time.Time) error {
	return p.Conn.SetReadDeadline(p.deadline(t))
}

func (p *tlsPrefixConn) SetDeadline(t time.Time) error { return p.setDeadline(p.Conn, t) }

// handoff is the listener net/http's server accepts handed-off
// connections from.
type handoff struct {
	conns    chan net.Conn
	done     chan struct{}
	once     sync.Once
	addr     net.Addr
	draining *atomic.Bool // the Server's inShutdown: its own Shutdown or Close ends the handoff (end)

	mu     sync.Mutex
	ended  bool
	giving sync.WaitGroup
}

func newHandoff(draining *atomic.Bool) *handoff {
	return &handoff{conns: make(chan net.Conn), done: make(chan struct{}), draining: draining,
		addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}
}

// give hands c over; false when net/http's server is closed (c is closed).
func (h *handoff) give(c net.Conn) bool {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		c.Close()
		return false
	}
	h.giving.Add(1)
	h.mu.Unlock()
	defer h.giving.Done()
	select {
	case h.conns <- c:
		return true
	case <-h.done:
		c.Close()
		return false
	}
}

// end stops the handoff once what is being handed over has been taken:
// a connection accepted, or a request read, just as a shutdown began is
// served by net/http's server, whose Shutdown waits for it, and not
// closed on its way there.
func (h *handoff) end() {
	h.mu.Lock()
	h.ended = true
	h.mu.Unlock()
	h.giving.Wait()
	h.once.Do(func() { close(h.done) })
}

func (h *handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.conns:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

// Close is net/http's server closing its listener. In the Server's own
// Shutdown or Close it waits for end (net/http's Serve accepts on, and
// its Shutdown waits for that); net/http's server shut down by itself
// ends it at once.
func (h *handoff) Close() error {
	if !h.draining.Load() {
		h.once.Do(func() { close(h.done) })
	}
	return nil
}

func (h *handoff) Addr() net.Addr { return h.addr }
