package testtool

import (
	"fmt"
	"os/exec"
	"sync"
	"testing"
)

// RedisServer is Debian's redis-server on a loopback port, without
// persistence, for one test; it can be killed and started again on the
// same port.
type RedisServer struct {
	Addr string
	t    testing.TB
	bin  string
	port int
	args []string

	mu  sync.Mutex
	cmd *exec.Cmd // guarded by mu; nil while killed
}

// Redis starts a redis-server until the test ends; args are more of its
// options ("--requirepass", "secret").
func Redis(t testing.TB, args ...string) *RedisServer {
	t.Helper()
	r := &RedisServer{t: t, bin: Require(t, "redis-server"), port: FreePort(t), args: args}
	r.Addr = fmt.Sprintf("127.0.0.1:%d", r.port)
	r.Start()
	t.Cleanup(r.Kill)
	return r
}

// Start runs the server (again) and waits until it accepts connections.
func (r *RedisServer) Start() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		return
	}
	args := append([]string{"--bind", "127.0.0.1", "--port", fmt.Sprint(r.port), "--save", "", "--appendonly", "no",
		"--protected-mode", "yes", "--loglevel", "warning", "--dir", r.t.TempDir()}, r.args...)
	cmd := exec.Command(r.bin, args...)
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.cmd = cmd
	WaitListening(r.t, r.Addr, "redis-server")
}

// Kill stops the server at once (SIGKILL), as a crash would.
func (r *RedisServer) Kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}
