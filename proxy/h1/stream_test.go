package h1_test

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/internal/testtool"
	"github.com/rotor-lb/rotor/proxy"
	"github.com/rotor-lb/rotor/proxy/h1"
)

// streamed answers with what its handler read of the body, as it read
// it: the answer's kind, the bytes, how the read ended and the trailer.
func streamed(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	fmt.Fprintf(w, "%T %v read %d %x %v trailer=%v", w, h1.BodyInHand(r), len(b), sha256.Sum256(b), err, r.Trailer)
}

func wantStreamed(body, trailer string) string {
	return fmt.Sprintf("*h1.response false read %d %x <nil> trailer=%s", len(body), sha256.Sum256([]byte(body)), trailer)
}

// wantInHand is streamed's answer to a body read whole before its
// handler ran.
func wantInHand(body string) string {
	return fmt.Sprintf("*h1.response true read %d %x <nil> trailer=map[]", len(body), sha256.Sum256([]byte(body)))
}

// startBodies starts a server with handler h over o, head and body
// timeouts of 5 s, and returns its address.
func startBodies(t *testing.T, o over, h http.HandlerFunc) string {
	return o.startWith(t, &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second},
		func(s *h1.Server) { s.SetBodyLimits(5*time.Second, 0) })
}

// dialStreamed starts a server whose handler is streamed over o
// (startBodies), and dials it.
func dialStreamed(t *testing.T, o over) (net.Conn, *bufio.Reader) {
	return o.dial(t, startBodies(t, o, streamed))
}

// writeSlowly writes the pieces with a pause before each.
func writeSlowly(c net.Conn, pause time.Duration, pieces ...string) {
	for _, p := range pieces {
		time.Sleep(pause)
		io.WriteString(c, p)
	}
}

// A chunked body, and one longer than is read before the handler runs,
// are read as the handler reads them (but a chunked body that came
// whole with its head, with no trailer), in whatever pieces the client
// sends them (a size line cut in two, a trailer), for longer than the
// ticker takes to watch a request (the watch reads nothing of a body
// still to come), and the connection stays on the short way, kept alive:
// the requests after them, pipelined or not, are its. A client that
// expects 100 Continue is sent it when the handler first waits for the
// body. Over cleartext and TLS.
func TestServerStreamsBodies(t *testing.T) {
	testtool.NeedsRaw(t)
	for _, o := range overs(t) {
		t.Run(o.name, func(t *testing.T) {
			c, br := dialStreamed(t, o)
			next := func(what string) {
				t.Helper()
				io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
				if resp, got := readAnswer(t, br); got != wantStreamed("", "map[]") || resp.Close {
					t.Fatalf("the request after %s: %q (close %v), want the short way's, kept alive", what, got, resp.Close)
				}
			}

			io.WriteString(c, "POST /chunked HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
			writeSlowly(c, 80*time.Millisecond, "1", "0\r\n0123456789ab", "cdef\r\n3;ext=1\r\nx", "y", "z", "\r", "\n0\r\nX-Sum: 1", "9\r\n\r\n")
			resp, got := readAnswer(t, br)
			if want := wantStreamed("0123456789abcdefxyz", "map[X-Sum:[19]]"); got != want || resp.Close {
				t.Fatalf("a chunked body in pieces: %q (close %v), want %q kept alive", got, resp.Close, want)
			}
			next("a chunked body")

			body := strings.Repeat("0123456789", 20000)
			fmt.Fprintf(c, "PUT /long HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n", len(body))
			writeSlowly(c, 60*time.Millisecond, body[:50000], body[50000:120000], body[120000:])
			if resp, got := readAnswer(t, br); got != wantStreamed(body, "map[]") || resp.Close {
				t.Fatalf("a long body in pieces: %q (close %v), want %q kept alive", got, resp.Close, wantStreamed(body, "map[]"))
			}
			next("a long body")

			io.WriteString(c, "POST /expect HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != http.StatusContinue {
				t.Fatalf("before the body: %v, %v; want 100 Continue", resp, err)
			}
			io.WriteString(c, "5\r\nhello\r\n0\r\n\r\n")
			if _, got := readAnswer(t, br); got != wantStreamed("hello", "map[]") {
				t.Fatalf("a chunked body after 100 Continue: %q", got)
			}

			// Pipelined: two chunked requests and a GET in one write; the
			// first came whole with its head, and is taken in hand.
			io.WriteString(c, chunkedPost("first", 2, "")+chunkedPost(body, 7000, "")+"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
			for _, want := range []string{wantInHand("first"), wantStreamed(body, "map[]"), wantStreamed("", "map[]")} {
				if _, got := readAnswer(t, br); got != want {
					t.Fatalf("pipelined: %q, want %q", got, want)
				}
			}
		})
	}
}

// The rest of a body its handler did not read is read and dropped once
// the answer is out, and the connection carries the next request, as
// nginx keeps it: chunked or of a length, the rest coming after the
// answer, also when a read the handler left waiting was at it, and a
// read of the body after the handler returned fails at once. The answer
// says the connection closes when more than 256 KiB is known to be left,
// or the client expected a 100 Continue it was not sent; the connection
// closes without saying so when the rest does not come within the body
// timeout, or is longer than 256 KiB. Over cleartext and TLS.
func TestServerStreamedBodyNotRead(t *testing.T) {
	testtool.NeedsRaw(t)
	const timeout = 500 * time.Millisecond
	long := strings.Repeat("l", 300000)
	for _, o := range overs(t) {
		t.Run(o.name, func(t *testing.T) {
			late := make(chan error, 1)
			returned := make(chan time.Time, 1)
			addr := o.startWith(t, &http.Server{ReadHeaderTimeout: 5 * time.Second,
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					switch r.URL.Path {
					case "/waiting":
						started := make(chan struct{})
						body := r.Body
						go func() {
							close(started)
							_, err := io.ReadAll(body)
							late <- err
						}()
						<-started
						time.Sleep(50 * time.Millisecond) // the read waits for the client
					case "/after":
						body := r.Body // the request is the server's again once the handler returned
						defer func() {
							go func() {
								time.Sleep(50 * time.Millisecond)
								_, err := body.Read(make([]byte, 10))
								late <- err
							}()
						}()
					case "/next":
						io.WriteString(w, "next")
						return
					}
					io.WriteString(w, "not read")
					returned <- time.Now()
				})},
				func(s *h1.Server) { s.SetBodyLimits(timeout, 0) })

			next := "GET /next HTTP/1.1\r\nHost: a\r\n\r\n"
			for _, tc := range []struct {
				head, rest string
				said       bool // the answer says the connection closes
				kept       bool // and it carries the next request
			}{
				{"POST /ignore HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", "lo\r\n0\r\n\r\n", false, true},
				{"POST /ignore HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\nhello", long[:99995], false, true},
				{"POST /after HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", "lo\r\n0\r\n\r\n", false, true},
				{"POST /waiting HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", "lo\r\n0\r\n\r\n", false, true},
				{"POST /never HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\nhello", "", false, false},
				{"POST /longer HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(long), long), false, false},
				{"POST /known-longer HTTP/1.1\r\nHost: a\r\nContent-Length: 300000\r\n\r\nhello", "", true, false},
				{"POST /expect HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 100000\r\n\r\n", "", true, false},
			} {
				c, br := o.dial(t, addr)
				io.WriteString(c, tc.head)
				resp, got := readAnswer(t, br)
				if resp.StatusCode != 200 || got != "not read" || resp.Close != tc.said {
					t.Errorf("%q: %d %q (close %v), want 200, not read, close said %v", tc.head, resp.StatusCode, got, resp.Close, tc.said)
				}
				handlerDone := <-returned
				if tc.rest != "" {
					go io.WriteString(c, tc.rest+next)
				}
				if tc.kept {
					if resp, got := readAnswer(t, br); got != "next" {
						t.Errorf("%q: the next request answered %d %q, want next", tc.head, resp.StatusCode, got)
					}
				} else {
					start := time.Now()
					b, _ := io.ReadAll(br)
					if len(b) != 0 || time.Since(start) > 4*timeout {
						t.Errorf("%q: after the answer %q for %v; want the end within the body timeout", tc.head, b, time.Since(start))
					}
				}
				if strings.Contains(tc.head, "/after") || strings.Contains(tc.head, "/waiting") {
					err := <-late
					if err == nil || time.Since(handlerDone) > time.Second {
						t.Errorf("%q: a read of the body after its handler returned: %v %v after it; want an error at once", tc.head, err, time.Since(handlerDone))
					}
				}
				c.Close()
			}
		})
	}
}

// A body read as its handler reads it is held to the server's limits,
// with proxy.LimitBody's errors: a read that waits past the body timeout
// fails with ErrBodyTimeout, a body over MaxBody with ErrBodyTooLarge
// after the maximum's bytes, and a client that ends it early, or sends
// framing net/http would refuse (or a trailer line that is no field),
// fails the read; each closes the connection after the answer, with
// Connection: close but where the client's end cut a body of a length
// (net/http's reader counts that as the body's end, and the connection
// closes when it reads the next request). Over cleartext and TLS.
func TestServerStreamedBodiesAreBounded(t *testing.T) {
	testtool.NeedsRaw(t)
	for _, o := range overs(t) {
		t.Run(o.name, func(t *testing.T) {
			const timeout = 300 * time.Millisecond
			type seen struct {
				n   int
				err error
			}
			got := make(chan seen, 1)
			addr := o.startWith(t, &http.Server{ReadHeaderTimeout: 5 * time.Second,
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					b, err := io.ReadAll(r.Body)
					got <- seen{len(b), err}
					w.WriteHeader(proxy.ClientStatus(err))
				})},
				func(s *h1.Server) { s.SetBodyLimits(timeout, 100000) })

			for _, tc := range []struct {
				name, req string
				end       bool // the client ends its side after the request
				unsaid    bool // the answer does not say Connection: close
				n         int
				is        error
				status    int
			}{
				{"stalled", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", false, false, 3, proxy.ErrBodyTimeout, 408},
				{"stalled long", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 90000\r\n\r\nabc", false, false, 3, proxy.ErrBodyTimeout, 408},
				{"over the maximum", chunkedPost(strings.Repeat("m", 100001), 30000, ""), false, false, 100000, proxy.ErrBodyTooLarge, 413},
				{"cut", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 90000\r\n\r\nabcd", true, true, 4, io.ErrUnexpectedEOF, 400},
				{"cut chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcd", true, false, 4, io.ErrUnexpectedEOF, 400},
				{"bad size", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n-1\r\n", false, false, 2, nil, 400},
				{"size line too long", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1;" + strings.Repeat("e", 5000), false, false, 0, nil, 400},
				{"extensions over the data", extended(70000, 6, 3000, 1), false, false, 70005, nil, 400},
				{"bad trailer", chunkedPost("abc", 3, "X-No-Colon\r\n"), false, false, 3, nil, 400},
				{"trailer too long", chunkedPost("abc", 3, strings.Repeat("X-Long: "+strings.Repeat("v", 90)+"\r\n", 50)), false, false, 3, nil, 400},
			} {
				c, br := o.dial(t, addr)
				start := time.Now()
				io.WriteString(c, tc.req)
				if tc.end {
					time.Sleep(20 * time.Millisecond)
					closeWrite(t, c)
				}
				s := <-got
				if s.n != tc.n || s.err == nil || tc.is != nil && !errors.Is(s.err, tc.is) {
					t.Errorf("%s: read %d, %v; want %d, then %v", tc.name, s.n, s.err, tc.n, tc.is)
				}
				if d := time.Since(start); tc.is == proxy.ErrBodyTimeout && (d < timeout || d > 3*timeout) {
					t.Errorf("%s: failed after %v, want about %v", tc.name, d, timeout)
				}
				rb := bufio.NewReader(br)
				resp, err := http.ReadResponse(rb, nil)
				if err != nil || resp.StatusCode != tc.status || resp.Close == tc.unsaid {
					t.Errorf("%s: answer %v, %v; want %d, Connection: close said %v", tc.name, resp, err, tc.status, !tc.unsaid)
				} else if rest, err := io.ReadAll(rb); len(rest) != 0 || err != nil {
					t.Errorf("%s: after the answer %q, %v; want the connection's end", tc.name, rest, err)
				}
				c.Close()
			}
		})
	}
}

// A chunked body that has come whole is taken in hand before its handler
// runs: one in the buffer with its head, and, in cleartext, one that
// filled the buffer and whose rest the socket held (looked at, then taken
// up to the body's end and no further: the request behind it is served
// next). Over TLS such a body is read as the handler reads it, as is one
// whose end is still to come.
func TestServerTakesChunkedBodiesInHand(t *testing.T) {
	testtool.NeedsRaw(t)
	for _, o := range overs(t) {
		t.Run(o.name, func(t *testing.T) {
			c, br := dialStreamed(t, o)
			body := strings.Repeat("abcdefghij", 2000)
			large := wantInHand(body)
			if o.name == "tls" {
				large = wantStreamed(body, "map[]")
			}
			io.WriteString(c, chunkedPost("small", 2, "")+chunkedPost(body, 7000, "")+"GET /after HTTP/1.1\r\nHost: a\r\n\r\n")
			for _, want := range []string{wantInHand("small"), large, wantStreamed("", "map[]")} {
				if resp, got := readAnswer(t, br); got != want || resp.Close {
					t.Fatalf("%q (close %v), want %q kept alive", got, resp.Close, want)
				}
			}
			// The end still to come: read as the handler reads it.
			req := chunkedPost(body, 7000, "")
			writeSlowly(c, 100*time.Millisecond, req[:len(req)-200], req[len(req)-200:])
			if resp, got := readAnswer(t, br); got != wantStreamed(body, "map[]") || resp.Close {
				t.Fatalf("a body whose end came later: %q (close %v)", got, resp.Close)
			}
		})
	}
}

// A read of a streamed body gives its reader all of the body that has
// come, the buffer's and what the socket holds, across chunks, not only
// what the buffer held (cleartext; over TLS a read gives what the
// buffer and one read of the connection have): a transport sends it on
// in fewer, larger pieces.
func TestServerStreamedReadsTakeWhatCame(t *testing.T) {
	testtool.NeedsRaw(t)
	for _, o := range overs(t) {
		t.Run(o.name, func(t *testing.T) {
			first := make(chan int, 1)
			addr := startBodies(t, o, func(w http.ResponseWriter, r *http.Request) {
				n, _ := r.Body.Read(make([]byte, 64<<10))
				first <- n
				rest, err := io.ReadAll(r.Body)
				fmt.Fprintf(w, "%d %v", n+len(rest), err)
			})
			c, br := o.dial(t, addr)
			var req strings.Builder
			req.WriteString("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
			for range 10 {
				fmt.Fprintf(&req, "3e8\r\n%s\r\n", strings.Repeat("z", 1000))
			}
			io.WriteString(c, req.String()) // the end later: streamed
			n := <-first
			io.WriteString(c, "0\r\n\r\n")
			if _, got := readAnswer(t, br); got != "10000 <nil>" {
				t.Fatalf("answer %q, want the 10,000 bytes read", got)
			}
			if o.name == "cleartext" && n != 10000 {
				t.Fatalf("the first read took %d bytes of the 10,000 that had come", n)
			}
			if n <= 0 {
				t.Fatalf("the first read took %d bytes", n)
			}
		})
	}
}
