package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/admin"
	"github.com/rotor-lb/rotor/internal/testtool"
	"github.com/rotor-lb/rotor/server"
)

// backend is testtool's controllable backend, with the helpers this
// package's tests call.
type backend struct{ *testtool.Backend }

func newBackend(t testing.TB, name string) *backend { return &backend{testtool.NewBackend(t, name)} }

func (b *backend) url() string                         { return b.URL }
func (b *backend) count() int                          { return b.Count() }
func (b *backend) set(status int, delay time.Duration) { b.Set(status, delay, false) }
func (b *backend) lastRequest() *http.Request          { return b.Last() }

// newUpgradeEcho is testtool's backend that switches to "echo" and
// echoes.
func newUpgradeEcho(tb testing.TB) *backend { return &backend{testtool.NewUpgradeEcho(tb)} }

// upgrade switches a new connection to addr (rotor's http listener) to
// protocol "echo".
func upgrade(tb testing.TB, addr string) (net.Conn, *bufio.Reader) {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	fmt.Fprint(c, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		c.Close()
		tb.Fatalf("upgrade: %v, %v", resp, err)
	}
	return c, br
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

// serve builds the server of the config at path (env stands for the
// environment), starts it, and shuts it down when the test ends.
func serve(tb testing.TB, path string, env map[string]string, logs io.Writer) *server.Server {
	tb.Helper()
	s, err := server.New(path, func(k string) string { return env[k] }, logs)
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s
}

// writeConfig writes cfg to a rotor.yaml of the test's and returns its path.
func writeConfig(tb testing.TB, cfg string) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "rotor.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

func startRotorB(b *testing.B, cfg string) *rotor {
	path := writeConfig(b, cfg)
	return &rotor{Server: serve(b, path, nil, io.Discard), path: path, logs: &testtool.Buffer{}}
}

func startRotor(t *testing.T, cfg string, env map[string]string) *rotor {
	t.Helper()
	path := writeConfig(t, cfg)
	logs := &testtool.Buffer{}
	return &rotor{Server: serve(t, path, env, logs), path: path, logs: logs}
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

// statusDoc is rotor's /status, from its admin listener.
func statusDoc(t *testing.T, r *rotor) admin.StatusDoc {
	t.Helper()
	resp, err := http.Get("http://" + r.Addr("admin").String() + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc admin.StatusDoc
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	return doc
}
