package reliability_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/internal/testtool"
)

// rotorBin is the rotor binary the suite runs, built once.
var rotorBin string

// long says ROTOR_LONG=1: the long version of every check.
var long = os.Getenv("ROTOR_LONG") == "1"

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rotor-reliability")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// ROTOR_BIN runs the suite against a rotor already built (another
	// commit's, to measure the two side by side) instead of this tree's.
	rotorBin = os.Getenv("ROTOR_BIN")
	if rotorBin == "" {
		rotorBin = filepath.Join(dir, "rotor")
		args := []string{"build", "-o", rotorBin}
		if raceEnabled {
			args = append(args, "-race") // what the suite does to rotor, the race detector watches
		}
		build := exec.Command("go", append(args, "github.com/rotor-lb/rotor/cmd/rotor")...)
		build.Stderr = os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building rotor:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// scale picks the short or the long version of a figure.
func scale[T any](short, longer T) T {
	if long {
		return longer
	}
	return short
}

// figure reports one check's result: a FIGURE line in the test's output,
// and a line in the file ROTOR_FIGURES names.
func figure(t *testing.T, name, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf("%s | %s", name, fmt.Sprintf(format, args...))
	t.Log("FIGURE " + line)
	if path := os.Getenv("ROTOR_FIGURES"); path != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		fmt.Fprintln(f, line)
	}
}

// proc is one rotor process.
type proc struct {
	t     *testing.T
	cmd   *exec.Cmd
	path  string
	logs  *testtool.Buffer
	addrs map[string]string
	done  chan error
}

var (
	listeningRE = regexp.MustCompile(`msg=listening listener=(\S+) kind=\S+ addr=(\S+)`)
	adminRE     = regexp.MustCompile(`msg="admin listening" addr=(\S+)`)
)

// start runs `rotor serve` on cfg (every listen address "127.0.0.1:0"),
// with env added, and waits until it listens.
func start(t *testing.T, cfg string, env ...string) *proc {
	t.Helper()
	p := &proc{t: t, path: filepath.Join(t.TempDir(), "rotor.yaml"), logs: &testtool.Buffer{}, addrs: map[string]string{}, done: make(chan error, 1)}
	p.rewrite(cfg)
	p.cmd = exec.Command(rotorBin, "serve", "--config", p.path)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = p.logs
	p.cmd.Stdout = p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		logs := p.logs.String()
		if m := adminRE.FindStringSubmatch(logs); m != nil {
			for _, l := range listeningRE.FindAllStringSubmatch(logs, -1) {
				p.addrs[l[1]] = l[2]
			}
			p.addrs["admin"] = m[1]
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("rotor did not start:\n%s", logs)
		}
		select {
		case err := <-p.done:
			p.done <- err // for the cleanup, which waits for it
			t.Fatalf("rotor exited (%v):\n%s", err, p.logs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (p *proc) addr(name string) string { return p.addrs[name] }
func (p *proc) url(name string) string  { return "http://" + p.addrs[name] }

func (p *proc) rewrite(cfg string) {
	p.t.Helper()
	if err := os.WriteFile(p.path, []byte(cfg), 0o600); err != nil {
		p.t.Fatal(err)
	}
}

func (p *proc) signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// wait waits for the process to exit.
func (p *proc) wait(within time.Duration) error {
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		return err
	case <-time.After(within):
		return fmt.Errorf("still running after %v", within)
	}
}

// reload asks the admin API to reload, and returns its status and answer.
func (p *proc) reload() (int, string) {
	p.t.Helper()
	resp, err := http.Post("http://"+p.addrs["admin"]+"/admin/reload", "", nil)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// admin fetches an admin path.
func (p *proc) admin(path string) string {
	p.t.Helper()
	resp, err := http.Get("http://" + p.addrs["admin"] + path)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// metric reads one sample of /metrics: the line that starts with series.
func (p *proc) metric(series string) float64 {
	p.t.Helper()
	for _, line := range strings.Split(p.admin("/metrics"), "\n") {
		if strings.HasPrefix(line, series+" ") {
			v, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, series)), 64)
			return v
		}
	}
	return 0
}

// rss is the process's resident memory in bytes.
func (p *proc) rss() int64 {
	p.t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		p.t.Skip("no /proc here")
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// fds is the process's open descriptors.
func (p *proc) fds() int {
	p.t.Helper()
	e, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.cmd.Process.Pid))
	if err != nil {
		p.t.Skip("no /proc here")
	}
	return len(e)
}

// established is the process's TCP connections in state ESTABLISHED
// whose local address is addr (a listener's: its clients'), from
// /proc/net/tcp and the process's descriptors.
func (p *proc) established(addr string) int {
	p.t.Helper()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		p.t.Fatalf("established: %q is not an IPv4 address and port", addr)
	}
	mine := map[string]bool{}
	dir := fmt.Sprintf("/proc/%d/fd", p.cmd.Process.Pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		p.t.Skip("no /proc here")
	}
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && strings.HasPrefix(l, "socket:[") {
			mine[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		p.t.Skip("no /proc/net/tcp here")
	}
	ip := ap.Addr().As4()
	local := fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], ap.Port())
	n := 0
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		// sl local remote st tx:rx tr:when retrnsmt uid timeout inode
		if len(f) > 9 && f[1] == local && f[3] == "01" && mine[f[9]] {
			n++
		}
	}
	return n
}

// backend is testtool's controllable backend, with the helpers the
// suite calls.
type backend struct{ *testtool.Backend }

func newBackend(t *testing.T, name string) *backend { return &backend{testtool.NewBackend(t, name)} }

func (b *backend) set(status int, delay time.Duration, hang bool) { b.Set(status, delay, hang) }
func (b *backend) count() int                                     { return b.Count() }

// result is one request of a load.
type result struct {
	start   time.Time
	latency time.Duration
	status  int
	err     error
}

// load sends GETs to url at rate a second for d (or until ctx ends), each
// on its own goroutine, over keep-alive connections, and returns every
// request's result.
func load(ctx context.Context, url string, rate float64, d time.Duration) []result {
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	var out []result
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	end := time.After(d)
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return out
		case <-end:
			wg.Wait()
			return out
		case <-tick.C:
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := result{start: time.Now()}
				resp, err := client.Get(url)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					r.status = resp.StatusCode
				}
				r.err, r.latency = err, time.Since(r.start)
				mu.Lock()
				out = append(out, r)
				mu.Unlock()
			}()
		}
	}
}

// failed counts the results that are not 2xx.
func failed(rs []result) (n int, first string) {
	for _, r := range rs {
		if r.err != nil || r.status < 200 || r.status > 299 {
			n++
			if first == "" {
				if r.err != nil {
					first = r.err.Error()
				} else {
					first = strconv.Itoa(r.status)
				}
			}
		}
	}
	return n, first
}

// p99 is the 99th percentile latency of rs.
func p99(rs []result) time.Duration {
	if len(rs) == 0 {
		return 0
	}
	l := make([]time.Duration, len(rs))
	for i, r := range rs {
		l[i] = r.latency
	}
	slices.Sort(l)
	return l[len(l)*99/100]
}

// eventually retries cond until it holds or the time is up, and returns
// how long it took.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	return testtool.Eventually(t, within, what, cond)
}

// hostPort is the host:port of a test server's URL.
func hostPort(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

// rawConn opens a plain connection to addr.
func rawConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
