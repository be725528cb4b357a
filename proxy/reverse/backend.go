package reverse

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"sync"
	"time"
)

// Bounds on what a backend's answer may make the transport hold.
const (
	// maxResponseHeader bounds a response's head, its 1xx answers
	// included: a backend that sends headers without end fails the try.
	maxResponseHeader = 1 << 20
	// max1xx bounds the informational answers before the final one.
	max1xx = 10
)

var (
	errHeaderTooLarge = errors.New("reverse: backend's response header too large")
	errToo1xx         = errors.New("reverse: too many informational responses from backend")
	errUnasked101     = errors.New("reverse: backend switched protocols unasked")
	aLongTimeAgo      = time.Unix(1, 0)
)

// Transport carries a pool's requests to its endpoints. A request that
// has no body and may be sent twice (GET, HEAD, OPTIONS, TRACE), not an
// upgrade, to an http:// endpoint, goes the short way: written and
// answered on a pooled keep-alive connection in the request's own
// goroutine, where net/http's Transport runs a reader and a writer
// goroutine per connection and hands every request and response between
// them (a quarter of the proxy's CPU on a small request). Everything else
// (bodies, 100-continue, upgrades, TLS endpoints) goes through HTTP.
//
// Both ways serialise with net/http's own code (Request.Write and
// ReadResponse), so the bytes a backend sees do not depend on the way. A
// pooled connection the backend closed while it was idle is found out when
// the next request fails on it with nothing read, and that request goes
// again on a fresh connection, as net/http's Transport does for the
// requests it may replay.
type Transport struct {
	// HTTP carries what the short way does not.
	HTTP *http.Transport

	try         time.Duration // immutable: the wait for response headers; 0 is none
	dialer      *net.Dialer   // immutable
	idleTimeout time.Duration // immutable
	maxIdle     int           // immutable: idle connections kept per endpoint

	mu     sync.Mutex
	idle   map[string][]*backendConn // guarded by mu: per host:port, oldest first
	sweep  *time.Timer               // guarded by mu: closes connections idle too long
	closed bool                      // guarded by mu
}

// NewTransport returns the transport for a pool's backends: keep-alive
// HTTP/1.1 connections, connect bounds the dial and try the wait for
// response headers. It never asks for compression itself: a client's
// Accept-Encoding reaches the backend as it came, and the answer reaches
// the client as the backend encoded it.
func NewTransport(connect, try time.Duration) *Transport {
	dialer := &net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}
	const idleTimeout, maxIdle = 90 * time.Second, 512
	return &Transport{
		HTTP: &http.Transport{
			DialContext:            dialer.DialContext,
			MaxIdleConns:           4096,
			MaxIdleConnsPerHost:    maxIdle,
			IdleConnTimeout:        idleTimeout,
			ExpectContinueTimeout:  time.Second,
			ResponseHeaderTimeout:  try,
			MaxResponseHeaderBytes: maxResponseHeader,
			DisableCompression:     true,
			// Backends get HTTP/1.1 keep-alive pools; clients may speak HTTP/2.
			ForceAttemptHTTP2: false,
		},
		try: try, dialer: dialer, idleTimeout: idleTimeout, maxIdle: maxIdle,
		idle: map[string][]*backendConn{},
	}
}

// Try returns the wait for response headers (0: none).
func (t *Transport) Try() time.Duration { return t.try }

// Close closes the idle connections of both ways, and any connection
// given back after it: the transport is being let go (a reload replaced
// it, or the server is stopping). Requests in flight finish.
func (t *Transport) Close() {
	t.mu.Lock()
	t.closed = true
	idle := t.idle
	t.idle = map[string][]*backendConn{}
	if t.sweep != nil {
		t.sweep.Stop()
	}
	t.mu.Unlock()
	for _, l := range idle {
		for _, c := range l {
			c.conn.Close()
		}
	}
	t.HTTP.CloseIdleConnections()
}

// short reports whether r may go the short way.
func short(r *http.Request) bool {
	if r.URL.Scheme != "http" || r.Body != nil && r.Body != http.NoBody || r.ContentLength != 0 {
		return false
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
	default:
		return false
	}
	_, upgrade := r.Header["Upgrade"]
	return !upgrade
}

// RoundTrip sends r and returns the backend's answer.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if !short(r) {
		return t.HTTP.RoundTrip(r)
	}
	for again := true; ; again = false {
		c, reused, err := t.get(r.Context(), r.URL.Host)
		if err != nil {
			return nil, err
		}
		resp, err := c.roundTrip(r, t.try)
		if err == nil {
			return resp, nil
		}
		// A connection the backend closed while it sat idle fails the
		// request with nothing read: go again, once, on a new one.
		if !reused || !again || c.read > 0 || r.Context().Err() != nil || isTimeout(err) {
			return nil, err
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// get takes the most recently used idle connection to host, or dials one.
func (t *Transport) get(ctx context.Context, host string) (c *backendConn, reused bool, err error) {
	t.mu.Lock()
	if l := t.idle[host]; len(l) > 0 {
		c = l[len(l)-1]
		l[len(l)-1] = nil
		t.idle[host] = l[:len(l)-1]
	}
	t.mu.Unlock()
	if c != nil {
		return c, true, nil
	}
	nc, err := t.dialer.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, false, err
	}
	c = &backendConn{t: t, host: host, conn: nc, limit: -1}
	c.br = bufio.NewReader(c)
	return c, false, nil
}

// put keeps c for the next request to its host, when there is room.
func (t *Transport) put(c *backendConn) {
	c.idleAt = time.Now()
	t.mu.Lock()
	if t.closed || len(t.idle[c.host]) >= t.maxIdle {
		t.mu.Unlock()
		c.conn.Close()
		return
	}
	t.idle[c.host] = append(t.idle[c.host], c)
	if t.sweep == nil {
		t.sweep = time.AfterFunc(t.idleTimeout, t.sweepIdle)
	}
	t.mu.Unlock()
}

// sweepIdle closes the connections idle longer than the idle timeout, and
// comes back when the next one will be.
func (t *Transport) sweepIdle() {
	now := time.Now()
	var stale []*backendConn
	t.mu.Lock()
	next := time.Duration(0)
	for host, l := range t.idle {
		i := 0
		for i < len(l) && now.Sub(l[i].idleAt) >= t.idleTimeout {
			i++
		}
		stale = append(stale, l[:i]...)
		if i == len(l) {
			delete(t.idle, host)
			continue
		}
		t.idle[host] = append(l[:0:0], l[i:]...)
		if d := t.idleTimeout - now.Sub(l[i].idleAt); next == 0 || d < next {
			next = d
		}
	}
	if next > 0 && !t.closed {
		t.sweep.Reset(next)
	} else {
		t.sweep = nil
	}
	t.mu.Unlock()
	for _, c := range stale {
		c.conn.Close()
	}
}

// backendConn is one keep-alive connection of the short way. It is used
// by one request at a time, and reads through itself so that a response's
// head is bounded.
type backendConn struct {
	t      *Transport // immutable
	host   string     // immutable
	conn   net.Conn   // immutable
	br     *bufio.Reader
	limit  int64 // bytes the head may still take; <0: no bound (the body streams)
	read   int64 // bytes read since the request was written
	idleAt time.Time
}

func (c *backendConn) Read(p []byte) (int, error) {
	if c.limit == 0 {
		return 0, errHeaderTooLarge
	}
	if c.limit > 0 && int64(len(p)) > c.limit {
		p = p[:c.limit]
	}
	n, err := c.conn.Read(p)
	c.read += int64(n)
	if c.limit > 0 {
		c.limit -= int64(n)
	}
	return n, err
}

var writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}

// roundTrip writes r and reads the answer's head; the body streams from
// the connection, which goes back to the pool when it is read to its end.
// The try bounds the write and the wait for the head; the request's
// context ends it whenever it is done. On an error c is closed.
func (c *backendConn) roundTrip(r *http.Request, try time.Duration) (*http.Response, error) {
	ctx := r.Context()
	if try > 0 {
		c.conn.SetDeadline(time.Now().Add(try))
	}
	// After the try's deadline is set, so that a cancellation always has
	// the last word.
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() { c.conn.SetDeadline(aLongTimeAgo) })
	}
	c.read, c.limit = 0, maxResponseHeader
	bw := writers.Get().(*bufio.Writer)
	bw.Reset(c.conn)
	err := r.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	writers.Put(bw)
	var resp *http.Response
	for n := 0; err == nil; n++ {
		resp, err = http.ReadResponse(c.br, r)
		if err != nil || resp.StatusCode >= 200 {
			break
		}
		switch {
		case resp.StatusCode == http.StatusSwitchingProtocols:
			err = errUnasked101
		case n == max1xx:
			err = errToo1xx
		default:
			// ReverseProxy passes 1xx answers (103 Early Hints) on.
			if trace := httptrace.ContextClientTrace(ctx); trace != nil && trace.Got1xxResponse != nil {
				err = trace.Got1xxResponse(resp.StatusCode, textproto.MIMEHeader(resp.Header))
			}
		}
	}
	if err != nil {
		if stop != nil {
			stop()
		}
		c.conn.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	c.limit = -1
	if try > 0 {
		// The body streams unbounded, as it does through net/http's
		// Transport; a cancellation meanwhile still ends it.
		c.conn.SetDeadline(time.Time{})
		if ctx.Err() != nil {
			c.conn.SetDeadline(aLongTimeAgo)
		}
	}
	resp.Body = &backendBody{ReadCloser: resp.Body, c: c, stop: stop, reuse: !resp.Close && !r.Close}
	return resp, nil
}

// backendBody gives its connection back to the pool once read to the end
// with nothing after it; closed before, it closes the connection rather
// than read the rest.
type backendBody struct {
	io.ReadCloser
	c     *backendConn
	stop  func() bool // nil: the request could not be cancelled
	reuse bool
	done  bool
}

func (b *backendBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.release(err == io.EOF)
	}
	return n, err
}

func (b *backendBody) Close() error {
	if !b.done {
		b.release(false)
	}
	return nil
}

func (b *backendBody) release(whole bool) {
	b.done = true
	cancelled := b.stop != nil && !b.stop()
	if whole && b.reuse && !cancelled && b.c.br.Buffered() == 0 {
		b.c.t.put(b.c)
		return
	}
	b.c.conn.Close()
}
