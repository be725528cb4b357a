package reverse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/proxy"
	"github.com/rotor-lb/rotor/proxy/h1"
)

// forward sends r to its pool and copies the answer to w, as
// net/http/httputil's ReverseProxy does with a Rewrite (the same fields
// dropped and set on the way out and on the way back, 1xx answers, trailers,
// upgrades, immediate flushes for streams and answers of unknown length), on
// one outgoing request a try rather than a clone and two copies, with no
// header map copied twice. It reports whether the answer was cut after its
// head was sent: the caller records the request and then aborts the
// connection's answer (http.ErrAbortHandler), so that the client cannot
// take a cut body for a whole one.
func (h *Handler) forward(w *recorder, r *http.Request, info *reqInfo) (aborted bool) {
	if err := h1.ReadAhead(r, info.body, info.pool.Buffer); err != nil {
		h.errorHandler(w, r, info, err) // the client's body's: nothing was picked
		return false
	}
	if info.body.Waited() > 0 {
		// Read ahead: the tries, and the total, begin now; the upload
		// was the client's pace.
		info.served = time.Now()
	}
	header := r.Header
	if info.inPlace = h1.OutgoingInPlace(header, info.read); !info.inPlace {
		up := upgradeType(r.Header)
		if strings.EqualFold(up, "h2c") {
			// HTTP/2 over this connection, its settings in a field of
			// it (HTTP2-Settings): a backend that switched would take the
			// client's connection for its own, every later request with
			// it. Not passed on, as nginx and Envoy do not: the request
			// is served as HTTP/1.1, which the client goes on with (RFC
			// 9113 drops the upgrade; HTTP/2 without TLS is spoken here
			// with prior knowledge).
			up = ""
		}
		if !printable(up) {
			h.errorHandler(w, r, info, fmt.Errorf("client tried to switch to invalid protocol %q", up))
			return false
		}
		header = outHeader(r.Header, up, info.header)
		info.header = header
	}
	h.rewrite(r, header, info.trusted, &info.forwarded)

	// The request's context, the total's when it can bind before the tries
	// do, and a trace passing 1xx answers on.
	ctx, cancel := r.Context(), context.CancelFunc(nil)
	pool := info.pool
	if pool.Total > 0 && time.Duration(max(pool.Attempts, 1))*pool.Transport.Try() > pool.Total {
		// Cancelled by a timer stopped once headers arrive, not a
		// deadline, so that a streaming body is not cut by it.
		ctx, cancel = context.WithCancel(ctx)
		info.total = time.AfterFunc(pool.Total, cancel)
	}
	// The trace (info.trace, passing 1xx answers on) goes to the
	// transport with the request, not in a context of its own
	// (RoundTripTraced).
	out := &info.out
	if cancel != nil {
		out = r.WithContext(ctx)
	} else {
		*out = *r
	}
	out.Header, out.Close, out.Body = header, false, nil
	if info.body != nil {
		out.Body = info.body.Lend()
	}
	info.query = cleanQuery(r.URL.RawQuery)

	res, err := h.roundTrip(out, info, cancel)
	// The endpoint counts the request in flight until its answer has
	// been passed on, however it ends (an upgrade's relay takes the
	// count over).
	defer info.flight.End()
	info.mu.Lock()
	info.answered = true
	info.mu.Unlock()
	if err != nil {
		h.errorHandler(w, r, info, err)
		return false
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		h.setCookie(res, info)
		h.switchProtocols(w, r, res, info)
		return false
	}
	h1.RemoveHopByHopOf(res)
	h.setCookie(res, info)
	h1.PassAnswer(w, res)
	dst := w.Header()
	// The answer's Trailer field was dropped with the hop-by-hop ones: the
	// trailers the backend announced are announced again.
	announced := len(res.Trailer)
	if announced > 0 {
		names := make([]string, 0, announced)
		for k := range res.Trailer {
			names = append(names, k)
		}
		slices.Sort(names)
		dst.Add("Trailer", strings.Join(names, ", "))
	}
	w.WriteHeader(res.StatusCode)

	rerr, werr := copyBody(w, res.Body, flushesAtOnce(res))
	if rerr != nil || werr != nil {
		res.Body.Close()
		info.kind, info.reason = health.NoError, proxy.CutReason(rerr)
		if rerr != nil {
			h.log.Debug("answer cut", "listener", h.name, "path", r.URL.Path, "error", rerr)
		}
		// Only a server recovers the abort; anywhere else the cut answer
		// stands as it is.
		return r.Context().Value(http.ServerContextKey) != nil
	}
	res.Body.Close() // now, so that res.Trailer is filled
	if len(res.Trailer) > 0 {
		// Chunked, so that trailers can follow: a short body would
		// otherwise be sent with its length.
		w.Flush()
	}
	if len(res.Trailer) == announced {
		h1.CopyHeader(dst, res.Trailer)
		return false
	}
	for k, vv := range res.Trailer {
		for _, v := range vv {
			dst.Add(http.TrailerPrefix+k, v)
		}
	}
	return false
}

// got1xx passes an informational answer (103 Early Hints, say) on to the
// client while the final one is awaited; once RoundTrip has returned the
// response writer is the final answer's, and a late one is dropped.
func (info *reqInfo) got1xx(code int, header textproto.MIMEHeader) error {
	info.mu.Lock()
	defer info.mu.Unlock()
	if info.answered || code == http.StatusContinue && info.continued {
		return nil
	}
	h := info.rec.Header()
	h1.CopyHeader(h, http.Header(header))
	info.rec.WriteHeader(code)
	clear(h) // WriteHeader keeps a 1xx's fields for the next answer
	return nil
}

// got100 passes a backend's 100 Continue on as soon as it comes: net/http's
// Transport calls it before it starts sending the body, and Got1xxResponse
// only after, by when the body's first read may have made the server send
// a 100 Continue of its own, and the client would get two. The 100's
// fields, if it had any, are not passed on.
func (info *reqInfo) got100() {
	info.mu.Lock()
	defer info.mu.Unlock()
	if info.answered || info.continued {
		return
	}
	info.continued = true
	info.rec.WriteHeader(http.StatusContinue)
}

// outHeader is the header a request goes to its backend with: the
// client's as h1.Outgoing leaves it (in into, when not nil), less the
// forwarding fields rewrite sets afresh, with "Te: trailers" kept when
// the client said it takes trailers and the upgrade asked for, if any.
// A request whose head had none of the fields it leaves out (no
// hop-by-hop one: no upgrade, no Te) goes on in its own map instead
// (h1.OutgoingInPlace).
func outHeader(in http.Header, up string, into http.Header) http.Header {
	out := h1.Outgoing(in, h1.ForwardingFields, into)
	if httpguts.HeaderValuesContainsToken(in["Te"], "trailers") {
		out["Te"] = teTrailers
	}
	if up != "" {
		out["Connection"] = connectionUpgrade
		out["Upgrade"] = []string{up}
	}
	return out
}

// Values shared by every request's header: headers sent are not changed
// in place (an Add makes a new array: each has no room to grow).
var (
	teTrailers        = []string{"trailers"}
	connectionUpgrade = []string{"Upgrade"}
)

// upgradeType is the protocol a message asks to switch to: its Upgrade,
// when its Connection names upgrade.
func upgradeType(h http.Header) string {
	if !httpguts.HeaderValuesContainsToken(h["Connection"], "upgrade") {
		return ""
	}
	return h1.Value(h, "Upgrade")
}

// printable reports whether s is printable ASCII.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// maxQueryParams is net/url's bound on a query's parameters.
const maxQueryParams = 10000

// cleanQuery drops the parameters of a query that net/url cannot parse (a
// semicolon as a separator, a broken escape), as ReverseProxy does: a
// backend that splits a query its own way must not see parameters rotor
// and the backends that parse it as Go does never saw. A query that parses
// goes as it came.
func cleanQuery(q string) string {
	if strings.Count(q, "&") >= maxQueryParams {
		return reencode(q)
	}
	for i := 0; i < len(q); i++ {
		switch q[i] {
		case ';':
			return reencode(q)
		case '%':
			if i+2 >= len(q) || !isHex(q[i+1]) || !isHex(q[i+2]) {
				return reencode(q)
			}
			i += 2
		}
	}
	return q
}

func reencode(q string) string {
	v, _ := url.ParseQuery(q)
	return v.Encode()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// flushesAtOnce reports whether an answer is passed on as it comes rather
// than as buffers fill: an event stream, or any body of unknown length.
func flushesAtOnce(res *http.Response) bool {
	if res.ContentLength == -1 {
		return true
	}
	ct := h1.Value(res.Header, "Content-Type")
	if len(ct) < len("text/event-stream") {
		return false // text/plain, text/html, application/json...
	}
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.EqualFold(strings.TrimSpace(ct), "text/event-stream")
}

// copyBody copies an answer's body to w in proxy.CopyBuffer pieces,
// flushing after each when atOnce (and the head at once, before the first
// piece comes). It returns the read error that ended it, if not the end,
// and the write error.
func copyBody(w *recorder, body io.Reader, atOnce bool) (rerr, werr error) {
	dst := io.Writer(w)
	if atOnce {
		f := &flusher{w: w, pending: true}
		// The head goes now, not with the first piece: a stream's first
		// event may be long in coming. From a timer, so that a body already
		// there goes in the same write.
		f.t = time.AfterFunc(0, f.flushHead)
		defer f.stop()
		dst = f
	}
	return proxy.CopyAnswer(dst, body)
}

// flusher flushes after every write, and once, from its timer, the head
// if no write came first.
type flusher struct {
	w       *recorder
	mu      sync.Mutex
	pending bool // the head is not flushed yet
	t       *time.Timer
}

func (f *flusher) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.w.Write(p)
	f.w.Flush()
	f.pending = false
	return n, err
}

// Window passes the recorder's on (proxy.Framer), under the lock: the
// head's flush from the timer decides the answer's framing.
func (f *flusher) Window(b []byte) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.w.Window(b)
}

func (f *flusher) flushHead() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pending {
		f.w.Flush()
		f.pending = false
	}
}

func (f *flusher) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending = false
	f.t.Stop()
}

// switchProtocols completes an upgrade the backend agreed to (101): the
// backend's answer to the client, and what either sent behind its head;
// then the two connections are w's to relay to each other (ServeHTTP,
// proxy.SpliceThen) until both directions end, an end of one passed on
// as a half-close.
func (h *Handler) switchProtocols(w *recorder, r *http.Request, res *http.Response, info *reqInfo) {
	fail := func(err error) {
		res.Body.Close()
		h.errorHandler(w, r, info, err)
	}
	want, got := upgradeType(r.Header), upgradeType(res.Header)
	if !printable(got) {
		fail(fmt.Errorf("backend tried to switch to invalid protocol %q", got))
		return
	}
	if !strings.EqualFold(want, got) {
		fail(fmt.Errorf("backend tried to switch protocol %q when %q was requested", got, want))
		return
	}
	backend, ok := res.Body.(io.ReadWriteCloser)
	if !ok {
		fail(errors.New("internal error: 101 switching protocols response with non-writable body"))
		return
	}
	client, brw, err := w.Hijack()
	if err != nil {
		if errors.Is(err, http.ErrNotSupported) {
			err = fmt.Errorf("can't switch protocols using non-Hijacker ResponseWriter type %T", w.ResponseWriter)
		}
		fail(err)
		return
	}
	relayed := false
	defer func() {
		if !relayed {
			backend.Close()
			client.Close()
		}
	}()
	if !w.session.Replace(client, backend) {
		return // the drain's cut came first
	}

	h1.CopyHeader(w.Header(), res.Header)
	res.Header, res.Body = w.Header(), nil // res.Write writes the head alone
	if err := res.Write(brw); err != nil {
		h.log.Debug("upgrade answer", "listener", h.name, "path", r.URL.Path, "error", err)
		return
	}
	// What the backend sent with its 101, then what the client sent
	// after its request, each read with a head: passed on before the
	// connections' own bytes.
	if sw, ok := backend.(*h1.Switched); ok {
		n, _ := brw.Write(sw.Buffered())
		w.upOut += int64(n)
	}
	if err := brw.Flush(); err != nil {
		h.log.Debug("upgrade answer", "listener", h.name, "path", r.URL.Path, "error", err)
		return
	}
	if n := brw.Reader.Buffered(); n > 0 {
		early, _ := brw.Reader.Peek(n)
		m, err := backend.Write(early)
		w.upIn += int64(m)
		if err != nil {
			return
		}
	}
	w.client, w.backend, relayed = client, backend, true
	w.held = info.flight.Handoff() // in flight while the relay lasts
}
