package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rotor-lb/rotor/internal/testtool"
)

// A GET through rotor on its short way to the backend: a 103 Early Hints
// reaches the client before the answer, a chunked answer's trailer comes
// through, consecutive requests share one backend connection, and a
// connection the backend closed while idle costs the client nothing.
func TestBackendConnectionThroughRotor(t *testing.T) {
	var accepted, served atomic.Int32
	addr := testtool.Serve(t, func(c net.Conn) {
		defer c.Close()
		accepted.Add(1)
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			n := served.Add(1)
			fmt.Fprintf(c, "HTTP/1.1 103 Early Hints\r\nLink: </app.css>; rel=preload\r\n\r\n"+
				"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Served\r\n\r\n"+
				"%x\r\n%s\r\n0\r\nX-Served: %d\r\n\r\n", len(req.URL.Path), req.URL.Path, n)
			if n == 2 {
				return // close, unannounced, after the second answer
			}
		}
	})

	cfg := fmt.Sprintf(`admin: {listen: "off"}
listeners: [{name: web, kind: http, listen: "127.0.0.1:0", pool: app}]
pools: [{name: app, retries: {attempts: 1}, endpoints: [{name: a, url: "http://%s"}]}]
`, addr)
	r := startRotor(t, cfg, nil)
	for i := 1; i <= 3; i++ {
		var hints []string
		trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			hints = append(hints, fmt.Sprint(code, " ", h.Get("Link")))
			return nil
		}}
		ctx := httptrace.WithClientTrace(context.Background(), trace)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.url("web")+"/page", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "/page" {
			t.Fatalf("request %d: %d %q, want 200 /page (log: %s)", i, resp.StatusCode, body, r.logs)
		}
		if got := resp.Trailer.Get("X-Served"); got != fmt.Sprint(i) {
			t.Errorf("request %d: trailer X-Served %q, want %d", i, got, i)
		}
		if len(hints) != 1 || hints[0] != "103 </app.css>; rel=preload" {
			t.Errorf("request %d: informational answers %q, want the 103 with its Link", i, hints)
		}
	}
	// The first two shared a connection; the third found it closed and
	// went again, once, on a new one, with one try only allowed.
	if n := accepted.Load(); n != 2 {
		t.Errorf("the backend accepted %d connections, want 2", n)
	}
	if strings.Contains(r.logs.String(), "proxy error") {
		t.Errorf("a connection closed while idle was logged as an error: %s", r.logs)
	}
}
