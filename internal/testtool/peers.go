package testtool

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// FreePort returns a loopback port free right now.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// WaitListening waits until something accepts connections on addr.
func WaitListening(t testing.TB, addr string, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not start listening on %s", what, addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Tinyproxy runs Debian's tinyproxy (an HTTP proxy: absolute-URI requests
// and CONNECT) on loopback, with Basic auth when user is set, until the
// test ends, and returns its address.
func Tinyproxy(t testing.TB, user, pass string) string {
	t.Helper()
	bin := Require(t, "tinyproxy")
	port := FreePort(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "tinyproxy.conf")
	body := fmt.Sprintf("Port %d\nListen 127.0.0.1\nTimeout 30\nAllow 127.0.0.1\nMaxClients 50\nLogLevel Error\nDisableViaHeader Yes\nLogFile %q\nPidFile %q\n",
		port, filepath.Join(dir, "log"), filepath.Join(dir, "pid"))
	if user != "" {
		body += fmt.Sprintf("BasicAuth %s %s\n", user, pass)
	}
	if os.Geteuid() == 0 {
		body += "User nobody\nGroup nogroup\n"
	}
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, 0o777)
	return run(t, fmt.Sprintf("127.0.0.1:%d", port), bin, "-d", "-c", conf)
}

// Microsocks runs microsocks (a SOCKS5 proxy) on loopback, with a user and
// password when user is set, until the test ends, and returns its address.
func Microsocks(t testing.TB, user, pass string) string {
	t.Helper()
	bin := Require(t, "microsocks")
	port := FreePort(t)
	args := []string{"-i", "127.0.0.1", "-p", fmt.Sprint(port)}
	if user != "" {
		args = append(args, "-u", user, "-P", pass)
	}
	return run(t, fmt.Sprintf("127.0.0.1:%d", port), bin, args...)
}

func run(t testing.TB, addr, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	WaitListening(t, addr, bin)
	return addr
}

// Serve accepts connections on loopback until the test ends, handing
// each to handle on its own goroutine (handle closes it), and returns the
// address.
func Serve(t testing.TB, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go acceptLoop(ln, handle)
	return ln.Addr().String()
}

// ServeRequests is Serve for a raw HTTP/1.1 backend: it reads each
// connection's requests in turn and hands each to answer, which writes
// what it will to c (the request's body is answer's to read) and returns
// false to close the connection; a connection also closes at its end or
// at a request that does not parse.
func ServeRequests(t testing.TB, answer func(c net.Conn, req *http.Request) bool) string {
	t.Helper()
	return Serve(t, func(c net.Conn) {
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil || !answer(c, req) {
				return
			}
		}
	})
}

func acceptLoop(ln net.Listener, handle func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go handle(c)
	}
}

// Echo runs a TCP echo server on loopback until the test ends and returns
// its address.
func Echo(t testing.TB) string {
	t.Helper()
	return Serve(t, func(c net.Conn) {
		defer c.Close()
		// Only Read and Write, so io.Copy cannot splice through pipes: a
		// test counting descriptors counts the echo's socket alone.
		_, _ = io.Copy(struct{ io.Writer }{c}, struct{ io.Reader }{c})
	})
}

// Canary listens on 127.0.0.1 and [::1] on one port and counts every
// connection: a forward proxy that reaches it let a client into loopback.
type Canary struct {
	Port  string
	conns atomic.Int64
}

// Conns returns how many connections reached the canary.
func (c *Canary) Conns() int64 { return c.conns.Load() }

// NewCanary starts a canary that runs until the test ends.
func NewCanary(t testing.TB) *Canary {
	t.Helper()
	c := &Canary{}
	count := func(conn net.Conn) { c.conns.Add(1); conn.Close() }
	for range 20 {
		v4, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(v4.Addr().String())
		v6, err := net.Listen("tcp", "[::1]:"+port)
		if err != nil {
			v4.Close()
			continue
		}
		c.Port = port
		for _, ln := range []net.Listener{v4, v6} {
			t.Cleanup(func() { ln.Close() })
			go acceptLoop(ln, count)
		}
		return c
	}
	t.Fatal("no port free on both 127.0.0.1 and ::1")
	return nil
}

// TCPPair returns the two ends of a loopback TCP connection, closed when
// the test ends.
func TCPPair(tb testing.TB) (*net.TCPConn, *net.TCPConn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		c.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		c.Close()
		s.Close()
	})
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// ServeTCP serves each connection to a loopback listener with serve, in
// a goroutine of its own that closes it after, until the test ends.
func ServeTCP(t testing.TB, serve func(c net.Conn)) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return ln
}

// FailAccepts is ln with its next Accepts failing, one for each of errs,
// as the kernel's accept fails (out of descriptors, EMFILE, say), before
// it accepts as ln does.
func FailAccepts(ln net.Listener, errs ...syscall.Errno) net.Listener {
	return &failAccepts{Listener: ln, errs: errs}
}

type failAccepts struct {
	net.Listener
	mu   sync.Mutex
	errs []syscall.Errno
}

func (f *failAccepts) Accept() (net.Conn, error) {
	f.mu.Lock()
	if len(f.errs) > 0 {
		errno := f.errs[0]
		f.errs = f.errs[1:]
		f.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: f.Addr(), Err: os.NewSyscallError("accept4", errno)}
	}
	f.mu.Unlock()
	return f.Listener.Accept()
}
