// Package h1 is the short way through HTTP/1.1, both ends of it.
//
// From a client (Server, server.go): a cleartext connection's plain
// requests (no body, origin form, a head the strict reader takes) are
// read, handled and answered in the connection's goroutine, with no
// background read, no context of its own and no buffer while it waits;
// anything else hands the connection to net/http's server.
//
// To a server (Transport, this file): a request that has no body and may
// be sent twice (GET, HEAD, OPTIONS, TRACE), or a short body, to an
// http:// address, is written and answered on a pooled keep-alive
// connection in the request's own goroutine, where net/http's Transport
// runs a reader and a writer goroutine per connection and hands every
// request and response between them (a quarter of a proxy's CPU on a
// small request). An upgrade among them that the server accepts (101)
// hands the connection itself over as the answer's body (Switched).
// Everything else (longer bodies, 100-continue, TLS) goes through
// net/http's Transport. The reverse proxy sends to its
// backends this way, and the forward proxy's direct and SOCKS5 routes to
// plain-http targets.
//
// The bytes a server sees do not depend on the way, nor does what is made
// of its answer: the short way writes a plain request and reads a plain
// answer itself (exchange.go), exactly as net/http's Request.Write and
// ReadResponse would (tests and fuzz targets hold each to its net/http
// twin), and leaves anything else to those two. A
// pooled connection the server closed while it was idle is found out when
// the next request fails on it with nothing read, or is answered 408, and
// that request goes again on a fresh connection, as net/http's Transport
// does for the requests it may replay (one with a body when it is
// idempotent and the body in hand; another with a body is not sent on a
// connection found closed). A connection is reused only once
// its answer was read to the end with nothing after it in the same read.
// net/http's Transport also watches an idle connection with a background
// read; the short way has no goroutine to do that, so bytes a server sends
// after its answer, arriving in a later read, are taken for the next
// request's answer. Only a server that breaks HTTP's framing sends them.
package h1

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rotor-lb/rotor/internal/rawio"
	"github.com/rotor-lb/rotor/proxy"
)

// MaxResponseHeader is the bound rotor's transports give a response's
// head (their MaxResponseHeaderBytes): a server that sends headers
// without end fails the try.
const MaxResponseHeader = 1 << 20

// defaultMaxHead is net/http's bound on a response's head when
// MaxResponseHeaderBytes is 0.
const defaultMaxHead = 10 << 20

var (
	errHeaderTooLarge = errors.New("h1: response header too large")
	errUnasked101     = errors.New("h1: server switched protocols unasked")
	aLongTimeAgo      = time.Unix(1, 0)
)

// Transport sends requests the short way when it can, and through HTTP
// otherwise.
type Transport struct {
	// HTTP carries what the short way does not, bodies of no known
	// length aside: a copy of the transport New was given, whose
	// connections send a body of a known length in large writes
	// (bulkConn).
	HTTP *http.Transport
	// AnswerIdle, when not 0, bounds each wait for a byte of an answer's
	// body, either way it goes (a pool's timeouts.read: nginx's
	// proxy_read_timeout after the head): a read that waits longer fails
	// with proxy.ErrAnswerStalled. Set before the first request.
	AnswerIdle time.Duration
	// chunks carries the requests whose bodies have no known length (sent
	// chunked): HTTP's settings, but a write buffer a chunk of up to
	// maxChunk and its framing fit in, and fewer idle connections.
	chunks *http.Transport

	// Taken from HTTP's settings by New; immutable after it.
	//
	// dial opens the short way's connections; nil sends every request
	// through HTTP. try bounds the write and the wait for the head, and
	// idleTimeout an idle connection's life (0: none); maxIdle and
	// maxTotal bound the idle connections per host and in all; maxHead
	// bounds a head, started again after each informational answer
	// passed on.
	dial              func(ctx context.Context, network, addr string) (net.Conn, error)
	try, idleTimeout  time.Duration
	maxIdle, maxTotal int
	maxHead           int64

	mu     sync.Mutex
	idle   map[string]*idleList // guarded by mu: per host:port; no empty lists
	spare  *idleList            // guarded by mu: the last list emptied, for the next host without one
	total  int                  // guarded by mu: idle connections in all
	sweep  *time.Timer          // guarded by mu: closes connections idle too long
	closed bool                 // guarded by mu
}

// idleList is one host's idle connections, oldest first. A connection
// taken or given back changes the list in place, and no allocation is
// made while the host has some idle. A connection given back goes to the
// list it was taken from without a lookup of its host while that list is
// still its host's (host: the host it is the pool's list of, "" once it
// is out of the pool).
type idleList struct {
	conns []*conn
	host  string
}

// New returns a transport that sends what it can the short way, and the
// rest through copies of ht. The short way follows ht's settings, with
// the meanings net/http gives them: it dials with DialContext (none, or a
// Proxy set: everything goes through HTTP); ResponseHeaderTimeout bounds writing a
// request and waiting for the answer's head; MaxIdleConnsPerHost (0: 2)
// and MaxIdleConns (0: no bound; over it, the longest idle is closed)
// bound the idle connections, and IdleConnTimeout (0: none) how long one
// is kept; MaxResponseHeaderBytes (0: 10 MB) bounds an answer's head. A
// forward proxy's clients choose the hosts: the total bounds what they
// can make it hold.
func New(ht *http.Transport) *Transport {
	t := &Transport{
		HTTP: ht.Clone(), try: ht.ResponseHeaderTimeout, idleTimeout: ht.IdleConnTimeout,
		maxIdle: ht.MaxIdleConnsPerHost, maxTotal: ht.MaxIdleConns, maxHead: ht.MaxResponseHeaderBytes,
		idle: map[string]*idleList{},
	}
	if t.maxHead <= 0 {
		t.maxHead = defaultMaxHead
	}
	if ht.Proxy == nil {
		t.dial = ht.DialContext
	}
	if t.maxIdle <= 0 {
		t.maxIdle = http.DefaultMaxIdleConnsPerHost
	}
	if t.maxTotal <= 0 {
		t.maxTotal = math.MaxInt
	}
	dial := ht.DialContext
	if dial == nil {
		dial = new(net.Dialer).DialContext // as net/http dials without one
	}
	t.HTTP.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return newBulkConn(c), nil
	}
	t.chunks = t.HTTP.Clone()
	t.chunks.WriteBufferSize = chunkWriteBuffer
	t.chunks.MaxIdleConnsPerHost = min(t.maxIdle, maxIdleChunking)
	t.chunks.MaxIdleConns = min(t.maxTotal, 16*maxIdleChunking)
	return t
}

// maxChunk is the longest chunk a request body of no known length is
// sent in, and chunkWriteBuffer the write buffer of the connections that
// send them: one such chunk, its size line and its end fit in it. Through
// net/http's 4 KiB buffer, a chunk left in three writes (its line and
// first bytes, the rest, and a two-byte end), each a system call and a
// wake of the backend, and the rest from an address skewed against
// where the kernel put it (rawio.ChunkWindow): a chunked upload cost 1.9
// s of CPU a GiB against 0.74 with a Content-Length. A backend
// connection of this kind holds the buffer while idle, so they are
// fewer: maxIdleChunking a host.
const (
	maxChunk         = 64 << 10
	chunkWriteBuffer = maxChunk + 64
	maxIdleChunking  = 16
)

// bulkConn is a connection of net/http's way. net/http sends a body of a
// known length as io.LimitReader(body, length) copied into the
// connection's ReadFrom, which copies anything not a socket or a file
// through a 32 KiB buffer of its own: a 1 GiB upload left in 32,768
// writes, each a system call and a wake of the backend. bulkConn's
// ReadFrom copies through a lent proxy.CopyBuffer, eight times as large
// (proxy.Copy).
// (Under TLS the connection net/http writes to is the tls.Conn, and this
// ReadFrom is not asked.) An upgrade's connection is handed over as the
// 101's body, this one itself when nothing came behind the head: it
// half-closes, and gives its socket to the relay, as the socket would.
//
// A write the backend refused (it closed or reset the connection: an
// early answer to an upload it will not take, a 413 or a 401, and then
// a close with the body unread) waits until net/http's reader is done
// with the connection, and closes it, before it fails: on the failure
// net/http closes the connection at once, and an answer the backend sent
// before it closed, still to be read, was lost (502, or the answer cut).
// The reader closes it once it has read the answer, or found none; the
// wait is bounded all the same (refusedWait).
type bulkConn struct {
	net.Conn
	closed  chan struct{} // closed by Close
	once    sync.Once
	sending atomic.Pointer[watchedBody] // the body being sent on it, if any

	// While an answer's body is read from it (answering), each read's
	// wait is bounded by stall (nanoseconds), as the short way's are;
	// net/http's reader waits on an idle connection unbounded, as it
	// must. stallMu orders a read's deadline against the bound's lifting.
	stallMu sync.Mutex
	stall   atomic.Int64 // written under stallMu

	// While an answer's body whose client is to be flushed before a wait
	// (proxy.Pauser) is read from it (pausing), the connection is read
	// through sock, the short way's reads of its socket, which flush the
	// client (pausedFlush) when a read finds it empty and is to wait; sock
	// is nil where rawio cannot read it. pauseMu orders a flush against
	// its body's read ending: a read of the connection after the body's
	// end, net/http's reader's, may still see it set.
	sock    *sock
	pauseMu sync.Mutex
	pausing atomic.Pointer[answerBody] // cleared under pauseMu
}

// newBulkConn wraps c, a connection net/http's transport dialed.
func newBulkConn(c net.Conn) *bulkConn {
	bc := &bulkConn{Conn: c, closed: make(chan struct{})}
	if sc, ok := c.(syscall.Conn); ok && rawio.Supported {
		if rc, err := sc.SyscallConn(); err == nil {
			bc.sock = newSock(c, rc)
			bc.sock.paused = pausedFlush{bc}
		}
	}
	return bc
}

func (c *bulkConn) Read(p []byte) (int, error) {
	if c.stall.Load() > 0 { // the lock only while an answer is bounded
		c.stallMu.Lock()
		if d := time.Duration(c.stall.Load()); d > 0 {
			_ = c.Conn.SetReadDeadline(time.Now().Add(d))
		}
		c.stallMu.Unlock()
	}
	if c.pausing.Load() != nil {
		return c.sock.Read(p)
	}
	return c.Conn.Read(p)
}

// pausedFlush flushes the client of the answer's body being read from c,
// if one is (pausing): its sock's reads call it before they wait.
type pausedFlush struct{ c *bulkConn }

func (f pausedFlush) Flush() { f.c.flushPausing() }

func (c *bulkConn) flushPausing() {
	c.pauseMu.Lock()
	defer c.pauseMu.Unlock()
	if b := c.pausing.Load(); b != nil {
		b.paused.Flush()
	}
}

// answering bounds the connection's reads by d while an answer's body is
// read from it; 0 lifts the bound, from the read in flight too.
func (c *bulkConn) answering(d time.Duration) {
	c.stallMu.Lock()
	defer c.stallMu.Unlock()
	if time.Duration(c.stall.Load()) == d {
		return
	}
	c.stall.Store(int64(d))
	if d == 0 {
		_ = c.Conn.SetReadDeadline(time.Time{})
	}
}

// watchAnswer returns r with a trace that tells, once the request has
// its connection, where the answer's body is to be read (bounded, and
// its client flushed before a wait): got's connection is set then.
func watchAnswer(r *http.Request, got *atomic.Pointer[bulkConn]) *http.Request {
	return r.WithContext(httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if bc := bulkOf(info.Conn); bc != nil {
			got.Store(bc)
		}
	}}))
}

// bulkOf returns the bulkConn under c, over TLS or not; nil if none.
func bulkOf(c net.Conn) *bulkConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	bc, _ := c.(*bulkConn)
	return bc
}

// answerBody is an answer's body read through net/http's transport from
// a bulkConn whose reads it bounds (answering) until it ends, and whose
// reads flush paused, when set, before they wait (proxy.Pauser).
type answerBody struct {
	io.ReadCloser
	c      *bulkConn
	once   sync.Once
	paused interface{ Flush() }
}

// WhenPaused has f flushed each time a read of the body finds none of it
// there and is to wait for the backend (proxy.Pauser); nil stops it.
// Where the socket cannot be read by rawio, it does nothing.
func (b *answerBody) WhenPaused(f interface{ Flush() }) { b.paused = f }

func (b *answerBody) Read(p []byte) (int, error) {
	var n int
	var err error
	if b.paused != nil && b.c.sock != nil {
		// The connection is this body's until it ends: the reads it
		// makes now are this read's.
		b.c.pausing.Store(b)
		n, err = b.ReadCloser.Read(p)
		b.c.pauseMu.Lock()
		b.c.pausing.Store(nil)
		b.c.pauseMu.Unlock()
	} else {
		n, err = b.ReadCloser.Read(p)
	}
	if err != nil {
		b.end()
		if errors.Is(err, os.ErrDeadlineExceeded) { // net/http sets none of its own
			err = proxy.ErrAnswerStalled
		}
	}
	return n, err
}

func (b *answerBody) Close() error {
	b.end()
	return b.ReadCloser.Close()
}

func (b *answerBody) end() { b.once.Do(func() { b.c.answering(0) }) }

// h2AnswerBody is an HTTP/2 answer's body whose reads are each bounded by
// idle, as answerBody bounds an HTTP/1.1 one's: a stream's reads cannot
// take a deadline of their connection's, whose other streams read
// through it, so a timer closes the body once a read has waited idle,
// which resets the stream and ends the read with proxy.ErrAnswerStalled.
type h2AnswerBody struct {
	io.ReadCloser
	idle    time.Duration
	timer   *time.Timer // stopped but while a read waits
	stalled atomic.Bool
}

func newH2AnswerBody(rc io.ReadCloser, idle time.Duration) *h2AnswerBody {
	b := &h2AnswerBody{ReadCloser: rc, idle: idle}
	b.timer = time.AfterFunc(time.Hour, b.stall)
	b.timer.Stop()
	return b
}

func (b *h2AnswerBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.idle)
	n, err := b.ReadCloser.Read(p)
	b.timer.Stop()
	if err != nil && b.stalled.Load() {
		err = proxy.ErrAnswerStalled
	}
	return n, err
}

func (b *h2AnswerBody) stall() {
	b.stalled.Store(true)
	_ = b.ReadCloser.Close()
}

func (b *h2AnswerBody) Close() error {
	b.timer.Stop()
	return b.ReadCloser.Close()
}

func (c *bulkConn) ReadFrom(r io.Reader) (int64, error) { return proxy.Copy(c, r) }

func (c *bulkConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil && refused(err) {
		t := time.NewTimer(refusedWait)
		select {
		case <-c.closed:
		case <-t.C:
		}
		t.Stop()
	}
	return n, err
}

func (c *bulkConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	if w := c.sending.Swap(nil); w != nil {
		w.abort()
	}
	return c.Conn.Close()
}

// aborter is a request body a transport can give up sending: a client's
// (proxy.Body's lent one).
type aborter interface{ Abort() }

// watchedBody is a client's request body on its way to a backend through
// net/http's transport, on the connection it got (bulkConn.sending) until
// it has been read to its end. net/http waits, when the connection fails
// (the backend reset it, or the try timed out), for the goroutine
// writing the body to end, and that one waits in a read of the body for
// a client that may be holding it back: the request's answer, a 502 or a
// 504, waited for the client's next bytes or the body timeout, which
// then made it the client's 408. The connection's Close gives the body
// up (proxy's Abort), so that the read ends at once.
type watchedBody struct {
	io.ReadCloser
	abort func()
	conn  atomic.Pointer[bulkConn]
}

// watchBody returns r with its body watched: a copy, with a trace that
// tells the body its connection.
func watchBody(r *http.Request, a aborter) *http.Request {
	w := &watchedBody{ReadCloser: r.Body, abort: a.Abort}
	rc := r.WithContext(httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{GotConn: w.gotConn}))
	rc.Body = w
	return rc
}

func (w *watchedBody) gotConn(info httptrace.GotConnInfo) {
	if bc := bulkOf(info.Conn); bc != nil {
		w.conn.Store(bc)
		bc.sending.Store(w)
	}
}

// done takes the body off its connection: read to its end, or failed.
func (w *watchedBody) done() {
	if bc := w.conn.Load(); bc != nil {
		bc.sending.CompareAndSwap(w, nil)
	}
}

func (w *watchedBody) Read(p []byte) (int, error) {
	n, err := w.ReadCloser.Read(p)
	if err != nil {
		w.done()
	}
	return n, err
}

// WriteTo copies the body as the body it watches copies itself (a lent
// body's large writes).
func (w *watchedBody) WriteTo(dst io.Writer) (int64, error) {
	n, err := io.Copy(dst, w.ReadCloser)
	w.done()
	return n, err
}

// refusedWait bounds how long a write the backend refused waits for the
// answer to be read.
const refusedWait = 5 * time.Second

// refused reports whether err is a write's to a peer that closed or
// reset the connection.
func refused(err error) bool {
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

// CloseWrite shuts the connection's sending side, when it has one to
// shut.
func (c *bulkConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// PlainTCP returns the socket, when the connection is a plain one: what
// is read from it is the socket's bytes and nothing else.
func (c *bulkConn) PlainTCP() (*net.TCPConn, bool) {
	tc, ok := c.Conn.(*net.TCPConn)
	return tc, ok
}

// SyscallConn returns the socket's raw connection, when it has one.
func (c *bulkConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

// Idle returns the idle connections of the short way.
func (t *Transport) Idle() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

// Try returns the wait for response headers (0: none).
func (t *Transport) Try() time.Duration { return t.try }

// Close closes the idle connections of both ways, and any connection
// given back after it: the transport is being let go (a reload replaced
// it, or the server is stopping). Requests in flight finish.
func (t *Transport) Close() { t.closeIdle(true) }

// CloseIdleConnections closes the idle connections of both ways; the
// transport goes on keeping the ones given back after it.
func (t *Transport) CloseIdleConnections() { t.closeIdle(false) }

func (t *Transport) closeIdle(final bool) {
	t.mu.Lock()
	t.closed = t.closed || final
	idle := t.idle
	t.idle, t.spare, t.total = map[string]*idleList{}, nil, 0
	for _, l := range idle {
		l.host = ""
	}
	if t.sweep != nil {
		t.sweep.Stop()
		t.sweep = nil
	}
	t.mu.Unlock()
	for _, l := range idle {
		for _, c := range l.conns {
			c.close()
		}
	}
	t.HTTP.CloseIdleConnections()
	t.chunks.CloseIdleConnections()
}

// maxBody is the longest request body the short way sends: it is read
// whole before the request is written, and goes with its head in one
// write. A longer one, or one of no known length, goes through net/http.
// As long as the longest the short way's server reads whole before its
// handler runs (maxInHand), so that such a body goes on the short way
// here too.
const maxBody = maxInHand

// smallBody is the longest body read into a buffer of bodies; a longer
// one takes one of largeBodies, and its request a writer of
// largeWriters, which takes its head and it whole.
const smallBody = 4 << 10

// short reports whether r may go the short way: a bodiless GET, HEAD,
// OPTIONS or TRACE (an upgrade among them), or a request with a body of a
// known length up to maxBody (not waiting for 100 Continue, not an
// upgrade).
func short(r *http.Request) bool {
	if r.URL.Scheme != "http" {
		return false
	}
	if r.Body == nil || r.Body == http.NoBody {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		default:
			return false
		}
		if r.ContentLength != 0 {
			return false
		}
	} else {
		if n := sendLength(r); n <= 0 || n > maxBody || r.Method == http.MethodConnect {
			return false
		}
		if _, expect := r.Header["Expect"]; expect {
			return false
		}
		return !upgrading(r)
	}
	return true
}

// sendLength is the length of the body the short way sends r with: its
// ContentLength, or for one of no known length (chunked) the bytes in
// hand when all of it is (it came whole with its head), sent with that
// length; -1 when it is not known.
func sendLength(r *http.Request) int64 {
	if r.ContentLength >= 0 {
		return r.ContentLength
	}
	if h, ok := r.Body.(proxy.InHand); ok {
		return h.Held()
	}
	return -1
}

// upgrading reports whether r asks to switch protocols: a 101 is its
// final answer, and the connection is then the caller's.
func upgrading(r *http.Request) bool {
	_, ok := r.Header["Upgrade"]
	return ok
}

// RoundTrip sends r and returns the server's answer.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	return t.roundTrip(r, httptrace.ContextClientTrace(r.Context()), false, nil)
}

// RoundTripTraced is RoundTrip with trace told what a trace in r's
// context would be (the informational answers, and all net/http's
// Transport tells one): a caller with a trace of its own need not make a
// context and a request to carry it, which only net/http's way is given.
// read, when not nil, is the head of the request r is sent on for, as the
// short way's server read it (RequestHead): the values r shares with it
// are written without being checked again.
func (t *Transport) RoundTripTraced(r *http.Request, trace *httptrace.ClientTrace, read *ReadHead) (*http.Response, error) {
	return t.roundTrip(r, trace, true, read)
}

// Short reports whether RoundTrip sends r the short way: written whole,
// in the caller's goroutine, before its answer is read, and nothing of r
// or its trace kept once RoundTrip has returned. net/http's Transport may
// go on writing a request, and telling its trace, after it returned the
// answer (a server may answer before a request is all sent).
func (t *Transport) Short(r *http.Request) bool {
	// A body is sent once, and only a look at the socket (rawio.Peek)
	// tells a kept connection the server has closed from a live one:
	// where there is none, a body goes net/http's way, whose idle
	// connections each have a reader that notices their end. One that
	// can go again on a new connection needs no look.
	return t.dial != nil && short(r) && (r.ContentLength == 0 || rawio.Supported || replayable(r))
}

// replayable reports whether r can go again, body and all, on a new
// connection: it is idempotent and its body all in hand (its Take is
// whole).
func replayable(r *http.Request) bool {
	h, ok := r.Body.(proxy.InHand)
	return ok && proxy.Idempotent(r.Method) && h.Held() > 0
}

// roundTrip sends r, trace told of it; own: trace is not in r's context;
// read: the head r's values came from, if known.
func (t *Transport) roundTrip(r *http.Request, trace *httptrace.ClientTrace, own bool, read *ReadHead) (*http.Response, error) {
	if !t.Short(r) {
		if own && trace != nil {
			r = r.WithContext(httptrace.WithClientTrace(r.Context(), trace))
		}
		if a, ok := r.Body.(aborter); ok {
			r = watchBody(r, a)
		}
		var got atomic.Pointer[bulkConn]
		r = watchAnswer(r, &got)
		var resp *http.Response
		var err error
		if r.ContentLength < 0 && r.Body != nil && r.Body != http.NoBody {
			rc := *r
			rc.Body = chunkedBody{r.Body}
			resp, err = t.chunks.RoundTrip(&rc)
		} else {
			resp, err = t.HTTP.RoundTrip(r)
		}
		// Over HTTP/1.1 the connection's reads are bounded; an HTTP/2
		// connection's reads are its streams', which another answer may
		// be leaving idle, so each stream's reads are bounded by a timer.
		switch bc := got.Load(); {
		case err != nil:
		case bc != nil && resp.ProtoMajor == 1 && resp.StatusCode != http.StatusSwitchingProtocols:
			bc.answering(t.AnswerIdle)
			resp.Body = &answerBody{ReadCloser: resp.Body, c: bc}
		case resp.ProtoMajor == 2 && t.AnswerIdle > 0:
			resp.Body = newH2AnswerBody(resp.Body, t.AnswerIdle)
		}
		return resp, err
	}
	addr := r.URL.Host
	if !hasPort(addr) { // as net/http dials it
		addr = net.JoinHostPort(r.URL.Hostname(), "80")
	}
	// A body is read once: a request with one is not sent again (as
	// net/http's Transport does not send again a body it cannot get
	// anew), so a connection the server has closed meanwhile is not used
	// for it. An idempotent request's body in hand is taken here, once,
	// and goes again with it, as a body net/http's Transport can get anew
	// (GetBody) does: a PUT on a connection the server closed as it came
	// is not the endpoint's failure.
	once := r.ContentLength != 0
	var held []byte
	if once && replayable(r) {
		if p, ok := r.Body.(proxy.InHand).Take(sendLength(r)); ok {
			held, once = p, false
			r.Body.Close()
		}
	}
	// The second time, a new connection: a server that timed one idle
	// connection out has most often timed out those idle longer too.
	fresh := false
	for again := !once; ; again = false {
		c, reused, err := t.get(r.Context(), addr, fresh)
		if err != nil {
			return nil, err
		}
		if once && reused && c.gone() {
			c.close()
			continue
		}
		resp, err := c.roundTrip(r, held, trace, read)
		if err == nil && reused && again && resp.StatusCode == http.StatusRequestTimeout {
			// A server may say 408 on a connection it times out while
			// idle, before it closes it (net/http's Transport drops such
			// an answer): the request did not reach it. Go again.
			resp.Body.Close()
			fresh = true
			continue
		}
		if err == nil {
			return resp, nil
		}
		// A connection the server closed while it sat idle fails the
		// request with nothing read: go again, once, on a new one.
		if !reused || !again || c.read > 0 || r.Context().Err() != nil || isTimeout(err) {
			return nil, err
		}
		fresh = true
	}
}

// hasPort reports whether a URL's host ends in a port: a colon and
// digits, as url.URL's Port finds one.
func hasPort(host string) bool {
	i := strings.LastIndexByte(host, ':')
	if i < 0 || i == len(host)-1 {
		return false
	}
	for _, c := range []byte(host[i+1:]) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// get takes the most recently used idle connection to host (host:port),
// or dials one; fresh: it dials one.
func (t *Transport) get(ctx context.Context, host string, fresh bool) (c *conn, reused bool, err error) {
	t.mu.Lock()
	if l := t.idle[host]; l != nil && !fresh {
		n := len(l.conns)
		c = l.conns[n-1]
		l.conns[n-1] = nil
		l.conns = l.conns[:n-1]
		c.list = l
		if n == 1 {
			// Emptied: kept aside, its array with it, for the next
			// host that needs a list (most often this one again).
			delete(t.idle, host)
			l.host = ""
			t.spare = l
		}
		t.total--
	}
	t.mu.Unlock()
	if c != nil {
		return c, true, nil
	}
	nc, err := t.dial(ctx, "tcp", host)
	if err != nil {
		return nil, false, err
	}
	// host may be cut from a client's head (a forward proxy's target),
	// whose chunk it would keep for as long as the pool keeps c (headText).
	c = &conn{t: t, host: strings.Clone(host), conn: nc, limit: -1}
	c.br = bufio.NewReader(c)
	if sc, ok := nc.(syscall.Conn); ok && rawio.Supported {
		if c.rc, _ = sc.SyscallConn(); c.rc != nil {
			c.sock = newSock(nc, c.rc)
			c.sock.cut = &c.cutting
		}
	}
	c.last = lastWrite{c: c}
	c.ready.init()
	c.sendFn = c.sendStep
	c.cutFn = c.cut
	c.unhookFn = c.unhook
	c.peekFn = c.peekStep
	return c, false, nil
}

// put keeps c for the next request to its host, when there is room.
func (t *Transport) put(c *conn) {
	c.idleAt = time.Now()
	t.mu.Lock()
	l := c.list
	if l == nil || l.host != c.host {
		l = t.idle[c.host]
	}
	if t.closed || l != nil && len(l.conns) >= t.maxIdle {
		t.mu.Unlock()
		c.close()
		return
	}
	var evicted *conn
	if t.total >= t.maxTotal {
		evicted = t.evictOldest()
		if l != nil && l.host == "" { // the eviction emptied it
			l = nil
		}
	}
	if l == nil {
		l = t.spare
		if l == nil {
			l = new(idleList)
		}
		t.spare = nil
		l.host = c.host
		t.idle[c.host] = l
	}
	l.conns = append(l.conns, c)
	c.list = l
	t.total++
	if t.sweep == nil && t.idleTimeout > 0 {
		t.sweep = time.AfterFunc(t.idleTimeout, t.sweepIdle)
	}
	t.mu.Unlock()
	if evicted != nil {
		evicted.close()
	}
}

// evictOldest takes the connection idle longest out of the pool. It
// looks at the first of every host's list: O(hosts), at most the total,
// and only when the pool is full. Called with mu held.
func (t *Transport) evictOldest() *conn {
	var oldest string
	for host, l := range t.idle {
		if oldest == "" || l.conns[0].idleAt.Before(t.idle[oldest].conns[0].idleAt) {
			oldest = host
		}
	}
	return t.dropOldest(oldest, 1)[0]
}

// dropOldest takes host's n longest idle connections out of the pool,
// leaving no empty list and the total right. The connections it returns
// are in an array of their own. Called with mu held.
func (t *Transport) dropOldest(host string, n int) []*conn {
	l := t.idle[host]
	old := l.conns
	if n == len(old) {
		delete(t.idle, host) // not spare: its array is returned
		l.host = ""
	} else {
		l.conns = append(old[:0:0], old[n:]...)
	}
	t.total -= n
	return old[:n:n]
}

// sweepIdle closes the connections idle longer than the idle timeout, and
// comes back when the next one will be.
func (t *Transport) sweepIdle() {
	now := time.Now()
	var stale []*conn
	t.mu.Lock()
	next := time.Duration(0)
	for host, l := range t.idle {
		conns, i := l.conns, 0
		for i < len(conns) && now.Sub(conns[i].idleAt) >= t.idleTimeout {
			i++
		}
		if i > 0 {
			stale = append(stale, t.dropOldest(host, i)...)
		}
		if i == len(conns) {
			continue
		}
		if d := t.idleTimeout - now.Sub(conns[i].idleAt); next == 0 || d < next {
			next = d
		}
	}
	switch {
	case next == 0 || t.closed:
		t.sweep = nil
	case t.sweep == nil: // stopped by closeIdle while this one ran
		t.sweep = time.AfterFunc(next, t.sweepIdle)
	default:
		t.sweep.Reset(next)
	}
	t.mu.Unlock()
	for _, c := range stale {
		c.close()
	}
}

// conn is one keep-alive connection of the short way. It is used by one
// request at a time, and reads through itself so that a response's head
// is bounded.
type conn struct {
	t    *Transport      // immutable
	host string          // immutable
	conn net.Conn        // immutable
	rc   syscall.RawConn // immutable; nil: conn has no descriptor to wait on
	sock *sock           // immutable: reads rc; nil without it
	last lastWrite       // what the request is written through
	// sendThenWait's state, and its step made once (a closure would be
	// made, with what it holds, on every request).
	sendFn func(fd uintptr) bool
	cutFn  func() // cut, made once
	// gone's look at the socket, made once (peek's closure, and what it
	// sets, would be made on every request with a body), and its result.
	peekFn  func(fd uintptr)
	peekErr error
	// The request's cancel hook while the exchange holds it, and unhook,
	// made once.
	hook     *CancelHook
	hookCtx  context.Context
	unhookFn func() bool
	sendP    []byte
	sendN    int
	sendErr  error
	sendTurn bool // the request goes with its turn's sends (readySockets.inTurn)
	br       *bufio.Reader
	limit    int64 // bytes the head may still take; <0: no bound (the body streams)
	read     int64 // bytes read since the request was written
	readErr  error // the last read's failure since the request was written
	idleAt   time.Time
	list     *idleList // the pool's list it was last in (put's guess at its host's)
	ready    waiter    // its place in readySockets, where it waits for an answer
	// The try's bound (beginTry): when the running try ends, in
	// nanoseconds since tryEpoch (0: none runs; tryCut: it ran out and
	// was cut), the timer that looks at it, whether that timer is
	// armed, and expired, set once a try's cut is done.
	tryEnd   atomic.Int64
	tryTimer *time.Timer
	armed    atomic.Bool
	expired  atomic.Bool
	// cutting is set while a cut's deadline in the past holds (cut, until
	// endTry lifts it): the answer's read bound (stall) sets none over it.
	cutting atomic.Bool
	// stall bounds each wait for a byte of the answer's body, while one
	// is read (Transport.AnswerIdle; 0 otherwise).
	stall time.Duration
}

// answering bounds each wait for a byte of the answer's body by d while
// it is read; 0 lifts the bound once it has been.
func (c *conn) answering(d time.Duration) {
	if c.stall == d {
		return
	}
	c.stall = d
	if c.sock != nil {
		c.sock.readStall = d
	} else if d == 0 {
		setReadDeadline(c.conn, &c.cutting, time.Time{})
	}
}

// close closes the connection, out of readySockets first (its descriptor
// is valid until it closes).
func (c *conn) close() {
	readySockets.remove(&c.ready, c.rc)
	c.conn.Close()
	if c.tryTimer != nil {
		c.tryEnd.Store(0)
		c.tryTimer.Stop() // it would stand down when it fires; not kept until then
	}
}

func (c *conn) Read(p []byte) (int, error) {
	if c.limit == 0 {
		c.readErr = errHeaderTooLarge
		return 0, errHeaderTooLarge
	}
	if c.limit > 0 && int64(len(p)) > c.limit {
		p = p[:c.limit]
	}
	var n int
	var err error
	if c.sock != nil {
		n, err = c.sock.Read(p) // it bounds the wait itself (readStall)
	} else {
		if c.stall > 0 {
			setReadDeadline(c.conn, &c.cutting, time.Now().Add(c.stall))
		}
		n, err = c.conn.Read(p)
		if c.stall > 0 && err != nil && errors.Is(err, os.ErrDeadlineExceeded) && !c.cutting.Load() {
			err = proxy.ErrAnswerStalled
		}
	}
	c.read += int64(n)
	if c.limit > 0 {
		c.limit -= int64(n)
	}
	if err != nil {
		c.readErr = err
	}
	return n, err
}

var writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}

var (
	bodies       = sync.Pool{New: func() any { return new([smallBody]byte) }}
	largeBodies  = sync.Pool{New: func() any { return new([maxBody]byte) }}
	largeWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, maxBody+4<<10) }}
)

// HeadError is the error to report for a response head that failed to
// read with err when a read under it failed with readErr (nil: none did).
// ReadResponse takes the bytes before a failed read as a whole last line,
// so a head cut short at a deadline, a bound or an end reads to it as a
// malformed one: the failed read is what happened, an end unexpected.
func HeadError(err, readErr error) error {
	switch readErr {
	case nil:
		return err
	case io.EOF:
		return io.ErrUnexpectedEOF
	}
	return readErr
}

// cutOnCancel cuts c once ctx is done and returns what stops that,
// reporting whether it stopped it before the cut, as context.AfterFunc's
// stop does. A request the h1 Server or HTTP/2's serves carries its
// server's hook (hookOf), which costs less; anything else, or a context
// cancelled on its own (a bound of the caller's), registers with the
// context.
func (c *conn) cutOnCancel(ctx context.Context) (stop func() bool) {
	h := hookOf(ctx)
	if h == nil || !h.cut.CompareAndSwap(nil, &c.cutFn) {
		stop = context.AfterFunc(ctx, c.cutFn)
		if ctx.Err() != nil {
			// Done already: cut now, not once AfterFunc's goroutine
			// runs, which may be after the request was sent and answered.
			c.cut()
		}
		return stop
	}
	c.hook, c.hookCtx = h, ctx
	if ctx.Err() != nil {
		c.cut() // cancelled before the hook was set: perhaps not fired
	}
	return c.unhookFn
}

// unhook takes c's cut from its hook; false: the request was cancelled,
// and the cut may have run.
func (c *conn) unhook() bool {
	h, ctx := c.hook, c.hookCtx
	if h == nil {
		return false // already taken
	}
	c.hook, c.hookCtx = nil, nil
	h.cut.CompareAndSwap(&c.cutFn, nil)
	return ctx.Err() == nil
}

// cut makes the request's reads and writes on c fail at once: its
// context is done, or its try's time is up. A wait for the answer in
// readySockets ends too.
func (c *conn) cut() {
	c.cutting.Store(true)
	c.conn.SetDeadline(aLongTimeAgo)
	c.ready.poke()
}

// tryEpoch is what the tries' ends are counted from: time.Since reads
// the monotonic clock.
var tryEpoch = time.Now()

// tryCut is conn.tryEnd once a try ran out and its exchange was cut.
const tryCut = -1

// never arms a timer for no time that comes.
const never = time.Duration(math.MaxInt64)

// beginTry bounds the exchange by the try: once try has passed, c's
// timer cuts it, and a read or write then fails as at a deadline. One
// timer a connection, where a deadline would set two of the poller's (the
// reads' and the writes') and the wait in readySockets would need one of
// its own besides (docs/BENCHMARKS.md, "The try, one timer").
//
// The timer is armed lazily, as HAProxy's tasks are queued: a try notes
// when it ends, and arms the timer only if it is not armed already, for
// an earlier try's end; when it fires it looks at the try then running,
// cuts it if its time is up and is armed again for its end if not. A try
// that ends (endTry) notes that none runs and leaves the timer as it is:
// it stands down when it fires. So a connection answered within its tries
// arms its timer once a try's length, not twice a request: a Reset and a
// Stop of a timer were 672 instructions of a GET's 28,200 and 62 of the
// 1,720 lines of code it missed in the first-level cache (docs/BENCHMARKS.md,
// "The try's timer, armed lazily"). The cut comes at the try's end, not
// sooner, and no later than the timer's own lateness: every try of a
// connection is its transport's length (Transport.try), so a timer armed
// for an earlier try's end fires before a later try's.
func (c *conn) beginTry(try time.Duration) {
	c.tryEnd.Store(int64(time.Since(tryEpoch) + try))
	if c.tryTimer == nil {
		c.tryTimer = time.AfterFunc(never, c.expire) // made before it can fire
	}
	if c.armed.CompareAndSwap(false, true) {
		c.tryTimer.Reset(try)
	}
}

// expire is the try timer's: it cuts the running try once its end has
// passed, is armed again for its end if it has not, and stands down when
// none runs. Only the one that armed the timer (beginTry, or expire
// itself) sets it again: armed says who, and the last look at tryEnd
// after standing down picks up a try whose beginTry found it still armed.
func (c *conn) expire() {
	for {
		end := c.tryEnd.Load()
		if end <= 0 { // none runs (0); a cut try is not looked at again
			c.armed.Store(false)
			if c.tryEnd.Load() <= 0 || !c.armed.CompareAndSwap(false, true) {
				return
			}
			continue
		}
		if left := time.Duration(end) - time.Since(tryEpoch); left > 0 {
			c.tryTimer.Reset(left)
			return
		}
		if c.tryEnd.CompareAndSwap(end, tryCut) {
			c.armed.Store(false)
			c.cut()
			c.expired.Store(true)
			return
		}
		// The try ended as its time ran out: look again.
	}
}

// endTry ends the try once the answer's head is in, leaving the timer as
// it is. When its time ran out already (the head came as the try did),
// it waits for the cut to be done and lifts it, for the body and the next
// request (lifted: a cancellation's cut, if any, went with it).
func (c *conn) endTry() (lifted bool) {
	// Only expire changes a running try's end: a CAS that fails found it cut.
	if end := c.tryEnd.Load(); end != tryCut && c.tryEnd.CompareAndSwap(end, 0) {
		return false
	}
	for !c.expired.Load() {
		runtime.Gosched() // the cut is two calls away
	}
	c.expired.Store(false)
	c.tryEnd.Store(0)
	c.cutting.Store(false)
	c.conn.SetDeadline(time.Time{})
	return true
}

// gone reports whether the server has closed c, or sent something
// unasked, while it sat idle: a look at the socket that takes nothing
// from it. For a request that cannot be sent again.
func (c *conn) gone() bool {
	if c.br.Buffered() > 0 {
		return true
	}
	if c.rc == nil {
		return false
	}
	c.peekErr = nil
	if err := c.rc.Control(c.peekFn); err != nil {
		return true // closed
	}
	return c.peekErr != syscall.EAGAIN
}

func (c *conn) peekStep(fd uintptr) { _, c.peekErr = rawio.Peek(fd) }

// peek looks at rc's socket without taking from it or waiting: n is 1
// when a byte is there, 0 with no error at its end; EAGAIN when nothing
// is. The short way asks it of a connection that waits: a client's that
// may have ended with its last request, a backend's kept idle.
func peek(rc syscall.RawConn) (n int, err error) {
	if cerr := rc.Control(func(fd uintptr) { n, err = rawio.Peek(fd) }); cerr != nil {
		return 0, cerr
	}
	return n, err
}

// lastWrite is what a request is written through: the buffer's flushes
// while the request is written go to the connection as they come; the
// last one (final) is sent by sendThenWait.
type lastWrite struct {
	c     *conn
	final bool
}

func (w *lastWrite) Write(p []byte) (int, error) {
	switch {
	case w.c.sock == nil:
		return w.c.conn.Write(p)
	case !w.final:
		return w.c.sock.Write(p)
	}
	return w.c.sendThenWait(p)
}

// sendThenWait writes the request's last bytes and then waits until the
// answer can be read, in one raw read of the connection: the wait for
// readiness is set up before the write, so the answer cannot slip in
// unnoticed between them, and the read that follows finds its bytes
// there. The ordinary way, a write and then a read, tries the read at
// once, and as the server has not answered yet that read finds nothing:
// one system call a request for nothing. A server cannot answer a
// request before it is sent, so the only bytes that could have come
// earlier (a 408 or an end of stream on an idle connection) are followed
// by the end of the stream, which wakes the wait. When the socket cannot
// take all of it at once, the rest goes the ordinary way. A deadline or
// a close while waiting is left for the read to report.
func (c *conn) sendThenWait(p []byte) (int, error) {
	c.sendTurn = readySockets.inTurn(&c.ready)
	c.sendP, c.sendN, c.sendErr = p, 0, nil
	err := c.rc.Read(c.sendFn)
	n, werr := c.sendN, c.sendErr
	c.sendP, c.sendN, c.sendErr = nil, 0, nil
	switch {
	case werr == syscall.EAGAIN:
		m, err := c.sock.Write(p[n:])
		return n + m, err
	case werr != nil:
		return n, c.sock.opError("write", os.NewSyscallError("write", werr))
	case n < len(p):
		// Closed or past its deadline before anything could be sent.
		return n, c.sock.opError("write", err)
	}
	return n, nil
}

// sendStep is sendThenWait's part inside the raw read: it writes what is
// left, then waits until the socket is readable: in readySockets, which
// wakes the connections in the order their answers came, or (false)
// until the poller calls it again. The wait in the queue ends at a cut
// too (the try's end is one), and the read that follows, in the poller,
// reports it.
func (c *conn) sendStep(fd uintptr) bool {
	if c.sendErr != nil || c.sendN == len(c.sendP) {
		return true // readable, or a write failed
	}
	var m int
	var err error
	if c.sendTurn {
		c.sendTurn = false
		m, err = readySockets.sendWithTurn(&c.ready, fd, c.sendP[c.sendN:])
	} else {
		m, err = rawio.Write(fd, c.sendP[c.sendN:])
	}
	c.sendN += m
	if err != nil {
		c.sendErr = err
		return true
	}
	if c.sendN < len(c.sendP) {
		return false
	}
	return readySockets.wait(&c.ready, fd)
}

// roundTrip writes r and reads the answer's head; the body streams from
// the connection, which goes back to the pool when it is read to its end.
// The try bounds the write and the wait for the head; the request's
// context ends it whenever it is done. On an error c is closed. held,
// when not nil, is r's body, taken already.
func (c *conn) roundTrip(r *http.Request, held []byte, trace *httptrace.ClientTrace, read *ReadHead) (*http.Response, error) {
	ctx, try := r.Context(), c.t.try
	reqBody := held
	if n := sendLength(r); held == nil && n > 0 {
		// Read whole first, once a connection is ready for it (a failed
		// dial leaves it unread, for another endpoint), and before the
		// try begins: a client slow to send it is not the backend's
		// delay. A failure to read it is the client's body's (proxy.Body
		// keeps it), and nothing was sent.
		if h, ok := r.Body.(proxy.InHand); ok {
			// In hand already: its bytes go with the head as they are.
			reqBody, _ = h.Take(n)
		}
		var err error
		if reqBody == nil {
			var b []byte
			if n <= smallBody {
				small := bodies.Get().(*[smallBody]byte)
				defer bodies.Put(small)
				b = small[:]
			} else {
				large := largeBodies.Get().(*[maxBody]byte)
				defer largeBodies.Put(large)
				b = large[:]
			}
			var got int
			got, err = io.ReadFull(r.Body, b[:n])
			reqBody = b[:got]
		}
		r.Body.Close()
		if err != nil {
			c.close()
			return nil, fmt.Errorf("reading the request body: %w", err)
		}
	}
	if try > 0 {
		c.beginTry(try)
	}
	// After the try began, so that a cancellation always has the last
	// word.
	var stop func() bool
	if _, hooked := ctx.(HookedContext); hooked || ctx.Done() != nil {
		stop = c.cutOnCancel(ctx)
	}
	c.read, c.limit, c.readErr = 0, c.t.maxHead, nil
	// The head and the body leave in one write: a body longer than the
	// room the head leaves in writers' buffers takes a larger one.
	pool := &writers
	if len(reqBody) > smallBody/2 {
		pool = &largeWriters
	}
	bw := pool.Get().(*bufio.Writer)
	bw.Reset(&c.last)
	c.last.final = false
	err := writeRequest(bw, r, reqBody, trace, read)
	if err == nil {
		c.last.final = true
		err = bw.Flush()
	}
	bw.Reset(nil)
	pool.Put(bw)
	var resp *http.Response
	var a *answerBlock
	hopFree := false
	for err == nil {
		resp, a, hopFree, err = readResponse(c.br, r)
		if err != nil || resp.StatusCode >= 200 {
			break
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			if !upgrading(r) {
				err = errUnasked101
			}
			break
		}
		// ReverseProxy passes informational answers (103 Early Hints) on;
		// once one is delivered the head's bound starts again, as in
		// net/http's Transport, and the try still bounds the wait for the
		// final answer. Undelivered ones count against the bound.
		if trace != nil && trace.Got1xxResponse != nil {
			err = trace.Got1xxResponse(resp.StatusCode, textproto.MIMEHeader(resp.Header))
			c.limit = c.t.maxHead
		}
	}
	if err != nil {
		if stop != nil {
			stop()
		}
		c.close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, HeadError(err, c.readErr)
	}
	c.limit = -1
	// The try ends with the head: the body streams unbounded, as it does
	// through net/http's Transport, and an upgraded connection is the
	// caller's. A cancellation still ends the body: cut again when the
	// try's own cut was lifted, and a cancellation's with it.
	if try > 0 && c.endTry() && ctx.Err() != nil {
		c.cut()
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return c.switched(ctx, resp, stop)
	}
	c.answering(c.t.AnswerIdle)
	var b *body
	if a != nil {
		b = &a.body
	} else {
		b = new(body)
	}
	*b = body{ReadCloser: resp.Body, c: c, ctx: ctx, stop: stop, reuse: !resp.Close && !r.Close, hopFree: hopFree, block: a}
	resp.Body = b
	return resp, nil
}

// switched hands c over as the body of a 101 answer to an upgrade, as
// net/http's Transport does: an io.ReadWriteCloser that is the
// connection, no longer the pool's, with no deadline and no longer cut
// when the request's context ends (the caller owns it now).
func (c *conn) switched(ctx context.Context, resp *http.Response, stop func() bool) (*http.Response, error) {
	if stop != nil && !stop() {
		c.close()
		return nil, ctx.Err()
	}
	// The connection is the caller's now, with no deadline (the try's
	// ended): out of the ready queue.
	readySockets.remove(&c.ready, c.rc)
	sw := &Switched{Conn: c.conn}
	if n := c.br.Buffered(); n > 0 {
		sw.pre = make([]byte, n)
		c.br.Read(sw.pre)
	}
	resp.Body = sw
	return resp, nil
}

// Switched is a connection a server switched protocols on (the body of a
// 101 the short way): it reads first what came with the answer's head,
// then the connection's own bytes.
type Switched struct {
	net.Conn
	pre []byte
}

func (s *Switched) Read(p []byte) (int, error) {
	if len(s.pre) > 0 {
		n := copy(p, s.pre)
		s.pre = s.pre[n:]
		return n, nil
	}
	return s.Conn.Read(p)
}

// Buffered returns what came with the answer's head and was not read
// yet, and leaves it to the caller: the connection reads on from its own
// bytes.
func (s *Switched) Buffered() []byte {
	b := s.pre
	s.pre = nil
	return b
}

// PlainTCP returns the socket once nothing read with the head is left:
// from then on the connection's bytes are the socket's, which
// proxy.Splice relays in its event loop.
func (s *Switched) PlainTCP() (*net.TCPConn, bool) {
	tc, ok := s.Conn.(*net.TCPConn)
	return tc, ok && len(s.pre) == 0
}

// CloseWrite shuts the connection's sending side, when it has one to shut.
func (s *Switched) CloseWrite() error {
	if cw, ok := s.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return s.Conn.Close()
}

// body gives its connection back to the pool once read to the end
// with nothing after it; closed before, it closes the connection rather
// than read the rest.
type body struct {
	io.ReadCloser
	c       *conn
	ctx     context.Context // the request's
	stop    func() bool     // nil: the request could not be cancelled
	reuse   bool
	done    bool
	hopFree bool         // the answer's head had no hop-by-hop field (readResponse)
	block   *answerBlock // the block the answer was made in, if it was (answerOf)
}

func (b *body) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.release(err == io.EOF)
		if err != io.EOF && b.ctx.Err() != nil {
			// Cut because the request ended (its client went away): the
			// read's deadline error would say the backend failed, as
			// the head's does not either (RoundTrip).
			err = b.ctx.Err()
		}
	}
	return n, err
}

func (b *body) Close() error {
	if !b.done {
		b.release(false)
	}
	return nil
}

// WhenPaused has f flushed each time a read of the body finds none of it
// there and is to wait for the backend (proxy.Pauser); nil stops it. A
// body read to its end or closed stops it itself.
func (b *body) WhenPaused(f interface{ Flush() }) {
	if !b.done && b.c.sock != nil {
		b.c.sock.paused = f
	}
}

func (b *body) release(whole bool) {
	b.done = true
	b.c.answering(0)
	if b.c.sock != nil {
		b.c.sock.paused = nil
	}
	cancelled := b.stop != nil && !b.stop()
	if whole && b.reuse && !cancelled && b.c.br.Buffered() == 0 {
		b.c.t.put(b.c)
		return
	}
	b.c.close()
}

// chunkedBody is a request body of no known length on its way to
// Transport.chunks: however large the pieces it copies itself out in
// (proxy's lent body writes 256 KiB at a time), each chunk is at most
// maxChunk, so that it leaves from the connection's buffer in one write.
type chunkedBody struct{ io.ReadCloser }

func (b chunkedBody) WriteTo(w io.Writer) (int64, error) {
	return io.Copy(chunkWriter{w}, b.ReadCloser)
}

// chunkWriter passes writes on in pieces of at most maxChunk.
type chunkWriter struct{ w io.Writer }

func (c chunkWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), maxChunk)
		m, err := c.w.Write(p[:k])
		n += m
		if err == nil && m < k {
			err = io.ErrShortWrite
		}
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}
