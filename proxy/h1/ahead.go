package h1

import (
	"net/http"

	"github.com/rotor-lb/rotor/proxy"
)

// ReadAhead readies b, the body of r (a request about to go on), for a
// backend. A body of no known length (chunked, or an HTTP/2 request's
// without a content-length) is read ahead (proxy.Body.ReadAhead), and
// one that ends within what is read goes on with its length, as
// nginx sends on a body it has buffered: a backend that takes no chunked
// request (WSGI servers by default, Python's http.server) reads it, and
// however many chunks it came in it leaves in one write with its head.
// r then has its ContentLength, and no Transfer-Encoding. A longer body
// goes on chunked as it comes, what was read ahead first. Either way its
// Expect is dropped: the read sent the client its 100 Continue already.
// A body that came whole with its head (in hand) is only given its
// length.
//
// A body with a length of up to proxy.MaxAhead that is not in hand (an
// HTTP/2 request's, or one net/http's server reads) is read ahead too,
// into memory, as the short way's server reads one whole before its
// request is served: kept whole, it can go again to another endpoint
// after a failed try (proxy.Body.Again), whatever listener it came by.
// Not one that asks for 100 Continue, which the backend answers.
//
// Past proxy.MaxAhead such a body is read on into a temporary file while
// buffer allows (the pool's request_buffer_bytes), as nginx buffers a
// body to a file: one that ends within it goes on with its length too.
//
// Left to stream, unread: a body whose request declares trailers (only
// a chunked body carries them), an upgrade's or a CONNECT's, any while
// bodies being read ahead hold their budget, and any when buffer is 0
// (the pool streams them: request_buffering false, as nginx's
// proxy_request_buffering off).
//
// The read comes before anything is picked, so that a slow upload holds
// no endpoint; its error is the client's body's (b.Err keeps it), and
// nothing was sent.
func ReadAhead(r *http.Request, b *proxy.Body, buffer int64) error {
	if b == nil || r.ContentLength == 0 || r.ContentLength > proxy.MaxAhead || r.Method == http.MethodConnect || r.Trailer != nil {
		return nil
	}
	if _, ok := r.Header["Upgrade"]; ok {
		return nil
	}
	if r.ContentLength > 0 {
		// One still asking for 100 Continue is left for the backend
		// to answer, as the short way's server leaves one whose body
		// came with its head (one it waited for, it read itself).
		if _, expect := r.Header["Expect"]; expect || buffer <= 0 || b.Lend().(proxy.InHand).Held() >= 0 {
			return nil
		}
		_, _, _, err := b.ReadAhead(0)
		return err
	}
	if _, ok := r.Header["Trailer"]; ok {
		return nil
	}
	if n := b.Lend().(proxy.InHand).Held(); n >= 0 {
		sendWith(r, n)
		return nil
	}
	if buffer <= 0 {
		return nil
	}
	n, whole, ok, err := b.ReadAhead(buffer)
	if !ok {
		return nil
	}
	delete(r.Header, "Expect")
	if whole {
		sendWith(r, n)
	}
	return err
}

// sendWith has r go on with a body of n bytes framed by its length.
func sendWith(r *http.Request, n int64) {
	r.ContentLength, r.TransferEncoding = n, nil
}

// AbortGone ends the handling of a request whose client went away before
// anything was written to it (proxy.StatusClientClosed): the server is
// told to abort (http.ErrAbortHandler), so that it sends nothing, where
// a handler that wrote nothing would get an empty 200 sent for it, which
// a client that only half-closed its connection would read. Call it once
// the request is recorded. Outside a server it does nothing.
func AbortGone(r *http.Request) {
	if r.Context().Err() != nil && r.Context().Value(http.ServerContextKey) != nil {
		panic(http.ErrAbortHandler)
	}
}
