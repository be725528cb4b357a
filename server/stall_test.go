package server_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/internal/rawio"
	"github.com/rotor-lb/rotor/internal/testtool"
)

// stallingBackend answers /stall with a head and the first KiB of a
// 100,000-byte body, then nothing (its connection held open until the
// test ends), and /trickle with an 8-byte body, a byte every 300 ms. It
// reads a request's body of a known length first.
func stallingBackend(t *testing.T) string {
	t.Helper()
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	return testtool.ServeRequests(t, func(c net.Conn, req *http.Request) bool {
		_, _ = io.Copy(io.Discard, req.Body)
		switch req.URL.Path {
		case "/stall":
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n%s", bytes.Repeat([]byte("s"), 1024))
			<-done
			return false
		case "/trickle":
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n")
			for range 8 {
				time.Sleep(300 * time.Millisecond)
				if _, err := c.Write([]byte("t")); err != nil {
					return false
				}
			}
		}
		return true
	})
}

// A backend that sends the head of its answer and then stalls in its body
// holds the client no longer than its pool's timeouts.read (nginx's
// proxy_read_timeout): the answer is cut (the client sees it end short,
// never as whole) and recorded with reason timeout. A backend that sends
// its body slowly, a byte at a time within the bound, is not cut. Every
// way an answer comes: a GET through the short way, a POST with a body
// over 64 KiB through net/http's, and the forward proxy's direct route.
func TestBackendStalledInItsAnswer(t *testing.T) {
	be := stallingBackend(t)
	r := startRotor(t, fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
log: {access: true}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app}
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes, allow_targets: [127.0.0.0/8]}
pools:
  - name: app
    timeouts: {read: 1s}
    endpoints:
      - {name: a, url: "http://%s"}
  - name: routes
    timeouts: {read: 1s}
    endpoints:
      - {name: direct, url: "direct://"}
`, be), nil)
	web := "http://" + r.Addr("web").String()
	proxyURL, _ := url.Parse("http://" + r.Addr("out").String())
	viaProxy := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}
	plain := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	big := strings.Repeat("b", 100<<10)
	for _, tc := range []struct {
		name   string
		client *http.Client
		method string
		url    string
		body   string
		first  bool // the first KiB reaches the client before the cut
	}{
		// The short way and net/http's pass on what came before they
		// wait for more (the backend's socket said so: rawio); the
		// forward proxy flushes every write.
		{"GET", plain, http.MethodGet, web + "/stall", "", rawio.Supported},
		{"POST over 64 KiB", plain, http.MethodPost, web + "/stall", big, rawio.Supported},
		{"forward GET", viaProxy, http.MethodGet, "http://" + be + "/stall", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, tc.url, strings.NewReader(tc.body))
			if tc.body == "" {
				req.Body = nil
			}
			// The head and the first KiB have gone on, or (net/http's
			// way) wait in rotor's buffer for more, an answer of a known
			// length being passed on in large writes: the client sees the
			// answer end short, or end before its head, never whole.
			start := time.Now()
			var got []byte
			resp, err := tc.client.Do(req)
			if err == nil {
				got, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			d := time.Since(start)
			if err == nil {
				t.Fatalf("%d bytes read whole after %v: a cut answer passed for a whole one", len(got), d)
			}
			if len(got) > 1024 || tc.first && len(got) != 1024 || d < 900*time.Millisecond || d > 5*time.Second {
				t.Fatalf("%d bytes, then %v after %v: want the answer cut after about 1s", len(got), err, d)
			}
		})
	}
	for _, tc := range []struct{ name, body string }{
		{"a slow body", ""},
		{"a slow body, POST over 64 KiB", big}, // net/http's way
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, web+"/trickle", nil)
			if tc.body != "" {
				req, _ = http.NewRequest(http.MethodPost, web+"/trickle", strings.NewReader(tc.body))
			}
			head, firstAt, status, body, err := trickled(plain, req)
			if status != 200 || err != nil || body != "tttttttt" {
				t.Fatalf("%d %q %v: a body sent a byte every 300 ms was cut", status, body, err)
			}
			// Passed on as it comes: the head before the first byte, each
			// byte as it comes, not all of them at the end (2.4 s).
			if rawio.Supported && (head > 250*time.Millisecond || firstAt > 1500*time.Millisecond) {
				t.Fatalf("the head came after %v and the first byte after %v: held back for more", head, firstAt)
			}
		})
	}
	eventually(t, 3*time.Second, "the stalled answers logged", func() bool {
		return strings.Count(r.logs.String(), "reason=timeout") >= 3
	})
	for _, want := range []string{
		`kind=http .*method=GET .*path=/stall .*status=200 reason=timeout .*bytes_out=1024 `,
		`kind=http .*method=POST .*path=/stall .*status=200 reason=timeout .*bytes_in=` + strconv.Itoa(len(big)) + ` bytes_out=1024 `,
		`kind=forward .*status=200 reason=timeout .*bytes_out=1024 `,
	} {
		if !regexp.MustCompile(want).MatchString(r.logs.String()) {
			t.Errorf("no access line matching %q:\n%s", want, r.logs.String())
		}
	}
}

// An https backend's answer goes net/http's way, and is passed on as it
// comes too: a body of a known length sent a byte every 300 ms reaches
// the client a byte at a time, its head at once, not all at the end.
func TestHTTPSBackendSlowBodyPassedOn(t *testing.T) {
	if !rawio.Supported {
		t.Skip("the backend's socket is looked at with rawio, which this build has not")
	}
	ca := newTestCA(t)
	cert, _, _ := ca.issue("backend.internal", x509.ExtKeyUsageServerAuth)
	b := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "4")
		w.WriteHeader(http.StatusOK)
		for range 4 {
			w.(http.Flusher).Flush()
			time.Sleep(300 * time.Millisecond)
			_, _ = w.Write([]byte("t"))
		}
	}))
	b.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	b.StartTLS()
	t.Cleanup(b.Close)
	r := startRotor(t, fmt.Sprintf(`admin: {listen: "off"}
listeners: [{name: web, kind: http, listen: "127.0.0.1:0", pool: app}]
pools:
  - name: app
    endpoints: [{name: a, url: %q}]
    tls: {ca: %s, server_name: backend.internal}
`, b.URL, ca.pem), nil)
	req, _ := http.NewRequest(http.MethodGet, r.url("web"), nil)
	head, firstAt, status, body, err := trickled(client, req)
	if status != 200 || err != nil || body != "tttt" {
		t.Fatalf("%d %q %v", status, body, err)
	}
	if head > 250*time.Millisecond || firstAt > 900*time.Millisecond {
		t.Fatalf("the head came after %v and the first byte after %v (the whole body takes 1.2 s): held back for more", head, firstAt)
	}
}

// trickled sends req and reads its answer, a body that comes slowly:
// when its head came, when its first byte did, and the whole of it.
func trickled(c *http.Client, req *http.Request) (head, firstAt time.Duration, status int, body string, err error) {
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, 0, "", err
	}
	defer resp.Body.Close()
	head = time.Since(start)
	first := make([]byte, 1)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		return head, 0, resp.StatusCode, "", err
	}
	firstAt = time.Since(start)
	rest, err := io.ReadAll(resp.Body)
	return head, firstAt, resp.StatusCode, string(first) + string(rest), err
}

// The forward proxy's https targets may answer over HTTP/2, whose streams
// share their connection's reads: timeouts.read bounds each stream's
// body all the same, a target that stalls in one having that stream cut
// (reason timeout) while a slow one within the bound beside it goes on to
// its end.
func TestForwardHTTP2TargetStalledInItsAnswer(t *testing.T) {
	done := make(chan struct{})
	var protos sync.Map
	target := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos.Store(r.Proto, true)
		w.Header().Set("Content-Length", "100000")
		switch r.URL.Path {
		case "/stall":
			_, _ = w.Write(bytes.Repeat([]byte("s"), 1024))
			w.(http.Flusher).Flush()
			select {
			case <-done:
			case <-r.Context().Done():
			}
		case "/trickle":
			w.Header().Set("Content-Length", "8")
			for range 8 {
				w.(http.Flusher).Flush()
				time.Sleep(300 * time.Millisecond)
				_, _ = w.Write([]byte("t"))
			}
		}
	}))
	target.EnableHTTP2 = true
	target.StartTLS()
	t.Cleanup(target.Close)
	t.Cleanup(func() { close(done) })
	r := startRotor(t, `admin: {listen: "off"}
log: {access: true}
listeners:
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes, allow_targets: [127.0.0.0/8]}
pools:
  - name: routes
    timeouts: {read: 1s}
    endpoints:
      - {name: direct, url: "direct://", insecure_skip_verify: true}
`, nil)
	host := strings.TrimPrefix(target.URL, "https://")
	get := func(path string) (time.Duration, []byte, error) {
		c, err := net.Dial("tcp", r.Addr("out").String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		start := time.Now()
		fmt.Fprintf(c, "GET https://%s%s HTTP/1.1\r\nHost: %s\r\n\r\n", host, path, host)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return time.Since(start), nil, err
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		return time.Since(start), got, err
	}
	trickled := make(chan error, 1)
	go func() {
		_, got, err := get("/trickle")
		if err == nil && string(got) != "tttttttt" {
			err = fmt.Errorf("got %q", got)
		}
		trickled <- err
	}()
	time.Sleep(100 * time.Millisecond) // its connection up first, for the stream beside it
	d, got, err := get("/stall")
	if err == nil || len(got) != 1024 || d < 900*time.Millisecond || d > 5*time.Second {
		t.Fatalf("%d bytes, then %v after %v: want the answer cut after about 1s", len(got), err, d)
	}
	if err := <-trickled; err != nil {
		t.Fatalf("a body sent a byte every 300 ms: %v", err)
	}
	if _, ok := protos.Load("HTTP/2.0"); !ok {
		t.Fatalf("the target was reached over %v, want HTTP/2", keys(&protos))
	}
	eventually(t, 3*time.Second, "the stalled answer logged", func() bool {
		return regexp.MustCompile(`kind=forward .*status=200 reason=timeout .*bytes_out=1024 `).MatchString(r.logs.String())
	})
}

func keys(m *sync.Map) []any {
	var ks []any
	m.Range(func(k, _ any) bool { ks = append(ks, k); return true })
	return ks
}
