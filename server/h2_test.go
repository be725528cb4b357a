package server_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rotor-lb/rotor/internal/testtool"
)

// h2Conn opens an HTTP/2 connection (TLS, ALPN h2) with the client's
// preface and settings sent.
func h2Conn(t *testing.T, addr string) (*tls.Conn, *http2.Framer) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return c, fr
}

// h2MaxStreams reads the server's first SETTINGS frame on c and returns
// its SETTINGS_MAX_CONCURRENT_STREAMS.
func h2MaxStreams(c net.Conn) (uint32, error) {
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return 0, err
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		return 0, err
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return 0, err
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			v, _ := sf.Value(http2.SettingMaxConcurrentStreams)
			return v, nil
		}
	}
}

func h2Headers(t *testing.T, authority, path string) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, hf := range []hpack.HeaderField{
		{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: authority}, {Name: ":path", Value: path},
	} {
		if err := enc.WriteField(hf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// tlsWeb starts rotor with an HTTPS listener in front of backend b and the
// listener settings given.
func tlsWeb(t *testing.T, b *backend, settings string) *rotor {
	t.Helper()
	certFile, keyFile := testtool.SelfSignedFiles(t, t.TempDir())
	cfg := strings.Replace(webConfig("round_robin", b), "routes:",
		fmt.Sprintf("%s tls: {cert: %q, key: %q}, routes:", settings, certFile, keyFile), 1)
	return startRotor(t, cfg, nil)
}

// openBlock starts rotor with an HTTPS listener and the settings given,
// connects over HTTP/2 and sends a HEADERS frame on stream 1 that does
// not end its header block.
func openBlock(t *testing.T, settings string) (addr string, c *tls.Conn, fr *http2.Framer) {
	t.Helper()
	r := tlsWeb(t, newBackend(t, "a"), settings)
	addr = r.Addr("web").String()
	c, fr = h2Conn(t, addr)
	t.Cleanup(func() { c.Close() })
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h2Headers(t, addr, "/"), EndHeaders: false}); err != nil {
		t.Fatal(err)
	}
	return addr, c, fr
}

func h2Get(t *testing.T, addr string) time.Duration {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	start := time.Now()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
		t.Fatalf("%s %d", resp.Proto, resp.StatusCode)
	}
	return time.Since(start)
}

// Rapid reset (CVE-2023-44487): a client that opens and cancels streams
// as fast as it can does not make rotor run a request for each, and
// other clients are served meanwhile.
func TestHTTP2RapidReset(t *testing.T) {
	a := newBackend(t, "a")
	a.set(0, 200*time.Millisecond)
	r := tlsWeb(t, a, "max_concurrent_streams: 100,")
	addr := r.Addr("web").String()
	h2Get(t, addr)
	c, fr := h2Conn(t, addr)
	defer c.Close()
	go func() { _, _ = io.Copy(io.Discard, c) }()
	block := h2Headers(t, addr, "/slow")
	const streams = 5000
	sent := 0
	for i := range streams {
		id := uint32(2*i + 1)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
			break // the server closed the connection: a defence too
		}
		if err := fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			break
		}
		sent++
	}
	if d := h2Get(t, addr); d > 3*time.Second {
		t.Fatalf("another client waited %v during the flood", d)
	}
	c.Close()
	if hits := a.count(); hits > streams/2 {
		t.Fatalf("%d of %d cancelled streams reached the backend", hits, sent)
	}
	ep := r.Pools()[0].Snapshot.Get("a")
	eventually(t, 10*time.Second, "every cancelled request ended", func() bool { return ep.State.Inflight() == 0 })
	t.Logf("%d streams opened and reset; %d reached the backend", sent, a.count())
}

// A CONTINUATION flood (CVE-2023-45288): a header block that never ends
// is cut at max_header_bytes, and the connection closed, long before the
// client has sent all it wanted to.
func TestHTTP2ContinuationFlood(t *testing.T) {
	addr, c, fr := openBlock(t, "max_header_bytes: 4096,")
	closed := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, c); close(closed) }()
	junk := bytes.Repeat([]byte{0x40, 0x03, 'x', '-', 'a', 0x01, 'b'}, 140) // literal headers, about 1 KiB
	sent := 0
	for range 10_000 { // 10 MB, if nobody stops it
		if err := fr.WriteContinuation(1, false, junk); err != nil {
			break
		}
		sent++
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the connection is still open after the flood")
	}
	if sent >= 10_000 {
		t.Fatalf("all %d CONTINUATION frames were accepted", sent)
	}
	h2Get(t, addr)
	t.Logf("connection closed after %d CONTINUATION frames of about 1 KiB", sent)
}

// A header block left open (HEADERS without END_HEADERS, then nothing)
// is held to the listener's read_header, as an HTTP/1.1 head is, not to
// its idle timeout.
func TestHTTP2HeaderBlockHeldToReadHeader(t *testing.T) {
	addr, c, _ := openBlock(t, "timeouts: {read_header: 300ms, idle: 1m},")
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatalf("the connection was not closed by rotor: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("a header block left open kept its connection for %v", d)
	}
	h2Get(t, addr)
}

// A stream the client resets, or whose connection it closes, ends its
// backend exchange at once: the backend below never answers, and the
// request leaves the endpoint's count in flight long before any timeout.
func TestHTTP2ResetCutsTheBackendExchange(t *testing.T) {
	a := newBackend(t, "a")
	a.Set(0, 0, true) // hangs until its client goes
	r := tlsWeb(t, a, "")
	addr := r.Addr("web").String()
	ep := r.Pools()[0].Snapshot.Get("a")
	for _, how := range []string{"RST_STREAM", "close"} {
		c, fr := h2Conn(t, addr)
		go func() { _, _ = io.Copy(io.Discard, c) }()
		hits := a.count()
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h2Headers(t, addr, "/hang"), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "the request at the backend", func() bool { return a.count() > hits && ep.State.Inflight() == 1 })
		start := time.Now()
		if how == "RST_STREAM" {
			if err := fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
				t.Fatal(err)
			}
		} else {
			c.Close()
		}
		eventually(t, 3*time.Second, "the exchange ended after "+how, func() bool { return ep.State.Inflight() == 0 })
		t.Logf("%s: the exchange ended %v after", how, time.Since(start))
		c.Close()
	}
}

// max_header_bytes holds over HTTP/2 too: a head counted as HTTP/1.1
// writes it is 431 past the limit, though HTTP/2's own bound (the limit
// and 4 KiB) took it.
func TestHTTP2MaxHeaderBytes(t *testing.T) {
	a := newBackend(t, "a")
	r := tlsWeb(t, a, "max_header_bytes: 2000,")
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	for _, tc := range []struct {
		size, want int
	}{{1500, 200}, {3000, 431}} {
		req, _ := http.NewRequest("GET", "https://"+r.Addr("web").String()+"/", nil)
		req.Header.Set("X-Big", strings.Repeat("a", tc.size))
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != tc.want {
			t.Errorf("a %d-byte field: %s %d, want %d", tc.size, resp.Proto, resp.StatusCode, tc.want)
		}
	}
	if n := a.count(); n != 1 {
		t.Fatalf("the backend saw %d requests, want the one within the limit", n)
	}
}

// A cleartext http listener serves HTTP/2 to a client that opens with its
// preface (prior knowledge, h2c), through the same lifecycle as HTTP/1.1:
// balanced, forwarded as plain http, recorded, under the listener's
// stream limit. An HTTP/1.1 client on the same listener is served as
// before, and a client asking to upgrade to h2c is served HTTP/1.1 with
// the upgrade not passed on (the backend would switch the whole
// connection to itself).
func TestHTTP2Cleartext(t *testing.T) {
	a, b := newBackend(t, "a"), newBackend(t, "b")
	cfg := "log: {access: true}\n" + strings.Replace(webConfig("round_robin", a, b), "routes:", "max_concurrent_streams: 7, routes:", 1)
	r := startRotor(t, cfg, nil)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	seen := map[string]int{}
	for range 4 {
		resp, err := client.Get(r.url("web") + "/h2c")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
			t.Fatalf("%s %d, want HTTP/2.0 200", resp.Proto, resp.StatusCode)
		}
		seen[string(body)]++
	}
	if seen["a"] != 2 || seen["b"] != 2 {
		t.Errorf("round robin over HTTP/2 without TLS: %v, want two each", seen)
	}
	if got := a.lastRequest().Header.Get("X-Forwarded-Proto"); got != "http" {
		t.Errorf("X-Forwarded-Proto %q, want http", got)
	}
	eventually(t, 3*time.Second, "the requests' access lines", func() bool {
		return strings.Count(r.logs.String(), "path=/h2c proto=HTTP/2.0 status=200") == 4
	})

	c, err := net.Dial("tcp", r.Addr("web").String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if streams, err := h2MaxStreams(c); err != nil || streams != 7 {
		t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS %d (%v), want the listener's 7", streams, err)
	}

	if _, body := get(t, r.url("web")+"/h1"); body != "a" && body != "b" {
		t.Errorf("HTTP/1.1 beside it: %q", body)
	}
	up, err := net.Dial("tcp", r.Addr("web").String())
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	_ = up.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprint(up, "GET /up HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(up), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	last := a.lastRequest()
	if b.lastRequest() != nil && b.lastRequest().URL.Path == "/up" {
		last = b.lastRequest()
	}
	if resp.StatusCode != 200 || last.URL.Path != "/up" || last.Header.Get("Upgrade") != "" || last.Header.Get("HTTP2-Settings") != "" {
		t.Errorf("an h2c upgrade: %d, the backend saw %s with Upgrade %q and HTTP2-Settings %q; want 200, no upgrade passed on",
			resp.StatusCode, last.URL.Path, last.Header.Get("Upgrade"), last.Header.Get("HTTP2-Settings"))
	}
}
