package server_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/internal/testtool"
	"github.com/rotor-lb/rotor/server"
)

// backend is a real HTTP server on 127.0.0.1 that answers with its name.
type backend struct {
	name string
	srv  *httptest.Server
	mu   sync.Mutex
	hits int
	// status, when set, is answered instead of 200.
	status int
	delay  time.Duration
	last   *http.Request
}

func newBackend(t testing.TB, name string) *backend {
	b := &backend{name: name}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.hits++
		status, delay := b.status, b.delay
		b.last = r.Clone(context.Background())
		b.mu.Unlock()
		if r.URL.Path == "/healthz" {
			if status >= 500 {
				w.WriteHeader(status)
			}
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
		fmt.Fprint(w, name)
	}))
	if _, ok := t.(*testing.T); ok && t.(*testing.T) != nil {
		t.Cleanup(b.srv.Close)
	}
	return b
}

func (b *backend) url() string { return b.srv.URL }

func (b *backend) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hits
}

func (b *backend) set(status int, delay time.Duration) {
	b.mu.Lock()
	b.status, b.delay = status, delay
	b.mu.Unlock()
}

func (b *backend) lastRequest() *http.Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}

// freePort returns a loopback address with a port free right now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// rotor starts a server on the config text (listen addresses "127.0.0.1:0"
// bind any free port) and stops it at the end of the test.
type rotor struct {
	*server.Server
	path string
	logs *testtool.Buffer
}

func startRotorB(b *testing.B, cfg string) *rotor {
	path := filepath.Join(b.TempDir(), "rotor.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	s, err := server.New(path, func(string) string { return "" }, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return &rotor{Server: s, path: path, logs: &testtool.Buffer{}}
}

func startRotor(t *testing.T, cfg string, env map[string]string) *rotor {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rotor.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &testtool.Buffer{}
	s, err := server.New(path, func(k string) string { return env[k] }, logs)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return &rotor{Server: s, path: path, logs: logs}
}

func (r *rotor) url(listener string) string { return "http://" + r.Addr(listener).String() }

func (r *rotor) rewrite(t *testing.T, cfg string) {
	t.Helper()
	if err := os.WriteFile(r.path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

var client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// get fetches url and returns status and body.
func get(t testing.TB, url string, header ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// eventually retries cond until it holds or the time is up.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func newServer(path string) (*server.Server, error) {
	return server.New(path, func(string) string { return "" }, io.Discard)
}
