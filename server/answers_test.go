package server_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rotor-lb/rotor/internal/rawio"
	"github.com/rotor-lb/rotor/internal/testtool"
)

// seen is what a backend got: the request line's target, the Host, every
// field and the body.
type seen struct {
	Target, Host, Body string
	Header             http.Header
}

// answersBackend answers by path, as the cases of TestAnswersAsReverseProxy
// need, and sends what it was sent to got.
func answersBackend(t *testing.T, got chan<- seen, release <-chan struct{}) *httptest.Server {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		select {
		case got <- seen{Target: r.RequestURI, Host: r.Host, Body: string(body), Header: r.Header.Clone()}:
		case <-time.After(5 * time.Second): // sent more often than a case asks
		}
		h := w.Header()
		switch r.URL.Path {
		case "/plain":
			h["Connection"] = []string{"X-Hop"}
			h.Set("X-Hop", "1")
			h.Set("Keep-Alive", "timeout=5")
			h.Set("Proxy-Authenticate", "Basic")
			h.Add("Set-Cookie", "a=1")
			h.Add("Set-Cookie", "b=2")
			h.Set("X-Kept", "yes")
			io.WriteString(w, "hello")
		case "/echo":
			w.Write(body)
		case "/trailers":
			h.Set("Trailer", "X-Sum")
			io.WriteString(w, "body")
			h.Set("X-Sum", "42")
			if r.URL.Query().Has("late") {
				h.Set(http.TrailerPrefix+"X-Late", "unannounced")
			}
		case "/hints":
			h.Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			h.Del("Link")
			h.Set("X-Final", "1")
			io.WriteString(w, "final")
		case "/nolen":
			for i := range 3 {
				fmt.Fprintf(w, "part %d\n", i)
				w.(http.Flusher).Flush()
			}
		case "/nocontent":
			w.WriteHeader(http.StatusNoContent)
		case "/stream":
			h.Set("Content-Type", "text/event-stream; charset=utf-8")
			h.Set("Content-Length", "18") // a length does not hold a stream back
			io.WriteString(w, "data: 1\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-time.After(5 * time.Second):
			}
			io.WriteString(w, "data: 2\n\n")
		case "/upgrade", "/upgrade-other":
			proto := r.Header.Get("Upgrade")
			if r.URL.Path == "/upgrade-other" {
				proto = "other"
			}
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: %s\r\nConnection: Upgrade\r\nX-Up: 1\r\n\r\n", proto)
			brw.Flush()
			_, _ = io.Copy(c, brw) // echo until the client goes
		}
	}))
	t.Cleanup(be.Close)
	return be
}

// answer is what a client got: the informational answers, then the final
// one with its body and trailers. Date is left out: it is the time.
type answer struct {
	Interim        []http.Header
	Status         int
	Header         http.Header
	Body           string
	Trailer        http.Header
	UpgradedEchoed string
}

func exchange(t *testing.T, addr, raw string, upgrade bool) answer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var a answer
	method := strings.Fields(raw)[0]
	for {
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		resp.Header.Del("Date")
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			a.Interim = append(a.Interim, resp.Header)
			continue
		}
		a.Status, a.Header = resp.StatusCode, resp.Header
		if resp.StatusCode == http.StatusSwitchingProtocols && upgrade {
			io.WriteString(c, "ping")
			buf := make([]byte, 4)
			if _, err := io.ReadFull(br, buf); err != nil {
				t.Fatalf("%q: echo: %v", raw, err)
			}
			a.UpgradedEchoed = string(buf)
			return a
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%q: body: %v", raw, err)
		}
		a.Body, a.Trailer = string(b), resp.Trailer
		return a
	}
}

func receive(t *testing.T, got <-chan seen) seen {
	t.Helper()
	select {
	case s := <-got:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("the request did not reach the backend")
		return seen{}
	}
}

// sameAnswers sends one request through ReverseProxy (ref) and then
// through rotor, and asks that the backend (got) and the client see the
// same from both.
func sameAnswers(t *testing.T, got <-chan seen, ref, rotor func() answer, differs ...func(*seen)) {
	t.Helper()
	want := ref()
	// ReverseProxy passes a backend's 100 Continue on when net/http's
	// Transport reports it as a 1xx, which it does after it has begun
	// sending the body: the body's first read may have made the server
	// send its own 100 Continue by then, and the client gets two. rotor
	// passes it on before (Got100Continue); the reference's repeats are
	// dropped, and rotor's answer must have none.
	want.Interim = slices.CompactFunc(want.Interim, func(a, b http.Header) bool { return cmp.Equal(a, b) })
	wantSeen := receive(t, got)
	for _, d := range differs {
		d(&wantSeen) // where rotor means to differ from ReverseProxy
	}
	have := rotor()
	haveSeen := receive(t, got)
	if diff := cmp.Diff(wantSeen, haveSeen); diff != "" {
		t.Errorf("the backend got (-ReverseProxy's +rotor's)\n%s", diff)
	}
	if diff := cmp.Diff(want, have); diff != "" {
		t.Errorf("the client got (-ReverseProxy's +rotor's)\n%s", diff)
	}
}

// referenceProxy is httputil.ReverseProxy to target with rotor's
// forwarding fields for an untrusted client and rotor's 502.
func referenceProxy(target *url.URL) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
			host, _, _ := net.SplitHostPort(pr.In.RemoteAddr)
			pr.Out.Header.Set("X-Real-Ip", host)
			pr.Out.Host = pr.In.Host
		},
		// As rotor's transport for backends: a body waits for the
		// backend's 100 Continue.
		Transport: &http.Transport{DisableCompression: true, ExpectContinueTimeout: time.Second},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) {
			http.Error(w, "Bad Gateway", http.StatusBadGateway)
		},
	}
}

// rotor's reverse proxy passes requests and answers on as
// net/http/httputil's ReverseProxy (with rotor's forwarding headers)
// does: the same requests sent to both reach the backend the same, field
// for field, and come back the same: hop-by-hop fields dropped both ways
// (the fixed ones and those Connection names), "Te: trailers" kept,
// forwarding fields set afresh, no User-Agent added, a query net/url cannot
// parse cleaned, 1xx answers, announced and unannounced trailers, bodies of
// unknown length, HEAD and 204, an upgrade and a backend switching to a
// protocol it was not asked for.
func TestAnswersAsReverseProxy(t *testing.T) {
	got := make(chan seen, 1)
	release := make(chan struct{})
	be := answersBackend(t, got, release)
	target, _ := url.Parse(be.URL)
	ref := httptest.NewServer(referenceProxy(target))
	t.Cleanup(ref.Close)
	r := startRotor(t, webConfig("round_robin", &backend{&testtool.Backend{Server: be, Name: "a"}}), nil)

	// A chunked body of up to 64 KiB goes on with its length, as nginx
	// sends it, where ReverseProxy streams it chunked.
	withLength := func(n string) func(*seen) {
		return func(s *seen) { s.Header["Content-Length"] = []string{n} }
	}
	differs := map[string][]func(*seen){"a chunked body": {withLength("3")}}
	for _, tc := range []struct {
		name, raw string
		upgrade   bool
	}{
		{"hop-by-hop and forwarding fields", "GET /plain HTTP/1.1\r\nHost: h.test\r\nConnection: keep-alive, X-Secret\r\nConnection: x-other\r\n" +
			"X-Secret: s\r\nX-Other: o\r\nKeep-Alive: 5\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eDp5\r\nTE: deflate, Trailers\r\n" +
			"Forwarded: for=1.2.3.4\r\nX-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Host: evil.test\r\nX-Forwarded-Proto: https\r\nX-Real-IP: 6.6.6.6\r\n" +
			"Upgrade-Insecure-Requests: 1\r\nX-Many: a\r\nX-Many: b\r\n\r\n", false},
		{"a user agent", "GET /plain HTTP/1.1\r\nHost: h.test\r\nUser-Agent: curl/8.0\r\nTE: gzip\r\n\r\n", false},
		{"a query net/url cannot parse", "GET /plain?a=1;b=2&c=%zz&d=4 HTTP/1.1\r\nHost: h.test\r\n\r\n", false},
		{"a query that parses", "GET /plain?a=1&b=%20&c HTTP/1.1\r\nHost: h.test\r\n\r\n", false},
		{"a body", "POST /echo HTTP/1.1\r\nHost: h.test\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nabcde", false},
		{"a chunked body", "POST /echo HTTP/1.1\r\nHost: h.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", false},
		{"expecting 100-continue", "POST /echo HTTP/1.1\r\nHost: h.test\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\nabcde", false},
		{"trailers", "GET /trailers HTTP/1.1\r\nHost: h.test\r\nTE: trailers\r\n\r\n", false},
		{"unannounced trailers", "GET /trailers?late HTTP/1.1\r\nHost: h.test\r\n\r\n", false},
		{"early hints", "GET /hints HTTP/1.1\r\nHost: h.test\r\n\r\n", false},
		{"unknown length", "GET /nolen HTTP/1.1\r\nHost: h.test\r\n\r\n", false},
		{"no content", "GET /nocontent HTTP/1.1\r\nHost: h.test\r\n\r\n", false},
		{"HEAD", "HEAD /plain HTTP/1.1\r\nHost: h.test\r\n\r\n", false},
		{"upgrade", "GET /upgrade HTTP/1.1\r\nHost: h.test\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", true},
		{"upgrade to another protocol", "GET /upgrade-other HTTP/1.1\r\nHost: h.test\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sameAnswers(t, got,
				func() answer { return exchange(t, strings.TrimPrefix(ref.URL, "http://"), tc.raw, tc.upgrade) },
				func() answer { return exchange(t, r.Addr("web").String(), tc.raw, tc.upgrade) }, differs[tc.name]...)
		})
	}

	// An event stream is passed on as it comes: the first event reaches
	// the client while the backend holds the second back.
	c, _, resp := rawSend(t, r.Addr("web").String(), "GET /stream HTTP/1.1\r\nHost: h.test\r\n\r\n")
	defer c.Close()
	receive(t, got)
	first := make([]byte, len("data: 1\n\n"))
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "data: 1\n\n" {
		t.Fatalf("the first event did not come before the second was sent: %q, %v", first, err)
	}
	close(release)
	rest, err := io.ReadAll(resp.Body)
	if err != nil || string(rest) != "data: 2\n\n" {
		t.Fatalf("rest of the stream %q, %v", rest, err)
	}

	// What a client sends after its upgrade request, before the answer,
	// reaches the backend (ReverseProxy drops what the server had read
	// with the request).
	up, ubr, resp := rawSend(t, r.Addr("web").String(), "GET /upgrade HTTP/1.1\r\nHost: h.test\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\nearly")
	defer up.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %s", resp.Status)
	}
	receive(t, got)
	echo := make([]byte, len("early"))
	if _, err := io.ReadFull(ubr, echo); err != nil || string(echo) != "early" {
		t.Fatalf("bytes sent with the upgrade request: echoed %q, %v", echo, err)
	}
}

// The same over HTTP/2 (TLS), from a Go client: what an HTTP/2 request can
// carry reaches the backend as ReverseProxy sends it, and the answers, 1xx
// and trailers included, come back the same.
func TestAnswersAsReverseProxyOverHTTP2(t *testing.T) {
	got := make(chan seen, 1)
	be := answersBackend(t, got, nil)
	target, _ := url.Parse(be.URL)
	ref := httptest.NewUnstartedServer(referenceProxy(target))
	ref.EnableHTTP2 = true
	ref.StartTLS()
	t.Cleanup(ref.Close)
	r := tlsWeb(t, &backend{&testtool.Backend{Server: be, Name: "a"}}, "")
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true, DisableCompression: true}
	defer tr.CloseIdleConnections()
	send := func(base, method, target, body string, header http.Header) answer {
		t.Helper()
		var a answer
		trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			a.Interim = append(a.Interim, http.Header(h).Clone())
			return nil
		}}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), method, base+target, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body == "" {
			req.Body = http.NoBody
		}
		req.Host, req.Header = "h.test", header
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, target, err)
		}
		defer resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("%s %s: %s, want HTTP/2", method, target, resp.Proto)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s %s: body: %v", method, target, err)
		}
		resp.Header.Del("Date")
		a.Status, a.Header, a.Body, a.Trailer = resp.StatusCode, resp.Header, string(b), resp.Trailer
		return a
	}
	for _, tc := range []struct {
		name, method, target, body string
		header                     http.Header
	}{
		{"forwarding fields", "GET", "/plain", "", http.Header{"Te": {"trailers"}, "Forwarded": {"for=1.2.3.4"},
			"X-Forwarded-For": {"6.6.6.6"}, "X-Forwarded-Proto": {"http"}, "X-Many": {"a", "b"}, "User-Agent": {""}}},
		{"a user agent", "GET", "/plain", "", http.Header{"User-Agent": {"curl/8.0"}}},
		{"a query net/url cannot parse", "GET", "/plain?a=1;b=2&c=%zz&d=4", "", http.Header{}},
		{"a body", "POST", "/echo", "abcde", http.Header{"Content-Type": {"text/plain"}}},
		{"expecting 100-continue", "POST", "/echo", "abcde", http.Header{"Expect": {"100-continue"}}},
		{"trailers", "GET", "/trailers", "", http.Header{"Te": {"trailers"}}},
		{"unannounced trailers", "GET", "/trailers?late", "", http.Header{}},
		{"early hints", "GET", "/hints", "", http.Header{}},
		{"unknown length", "GET", "/nolen", "", http.Header{}},
		{"no content", "GET", "/nocontent", "", http.Header{}},
		{"HEAD", "HEAD", "/plain", "", http.Header{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sameAnswers(t, got,
				func() answer { return send(ref.URL, tc.method, tc.target, tc.body, tc.header.Clone()) },
				func() answer {
					return send("https://"+r.Addr("web").String(), tc.method, tc.target, tc.body, tc.header.Clone())
				})
		})
	}
}

// An answer the backend cuts after its head has gone to the client is cut
// for the client too (its body ends short of its length, the connection
// closed), and recorded: counted by its status and as broken. (Cut before
// anything went, the client gets the end of the connection alone.)
func TestCutAnswerIsAbortedAndRecorded(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("x", 50000))
		brw.Flush()
	}))
	t.Cleanup(be.Close)
	r := startRotor(t, webConfig("round_robin", &backend{&testtool.Backend{Server: be, Name: "a"}}), nil)
	c, err := net.Dial("tcp", r.Addr("web").String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET /cut HTTP/1.1\r\nHost: h.test\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || err != io.ErrUnexpectedEOF || len(body) > 50000 {
		t.Fatalf("status %d, %d bytes, %v: want 200 and at most the 50,000 bytes sent, then the end of the connection", resp.StatusCode, len(body), err)
	}
	admin := "http://" + r.Addr("admin").String() + "/metrics"
	eventually(t, 3*time.Second, "the cut answer recorded", func() bool {
		_, metrics := get(t, admin)
		return strings.Contains(metrics, `rotor_refused_total{listener="web",reason="broken"} 1`) &&
			strings.Contains(metrics, `rotor_requests_total{code="200",endpoint="a",kind="http",listener="web",pool="app"} 1`)
	})
}

// A body of up to 64 KiB that comes after its head is read whole before
// the request goes on: the backend gets it as it was sent, the client's
// connection stays open for its next request, and a client that expects
// 100 Continue is sent it by rotor, whose request then reaches the backend
// without the Expect (rotor has the body already, as nginx has).
func TestBodiesReadBeforeTheyGoOn(t *testing.T) {
	got := make(chan seen, 4)
	be := answersBackend(t, got, nil)
	r := startRotor(t, webConfig("round_robin", &backend{&testtool.Backend{Server: be, Name: "a"}}), nil)
	c, err := net.Dial("tcp", r.Addr("web").String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	body := strings.Repeat("0123456789abcdef", 2000) // 32,000 bytes
	fmt.Fprintf(c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", len(body))
	for i := 0; i < len(body); i += 8000 {
		time.Sleep(10 * time.Millisecond)
		io.WriteString(c, body[i:i+8000])
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	echoed, _ := io.ReadAll(resp.Body)
	if s := <-got; resp.StatusCode != 200 || string(echoed) != body || s.Body != body {
		t.Fatalf("a body in pieces: %d, %d bytes echoed, %d at the backend; want %d each way", resp.StatusCode, len(echoed), len(s.Body), len(body))
	}

	fmt.Fprintf(c, "PUT /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", len(body))
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusContinue {
		t.Fatalf("after the head of a request expecting 100 Continue, on the same connection: %v, %v", resp, err)
	}
	io.WriteString(c, body)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	echoed, _ = io.ReadAll(resp.Body)
	s := <-got
	// Built without the short way (norawio), net/http's server and
	// transport pass the Expect on, as they do a body over 64 KiB.
	if resp.StatusCode != 200 || string(echoed) != body || s.Body != body || rawio.Supported && s.Header.Get("Expect") != "" {
		t.Fatalf("a body after 100 Continue: %d, %d bytes echoed, %d at the backend with Expect %q; want %d each way and no Expect",
			resp.StatusCode, len(echoed), len(s.Body), s.Header.Get("Expect"), len(body))
	}
}
