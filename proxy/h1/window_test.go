package h1_test

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/rotor-lb/rotor/internal/rawio"
	"github.com/rotor-lb/rotor/proxy"
)

// An answer the short way sends chunked gives copies rawio.ChunkWindow's
// window on their buffer (net/http's, where the short way's server hands
// it every request, the whole buffer); one with a length, to HTTP/1.0 or
// to HEAD, the whole buffer. A body copied through the window arrives
// whole.
func TestServerChunkWindow(t *testing.T) {
	body := make([]byte, 3*proxy.CopyBuffer+17)
	for i := range body {
		body[i] = byte(i % 251)
	}
	buf := make([]byte, proxy.CopyBuffer)
	windows := make(chan int, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("length") {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		}
		w.WriteHeader(http.StatusOK)
		windows <- len(proxy.WindowOf(w, buf))
		_, _ = proxy.CopyAnswer(w, bytes.NewReader(body))
	})
	_, short := serveBoth(t, h, func(s *http.Server) { s.ErrorLog = discardLog })
	chunked := len(rawio.ChunkWindow(buf))
	if chunked == len(buf) {
		t.Fatalf("the chunk window is the whole buffer")
	}
	viaShort := chunked
	if !rawio.Supported { // the short way's server hands every request to net/http's
		viaShort = len(buf)
	}
	for _, tt := range []struct {
		path   string
		window int
		te     string
	}{
		{"/", viaShort, "chunked"},
		{"/?length", len(buf), ""},
	} {
		res, err := http.Get("http://" + short + tt.path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("%s: %d bytes (%v), want the %d sent", tt.path, len(got), err, len(body))
		}
		if te := strings.Join(res.TransferEncoding, ","); te != tt.te {
			t.Errorf("%s: Transfer-Encoding %q, want %q", tt.path, te, tt.te)
		}
		if w := <-windows; w != tt.window {
			t.Errorf("%s: a window of %d, want %d", tt.path, w, tt.window)
		}
	}
	for _, raw := range []string{"GET / HTTP/1.0\r\n\r\n", "HEAD / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"} {
		out := exchange(t, short, raw)
		if w := <-windows; w != len(buf) {
			t.Errorf("%q: a window of %d, want the whole buffer (%d); answered %.80q", raw, w, len(buf), out)
		}
	}
}
