// Package h2 is rotor's HTTP/2 server: the connections net/http's server
// hands over after negotiating "h2" on a TLS listener, or after reading
// HTTP/2's preface on a cleartext one (TLSNextProto), each request served
// by the listener's http.Handler, the same one HTTP/1.1 requests go to,
// so that both share one request lifecycle.
//
// It exists for the way it writes. net/http's HTTP/2 server writes from
// one goroutine a connection, to which each response's HEADERS and then
// its DATA are handed one at a time, and it flushes each time its queue
// runs dry, from a new goroutine: two TLS records and two writes for a
// small response. Here the handler's goroutine writes its own frames
// under the connection's write lock, a whole small response at once
// (HEADERS, DATA, trailers), and the last writer of those waiting for the
// lock flushes for all of them: one record and one write for a response,
// fewer when streams answer together.
//
// Frames are read and written with golang.org/x/net/http2's Framer and
// its HPACK coder; the rest (streams and their states, flow control both
// ways, limits, resets, GOAWAY) is here. Bounded: streams in flight
// (SETTINGS_MAX_CONCURRENT_STREAMS, and streams reset by the client count
// until their handlers return), a request's header list, each stream's
// and the connection's buffered request body (the flow-control windows
// this server grants), and time: the preface, a connection without
// streams (the idle timeout), and a write or a wait for the client's
// window that makes no progress for the idle timeout.
package h2

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Defaults and fixed sizes.
const (
	// DefaultMaxStreams is SETTINGS_MAX_CONCURRENT_STREAMS when none is set.
	DefaultMaxStreams = 128
	// streamWindow is the request body a stream may send ahead of its
	// handler's reads; connWindow all the connection's streams together.
	streamWindow = 1 << 20
	connWindow   = 1 << 20
	// maxReadFrame is the largest frame accepted (the protocol's
	// default, never raised): the Framer's read buffer is this.
	maxReadFrame = 16 << 10
	// writeBuffer is the connection's write buffer.
	writeBuffer = 16 << 10
	// cleartextReadBuffer is what a connection without TLS reads its
	// frames through.
	cleartextReadBuffer = 4 << 10
	// prefaceTimeout bounds the wait for the client's preface and
	// SETTINGS.
	prefaceTimeout = 10 * time.Second
	// defaultIdle is the idle timeout when none is set.
	defaultIdle = 2 * time.Minute
)

// Server serves HTTP/2 on the TLS connections of one net/http server.
//
// As with h1's Server, and unlike net/http's, the handler must not keep
// the request's Header map once it has returned (its values it may
// keep), nor a header map it gave the answer to take (h1.PassHeader):
// both are emptied and read the next heads into.
type Server struct {
	// MaxConcurrentStreams is the streams a connection may have in
	// flight (DefaultMaxStreams when 0).
	MaxConcurrentStreams uint32
	// MaxHeaderBytes bounds a request's header list as HPACK counts it
	// (http.DefaultMaxHeaderBytes when 0); a larger one is answered 431.
	MaxHeaderBytes int
	// IdleTimeout closes a connection without streams, and bounds a
	// write or a wait for the client's flow-control window that makes
	// no progress (2 minutes when 0).
	IdleTimeout time.Duration
	// ReadHeaderTimeout bounds the time a header block may take from its
	// HEADERS frame to the CONTINUATION frame that ends it; a block that
	// takes longer ends the connection (0: no bound). A block in one
	// frame takes no time.
	ReadHeaderTimeout time.Duration
	// ErrorLog receives handler panics and protocol errors worth noting;
	// nil: the standard logger.
	ErrorLog *log.Logger

	mu       sync.Mutex
	conns    map[*conn]struct{}
	shutdown bool
}

// Configure makes s hs's HTTP/2 server: hs hands s its connections that
// negotiate "h2", and its Shutdown sends each of them a GOAWAY, after
// which they close once their streams end (hs.Shutdown waits for that).
func (s *Server) Configure(hs *http.Server) {
	s.configure(hs, http2.NextProtoTLS, s.ServeConn)
}

// ConfigureCleartext makes s the HTTP/2 server of hs, a server without
// TLS: a connection that opens with HTTP/2's preface (prior knowledge,
// "h2c", as h2load, curl --http2-prior-knowledge and gRPC's clients
// without TLS send it) is s's, every other one HTTP/1.1's, as HAProxy
// and Envoy tell them apart on a cleartext listener. Shutdown as with
// Configure.
func (s *Server) ConfigureCleartext(hs *http.Server) {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	hs.Protocols = &p
	s.configure(hs, unencryptedHTTP2, s.serveUnencrypted)
	// With HTTP/2 among its protocols and no "h2" server of its own,
	// net/http's server would put its bundled one in place of s, for
	// both keys. No TLS connection comes to hs: "h2" is never asked for.
	hs.TLSNextProto[http2.NextProtoTLS] = s.ServeConn
}

// unencryptedHTTP2 is the key under which net/http's server hands over a
// connection without TLS that opened with HTTP/2's preface.
const unencryptedHTTP2 = "unencrypted_http2"

func (s *Server) configure(hs *http.Server, key string, serve func(*http.Server, *tls.Conn, http.Handler)) {
	if hs.TLSNextProto == nil {
		hs.TLSNextProto = make(map[string]func(*http.Server, *tls.Conn, http.Handler))
	}
	hs.TLSNextProto[key] = serve
	hs.RegisterOnShutdown(s.goAway)
}

// ServeConn serves HTTP/2 on tc, whose handshake chose "h2", until the
// connection ends; it returns once every handler it started has. h is the
// handler net/http passes: it carries the connection's base context.
func (s *Server) ServeConn(hs *http.Server, tc *tls.Conn, h http.Handler) {
	state := tc.ConnectionState()
	s.serveConn(tc, &state, h)
}

// serveUnencrypted serves HTTP/2 on the connection without TLS that
// net/http's server hands over (ConfigureCleartext) in place of a TLS
// one, which has read its client's preface.
func (s *Server) serveUnencrypted(hs *http.Server, tc *tls.Conn, h http.Handler) {
	u, ok := tc.NetConn().(interface{ UnencryptedNetConn() net.Conn })
	if !ok {
		s.logf("h2: a TLS connection handed over as one without TLS")
		return // net/http's server closes it
	}
	s.serveConn(u.UnencryptedNetConn(), nil, h)
}

// serveConn serves nc, whose TLS state is state (nil: none, and the
// client's preface read already by net/http's server).
func (s *Server) serveConn(nc net.Conn, state *tls.ConnectionState, h http.Handler) {
	c := s.newConn(nc, state, h)
	if !s.track(c, true) {
		return
	}
	defer s.track(c, false)
	c.serve()
}

func (s *Server) track(c *conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.shutdown {
			return false
		}
		if s.conns == nil {
			s.conns = make(map[*conn]struct{})
		}
		s.conns[c] = struct{}{}
	} else {
		delete(s.conns, c)
	}
	return true
}

// goAway starts the graceful end of every connection: GOAWAY naming the
// last stream each will serve, and the close once those have ended.
func (s *Server) goAway() {
	s.mu.Lock()
	s.shutdown = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		go c.startGoAway(http2.ErrCodeNo) // one client not reading holds up no other
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.ErrorLog != nil {
		s.ErrorLog.Printf(format, args...)
	} else {
		log.Printf(format, args...)
	}
}

// conn is one HTTP/2 connection. Its reading goroutine (serve) alone reads
// frames and changes what the client's frames change; handlers write their
// own frames under wmu.
type conn struct {
	s        *Server
	nc       net.Conn
	h        http.Handler
	ctx      context.Context
	cancel   context.CancelFunc
	tls      *tls.ConnectionState
	remote   string
	fr       *http2.Framer // reads; serve's alone
	block    *headerBlock  // the header block read last; serve's alone
	idle     time.Duration
	head     time.Duration // ReadHeaderTimeout
	maxHead  uint32
	handlers sync.WaitGroup

	// The write side, under wmu. writers counts goroutines that hold or
	// wait for wmu: the one that brings it to zero flushes.
	wmu     sync.Mutex
	writers atomic.Int32
	wbuf    *[]byte // frames not yet written; from bufPool, and back once flushed
	wfr     *http2.Framer
	enc     *hpack.Encoder
	hbuf    []byte // the header block being encoded
	werr    error  // the first write error: every later write fails with it
	wdSet   time.Time
	// maxFrame is the client's SETTINGS_MAX_FRAME_SIZE, capped at the
	// write buffer.
	maxFrame atomic.Int32

	// Stream state, under mu.
	mu      sync.Mutex
	streams map[uint32]*stream
	maxID   uint32 // the highest stream the client opened
	// running counts handlers not returned, reset streams' included:
	// changed under mu, read there and by writeThen's gather.
	running    atomic.Int32
	refused    int   // streams refused while reset ones still ran
	sendWindow int64 // the connection's window for our DATA
	recvWindow int64 // what the client may still send on the connection
	initWindow int64 // the client's SETTINGS_INITIAL_WINDOW_SIZE
	unacked    int64 // request body bytes consumed and not yet granted again
	ready      bool  // our SETTINGS are written: other frames may follow
	goingAway  bool  // GOAWAY sent: no new streams
	// closeIdle: the connection closes once its last stream ends, our
	// GOAWAY being written (not only begun: a close before it would
	// lose it), or the client's come.
	closeIdle  bool
	closing    bool
	idleTimer  *time.Timer
	spare      []chan handlerTask // workers waiting for a stream (startHandler)
	spareTimer *time.Timer        // ends them spareLinger after the last stream
	resets     resetRing          // the streams this server reset last
}

// resetRing remembers the last streams this server reset (RST_STREAM:
// an answer given before the request's body ended, a refused or cut
// request) once they are gone, since what the client sent on them before
// it saw the reset may still come: their DATA and trailers are dropped,
// as RFC 9113 (5.1) has an endpoint that sent RST_STREAM ignore the
// frames that follow it, where a stream closed otherwise is answered
// STREAM_CLOSED. Without it, a client uploading when its answer came
// early was sent a reset for each DATA frame in flight, and a trailer
// block ended the whole connection. The ring holds as many as the
// streams a connection may have in flight (at most maxResetRing), made at
// the connection's first reset: every stream of a burst answered early
// together is remembered. Older resets are answered as closed streams,
// which the protocol allows too.
type resetRing struct {
	ids  []uint32 // 0: none (client streams are odd)
	next int
}

// maxResetRing bounds a connection's ring of reset streams.
const maxResetRing = 1024

// rememberResetLocked notes that this server reset stream id. Called
// with mu.
func (c *conn) rememberResetLocked(id uint32) { c.resets.add(id, int(c.s.maxStreams())) }

func (r *resetRing) add(id uint32, size int) {
	if r.ids == nil {
		r.ids = make([]uint32, min(max(size, 1), maxResetRing))
	}
	r.ids[r.next%len(r.ids)] = id
	r.next++
}

func (r *resetRing) has(id uint32) bool { return id != 0 && slices.Contains(r.ids, id) }

func (s *Server) newConn(nc net.Conn, state *tls.ConnectionState, h http.Handler) *conn {
	base := context.Background()
	if bc, ok := h.(interface{ BaseContext() context.Context }); ok {
		base = bc.BaseContext()
	}
	ctx, cancel := context.WithCancel(base)
	c := &conn{
		s: s, nc: nc, h: h, ctx: ctx, cancel: cancel, tls: state,
		remote:     nc.RemoteAddr().String(),
		idle:       s.IdleTimeout,
		head:       s.ReadHeaderTimeout,
		streams:    make(map[uint32]*stream),
		sendWindow: 65535,
		recvWindow: connWindow,
		initWindow: 65535,
	}
	c.maxFrame.Store(16 << 10)
	if c.idle <= 0 {
		c.idle = defaultIdle
	}
	maxHead := s.MaxHeaderBytes
	if maxHead <= 0 {
		maxHead = http.DefaultMaxHeaderBytes
	}
	// Room above the listener's own limit, so that its handler, which
	// counts a head as HTTP/1.1 writes it, answers a head just past the
	// limit itself (and records it), and HPACK's 32 bytes a field do not
	// refuse a head HTTP/1.1 would have taken.
	c.maxHead = uint32(min(maxHead+4096, 1<<30))
	var r io.Reader = nc
	if state == nil {
		// Without TLS, whose records the frames are read out of, each
		// frame would be two reads of the socket (its header, then its
		// payload): read through a buffer, as an event loop reads a
		// turn's bytes at once.
		r = bufio.NewReaderSize(nc, cleartextReadBuffer)
	}
	c.fr = http2.NewFramer(nil, r)
	c.block = newHeaderBlock(c.maxHead)
	c.fr.SetMaxReadFrameSize(maxReadFrame)
	c.wfr = http2.NewFramer(frameWriter{c}, nil)
	c.enc = hpack.NewEncoder(&headerBuf{c})
	return c
}

// bufPool holds write buffers: a connection has one only while it
// writes, so that an idle one holds none.
var bufPool = sync.Pool{New: func() any {
	b := make([]byte, 0, writeBuffer)
	return &b
}}

// frameWriter is the Framer's output: the connection's write buffer,
// written out when it would overflow. Called with wmu.
type frameWriter struct{ c *conn }

func (w frameWriter) Write(p []byte) (int, error) {
	c := w.c
	if c.wbuf == nil {
		c.wbuf = bufPool.Get().(*[]byte)
	}
	if len(*c.wbuf)+len(p) > cap(*c.wbuf) {
		if err := c.flushBuf(); err != nil {
			return 0, err
		}
		if len(p) > cap(*c.wbuf) {
			return c.nc.Write(p)
		}
	}
	*c.wbuf = append(*c.wbuf, p...)
	return len(p), nil
}

// flushBuf writes the buffer out. Called with wmu.
func (c *conn) flushBuf() error {
	if c.wbuf == nil || len(*c.wbuf) == 0 {
		return nil
	}
	_, err := c.nc.Write(*c.wbuf)
	*c.wbuf = (*c.wbuf)[:0]
	return err
}

// headerBuf is the encoder's output: the connection's header block.
type headerBuf struct{ c *conn }

func (b *headerBuf) Write(p []byte) (int, error) {
	b.c.hbuf = append(b.c.hbuf, p...)
	return len(p), nil
}

func (s *Server) maxStreams() uint32 {
	if s.MaxConcurrentStreams == 0 {
		return DefaultMaxStreams
	}
	return s.MaxConcurrentStreams
}

// serve reads the client's frames until the connection ends, then ends
// every stream and waits for their handlers.
func (c *conn) serve() {
	defer func() {
		c.mu.Lock()
		c.closing = true
		c.releaseSpareLocked()
		if c.idleTimer != nil {
			c.idleTimer.Stop()
		}
		if c.spareTimer != nil {
			c.spareTimer.Stop()
		}
		for _, st := range c.streams {
			st.resetLocked(errConnClosed)
		}
		c.mu.Unlock()
		c.cancel()
		c.nc.Close()
		c.handlers.Wait()
	}()
	_ = c.nc.SetReadDeadline(time.Now().Add(prefaceTimeout))
	if c.tls != nil { // without TLS, net/http's server read it (serveUnencrypted)
		if err := c.readPreface(); err != nil {
			return
		}
	}
	err := c.write(func() error {
		if err := c.wfr.WriteSettings(
			http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: c.s.maxStreams()},
			http2.Setting{ID: http2.SettingInitialWindowSize, Val: streamWindow},
			http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: c.maxHead},
		); err != nil {
			return err
		}
		return c.wfr.WriteWindowUpdate(0, connWindow-65535)
	})
	if err != nil {
		return
	}
	c.mu.Lock()
	c.ready = true
	late := c.goingAway // a shutdown began before SETTINGS went
	c.mu.Unlock()
	if late {
		_ = c.write(func() error { return c.wfr.WriteGoAway(0, http2.ErrCodeNo, nil) })
		return
	}
	// The client's preface ends with its SETTINGS.
	f, err := c.fr.ReadFrame()
	if err != nil {
		return
	}
	if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
		c.fail(http2.ConnectionError(http2.ErrCodeProtocol))
		return
	} else if err := c.onSettings(sf); err != nil {
		c.fail(err)
		return
	}
	_ = c.nc.SetReadDeadline(time.Time{})
	c.mu.Lock()
	c.armIdleLocked()
	c.mu.Unlock()
	for {
		f, err := c.fr.ReadFrame()
		if err == nil {
			err = c.onFrame(f) // a header block reads its CONTINUATION frames
		}
		if err != nil && !c.onError(err) {
			return
		}
	}
}

// onError takes the error of a frame: a stream's resets that stream
// (true: the connection goes on); any other ends the connection. Its own
// function, so that the error errors.As fills is not on the heap for
// every frame.
func (c *conn) onError(err error) bool {
	if errors.Is(err, http2.ErrFrameTooLarge) {
		err = http2.ConnectionError(http2.ErrCodeFrameSize)
	}
	var se http2.StreamError
	if errors.As(err, &se) {
		c.resetStream(se.StreamID, se.Code)
		return true
	}
	c.fail(err)
	return false
}

func (c *conn) readPreface() error {
	var buf [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(c.nc, buf[:]); err != nil {
		return err
	}
	if string(buf[:]) != http2.ClientPreface {
		return errors.New("h2: bad client preface")
	}
	return nil
}

// fail ends the connection for err: a protocol error gets its GOAWAY
// first; a read error (the client gone) nothing. It runs on the reading
// goroutine, so no stream opens meanwhile, and the connection closes
// once it returns.
func (c *conn) fail(err error) {
	var ce http2.ConnectionError
	if errors.As(err, &ce) {
		c.mu.Lock()
		last := c.maxID
		c.mu.Unlock()
		// Flushed with it: write leaves the flush to a stream's writer
		// waiting for the lock, which would come after the close.
		_ = c.write(func() error {
			if err := c.wfr.WriteGoAway(last, http2.ErrCode(ce), nil); err != nil {
				return err
			}
			return c.flushBuf()
		})
		// Going away only now: the last stream to end would otherwise
		// close the connection's sending side (closeLocked) as soon as
		// it saw it, perhaps before the GOAWAY went.
		c.mu.Lock()
		c.goingAway = true
		c.mu.Unlock()
	}
}

// readBlock reads the header block f begins into c.block. One that f
// does not end must end within the read-header timeout: the connection's
// reads wait no longer meanwhile, and end it when they time out, as
// only CONTINUATION frames may come until the block ends.
func (c *conn) readBlock(f *http2.HeadersFrame) error {
	if f.HeadersEnded() || c.head <= 0 {
		return c.block.read(f, c.fr)
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(c.head))
	err := c.block.read(f, c.fr)
	_ = c.nc.SetReadDeadline(time.Time{})
	return err
}

// errConnClosed ends the streams of a connection that ended.
var errConnClosed = errors.New("h2: connection closed")

// errReset is a stream's error once the client reset it.
var errReset = errors.New("h2: stream reset by the client")

// errRefused is a stream's error when this server reset it.
var errRefused = errors.New("h2: stream reset")

func (c *conn) onFrame(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.HeadersFrame:
		if err := c.readBlock(f); err != nil {
			return err
		}
		return c.onHeaders(c.block)
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		return c.onSettings(f)
	case *http2.PingFrame:
		if f.IsAck() {
			return nil
		}
		data := f.Data
		return c.write(func() error { return c.wfr.WritePing(true, data) })
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.RSTStreamFrame:
		return c.onReset(f)
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID {
			return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol}
		}
		return nil
	case *http2.GoAwayFrame:
		// The client opens no more streams; those open finish.
		c.mu.Lock()
		c.goingAway, c.closeIdle = true, true
		if len(c.streams) == 0 {
			c.closeLocked()
		}
		c.mu.Unlock()
		return nil
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol)
	default:
		return nil // unknown frame types are ignored (RFC 9113, 4.1)
	}
}

func (c *conn) onSettings(f *http2.SettingsFrame) error {
	if f.NumSettings() > 100 {
		// Each setting is looked at: a frame of thousands is a flood.
		return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
	}
	// Applied and acknowledged in one turn of the write lock: no frame
	// written under the new settings goes before their ACK (a client may
	// read its ACK as the point from which they hold).
	var err error
	werr := c.write(func() error {
		c.mu.Lock()
		err = f.ForeachSetting(func(s http2.Setting) error {
			if err := s.Valid(); err != nil {
				return err
			}
			switch s.ID {
			case http2.SettingInitialWindowSize:
				delta := int64(s.Val) - c.initWindow
				c.initWindow = int64(s.Val)
				for _, st := range c.streams {
					st.sendWindow += delta
					if st.sendWindow > 1<<31-1 {
						return http2.ConnectionError(http2.ErrCodeFlowControl)
					}
					st.cond.Broadcast()
				}
			case http2.SettingMaxFrameSize:
				c.maxFrame.Store(int32(min(s.Val, writeBuffer)))
			case http2.SettingHeaderTableSize:
				c.enc.SetMaxDynamicTableSizeLimit(min(s.Val, 4096))
			}
			return nil
		})
		c.mu.Unlock()
		if err != nil {
			return nil // the connection error is returned below
		}
		return c.wfr.WriteSettingsAck()
	})
	if err != nil {
		return err
	}
	return werr
}

func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID == 0 {
		c.sendWindow += int64(f.Increment)
		if c.sendWindow > 1<<31-1 {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		for _, st := range c.streams {
			st.cond.Broadcast()
		}
		return nil
	}
	if f.StreamID > c.maxID {
		return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream
	}
	st := c.streams[f.StreamID]
	if st == nil {
		return nil // closed: a late update
	}
	st.sendWindow += int64(f.Increment)
	if st.sendWindow > 1<<31-1 {
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeFlowControl}
	}
	st.cond.Broadcast()
	return nil
}

func (c *conn) onReset(f *http2.RSTStreamFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID > c.maxID {
		return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream
	}
	if st := c.streams[f.StreamID]; st != nil {
		st.resetLocked(errReset)
	}
	return nil
}

// resetStream sends RST_STREAM for id and ends the stream, if open.
func (c *conn) resetStream(id uint32, code http2.ErrCode) {
	c.mu.Lock()
	if st := c.streams[id]; st != nil {
		st.resetLocked(errRefused)
	} else if id > c.maxID && id%2 == 1 {
		// A request refused as it opened (a malformed header block): the
		// stream is closed, and what the client sent on it before it saw
		// the reset is dropped.
		c.maxID = id
		c.rememberResetLocked(id)
	}
	c.mu.Unlock()
	_ = c.write(func() error { return c.wfr.WriteRSTStream(id, code) })
}

// startGoAway sends GOAWAY naming the last stream the connection will
// serve; it closes once those have ended.
func (c *conn) startGoAway(code http2.ErrCode) {
	c.mu.Lock()
	if c.goingAway {
		c.mu.Unlock()
		return
	}
	c.goingAway = true
	last := c.maxID // the last stream this connection will serve
	ready := c.ready
	c.mu.Unlock()
	if !ready {
		return // serve sends it after its SETTINGS
	}
	_ = c.write(func() error { return c.wfr.WriteGoAway(last, code, nil) })
	c.mu.Lock()
	c.closeIdle = true
	if len(c.streams) == 0 {
		c.closeLocked()
	}
	c.mu.Unlock()
}

// closeLocked closes the connection once what is written is flushed; the
// reading goroutine then ends the rest.
func (c *conn) closeLocked() {
	if c.closing {
		return
	}
	c.closing = true
	go func() {
		// What is written goes, then the close: the client, told
		// GOAWAY, closes its side, and the reading goroutine, seeing
		// that, closes the connection. A client that does not is cut
		// after a second.
		_ = c.write(func() error { return nil })
		if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		time.AfterFunc(time.Second, func() { c.nc.Close() })
	}()
}

// armIdleLocked starts the idle timer of a connection without streams.
func (c *conn) armIdleLocked() {
	if c.idleTimer == nil {
		c.idleTimer = time.AfterFunc(c.idle, c.onIdle)
		return
	}
	c.idleTimer.Reset(c.idle)
}

func (c *conn) onIdle() {
	c.mu.Lock()
	idle := len(c.streams) == 0 && !c.closing
	c.mu.Unlock()
	if idle {
		c.startGoAway(http2.ErrCodeNo)
	}
}

// write runs frames, which writes frames to the connection's buffer,
// under the write lock, and flushes unless another writer is waiting for
// the lock, which will flush for both.
func (c *conn) write(frames func() error) error { return c.writeThen(frames, false) }

// writeThen is write; with gather set, a writer that would flush while
// other streams' handlers run first lets the goroutines ready to run
// have their turn (runtime.Gosched), and flushes only if none of them
// has, or is about to: answers that become ready together (a client's
// streams sent in one burst, their backends' answers read in one poll)
// leave in one write and one TLS record, where each took its own, as
// nginx's event loop writes once for all it handled in one turn. When
// nothing else is ready to run the turn comes straight back.
func (c *conn) writeThen(frames func() error, gather bool) error {
	c.writers.Add(1)
	c.wmu.Lock()
	err := c.werr
	if err == nil {
		c.deadlineLocked()
		err = frames()
	}
	if c.writers.Add(-1) == 0 && c.wbuf != nil && err == nil && gather && c.running.Load() > 1 {
		c.wmu.Unlock()
		runtime.Gosched()
		c.wmu.Lock()
		if c.writers.Load() != 0 || c.wbuf == nil {
			// Another writer holds or waits for the lock and will
			// flush, or one has flushed already.
			err = c.werr
			c.wmu.Unlock()
			return err
		}
	}
	if c.writers.Load() == 0 && c.wbuf != nil {
		if err == nil {
			err = c.flushBuf()
		}
		*c.wbuf = (*c.wbuf)[:0]
		bufPool.Put(c.wbuf)
		c.wbuf = nil
	}
	if err != nil && c.werr == nil {
		c.werr = err
		c.nc.Close() // a connection that cannot be written is done
	}
	c.wmu.Unlock()
	return err
}

// deadlineLocked bounds the writes about to be made (the buffer's, when
// it fills, and the flush) by the idle timeout: a client that stops
// reading does not hold the connection's writers. The deadline moves
// only when a quarter of the timeout has gone by since it last did, so
// that a write always has three quarters of it at least.
func (c *conn) deadlineLocked() {
	if now := time.Now(); now.Sub(c.wdSet) > c.idle/4 {
		_ = c.nc.SetWriteDeadline(now.Add(c.idle))
		c.wdSet = now
	}
}

// writeHeaders encodes fields as a header block and writes it as HEADERS
// and, past the client's frame size, CONTINUATION frames. Called with
// wmu.
func (c *conn) writeHeaders(id uint32, fields []hpack.HeaderField, endStream bool) error {
	c.hbuf = c.hbuf[:0]
	for _, f := range fields {
		if err := c.enc.WriteField(f); err != nil {
			return err
		}
	}
	maxFrame := int(c.maxFrame.Load())
	block := c.hbuf
	first := block
	if len(first) > maxFrame {
		first = first[:maxFrame]
	}
	block = block[len(first):]
	err := c.wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first,
		EndStream: endStream, EndHeaders: len(block) == 0})
	for err == nil && len(block) > 0 {
		frag := block[:min(len(block), maxFrame)]
		block = block[len(frag):]
		err = c.wfr.WriteContinuation(id, len(block) == 0, frag)
	}
	return err
}
