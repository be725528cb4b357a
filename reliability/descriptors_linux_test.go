package reliability_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// rotor run out of descriptors (its soft RLIMIT_NOFILE lowered to what it
// holds, so a client's connections take the last ones): its accept loops
// wait it out, a request that then needs a new connection to its backend
// is answered 500 as its own failure (nginx's), not charged to the
// backend, whose breaker (threshold 1) stays closed, and the health
// checks that cannot be sent meanwhile count neither way (fall 1 would
// mark it down, rise 100 keep it there); once the clients close, every
// listener serves again.
func TestOutOfDescriptors(t *testing.T) {
	a := newBackend(t, "a")
	p := start(t, fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app}
pools:
  - name: app
    endpoints: [{name: a, url: %q}]
    retries: {attempts: 1}
    health:
      breaker: {threshold: 1, cooldown: 1m}
      check: {path: /, interval: 50ms, timeout: 50ms, fall: 1, rise: 100}
`, a.URL))
	pid := p.cmd.Process.Pid
	open := func() int {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			t.Fatal(err)
		}
		return len(fds)
	}
	var old unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, nil, &old); err != nil {
		t.Fatal(err)
	}
	limit := uint64(open() + 8)
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: limit, Max: old.Max}, nil); err != nil {
		t.Fatal(err)
	}
	var clients []net.Conn
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for range 16 {
		c, err := net.DialTimeout("tcp", p.addr("web"), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	eventually(t, 5*time.Second, "rotor at its descriptor limit", func() bool { return uint64(open()) >= limit })

	// The first connection was accepted; its request needs a connection
	// to a, which cannot be had.
	c := clients[0]
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: web\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer at the descriptor limit: %v\n%s", err, p.logs.String())
	}
	resp.Body.Close()
	if resp.StatusCode != 500 {
		t.Fatalf("a request whose backend connection could not be had: %d, want 500", resp.StatusCode)
	}

	time.Sleep(300 * time.Millisecond) // six rounds of checks
	for _, c := range clients {
		c.Close()
	}
	clients = nil
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &old, nil); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Pools []struct {
			Endpoints []struct {
				Breaker  string `json:"breaker"`
				Down     bool   `json:"down"`
				Failures int64  `json:"failures"`
			} `json:"endpoints"`
		} `json:"pools"`
	}
	if err := json.Unmarshal([]byte(p.admin("/status")), &doc); err != nil {
		t.Fatal(err)
	}
	if ep := doc.Pools[0].Endpoints[0]; ep.Breaker != "closed" || ep.Down || ep.Failures != 0 {
		t.Fatalf("a after rotor's own shortage: %+v, want it up, its breaker closed and no failure charged\n%s", ep, p.logs.String())
	}
	if !strings.Contains(p.logs.String(), "health check not sent") {
		t.Fatalf("no check met the shortage:\n%s", p.logs.String())
	}
	for range 5 {
		if code, _ := getBody(t, p.url("web")+"/"); code != 200 {
			t.Fatalf("once the clients closed: %d, want 200", code)
		}
	}
	if err := p.wait(10 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("rotor exited: %v\n%s", err, p.logs.String())
	}
}
