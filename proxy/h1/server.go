package h1

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rotor-lb/rotor/internal/rawio"
)

// Server serves HTTP/1.x on cleartext connections the short way, in front
// of a net/http server that it shares its handler and settings with. A
// request the strict reader takes (parseHead: no body, origin form or
// http:// absolute form, a head within the buffer) is read, handed to the
// handler and answered in
// the connection's own goroutine: no background read and no context a
// request, and no buffer held while the connection waits for its next
// request. The first request it does not take hands the connection, with
// every byte read from it, to the net/http server, which keeps it: bodies,
// 100-continue, upgrades and whatever is malformed are net/http's to
// answer, as they are on every other listener.
//
// What it takes from HTTP: Handler, ReadHeaderTimeout (the time to read a
// head, from the first byte after an idle wait or from the accept),
// IdleTimeout (between requests; ReadTimeout when 0) and ErrorLog. A
// client that goes away while its request waits is found out as
// net/http's server finds it out (a read on the idle connection) once the
// request has taken 100 to 200 ms, and the request's context is cancelled.
type Server struct {
	HTTP *http.Server

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
}

// NewServer returns a server in front of hs.
func NewServer(hs *http.Server) *Server {
	return &Server{HTTP: hs, conns: map[*clientConn]struct{}{}, listeners: map[net.Listener]struct{}{},
		handoff: newHandoff(), stop: make(chan struct{})}
}

// tickEvery is the ticker's period: the Date header's resolution, and the
// time after which a request's connection is watched for the client
// going away (one to two ticks).
const tickEvery = 100 * time.Millisecond

// Serve accepts connections on ln until the server shuts down, when it
// returns http.ErrServerClosed.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.inShutdown.Load() {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	s.start.Do(func() {
		s.setDate(time.Now())
		go s.HTTP.Serve(s.handoff) //nolint:errcheck // ends with the handoff listener
		go s.ticker()
	})
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.inShutdown.Load() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Out of descriptors, as net/http waits it out.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.logf("h1: accept error: %v; retrying in %v", err, delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		tc, ok := nc.(*net.TCPConn)
		if !ok {
			s.handoff.give(nc)
			continue
		}
		c, err := s.newConn(tc)
		switch {
		case errors.Is(err, http.ErrServerClosed):
			nc.Close()
			continue
		case err != nil: // no raw access to it: net/http's
			s.handoff.give(nc)
			continue
		}
		go c.serve()
	}
}

// Buffers returns the read buffers connections hold: one for each that
// has read part of a request, none for one waiting for its next.
func (s *Server) Buffers() int64 { return s.buffers.Load() }

// Shutdown stops accepting, closes idle connections, and waits for the
// requests in flight on both servers to end (each connection closes after
// its answer) or for ctx to be done.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closeListeners()
	httpDone := make(chan error, 1)
	go func() { httpDone <- s.HTTP.Shutdown(ctx) }()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !s.closeIdle() {
		select {
		case <-ctx.Done():
			<-httpDone
			return ctx.Err()
		case <-t.C:
		}
	}
	return <-httpDone
}

// Close closes every connection of both servers at once.
func (s *Server) Close() error {
	s.closeListeners()
	s.mu.Lock()
	for c := range s.conns {
		c.tc.Close()
	}
	s.mu.Unlock()
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
		if st == stateIdle || st == stateNew && time.Since(c.accepted) > 5*time.Second {
			if c.state.CompareAndSwap(st, stateClosed) {
				c.tc.Close()
			}
		}
	}
	return len(s.conns) == 0
}

func (s *Server) ticker() {
	t := time.NewTicker(tickEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.setDate(now)
			tick := s.tick.Add(1)
			s.mu.Lock()
			for c := range s.conns {
				if c.state.Load() == stateHandler && c.started.Load() <= tick-2 {
					c.startWatch()
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

// A connection's state, for the shutdown (which closes idle ones) and the
// ticker (which watches a request that takes long).
const (
	stateNew     int32 = iota // accepted, no byte read yet
	stateIdle                 // between requests, nothing read of the next
	stateHead                 // reading a head, or writing an answer
	stateHandler              // the handler runs
	stateWatched              // the handler runs and a goroutine reads the connection
	stateClosed               // closed by the shutdown
)

// bufSize is the read buffer: a head longer than it goes to net/http.
const bufSize = 4 << 10

var bufs = sync.Pool{New: func() any { return new([bufSize]byte) }}

// clientConn is one client connection served the short way.
type clientConn struct {
	s        *Server
	tc       *net.TCPConn
	rc       syscall.RawConn
	remote   string
	accepted time.Time
	ctx      context.Context // the connection's, for every request on it
	cancel   context.CancelFunc
	base     *http.Request // what every request on it starts from: its context and client
	headBy   time.Time     // when the head being read must be whole
	armed    bool          // the connection's read deadline is the one its next read needs

	buf     *[bufSize]byte // nil while nothing is buffered
	r, w    int            // buf[r:w] is read and not yet taken
	scanned int            // of buf[r:w], the whole lines of the head scanHead checked

	readFn func(fd uintptr) bool // c.rawRead, made once
	rn     int                   // what rawRead read
	rerr   error

	served    int  // requests served
	afterPOST bool // the last was a POST: CRLFs before the next head are dropped
	peeked    bool // four bytes of this head came (net/http's Peek(4) between requests)
	state     atomic.Int32
	started   atomic.Int64 // the tick the request in the handler started at

	watchMu   sync.Mutex
	stopping  bool          // guarded by watchMu: the watch is being stopped
	watchDone chan struct{} // closed when the watch ends
	watchByte [1]byte       // a byte the watch read: the next request's
	watchN    int
}

func (s *Server) newConn(tc *net.TCPConn) (*clientConn, error) {
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil, err
	}
	c := &clientConn{s: s, tc: tc, rc: rc, remote: tc.RemoteAddr().String(), accepted: time.Now()}
	c.readFn = c.rawRead
	ctx := context.WithValue(context.Background(), http.ServerContextKey, s.HTTP)
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, tc.LocalAddr())
	c.ctx, c.cancel = context.WithCancel(ctx)
	c.base = (&http.Request{RemoteAddr: c.remote}).WithContext(c.ctx)
	s.mu.Lock()
	if s.inShutdown.Load() {
		s.mu.Unlock()
		return nil, http.ErrServerClosed
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	return c, nil
}

// serve runs the connection's requests one after another until it closes
// or is handed to net/http.
func (c *clientConn) serve() {
	handedOff := false
	defer func() {
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
		c.cancel()
		c.r = c.w
		c.release()
		if !handedOff {
			c.tc.Close()
		}
	}()
	if d := c.s.headTimeout(); d > 0 {
		c.headBy = c.accepted.Add(d)
		c.tc.SetReadDeadline(c.headBy)
	}
	c.armed = true
	for {
		r, n, err := c.readHead()
		if err != nil {
			return
		}
		if r == nil {
			handedOff = c.handOff()
			return
		}
		c.r, c.scanned = c.r+n, 0
		if c.r == c.w {
			c.release() // nothing of the next request yet: hold no buffer meanwhile
		}
		c.served++
		c.afterPOST, c.peeked = r.Method == http.MethodPost, false
		if !c.serveRequest(r) {
			return
		}
	}
}

// readHead reads until a whole head is buffered and returns its request
// and length; a nil request with no error means the head is net/http's.
// Waiting for the first byte of a request is bounded by the idle timeout,
// the rest of the head by the head timeout.
func (c *clientConn) readHead() (*http.Request, int, error) {
	switch {
	case c.state.Load() == stateNew:
	case c.r == c.w:
		if !c.state.CompareAndSwap(stateHead, stateIdle) {
			return nil, 0, net.ErrClosed
		}
		if d := c.s.idleTimeout(); d > 0 {
			c.tc.SetReadDeadline(time.Now().Add(d))
		} else {
			c.tc.SetReadDeadline(time.Time{})
		}
		c.armed = true
	default: // the next request came with the last one
		c.setHeadBy()
	}
	for {
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
		if c.buf != nil && !c.afterPOST {
			var n int
			n, c.scanned = scanHead(c.buf[c.r:c.w], c.scanned)
			if n > 0 {
				return parseHead(c.buf[c.r:c.r+n], c.base), n, nil
			}
			// Not a head the strict reader takes, or longer than the
			// buffer.
			theirs := n < 0 || c.r == 0 && c.w == bufSize
			if theirs && c.mayHandOff() {
				return nil, 0, nil
			}
		}
		st := c.state.Load()
		if !c.armed {
			c.tc.SetReadDeadline(c.headBy)
			c.armed = true
		}
		if err := c.fill(); err != nil {
			if c.w > c.r && c.mayHandOff() {
				// Part of a head, then the end, a reset or the deadline:
				// net/http's to answer (or not) as it would.
				return nil, 0, nil
			}
			return nil, 0, err
		}
		if st != stateHead {
			if !c.state.CompareAndSwap(st, stateHead) {
				return nil, 0, net.ErrClosed // the shutdown closed it meanwhile
			}
			if st == stateIdle {
				c.setHeadBy()
			}
		}
	}
}

// mayHandOff reports whether what is buffered may go to net/http's
// server now: between requests it waits for four bytes before it reads a
// head, and closes quietly on fewer.
func (c *clientConn) mayHandOff() bool { return c.served == 0 || c.peeked }

// fill reads what the connection has into the buffer, waiting for it in
// the poller with no buffer held.
func (c *clientConn) fill() error {
	c.compact()
	err := c.rc.Read(c.readFn)
	n, rerr := c.rn, c.rerr
	c.rn, c.rerr = 0, nil
	switch {
	case err != nil:
		return err
	case rerr != nil:
		return rerr
	case n <= 0:
		return io.EOF
	}
	c.w += n
	return nil
}

// rawRead is fill's part inside the raw read: false waits for the socket
// to be readable, with the buffer given back if it is empty.
func (c *clientConn) rawRead(fd uintptr) bool {
	if c.buf == nil {
		c.take()
	}
	c.rn, c.rerr = rawio.Read(fd, c.buf[c.w:])
	if c.rerr == syscall.EAGAIN {
		c.rn, c.rerr = 0, nil
		if c.w == 0 {
			c.release()
		}
		return false
	}
	return true
}

// compact moves what is buffered to the buffer's start.
func (c *clientConn) compact() {
	if c.r > 0 {
		c.w = copy(c.buf[:], c.buf[c.r:c.w])
		c.r = 0
	}
}

func (c *clientConn) take() {
	c.buf = bufs.Get().(*[bufSize]byte)
	c.s.buffers.Add(1)
}

// release gives the buffer back when nothing is in it.
func (c *clientConn) release() {
	if c.buf != nil && c.r == c.w {
		bufs.Put(c.buf)
		c.buf, c.r, c.w = nil, 0, 0
		c.s.buffers.Add(-1)
	}
}

// handOff gives the connection and what was read of it to net/http's
// server; a head that was being read keeps the deadline it had.
func (c *clientConn) handOff() bool {
	var pre []byte
	if c.buf != nil {
		pre = append(pre, c.buf[c.r:c.w]...)
		c.r = c.w
	}
	return c.s.handoff.give(&prefixConn{TCPConn: c.tc, pre: pre, clamp: c.headBy})
}

// setHeadBy bounds the head that begins now by the head timeout. The
// deadline is set on the connection only if the head needs another read:
// most come whole in the read that began them.
func (c *clientConn) setHeadBy() {
	c.headBy = time.Time{}
	if d := c.s.headTimeout(); d > 0 {
		c.headBy = time.Now().Add(d)
	}
	c.armed = false
}

// serveRequest runs the handler and finishes its answer; false: the
// connection closes.
func (c *clientConn) serveRequest(r *http.Request) (keep bool) {
	conn := r.Header.Get("Connection")
	w := &response{c: c, req: r, header: make(http.Header), cl: -1, head: r.Method == http.MethodHead,
		// As net/http reads them, with its looser test than Close's.
		wantsClose: r.Close || hasToken(conn, "close"),
		want10:     r.ProtoMinor == 0 && hasToken(conn, "keep-alive")}
	c.started.Store(c.s.tick.Load())
	c.state.Store(stateHandler)
	aborted := c.runHandler(w, r)
	if !c.state.CompareAndSwap(stateHandler, stateHead) {
		c.stopWatch()
	}
	if aborted || c.ctx.Err() != nil {
		w.putWriter()
		return false
	}
	if err := w.finish(); err != nil {
		return false
	}
	if w.closeAfter || c.s.inShutdown.Load() {
		c.lingeringClose()
		return false
	}
	return true
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
// losing it to a reset: the client's further bytes are read and dropped
// for up to half a second, or until it closes its side.
func (c *clientConn) lingeringClose() {
	_ = c.tc.CloseWrite()
	_ = c.tc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	var b [512]byte
	for range 256 {
		if _, err := c.tc.Read(b[:]); err != nil {
			return
		}
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
	c.watchMu.Lock()
	if c.stopping {
		c.watchMu.Unlock()
		return
	}
	// The read after the head has no deadline while the handler runs.
	_ = c.tc.SetReadDeadline(time.Time{})
	c.watchMu.Unlock()
	n, err := c.tc.Read(c.watchByte[:])
	if n == 1 {
		c.watchN = 1 // the client is there: it sent its next request
		return
	}
	c.watchMu.Lock()
	stopped := c.stopping
	c.watchMu.Unlock()
	if !stopped && err != nil {
		c.cancel() // the client closed the connection, or it broke
	}
}

// stopWatch ends the watch and takes back what it read.
func (c *clientConn) stopWatch() {
	c.watchMu.Lock()
	c.stopping = true
	_ = c.tc.SetReadDeadline(aLongTimeAgo)
	done := c.watchDone
	c.watchMu.Unlock()
	<-done
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

// prefixConn is a connection handed to net/http: it reads first what was
// read of it before, and bounds the head being read by the deadline the
// short way had set for it.
type prefixConn struct {
	*net.TCPConn
	pre   []byte
	clamp time.Time // zero once a deadline was cleared (the head was read)
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.pre) > 0 {
		n := copy(b, p.pre)
		p.pre = p.pre[n:]
		return n, nil
	}
	return p.TCPConn.Read(b)
}

// PlainTCP returns the socket once what was read of it before is gone:
// from then on its bytes are the socket's, which proxy.Splice relays in
// its event loop (a CONNECT tunnel, say).
func (p *prefixConn) PlainTCP() (*net.TCPConn, bool) { return p.TCPConn, len(p.pre) == 0 }

func (p *prefixConn) SetReadDeadline(t time.Time) error {
	if t.IsZero() {
		p.clamp = time.Time{}
	} else if !p.clamp.IsZero() && p.clamp.Before(t) {
		t = p.clamp
	}
	return p.TCPConn.SetReadDeadline(t)
}

func (p *prefixConn) SetDeadline(t time.Time) error {
	if err := p.SetReadDeadline(t); err != nil {
		return err
	}
	return p.TCPConn.SetWriteDeadline(t)
}

// handoff is the listener net/http's server accepts handed-off
// connections from.
type handoff struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	addr  net.Addr
}

func newHandoff() *handoff {
	return &handoff{conns: make(chan net.Conn), done: make(chan struct{}),
		addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}
}

// give hands c over; false when net/http's server is closed (c is closed).
func (h *handoff) give(c net.Conn) bool {
	select {
	case h.conns <- c:
		return true
	case <-h.done:
		c.Close()
		return false
	}
}

func (h *handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.conns:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

func (h *handoff) Close() error {
	h.once.Do(func() { close(h.done) })
	return nil
}

func (h *handoff) Addr() net.Addr { return h.addr }
