package proxy_test

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
// byte at a time (a client's chunks as they come).
func chunkedRequest(body io.Reader) (*http.Request, *proxy.Body) {
	r, _ := http.NewRequest(http.MethodPost, "http://h.test/", nil)
	r.ContentLength, r.TransferEncoding = -1, []string{"chunked"}
	r.Header.Set("Expect", "100-continue")
	b := proxy.NewBody(io.NopCloser(iotest.OneByteReader(body)))
	r.Body = b
	return r, b
}

// A body of no known length that ends within MaxAhead is read whole
// before its request goes on, and goes with its length: nothing of it is
// spent (a try that never sent it leaves it for the next), and the try
// that sends it takes it whole.
func TestReadAheadGivesAShortBodyItsLength(t *testing.T) {
	for _, size := range []int{0, 5, proxy.MaxAhead} {
		body := bytes.Repeat([]byte("x"), size)
		r, b := chunkedRequest(bytes.NewReader(body))
		if err := proxy.ReadAhead(r, b); err != nil {
			t.Fatal(err)
		}
		if r.ContentLength != int64(size) || r.TransferEncoding != nil || r.Header.Get("Expect") != "" {
			t.Fatalf("%d bytes: length %d, %v, Expect %q; want its length, no chunked, no Expect", size, r.ContentLength, r.TransferEncoding, r.Header.Get("Expect"))
		}
		if b.Spent() || b.Len() != int64(size) {
			t.Fatalf("%d bytes: spent %v, %d read; want none spent, all read", size, b.Spent(), b.Len())
		}
		// A try that failed to dial read nothing; the next takes it.
		h := b.Lend().(proxy.InHand)
		if n := h.Held(); n != int64(size) {
			t.Fatalf("%d bytes: Held %d", size, n)
		}
		if p, ok := h.Take(int64(size)); !ok || !bytes.Equal(p, body) || b.Spent() != (size > 0) {
			t.Fatalf("%d bytes: took %d (%v), spent %v", size, len(p), ok, b.Spent())
		}
		if n, err := b.Lend().Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("%d bytes: a read after the take: %d, %v; want the end", size, n, err)
		}
	}
}

// A longer body goes on as it came, chunked, what was read ahead first
// and the rest after it, every byte once.
func TestReadAheadStreamsALongBody(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), proxy.MaxAhead/16*3+1)
	r, b := chunkedRequest(bytes.NewReader(body))
	if err := proxy.ReadAhead(r, b); err != nil {
		t.Fatal(err)
	}
	if r.ContentLength != -1 || len(r.TransferEncoding) != 1 || r.Header.Get("Expect") != "" {
		t.Fatalf("length %d, %v, Expect %q; want it left chunked, its Expect dropped", r.ContentLength, r.TransferEncoding, r.Header.Get("Expect"))
	}
	if b.Spent() || b.Len() != proxy.MaxAhead+1 {
		t.Fatalf("spent %v, %d read ahead; want none spent, MaxAhead+1 read", b.Spent(), b.Len())
	}
	if n := b.Lend().(proxy.InHand).Held(); n != -1 {
		t.Fatalf("Held %d of a body not all in hand, want -1", n)
	}
	got, err := io.ReadAll(b.Lend())
	if err != nil || !bytes.Equal(got, body) || b.Len() != int64(len(body)) {
		t.Fatalf("read %d bytes (%v, equal %v), counted %d; want the %d bytes as sent", len(got), err, bytes.Equal(got, body), b.Len(), len(body))
	}
}

// A body that fails as it is read ahead fails the request: the error is
// the client's body's, kept. Bodies that are not read ahead are left
// unread: one with a length, one declaring trailers, one in hand (given
// its length only), an upgrade's, and any while bodies read ahead hold
// the budget.
func TestReadAheadLeavesWhatItMust(t *testing.T) {
	cut := errors.New("unexpected EOF in a chunk")
	r, b := chunkedRequest(io.MultiReader(strings.NewReader("abc"), failing{cut}))
	if err := proxy.ReadAhead(r, b); !errors.Is(err, cut) || !errors.Is(b.Err(), cut) || r.ContentLength != -1 {
		t.Fatalf("a cut body: %v (kept %v), length %d; want its error, kept, and no length", err, b.Err(), r.ContentLength)
	}

	for _, tc := range []struct {
		name string
		set  func(*http.Request, *proxy.Body) *proxy.Body
	}{
		{"with a length", func(r *http.Request, b *proxy.Body) *proxy.Body { r.ContentLength = 5; return b }},
		{"declaring trailers", func(r *http.Request, b *proxy.Body) *proxy.Body { r.Trailer = http.Header{"X-Sum": nil}; return b }},
		{"an upgrade", func(r *http.Request, b *proxy.Body) *proxy.Body { r.Header.Set("Upgrade", "websocket"); return b }},
		{"over the budget", func(r *http.Request, b *proxy.Body) *proxy.Body {
			t.Cleanup(proxy.SetAheadBudget(proxy.MaxAhead))
			return b
		}},
	} {
		r, b := chunkedRequest(strings.NewReader("hello"))
		want := r.ContentLength
		b = tc.set(r, b)
		if tc.name == "with a length" {
			want = 5
		}
		if err := proxy.ReadAhead(r, b); err != nil || b.Len() != 0 || r.ContentLength != want {
			t.Fatalf("%s: %v, %d read, length %d; want nothing read, the length as it was", tc.name, err, b.Len(), r.ContentLength)
		}
	}

	r, _ = chunkedRequest(nil)
	b = proxy.NewBody(&inHand{b: []byte("hello")})
	if err := proxy.ReadAhead(r, b); err != nil || r.ContentLength != 5 || r.TransferEncoding != nil || b.Len() != 0 {
		t.Fatalf("in hand: %v, length %d, %v, %d read; want its length, nothing read", err, r.ContentLength, r.TransferEncoding, b.Len())
	}
}
