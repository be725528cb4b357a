package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/internal/testtool"
)

// TestMain lets the test binary stand in for rotor itself, so tests can
// send it real signals.
func TestMain(m *testing.M) {
	if args := os.Getenv("ROTOR_TEST_MAIN"); args != "" {
		os.Exit(run(strings.Split(args, "\x1f"), os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// SIGTERM under load: requests in flight finish, then rotor exits 0.
func TestServeSIGTERM(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(400 * time.Millisecond)
		fmt.Fprint(w, "done")
	}))
	defer backend.Close()
	web := freeAddr(t)
	cfg := filepath.Join(t.TempDir(), "rotor.yaml")
	_ = os.WriteFile(cfg, []byte(fmt.Sprintf(`admin: {listen: "off"}
listeners: [{name: web, kind: http, listen: %q, pool: app}]
pools: [{name: app, endpoints: [{name: a, url: %q}]}]
`, web, backend.URL)), 0o600)
	profile := filepath.Join(t.TempDir(), "cpu.pprof")
	allocs := filepath.Join(t.TempDir(), "allocs.pprof")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "ROTOR_TEST_MAIN=serve\x1f--config\x1f"+cfg+"\x1f--cpu-profile\x1f"+profile+"\x1f--alloc-profile\x1f"+allocs)
	var logs strings.Builder
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if c, err := net.Dial("tcp", web); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("rotor did not start: %s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	results := make(chan string, 5)
	for range 5 {
		go func() {
			resp, err := http.Get("http://" + web)
			if err != nil {
				results <- err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			results <- fmt.Sprintf("%d %s", resp.StatusCode, b)
		}()
	}
	time.Sleep(150 * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGHUP) // a reload does not disturb them
	time.Sleep(50 * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	for range 5 {
		if r := <-results; r != "200 done" {
			t.Errorf("in-flight request across SIGTERM: %s", r)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, logs.String())
	}
	if !strings.Contains(logs.String(), "shutting down") || !strings.Contains(logs.String(), "msg=reloaded generation=2") {
		t.Fatalf("logs:\n%s", logs.String())
	}
	// The profiles were written out on the way down: gzipped protobufs.
	for flag, path := range map[string]string{"--cpu-profile": profile, "--alloc-profile": allocs} {
		if b, err := os.ReadFile(path); err != nil || len(b) < 64 || b[0] != 0x1f || b[1] != 0x8b {
			t.Fatalf("%s wrote %d bytes (%v), want a gzipped profile", flag, len(b), err)
		}
	}
}

func TestServeProfileUnwritable(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "rotor.yaml")
	_ = os.WriteFile(cfg, []byte("admin: {listen: \"off\"}\nlisteners: [{name: web, kind: http, listen: \"127.0.0.1:0\", pool: app}]\npools: [{name: app, endpoints: [{name: a, url: \"http://127.0.0.1:1\"}]}]\n"), 0o600)
	for _, flag := range []string{"--cpu-profile", "--alloc-profile"} {
		var stderr strings.Builder
		code := run([]string{"serve", "--config", cfg, flag, filepath.Join(t.TempDir(), "no", "such", "dir", "x.pprof")}, strings.NewReader(""), io.Discard, &stderr)
		if code == 0 || !strings.Contains(stderr.String(), flag+":") {
			t.Fatalf("exit %d, stderr %q: want an error naming %s", code, stderr.String(), flag)
		}
	}
}

func TestServeBadConfig(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "rotor.yaml")
	_ = os.WriteFile(cfg, []byte("listeners:\n  - {name: web, kind: http, listen: \"127.0.0.1:0\", pool: app}\npools:\n  - {name: app, policy: p3c, endpoints: [{name: a, url: \"http://127.0.0.1:1\"}]}\n"), 0o600)
	code, _, errs := runRotor(t, "", "serve", "--config", cfg)
	if code == 0 || !strings.Contains(errs, `rotor.yaml:4: pools.app.policy: "p3c" is not a policy`) {
		t.Fatalf("exit %d, %q", code, errs)
	}
	code, _, errs = runRotor(t, "", "check-config", cfg)
	if code == 0 || !strings.Contains(errs, "pools.app.policy") {
		t.Fatalf("check-config: exit %d, %q", code, errs)
	}
	code, _, errs = runRotor(t, "", "serve")
	if code == 0 || !strings.Contains(errs, "--config: required") {
		t.Fatalf("no config: exit %d, %q", code, errs)
	}
}

// check-config builds what serve builds: a certificate file that exists
// but does not load is refused by both, relative paths are the config
// file's, and nothing is left listening.
func TestCheckConfigBuildsWhatServeBuilds(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "rotor.yaml")
	_ = os.WriteFile(filepath.Join(dir, "cert.pem"), []byte("not a certificate"), 0o600)
	_ = os.WriteFile(filepath.Join(dir, "key.pem"), []byte("not a key"), 0o600)
	_ = os.WriteFile(cfg, []byte(`listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app, tls: {cert: cert.pem, key: key.pem}}
pools:
  - {name: app, endpoints: [{name: a, url: "http://127.0.0.1:1"}]}
`), 0o600)
	for _, args := range [][]string{{"check-config", cfg}, {"serve", "--config", cfg}} {
		code, _, errs := runRotor(t, "", args...)
		if code == 0 || !strings.Contains(errs, "listeners.web.tls: tls: failed to find any PEM data") {
			t.Fatalf("%v: exit %d, %q; want the certificate refused", args, code, errs)
		}
	}
}

// check-config's errors never show a URL's userinfo, a token standing as
// the user included.
func TestCheckConfigHidesTokens(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "rotor.yaml")
	_ = os.WriteFile(cfg, []byte(`listeners:
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes}
pools:
  - name: routes
    endpoints:
      - {name: a, url: "ftp://${ROUTE_TOKEN}:@proxy.example:8000"}
      - {name: b, url: "http://${ROUTE_TOKEN}@proxy.example"}
      - {name: c, url: "socks5://user:${ROUTE_TOKEN}@%zz"}
`), 0o600)
	const token = "tok-9f8e7d6c5b"
	code, out, errs := runRotorEnv(t, map[string]string{"ROUTE_TOKEN": token}, "check-config", cfg)
	if code == 0 || !strings.Contains(errs, "pools.routes.endpoints.a.url") || !strings.Contains(errs, "pools.routes.endpoints.c.url") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if strings.Contains(out+errs, token) {
		t.Fatalf("check-config shows the token:\n%s", errs)
	}
}

// Every ready config in examples/ loads.
func TestExamplesLoad(t *testing.T) {
	files, _ := filepath.Glob("../../examples/*.yaml")
	if len(files) < 4 {
		t.Fatalf("examples: %v, want at least 4", files)
	}
	for _, f := range files {
		code, out, errs := runRotorEnv(t, map[string]string{
			"STICKY_SECRET": "example-secret-0123456789", "ALICE_PASSWORD": "a", "TINY_PASS": "t", "CRAWLBASE_TOKEN": "token",
		}, "check-config", f)
		if code != 0 || !strings.Contains(out, ": ok") {
			t.Errorf("%s: exit %d: %s", f, code, errs)
		}
	}
}

func runRotorEnv(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	return runRotor(t, "", args...)
}

// What a library logs of its own reaches rotor's log in rotor's format:
// net/http's transport, told of an answer a backend sent on an idle
// connection, writes to the log package's logger, which would otherwise
// put a line of plain text among JSON ones.
func TestServeLogsLibrariesInItsFormat(t *testing.T) {
	ln := testtool.ServeTCP(t, func(c net.Conn) {
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		time.Sleep(100 * time.Millisecond)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") // unasked
		time.Sleep(time.Second)
	})
	web := freeAddr(t)
	cfg := filepath.Join(t.TempDir(), "rotor.yaml")
	_ = os.WriteFile(cfg, []byte(fmt.Sprintf(`admin: {listen: "off"}
log: {format: json}
listeners: [{name: web, kind: http, listen: %q, pool: app}]
pools: [{name: app, endpoints: [{name: a, url: "http://%s"}]}]
`, web, ln.Addr())), 0o600)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "ROTOR_TEST_MAIN=serve\x1f--config\x1f"+cfg)
	var logs testtool.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var resp *http.Response
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; {
		// A body over 64 KiB goes through net/http's transport.
		resp, err = http.Post("http://"+web, "application/octet-stream", strings.NewReader(strings.Repeat("b", 100<<10)))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rotor did not answer: %v\n%s", err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), "Unsolicited response") {
		if time.Now().After(deadline) {
			t.Fatalf("no line of net/http's transport in the log:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		if !json.Valid([]byte(line)) {
			t.Fatalf("a line not in the log's format (JSON): %q", line)
		}
	}
}
