package server_test

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/internal/testtool"
)

// FuzzRawHTTP1 writes raw bytes into a listener, as a client may: rotor
// answers or closes, never panics (net/http would recover it and log it),
// and serves the next client as before.
func FuzzRawHTTP1(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"GET / HTTP/1.1\nHost: x\n\n",
		"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
		"GET http://x/ HTTP/1.1\r\nHost: y\r\nX-Forwarded-For: 1.2.3.4\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx",
		"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	a := newBackend(f, "a")
	cfg := strings.Replace(webConfig("round_robin", a), `listen: "127.0.0.1:0", routes:`,
		`listen: "127.0.0.1:0", max_header_bytes: 4096, max_body_bytes: 65536, timeouts: {body: 200ms, read_header: 500ms}, routes:`, 1)
	logs := &testtool.Buffer{}
	s := serve(f, writeConfig(f, cfg), nil, logs)
	addr := s.Addr("web").String()
	client := &http.Client{Timeout: 5 * time.Second}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(time.Second))
		_, _ = c.Write(raw)
		_ = c.(*net.TCPConn).CloseWrite() // all the client sends: rotor answers and closes
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 1<<20))
		c.Close()
		if strings.Contains(logs.String(), "panic") {
			t.Fatalf("rotor panicked on %q:\n%s", raw, logs.String())
		}
		resp, err := client.Get("http://" + addr + "/")
		if err != nil {
			t.Fatalf("after %q rotor does not answer: %v", raw, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("after %q: %d", raw, resp.StatusCode)
		}
	})
}
