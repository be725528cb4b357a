package proxy

import (
	"bytes"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
)

// MaxAhead is the longest request body of no known length that is read
// whole before its request goes on (ReadAhead), as long as the longest
// body with a length the short way's server reads whole first.
const MaxAhead = 64 << 10

// aheadBudget bounds the bytes requests hold at once of bodies being read
// ahead; past it a body goes on as it comes, as before there was any.
var aheadBudget int64 = 64 << 20 // tests set it lower

var (
	aheadHeld    atomic.Int64
	aheadBuffers = sync.Pool{New: func() any { return new([MaxAhead + 1]byte) }}
)

// ReadAhead readies b, the body of r (a request about to go on), for a
// backend. A body of no known length (chunked, or an HTTP/2 request's
// without a content-length) is read ahead, and one that ends within
// MaxAhead bytes goes on with its length, as nginx sends on a body it has
// buffered: a backend that takes no chunked request (WSGI servers by
// default, Python's http.server) reads it, and however many chunks it
// came in it leaves in one write with its head. r then has its
// ContentLength, and no Transfer-Encoding. A longer body goes on chunked
// as it comes, what was read ahead first. Either way its Expect is
// dropped: the read sent the client its 100 Continue already. A body
// that came whole with its head (InHand) is only given its length.
//
// Left to stream, unread: a body whose request declares trailers (only
// a chunked body carries them), an upgrade's or a CONNECT's, and any
// while bodies being read ahead hold aheadBudget bytes.
//
// The read is the client's: bounded by the listener's body timeout and
// maximum as every read of the body is, before anything is picked, so
// that a slow upload holds no endpoint. An error is the client's body's
// (b.Err keeps it), and nothing was sent.
func ReadAhead(r *http.Request, b *Body) error {
	if b == nil || r.ContentLength >= 0 || r.Method == http.MethodConnect || r.Trailer != nil {
		return nil
	}
	if _, ok := r.Header["Upgrade"]; ok {
		return nil
	}
	if _, ok := r.Header["Trailer"]; ok {
		return nil
	}
	if h, ok := b.rc.(InHand); ok {
		if n := h.Held(); n >= 0 {
			sendWith(r, n)
			return nil
		}
	}
	const size = MaxAhead + 1 // one byte more tells the body goes on
	if aheadHeld.Add(size) > aheadBudget {
		aheadHeld.Add(-size)
		return nil
	}
	defer aheadHeld.Add(-size)
	buf := aheadBuffers.Get().(*[size]byte)
	defer aheadBuffers.Put(buf)
	n := 0
	var err error
	for n < size && err == nil {
		var k int
		k, err = b.read(buf[n:])
		n += k
	}
	delete(r.Header, "Expect")
	// A copy of its own: a transport may still read the body after its
	// request has ended, and the buffer is another's by then.
	b.ahead = bytes.Clone(buf[:n])
	switch {
	case err == io.EOF:
		b.whole = true
		sendWith(r, int64(n))
	case err != nil:
		return err
	}
	return nil
}

// sendWith has r go on with a body of n bytes framed by its length.
func sendWith(r *http.Request, n int64) {
	r.ContentLength, r.TransferEncoding = n, nil
}
