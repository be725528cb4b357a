package forward_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/internal/testtool"
)

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func waitListening(t *testing.T, addr string, cmd *exec.Cmd) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not start listening on %s", cmd.Path, addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startTinyproxy runs Debian's tinyproxy on loopback with Basic auth and
// returns its address.
func startTinyproxy(t *testing.T, user, pass string) string {
	t.Helper()
	bin := testtool.Require(t, "tinyproxy")
	port := freePort(t)
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
	cmd := exec.Command(bin, "-d", "-c", conf)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	waitListening(t, addr, cmd)
	return addr
}

// startMicrosocks runs microsocks (SOCKS5) on loopback with a user and
// password and returns its address.
func startMicrosocks(t *testing.T, user, pass string) string {
	t.Helper()
	bin := testtool.Require(t, "microsocks")
	port := freePort(t)
	args := []string{"-i", "127.0.0.1", "-p", fmt.Sprint(port)}
	if user != "" {
		args = append(args, "-u", user, "-P", pass)
	}
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	waitListening(t, addr, cmd)
	return addr
}
