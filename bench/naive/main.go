// Command naive is a bare httputil.ReverseProxy, round robin over the
// backends given, for measuring what net/http costs without rotor: with
// -sync its transport writes each request and reads the response on a
// pooled connection in the request's own goroutine, with no reader or
// writer goroutine per connection. The synchronous transport is for that
// measurement only: no timeouts, no retry on a stale connection, HTTP
// backends only.
// Usage: naive [-sync] LISTEN BACKEND...
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
)

func main() {
	syncRT := flag.Bool("sync", false, "a synchronous transport instead of http.Transport")
	flag.Parse()
	if flag.NArg() < 2 {
		fmt.Fprintln(os.Stderr, "usage: naive [-sync] LISTEN BACKEND...")
		os.Exit(2)
	}
	var backends []*url.URL
	for _, a := range flag.Args()[1:] {
		backends = append(backends, &url.URL{Scheme: "http", Host: a})
	}
	var next atomic.Uint64
	var tr http.RoundTripper = &http.Transport{MaxIdleConnsPerHost: 256}
	if *syncRT {
		tr = &syncTransport{idle: map[string][]*conn{}}
	}
	rp := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(backends[next.Add(1)%uint64(len(backends))]) },
		Transport: tr,
	}
	log.Fatal(http.ListenAndServe(flag.Arg(0), rp))
}

type conn struct {
	net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

// syncTransport keeps idle connections by host and uses one per request.
type syncTransport struct {
	mu   sync.Mutex
	idle map[string][]*conn
}

func (t *syncTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	host := r.URL.Host
	t.mu.Lock()
	var c *conn
	if l := t.idle[host]; len(l) > 0 {
		c, t.idle[host] = l[len(l)-1], l[:len(l)-1]
	}
	t.mu.Unlock()
	if c == nil {
		nc, err := net.Dial("tcp", host)
		if err != nil {
			return nil, err
		}
		c = &conn{Conn: nc, br: bufio.NewReader(nc), bw: bufio.NewWriter(nc)}
	}
	if err := r.Write(c.bw); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.bw.Flush(); err != nil {
		c.Close()
		return nil, err
	}
	resp, err := http.ReadResponse(c.br, r)
	if err != nil {
		c.Close()
		return nil, err
	}
	resp.Body = &body{ReadCloser: resp.Body, t: t, c: c, host: host, reuse: !resp.Close}
	return resp, nil
}

// body gives its connection back once read to the end.
type body struct {
	io.ReadCloser
	t     *syncTransport
	c     *conn
	host  string
	reuse bool
	done  bool
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		if b.reuse {
			b.t.mu.Lock()
			b.t.idle[b.host] = append(b.t.idle[b.host], b.c)
			b.t.mu.Unlock()
		} else {
			b.c.Close()
		}
	}
	return n, err
}

func (b *body) Close() error {
	if !b.done {
		b.done = true
		b.c.Close()
	}
	return nil
}
