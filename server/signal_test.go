//go:build unix

package server_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/server"
)

// hangupOnListen is a log that sends its own process SIGHUP from inside
// the write that says the admin listener is up: the moment a supervisor
// watching the log may first ask for a reload.
type hangupOnListen struct {
	mu   sync.Mutex
	logs strings.Builder
	sent bool
}

func (h *hangupOnListen) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.logs.Write(p)
	if !h.sent && strings.Contains(string(p), "admin listening") {
		h.sent = true
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (h *hangupOnListen) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.logs.String()
}

// A SIGHUP that comes as soon as rotor says it listens reloads it: Run
// takes the signals before it starts the listeners, where Go's default
// for a SIGHUP no one takes is to end the process (this test's with it).
func TestSIGHUPAsSoonAsListening(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rotor.yaml")
	backend := newBackend(t, "a")
	cfg := `admin: {listen: "127.0.0.1:0"}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app}
pools:
  - name: app
    endpoints:
      - {name: a, url: "` + backend.url() + `"}
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	log := &hangupOnListen{}
	s, err := server.New(path, os.Getenv, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(log.String(), "SIGHUP: reloading") {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no reload after a SIGHUP at the first listen:\n%s", log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	eventually(t, 5*time.Second, "the reload is done", func() bool { return s.ReloadStatus().Generation == 2 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
