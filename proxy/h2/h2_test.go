package h2_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rotor-lb/rotor/internal/testtool"
	"github.com/rotor-lb/rotor/proxy/h1"
	"github.com/rotor-lb/rotor/proxy/h2"
)

// Every connection's goroutines, and every handler's, end with it.
func TestMain(m *testing.M) { testtool.VerifyNoLeaks(m) }

// testServer is an http.Server on 127.0.0.1 whose HTTP/2 is h2's.
type testServer struct {
	addr string
	hs   *http.Server
	srv  *h2.Server
}

func start(t *testing.T, h http.Handler, srv *h2.Server) *testServer {
	t.Helper()
	return startWith(t, h, srv, true)
}

// startCleartext is start without TLS: HTTP/2 with prior knowledge
// (ConfigureCleartext) beside HTTP/1.1.
func startCleartext(t *testing.T, h http.Handler, srv *h2.Server) *testServer {
	t.Helper()
	return startWith(t, h, srv, false)
}

func startWith(t *testing.T, h http.Handler, srv *h2.Server, withTLS bool) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if srv == nil {
		srv = &h2.Server{}
	}
	hs := &http.Server{Handler: h}
	if withTLS {
		cert, err := tls.X509KeyPair(testtool.SelfSigned(t))
		if err != nil {
			t.Fatal(err)
		}
		hs.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
		srv.Configure(hs)
		go func() { _ = hs.ServeTLS(ln, "", "") }()
	} else {
		srv.ConfigureCleartext(hs)
		go func() { _ = hs.Serve(ln) }()
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := hs.Shutdown(ctx); err != nil {
			hs.Close()
		}
	})
	return &testServer{addr: ln.Addr().String(), hs: hs, srv: srv}
}

func (s *testServer) url(path string) string { return "https://" + s.addr + path }

// client is Go's HTTP/2 client for s.
func (s *testServer) client(t *testing.T) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

func get(t *testing.T, c *http.Client, url string) (*http.Response, []byte) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ProtoMajor != 2 {
		t.Fatalf("answered over %s", resp.Proto)
	}
	return resp, body
}

// A small answer gets its length, a sniffed type and a date; the request
// arrives as net/http's HTTP/2 server would give it.
func TestSmallAnswer(t *testing.T) {
	var got *http.Request
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Clone(r.Context()) // its header map is not the handler's once it returns
		w.Header().Set("X-Up", "1")
		w.Header()["Connection"] = []string{"close"} // not HTTP/2's: dropped
		_, _ = io.WriteString(w, "<html>hello</html>")
	}), nil)
	req, _ := http.NewRequest("GET", s.url("/a/b?q=1"), nil)
	req.Header.Add("Cookie", "a=1")
	req.Header.Add("Cookie", "b=2")
	req.Header.Set("X-Many", "1")
	req.Header.Add("X-Many", "2")
	req.Header.Set("X-After", "z")
	resp, err := s.client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "<html>hello</html>" || resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Fatalf("%s %d %q", resp.Proto, resp.StatusCode, body)
	}
	if resp.ContentLength != int64(len(body)) || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" ||
		resp.Header.Get("Date") == "" || resp.Header.Get("X-Up") != "1" || resp.Header.Get("Connection") != "" {
		t.Fatalf("header %v, length %d", resp.Header, resp.ContentLength)
	}
	if got.Method != "GET" || got.URL.Path != "/a/b" || got.URL.RawQuery != "q=1" || got.RequestURI != "/a/b?q=1" ||
		got.Host != s.addr || got.Proto != "HTTP/2.0" || got.TLS == nil || got.RemoteAddr == "" ||
		got.Header.Get("Cookie") != "a=1; b=2" || !slices.Equal(got.Header["X-Many"], []string{"1", "2"}) ||
		got.Header.Get("X-After") != "z" || got.Body != http.NoBody {
		t.Fatalf("request %+v", got)
	}
	if got.Context().Value(http.ServerContextKey) != s.hs {
		t.Fatal("the request's context lacks its server")
	}
}

// A backend's header passed to the answer (h1.PassHeader) becomes the
// answer's own while the answer has no field of its own yet: a field set
// on it afterwards is sent. An answer with a field of its own gets a copy.
func TestPassHeaderTakesTheMap(t *testing.T) {
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("own") {
			w.Header().Set("X-Own", "1")
		}
		src := http.Header{"X-Backend": {"b"}}
		h1.PassHeader(w, src)
		src.Set("X-Later", "taken") // sent only if src became the answer's
		_, _ = io.WriteString(w, "ok")
	}), nil)
	c := s.client(t)
	resp, _ := get(t, c, s.url("/"))
	if resp.Header.Get("X-Backend") != "b" || resp.Header.Get("X-Later") != "taken" {
		t.Errorf("taken: header %v, want X-Backend and X-Later", resp.Header)
	}
	resp, _ = get(t, c, s.url("/?own"))
	if resp.Header.Get("X-Backend") != "b" || resp.Header.Get("X-Own") != "1" || resp.Header.Get("X-Later") != "" {
		t.Errorf("copied: header %v, want X-Backend and X-Own, no X-Later", resp.Header)
	}
}

// Bodies both ways, larger than every window, arrive whole, many streams
// at once on one connection.
func TestLargeBodiesBothWays(t *testing.T) {
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.Header().Set("X-Sum", fmt.Sprintf("%x", h.Sum(nil)))
		w.Header().Set("X-Len", fmt.Sprint(n))
		_, _ = io.CopyN(w, zeros{}, n)
	}), nil)
	c := s.client(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := bytes.Repeat([]byte{byte(i)}, 3<<20+i)
			resp, err := c.Post(s.url("/"), "application/octet-stream", bytes.NewReader(body))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			n, err := io.Copy(io.Discard, resp.Body)
			sum := sha256.Sum256(body)
			if err != nil || n != int64(len(body)) || resp.Header.Get("X-Sum") != fmt.Sprintf("%x", sum) {
				errs <- fmt.Errorf("stream %d: %d bytes back of %d, %v, sum %s", i, n, len(body), err, resp.Header.Get("X-Sum"))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// Trailers go both ways: the request's reach the handler after its body,
// the handler's (declared, and named with http.TrailerPrefix) follow the
// answer's body.
func TestTrailers(t *testing.T) {
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Trailer", "X-Echo")
		_, _ = io.WriteString(w, "body")
		w.Header().Set("X-Echo", r.Trailer.Get("X-In"))
		w.Header().Set(http.TrailerPrefix+"X-Late", "late")
	}), nil)
	req, _ := http.NewRequest("POST", s.url("/"), io.NopCloser(strings.NewReader("payload")))
	req.Trailer = http.Header{"X-In": {"sent after"}}
	resp, err := s.client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(body) != "body" {
		t.Fatalf("%q %v", body, err)
	}
	if resp.Trailer.Get("X-Echo") != "sent after" || resp.Trailer.Get("X-Late") != "late" {
		t.Fatalf("trailers %v", resp.Trailer)
	}
}

// An answer cut short (the handler aborts, or writes less than its
// Content-Length) is reset: the client sees an error, not a short body.
func TestCutAnswerIsReset(t *testing.T) {
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ok" {
			_, _ = io.WriteString(w, "whole")
			return
		}
		if r.URL.Path == "/short" {
			w.Header().Set("Content-Length", "100")
			_, _ = io.WriteString(w, "only this")
			return
		}
		_, _ = io.WriteString(w, "the start")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}), nil)
	c := s.client(t)
	for _, path := range []string{"/abort", "/short"} {
		resp, err := c.Get(s.url(path))
		if err != nil {
			continue // reset before the head: also not a whole answer
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Errorf("%s: the cut answer read as whole", path)
		}
	}
	if _, body := get(t, c, s.url("/ok")); string(body) != "whole" { // the connection still serves
		t.Fatalf("%q", body)
	}
}

// The client's reset ends the request's context; the handler's writes
// then fail.
func TestClientResetCancels(t *testing.T) {
	ended := make(chan error, 1)
	started := make(chan struct{})
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done()
		var err error
		for range 100 {
			if _, err = w.Write(make([]byte, 32<<10)); err != nil {
				break
			}
		}
		ended <- err
	}), nil)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", s.url("/"), nil)
	resp, err := s.client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	cancel()
	resp.Body.Close()
	select {
	case err := <-ended:
		if err == nil {
			t.Fatal("writes after the reset did not fail")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler did not see the reset")
	}
}

// 1xx answers go before the final one: 103 by the handler, 100 Continue
// when the handler first reads a body the client holds back for it.
func TestInformational(t *testing.T) {
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Expect") != "" {
			t.Error("Expect reached the handler")
		}
		w.Header().Set("Link", "</s.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	}), nil)
	var codes []int
	var mu sync.Mutex
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		mu.Lock()
		defer mu.Unlock()
		codes = append(codes, code)
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "POST", s.url("/"), strings.NewReader("abc"))
	req.Header.Set("Expect", "100-continue")
	c := s.client(t)
	c.Transport.(*http.Transport).ExpectContinueTimeout = 5 * time.Second
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if string(body) != "abc" || fmt.Sprint(codes) != "[103 100]" || time.Since(start) > 4*time.Second {
		t.Fatalf("%q, 1xx %v, after %v", body, codes, time.Since(start))
	}
}

// A read deadline (http.ResponseController) ends a body that stops
// coming.
func TestReadDeadline(t *testing.T) {
	got := make(chan error, 1)
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, err := io.ReadAll(r.Body)
		got <- err
		w.WriteHeader(408)
	}), nil)
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write([]byte("a little")) }()
	req, _ := http.NewRequest("POST", s.url("/"), pr)
	resp, err := s.client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := <-got; !errors.Is(err, os.ErrDeadlineExceeded) || resp.StatusCode != 408 {
		t.Fatalf("%v, %d", err, resp.StatusCode)
	}
}

// Shutdown lets a request in flight finish, sends GOAWAY, and the server
// stops once the connection has closed.
func TestGracefulShutdown(t *testing.T) {
	release := make(chan struct{})
	inside := make(chan struct{}, 1)
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside <- struct{}{}
		<-release
		_, _ = io.WriteString(w, "done")
	}), nil)
	c := s.client(t)
	type result struct {
		body string
		err  error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := c.Get(s.url("/"))
		if err != nil {
			res <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{string(b), err}
	}()
	<-inside
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stopped <- s.hs.Shutdown(ctx)
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-stopped:
		t.Fatalf("Shutdown returned with a request in flight: %v", err)
	default:
	}
	close(release)
	if r := <-res; r.err != nil || r.body != "done" {
		t.Fatalf("%q %v", r.body, r.err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}

// rawConn is a client that speaks frames, for what Go's client never
// sends.
type rawConn struct {
	t  *testing.T
	c  *tls.Conn
	fr *http2.Framer
}

func dialRaw(t *testing.T, addr string, settings ...http2.Setting) *rawConn {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawConn{t: t, c: c, fr: fr}
}

func (r *rawConn) headers(id uint32, end bool, fields ...string) {
	r.t.Helper()
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h2.EncodeBlock(fields...), EndStream: end, EndHeaders: true}); err != nil {
		r.t.Fatal(err)
	}
}

func request(addr, method, path string, extra ...string) []string {
	return append([]string{":method", method, ":scheme", "https", ":authority", addr, ":path", path}, extra...)
}

// until reads frames until match takes one, and returns it; it fails the
// test if the connection ends first.
func (r *rawConn) until(what string, match func(http2.Frame) bool) http2.Frame {
	r.t.Helper()
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			r.t.Fatalf("waiting for %s: %v", what, err)
		}
		if match(f) {
			return f
		}
	}
}

func (r *rawConn) reset(id uint32) http2.ErrCode {
	r.t.Helper()
	f := r.until(fmt.Sprintf("RST_STREAM on %d", id), func(f http2.Frame) bool {
		rf, ok := f.(*http2.RSTStreamFrame)
		return ok && rf.StreamID == id
	})
	return f.(*http2.RSTStreamFrame).ErrCode
}

func (r *rawConn) goAway() http2.ErrCode {
	r.t.Helper()
	f := r.until("GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	return f.(*http2.GoAwayFrame).ErrCode
}

func (r *rawConn) status(id uint32) string {
	r.t.Helper()
	f := r.until(fmt.Sprintf("HEADERS on %d", id), func(f http2.Frame) bool {
		hf, ok := f.(*http2.MetaHeadersFrame)
		return ok && hf.StreamID == id
	})
	return f.(*http2.MetaHeadersFrame).PseudoValue("status")
}

func hello(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/slow" {
		<-r.Context().Done() // the body is never read
		return
	}
	_, _ = io.Copy(io.Discard, r.Body)
	_, _ = io.WriteString(w, "hello")
}

// Malformed requests are refused stream by stream (RFC 9113, 8.1.1),
// and the connection goes on serving.
func TestMalformedRequests(t *testing.T) {
	s := start(t, http.HandlerFunc(hello), nil)
	r := dialRaw(t, s.addr)
	cases := []struct {
		name   string
		fields []string
	}{
		{"connection-specific field", request(s.addr, "GET", "/", "connection", "keep-alive")},
		{"transfer-encoding", request(s.addr, "GET", "/", "transfer-encoding", "chunked")},
		{"te other than trailers", request(s.addr, "GET", "/", "te", "gzip")},
		{"no path", []string{":method", "GET", ":scheme", "https", ":authority", s.addr}},
		{"unknown pseudo-field", request(s.addr, "GET", "/", ":protocol", "websocket")},
		{"bad method", request(s.addr, "G ET", "/")},
		{"bad content-length", request(s.addr, "GET", "/", "content-length", "-1")},
		{"content-length without a body", request(s.addr, "POST", "/", "content-length", "5")},
		// The header block's own checks (x/net's readMetaFrame's).
		{"upper-case name", request(s.addr, "GET", "/", "X-Upper", "1")},
		{"name not a token", request(s.addr, "GET", "/", "x a", "1")},
		{"value with a NUL", request(s.addr, "GET", "/", "x-a", "a\x00b")},
		{"value with a line break", request(s.addr, "GET", "/", "x-a", "a\r\nx-b: c")},
		{"pseudo-field after a regular one", append([]string{"x-a", "1"}, request(s.addr, "GET", "/")...)},
		{"repeated pseudo-field", request(s.addr, "GET", "/", ":path", "/again")},
		{"made-up pseudo-field", request(s.addr, "GET", "/", ":made-up", "1")},
		{"a response's pseudo-field", request(s.addr, "GET", "/", ":status", "200")},
	}
	id := uint32(1)
	for _, c := range cases {
		r.headers(id, true, c.fields...)
		if code := r.reset(id); code != http2.ErrCodeProtocol {
			t.Errorf("%s: %v", c.name, code)
		}
		id += 2
	}
	r.headers(id, true, request(s.addr, "GET", "/")...)
	if st := r.status(id); st != "200" {
		t.Fatalf("status %s after the malformed ones", st)
	}
}

// A body longer or shorter than its Content-Length is refused.
func TestContentLengthMismatch(t *testing.T) {
	s := start(t, http.HandlerFunc(hello), nil)
	r := dialRaw(t, s.addr)
	r.headers(1, false, request(s.addr, "POST", "/", "content-length", "3")...)
	_ = r.fr.WriteData(1, true, []byte("four"))
	if code := r.reset(1); code != http2.ErrCodeProtocol {
		t.Fatalf("longer: %v", code)
	}
	r.headers(3, false, request(s.addr, "POST", "/", "content-length", "5")...)
	_ = r.fr.WriteData(3, true, []byte("two"))
	if code := r.reset(3); code != http2.ErrCodeProtocol {
		t.Fatalf("shorter: %v", code)
	}
}

// Connection errors end the connection with GOAWAY and its code.
func TestConnectionErrors(t *testing.T) {
	s := start(t, http.HandlerFunc(hello), nil)
	cases := []struct {
		name string
		code http2.ErrCode
		send func(r *rawConn)
	}{
		{"even stream", http2.ErrCodeProtocol, func(r *rawConn) { r.headers(2, true, request(s.addr, "GET", "/")...) }},
		{"stream id going down", http2.ErrCodeProtocol, func(r *rawConn) {
			r.headers(5, true, request(s.addr, "GET", "/")...)
			r.headers(3, true, request(s.addr, "GET", "/")...)
		}},
		{"DATA on an idle stream", http2.ErrCodeProtocol, func(r *rawConn) { _ = r.fr.WriteData(7, true, []byte("x")) }},
		{"past the connection's window", http2.ErrCodeFlowControl, func(r *rawConn) {
			r.headers(1, false, request(s.addr, "POST", "/slow")...)
			chunk := make([]byte, 16<<10)
			for range (1<<20)/len(chunk) + 1 {
				if r.fr.WriteData(1, false, chunk) != nil {
					return
				}
			}
		}},
		{"window update past 2^31-1", http2.ErrCodeFlowControl, func(r *rawConn) {
			_ = r.fr.WriteWindowUpdate(0, 1<<31-1)
		}},
		{"PUSH_PROMISE from a client", http2.ErrCodeProtocol, func(r *rawConn) {
			_ = r.fr.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, EndHeaders: true})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := dialRaw(t, s.addr)
			c.send(r)
			if code := r.goAway(); code != c.code {
				t.Fatalf("GOAWAY %v, want %v", code, c.code)
			}
		})
	}
}

// A header block split over CONTINUATION frames is decoded whole; one
// that goes on past the header list's bound, or past a refused field,
// ends the connection, as it does with x/net's server.
func TestContinuation(t *testing.T) {
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Header.Get("X-Long"))
	}), &h2.Server{MaxHeaderBytes: 1 << 10})
	block := h2.EncodeBlock
	// send writes b as a HEADERS frame and CONTINUATION frames of n bytes.
	send := func(r *rawConn, id uint32, b []byte, n int) {
		first := b[:min(n, len(b))]
		rest := b[len(first):]
		if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: true, EndHeaders: len(rest) == 0}); err != nil {
			t.Fatal(err)
		}
		for len(rest) > 0 {
			p := rest[:min(n, len(rest))]
			rest = rest[len(p):]
			if err := r.fr.WriteContinuation(id, len(rest) == 0, p); err != nil {
				t.Fatal(err)
			}
		}
	}

	r := dialRaw(t, s.addr)
	long := strings.Repeat("l", 700)
	send(r, 1, block(request(s.addr, "GET", "/", "x-long", long)...), 50)
	f := r.until("the answer's DATA", func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok })
	if got := string(f.(*http2.DataFrame).Data()); got != long {
		t.Fatalf("a block in 50-byte pieces: answered %d bytes, want the 700 of X-Long", len(got))
	}

	cases := []struct {
		name   string
		fields []string
	}{
		// The bound is the listener's 1 KiB and 4 KiB of room.
		{"past the bound", request(s.addr, "GET", "/", "x-a", strings.Repeat("a", 3000), "x-b", strings.Repeat("b", 3000), "x-c", "ccccccccc")},
		{"past a refused field", request(s.addr, "GET", "/", "X-Upper", "1", "x-c", "ccccccccc")},
	}
	for _, c := range cases {
		r := dialRaw(t, s.addr)
		b := block(c.fields...)
		send(r, 1, b, len(b)-12) // x-c in the CONTINUATION; the bound, or the refusal, before it
		if code := r.goAway(); code != http2.ErrCodeProtocol {
			t.Errorf("%s, then a CONTINUATION: GOAWAY %v, want PROTOCOL_ERROR", c.name, code)
		}
	}
}

// The first frame after the preface must be SETTINGS; the preface itself
// must be right.
func TestPreface(t *testing.T) {
	s := start(t, http.HandlerFunc(hello), nil)
	c, err := tls.Dial("tcp", s.addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n\r\n\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("not closed: %v", err)
	}
	r := dialRaw(t, s.addr)
	r.c.Close()
	r = dialRaw(t, s.addr)
	_ = r.fr.WritePing(false, [8]byte{1})
	// The settings came first here, so the ping is answered.
	f := r.until("PING ack", func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && p.IsAck() })
	if f.(*http2.PingFrame).Data != [8]byte{1} {
		t.Fatal("the PING ack carries other data")
	}
}

// The client's window holds the answer back: with an initial window of
// zero no DATA comes until WINDOW_UPDATE opens it, and then exactly what
// it opens.
func TestClientWindow(t *testing.T) {
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(bytes.Repeat([]byte("z"), 100))
	}), nil)
	r := dialRaw(t, s.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	r.headers(1, true, request(s.addr, "GET", "/")...)
	if st := r.status(1); st != "200" {
		t.Fatal(st)
	}
	_ = r.c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			break // nothing more: the window is shut
		}
		if d, ok := f.(*http2.DataFrame); ok {
			t.Fatalf("DATA of %d bytes with the window shut", len(d.Data()))
		}
	}
	// Reading past the deadline leaves the TLS connection unusable:
	// another one shows the window opening.
	r = dialRaw(t, s.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	r.headers(1, true, request(s.addr, "GET", "/")...)
	r.status(1)
	_ = r.fr.WriteWindowUpdate(1, 30)
	got := 0
	f := r.until("DATA", func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok })
	got += len(f.(*http2.DataFrame).Data())
	if got != 30 {
		t.Fatalf("%d bytes for a window of 30", got)
	}
	_ = r.fr.WriteWindowUpdate(1, 70)
	for got < 100 {
		f := r.until("DATA", func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok })
		got += len(f.(*http2.DataFrame).Data())
		if f.(*http2.DataFrame).StreamEnded() {
			break
		}
	}
	if got != 100 {
		t.Fatalf("%d bytes of 100", got)
	}
}

// A client that never opens its window does not hold the handler longer
// than the idle timeout: its write fails and the stream is reset.
func TestShutWindowTimesOut(t *testing.T) {
	wrote := make(chan error, 1)
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		_, err := w.Write(make([]byte, 64<<10))
		wrote <- err
	}), &h2.Server{IdleTimeout: 300 * time.Millisecond})
	r := dialRaw(t, s.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	r.headers(1, true, request(s.addr, "GET", "/")...)
	go func() {
		for {
			if _, err := r.fr.ReadFrame(); err != nil {
				return
			}
		}
	}()
	select {
	case err := <-wrote:
		if err == nil {
			t.Fatal("the write succeeded with the window shut")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler is still waiting for the window")
	}
}

// Streams past SETTINGS_MAX_CONCURRENT_STREAMS are refused, and a header
// list past the limit is answered 431.
func TestLimits(t *testing.T) {
	release := make(chan struct{})
	var running atomic.Int32
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		running.Add(1)
		<-release
		_, _ = io.WriteString(w, "ok")
	}), &h2.Server{MaxConcurrentStreams: 2, MaxHeaderBytes: 1 << 10})
	defer close(release)
	r := dialRaw(t, s.addr)
	r.headers(1, true, request(s.addr, "GET", "/")...)
	r.headers(3, true, request(s.addr, "GET", "/")...)
	r.headers(5, true, request(s.addr, "GET", "/")...)
	if code := r.reset(5); code != http2.ErrCodeRefusedStream {
		t.Fatalf("third stream: %v", code)
	}
	r2 := dialRaw(t, s.addr)
	var big []string
	for i := range 20 {
		big = append(big, fmt.Sprintf("x-big-%d", i), strings.Repeat("b", 400))
	}
	r2.headers(1, true, request(s.addr, "GET", "/", big...)...)
	if st := r2.status(1); st != "431" {
		t.Fatalf("a header list of 8 KiB: %s", st)
	}
	// The two admitted streams' handlers start on goroutines of their
	// own: wait for them, then make sure no third one ran.
	for deadline := time.Now().Add(5 * time.Second); running.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := running.Load(); n != 2 {
		t.Fatalf("%d handlers ran", n)
	}
}

// A connection without streams is sent away after the idle timeout.
func TestIdleTimeout(t *testing.T) {
	s := start(t, http.HandlerFunc(hello), &h2.Server{IdleTimeout: 200 * time.Millisecond})
	r := dialRaw(t, s.addr)
	r.headers(1, true, request(s.addr, "GET", "/")...)
	r.status(1)
	start := time.Now()
	if code := r.goAway(); code != http2.ErrCodeNo {
		t.Fatal(code)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("GOAWAY after %v", d)
	}
}

// A header block must end within the read-header timeout once its
// HEADERS frame came: one left open ends the connection, long before the
// idle timeout would; one that ends in time leaves no bound behind it.
func TestHeaderBlockTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	s := start(t, http.HandlerFunc(hello), &h2.Server{IdleTimeout: time.Minute, ReadHeaderTimeout: timeout})
	b := h2.EncodeBlock(request(s.addr, "GET", "/")...)
	first := func(r *rawConn, id uint32) {
		if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b[:len(b)/2], EndStream: true}); err != nil {
			t.Fatal(err)
		}
	}

	r := dialRaw(t, s.addr)
	first(r, 1)
	begun := time.Now()
	for {
		if _, err := r.fr.ReadFrame(); err != nil {
			break // closed; or the client's own 10 s deadline
		}
	}
	if d := time.Since(begun); d < timeout-50*time.Millisecond || d > 5*time.Second {
		t.Fatalf("a header block left open: the connection ended after %v, want about %v", d, timeout)
	}

	r = dialRaw(t, s.addr)
	first(r, 1)
	time.Sleep(timeout / 3)
	if err := r.fr.WriteContinuation(1, true, b[len(b)/2:]); err != nil {
		t.Fatal(err)
	}
	if got := r.status(1); got != "200" {
		t.Fatalf("a block ended in time: status %s", got)
	}
	time.Sleep(2 * timeout)
	r.headers(3, true, request(s.addr, "GET", "/")...)
	if got := r.status(3); got != "200" {
		t.Fatalf("a request after a wait longer than the timeout, the block before it ended in time: status %s", got)
	}
}

// A body its handler gave up (closed) does not keep the connection's
// window: another stream's upload on the same connection goes through.
func TestClosedBodyGivesBackWindow(t *testing.T) {
	release := make(chan struct{})
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/closer" {
			r.Body.Close()
			<-release
			return
		}
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, n)
	}), nil)
	defer close(release)
	c := s.client(t)
	get(t, c, s.url("/warm")) // one connection for both
	go func() {
		resp, err := c.Post(s.url("/closer"), "", bytes.NewReader(make([]byte, 1<<20)))
		if err == nil {
			resp.Body.Close()
		}
	}()
	time.Sleep(200 * time.Millisecond)
	done := make(chan string, 1)
	go func() {
		resp, err := c.Post(s.url("/reader"), "", bytes.NewReader(make([]byte, 1<<20)))
		if err != nil {
			done <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- string(b)
	}()
	select {
	case got := <-done:
		if got != fmt.Sprint(1<<20) {
			t.Fatalf("the second upload: %s", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second upload waits for window the first one's dropped body holds")
	}
}

// A connection idle for longer than the write timeout still writes a
// large answer: the deadline is set for the writes about to be made.
func TestWriteAfterIdle(t *testing.T) {
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.CopyN(w, zeros{}, 1<<20)
	}), &h2.Server{IdleTimeout: 400 * time.Millisecond})
	r := dialRaw(t, s.addr)
	_ = r.fr.WriteWindowUpdate(0, 4<<20)
	_ = r.fr.WritePing(false, [8]byte{})
	r.until("PING ack", func(f http2.Frame) bool { _, ok := f.(*http2.PingFrame); return ok })
	time.Sleep(300 * time.Millisecond) // within the idle timeout, past its quarter
	r.headers(1, true, request(s.addr, "GET", "/")...)
	got := 0
	for {
		f := r.until("DATA", func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok })
		d := f.(*http2.DataFrame)
		got += len(d.Data())
		_ = r.fr.WriteWindowUpdate(1, uint32(len(d.Data())))
		if d.StreamEnded() {
			break
		}
	}
	if got != 1<<20 {
		t.Fatalf("%d bytes of %d", got, 1<<20)
	}
}

// h2spec, the HTTP/2 conformance suite (RFC 7540 and 7541, and the
// generic tests), against the server: every test passes.
func TestH2Spec(t *testing.T) {
	bin := testtool.Require(t, "h2spec")
	for _, tc := range []struct {
		name  string
		start func(*testing.T, http.Handler, *h2.Server) *testServer
		flags []string
		// What may fail: without TLS a connection that does not open
		// with HTTP/2's preface is an HTTP/1.1 one, answered 400 as
		// such (3.5 #2 wants the connection closed unanswered).
		mayFail []string
	}{
		{"tls", start, []string{"-t", "-k"}, nil},
		{"cleartext", startCleartext, nil, []string{"Sends invalid connection preface"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.start(t, http.HandlerFunc(hello), &h2.Server{MaxHeaderBytes: 64 << 10})
			host, port, _ := net.SplitHostPort(s.addr)
			report := t.TempDir() + "/report.xml"
			args := append([]string{"-h", host, "-p", port, "-o", "5", "-j", report}, tc.flags...)
			out, err := exec.Command(bin, args...).CombinedOutput()
			m := regexp.MustCompile(`(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed`).FindSubmatch(out)
			if m == nil {
				t.Fatalf("no summary from h2spec (%v):\n%s", err, out)
			}
			failed := regexp.MustCompile(`× \d+: (.*)`).FindAllSubmatch(failures(out), -1)
			for _, f := range failed {
				if !slices.Contains(tc.mayFail, string(f[1])) {
					t.Fatalf("h2spec: %s\n%s", m[0], failures(out))
				}
			}
			if n, _ := strconv.Atoi(string(m[4])); n != len(failed) {
				t.Fatalf("h2spec: %s, and %d failures listed:\n%s", m[0], len(failed), out)
			}
			t.Logf("h2spec: %s", m[0])
		})
	}
}

// Without TLS, a connection that opens with HTTP/2's preface is served
// HTTP/2 (prior knowledge), its requests with no TLS state, and one that
// does not is HTTP/1.1's, on the same listener.
func TestCleartext(t *testing.T) {
	var tlsSeen atomic.Bool
	s := startCleartext(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tlsSeen.Store(r.TLS != nil)
		fmt.Fprintf(w, "%s %s", r.Proto, r.Host)
	}), nil)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	h2c := &http.Transport{Protocols: &p}
	h1c := &http.Transport{}
	t.Cleanup(h2c.CloseIdleConnections)
	t.Cleanup(h1c.CloseIdleConnections)
	for _, tc := range []struct {
		tr   *http.Transport
		want string
	}{{h2c, "HTTP/2.0"}, {h1c, "HTTP/1.1"}} {
		resp, err := (&http.Client{Transport: tc.tr, Timeout: 10 * time.Second}).Get("http://" + s.addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := tc.want + " " + s.addr; string(body) != want || resp.Proto != tc.want {
			t.Errorf("answered %q over %s, want %q over %s", body, resp.Proto, want, tc.want)
		}
		if tlsSeen.Load() {
			t.Errorf("%s: the request has TLS state, over a connection without it", tc.want)
		}
	}
}

// failures is h2spec's list of failed tests, from its output's end.
func failures(out []byte) []byte {
	if i := bytes.Index(out, []byte("Failures:")); i >= 0 {
		return out[i:]
	}
	return out
}

// A request answered before its body has come is reset (NO_ERROR, RFC
// 9113 8.1); what the client sent on it before it saw the reset (DATA,
// its trailers) is dropped, not answered with a reset a frame, and the
// connection goes on: for each of a burst of such requests.
func TestEarlyAnswerDropsWhatFollows(t *testing.T) {
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "no, thanks") // the body unread
	}), nil)
	r := dialRaw(t, s.addr)
	const burst = 40 // more than a handful: every one is remembered
	for id := uint32(1); id < 2*burst; id += 2 {
		r.headers(id, false, request(s.addr, "POST", "/")...)
	}
	answered, reset := map[uint32]bool{}, map[uint32]bool{}
	for len(answered) < burst || len(reset) < burst {
		f, err := r.fr.ReadFrame()
		if err != nil {
			t.Fatalf("waiting for the early answers: %v", err)
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if st := f.PseudoValue("status"); st != "200" {
				t.Fatalf("stream %d answered %s", f.StreamID, st)
			}
			answered[f.StreamID] = true
		case *http2.RSTStreamFrame:
			if f.ErrCode != http2.ErrCodeNo || !answered[f.StreamID] {
				t.Fatalf("stream %d reset with %v (answered first: %v), want NO_ERROR after its answer", f.StreamID, f.ErrCode, answered[f.StreamID])
			}
			reset[f.StreamID] = true
		}
	}
	for id := uint32(1); id < 2*burst; id += 2 {
		if err := r.fr.WriteData(id, false, make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	r.headers(1, true, "x-trailer", "1")
	next := uint32(2*burst + 1)
	r.headers(next, true, request(s.addr, "GET", "/")...)
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			t.Fatalf("waiting for the next stream's answer: %v", err)
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			t.Fatalf("stream %d reset with %v after the early answer's reset", f.StreamID, f.ErrCode)
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v after the early answers' resets", f.ErrCode)
		case *http2.MetaHeadersFrame:
			if f.StreamID == next {
				if st := f.PseudoValue("status"); st != "200" {
					t.Fatalf("the next stream: %s", st)
				}
				return
			}
		}
	}
}

// A request refused for its header block closes its stream only: the
// body the client had started on it does not end the connection.
func TestRefusedHeadersThenData(t *testing.T) {
	s := start(t, http.HandlerFunc(hello), nil)
	r := dialRaw(t, s.addr)
	r.headers(1, false, request(s.addr, "POST", "/", "x-bad", "a\x00b")...)
	if code := r.reset(1); code != http2.ErrCodeProtocol {
		t.Fatal(code)
	}
	_ = r.fr.WriteData(1, true, []byte("late body"))
	r.headers(3, true, request(s.addr, "GET", "/")...)
	if st := r.status(3); st != "200" {
		t.Fatalf("the next stream: %s", st)
	}
}

// A connection's streams run on workers it keeps: requests in turn run on
// one goroutine, and a quarter second after its last stream ended the
// connection holds none, so the next request starts a new one.
func TestWorkersKeptWhileTheConnectionIsBusy(t *testing.T) {
	s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 64)
		fmt.Fprintf(w, "%s", bytes.Fields(buf[:runtime.Stack(buf, false)])[1]) // "goroutine N [running]"
	}), nil)
	c := s.client(t)
	var ids []string
	for i := range 3 {
		if i > 0 {
			// The last one's worker waits for the next stream.
			testtool.Eventually(t, 5*time.Second, "a spare worker", func() bool { return spares() == 1 })
		}
		_, body := get(t, c, s.url("/id"))
		ids = append(ids, string(body))
	}
	if ids[0] != ids[1] || ids[1] != ids[2] {
		t.Fatalf("three requests in turn ran on goroutines %v: want one worker for all", ids)
	}
	testtool.Eventually(t, 5*time.Second, "no worker on a connection idle for the linger", func() bool { return workers() == 0 })
	if _, body := get(t, c, s.url("/id")); string(body) == ids[0] {
		t.Fatalf("a request after the linger ran on worker %s, which should have ended", body)
	}
}

// workers counts the goroutines serving or waiting to serve streams;
// spares, those waiting.
func workers() int { w, _ := countWorkers(); return w }
func spares() int  { _, s := countWorkers(); return s }

func countWorkers() (all, waiting int) {
	buf := make([]byte, 1<<20)
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "h2.(*conn).work(") {
			all++
			// Waiting: work itself is the top of its stack.
			if lines := strings.SplitN(g, "\n", 3); len(lines) > 1 && strings.Contains(lines[1], "h2.(*conn).work(") {
				waiting++
			}
		}
	}
	return all, waiting
}

// A graceful GOAWAY reaches the client when the connection's last stream
// ends as it is being written: that end does not close the connection's
// sending side before it.
func TestGoAwayAsTheLastStreamEnds(t *testing.T) {
	for range 40 {
		release, inside := make(chan struct{}), make(chan struct{}, 1)
		s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inside <- struct{}{}
			<-release
		}), nil)
		r := dialRaw(t, s.addr)
		r.headers(1, true, request(s.addr, "GET", "/")...)
		<-inside
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = s.hs.Shutdown(ctx)
		}()
		close(release)
		if code := r.goAway(); code != http2.ErrCodeNo {
			t.Fatalf("GOAWAY %v, want %v", code, http2.ErrCodeNo)
		}
	}
}

// A connection error's GOAWAY reaches the client while a stream's answer
// is being written: neither the stream's end nor the writer left to flush
// it closes the connection first.
func TestConnectionErrorWhileAnswering(t *testing.T) {
	s := start(t, http.HandlerFunc(hello), nil)
	for range 100 {
		r := dialRaw(t, s.addr)
		r.headers(5, true, request(s.addr, "GET", "/")...)
		r.headers(3, true, request(s.addr, "GET", "/")...) // a stream id going down
		if code := r.goAway(); code != http2.ErrCodeProtocol {
			t.Fatalf("GOAWAY %v, want %v", code, http2.ErrCodeProtocol)
		}
		r.c.Close()
	}
}
