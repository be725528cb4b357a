package testtool

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// Backend is a loopback HTTP server a test controls: it answers every
// request with its name, after Set's delay and with Set's status, or
// hangs until the client goes; /healthz answers 200, or Set's status when
// it is 5xx. It counts requests and keeps the last one.
type Backend struct {
	*httptest.Server
	Name string

	mu     sync.Mutex
	hits   int           // guarded by mu
	status int           // guarded by mu; 0: 200
	delay  time.Duration // guarded by mu
	hang   bool          // guarded by mu
	last   *http.Request // guarded by mu
}

// NewBackend starts a backend until the test ends.
func NewBackend(t testing.TB, name string) *Backend {
	b := &Backend{Name: name}
	b.Server = httptest.NewServer(http.HandlerFunc(b.serve))
	t.Cleanup(b.Close)
	return b
}

// NewUpgradeEcho is a backend named "echo" that switches any request to
// protocol "echo" (101) and then echoes what it reads until its client's
// end: an upgraded connection (WebSocket-like) to proxy.
func NewUpgradeEcho(t testing.TB) *Backend {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprint(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		_ = rw.Flush()
		_, _ = io.Copy(conn, rw)
	}))
	t.Cleanup(be.Close)
	return &Backend{Server: be, Name: "echo"}
}

func (b *Backend) serve(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.hits++
	status, delay, hang := b.status, b.delay, b.hang
	b.last = r.Clone(context.Background())
	b.mu.Unlock()
	if r.URL.Path == "/healthz" {
		if status >= 500 {
			w.WriteHeader(status)
		}
		return
	}
	_, _ = io.Copy(io.Discard, r.Body)
	if hang {
		<-r.Context().Done()
		return
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	if status != 0 {
		w.WriteHeader(status)
	}
	fmt.Fprint(w, b.Name)
}

// Set changes how it answers: status (0: 200), after delay, or not at all
// (hang) until the client goes.
func (b *Backend) Set(status int, delay time.Duration, hang bool) {
	b.mu.Lock()
	b.status, b.delay, b.hang = status, delay, hang
	b.mu.Unlock()
}

// Count returns the requests it has had.
func (b *Backend) Count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hits
}

// Last returns the last request it had (its body already read).
func (b *Backend) Last() *http.Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}

// NewStreamer is a backend named name that answers /stream with its name
// and a flush, then holds the rest of the answer (",end") until release
// gives it a value or is closed, or the client goes: an answer that
// streams for as long as the test says. Any other path it answers with
// its name at once.
func NewStreamer(t testing.TB, name string, release <-chan struct{}) *Backend {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, name)
		if r.URL.Path != "/stream" {
			return
		}
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
		fmt.Fprint(w, ",end")
	}))
	t.Cleanup(be.Close)
	return &Backend{Server: be, Name: name}
}
