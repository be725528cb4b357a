package h1

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// read is what a client sees of an answer: the response's fields, its
// body read to the end, and what the reader still holds after it.
type read struct {
	Err                      string
	Status                   string
	StatusCode               int
	Proto                    string
	ProtoMajor, ProtoMinor   int
	Header, Trailer          http.Header
	ContentLength            int64
	TransferEncoding         []string
	Close, Uncompressed      bool
	NoBody                   bool
	Body, BodyErr, Remainder string
}

// readWith reads raw as the answer to a request with method, with parse
// (readResponse or net/http's ReadResponse), and reports whether the
// strict way took it.
func readWith(raw []byte, method string, parse func(*bufio.Reader, *http.Request) (*http.Response, error)) read {
	br := bufio.NewReader(bytes.NewReader(raw))
	resp, err := parse(br, &http.Request{Method: method})
	if err != nil {
		return read{Err: err.Error()}
	}
	got := read{
		Status: resp.Status, StatusCode: resp.StatusCode, Proto: resp.Proto,
		ProtoMajor: resp.ProtoMajor, ProtoMinor: resp.ProtoMinor,
		Header: resp.Header, Trailer: resp.Trailer, ContentLength: resp.ContentLength,
		TransferEncoding: resp.TransferEncoding, Close: resp.Close, Uncompressed: resp.Uncompressed,
		NoBody: resp.Body == http.NoBody,
	}
	body, err := io.ReadAll(resp.Body)
	got.Body, got.BodyErr = string(body), fmt.Sprint(err)
	if n, err := resp.Body.Read(make([]byte, 1)); n != 0 || err != io.EOF && err != http.ErrBodyReadAfterClose {
		got.BodyErr += fmt.Sprintf("; read after the end: %d, %v", n, err)
	}
	rest, _ := io.ReadAll(br)
	got.Remainder = string(rest)
	return got
}

// taken reports whether the strict way takes raw's head.
func taken(raw []byte, method string) bool {
	br := bufio.NewReader(bytes.NewReader(raw))
	br.Peek(1) // one read, as readResponse makes
	a, _, _ := strictResponse(br, &http.Request{Method: method})
	return a != nil
}

// readStrict is readResponse with ReadResponse's results.
func readStrict(br *bufio.Reader, r *http.Request) (*http.Response, error) {
	resp, _, _, err := readResponse(br, r)
	return resp, err
}

// An answer read the strict way says whether its head had a hop-by-hop
// field; one without is left as it is by RemoveHopByHopOf, which looks
// for none.
func TestReadResponseHopFree(t *testing.T) {
	for _, tc := range []struct {
		field string
		free  bool
	}{
		{"X-A: 1", true},
		{"Connection: keep-alive", false},
		{"Connection: x-a", false},
		{"Keep-Alive: timeout=5", false},
		{"keep-alive: timeout=5", false},
		{"Proxy-Authenticate: Basic", false},
		{"Te: trailers", false},
		{"Trailer: X-B", false},
		{"Upgrade: h2c", false},
		{"Proxy-Connection: keep-alive", false},
	} {
		raw := "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n" + tc.field + "\r\n\r\n"
		br := bufio.NewReader(strings.NewReader(raw))
		_, _, free, err := readResponse(br, &http.Request{Method: "GET"})
		if err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		if free != tc.free {
			t.Errorf("%q: hop-free %v, want %v", tc.field, free, tc.free)
		}
	}
}

// readBoth checks that readResponse makes of raw what ReadResponse makes
// of it, and returns whether the strict way took it.
func readBoth(t *testing.T, raw []byte, method string) bool {
	t.Helper()
	want := readWith(raw, method, http.ReadResponse)
	got := readWith(raw, method, readStrict)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s %q: the strict way differs from ReadResponse (-want +got):\n%s", method, raw, diff)
	}
	return taken(raw, method)
}

// The strict reader makes of an answer what net/http's ReadResponse makes
// of it, field by field, body and what follows it included; it takes the
// plain answers and leaves the others to ReadResponse.
func TestReadResponseAsNetHTTP(t *testing.T) {
	const ok = "HTTP/1.1 200 OK\r\n"
	cases := []struct {
		name, method, raw string
		take              bool
	}{
		{"plain", "GET", ok + "Content-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello", true},
		{"next answer after it", "GET", ok + "Content-Length: 2\r\n\r\nhiHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true},
		{"empty body", "GET", ok + "Content-Length: 0\r\n\r\n", true},
		{"no reason", "GET", "HTTP/1.1 200\r\nContent-Length: 1\r\n\r\nx", true},
		{"not found", "GET", "HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nno!", true},
		{"599", "GET", "HTTP/1.1 599 Odd\r\nContent-Length: 0\r\n\r\n", true},
		{"reason with a tab", "GET", "HTTP/1.1 200 A\tB\r\nContent-Length: 0\r\n\r\n", true},
		{"204 without length", "GET", "HTTP/1.1 204 No Content\r\nX: y\r\n\r\nafter", true},
		{"304 with length", "GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\nafter", true},
		{"HEAD with length", "HEAD", ok + "Content-Length: 100\r\n\r\n", true},
		{"HEAD without length", "HEAD", ok + "X: y\r\n\r\n", true},
		{"HTTP/1.0", "GET", "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", true},
		{"HTTP/1.0 keep-alive", "GET", "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\nx", true},
		{"close", "GET", ok + "Connection: close\r\nContent-Length: 1\r\n\r\nx", true},
		{"close among others", "GET", ok + "Connection: x, close\r\nContent-Length: 1\r\n\r\nx", true},
		{"close in 1.0", "GET", "HTTP/1.0 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx", true},
		{"pragma", "GET", ok + "Pragma: no-cache\r\nContent-Length: 0\r\n\r\n", true},
		{"pragma and cache-control", "GET", ok + "Pragma: no-cache\r\nCache-Control: max-age=1\r\nContent-Length: 0\r\n\r\n", true},
		{"repeated names", "GET", ok + "Set-Cookie: a=1\r\nX: 1\r\nset-cookie: b=2\r\nContent-Length: 0\r\n\r\n", true},
		{"names to canonicalise", "GET", ok + "content-length: 3\r\nx-FOO-bar: 1\r\n\r\nabc", true},
		{"names repeated past the eighth", "GET", ok + "A: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\nF: 1\r\nG: 1\r\nH: 1\r\nI: 1\r\nJ: 1\r\n" +
			"A: 2\r\nH: 2\r\nI: 2\r\nK: 1\r\nJ: 2\r\nJ: 3\r\nContent-Length: 0\r\n\r\n", true},
		{"a repeated Connection", "GET", ok + "Connection: keep-alive\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", true},
		{"spaces around values", "GET", ok + "X: \t a b \t\r\nY:\r\nContent-Length:  2 \r\n\r\nab", true},
		{"trailer announced, no chunks", "GET", ok + "Trailer: X\r\nContent-Length: 0\r\n\r\n", true},
		{"body cut short", "GET", ok + "Content-Length: 10\r\n\r\nabc", true},
		{"no body at all", "GET", ok + "Content-Length: 10\r\n\r\n", true},
		{"big length", "GET", ok + "Content-Length: 999999999999999999\r\n\r\nabc", true},

		{"chunked", "GET", ok + "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", false},
		{"identity", "GET", ok + "Transfer-Encoding: identity\r\nContent-Length: 1\r\n\r\nx", false},
		{"to the close", "GET", ok + "X: y\r\n\r\nall of it", false},
		{"two lengths alike", "GET", ok + "Content-Length: 1\r\nContent-Length: 1\r\n\r\nx", false},
		{"two lengths apart", "GET", ok + "Content-Length: 1\r\nContent-Length: 2\r\n\r\nxy", false},
		{"signed length", "GET", ok + "Content-Length: +1\r\n\r\nx", false},
		{"hex length", "GET", ok + "Content-Length: 0x1\r\n\r\nx", false},
		{"empty length", "GET", ok + "Content-Length: \r\n\r\nx", false},
		{"19 digits", "GET", ok + "Content-Length: 1000000000000000000\r\n\r\nx", false},
		{"obs-fold", "GET", ok + "X: a\r\n b\r\nContent-Length: 0\r\n\r\n", false},
		{"bare LF", "GET", "HTTP/1.1 200 OK\nContent-Length: 0\n\n", false},
		{"bare LF in a value", "GET", ok + "X: a\nContent-Length: 0\r\n\r\n", false},
		{"CR alone", "GET", ok + "X: a\rb\r\nContent-Length: 0\r\n\r\n", false},
		{"space before colon", "GET", ok + "X : a\r\nContent-Length: 0\r\n\r\n", false},
		{"control in value", "GET", ok + "X: a\x01\r\nContent-Length: 0\r\n\r\n", false},
		{"control in reason", "GET", "HTTP/1.1 200 O\x01K\r\nContent-Length: 0\r\n\r\n", false},
		{"continue first", "GET", "HTTP/1.1 100 Continue\r\n\r\n" + ok + "Content-Length: 0\r\n\r\n", false},
		{"early hints", "GET", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", false},
		{"switching", "GET", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n", false},
		{"600", "GET", "HTTP/1.1 600 Odd\r\nContent-Length: 0\r\n\r\n", false},
		{"HTTP/1.2", "GET", "HTTP/1.2 200 OK\r\nContent-Length: 0\r\n\r\n", false},
		{"HTTP/2", "GET", "HTTP/2 200 OK\r\nContent-Length: 0\r\n\r\n", false},
		{"two spaces", "GET", "HTTP/1.1  200 OK\r\nContent-Length: 0\r\n\r\n", false},
		{"tab after the code", "GET", "HTTP/1.1 200\tOK\r\nContent-Length: 0\r\n\r\n", false},
		{"short code", "GET", "HTTP/1.1 20 OK\r\nContent-Length: 0\r\n\r\n", false},
		{"head not whole", "GET", ok + "Content-Length: 0\r\n", false},
		{"nothing", "GET", "", false},
		{"garbage", "GET", "hello\r\n\r\n", false},
		{"name not a token", "GET", ok + "X(y): 1\r\nContent-Length: 0\r\n\r\n", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if took := readBoth(t, []byte(c.raw), c.method); took != c.take {
				t.Errorf("the strict way took it: %v, want %v", took, c.take)
			}
		})
	}
}

// A head larger than what one read brings is ReadResponse's, read on
// from the bytes the strict way looked at.
func TestReadResponseLongHead(t *testing.T) {
	raw := "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", 5000) + "\r\nContent-Length: 2\r\n\r\nhi"
	if readBoth(t, []byte(raw), "GET") {
		t.Error("the strict way took a head longer than its buffer")
	}
}

// The strict reader allocates less than ReadResponse for a plain answer:
// the response with its body, the header map and its values, and the
// head's string only as a shared chunk fills (headText).
func TestReadResponseAllocs(t *testing.T) {
	raw := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nDate: Mon, 30 Nov 2026 17:00:00 GMT\r\nContent-Length: 5\r\n\r\nhello")
	req := &http.Request{Method: "GET"}
	rd := bytes.NewReader(raw)
	br := bufio.NewReader(rd)
	allocs := func(parse func(*bufio.Reader, *http.Request) (*http.Response, error)) float64 {
		return testing.AllocsPerRun(100, func() {
			rd.Reset(raw)
			br.Reset(rd)
			resp, err := parse(br, req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
		})
	}
	strict, net := allocs(readStrict), allocs(http.ReadResponse)
	t.Logf("allocations a response: the strict way %v, ReadResponse %v", strict, net)
	if strict > 4 || strict >= net {
		t.Errorf("the strict way allocates %v a response, ReadResponse %v; want at most 4 and fewer", strict, net)
	}
}

func FuzzAnswerAgainstNetHTTP(f *testing.F) {
	for _, seed := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello",
		"HTTP/1.0 304 Not Modified\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\nabc",
		"HTTP/1.1 200 OK\r\nPragma: no-cache\r\nConnection: close\r\nContent-Length: 1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	} {
		f.Add([]byte(seed), false)
		f.Add([]byte(seed), true)
	}
	f.Fuzz(func(t *testing.T, raw []byte, head bool) {
		method := "GET"
		if head {
			method = "HEAD"
		}
		readBoth(t, raw, method)
	})
}

// writeWith writes r with write into a buffer and returns what it wrote,
// or its error.
func writeWith(r *http.Request, write func(*bufio.Writer, *http.Request) error) string {
	var b bytes.Buffer
	bw := bufio.NewWriter(&b)
	if err := write(bw, r); err != nil {
		return "error: " + err.Error()
	}
	bw.Flush()
	return b.String()
}

func netWrite(bw *bufio.Writer, r *http.Request) error { return r.Write(bw) }

// writeBoth checks that writeRequest writes what Request.Write writes.
func writeBoth(t *testing.T, r *http.Request) {
	t.Helper()
	var body []byte
	if r.Body != nil {
		// Request.Write reads the body: each way has a copy of it.
		body, _ = io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	want := writeWith(r, netWrite)
	got := writeWith(r, func(bw *bufio.Writer, r *http.Request) error {
		return writeRequest(bw, r, body, httptrace.ContextClientTrace(r.Context()), nil)
	})
	if want != got {
		t.Errorf("Request.Write wrote %q\nthe strict way   %q", want, got)
	}
}

// The short way writes a request as Request.Write writes it, byte for
// byte, and does so without allocating for a plain one.
func TestWriteRequestAsNetHTTP(t *testing.T) {
	plain := func() *http.Request {
		r, err := http.NewRequest("GET", "http://backend:8080/a/b?c=d&e", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Host = "example.com"
		r.Header = http.Header{
			"Accept": {"*/*"}, "User-Agent": {"curl/8"}, "X-Forwarded-For": {"10.0.0.1, 127.0.0.1"},
			"X-Real-Ip": {"127.0.0.1"}, "Cookie": {"a=1", "b=2"}, "Z-Last": {""},
		}
		return r
	}
	cases := []struct {
		name string
		set  func(*http.Request)
	}{
		{"plain", func(*http.Request) {}},
		{"no Host of its own", func(r *http.Request) { r.Host = "" }},
		{"no user agent", func(r *http.Request) { delete(r.Header, "User-Agent") }},
		{"an empty user agent", func(r *http.Request) { r.Header["User-Agent"] = []string{""} }},
		{"user agent with no value", func(r *http.Request) { r.Header["User-Agent"] = nil }},
		{"HEAD", func(r *http.Request) { r.Method = "HEAD" }},
		{"no method", func(r *http.Request) { r.Method = "" }},
		{"no header", func(r *http.Request) { r.Header = nil }},
		{"excluded names", func(r *http.Request) {
			r.Header["Host"] = []string{"evil"}
			r.Header["Content-Length"] = []string{"5"}
			r.Header["Transfer-Encoding"] = []string{"chunked"}
			r.Header["Trailer"] = []string{"X"}
		}},
		{"a name not a token", func(r *http.Request) { r.Header["Bad Name"] = []string{"x"} }},
		{"a lower-case name", func(r *http.Request) { r.Header["x-lower"] = []string{"x"} }},
		{"a value with CRLF", func(r *http.Request) { r.Header["X"] = []string{"a\r\nInjected: 1"} }},
		{"a value with spaces", func(r *http.Request) { r.Header["X"] = []string{" a\t"} }},
		{"a user agent with spaces", func(r *http.Request) { r.Header["User-Agent"] = []string{" ua "} }},
		{"close", func(r *http.Request) { r.Close = true }},
		{"close said already", func(r *http.Request) { r.Close = true; r.Header["Connection"] = []string{"close"} }},
		{"an IPv6 zone", func(r *http.Request) { r.Host = "[fe80::1%25eth0]:80" }},
		{"a host with a space", func(r *http.Request) { r.Host = "a b" }},
		{"a host not ASCII", func(r *http.Request) { r.Host = "bücher.example" }},
		{"an escaped path", func(r *http.Request) { r.URL.Path, r.URL.RawPath = "/a b", "" }},
		{"a raw path", func(r *http.Request) { r.URL.Path, r.URL.RawPath = "/a/b", "/a%2Fb" }},
		{"a bare ?", func(r *http.Request) { r.URL.RawQuery, r.URL.ForceQuery = "", true }},
		{"no path", func(r *http.Request) { r.URL.Path = "" }},
		{"a control character in the query", func(r *http.Request) { r.URL.RawQuery = "a=\x01" }},
		{"opaque", func(r *http.Request) { r.URL.Opaque = "//x/y" }},
		{"many names", func(r *http.Request) {
			for i := range 40 {
				r.Header[fmt.Sprintf("X-%02d", 40-i)] = []string{"v"}
			}
		}},
		{"a body", func(r *http.Request) { withBody(r, "POST", "a=1&b=2") }},
		{"a body, PUT, no user agent", func(r *http.Request) { withBody(r, "PUT", "{}"); delete(r.Header, "User-Agent") }},
		{"a body and its length said already", func(r *http.Request) {
			withBody(r, "POST", "xyz")
			r.Header["Content-Length"] = []string{"99"}
		}},
		{"a body, and close", func(r *http.Request) { withBody(r, "POST", "xyz"); r.Close = true }},
		{"a body, and a value with CRLF", func(r *http.Request) { withBody(r, "PATCH", "xyz"); r.Header["X"] = []string{"a\r\nb"} }},
		{"a body of the most", func(r *http.Request) { withBody(r, "POST", strings.Repeat("b", maxBody)) }},
		{"traced", func(r *http.Request) {
			*r = *r.WithContext(httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{WroteHeaders: func() {}}))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := plain()
			c.set(r)
			writeBoth(t, r)
		})
	}
	r := plain()
	var b bytes.Buffer
	bw := bufio.NewWriter(&b)
	if n := testing.AllocsPerRun(100, func() {
		b.Reset()
		bw.Reset(&b)
		writeRequest(bw, r, nil, nil, nil)
	}); n > 1 {
		t.Errorf("the strict way allocates %v a plain request, want at most 1 (the target with its query)", n)
	}
}

func FuzzWriteRequestAgainstNetHTTP(f *testing.F) {
	f.Add("GET", "/a?b", "example.com", "User-Agent", "x", "X-Y", "z", false)
	f.Add("HEAD", "/", "", "x-lower", " a ", "Bad Name", "v", true)
	f.Add("POST", "/", "h", "Content-Length", "7", "X", "y", false)
	f.Fuzz(func(t *testing.T, method, target, host, k1, v1, k2, v2 string, close bool) {
		u, err := url.Parse("http://backend" + target)
		if err != nil {
			return
		}
		r := &http.Request{Method: method, URL: u, Host: host, Close: close, Header: http.Header{k1: {v1}, k2: {v2, v1}}}
		if len(v2)%2 == 1 && v1 != "" { // about half with a body, of v1's bytes (the short way sends none empty)
			withBody(r, method, v1)
		}
		writeBoth(t, r)
	})
}

// withBody makes r a method request with body.
func withBody(r *http.Request, method, body string) {
	r.Method, r.Body, r.ContentLength = method, io.NopCloser(strings.NewReader(body)), int64(len(body))
}

// onceErr fails its first read with err and ends after it, as a socket
// does once it was reset.
type onceErr struct {
	err  error
	done bool
}

func (o *onceErr) Read([]byte) (int, error) {
	if o.done {
		return 0, io.EOF
	}
	o.done = true
	return 0, o.err
}

// A first read that fails is reported as ReadResponse reports it: that
// error, not the end of the stream a second read would find.
func TestReadResponseFirstReadFails(t *testing.T) {
	reset := fmt.Errorf("connection reset by peer")
	for _, parse := range []func(*bufio.Reader, *http.Request) (*http.Response, error){http.ReadResponse, readStrict} {
		_, err := parse(bufio.NewReader(&onceErr{err: reset}), &http.Request{Method: "GET"})
		if err != reset {
			t.Errorf("got %v, want the first read's error", err)
		}
	}
}

// A backend's answer read the strict way is written on with its values as
// read, unlooked at, and anything the handler changed checked as before:
// what appendFields writes with the head is what Header.WriteSubset
// writes of the header, whatever was done to it.
func TestValuesCutFromTheHeadAsWriteSubset(t *testing.T) {
	raw := "HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nContent-Type: text/html\r\n" +
		"X-List:  a, b \r\nX-Kept: kept\r\nX-Tab: a\tb\r\nX-Twice: 1\r\nX-Twice: 2\r\n" +
		"Etag: \"6f-5e\"\r\nContent-Length: 2\r\n\r\nhi"
	br := bufio.NewReader(strings.NewReader(raw))
	resp, a, _, err := readResponse(br, &http.Request{Method: "GET"})
	if err != nil || a == nil {
		t.Fatalf("the strict way did not take the answer: %v", err)
	}
	h, read := resp.Header, &a.read
	for name, vv := range h {
		for _, v := range vv {
			if !read.cut(v) {
				t.Errorf("%s: %q, as read, is not known as cut from the head", name, v)
			}
		}
	}
	for _, name := range []string{"Server", "Content-Type", "Etag"} {
		if !within(keyOf(h, name), tokenText) {
			t.Errorf("%s, one of commonNames, is not known for a token", name)
		}
	}
	// Changed in place, cut from a value read, added: each checked.
	h["Server"][0] = " bad\r\nvalue "
	list := h["X-List"][0] // "a, b"
	tab := h["X-Tab"][0]   // "a\tb"
	h["X-List"] = []string{list[2:], list[:2], list[1:3]}
	h["X-Tab"] = []string{tab[:2], tab[1:]}
	h["Content-Type"] = append(h["Content-Type"], "\ttext/plain\n")
	h["Bad Name"] = []string{"x"}
	h[""] = []string{"y"}
	h["X-Empty"] = []string{""}
	h["X-Status"] = []string{resp.Status, resp.Proto}
	h["X-Made"] = []string{"x\r\ny"}
	h["X-Proto"] = []string{CommonValue("https"), CommonValue("http")[1:]}
	for _, v := range []string{" bad\r\nvalue ", " b", ", ", "a\t", "\tb", "\ttext/plain\n", strings.Clone("kept")} {
		if read.cut(v) {
			t.Errorf("%q is known as cut from the head", v)
		}
	}
	var want bytes.Buffer
	if err := h.WriteSubset(&want, nil); err != nil {
		t.Fatal(err)
	}
	var buf [16]headerField
	fields := sortedFields(buf[:], h, nil)
	if got := appendFields(nil, fields, read); string(got) != want.String() {
		t.Errorf("with the head, appendFields wrote\n%q\nWriteSubset\n%q", got, want.String())
	}
	if got := appendFields(nil, fields, nil); string(got) != want.String() {
		t.Errorf("appendFields wrote\n%q\nWriteSubset\n%q", got, want.String())
	}
}

// keyOf is h's key for name, as stored.
func keyOf(h http.Header, name string) string {
	for k := range h {
		if k == name {
			return k
		}
	}
	return ""
}

// A request sent on with values of the client's head is written as
// Request.Write writes it, those values as they came and the others
// checked, with the head it was read from given (RequestHead) or not.
func TestWriteRequestWithItsHeadAsNetHTTP(t *testing.T) {
	raw := "GET /a?b=c HTTP/1.1\r\nHost: example.com:8080\r\nUser-Agent:  curl/8.5 \r\n" +
		"Accept: */*\r\nX-List: a, b\r\nCookie: a=1\r\nCookie: b=2\r\n\r\n"
	a := new(headBlock)
	in, _, _ := parseHead([]byte(raw), &http.Request{RemoteAddr: "[fe80::1%eth0]:40000"}, a)
	if in == nil {
		t.Fatal("the strict way did not take the request")
	}
	a.read.addr = in.RemoteAddr // as the server sets it (plainAddr)
	out := in.Clone(in.Context())
	out.URL, _ = url.Parse("http://backend:8080/a?b=c")
	out.Header = Outgoing(in.Header, nil, nil)
	list := in.Header["X-List"][0]
	out.Header[CommonName("X-Forwarded-Host")] = []string{in.Host}
	out.Header["X-Cut"] = []string{list[1:], list[:2]} // ", b" and "a,"
	out.Header["X-Made"] = []string{"x\r\ny", " z "}
	client := in.RemoteAddr[1:strings.IndexByte(in.RemoteAddr, ']')]
	out.Header[CommonName("X-Forwarded-For")] = []string{client}
	if !a.read.cut(client) || !a.read.cut(in.Header["Accept"][0]) || a.read.cut(strings.Clone(client)) {
		t.Errorf("the client's address and the head's values are not told from others")
	}
	for _, ua := range []string{in.Header["User-Agent"][0], "  curl/9\r\n"} {
		out.Header["User-Agent"] = []string{ua}
		want := writeWith(out, netWrite)
		for _, read := range []*ReadHead{&a.read, nil} {
			got := writeWith(out, func(bw *bufio.Writer, r *http.Request) error {
				return writeRequest(bw, r, nil, nil, read)
			})
			if got != want {
				t.Errorf("with the head %v, the strict way wrote\n%q\nRequest.Write\n%q", read != nil, got, want)
			}
		}
	}
}

// Whatever the strict readers take, a string cut from the head that
// ReadHead.cut lets through is what appendValue makes of it: no CR or LF
// in it (each line's piece lies within its line), nor whitespace at its
// ends. Every piece of each string a reader hands out is tried.
func FuzzCutAsAppendValue(f *testing.F) {
	for _, seed := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-A:  a \t b\t\r\n\r\n",
		"HTTP/1.0 404 Not\tFound \r\nX: \x01y\r\nContent-Length: 0\r\n\r\n",
		"GET /a/b?c=d HTTP/1.1\r\nHost: example.com\r\nUser-Agent:  curl/8 \r\nX: a b\r\n\r\n",
		"GET http://h:1/%20x HTTP/1.0\r\nHost: h:1\r\nCookie: a=1; b=2\r\nCookie: c\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var read *ReadHead
		var strs []string
		if bytes.HasPrefix(raw, []byte("HTTP/")) {
			n, lines := headEnd(raw)
			if n == 0 {
				return
			}
			br := bufio.NewReader(bytes.NewReader(raw[n:]))
			a, _ := parseResponse(raw[:n], lines-1, br, &http.Request{Method: "GET"})
			if a == nil {
				return
			}
			read = &a.read
			strs = append(strs, a.resp.Status, a.resp.Proto)
			for k, vv := range a.resp.Header {
				strs = append(append(strs, k), vv...)
			}
		} else {
			r, a, _ := shortHead(raw)
			if r == nil {
				return
			}
			read = &a.read
			strs = append(strs, r.Method, r.RequestURI, r.Proto, r.Host, r.URL.Path, r.URL.RawPath, r.URL.RawQuery, r.URL.Host)
			for k, vv := range r.Header {
				strs = append(append(strs, k), vv...)
			}
		}
		for _, s := range strs {
			for i := 0; i <= len(s); i++ {
				for j := i; j <= len(s); j++ {
					if v := s[i:j]; read.cut(v) && string(appendValue(nil, v)) != v {
						t.Fatalf("%q, cut from the head, is written %q", v, appendValue(nil, v))
					}
				}
			}
		}
	})
}

// A client's address is written as it is only when every piece of it
// would be: no space, control byte or byte above ASCII anywhere in it.
func TestPlainAddr(t *testing.T) {
	for a, want := range map[string]bool{
		"127.0.0.1:5000": true, "[::1]:80": true, "[fe80::1%eth0]:1": true, "": true,
		"[fe80::1%e th0]:1": false, "[fe80::1%e\tth0]:1": false, "[fe80::1%e\r\n]:1": false,
		"[fe80::1%\x7f]:1": false, "[fe80::1%\xc3\xa9]:1": false,
	} {
		if got := plainAddr(a); got != want {
			t.Errorf("plainAddr(%q) = %v, want %v", a, got, want)
		}
		if !plainAddr(a) {
			continue
		}
		for i := 0; i <= len(a); i++ {
			for j := i; j <= len(a); j++ {
				if v := a[i:j]; string(appendValue(nil, v)) != v {
					t.Errorf("%q, a piece of a plain address, is written %q", v, appendValue(nil, v))
				}
			}
		}
	}
}

// Each name commonNames files, and each value CommonValue hands out, is
// cut from tokenText, all of whose pieces are tokens, written as they
// are; a string made elsewhere is not known, whatever it says.
func TestCommonNamesKnown(t *testing.T) {
	for k, c := range commonFiled() {
		if got := CommonName(k); got != c || !known(got) {
			t.Errorf("%q: filed as %q, want %q, known %v", k, got, c, known(got))
		}
	}
	for _, v := range []string{"http", "https"} {
		if c := CommonValue(v); c != v || !known(c) || string(appendValue(nil, c)) != c {
			t.Errorf("CommonValue(%q) = %q, known %v", v, c, known(c))
		}
	}
	if v := CommonValue("ftp"); v != "ftp" || known(v) {
		t.Errorf("CommonValue(%q) = %q, known %v", "ftp", v, known(v))
	}
	for i := 0; i < len(tokenText); i++ {
		if !validName(tokenText[i : i+1]) {
			t.Errorf("tokenText holds %q, not a token's byte", tokenText[i])
		}
	}
	for _, n := range []string{strings.Clone("Content-Type"), "X-Forwarded-For", "", "Not Common"} {
		if n != "" && within(n, tokenText) {
			t.Errorf("%q, not cut from tokenText, is known", n)
		}
	}
	if n := CommonName("X-Custom"); n != "X-Custom" || within(n, tokenText) {
		t.Errorf("CommonName(%q) = %q, cut from tokenText: %v", "X-Custom", n, within(n, tokenText))
	}
}
