package h2

import (
	"errors"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rotor-lb/rotor/proxy/h1"
)

// holdBody is how much of a response's body waits to go with its head, or
// with the next bytes: an answer that ends within it goes in one write,
// with its length.
const holdBody = 16 << 10

// holdPool holds the buffers answers hold their bodies in: a stream has
// one from its first Write until its answer is finished.
var holdPool = sync.Pool{New: func() any { return new([holdBody]byte) }}

// responseWriter is a stream's http.ResponseWriter. It answers as
// net/http's HTTP/2 server does: a Date added, a Content-Type sniffed when
// none was given, a Content-Length for an answer that ends within its
// first holdBody bytes, the fields HTTP/2 forbids and those a status
// cannot carry dropped, trailers (declared in Trailer, or named with
// http.TrailerPrefix) after the body.
type responseWriter struct {
	st     *stream
	req    *http.Request
	header http.Header

	status   int // the final status; 0 until WriteHeader
	fields   []hpack.HeaderField
	dated    bool
	typed    bool
	trailers []string // declared in the Trailer field at WriteHeader
	cl       int64    // the Content-Length given; -1: none
	written  int64
	buf      []byte          // body bytes not yet sent: in hold, once there is one
	hold     *[holdBody]byte // from holdPool, from the first Write to the end
	head     bool            // a HEAD request: the body is dropped
	noBody   bool            // the status carries no body
	sent     bool            // the head is written
	err      error           // the first write error: the stream is done
	done     bool
	taken    bool // header is a backend's answer's, taken by TakeHeader
	arr      [12]hpack.HeaderField
}

func (w *responseWriter) Header() http.Header {
	if w.header == nil {
		w.header = make(http.Header)
	}
	return w.header
}

// TakeHeader makes src, a backend's answer's header, the answer's own
// while it has none and its head is unwritten (h1.HeaderTaker): a proxied
// answer's fields are then not copied from map to map.
func (w *responseWriter) TakeHeader(src http.Header) bool {
	if w.status != 0 || w.done || len(w.header) != 0 {
		return false
	}
	w.header, w.taken = src, true
	return true
}

// release gives the maps of the request and of the answer it took back
// to h1.HeaderMap, once the handler has returned and the answer is
// finished: nothing holds them any longer.
func (w *responseWriter) release() {
	if w.taken {
		h1.PutHeaderMap(w.header)
	}
	h1.PutHeaderMap(w.req.Header)
	w.header, w.req.Header = nil, nil
}

func (w *responseWriter) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic("h2: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if w.status != 0 || w.done {
		return
	}
	if code < 200 {
		w.informational(code)
		return
	}
	w.status = code
	w.head = w.req.Method == http.MethodHead
	w.noBody = code == http.StatusNoContent || code == http.StatusNotModified
	fields := append(w.arr[:0], hpack.HeaderField{Name: ":status", Value: statusText(code)})
	for k, vv := range w.header {
		switch {
		case k == "Content-Length":
			if w.noBody || len(vv) == 0 {
				continue
			}
			if n, err := strconv.ParseUint(vv[0], 10, 63); err == nil {
				w.cl = int64(n)
			} else {
				continue
			}
			vv = vv[:1]
		case k == "Content-Type":
			if code == http.StatusNotModified {
				continue
			}
			w.typed = true
		case k == "Date":
			w.dated = true
		case k == "Trailer":
			for _, v := range vv {
				for name := range strings.SplitSeq(v, ",") {
					if name = http.CanonicalHeaderKey(strings.TrimSpace(name)); name != "" {
						w.trailers = append(w.trailers, name)
					}
				}
			}
		case strings.HasPrefix(k, http.TrailerPrefix):
			continue
		}
		fields = appendField(fields, k, vv)
	}
	w.fields = fields
}

// appendField appends the field k's values to fields, its name lower
// case; a field HTTP/2 forbids in an answer, a name that is not a token
// and values with line breaks or NULs are left out.
func appendField(fields []hpack.HeaderField, k string, vv []string) []hpack.HeaderField {
	name := lower(k)
	if connectionHeaders[name] || name == "te" || !httpguts.ValidHeaderFieldName(name) {
		return fields
	}
	for _, v := range vv {
		if httpguts.ValidHeaderFieldValue(v) {
			fields = append(fields, hpack.HeaderField{Name: name, Value: v})
		}
	}
	return fields
}

// informational sends a 1xx answer at once, with the header as it is.
func (w *responseWriter) informational(code int) {
	if code == http.StatusSwitchingProtocols {
		return // not in HTTP/2 (RFC 9113, 8.6)
	}
	st := w.st
	fields := []hpack.HeaderField{{Name: ":status", Value: statusText(code)}}
	for k, vv := range w.header {
		fields = appendField(fields, k, vv)
	}
	_ = st.c.write(func() error {
		if st.sentFinal || code == http.StatusContinue && st.sent100 || st.gone() {
			return nil
		}
		if code == http.StatusContinue {
			st.sent100 = true
		}
		return st.c.writeHeaders(st.id, fields, false)
	})
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	switch {
	case w.done:
		return 0, http.ErrHijacked // written after the handler returned
	case w.head:
		return len(p), nil
	case w.noBody:
		return 0, http.ErrBodyNotAllowed
	case w.err != nil:
		return 0, w.err
	case w.cl >= 0 && w.written+int64(len(p)) > w.cl:
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if w.hold == nil && len(p) <= holdBody {
		w.hold = holdPool.Get().(*[holdBody]byte)
		w.buf = w.hold[:0]
	}
	if len(w.buf)+len(p) <= holdBody {
		w.buf = append(w.buf, p...)
		return len(p), nil
	}
	if len(w.buf) > 0 {
		if err := w.send(w.buf, false); err != nil {
			return 0, err
		}
		w.buf = w.buf[:0]
	}
	if len(p) <= holdBody {
		w.buf = append(w.buf, p...)
		return len(p), nil
	}
	if err := w.send(p, false); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (w *responseWriter) Flush() { _ = w.FlushError() }

// FlushError sends the head, if not yet sent, and the body written so
// far (http.ResponseController).
func (w *responseWriter) FlushError() error {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil || w.done {
		return w.err
	}
	err := w.send(w.buf, false)
	w.buf = w.buf[:0]
	return err
}

// SetReadDeadline bounds the request body's reads
// (http.ResponseController).
func (w *responseWriter) SetReadDeadline(t time.Time) error {
	w.st.setReadDeadline(t)
	return nil
}

// EnableFullDuplex: an HTTP/2 stream is always both ways at once.
func (w *responseWriter) EnableFullDuplex() error { return nil }

// send writes the head, if not yet written, and data as DATA frames as
// the windows allow; end ends the stream, after the trailers if there
// are any. Each turn of the windows is one write: a whole small answer
// goes out at once.
func (w *responseWriter) send(data []byte, end bool) error {
	st, c := w.st, w.st.c
	var trailers []hpack.HeaderField
	if end {
		trailers = w.trailerFields()
	}
	for {
		chunk := data
		if len(data) > 0 {
			n, err := st.reserve(len(data), false)
			if n == 0 && err == nil {
				// The client's window is shut: the head goes on
				// its own, not held for it.
				if !w.sent {
					if err := w.send(nil, false); err != nil {
						return err
					}
				}
				n, err = st.reserve(len(data), true)
			}
			if err != nil {
				w.err = err
				return err
			}
			chunk, data = data[:n], data[n:]
		}
		last := end && len(data) == 0
		head := w.headFields(chunk, last)
		gone := false
		err := c.writeThen(func() error {
			// A reset stream gets nothing more (its RST_STREAM is
			// written under this lock too). A last write marks the
			// stream ended before its frames go (they are flushed
			// after): the client cannot see it closed before this
			// server has it so.
			c.mu.Lock()
			gone = st.err != nil
			if last && !gone {
				st.localDone = true
			}
			c.mu.Unlock()
			if gone {
				return nil
			}
			if head != nil {
				st.sentFinal = true
				if err := c.writeHeaders(st.id, head, last && len(chunk) == 0 && len(trailers) == 0); err != nil {
					return err
				}
				if len(chunk) == 0 && last && len(trailers) == 0 {
					return nil
				}
			}
			maxFrame := int(c.maxFrame.Load())
			for {
				frame := chunk[:min(len(chunk), maxFrame)]
				chunk = chunk[len(frame):]
				endData := last && len(chunk) == 0 && len(trailers) == 0
				if len(frame) > 0 || endData {
					if err := c.wfr.WriteData(st.id, endData, frame); err != nil {
						return err
					}
				}
				if len(chunk) == 0 {
					break
				}
			}
			if last && len(trailers) > 0 {
				return c.writeHeaders(st.id, trailers, true)
			}
			return nil
		}, true)
		switch {
		case err != nil:
			w.err = err
			return err
		case gone:
			w.err = errStreamGone
			return w.err
		case len(data) == 0:
			return nil
		}
	}
}

var errStreamGone = errors.New("h2: stream closed")

// headFields is the head to write before body, nil once written: the
// fields of WriteHeader, and Date, a sniffed Content-Type and, for an
// answer that ends with body, its Content-Length.
func (w *responseWriter) headFields(body []byte, last bool) []hpack.HeaderField {
	if w.sent {
		return nil
	}
	w.sent = true
	fields := w.fields
	if !w.dated {
		fields = append(fields, hpack.HeaderField{Name: "date", Value: date()})
	}
	if !w.noBody && !w.typed && len(body) > 0 {
		fields = append(fields, hpack.HeaderField{Name: "content-type", Value: http.DetectContentType(body)})
	}
	if last && w.cl < 0 && !w.noBody && !w.head && len(w.trailers) == 0 {
		fields = append(fields, hpack.HeaderField{Name: "content-length", Value: strconv.FormatInt(w.written, 10)})
	}
	return fields
}

// trailerFields are the trailers to send after the body: the declared
// fields' values now, and those named with http.TrailerPrefix.
func (w *responseWriter) trailerFields() []hpack.HeaderField {
	var fields []hpack.HeaderField
	add := func(k string, vv []string) {
		if httpguts.ValidTrailerHeader(k) {
			fields = appendField(fields, k, vv)
		}
	}
	for _, k := range w.trailers {
		add(k, w.header[k])
	}
	for k, vv := range w.header {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			add(http.CanonicalHeaderKey(name), vv)
		}
	}
	return fields
}

// finish ends the response when the handler returns: what is held goes
// out with the stream's end; an answer cut short (a panic, a failed
// write, fewer bytes than its Content-Length) is reset instead, so that
// the client cannot take it for whole.
func (w *responseWriter) finish(cut bool) {
	st, c := w.st, w.st.c
	if !cut && w.err == nil {
		if w.status == 0 {
			w.WriteHeader(http.StatusOK)
		}
		if w.cl >= 0 && w.written < w.cl && !w.head && !w.noBody {
			cut = true
		} else if err := w.send(w.buf, true); err != nil {
			cut = true
		}
	} else {
		cut = true
	}
	w.done = true
	w.buf = nil
	if w.hold != nil {
		holdPool.Put(w.hold)
		w.hold = nil
	}
	c.mu.Lock()
	st.handlerDone = true
	if c.running.Add(-1) == 0 {
		c.refused = 0
	}
	code, reset := http2.ErrCodeNo, false
	switch {
	case st.err != nil:
	case cut:
		// net/http's server resets an aborted stream the same way.
		code, reset = http2.ErrCodeInternal, true
		st.resetLocked(errRefused)
	case !st.remoteDone:
		// The answer is whole and the request's body is not: the client
		// may stop sending it (RFC 9113, 8.1).
		reset = true
		st.resetLocked(errBodyClosed)
	}
	if st.remoteDone || st.err != nil {
		c.removeLocked(st)
	}
	c.unlockGrant()
	st.endContext()
	if reset {
		_ = c.write(func() error { return c.wfr.WriteRSTStream(st.id, code) })
	}
}

// handlerTask is a stream's request, for a worker to serve.
type handlerTask struct {
	w   *responseWriter
	req *http.Request
}

// spareLinger is how long a connection keeps its spare workers once no
// stream runs: long enough for a client's next request or next burst,
// short enough that a connection left idle soon holds none.
const spareLinger = 250 * time.Millisecond

// startHandler serves a new stream's request on a goroutine of its own:
// one of the connection's spare workers when one waits, else a new one.
//
// A new goroutine starts with a stack of a few KiB, which grew as the
// request went down through rotor, each growth a copy of the stack frame
// by frame, and which was given back when the goroutine ended. A worker
// grows its stack once (growStack) and serves the connection's next
// streams: the copies and the stack allocations were a tenth of an
// HTTP/2 request's CPU on two cores. Spare workers end spareLinger after
// the connection's last stream, so that an idle connection holds none.
func (c *conn) startHandler(w *responseWriter, req *http.Request) {
	c.handlers.Add(1)
	c.mu.Lock()
	if n := len(c.spare); n > 0 {
		ch := c.spare[n-1]
		c.spare[n-1] = nil
		c.spare = c.spare[:n-1]
		c.mu.Unlock()
		ch <- handlerTask{w, req}
		return
	}
	c.mu.Unlock()
	go c.work(handlerTask{w, req})
}

// work serves t, then waits as a spare for the next stream's request
// until the zero task ends it.
func (c *conn) work(t handlerTask) {
	growStack(0)
	var ch chan handlerTask
	for {
		c.runHandler(t.w, t.req)
		c.mu.Lock()
		if c.closing {
			c.mu.Unlock()
			return
		}
		if c.running.Load() == 0 {
			// The last stream ended: the spares, this one or those
			// before it, go after the linger.
			c.armSpareLocked()
		}
		if len(c.spare) >= int(c.s.maxStreams()) {
			c.mu.Unlock()
			return
		}
		if ch == nil {
			ch = make(chan handlerTask, 1)
		}
		c.spare = append(c.spare, ch)
		c.mu.Unlock()
		if t = <-ch; t.w == nil {
			return
		}
	}
}

// armSpareLocked starts the spare workers' linger: no stream runs.
func (c *conn) armSpareLocked() {
	if c.spareTimer == nil {
		c.spareTimer = time.AfterFunc(spareLinger, c.onSpareIdle)
		return
	}
	c.spareTimer.Reset(spareLinger)
}

// onSpareIdle ends the spare workers of a connection whose streams have
// all ended; one that has streams again keeps them, and is armed again
// when those end.
func (c *conn) onSpareIdle() {
	c.mu.Lock()
	if c.running.Load() == 0 {
		c.releaseSpareLocked()
	}
	c.mu.Unlock()
}

// releaseSpareLocked ends the spare workers.
func (c *conn) releaseSpareLocked() {
	for i, ch := range c.spare {
		ch <- handlerTask{} // buffered, and a spare's is empty
		c.spare[i] = nil
	}
	c.spare = c.spare[:0]
}

// growStack grows the calling goroutine's stack to 16 KiB at once, near
// its base, where the copy is of a few frames: a request then fits
// (CockroachDB's growstack does the same).
//
//go:noinline
func growStack(i int) byte {
	var b [8 << 10]byte
	b[i] = 1
	return b[(i+1)%len(b)]
}

// runHandler serves one stream's request.
func (c *conn) runHandler(w *responseWriter, req *http.Request) {
	defer c.handlers.Done()
	cut := true
	defer func() {
		if p := recover(); p != nil && p != http.ErrAbortHandler {
			buf := make([]byte, 64<<10)
			buf = buf[:runtime.Stack(buf, false)]
			c.s.logf("h2: panic serving %s: %v\n%s", c.remote, p, buf)
		}
		w.finish(cut)
		w.release()
	}()
	c.h.ServeHTTP(w, req)
	cut = false
}

// statusText is the :status value of code.
func statusText(code int) string {
	switch code {
	case 200:
		return "200"
	case 204:
		return "204"
	case 206:
		return "206"
	case 304:
		return "304"
	case 400:
		return "400"
	case 404:
		return "404"
	case 500:
		return "500"
	}
	return strconv.Itoa(code)
}

// lowerNames are the lower-case forms of common canonical header names,
// so that answering does not lower them again each time.
var lowerNames = func() map[string]string {
	m := make(map[string]string)
	for _, k := range []string{
		"Accept", "Accept-Charset", "Accept-Encoding", "Accept-Language", "Accept-Ranges",
		"Access-Control-Allow-Credentials", "Access-Control-Allow-Headers", "Access-Control-Allow-Methods",
		"Access-Control-Allow-Origin", "Access-Control-Expose-Headers", "Access-Control-Max-Age",
		"Age", "Allow", "Alt-Svc", "Authorization", "Cache-Control", "Connection", "Content-Disposition",
		"Content-Encoding", "Content-Language", "Content-Length", "Content-Location", "Content-Range",
		"Content-Security-Policy", "Content-Type", "Cookie", "Date", "Etag", "Expires", "Keep-Alive",
		"Last-Modified", "Link", "Location", "Pragma", "Proxy-Connection", "Referrer-Policy", "Retry-After",
		"Server", "Set-Cookie", "Strict-Transport-Security", "Te", "Trailer", "Transfer-Encoding",
		"Upgrade", "User-Agent", "Vary", "Via", "Www-Authenticate", "X-Content-Type-Options",
		"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Frame-Options", "X-Request-Id",
	} {
		m[k] = strings.ToLower(k)
	}
	return m
}()

func lower(k string) string {
	if v, ok := lowerNames[k]; ok {
		return v
	}
	return strings.ToLower(k)
}

// dateNow is the Date field's value for the current second.
var dateNow atomic.Pointer[dateValue]

type dateValue struct {
	sec int64
	s   string
}

func date() string {
	now := time.Now()
	if d := dateNow.Load(); d != nil && d.sec == now.Unix() {
		return d.s
	}
	d := &dateValue{sec: now.Unix(), s: now.UTC().Format(http.TimeFormat)}
	dateNow.Store(d)
	return d.s
}
