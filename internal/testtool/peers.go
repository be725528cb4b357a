package testtool

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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

// Echo runs a TCP echo server on loopback until the test ends and returns
// its address.
func Echo(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			// Only Read and Write, so io.Copy cannot splice through pipes:
			// a test counting descriptors counts the echo's socket alone.
			go func() { defer c.Close(); _, _ = io.Copy(struct{ io.Writer }{c}, struct{ io.Reader }{c}) }()
		}
	}()
	return ln.Addr().String()
}
