package testtool

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
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

// RedisCluster starts a Redis Cluster of three masters (slots split
// between them, no replicas) until the test ends, and returns the nodes'
// addresses.
func RedisCluster(t testing.TB) []string {
	t.Helper()
	cli := Require(t, "redis-cli")
	var addrs []string
	for range 3 {
		// The cluster bus's port given: by default it is the node's port
		// plus 10,000, and redis-server refuses a node port over 55535,
		// which an ephemeral one can be.
		r := Redis(t, "--cluster-enabled", "yes", "--cluster-config-file", t.TempDir()+"/nodes.conf",
			"--cluster-port", fmt.Sprint(FreePort(t)), "--cluster-node-timeout", "2000")
		addrs = append(addrs, r.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	out, err := exec.Command(cli, append(args, "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	// The nodes agree on the slots a moment after the command returns.
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := exec.Command(cli, "-h", "127.0.0.1", "-p", addrs[0][strings.LastIndexByte(addrs[0], ':')+1:], "cluster", "info").Output()
		if strings.Contains(string(out), "cluster_state:ok") {
			return addrs
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster is not ok after 10 s:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// RedisSentinel starts a redis-server and a Sentinel watching it as
// master "rotor" until the test ends, and returns the Sentinel's address.
func RedisSentinel(t testing.TB) string {
	t.Helper()
	master := Redis(t)
	bin := Require(t, "redis-server")
	port := FreePort(t)
	conf := t.TempDir() + "/sentinel.conf"
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\nsentinel monitor rotor 127.0.0.1 %d 1\nsentinel down-after-milliseconds rotor 2000\n",
		port, master.port)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return run(t, fmt.Sprintf("127.0.0.1:%d", port), bin, conf, "--sentinel", "--loglevel", "warning")
}
