package h1

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/rotor-lb/rotor/proxy"
)

// chunkedRequest is a request with a body of no known length, read a
// byte at a time (a client's chunks as they come), that asks for 100
// Continue.
func chunkedRequest(body io.Reader) (*http.Request, *proxy.Body) {
	r, _ := http.NewRequest(http.MethodPost, "http://h.test/", nil)
	r.ContentLength, r.TransferEncoding = -1, []string{"chunked"}
	r.Header.Set("Expect", "100-continue")
	b := proxy.NewBody(io.NopCloser(iotest.OneByteReader(body)))
	r.Body = b
	return r, b
}

// A body of no known length that ends within MaxAhead goes on with its
// length and no chunked framing; a longer one stays chunked; both lose
// their Expect (the read sent the client its 100 Continue). A body in
// hand is given its length unread. One that fails fails the request
// with its error.
func TestReadAheadFramesTheRequest(t *testing.T) {
	r, b := chunkedRequest(strings.NewReader("hello, world"))
	if err := ReadAhead(r, b, proxy.MaxAhead); err != nil || r.ContentLength != 12 || r.TransferEncoding != nil || r.Header.Get("Expect") != "" {
		t.Fatalf("a short body: %v, length %d, %v, Expect %q; want its length, no chunked, no Expect", err, r.ContentLength, r.TransferEncoding, r.Header.Get("Expect"))
	}
	if got, _ := io.ReadAll(b.Lend()); string(got) != "hello, world" {
		t.Fatalf("a short body sends %q", got)
	}

	long := bytes.Repeat([]byte("y"), proxy.MaxAhead+100)
	r, b = chunkedRequest(bytes.NewReader(long))
	if err := ReadAhead(r, b, proxy.MaxAhead); err != nil || r.ContentLength != -1 || len(r.TransferEncoding) != 1 || r.Header.Get("Expect") != "" {
		t.Fatalf("a long body: %v, length %d, %v, Expect %q; want it chunked, no Expect", err, r.ContentLength, r.TransferEncoding, r.Header.Get("Expect"))
	}
	if got, _ := io.ReadAll(b.Lend()); !bytes.Equal(got, long) {
		t.Fatalf("a long body sends %d bytes, want its %d", len(got), len(long))
	}

	for _, buffer := range []int64{proxy.MaxAhead, 0} { // in hand, it waits for nothing: streamed or not
		r, _ = chunkedRequest(nil)
		b = proxy.NewBody(&wholeBody{b: []byte("hello")})
		if err := ReadAhead(r, b, buffer); err != nil || r.ContentLength != 5 || r.TransferEncoding != nil || b.Len() != 0 {
			t.Fatalf("in hand (buffer %d): %v, length %d, %v, %d read; want its length, nothing read", buffer, err, r.ContentLength, r.TransferEncoding, b.Len())
		}
	}

	// With a length, not in hand (HTTP/2's): read whole into memory,
	// kept, its framing as it was.
	r, b = chunkedRequest(strings.NewReader("hello"))
	r.ContentLength, r.TransferEncoding = 5, nil
	r.Header.Del("Expect")
	if err := ReadAhead(r, b, proxy.MaxAhead); err != nil || r.ContentLength != 5 || b.Len() != 5 || b.Lend().(proxy.InHand).Held() != 5 {
		t.Fatalf("with a length: %v, length %d, %d read, held %d; want it read whole, in hand", err, r.ContentLength, b.Len(), b.Lend().(proxy.InHand).Held())
	}

	cut := errors.New("unexpected EOF in a chunk")
	r, b = chunkedRequest(io.MultiReader(strings.NewReader("abc"), failingReader{cut}))
	if err := ReadAhead(r, b, proxy.MaxAhead); !errors.Is(err, cut) || r.ContentLength != -1 {
		t.Fatalf("a cut body: %v, length %d; want its error, and no length", err, r.ContentLength)
	}
}

// Bodies that are not read ahead are left unread, their requests as they
// were: one with a length over MaxAhead, or asking for 100 Continue, one
// declaring trailers (only chunked carries them), an upgrade's and a
// CONNECT's, and any of a pool that streams them (buffer 0).
func TestReadAheadLeavesWhatItMust(t *testing.T) {
	for _, tc := range []struct {
		name   string
		set    func(*http.Request)
		buffer int64
	}{
		{"with a length, asking for 100 Continue", func(r *http.Request) { r.ContentLength, r.TransferEncoding = 5, nil }, proxy.MaxAhead},
		{"with a length over MaxAhead", func(r *http.Request) {
			r.ContentLength, r.TransferEncoding = proxy.MaxAhead+1, nil
			r.Header.Del("Expect")
		}, proxy.MaxAhead},
		{"with a length, streamed by its pool", func(r *http.Request) {
			r.ContentLength, r.TransferEncoding = 5, nil
			r.Header.Del("Expect")
		}, 0},
		{"declaring trailers", func(r *http.Request) { r.Trailer = http.Header{"X-Sum": nil} }, proxy.MaxAhead},
		{"naming a trailer", func(r *http.Request) { r.Header.Set("Trailer", "X-Sum") }, proxy.MaxAhead},
		{"an upgrade", func(r *http.Request) { r.Header.Set("Upgrade", "websocket") }, proxy.MaxAhead},
		{"a CONNECT", func(r *http.Request) { r.Method = http.MethodConnect }, proxy.MaxAhead},
		{"streamed by its pool", func(*http.Request) {}, 0},
	} {
		r, b := chunkedRequest(strings.NewReader("hello"))
		tc.set(r)
		length := r.ContentLength
		expect := r.Header.Get("Expect")
		if err := ReadAhead(r, b, tc.buffer); err != nil || b.Len() != 0 || r.ContentLength != length || r.Header.Get("Expect") != expect {
			t.Fatalf("%s: %v, %d read, length %d, Expect %q; want nothing read, the request as it was", tc.name, err, b.Len(), r.ContentLength, r.Header.Get("Expect"))
		}
	}
}

type failingReader struct{ err error }

func (f failingReader) Read([]byte) (int, error) { return 0, f.err }
