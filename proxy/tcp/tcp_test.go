package tcp_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/internal/testtool"
	"github.com/rotor-lb/rotor/proxy"
	"github.com/rotor-lb/rotor/proxy/tcp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Shutdown waits for an open connection until its deadline, then cuts it,
// and leaves no goroutine behind.
func TestShutdownDrainsThenCuts(t *testing.T) {
	echo := testtool.Echo(t)
	bp := balance.NewPool("db", balance.Options{})
	_ = bp.Configure(balance.Config{Policy: &balance.RoundRobin{}, Endpoints: []balance.EndpointConfig{{Name: "e"}}})
	pool := &tcp.Pool{Pool: &proxy.Pool{Name: "db", Snapshot: bp.Snapshot(), Attempts: 1}, Addrs: map[string]string{"e": echo}, Connect: time.Second}
	p := tcp.New("db", func() *tcp.Pool { return pool }, proxy.Options{})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	done := make(chan error)
	go func() { done <- p.Serve(ln) }()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintln(c, "hello")
	if line, _ := bufio.NewReader(c).ReadString('\n'); line != "hello\n" {
		t.Fatalf("echo %q", line)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := p.Shutdown(ctx); err != context.DeadlineExceeded {
		t.Fatalf("shutdown with a connection open: %v, want the deadline", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("shutdown cut the connection after %v, before its deadline", d)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the client connection is still open")
	}
	if p.Bytes.Load() == 0 {
		t.Fatal("no bytes counted")
	}
}

// An Accept that fails for want of descriptors or kernel memory is waited
// out: the listener proxies the next connection. Any other failure ends
// Serve with it.
func TestServeOutlivesAcceptFailures(t *testing.T) {
	echo := testtool.Echo(t)
	bp := balance.NewPool("db", balance.Options{})
	_ = bp.Configure(balance.Config{Policy: &balance.RoundRobin{}, Endpoints: []balance.EndpointConfig{{Name: "e"}}})
	pool := &tcp.Pool{Pool: &proxy.Pool{Name: "db", Snapshot: bp.Snapshot(), Attempts: 1}, Addrs: map[string]string{"e": echo}, Connect: time.Second}
	logs := &testtool.Buffer{}
	serve := func(errs ...syscall.Errno) (*tcp.Proxy, string, chan error) {
		p := tcp.New("db", func() *tcp.Pool { return pool }, proxy.Options{Log: slog.New(slog.NewTextHandler(logs, nil))})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- p.Serve(testtool.FailAccepts(ln, errs...)) }()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = p.Shutdown(ctx)
		})
		return p, ln.Addr().String(), done
	}
	_, addr, done := serve(syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintln(c, "hello")
	if line, _ := bufio.NewReader(c).ReadString('\n'); line != "hello\n" {
		t.Fatalf("after four failed Accepts: echo %q", line)
	}
	select {
	case err := <-done:
		t.Fatalf("Serve returned %v", err)
	default:
	}
	if n := strings.Count(logs.String(), "accept failed"); n != 1 || !strings.Contains(logs.String(), "listener=db") {
		t.Fatalf("%d warnings, want 1 naming the listener:\n%s", n, logs.String())
	}

	_, _, done = serve(syscall.EINVAL)
	select {
	case err := <-done:
		if !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("Serve returned %v, want the EINVAL it cannot outlive", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve still runs after an Accept failed with EINVAL")
	}
}
