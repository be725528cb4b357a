package server

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/rotor-lb/rotor/proxy"
	"github.com/rotor-lb/rotor/proxy/h1"
)

// limits holds every client request of an http or forward listener to the
// listener's limits before the listener sees it: the size of its head
// (exactly max_header_bytes: net/http reads up to 4 KiB past its own
// limit), the size of its body (413) and the time between two reads of
// it (408). A request refused here is recorded with its reason; one
// refused later, while its body is read, is answered by the listener,
// which never charges it to an endpoint.
type limits struct {
	next      http.Handler
	listener  string
	kind      string // proxy.KindHTTP or proxy.KindForward
	maxHeader int
	obs       proxy.Observer
	// The listener's max_body_bytes and timeouts.body (in nanoseconds),
	// which a reload may change while it serves (setBodies).
	maxBody     atomic.Int64
	bodyTimeout atomic.Int64
}

// setBodies bounds the bodies of the requests that come from now on.
func (l *limits) setBodies(max int64, timeout time.Duration) {
	l.maxBody.Store(max)
	l.bodyTimeout.Store(int64(timeout))
}

func (l *limits) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 && len(r.TransferEncoding) > 0 && !h1.BodyBounded(r) {
		// RFC 9112, 6.1: after a request framed by both Content-Length and
		// Transfer-Encoding the connection must close, or a hop that
		// framed it by Content-Length would read the rest as another
		// request. Go's parser removes the Content-Length of a chunked
		// request, so the two cannot be told apart here: a chunked
		// HTTP/1 request net/http's server read closes its connection
		// after its answer. The short way reads chunked requests framed
		// once alone (both framings go to net/http's).
		w.Header().Set("Connection", "close")
	}
	bounded := l.maxHeader <= 0 || h1.HeadBounded(r)
	maxBody := l.maxBody.Load()
	switch {
	case !bounded && len(r.RequestURI) > l.maxHeader:
		l.refuse(w, r, http.StatusRequestURITooLong, "uri_too_long")
		return
	case !bounded && h1.HeadSize(r) > l.maxHeader:
		l.refuse(w, r, http.StatusRequestHeaderFieldsTooLarge, "header_too_large")
		return
	case maxBody > 0 && r.ContentLength > maxBody:
		l.refuse(w, r, http.StatusRequestEntityTooLarge, "body_too_large")
		return
	}
	// A body the short way reads is held to max_body and the body timeout
	// by its server (h1.Server's SetBodyLimits).
	if r.Body != nil && r.Body != http.NoBody && r.Method != http.MethodConnect && !h1.BodyBounded(r) {
		r.Body = proxy.LimitBody(r.Body, maxBody, time.Duration(l.bodyTimeout.Load()), http.NewResponseController(w).SetReadDeadline)
	}
	l.next.ServeHTTP(w, r)
}

func (l *limits) refuse(w http.ResponseWriter, r *http.Request, status int, reason string) {
	// Not a byte of the body will be read: the server's drain of it must
	// not wait for a client that may never send it.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	w.Header().Set("Connection", "close")
	http.Error(w, http.StatusText(status), status)
	kind := l.kind
	if r.Method == http.MethodConnect {
		kind = proxy.KindConnect
	}
	l.obs.Served(&proxy.Record{
		Listener: l.listener, Kind: kind, Status: status, Reason: reason, Method: r.Method, Host: r.Host,
		Path: r.URL.Path, Proto: r.Proto, Client: r.RemoteAddr, Start: time.Now(),
	})
}
