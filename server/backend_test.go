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
	"net/url"
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

// A backend's head is bounded alike whichever way the request went (the
// short way for a GET, net/http's Transport for a POST) and whichever
// listener sent it (reverse, or a forward proxy's direct route): over the
// bound, the client gets 502, under it the answer.
func TestBackendHeadBound(t *testing.T) {
	const over, under = 1100, 900 // lines of 1 KB: over and under the 1 MiB bound
	addr := testtool.ServeRequests(t, func(c net.Conn, req *http.Request) bool {
		io.Copy(io.Discard, req.Body)
		lines := under
		if strings.HasSuffix(req.URL.Path, "/over") {
			lines = over
		}
		bw := bufio.NewWriter(c)
		bw.WriteString("HTTP/1.1 200 OK\r\n")
		for range lines {
			bw.WriteString("X-Filler: " + strings.Repeat("a", 1012) + "\r\n")
		}
		bw.WriteString("Content-Length: 2\r\n\r\nok")
		return bw.Flush() == nil
	})
	cfg := fmt.Sprintf(`admin: {listen: "off"}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app}
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes, allow_targets: [127.0.0.0/8]}
pools:
  - {name: app, retries: {attempts: 1}, endpoints: [{name: a, url: "http://%s"}]}
  - {name: routes, retries: {attempts: 1}, endpoints: [{name: direct, url: "direct://"}]}
`, addr)
	r := startRotor(t, cfg, nil)
	pu, _ := url.Parse("http://" + r.Addr("out").String())
	viaForward := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	for _, tt := range []struct {
		via    string
		client *http.Client
		base   string
	}{
		{"reverse", client, r.url("web")},
		{"forward", viaForward, "http://" + addr},
	} {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			for _, size := range []string{"over", "under"} {
				var body io.Reader
				if method == http.MethodPost {
					body = strings.NewReader("form=1")
				}
				req, _ := http.NewRequest(method, tt.base+"/"+size, body)
				resp, err := tt.client.Do(req)
				if err != nil {
					t.Fatalf("%s %s %s: %v", tt.via, method, size, err)
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				want := http.StatusOK
				if size == "over" {
					want = http.StatusBadGateway
				}
				if resp.StatusCode != want || want == http.StatusOK && string(got) != "ok" {
					t.Errorf("%s %s, head %s the bound: %d %q, want %d", tt.via, method, size, resp.StatusCode, got, want)
				}
			}
		}
	}
}
