package h1

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/internal/testtool"
	"github.com/rotor-lb/rotor/proxy"
)

// pieces copies itself out in writes of the given size, as proxy's lent
// body does in 256 KiB ones.
type pieces struct {
	b    []byte
	size int
}

func (p *pieces) Read(b []byte) (int, error) {
	if len(p.b) == 0 {
		return 0, io.EOF
	}
	n := copy(b, p.b)
	p.b = p.b[n:]
	return n, nil
}

func (p *pieces) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for len(p.b) > 0 {
		m, err := w.Write(p.b[:min(len(p.b), p.size)])
		n += int64(m)
		p.b = p.b[m:]
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// readChunks reads a chunked body's chunks from tp, their sizes and
// their bytes.
func readChunks(tp *textproto.Reader) (sizes []int, body []byte, err error) {
	for {
		line, err := tp.ReadLine()
		if err != nil {
			return sizes, body, err
		}
		n, err := strconv.ParseInt(line, 16, 64)
		if err != nil {
			return sizes, body, fmt.Errorf("size line %q: %v", line, err)
		}
		if n == 0 {
			_, err = tp.ReadLine() // no trailers
			return sizes, body, err
		}
		sizes = append(sizes, int(n))
		chunk := make([]byte, n+2)
		if _, err := io.ReadFull(tp.R, chunk); err != nil || !bytes.HasSuffix(chunk, []byte("\r\n")) {
			return sizes, body, fmt.Errorf("a chunk of %d: %v", n, err)
		}
		body = append(body, chunk[:n]...)
	}
}

// A request body of no known length goes on connections of its own, in
// chunks of at most maxChunk however large the pieces it is copied out
// in, byte for byte; the connection is kept for the next such request,
// and closed with the transport's idle connections.
func TestChunkedBodies(t *testing.T) {
	type seen struct {
		sizes []int
		body  []byte
		err   error
	}
	got := make(chan seen, 4)
	ended := make(chan struct{}, 4)
	backend := newRawBackend(t, func(c net.Conn, br *bufio.Reader) {
		defer func() { ended <- struct{}{} }()
		tp := textproto.NewReader(br)
		for {
			if _, err := tp.ReadLine(); err != nil { // the request line
				return
			}
			head, err := tp.ReadMIMEHeader()
			if err != nil {
				return
			}
			if te := head.Get("Transfer-Encoding"); te != "chunked" {
				got <- seen{err: fmt.Errorf("Transfer-Encoding %q", te)}
				return
			}
			sizes, body, err := readChunks(tp)
			got <- seen{sizes, body, err}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	tr := newTestTransport(t, 5*time.Second)
	if tr.chunks.WriteBufferSize != chunkWriteBuffer || tr.chunks.MaxIdleConnsPerHost > maxIdleChunking {
		t.Fatalf("the chunked bodies' transport: a write buffer of %d, %d idle a host", tr.chunks.WriteBufferSize, tr.chunks.MaxIdleConnsPerHost)
	}
	body := make([]byte, 3*256<<10+17)
	for i := range body {
		body[i] = byte(i % 251)
	}
	for i, size := range []int{256 << 10, 1000} {
		req, _ := http.NewRequest("POST", backend.url(), nil)
		req.Body, req.ContentLength = io.NopCloser(&pieces{body, size}), -1
		if _, answer := fetch(t, tr, req); answer != "ok" {
			t.Fatalf("request %d: answered %q", i, answer)
		}
		g := <-got
		if g.err != nil || !bytes.Equal(g.body, body) {
			t.Fatalf("request %d (pieces of %d): the backend read %d bytes (%v), want the %d sent", i, size, len(g.body), g.err, len(body))
		}
		for _, n := range g.sizes {
			if n > maxChunk {
				t.Fatalf("request %d (pieces of %d): a chunk of %d, over %d: %v", i, size, n, maxChunk, g.sizes)
			}
		}
		if size > maxChunk && len(g.sizes) > len(body)/maxChunk+1 {
			t.Errorf("request %d (pieces of %d): %d chunks for %d bytes, want them full", i, size, len(g.sizes), len(body))
		}
	}
	if n := backend.accepted.Load(); n != 1 {
		t.Fatalf("%d backend connections for two chunked requests, want one kept", n)
	}
	tr.CloseIdleConnections()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the idle chunked connection is still open after CloseIdleConnections")
	}
}

// writeSizes is a connection that keeps the size of every write made to
// it.
type writeSizes struct {
	net.Conn
	mu    *sync.Mutex
	sizes *[]int
}

func (c writeSizes) Write(p []byte) (int, error) {
	c.mu.Lock()
	*c.sizes = append(*c.sizes, len(p))
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// A request body of a known length too long for the short way leaves in
// writes of up to proxy.CopyBuffer, not in net/http's 32 KiB ones, and
// arrives byte for byte.
func TestLongBodiesLeaveInLargeWrites(t *testing.T) {
	body := make([]byte, 4*proxy.CopyBuffer+17)
	for i := range body {
		body[i] = byte(i % 251)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil || !bytes.Equal(b, body) || r.ContentLength != int64(len(body)) {
			http.Error(w, fmt.Sprintf("read %d bytes of %d (%v)", len(b), r.ContentLength, err), http.StatusBadRequest)
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	var mu sync.Mutex
	var sizes []int
	dialer := &net.Dialer{Timeout: time.Second}
	tr := New(&http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return writeSizes{c, &mu, &sizes}, nil
	}})
	t.Cleanup(tr.Close)
	req, _ := http.NewRequest("PUT", srv.URL, nil)
	// As the proxy hands a body on: its own WriteTo, hidden by the
	// io.LimitReader net/http wraps it in.
	req.Body, req.ContentLength = io.NopCloser(&pieces{body, proxy.CopyBuffer}), int64(len(body))
	if _, answer := fetch(t, tr, req); answer != "ok" {
		t.Fatalf("answered %q", answer)
	}
	mu.Lock()
	defer mu.Unlock()
	var sent int
	for _, n := range sizes {
		sent += n
	}
	// The head leaves in a write of its own (net/http flushes it before
	// a body it streams), the body in writes of the copy buffer's size.
	if sent < len(body) || len(sizes) > len(body)/proxy.CopyBuffer+3 {
		t.Fatalf("%d bytes in %d writes for a body of %d, want writes of up to %d: %v", sent, len(sizes), len(body), proxy.CopyBuffer, sizes)
	}
}

// A chunked body in hand (it came whole with its head, no trailer) goes
// the short way: with its length, as nginx sends a body it has read (a
// backend that takes no chunked request takes it), with its head in one
// write; the connection is kept for the next one.
func TestChunkedBodyInHandLeavesWithItsHead(t *testing.T) {
	testtool.NeedsRaw(t)
	body := bytes.Repeat([]byte("0123456789"), 300)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil || !bytes.Equal(b, body) || r.ContentLength != int64(len(body)) || len(r.TransferEncoding) != 0 {
			http.Error(w, fmt.Sprintf("read %d bytes, length %d, %q (%v)", len(b), r.ContentLength, r.TransferEncoding, err), http.StatusBadRequest)
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	var mu sync.Mutex
	var sizes []int
	var dials atomic.Int32
	dialer := &net.Dialer{Timeout: time.Second}
	tr := New(&http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return writeSizes{c, &mu, &sizes}, nil
	}})
	t.Cleanup(tr.Close)
	for i := range 2 {
		req, _ := http.NewRequest("POST", srv.URL, nil)
		req.Body, req.ContentLength, req.TransferEncoding = &wholeBody{b: body}, -1, []string{"chunked"}
		if !tr.Short(req) {
			t.Fatal("a chunked body in hand does not go the short way")
		}
		if _, answer := fetch(t, tr, req); answer != "ok" {
			t.Fatalf("request %d: answered %q", i, answer)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 2 || dials.Load() != 1 {
		t.Fatalf("two requests in %d writes (%v) on %d connections, want one write each on one", len(sizes), sizes, dials.Load())
	}
}
