package h1_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rotor-lb/rotor/internal/rawio"
	"github.com/rotor-lb/rotor/internal/testtool"
	"github.com/rotor-lb/rotor/proxy/h1"
)

// serveBoth starts a net/http server and the short way in front of
// another, both with handler h, and returns their addresses.
func serveBoth(t testing.TB, h http.Handler, set func(*http.Server)) (plain, short string) {
	return serveBothOver(t, h, set, nil)
}

// serveBothOver is serveBoth over TLS with cfg (both servers serving it
// as their TLSConfig), or cleartext when cfg is nil.
func serveBothOver(t testing.TB, h http.Handler, set func(*http.Server), cfg *tls.Config) (plain, short string) {
	t.Helper()
	mk := func() *http.Server {
		hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second}
		if cfg != nil {
			hs.TLSConfig = cfg.Clone() // net/http's ServeTLS adds to it
		}
		if set != nil {
			set(hs)
		}
		return hs
	}
	ln1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := mk()
	s := h1.NewServer(mk())
	if cfg != nil {
		go hs.ServeTLS(ln1, "", "")
		go s.ServeTLS(ln2)
	} else {
		go hs.Serve(ln1)
		go s.Serve(ln2)
	}
	t.Cleanup(func() {
		hs.Close()
		s.Close()
	})
	return ln1.Addr().String(), ln2.Addr().String()
}

var discardLog = log.New(io.Discard, "", 0)

var dateLine = regexp.MustCompile(`(?m)^Date: [^\r]*\r$`)

// exchange sends raw, half-closes, and returns everything the server
// wrote before it closed, its Date headers made alike.
func exchange(t testing.TB, addr, raw string) string { return exchangeOver(t, addr, raw, nil) }

// exchangeOver is exchange over TLS with cfg (HTTP/1.1 offered, the half
// close a close_notify alert), or cleartext when cfg is nil.
func exchangeOver(t testing.TB, addr, raw string, cfg *tls.Config) string {
	t.Helper()
	c, err := dialOver(addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	_ = c.(interface{ CloseWrite() error }).CloseWrite()
	b, _ := io.ReadAll(c)
	return dateLine.ReplaceAllString(string(b), "Date: -\r")
}

// dialOver connects to addr, over TLS with cfg when it is not nil.
func dialOver(addr string, cfg *tls.Config) (net.Conn, error) { return h1.DialOver(addr, cfg) }

// testTLS returns a server's TLS config with a self-signed certificate,
// and a client's that trusts it and offers HTTP/1.1.
func testTLS(t testing.TB) (server, client *tls.Config) { return h1.SelfSignedTLS(t) }

// longChunked is a chunked POST of a 6,000-byte head, the body "abc",
// then trailer.
func longChunked(trailer string) string {
	return "POST / HTTP/1.1\r\nHost: a\r\nX-Long: " + strings.Repeat("v", 6000) + "\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n" + trailer + "\r\n"
}

// extended is a chunked POST of a chunk of lead bytes (none if 0), then
// n chunks of size bytes, each size line with an extension of ext bytes.
func extended(lead, n, ext, size int) string {
	var b strings.Builder
	b.WriteString("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
	if lead > 0 {
		fmt.Fprintf(&b, "%x\r\n%s\r\n", lead, strings.Repeat("l", lead))
	}
	for range n {
		fmt.Fprintf(&b, "%x;%s\r\n%s\r\n", size, strings.Repeat("e", ext), strings.Repeat("d", size))
	}
	b.WriteString("0\r\n\r\n")
	return b.String()
}

// echo answers with what the handler saw of the request. A value over
// 256 bytes is told by its length and its ends, which keeps the answer
// under net/http's 2 KiB buffer: once that is written out, net/http's
// server drops a body the handler has not read yet, where the short way
// leaves it to be read.
func echo(w http.ResponseWriter, r *http.Request) {
	var keys []string
	for k := range r.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(w, "%s %s %s %s host=%q close=%v cl=%d body=%v ctx=%v\n", r.Method, r.RequestURI, r.URL, r.Proto,
		r.Host, r.Close, r.ContentLength, r.Body != nil, r.Context().Value(http.ServerContextKey) != nil)
	for _, k := range keys {
		fmt.Fprintf(w, "%s=[", k)
		for _, v := range r.Header[k] {
			if len(v) > 256 {
				fmt.Fprintf(w, " %d bytes %q...%q", len(v), v[:16], v[len(v)-16:])
			} else {
				fmt.Fprintf(w, " %q", v)
			}
		}
		fmt.Fprintf(w, " ]\n")
	}
	b, _ := io.ReadAll(r.Body)
	fmt.Fprintf(w, "read %q\n", b)
}

// chunkRead answers with what the handler read of the request's body,
// whether the read failed (not how: the two servers word it alike only
// for the errors they share), and the trailer.
func chunkRead(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	fmt.Fprintf(w, "cl=%d te=%q read %q failed=%v trailer=%v\n", r.ContentLength, r.TransferEncoding, b, err != nil, r.Trailer)
}

// gathered is a handler that writes an answer of no length in pieces
// of many sizes, each with write.
func gathered(write func(w io.Writer, s string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		write(w, strings.Repeat("h", 83))
		write(w, strings.Repeat("i", 3537))
		write(w, "eight...")
		for range 50 {
			write(w, strings.Repeat("s", 100))
		}
		w.(http.Flusher).Flush()
		write(w, strings.Repeat("j", 2048))
		write(w, strings.Repeat("k", 2049))
		w.(http.Flusher).Flush()
		write(w, strings.Repeat("l", 5000))
		write(w, "end")
	}
}

// chunkedPost is a chunked POST of body in chunks of up to size bytes,
// with trailer (its lines) after the last.
func chunkedPost(body string, size int, trailer string) string {
	var b strings.Builder
	b.WriteString("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
	for len(body) > 0 {
		n := min(size, len(body))
		fmt.Fprintf(&b, "%x\r\n%s\r\n", n, body[:n])
		body = body[n:]
	}
	b.WriteString("0\r\n" + trailer + "\r\n")
	return b.String()
}

// sum answers with what the handler read of the request's body, read
// whole: its length, its hash and how the read ended.
func sum(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	fmt.Fprintf(w, "%s cl=%d read %d %x %v\n", r.Method, r.ContentLength, len(b), sha256.Sum256(b), err)
}

// The short way answers every request byte for byte as net/http's
// server does (Date aside): framing, sniffing, trailers, 1xx, HTTP/1.0,
// pipelining, closing; and what it leaves to net/http is answered by
// it, on the same connection.
func TestServerAnswersAsNetHTTP(t *testing.T) { answersAsNetHTTP(t, nil, nil) }

// The same over TLS: the short way's ServeTLS against net/http's, each
// request sent over a TLS connection of its own.
func TestServerAnswersAsNetHTTPOverTLS(t *testing.T) {
	server, client := testTLS(t)
	answersAsNetHTTP(t, server, client)
}

func answersAsNetHTTP(t *testing.T, server, client *tls.Config) {
	get := "GET /a?b=c HTTP/1.1\r\nHost: example.com\r\n\r\n"
	big := strings.Repeat("x", 5000)
	cases := []struct {
		name, req string
		h         http.HandlerFunc
	}{
		{"small body sniffed and counted", get, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "<html>hi") }},
		{"length and type given", get, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "5")
			w.Header().Set("Content-Type", "a/b")
			io.WriteString(w, "hello")
		}},
		{"nothing written", get, func(w http.ResponseWriter, r *http.Request) {}},
		{"big body chunked", get, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(big)) }},
		// Chunks larger than the writer's buffer, written when nothing
		// waits in it: each leaves with its size line and its end in one
		// call, a large one across many turns of a full socket.
		{"big chunks after a flush", get, func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte("a"))
			w.(http.Flusher).Flush()
			w.Write([]byte(big + big))
			w.(http.Flusher).Flush()
			w.Write(bytes.Repeat([]byte("0123456789abcdef"), 1<<18))
		}},
		// The client half-closes after its request (exchangeOver does):
		// a handler still running once the connection is watched sees its
		// context end, and its answer goes whole all the same.
		{"slow handler, client half-closed", get, func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(400 * time.Millisecond)
			io.WriteString(w, "late")
		}},
		// Writes gathered into chunks of 2 KiB as net/http gathers them:
		// a write that overflows what is held fills it and the rest waits,
		// one larger than the room left goes whole when nothing is held
		// (a string does not), and a flush or the end sends what is held.
		{"small writes gathered into chunks", get, gathered(func(w io.Writer, s string) { w.Write([]byte(s)) })},
		{"strings gathered into chunks", get, gathered(func(w io.Writer, s string) { io.WriteString(w, s) })},
		{"big body to HTTP/1.0", "GET / HTTP/1.0\r\nHost: a\r\n\r\n", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(big)) }},
		{"HTTP/1.0 keep-alive", "GET / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n",
			func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.URL.Path) }},
		{"HTTP/1.0 keep-alive, unknown length", "GET / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.0\r\nHost: a\r\n\r\n",
			func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(big)) }},
		{"HEAD", "HEAD / HTTP/1.1\r\nHost: a\r\n\r\n", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "10")
		}},
		{"HEAD, body written", "HEAD / HTTP/1.1\r\nHost: a\r\n\r\n", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "<p>counted, sniffed, dropped")
		}},
		{"HEAD, long body written", "HEAD / HTTP/1.1\r\nHost: a\r\n\r\n" + get, func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(big))
		}},
		{"204 drops its length", get, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "3")
			w.WriteHeader(http.StatusNoContent)
		}},
		{"304 drops its type", get, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "a/b")
			w.Header().Set("Etag", `"x"`)
			w.WriteHeader(http.StatusNotModified)
		}},
		{"declared trailers", get, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Sum, X-None")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "body")
			w.Header().Set("X-Sum", "42")
		}},
		{"prefixed trailers", get, func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "body")
			w.(http.Flusher).Flush()
			w.Header().Set(http.TrailerPrefix+"X-Late", "1")
		}},
		{"flushed", get, func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "a")
			w.(http.Flusher).Flush()
			io.WriteString(w, "b")
		}},
		{"103 early hints", get, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</s.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			io.WriteString(w, "done")
		}},
		{"client asks to close", "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nGET /never HTTP/1.1\r\nHost: a\r\n\r\n",
			func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.URL.Path) }},
		{"close as a word in a Connection value", "GET / HTTP/1.1\r\nHost: a\r\nConnection: x Close\r\n\r\n" + get, echo},
		{"HTTP/1.0 keep-alive and close", "GET / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive, close\r\n\r\n" + get,
			func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.URL.Path) }},
		{"HTTP/1.0 keep-alive as a word", "GET / HTTP/1.0\r\nHost: a\r\nConnection: x keep-alive\r\n\r\n" + get,
			func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.URL.Path) }},
		{"handler asks to close", get + get, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
			io.WriteString(w, "bye")
		}},
		{"pipelined", get + "GET /two HTTP/1.1\r\nHost: b\r\n\r\n" + get, echo},
		// Each request's header map is read into one an earlier request
		// gave back: it must hold nothing of that one.
		{"pipelined, each its own fields", "GET / HTTP/1.1\r\nHost: a\r\nX-One: 1\r\nAccept: a/b\r\n\r\n" +
			"GET /two HTTP/1.1\r\nHost: a\r\nX-Two: 2\r\n\r\nGET /three HTTP/1.1\r\nHost: a\r\n\r\n" + get, echo},
		{"names repeated past the eighth", "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\nF: 1\r\nG: 1\r\nH: 1\r\n" +
			"I: 1\r\nJ: 1\r\nA: 2\r\nH: 2\r\nI: 2\r\nK: 1\r\nJ: 2\r\nJ: 3\r\n\r\n", echo},
		{"Connection twice, close in the second", "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n" + get, echo},
		{"request as the handler sees it", "GET /p%20q/r?s=t HTTP/1.1\r\nhost: Example.com:80\r\nx-lower: 1\r\nX-Two: a\r\nX-Two:  b \r\n" +
			"Pragma: no-cache\r\nCookie: a=1\r\nCookie: b=2\r\nContent-Length: 0\r\n\r\n", echo},
		{"more than the length given", get, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "2")
			_, err := io.WriteString(w, "abc")
			fmt.Fprint(w, err)
		}},
		{"less than the length given", get + get, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "10")
			io.WriteString(w, "abc")
		}},
		{"invalid length dropped", get, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "abc")
			io.WriteString(w, "x")
		}},
		{"identity", get + get, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Transfer-Encoding", "identity")
			io.WriteString(w, "x")
		}},
		{"unknown status", get, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(599) }},
		{"line breaks in values", get, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Split", "a\r\nSet-Cookie: evil")
			w.Header()["Bad Name"] = []string{"x"}
		}},
		{"panic", get, func(w http.ResponseWriter, r *http.Request) { panic("boom") }},
		{"abort cuts the body", get, func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "part")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}},
		// Left to net/http, on the same connection after a first request
		// the short way served.
		{"body", get + "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc" + get, echo},
		{"body with leading zeros", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 003\r\n\r\nabc" + get, echo},
		{"body not read by the handler", "PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello" + get,
			func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Method) }},
		{"body shorter than its length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9\r\n\r\nabc", echo},
		// Read whole before the handler runs (the handler reads it whole
		// too: the pieces it reads it in are not the answer's), up to
		// 64 KiB; a longer one streams through net/http's server.
		{"body longer than the buffer", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5000\r\n\r\n" + big + get, sum},
		{"body longer than the buffer, expecting 100 Continue", "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n" + big + get, sum},
		{"body of the most read first", fmt.Sprintf("PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s", h1.MaxInHand, strings.Repeat("m", h1.MaxInHand)) + get, sum},
		{"body over the most read first", fmt.Sprintf("PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s", h1.MaxInHand+1, strings.Repeat("m", h1.MaxInHand+1)) + get, sum},
		{"body longer than the buffer, cut short", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9000\r\n\r\n" + big, sum},
		{"length with a sign", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\nabc", echo},
		{"two lengths alike", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", echo},
		{"GET with a body", "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi" + get, echo},
		{"chunked body", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", echo},
		// Read as the handler reads it: chunked, or longer than is
		// read first.
		{"chunked body of many chunks, then a request", chunkedPost(strings.Repeat("c", 6000), 100, "") + get, sum},
		{"chunked body of one chunk longer than the buffer", chunkedPost(big+big, 10000, "") + get, sum},
		{"chunked body, sizes in upper case, extensions and spaces", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n" +
			"A;name=value\r\n0123456789\r\n1 \t\r\nx\r\n0;last\r\n\r\n" + get, chunkRead},
		{"chunked body with a trailer", chunkedPost("abc", 3, "X-Sum: 1\r\nX-Two: a \r\nx-two: b\r\n") + get, chunkRead},
		{"chunked body, trailer declared", "POST / HTTP/1.1\r\nHost: a\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX-Sum: 2\r\n\r\n" + get, chunkRead},
		{"chunked body, bad size", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n" + get, chunkRead},
		{"chunked body, size too long", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\nabc\r\n0\r\n\r\n" + get, chunkRead},
		{"chunked body, space before an extension", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3 ;x\r\nabc\r\n0\r\n\r\n" + get, chunkRead},
		{"chunked body, no CRLF after the data", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n" + get, chunkRead},
		{"chunked body, bare LF after a size", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\r\n0\r\n\r\n" + get, chunkRead},
		{"chunked body cut short", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", chunkRead},
		{"chunked body cut in its trailer", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\nX: 1\r\n", chunkRead},
		{"chunked body, expecting 100 Continue", "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n" + get, echo},
		{"chunked and a length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" + get, chunkRead},
		{"chunked twice", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" + get, chunkRead},
		{"chunked on HTTP/1.0", "POST / HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", chunkRead},
		{"bare LF ends the trailer", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\n" + get, chunkRead},
		{"bare LF ends the trailer, then the client's end", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\n", chunkRead},
		{"trailer of bare LFs, then the client's end", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\n\n", chunkRead},
		{"trailer of bare LFs, then a request", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\n\n" + get, chunkRead},
		{"trailer line continued", chunkedPost("abc", 3, "X-T: a\r\n b\r\n") + get, chunkRead},
		{"trailer opening with a space", chunkedPost("abc", 3, " X-T: a\r\n") + get, chunkRead},
		{"trailer line with no colon", chunkedPost("abc", 3, "X-T\r\n") + get, chunkRead},
		{"trailer name with a space", chunkedPost("abc", 3, "X T: 1\r\n") + get, chunkRead},
		{"trailer naming the length", chunkedPost("abc", 3, "Content-Length: 9\r\nHost: b\r\n") + get, chunkRead},
		{"bare LF in a trailer", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\n\r\n" + get, chunkRead},
		{"bare LF after a chunk", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\n0\r\n\r\n" + get, chunkRead},
		{"size line of 4,094 bytes", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1;" + strings.Repeat("e", 4092) + "\r\nx\r\n0\r\n\r\n" + get, chunkRead},
		{"size line of 4,095 bytes", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1;" + strings.Repeat("e", 4093) + "\r\nx\r\n0\r\n\r\n" + get, chunkRead},
		// Extensions are read and dropped: net/http's reader takes 16
		// bytes of framing a chunk, twice its data and 16 KiB besides.
		{"extensions within the data's allowance", extended(0, 40, 3000, 4000) + get, chunkRead},
		{"extensions of five chunks over their data", extended(0, 5, 3000, 1) + get, chunkRead},
		{"extensions of six chunks over their data", extended(0, 6, 3000, 1) + get, chunkRead},
		{"extensions over the data, past what is read first", extended(70000, 6, 3000, 1) + get, chunkRead},
		{"CR in a chunk's size line", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;x\r\r\nabc\r\n0\r\n\r\n", chunkRead},
		{"gzip, chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", chunkRead},
		{"length of 18 digits", "PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 100000000000000000\r\n\r\nabc", chunkRead},
		{"length of 19 digits", "PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 1000000000000000000\r\n\r\nabc", chunkRead},
		{"expect", "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi", echo},
		{"two hosts", get + "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", echo},
		{"no host", "GET / HTTP/1.1\r\n\r\n", echo},
		{"bad host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", echo},
		{"bare LF", "GET / HTTP/1.1\nHost: a\n\n", echo},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n", echo},
		{"space before colon", "GET / HTTP/1.1\r\nHost: a\r\nX : a\r\n\r\n", echo},
		{"bad name", "GET / HTTP/1.1\r\nHost: a\r\nX(y): a\r\n\r\n", echo},
		{"control in value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n", echo},
		{"absolute form", "GET http://a:8080/b?c HTTP/1.1\r\nHost: other\r\n\r\n", echo},
		{"absolute form with a user", "GET http://u:p@a/b HTTP/1.1\r\nHost: a\r\n\r\n", echo},
		{"absolute form, https", "GET https://a/b HTTP/1.1\r\nHost: a\r\n\r\n", echo},
		{"absolute form, upper case scheme", "GET HTTP://a/b HTTP/1.1\r\nHost: a\r\n\r\n", echo},
		{"absolute form without a host header", "GET http://a/b HTTP/1.1\r\n\r\n", echo},
		{"authority form", "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n", echo},
		{"asterisk", "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", echo},
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", echo},
		{"HTTP/0.9", "GET /\r\n\r\n", echo},
		{"unknown version", "GET / HTTP/1.2\r\nHost: a\r\n\r\n", echo},
		{"space in target", "GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", echo},
		{"bad method", "G(T / HTTP/1.1\r\nHost: a\r\n\r\n", echo},
		{"empty line first", "\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", echo},
		{"long head", "GET / HTTP/1.1\r\nHost: a\r\nX-Long: " + strings.Repeat("v", 6000) + "\r\n\r\n", echo},
		// Read on in the long buffer, a chunked body's lines and trailer
		// are held to net/http's 4 KiB all the same.
		{"long head, then a trailer of 4 KiB", longChunked("X-T: "+strings.Repeat("t", 4080)+"\r\n") + get, chunkRead},
		{"long head, then a trailer over 4 KiB", longChunked("X-T: "+strings.Repeat("t", 5000)+"\r\n") + get, chunkRead},
		{"long head, then a size line of 4,095 bytes", strings.Replace(longChunked(""), "3\r\n", "3;"+strings.Repeat("e", 4091)+"\r\n", 1) + get, chunkRead},
		{"upgrade", "GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n", echo},
		{"length not zero", "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx", echo},
		{"two lengths", "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n", echo},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			plain, short := serveBothOver(t, tc.h, func(hs *http.Server) { hs.ErrorLog = discardLog }, server)
			want := exchangeOver(t, plain, tc.req, client)
			start := time.Now()
			got := exchangeOver(t, short, tc.req, client)
			// The exchange half-closes: an answer that comes only with
			// the idle timeout (5 s) is a connection that missed the end.
			// Under 4 s: the 4 MiB case took 2.1 s on a loaded machine.
			if d := time.Since(start); d > 4*time.Second {
				t.Errorf("the short way took %v to answer and close", d)
			}
			if want == "" && tc.name != "panic" && tc.name != "abort cuts the body" {
				t.Fatal("net/http answered nothing")
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("the short way's answer differs from net/http's (-net/http +short):\n%s", diff)
			}
		})
	}
}

// Over TLS the short way serves HTTP/1.1 after the handshake, its
// requests carrying the connection's TLS state, and so do those it hands
// to net/http on the same connection; a connection that chose HTTP/2
// goes to the server's TLSNextProto; a client that speaks plain HTTP gets
// net/http's 400, and its failed handshake is logged as net/http logs
// it; a client that never begins one is closed after the head timeout.
func TestServerTLS(t *testing.T) {
	server, client := testTLS(t)
	o := over{server: server, client: client}
	type seen struct {
		short bool
		tls   *tls.ConnectionState
	}
	got := make(chan seen, 10)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{h1.HeadBounded(r), r.TLS}
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})
	var logged testtool.Buffer
	_, addr, _ := o.start(t, &http.Server{Handler: h, ErrorLog: log.New(&logged, "", 0), ReadHeaderTimeout: 500 * time.Millisecond,
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){
			"h2": func(_ *http.Server, c *tls.Conn, _ http.Handler) {
				io.WriteString(c, "h2 here")
				c.Close()
			},
		}})

	c, br := o.dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	readAnswer(t, br)
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
	readAnswer(t, br)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n")
	readAnswer(t, br)
	for i, short := range []bool{rawio.Supported, rawio.Supported, false} {
		s := <-got
		if s.short != short {
			t.Errorf("request %d served the short way: %v, want %v", i, s.short, short)
		}
		if s.tls == nil || !s.tls.HandshakeComplete || s.tls.NegotiatedProtocol != "http/1.1" || s.tls.Version != tls.VersionTLS13 {
			t.Errorf("request %d: TLS state %+v, want the connection's", i, s.tls)
		}
	}

	h2 := client.Clone()
	h2.NextProtos = []string{"h2", "http/1.1"}
	c2, err := tls.Dial("tcp", addr, h2)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_ = c2.SetDeadline(time.Now().Add(5 * time.Second))
	if b, _ := io.ReadAll(c2); string(b) != "h2 here" {
		t.Errorf("a connection that chose h2 got %q, want TLSNextProto's answer", b)
	}

	plain, short := serveBothOver(t, h, func(hs *http.Server) { hs.ErrorLog = discardLog }, server)
	req := "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
	want := exchange(t, plain, req)
	if !strings.HasPrefix(want, "HTTP/1.0 400 Bad Request") {
		t.Fatalf("net/http answered plain HTTP on TLS with %q", want)
	}
	if got := exchange(t, short, req); got != want {
		t.Errorf("plain HTTP on TLS: %q, want net/http's %q", got, want)
	}
	if got := exchange(t, addr, req); got != want {
		t.Errorf("plain HTTP on TLS: %q, want net/http's %q", got, want)
	}
	for wait := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		l := logged.String()
		if strings.Contains(l, "http: TLS handshake error from 127.0.0.1:") &&
			strings.Contains(l, "client sent an HTTP request to an HTTPS server") {
			break
		}
		if time.Now().After(wait) {
			t.Errorf("log %q, want the failed handshake", l)
			break
		}
	}

	raw, rawR := over{}.dial(t, addr)
	start := time.Now()
	if d := waitClosed(t, raw, rawR, start); d < 400*time.Millisecond || d > 3*time.Second {
		t.Errorf("a client that never began its handshake was closed after %v, want about 500ms", d)
	}
	select {
	case s := <-got:
		t.Errorf("a request too many: %+v", s)
	default:
	}
}

// A client that pipelines more than the read buffer holds gets every
// answer, when the buffer fills at a request's end too (64-byte requests,
// 64 to a buffer): the socket still holds the rest, whose readiness the
// wait before the read that filled the buffer took, so the connection
// must read it before it waits for more.
func TestServerPipelinesPastItsBuffer(t *testing.T) {
	for _, o := range overs(t) {
		t.Run(o.name, func(t *testing.T) {
			_, addr, _ := o.start(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, r.URL.Path)
			})})
			for _, size := range []int{64, 61, 100} {
				c, br := o.dial(t, addr)
				_ = c.SetDeadline(time.Now().Add(3 * time.Second))
				var all strings.Builder
				for i := range 200 {
					line := fmt.Sprintf("GET /%03d HTTP/1.1\r\nHost: a\r\n\r\n", i)
					all.WriteString(line[:5] + strings.Repeat("x", size-len(line)) + line[5:])
				}
				io.WriteString(c, all.String())
				for i := range 200 {
					if _, body := readAnswer(t, br); !strings.HasSuffix(body, fmt.Sprintf("%03d", i)) {
						t.Fatalf("%d-byte requests: answer %d %q", size, i, body)
					}
				}
			}
		})
	}
}

// startShort serves h the short way with hs's settings.
func startShort(t *testing.T, hs *http.Server) (*h1.Server, string, chan error) {
	return over{}.start(t, hs)
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) { return over{}.dial(t, addr) }

// over is what a test's connections go over: cleartext (the zero over)
// or TLS.
type over struct {
	name           string
	server, client *tls.Config // nil for cleartext
}

// overs runs a test over cleartext and over TLS.
func overs(t *testing.T) []over {
	server, client := testTLS(t)
	return []over{{name: "cleartext"}, {name: "tls", server: server, client: client}}
}

// start serves h the short way with hs's settings, over o.
func (o over) start(t *testing.T, hs *http.Server) (*h1.Server, string, chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if hs.ErrorLog == nil {
		hs.ErrorLog = discardLog
	}
	s := h1.NewServer(hs)
	served := make(chan error, 1)
	if o.server != nil {
		hs.TLSConfig = o.server.Clone()
		go func() { served <- s.ServeTLS(ln) }()
	} else {
		go func() { served <- s.Serve(ln) }()
	}
	t.Cleanup(func() { s.Close() })
	return s, ln.Addr().String(), served
}

// dial connects to addr over o.
func (o over) dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := dialOver(addr, o.client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

func readAnswer(t *testing.T, br *bufio.Reader) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// waitClosed reports how long the server took to close c.
func waitClosed(t *testing.T, c net.Conn, br *bufio.Reader, start time.Time) time.Duration {
	t.Helper()
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("read %v, want the server to close the connection", err)
	}
	return time.Since(start)
}

// A client that goes away while its request waits cancels the request's
// context; one that stays, and sends its next request meanwhile, does
// not, and that request is answered, as is one sent after the answer of
// a request watched alone. Over cleartext and TLS.
func TestServerClientGone(t *testing.T) {
	for _, o := range overs(t) {
		t.Run(o.name, func(t *testing.T) {
			cancelled := make(chan error, 1)
			_, addr, _ := o.start(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/wait" {
					select {
					case <-r.Context().Done():
						cancelled <- r.Context().Err()
						return
					case <-time.After(5 * time.Second):
					}
				}
				if r.URL.Path == "/slow" {
					time.Sleep(400 * time.Millisecond)
					if err := r.Context().Err(); err != nil {
						t.Errorf("a client still there: context %v", err)
					}
				}
				io.WriteString(w, r.URL.Path)
			})})

			c, br := o.dial(t, addr)
			io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
			time.Sleep(300 * time.Millisecond) // the watch has begun
			io.WriteString(c, "GET /next HTTP/1.1\r\nHost: a\r\n\r\n")
			for _, want := range []string{"/slow", "/next"} {
				if _, body := readAnswer(t, br); body != want {
					t.Fatalf("answer %q, want %q", body, want)
				}
			}
			// Watched with nothing sent meanwhile: the connection waits
			// for its next request as before.
			io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
			readAnswer(t, br)
			io.WriteString(c, "GET /after HTTP/1.1\r\nHost: a\r\n\r\n")
			if _, body := readAnswer(t, br); body != "/after" {
				t.Fatalf("answer %q after a watched request, want /after", body)
			}

			c2, _ := o.dial(t, addr)
			io.WriteString(c2, "GET /wait HTTP/1.1\r\nHost: a\r\n\r\n")
			time.Sleep(50 * time.Millisecond)
			c2.Close()
			select {
			case err := <-cancelled:
				if err != context.Canceled {
					t.Fatalf("context ended with %v", err)
				}
			case <-time.After(3 * time.Second):
				t.Fatal("the request's context was not cancelled when its client went away")
			}
		})
	}
}

// An idle connection is closed after the idle timeout; a head not whole
// after the head timeout is too, and one handed to net/http (longer than
// the buffer) keeps the deadline it had, not a new one. Over cleartext
// and TLS.
func TestServerTimeouts(t *testing.T) {
	for _, o := range overs(t) {
		t.Run(o.name, func(t *testing.T) {
			_, addr, _ := o.start(t, &http.Server{
				Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }),
				IdleTimeout:       200 * time.Millisecond,
				ReadHeaderTimeout: 600 * time.Millisecond,
			})
			c, br := o.dial(t, addr)
			// From the request sent: a server may start the idle clock once
			// its answer is written, a moment before the client has read it
			// (net/http's does: a build without the short way, norawio).
			sent := time.Now()
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
			readAnswer(t, br)
			if d := waitClosed(t, c, br, sent); d < 200*time.Millisecond || d > 2*time.Second {
				t.Fatalf("idle connection closed %v after its request, want 200 to 300ms", d)
			}

			c, br = o.dial(t, addr)
			start := time.Now()
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n")
			if d := waitClosed(t, c, br, start); d < 500*time.Millisecond || d > 3*time.Second {
				t.Fatalf("a head never finished: closed after %v, want about 600ms", d)
			}

			c, br = o.dial(t, addr)
			start = time.Now()
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n")
			time.Sleep(400 * time.Millisecond)
			io.WriteString(c, "X-Long: "+strings.Repeat("v", 5000)) // net/http's from here
			d := waitClosed(t, c, br, start)
			if d < 500*time.Millisecond || d > 900*time.Millisecond {
				t.Fatalf("a long head never finished: closed after %v, want about 600ms from its first byte (1s: the deadline began again)", d)
			}
		})
	}
}

// Shutdown closes idle connections at once, lets a request in flight
// finish with Connection: close, and ends Serve. Over cleartext and TLS.
func TestServerShutdown(t *testing.T) {
	for _, o := range overs(t) {
		t.Run(o.name, func(t *testing.T) {
			release := make(chan struct{})
			entered := make(chan struct{})
			s, addr, served := o.start(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/hold" {
					close(entered)
					<-release
				}
				io.WriteString(w, "ok")
			})})
			idle, idleR := o.dial(t, addr)
			io.WriteString(idle, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
			readAnswer(t, idleR)
			busy, busyR := o.dial(t, addr)
			io.WriteString(busy, "GET /hold HTTP/1.1\r\nHost: a\r\n\r\n")
			<-entered

			done := make(chan error, 1)
			go func() { done <- s.Shutdown(context.Background()) }()
			waitClosed(t, idle, idleR, time.Now())
			select {
			case err := <-done:
				t.Fatalf("Shutdown returned %v with a request in flight", err)
			case <-time.After(100 * time.Millisecond):
			}
			close(release)
			resp, body := readAnswer(t, busyR)
			if body != "ok" || !resp.Close {
				t.Fatalf("in-flight answer %q, close %v; want ok and Connection: close", body, resp.Close)
			}
			if err := <-done; err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			if err := <-served; err != http.ErrServerClosed {
				t.Fatalf("Serve returned %v, want http.ErrServerClosed", err)
			}
			if _, err := net.Dial("tcp", addr); err == nil {
				t.Fatal("still accepting after Shutdown")
			}
		})
	}
}

// A connection waiting for its next request holds no read buffer; one
// that has read part of a head holds one until the head is whole. Over
// cleartext and TLS.
func TestServerIdleHoldsNoBuffer(t *testing.T) {
	for _, o := range overs(t) {
		t.Run(o.name, func(t *testing.T) {
			testtool.NeedsRaw(t)
			s, addr, _ := o.start(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "ok")
			})})
			const n = 20
			var conns []net.Conn
			for range n {
				c, br := o.dial(t, addr)
				io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
				readAnswer(t, br)
				conns = append(conns, c)
			}
			// A connection takes a buffer for each read it tries and gives it
			// back when the read finds nothing: wait for the count to settle.
			settle := func(want int64) int64 {
				deadline := time.Now().Add(5 * time.Second)
				for s.Buffers() != want && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				return s.Buffers()
			}
			if got := settle(0); got != 0 {
				t.Fatalf("%d buffers held by %d idle connections, want none", got, n)
			}
			for _, c := range conns {
				io.WriteString(c, "GET / HTTP/1.1\r\n")
			}
			if got := settle(n); got != n {
				t.Fatalf("%d buffers held by %d connections halfway through a head, want one each", got, n)
			}
			for _, c := range conns {
				io.WriteString(c, "Host: a\r\n\r\n")
				readAnswer(t, bufio.NewReader(c))
			}
			if got := settle(0); got != 0 {
				t.Fatalf("%d buffers held after the heads were read, want none", got)
			}
		})
	}
}

// Raw bytes into both servers: the short way answers whatever it is sent
// as net/http's server does, byte for byte (Date aside), whether it
// serves it or hands it over.
func FuzzServerAgainstNetHTTP(f *testing.F) {
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /a?b HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.1\r\nHost: b\r\n\r\n",
		"HEAD http://a/b HTTP/1.1\r\nHost: c\r\nX: 1\r\nx: 2\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
		"GET /\r\n",
		"PUT /x HTTP/1.1\r\nHost: a\r\nContent-Length: 0004\r\n\r\nbodyGET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;e=1\r\nabc\r\n0\r\nX-T: 1\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	plain, short := serveBoth(f, http.HandlerFunc(echo), func(hs *http.Server) { hs.ErrorLog = discardLog })
	f.Fuzz(func(t *testing.T, raw []byte) {
		// Each input as it is, and with a field of 5 KiB after its first
		// line: a head the short way reads on in its long buffer.
		for _, in := range []string{string(raw), padded(string(raw))} {
			want := exchange(t, plain, in)
			got := exchange(t, short, in)
			if want != got {
				t.Errorf("for %q\nnet/http answered %q\nthe short way    %q", in, want, got)
			}
		}
	})
}

// padded is raw with a 5 KiB field after its first line, or raw as it is
// when it has no line.
func padded(raw string) string {
	i := strings.IndexByte(raw, '\n')
	if i < 0 {
		return raw
	}
	return raw[:i+1] + "X-Pad: " + strings.Repeat("p", 5<<10) + "\r\n" + raw[i+1:]
}

// A connection waits for its next request without reading first (the
// poller's readiness is reset once, when it starts): no request may be
// lost for it, however it comes. One connection, 1,200 requests: sent
// after the last answer, two at once, the next sent while the handler
// still runs, and a head in two writes. Over cleartext and TLS.
func TestServerNeverMissesARequest(t *testing.T) {
	for _, o := range overs(t) {
		t.Run(o.name, func(t *testing.T) {
			_, addr, _ := o.start(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/slow" {
					time.Sleep(time.Millisecond)
				}
				io.WriteString(w, r.URL.RawQuery)
			})})
			c, br := o.dial(t, addr)
			want := func(q string) {
				t.Helper()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, body := readAnswer(t, br); body != q {
					t.Fatalf("answer %q, want %q", body, q)
				}
			}
			for i := range 300 {
				a, b := fmt.Sprint(2*i), fmt.Sprint(2*i+1)
				switch i % 4 {
				case 0: // one after the other
					fmt.Fprintf(c, "GET /?%s HTTP/1.1\r\nHost: a\r\n\r\n", a)
					want(a)
					fmt.Fprintf(c, "GET /?%s HTTP/1.1\r\nHost: a\r\n\r\n", b)
				case 1: // pipelined, in one write
					fmt.Fprintf(c, "GET /?%s HTTP/1.1\r\nHost: a\r\n\r\nGET /?%s HTTP/1.1\r\nHost: a\r\n\r\n", a, b)
					want(a)
				case 2: // the next comes while the handler runs
					fmt.Fprintf(c, "GET /slow?%s HTTP/1.1\r\nHost: a\r\n\r\n", a)
					time.Sleep(200 * time.Microsecond)
					fmt.Fprintf(c, "GET /?%s HTTP/1.1\r\nHost: a\r\n\r\n", b)
					want(a)
				case 3: // a head in two writes
					fmt.Fprintf(c, "GET /?%s HTTP/1.1\r\nHo", a)
					time.Sleep(100 * time.Microsecond)
					fmt.Fprintf(c, "st: a\r\n\r\n")
					want(a)
					fmt.Fprintf(c, "GET /slow?%s HTTP/1.1\r\nHost: a\r\n\r\n", b)
				}
				want(b)
			}
		})
	}
}

// Close cuts a connection whose handler still runs: it returns at once
// (the handler holds the socket's read side, so the connection is shut
// down, not closed under it), the request's context is cancelled, and
// the client sees the connection end. Over cleartext and TLS.
func TestServerCloseCutsBusyHandlers(t *testing.T) {
	for _, o := range overs(t) {
		t.Run(o.name, func(t *testing.T) {
			entered := make(chan struct{})
			ended := make(chan error, 1)
			s, addr, _ := o.start(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				close(entered)
				select {
				case <-r.Context().Done():
					ended <- r.Context().Err()
				case <-time.After(10 * time.Second):
					ended <- nil
				}
			})})
			c, br := o.dial(t, addr)
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
			<-entered
			closed := make(chan struct{})
			go func() {
				s.Close()
				close(closed)
			}()
			select {
			case <-closed:
			case <-time.After(2 * time.Second):
				t.Fatal("Close waited for a busy handler")
			}
			if err := <-ended; err != context.Canceled {
				t.Fatalf("the handler's context ended with %v, want it cancelled", err)
			}
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			if b, err := br.ReadByte(); err == nil {
				t.Fatalf("read %q after Close, want the connection ended", b)
			} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the connection is still open after Close")
			}
		})
	}
}

// A body that comes whole with its head, or one of up to 64 KiB read
// whole before the handler runs, is served the short way (the connection
// stays on it for the requests after), and is the request's own: read
// after the handler returned, when the connection's buffer has the next
// request in it, it is still what was sent. A longer one is read as the
// handler reads it, and the connection stays on the short way too.
// BodyInHand tells the two apart.
func TestServerServesBodiesWithTheirHead(t *testing.T) {
	testtool.NeedsRaw(t)
	kept := make(chan io.ReadCloser, 1)
	_, addr, _ := startShort(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/keep" {
			kept <- r.Body
		} else {
			io.Copy(io.Discard, r.Body)
		}
		fmt.Fprintf(w, "%T %d %v", w, r.ContentLength, h1.BodyInHand(r))
	})})
	c, br := dial(t, addr)
	body := strings.Repeat("b", 1000)
	for _, step := range []struct{ req, want string }{
		{"POST /keep HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\n" + body, "*h1.response 1000 true"},
		{"GET / HTTP/1.1\r\nHost: a\r\nX-Fill: " + strings.Repeat("z", 1500) + "\r\n\r\n", "*h1.response 0 false"},
		{"PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc", "*h1.response 3 true"},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5000\r\n\r\n" + strings.Repeat("x", 5000), "*h1.response 5000 true"},
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", "*h1.response 0 false"},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 70000\r\n\r\n" + strings.Repeat("x", 70000), "*h1.response 70000 false"},
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", "*h1.response 0 false"},
	} {
		io.WriteString(c, step.req)
		if _, got := readAnswer(t, br); got != step.want {
			t.Fatalf("answer %q, want %q", got, step.want)
		}
	}
	b, err := io.ReadAll(<-kept)
	if err != nil || string(b) != body {
		t.Fatalf("the body read after its handler: %d bytes, %v; want the %d sent", len(b), err, len(body))
	}
}

// The short way's transport, called from a request the short way serves,
// is cut when that request is cancelled (its client gone), through the
// server's hook: while it waits for the backend, and when the request was
// cancelled before the exchange began on a pooled connection (which the
// hook, set after the cancel fired, never hears of).
func TestServerCancelCutsTheTransport(t *testing.T) {
	answers := testtool.ServeRequests(t, func(c net.Conn, _ *http.Request) bool {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	hangs := testtool.Serve(t, func(c net.Conn) {
		defer c.Close()
		io.Copy(io.Discard, c) // never answers
	})
	tr := h1.New(&http.Transport{DialContext: (&net.Dialer{}).DialContext, ResponseHeaderTimeout: 10 * time.Second})
	t.Cleanup(tr.Close)
	type result struct {
		err  error
		took time.Duration
	}
	results := make(chan result, 1)
	_, addr, _ := startShort(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		target := "http://" + hangs + "/"
		if r.URL.Path == "/late" {
			<-r.Context().Done()               // the client is gone before the exchange
			target = "http://" + answers + "/" // a pooled connection: no dial to fail first
		}
		start := time.Now()
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, target, nil)
		resp, err := tr.RoundTrip(req)
		if err == nil {
			if r.URL.Path == "/warm" {
				io.Copy(w, resp.Body)
			}
			resp.Body.Close()
		}
		if r.URL.Path != "/warm" {
			results <- result{err, time.Since(start)}
		}
	})})
	// Warm: a request whose answer leaves its connection in the pool.
	req, _ := http.NewRequest(http.MethodGet, "http://"+answers+"/", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for _, path := range []string{"/hang", "/late"} {
		c, _ := dial(t, addr)
		io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: a\r\n\r\n")
		time.Sleep(300 * time.Millisecond) // the watch has begun
		c.Close()
		select {
		case res := <-results:
			if !errors.Is(res.err, context.Canceled) || res.took > 2*time.Second {
				t.Errorf("%s: the exchange ended with %v after %v, want context.Canceled at once", path, res.err, res.took)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the exchange was not cut when its client went away", path)
		}
	}
}

// PassHeader hands a backend's header to the short way's answer whole
// (a field set on it afterwards is the answer's), through a writer that
// unwraps to it, and copies it everywhere else: to net/http's answer, and
// to the short way's when its own header has a field already.
func TestPassHeader(t *testing.T) {
	pass := func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("own") {
			w.Header().Set("X-Own", "1")
		}
		var to http.ResponseWriter = w
		if r.URL.Query().Has("wrapped") {
			to = unwrapper{w}
		}
		src := http.Header{"X-Backend": {"b"}}
		h1.PassHeader(to, src)
		src.Set("X-Later", "taken") // seen only if src became the answer's
		io.WriteString(w, "ok")
	}
	plain, short := serveBoth(t, http.HandlerFunc(pass), nil)
	taken, copied := []string{"X-Backend: b", "X-Later: taken"}, []string(nil)
	if !rawio.Supported { // the short way's server hands every request to net/http's
		taken, copied = []string{"X-Backend: b"}, []string{"X-Later"}
	}
	cases := []struct {
		addr, query string
		want        []string // fields the answer has
		not         []string // fields it has not
	}{
		{short, "", taken, append([]string{"X-Own"}, copied...)},
		{short, "wrapped", taken, copied},
		{short, "own", []string{"X-Backend: b", "X-Own: 1"}, []string{"X-Later"}},
		{plain, "", []string{"X-Backend: b"}, []string{"X-Later"}},
	}
	for _, c := range cases {
		got := exchange(t, c.addr, "GET /?"+c.query+" HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
		for _, f := range c.want {
			if !strings.Contains(got, "\r\n"+f+"\r\n") {
				t.Errorf("%s ?%s: no %q in\n%s", c.addr, c.query, f, got)
			}
		}
		for _, f := range c.not {
			if strings.Contains(got, "\r\n"+f) {
				t.Errorf("%s ?%s: %q in\n%s", c.addr, c.query, f, got)
			}
		}
	}
}

// unwrapper lets PassHeader through to the writer it wraps.
type unwrapper struct{ http.ResponseWriter }

func (u unwrapper) Unwrap() http.ResponseWriter { return u.ResponseWriter }

// TestServerGivesRequestsBack: a request served the short way goes back
// to be used again, zeroed, once its answer is finished (a later request
// may be made in it), and a handler that panicked keeps its own; the
// values of its header are the request's own, not the block's, so that
// a header sent on with them (which a transport may still be writing) is
// never overwritten.
func TestServerGivesRequestsBack(t *testing.T) {
	testtool.NeedsRaw(t)
	var (
		mu    sync.Mutex
		kept  []*http.Request
		vals  [][]string
		abort = "/abort"
	)
	srv, addr, _ := startShort(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		kept = append(kept, r)
		vals = append(vals, r.Header["X-Kept"])
		mu.Unlock()
		if r.URL.Path == abort {
			panic(http.ErrAbortHandler)
		}
		io.WriteString(w, r.URL.Path)
	})})
	c, br := dial(t, addr)
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	for i := range 3 {
		fmt.Fprintf(c, "GET /%d HTTP/1.1\r\nHost: a\r\nX-Kept: value %d\r\n\r\n", i, i)
		if _, body := readAnswer(t, br); body != fmt.Sprintf("/%d", i) {
			t.Fatalf("answer %d: %q", i, body)
		}
	}
	// Then all the server did with the requests comes before what is
	// looked at below (a block given back may be every later request's
	// too).
	abortThenShutDown(t, srv, addr, "GET "+abort+" HTTP/1.1\r\nHost: a\r\nX-Kept: value 3\r\n\r\n")
	mu.Lock()
	defer mu.Unlock()
	if len(kept) != 4 {
		t.Fatalf("%d requests reached the handler, want 4", len(kept))
	}
	for i, r := range kept[:3] {
		// Given back: zeroed, or already another request's.
		if r.URL != nil && r.URL.Path == fmt.Sprintf("/%d", i) {
			t.Errorf("request %d after its answer: %q %v %v, want it given back", i, r.Method, r.URL, r.Header)
		}
	}
	if r := kept[3]; r.Method != http.MethodGet || r.URL == nil || r.URL.Path != abort {
		t.Errorf("the aborted request after its end: %q %v, want it kept whole", r.Method, r.URL)
	}
	for i, v := range vals {
		if want := fmt.Sprintf("value %d", i); len(v) != 1 || v[0] != want {
			t.Errorf("request %d's X-Kept after the others: %q, want %q", i, v, want)
		}
	}
}

// A backend's answer read the short way and passed on whole (PassAnswer)
// goes back once the client's answer is finished, each client having had
// its own backend's fields (the head written as the handler writes, and
// as the answer finishes); an answer whose handler aborted is kept; one
// not read the short way is left alone.
func TestServerGivesAnswersBack(t *testing.T) {
	testtool.NeedsRaw(t)
	backend := testtool.ServeRequests(t, func(c net.Conn, req *http.Request) bool {
		id := req.URL.Path[1:]
		if id == "chunked" {
			// Left to ReadResponse: not made in a block.
			io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Id: chunked\r\n\r\n7\r\nchunked\r\n0\r\n\r\n")
			return true
		}
		body := id
		if id == "empty" {
			body = "" // the head waits for the answer's end
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nX-Id: %s\r\nContent-Length: %d\r\n\r\n%s", id, len(body), body)
		return true
	})
	tr := h1.New(&http.Transport{DialContext: (&net.Dialer{}).DialContext, ResponseHeaderTimeout: 3 * time.Second})
	t.Cleanup(tr.Close)
	var (
		mu   sync.Mutex
		kept = map[string]*http.Response{}
		sent = map[string]*http.Request{}
	)
	srv, addr, _ := startShort(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, "http://"+backend+r.URL.Path, nil)
		res, err := tr.RoundTrip(req)
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		kept[r.URL.Path], sent[r.URL.Path] = res, req
		mu.Unlock()
		h1.PassAnswer(w, res)
		w.WriteHeader(res.StatusCode)
		io.Copy(w, res.Body)
		res.Body.Close()
		if r.URL.Path == "/abort" {
			panic(http.ErrAbortHandler)
		}
	})})
	c, br := dial(t, addr)
	for _, id := range []string{"a", "empty", "b", "chunked", "c"} {
		fmt.Fprintf(c, "GET /%s HTTP/1.1\r\nHost: a\r\n\r\n", id)
		resp, body := readAnswer(t, br)
		if got := resp.Header.Get("X-Id"); got != id || body != strings.TrimPrefix(id, "empty") {
			t.Errorf("answer %s: X-Id %q, body %q", id, got, body)
		}
	}
	abortThenShutDown(t, srv, addr, "GET /abort HTTP/1.1\r\nHost: a\r\n\r\n")
	mu.Lock()
	defer mu.Unlock()
	// Given back: zeroed, or already another answer's. (The header map
	// goes back either way, as a map taken does: PassHeader.)
	whole := func(id string) bool {
		res := kept["/"+id]
		return res.Request == sent["/"+id] && res.StatusCode == http.StatusOK && res.Proto == "HTTP/1.1"
	}
	for _, id := range []string{"a", "empty", "b", "c"} {
		if whole(id) {
			t.Errorf("answer %s after it was finished: still whole, want it given back", id)
		}
	}
	if !whole("chunked") {
		t.Errorf("an answer read by net/http after it was finished: %+v, want it left whole", kept["/chunked"])
	}
	if !whole("abort") || kept["/abort"].Header.Get("X-Id") != "abort" {
		t.Errorf("an aborted answer after its end: %+v, want it kept whole", kept["/abort"])
	}
}

// abortThenShutDown sends req, whose handler aborts, on a connection of
// its own, checks that it goes unanswered, and shuts srv down: all srv
// did with the requests before comes before what the test looks at next.
func abortThenShutDown(t *testing.T, srv *h1.Server, addr, req string) {
	t.Helper()
	c, br := dial(t, addr)
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	io.WriteString(c, req)
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("an aborted answer was answered")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// RequestHead gives a handler of the short way the head its request was
// read from, for the transport to write what it sends on of it without
// checking it again; a request net/http's server reads (an obs-fold
// hands the connection over) has none, nor does a writer of another
// server.
func TestRequestHead(t *testing.T) {
	var mu sync.Mutex
	heads := map[string]bool{}
	_, addr, _ := startShort(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		heads[r.URL.Path] = h1.RequestHead(w) != nil
		mu.Unlock()
	})})
	c, br := dial(t, addr)
	fmt.Fprint(c, "GET /short HTTP/1.1\r\nHost: a\r\nX-A: b\r\n\r\n")
	readAnswer(t, br)
	fmt.Fprint(c, "POST /chunked HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n")
	readAnswer(t, br)
	fmt.Fprint(c, "GET /folded HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n")
	readAnswer(t, br)
	mu.Lock()
	defer mu.Unlock()
	// Without raw I/O the short way's server hands every request to
	// net/http's, and none has a head.
	if heads["/short"] != rawio.Supported || heads["/chunked"] != rawio.Supported || heads["/folded"] {
		t.Errorf("a head given to the short way's requests: %v, %v; to net/http's: %v; want %v, %v and false",
			heads["/short"], heads["/chunked"], heads["/folded"], rawio.Supported, rawio.Supported)
	}
	if h1.RequestHead(httptest.NewRecorder()) != nil {
		t.Error("a recorder has a head")
	}
}

// startWith is start with set given the server before it serves.
func (o over) startWith(t *testing.T, hs *http.Server, set func(*h1.Server)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs.ErrorLog = discardLog
	s := h1.NewServer(hs)
	set(s)
	if o.server != nil {
		hs.TLSConfig = o.server.Clone()
		go s.ServeTLS(ln)
	} else {
		go s.Serve(ln)
	}
	t.Cleanup(func() { s.Close() })
	return ln.Addr().String()
}

// seenBody answers with the kind of answer it writes, whether the body
// was in hand, what it read of it and how the read ended, and whether the
// request still expected 100 Continue.
func seenBody(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	_, expect := r.Header["Expect"]
	fmt.Fprintf(w, "%T %v read %d %x %v expect=%v", w, h1.BodyInHand(r), len(b), sha256.Sum256(b), err, expect)
}

// wantSeen is seenBody's answer to body, the short way's, with the body
// in hand or read as the handler reads it.
func wantSeen(body string, inHand bool) string {
	return fmt.Sprintf("*h1.response %v read %d %x <nil> expect=false", inHand, len(body), sha256.Sum256([]byte(body)))
}

// A body of up to 64 KiB that does not come with its head is read whole
// before the handler runs, in as many pieces as the client sends it, and
// the connection stays on the short way; a client that expects 100
// Continue is sent it before the body is read, and its request reaches the
// handler without the Expect field. Over cleartext and TLS.
func TestServerReadsBodiesFirst(t *testing.T) {
	testtool.NeedsRaw(t)
	for _, o := range overs(t) {
		t.Run(o.name, func(t *testing.T) {
			addr := o.startWith(t, &http.Server{Handler: http.HandlerFunc(seenBody), ReadHeaderTimeout: 5 * time.Second},
				func(s *h1.Server) { s.SetBodyLimits(5*time.Second, 0) })
			c, br := o.dial(t, addr)
			body := strings.Repeat("0123456789", 3000)
			io.WriteString(c, "POST /pieces HTTP/1.1\r\nHost: a\r\nContent-Length: 30000\r\n\r\n")
			for i := 0; i < len(body); i += 10000 {
				time.Sleep(20 * time.Millisecond)
				io.WriteString(c, body[i:i+10000])
			}
			if _, got := readAnswer(t, br); got != wantSeen(body, true) {
				t.Fatalf("a body sent in pieces: %q, want %q", got, wantSeen(body, true))
			}
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
			if _, got := readAnswer(t, br); got != wantSeen("", false) {
				t.Fatalf("the request after it: %q, want the short way's", got)
			}

			io.WriteString(c, "PUT /expect HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 20000\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != http.StatusContinue {
				t.Fatalf("before the body: %v, %v; want 100 Continue", resp, err)
			}
			io.WriteString(c, body[:20000])
			if _, got := readAnswer(t, br); got != wantSeen(body[:20000], true) {
				t.Fatalf("a body after 100 Continue: %q, want %q", got, wantSeen(body[:20000], true))
			}
		})
	}
}

// A body read before its handler runs is bounded: past the body timeout
// between two reads, its request goes to net/http's server with what came
// of it and no time left to read more (not the body timeout again), so
// the handler's read fails at once; a client that ends it early is
// handed on the same way, and its handler reads the end. A body past the
// bytes all connections may hold is not read first, but as the handler
// reads it; one over the listener's maximum neither, and the handler's
// read of it stops at the maximum. Over cleartext and TLS.
func TestServerBodiesReadFirstAreBounded(t *testing.T) {
	testtool.NeedsRaw(t)
	h1.SetInHandBudget(t, 50000)
	for _, o := range overs(t) {
		t.Run(o.name, func(t *testing.T) {
			const timeout = 300 * time.Millisecond
			errs := make(chan error, 1)
			addr := o.startWith(t, &http.Server{ReadHeaderTimeout: 5 * time.Second,
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/stall" || r.URL.Path == "/end" {
						b, err := io.ReadAll(r.Body)
						errs <- fmt.Errorf("%T read %d: %w", w, len(b), err)
						return
					}
					seenBody(w, r)
				})},
				func(s *h1.Server) { s.SetBodyLimits(timeout, 40000) })

			c, _ := o.dial(t, addr)
			start := time.Now()
			io.WriteString(c, "POST /stall HTTP/1.1\r\nHost: a\r\nContent-Length: 10000\r\n\r\n"+strings.Repeat("s", 100))
			err := <-errs
			if d := time.Since(start); !errors.Is(err, os.ErrDeadlineExceeded) || !strings.HasPrefix(err.Error(), "*http.response read 100:") || d > 3*timeout {
				t.Errorf("a stalled body: %v after %v; want net/http's handler to read its 100 bytes, then the deadline, within about %v", err, d, timeout)
			}

			c, _ = o.dial(t, addr)
			io.WriteString(c, "POST /end HTTP/1.1\r\nHost: a\r\nContent-Length: 10000\r\n\r\n"+strings.Repeat("e", 200))
			time.Sleep(50 * time.Millisecond)
			closeWrite(t, c)
			if err := <-errs; !errors.Is(err, io.ErrUnexpectedEOF) || !strings.HasPrefix(err.Error(), "*http.response read 200:") {
				t.Errorf("a body the client ended early: %v; want net/http's handler to read its 200 bytes, then the end", err)
			}

			for _, tc := range []struct {
				name string
				size int
				want string
			}{
				{"over the maximum", 45000, fmt.Sprintf("*h1.response false read 40000 %x request body too large expect=false",
					sha256.Sum256([]byte(strings.Repeat("b", 40000))))},
				{"past the budget", 30000, wantSeen(strings.Repeat("b", 30000), false)},
			} {
				c, br := o.dial(t, addr)
				body := strings.Repeat("b", tc.size)
				if tc.name == "past the budget" {
					// Another connection holds most of the budget.
					hold, _ := o.dial(t, addr)
					io.WriteString(hold, "POST /stall HTTP/1.1\r\nHost: a\r\nContent-Length: 30000\r\n\r\nh")
					time.Sleep(50 * time.Millisecond)
					defer func() { <-errs }()
				}
				fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n", tc.size)
				time.Sleep(20 * time.Millisecond)
				io.WriteString(c, body)
				if _, got := readAnswer(t, br); got != tc.want {
					t.Errorf("a body %s: %q, want %q", tc.name, got, tc.want)
				}
			}
		})
	}
}

// closeWrite half-closes c: a TLS connection with its close_notify.
func closeWrite(t *testing.T, c net.Conn) {
	t.Helper()
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
}

// A request whose body the short way read whole before serving it began,
// for its record, when its head had come: its upload is in its time. A
// request that came whole, and one whose handler reads its body itself,
// begin when they are served, and so does the request after a pre-read
// one on the same connection.
func TestBeganCountsTheUpload(t *testing.T) {
	testtool.NeedsRaw(t)
	const pause = 200 * time.Millisecond
	for _, o := range overs(t) {
		t.Run(o.name, func(t *testing.T) {
			type seen struct {
				path  string
				since time.Duration // from Began to the handler's start
			}
			got := make(chan seen, 4)
			addr := startBodies(t, o, func(w http.ResponseWriter, r *http.Request) {
				since := time.Since(h1.Began(r, time.Now()))
				io.Copy(io.Discard, r.Body)
				got <- seen{r.URL.Path, since}
			})
			c, br := o.dial(t, addr)
			body := strings.Repeat("b", 10000)
			writeSlowly(c, pause, "POST /read-first HTTP/1.1\r\nHost: a\r\nContent-Length: 10000\r\n\r\n"+body[:100], body[100:])
			readAnswer(t, br)
			io.WriteString(c, "GET /after HTTP/1.1\r\nHost: a\r\n\r\n")
			readAnswer(t, br)
			writeSlowly(c, pause, "POST /streamed HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n", "0\r\n\r\n")
			readAnswer(t, br)
			for _, want := range []struct {
				path     string
				min, max time.Duration
			}{
				{"/read-first", pause / 2, 10 * pause}, // the pause, less what the head took to be read
				{"/after", 0, pause / 2},
				{"/streamed", 0, pause / 2},
			} {
				s := <-got
				if s.path != want.path || s.since < want.min || s.since > want.max {
					t.Errorf("%s began %v before its handler, want %s between %v and %v", s.path, s.since, want.path, want.min, want.max)
				}
			}
		})
	}
}

// A head that fills the 4 KiB buffer (long cookies, a bearer token) is
// read on in a 16 KiB one and served the short way, whole however it
// came (at once, in pieces, pipelined between others); a longer one goes
// to net/http's server, as does every long one where the bound on heads
// is 4 KiB or less, for net/http's server to hold to it. No buffer is
// held after.
func TestLongHeads(t *testing.T) {
	type seen struct {
		path   string
		short  bool
		cookie int
	}
	for _, o := range overs(t) {
		t.Run(o.name, func(t *testing.T) {
			got := make(chan seen, 16)
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got <- seen{r.URL.Path, h1.RequestHead(w) != nil, len(r.Header.Get("Cookie"))}
				io.WriteString(w, r.URL.Path)
			})
			srv, addr, _ := o.start(t, &http.Server{Handler: handler})
			head := func(path string, cookie int) string {
				return "GET " + path + " HTTP/1.1\r\nHost: a\r\nCookie: " + strings.Repeat("c", cookie) + "\r\n\r\n"
			}
			c, br := o.dial(t, addr)
			check := func(path string, cookie int, short bool) {
				t.Helper()
				if _, body := readAnswer(t, br); body != path {
					t.Fatalf("answered %q, want %s's", body, path)
				}
				s := <-got
				if s != (seen{path, short && rawio.Supported, cookie}) {
					t.Fatalf("%+v, want %s with a cookie of %d, the short way's: %v", s, path, cookie, short && rawio.Supported)
				}
			}
			for _, tc := range []struct {
				path   string
				cookie int
				short  bool
			}{{"/3k", 3 << 10, true}, {"/6k", 6 << 10, true}, {"/15k", 15 << 10, true}} {
				io.WriteString(c, head(tc.path, tc.cookie))
				check(tc.path, tc.cookie, tc.short)
			}
			// In pieces, the first filling the buffer.
			h := head("/pieces", 10<<10)
			io.WriteString(c, h[:5000])
			time.Sleep(50 * time.Millisecond)
			io.WriteString(c, h[5000:9000])
			time.Sleep(50 * time.Millisecond)
			io.WriteString(c, h[9000:])
			check("/pieces", 10<<10, true)
			// Pipelined: short, long, short, long in one write.
			io.WriteString(c, head("/a", 10)+head("/b", 8<<10)+head("/c", 10)+head("/d", 12<<10))
			check("/a", 10, true)
			check("/b", 8<<10, true)
			check("/c", 10, true)
			check("/d", 12<<10, true)
			// Longer than the long buffer: net/http's, on this connection.
			io.WriteString(c, head("/20k", 20<<10))
			check("/20k", 20<<10, false)
			c.Close()
			testtool.Eventually(t, 3*time.Second, "no buffer held", func() bool { return srv.Buffers() == 0 })

			// A bound of 4 KiB: net/http's server's to hold to it (it takes
			// 4 KiB over its bound: a 6 KiB head is served).
			_, bounded, _ := o.start(t, &http.Server{Handler: handler, MaxHeaderBytes: 4 << 10})
			c, br = o.dial(t, bounded)
			io.WriteString(c, head("/6k", 6<<10))
			check("/6k", 6<<10, false)
		})
	}
}

// An Accept that fails for want of descriptors or kernel memory is
// waited out (net/http's server does, nginx too): the listener serves the
// next connection. Any other failure ends Serve with it.
func TestServerOutlivesAcceptFailures(t *testing.T) {
	logs := &testtool.Buffer{}
	serve := func(errs ...syscall.Errno) (string, chan error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := h1.NewServer(&http.Server{ErrorLog: discardLog, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "ok")
		})})
		s.Log = slog.New(slog.NewTextHandler(logs, nil))
		served := make(chan error, 1)
		go func() { served <- s.Serve(testtool.FailAccepts(ln, errs...)) }()
		t.Cleanup(func() { s.Close() })
		return ln.Addr().String(), served
	}
	addr, served := serve(syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM)
	c, br := dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	if _, body := readAnswer(t, br); body != "ok" {
		t.Fatalf("after four failed Accepts: %q", body)
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned %v", err)
	default:
	}
	// The first failure is logged, the next three (within a second)
	// are not.
	if n := strings.Count(logs.String(), `msg="accept failed: waiting to accept again" error="accept tcp`); n != 1 || !strings.Contains(logs.String(), "too many open files") {
		t.Fatalf("%d warnings, want 1 naming the first error:\n%s", n, logs.String())
	}

	_, served = serve(syscall.EINVAL)
	select {
	case err := <-served:
		if !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("Serve returned %v, want the EINVAL it cannot outlive", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve still runs after an Accept failed with EINVAL")
	}
}
