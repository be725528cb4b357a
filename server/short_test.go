package server_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/internal/rawio"
	"github.com/rotor-lb/rotor/internal/testtool"
)

// Through a cleartext listener, one keep-alive connection carries plain
// requests (answered the short way), pipelined ones, a POST with a body
// (from which net/http's server answers the connection) and a GET after
// it; an HTTP/1.0 client gets its answer and the close it asked for.
func TestShortWayThroughRotor(t *testing.T) {
	a := newBackend(t, "a")
	r, c := oneBackend(t, a, "")
	br := bufio.NewReader(c)
	answer := func(what string) {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "a" {
			t.Fatalf("%s: %d %q, want 200 from a", what, resp.StatusCode, body)
		}
	}
	io.WriteString(c, "GET /1 HTTP/1.1\r\nHost: x\r\n\r\n")
	answer("plain GET")
	io.WriteString(c, "GET /2 HTTP/1.1\r\nHost: x\r\n\r\nHEAD /3 HTTP/1.1\r\nHost: x\r\n\r\nGET /4 HTTP/1.1\r\nHost: x\r\n\r\n")
	answer("first pipelined GET")
	if resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodHead}); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("pipelined HEAD: %v", err)
	}
	answer("last pipelined GET")
	io.WriteString(c, "POST /5 HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody")
	answer("POST with a body")
	if got := a.lastRequest(); got.Method != http.MethodPost || got.URL.Path != "/5" {
		t.Fatalf("backend saw %s %s, want POST /5", got.Method, got.URL.Path)
	}
	io.WriteString(c, "GET /6 HTTP/1.1\r\nHost: x\r\n\r\n")
	answer("GET after the POST")

	c10 := dialWeb(t, r)
	io.WriteString(c10, "GET / HTTP/1.0\r\nHost: x\r\n\r\n")
	all, err := io.ReadAll(c10)
	if err != nil || !strings.HasPrefix(string(all), "HTTP/1.0 200 OK\r\n") || !strings.HasSuffix(string(all), "\r\n\r\na") {
		t.Fatalf("HTTP/1.0: %q, %v; want the answer, then the close", all, err)
	}
}

// A client that goes away while its request waits for a slow backend is
// logged 499 client_gone, as through net/http's server: the short way
// watches a request that takes long.
func TestShortWayClientGone(t *testing.T) {
	a := newBackend(t, "a")
	a.Set(0, 0, true) // hangs until its client goes
	r, c := oneBackend(t, a, "log: {access: true}\n")
	io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	eventually(t, 5*time.Second, "the backend has the request", func() bool { return a.count() == 1 })
	time.Sleep(300 * time.Millisecond)
	c.Close()
	eventually(t, 5*time.Second, "a 499 client_gone in the access log", func() bool {
		logs := r.logs.String()
		return strings.Contains(logs, "status=499") && strings.Contains(logs, "client_gone") && strings.Contains(logs, "/slow")
	})
}

// oneBackend starts rotor with one http listener over a (head comes
// before the listeners in the config) and dials the listener.
func oneBackend(t *testing.T, a *backend, head string) (*rotor, net.Conn) {
	t.Helper()
	r := startRotor(t, fmt.Sprintf(`%slisteners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app}
pools:
  - name: app
    endpoints:
      - {name: a, url: %q}
`, head, a.url()), nil)
	return r, dialWeb(t, r)
}

// dialWeb connects to the listener named web, for ten seconds at most.
func dialWeb(t *testing.T, r *rotor) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", r.Addr("web").String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// The access log's duration of a request counts its body's upload, from
// when its head came, as nginx's $request_time does; the endpoint's
// latency, what the policies learn from, does not: the client's slowness
// is none of the endpoint's doing. So for a body rotor reads before it
// proxies it (the short way's, up to 64 KiB) and for one that streams to
// the endpoint as the client sends it (chunked, or longer), whose try
// leaves out what it waited for the client's bytes.
func TestAccessLogCountsTheUpload(t *testing.T) {
	const pause = 300 * time.Millisecond
	for _, tc := range []struct{ name, head, rest string }{
		{"read before it is served", "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 10000\r\n\r\n" + strings.Repeat("u", 100),
			strings.Repeat("u", 9900)},
		{"streamed, chunked", "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n64\r\n" + strings.Repeat("c", 100) + "\r\n",
			"64\r\n" + strings.Repeat("c", 100) + "\r\n0\r\n\r\n"},
		{"streamed, of a length", "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("l", 1000),
			strings.Repeat("l", 99000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newBackend(t, "a") // reads the body, then answers
			r, c := oneBackend(t, a, "admin: {listen: \"127.0.0.1:0\"}\nlog: {access: true}\n")
			io.WriteString(c, tc.head)
			time.Sleep(pause)
			io.WriteString(c, tc.rest)
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 200 {
				t.Fatalf("answer %v, %v; want 200", resp, err)
			}
			var line string
			eventually(t, 5*time.Second, "the POST in the access log", func() bool {
				for l := range strings.SplitSeq(r.logs.String(), "\n") {
					if strings.Contains(l, "/up") {
						line = l
						return true
					}
				}
				return false
			})
			m := regexp.MustCompile(`duration=(\S+)`).FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("no duration in %q", line)
			}
			if d, err := time.ParseDuration(m[1]); err != nil || d < pause/2 { // the pause, less what the head took to be read
				t.Errorf("logged duration %s (%v), want at least the upload's %v: %s", m[1], err, pause, line)
			}
			doc := statusDoc(t, r)
			ep := doc.Pools[0].Endpoints[0]
			if ep.Requests != 1 || ep.PeakLatency <= 0 || ep.PeakLatency > (pause/3).Seconds() {
				t.Errorf("endpoint after %d request(s): peak latency %vs, want one request, timed without the upload's %v", ep.Requests, ep.PeakLatency, pause)
			}
		})
	}
}

// A backend that answers before it has read the body (a 401 to an
// upload, say) does not cost the client its connection: rotor passes the
// answer on, reads and drops the rest of the body once the answer is
// out, as nginx does, and serves the client's next request on the same
// connection.
func TestEarlyAnswerKeepsTheConnection(t *testing.T) {
	testtool.NeedsRaw(t)
	refusal := strings.Repeat("not you. ", 1<<17) // over 1 MiB
	addr := testtool.ServeRequests(t, func(c net.Conn, req *http.Request) bool {
		if req.URL.Path == "/next" {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext")
			return true
		}
		// At once, the body unread; what comes of it is dropped. The
		// answer's body is more than any buffer on the way holds: it is
		// still being passed on while the upload waits.
		fmt.Fprintf(c, "HTTP/1.1 401 Unauthorized\r\nContent-Length: %d\r\n\r\n%s", len(refusal), refusal)
		io.Copy(io.Discard, c)
		return false
	})
	r := startRotor(t, fmt.Sprintf(`listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app}
pools:
  - name: app
    request_buffer_bytes: 65536
    endpoints:
      - {name: a, url: "http://%s"}
`, addr), nil)
	for _, tc := range []struct{ name, head, rest string }{
		// Longer than what is read ahead before a backend is picked (the
		// pool's request_buffer_bytes, here only what is read into
		// memory, proxy.MaxAhead), so that it streams.
		{"chunked", "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10400\r\n" + strings.Repeat("c", 0x10400) + "\r\n",
			"4000\r\n" + strings.Repeat("c", 16384) + "\r\n0\r\n\r\n"},
		{"of a length", "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("l", 1000), strings.Repeat("l", 99000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialWeb(t, r)
			br := bufio.NewReader(c)
			io.WriteString(c, tc.head)
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != 401 || resp.Close {
				t.Fatalf("answer %v, %v; want the backend's 401, the connection kept\n%s", resp, err, r.logs.String())
			}
			if n, err := io.Copy(io.Discard, resp.Body); n != int64(len(refusal)) || err != nil {
				t.Fatalf("the answer's body: %d bytes (%v), want its %d: cut while the upload waited", n, err, len(refusal))
			}
			io.WriteString(c, tc.rest+"GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err = http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("the next request on the connection: %v", err)
			}
			if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || string(b) != "next" {
				t.Errorf("the next request: %d %q, want 200 next", resp.StatusCode, b)
			}
		})
	}
}

// An upload a backend refuses at once (a 413 before it has read the
// body, and a close with the body unread: its socket resets) has the
// backend's answer passed on, not a 502, however the write of the body
// to it ends; and the client that sends all of its body before it reads
// gets that answer too: rotor drops what it sends after the answer
// before it closes (a lingering close, as nginx's), so that no reset
// reaches the client ahead of the answer.
func TestRefusedUploadGetsTheAnswer(t *testing.T) {
	answer := strings.Repeat("too large. ", 40)
	ln := testtool.ServeTCP(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		fmt.Fprintf(c, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(answer), answer)
		c.(*net.TCPConn).SetLinger(0) // reset, as a close with bytes unread does, at once
		c.Close()
	})
	r := startRotor(t, fmt.Sprintf(`admin: {listen: "off"}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app}
pools:
  - {name: app, retries: {attempts: 1}, endpoints: [{name: a, url: "http://%s"}]}
`, ln.Addr()), nil)
	const size = 4 << 20
	chunk := strings.Repeat("u", 64<<10)
	for _, tc := range []struct {
		name, head string
		body       func(w io.Writer) error
	}{
		{"of a length", fmt.Sprintf("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", size), func(w io.Writer) error {
			for range size / len(chunk) {
				if _, err := io.WriteString(w, chunk); err != nil {
					return err
				}
			}
			return nil
		}},
		{"chunked", "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", func(w io.Writer) error {
			for range size / len(chunk) {
				if _, err := fmt.Fprintf(w, "%x\r\n%s\r\n", len(chunk), chunk); err != nil {
					return err
				}
			}
			_, err := io.WriteString(w, "0\r\n\r\n")
			return err
		}},
	} {
		for _, read := range []string{"as it sends", "once it has sent"} {
			t.Run(tc.name+", read "+read, func(t *testing.T) {
				if read == "once it has sent" && !rawio.Supported {
					// net/http's server reads at most 256 KiB of a body its
					// handler left and closes without reading more.
					t.Skip("without raw socket access (-tags norawio) net/http's server closes without a lingering read")
				}
				for i := range 8 {
					c := dialWeb(t, r)
					io.WriteString(c, tc.head)
					sent := make(chan error, 1)
					go func() { sent <- tc.body(c) }()
					if read == "once it has sent" {
						err := <-sent
						if err != nil {
							t.Fatalf("upload %d: the body was cut (%v) before it was all sent", i, err)
						}
						sent <- err
					}
					resp, err := http.ReadResponse(bufio.NewReader(c), nil)
					var body []byte
					if err == nil {
						body, err = io.ReadAll(resp.Body)
					}
					if err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge || string(body) != answer {
						t.Fatalf("upload %d: %v, %v; want the backend's 413 whole", i, resp, err)
					}
					c.Close()
					<-sent
				}
			})
		}
	}
}

// A backend that resets its connection while the client holds the rest
// of its upload back fails the request at once, a 502 charged to the
// endpoint: net/http's transport waits, when its connection fails, for
// the goroutine sending the body, which waited in a read of the body for
// the client's next bytes, and the answer came at the body timeout as
// the client's 408.
func TestBackendResetWhileTheUploadWaits(t *testing.T) {
	testtool.NeedsRaw(t) // net/http's server's body cannot be stopped mid-read
	ln := testtool.ServeTCP(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		time.Sleep(200 * time.Millisecond) // the client has paused by now
		c.(*net.TCPConn).SetLinger(0)
	})
	r := startRotor(t, fmt.Sprintf(`admin: {listen: "off"}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app, timeouts: {body: 8s}}
pools:
  - {name: app, retries: {attempts: 1}, endpoints: [{name: a, url: "http://%s"}]}
`, ln.Addr()), nil)
	c := dialWeb(t, r)
	io.WriteString(c, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n"+strings.Repeat("u", 100000))
	start := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusBadGateway || time.Since(start) > 4*time.Second {
		t.Fatalf("%v, %v after %v; want a 502 at once, not the body timeout's 408", resp, err, time.Since(start))
	}
	s := r.Pools()[0].Snapshot.Get("a").Snapshot(time.Now())
	if s.Failures != 1 {
		t.Fatalf("the endpoint has %d failures, want the reset counted against it", s.Failures)
	}
}
