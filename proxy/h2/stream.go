package h2

import (
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rotor-lb/rotor/proxy/h1"
)

// stream is one request and its response. Fields under "c.mu" are the
// connection's mu's; sentFinal and sent100 are written under its wmu.
type stream struct {
	c    *conn
	id   uint32
	ctx  streamContext // the request's, once its handler is started
	cond sync.Cond     // on c.mu: body bytes, window, reset, deadline

	// under c.mu
	sendWindow   int64 // what this stream's DATA may still fill
	recvWindow   int64 // what the client may still send on it
	buf          []byte
	off          int   // buf[off:] is unread
	bodyErr      error // io.EOF once the client ended the stream
	remoteDone   bool  // END_STREAM received
	localDone    bool  // END_STREAM written (or about to be, in the buffer)
	err          error // reset, by either side, or the connection ended
	handlerDone  bool
	declared     int64 // the request's Content-Length; -1: none
	received     int64
	unacked      int64 // body bytes read and not yet granted again
	trailer      http.Header
	readBy       time.Time // the body's read deadline
	readTimer    *time.Timer
	waitExpired  bool // a wait for window made no progress for the idle timeout
	wantContinue bool // Expect: 100-continue, no 100 sent yet

	// under c.wmu
	sentFinal bool // the final HEADERS are written
	sent100   bool

	w responseWriter // the answer: made with the stream, in one allocation
}

// onHeaders opens a stream, or ends one with its trailers.
func (c *conn) onHeaders(f *headerBlock) error {
	id := f.streamID
	if id%2 == 0 {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	c.mu.Lock()
	if st := c.streams[id]; st != nil {
		err := c.onTrailersLocked(st, f)
		c.mu.Unlock()
		return err
	}
	if id <= c.maxID {
		reset := c.resets.has(id)
		c.mu.Unlock()
		if reset {
			return nil // trailers sent before the client saw our reset
		}
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	c.maxID = id
	if f.selfDepend {
		c.mu.Unlock()
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol} // depends on itself
	}
	if c.goingAway {
		c.mu.Unlock()
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeRefusedStream}
	}
	if max := int(c.s.maxStreams()); int(c.running.Load()) >= max {
		// Only streams the client reset, whose handlers have not yet
		// returned, can bring this about: it sees fewer open streams
		// than run. A client that keeps at it is sent away.
		c.refused++
		refused := c.refused
		c.mu.Unlock()
		if refused > 4*max+100 {
			return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
		}
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeRefusedStream}
	}
	c.mu.Unlock()
	if f.truncated {
		return c.refuseHead(id, f.ended)
	}
	st := &stream{c: c, id: id, declared: -1}
	st.cond.L = &c.mu
	req, err := c.newRequest(st, f)
	if err != nil {
		return err
	}
	w := &st.w
	w.st, w.req, w.cl = st, req, -1
	c.mu.Lock()
	st.sendWindow = c.initWindow
	st.recvWindow = streamWindow
	st.remoteDone = f.ended
	c.streams[id] = st
	c.running.Add(1)
	if c.idleTimer != nil {
		c.idleTimer.Stop()
	}
	c.mu.Unlock()
	c.startHandler(w, req)
	return nil
}

// onTrailersLocked takes a second HEADERS on an open stream: the
// request's trailers, which must end it.
func (c *conn) onTrailersLocked(st *stream, f *headerBlock) error {
	if st.remoteDone && st.localDone {
		// Closed both ways, its handler not yet returned (RFC 9113,
		// 5.1: closed).
		return http2.ConnectionError(http2.ErrCodeStreamClosed)
	}
	if st.remoteDone || st.err != nil {
		return http2.StreamError{StreamID: st.id, Code: http2.ErrCodeStreamClosed}
	}
	if !f.ended || len(f.pseudoFields()) > 0 || f.truncated {
		return http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
	}
	for _, hf := range f.regularFields() {
		key := http.CanonicalHeaderKey(hf.Name)
		if !httpguts.ValidTrailerHeader(key) {
			return http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
		}
		if st.trailer != nil {
			st.trailer[key] = append(st.trailer[key], hf.Value)
		}
	}
	return c.endRemoteLocked(st)
}

// endRemoteLocked ends the request's body: the client sent END_STREAM.
func (c *conn) endRemoteLocked(st *stream) error {
	if st.declared >= 0 && st.received != st.declared {
		return http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
	}
	st.remoteDone = true
	if st.bodyErr == nil {
		st.bodyErr = io.EOF
	}
	st.cond.Broadcast()
	if st.handlerDone {
		c.removeLocked(st)
	}
	return nil
}

// refuseHead answers a request whose header list is past the limit with
// 431, without a handler, as net/http does; the body, if one follows, is
// not wanted.
func (c *conn) refuseHead(id uint32, ended bool) error {
	if !ended {
		c.mu.Lock()
		c.rememberResetLocked(id)
		c.mu.Unlock()
	}
	return c.write(func() error {
		fields := []hpack.HeaderField{{Name: ":status", Value: "431"}, {Name: "content-length", Value: "0"}}
		if err := c.writeHeaders(id, fields, true); err != nil {
			return err
		}
		if !ended {
			return c.wfr.WriteRSTStream(id, http2.ErrCodeNo)
		}
		return nil
	})
}

// connectionHeaders are the fields HTTP/2 forbids (RFC 9113, 8.2.2).
var connectionHeaders = map[string]bool{
	"connection": true, "proxy-connection": true, "keep-alive": true,
	"transfer-encoding": true, "upgrade": true,
}

// newRequest builds the stream's request from its header block. A
// malformed one is a stream error (RFC 9113, 8.1.1).
func (c *conn) newRequest(st *stream, f *headerBlock) (*http.Request, error) {
	bad := http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
	var method, scheme, authority, path string
	for _, hf := range f.pseudoFields() {
		switch hf.Name {
		case ":method":
			method = hf.Value
		case ":scheme":
			scheme = hf.Value
		case ":authority":
			authority = hf.Value
		case ":path":
			path = hf.Value
		default:
			return nil, bad // :protocol (not offered), :status, anything else
		}
	}
	if method == "" || !httpguts.ValidHostHeader(authority) {
		return nil, bad
	}
	if !validMethod(method) {
		return nil, bad
	}
	isConnect := method == http.MethodConnect
	if isConnect {
		if scheme != "" || path != "" || authority == "" {
			return nil, bad
		}
	} else if scheme == "" || path == "" {
		return nil, bad
	}
	regular := f.regularFields()
	header := h1.HeaderMap(len(regular)) // given back once answered (release)
	// One array holds a value of every name, each name's slice a
	// piece of it capped at its end (net/textproto does the same): a
	// name's second value goes to a slice of its own.
	values := make([]string, len(regular))
	var cookies []string
	for i, hf := range regular {
		if connectionHeaders[hf.Name] || hf.Name == "te" && hf.Value != "trailers" {
			return nil, bad
		}
		if hf.Name == "cookie" {
			cookies = append(cookies, hf.Value)
			continue
		}
		key := textproto.CanonicalMIMEHeaderKey(hf.Name)
		if vv, ok := header[key]; ok {
			header[key] = append(vv, hf.Value)
			continue
		}
		values[i] = hf.Value
		header[key] = values[i : i+1 : i+1]
	}
	if len(cookies) > 0 {
		header["Cookie"] = []string{strings.Join(cookies, "; ")}
	}
	if authority == "" {
		authority = header.Get("Host")
	}

	req := &http.Request{ // on the stack: WithContext copies it out
		Method:     method,
		Proto:      "HTTP/2.0",
		ProtoMajor: 2,
		Header:     header,
		Host:       authority,
		RemoteAddr: c.remote,
		TLS:        c.tls,
	}
	switch {
	case isConnect:
		req.URL = &url.URL{Host: authority}
		req.RequestURI = authority
	case method == http.MethodOptions && path == "*":
		req.URL = &url.URL{Path: "*"}
		req.RequestURI = "*"
	default:
		u, err := url.ParseRequestURI(path)
		if err != nil {
			return nil, bad
		}
		req.URL = u
		req.RequestURI = path
	}

	if vv := header["Content-Length"]; len(vv) > 0 {
		n, err := strconv.ParseUint(vv[0], 10, 63)
		if err != nil {
			return nil, bad
		}
		for _, v := range vv[1:] {
			if v != vv[0] {
				return nil, bad
			}
		}
		st.declared = int64(n)
	}
	if f.ended {
		if st.declared > 0 {
			return nil, bad
		}
		req.Body = http.NoBody
		return c.withContext(st, req), nil
	}
	req.ContentLength = st.declared
	if names := header["Trailer"]; len(names) > 0 {
		req.Trailer = make(http.Header)
		for _, v := range names {
			for name := range strings.SplitSeq(v, ",") {
				name = http.CanonicalHeaderKey(textproto.TrimString(name))
				if name != "" && httpguts.ValidTrailerHeader(name) {
					req.Trailer[name] = nil
				}
			}
		}
		st.trailer = req.Trailer
	}
	if v := header["Expect"]; len(v) == 1 && strings.EqualFold(v[0], "100-continue") {
		// Answered here, as net/http's servers do: 100 Continue on the
		// body's first read.
		st.wantContinue = true
		delete(header, "Expect")
	}
	req.Body = &requestBody{st: st}
	return c.withContext(st, req), nil
}

// withContext gives the stream its context, which its reset or the
// connection's end cancels (endContext), and returns req with it.
func (c *conn) withContext(st *stream, req *http.Request) *http.Request {
	st.ctx.values = c.ctx
	return req.WithContext(&st.ctx)
}

// endContext ends the request's context, and then cuts its backend
// exchange, if one runs.
func (st *stream) endContext() { st.ctx.end() }

func validMethod(m string) bool {
	for i := 0; i < len(m); i++ {
		if !httpguts.IsTokenRune(rune(m[i])) {
			return false
		}
	}
	return m != ""
}

// onData takes a DATA frame: the connection's and the stream's windows
// pay for all of it, padding included, and its data waits in the
// stream's buffer for the handler.
func (c *conn) onData(f *http2.DataFrame) error {
	id := f.StreamID
	n := int64(f.Length)
	data := f.Data()
	c.mu.Lock()
	if id > c.maxID {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream
	}
	if n > c.recvWindow {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	c.recvWindow -= n
	st := c.streams[id]
	if st == nil || st.err != nil || st.remoteDone {
		// No one will read these bytes: the connection's window has
		// them back at once.
		c.unacked += n
		// Closed for the client: it ended or reset the stream. One this
		// server reset may still have DATA on the way: dropped.
		closed := st == nil && !c.resets.has(id) || st != nil && (st.remoteDone || st.err == errReset)
		c.unlockGrant()
		if closed {
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
		}
		return nil
	}
	if n > st.recvWindow {
		c.unacked += n
		c.unlockGrant()
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeFlowControl}
	}
	st.recvWindow -= n
	st.received += int64(len(data))
	if st.declared >= 0 && st.received > st.declared {
		c.unacked += n
		c.unlockGrant()
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	if st.bodyErr == errBodyClosed {
		// The handler gave up the body: what comes of it is dropped, and
		// the connection's window has it back.
		c.unacked += n
		var err error
		if f.StreamEnded() {
			err = c.endRemoteLocked(st)
		}
		c.unlockGrant()
		return err
	}
	if pad := n - int64(len(data)); pad > 0 {
		st.unacked += pad
		c.unacked += pad
	}
	if len(data) > 0 {
		if st.off > 0 && len(st.buf)+len(data) > cap(st.buf) {
			st.buf = st.buf[:copy(st.buf, st.buf[st.off:])]
			st.off = 0
		}
		st.buf = append(st.buf, data...)
		st.cond.Broadcast()
	}
	var err error
	if f.StreamEnded() {
		err = c.endRemoteLocked(st)
	}
	c.unlockGrant()
	return err
}

// unlockGrant unlocks c.mu and, when enough of the connection's window
// has come back, grants it to the client again.
func (c *conn) unlockGrant() {
	var incr int64
	if c.unacked >= connWindow/4 && !c.closing {
		incr = c.unacked
		c.unacked = 0
		c.recvWindow += incr
	}
	c.mu.Unlock()
	if incr > 0 {
		_ = c.write(func() error { return c.wfr.WriteWindowUpdate(0, uint32(incr)) })
	}
}

// resetLocked ends the stream for err: its handler's context is
// cancelled, its body and its writes fail, and its unread body goes back
// to the connection's window.
func (st *stream) resetLocked(err error) {
	if st.err != nil {
		return
	}
	st.err = err
	if st.bodyErr == nil || st.bodyErr == io.EOF && len(st.buf) > st.off {
		st.bodyErr = err
	}
	st.dropBodyLocked()
	if st.ctx.values != nil {
		st.endContext()
	}
	st.cond.Broadcast()
	if st.handlerDone {
		st.c.removeLocked(st)
	}
}

// dropBodyLocked lets go of the body bytes no one will read: the
// connection's window has them back.
func (st *stream) dropBodyLocked() {
	st.c.unacked += int64(len(st.buf) - st.off)
	st.buf, st.off = nil, 0
}

// removeLocked forgets an ended stream; the connection left without
// streams starts its idle timer, or closes if going away (once its
// GOAWAY is written: startGoAway closes it then if no stream is left).
func (c *conn) removeLocked(st *stream) {
	if c.streams[st.id] != st {
		return
	}
	delete(c.streams, st.id)
	if st.err != nil && st.err != errReset && st.err != errConnClosed {
		c.rememberResetLocked(st.id) // reset by this server (RST_STREAM)
	}
	st.dropBodyLocked()
	if st.readTimer != nil {
		st.readTimer.Stop()
	}
	if len(c.streams) == 0 && !c.closing {
		switch {
		case c.closeIdle:
			c.closeLocked()
		case !c.goingAway:
			c.armIdleLocked()
		}
	}
}

// requestBody is a request's body: the stream's buffer, which the
// connection's reading goroutine fills.
type requestBody struct{ st *stream }

func (b *requestBody) Read(p []byte) (int, error) {
	st := b.st
	c := st.c
	if len(p) == 0 {
		return 0, nil
	}
	c.mu.Lock()
	if st.wantContinue {
		st.wantContinue = false
		c.mu.Unlock()
		st.send100()
		c.mu.Lock()
	}
	for st.off == len(st.buf) && st.bodyErr == nil {
		if !st.readBy.IsZero() && !time.Now().Before(st.readBy) {
			c.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		}
		st.cond.Wait()
	}
	if st.off == len(st.buf) {
		err := st.bodyErr
		c.mu.Unlock()
		return 0, err
	}
	n := copy(p, st.buf[st.off:])
	st.off += n
	if st.off == len(st.buf) {
		st.buf, st.off = st.buf[:0], 0
	}
	st.unacked += int64(n)
	c.unacked += int64(n)
	var incr int64
	if st.unacked >= streamWindow/4 && !st.remoteDone && st.err == nil {
		incr = st.unacked
		st.unacked = 0
		st.recvWindow += incr
	}
	c.unlockGrant()
	if incr > 0 {
		_ = c.write(func() error { return c.wfr.WriteWindowUpdate(st.id, uint32(incr)) })
	}
	return n, nil
}

// Close gives up the rest of the body; the stream's end (handler
// returned) tells the client to stop sending it.
func (b *requestBody) Close() error {
	st := b.st
	st.c.mu.Lock()
	if st.bodyErr == nil {
		st.bodyErr = errBodyClosed
	}
	st.dropBodyLocked()
	st.cond.Broadcast()
	st.c.unlockGrant()
	return nil
}

var errBodyClosed = errors.New("h2: request body closed")

// setReadDeadline bounds the body's reads (an http.ResponseController's
// SetReadDeadline; the zero time: no bound).
func (st *stream) setReadDeadline(t time.Time) {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	st.readBy = t
	if st.readTimer != nil {
		st.readTimer.Stop()
	}
	if t.IsZero() {
		return
	}
	d := time.Until(t)
	if d <= 0 {
		st.cond.Broadcast()
		return
	}
	st.readTimer = time.AfterFunc(d, func() {
		c.mu.Lock()
		st.cond.Broadcast()
		c.mu.Unlock()
	})
}

// reserve waits until the stream may send DATA and takes up to want bytes
// of its window and the connection's. A wait that sees no window for the
// idle timeout fails, as does a reset stream.
func (st *stream) reserve(want int, wait bool) (int, error) {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if st.err != nil {
			return 0, st.err
		}
		if avail := min(st.sendWindow, c.sendWindow, int64(want)); avail > 0 {
			st.sendWindow -= avail
			c.sendWindow -= avail
			return int(avail), nil
		}
		if !wait {
			return 0, nil
		}
		if st.waitExpired {
			return 0, errWindowTimeout
		}
		if timer == nil {
			timer = time.AfterFunc(c.idle, func() {
				c.mu.Lock()
				st.waitExpired = true
				st.cond.Broadcast()
				c.mu.Unlock()
			})
		}
		st.cond.Wait()
	}
}

var errWindowTimeout = errors.New("h2: the client's flow-control window stayed shut")

// send100 sends 100 Continue, unless one was sent or the final answer
// has begun.
func (st *stream) send100() {
	c := st.c
	_ = c.write(func() error {
		if st.sentFinal || st.sent100 || st.gone() {
			return nil
		}
		st.sent100 = true
		return c.writeHeaders(st.id, []hpack.HeaderField{{Name: ":status", Value: "100"}}, false)
	})
}

// gone reports whether the stream was reset or its connection ended:
// nothing more is written on it. Called with c.wmu, so that a reset's
// RST_STREAM, written under it too, is the stream's last frame.
func (st *stream) gone() bool {
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	return st.err != nil
}
