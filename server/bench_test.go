package server_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// BenchmarkProxyGET: GETs through the reverse proxy to three local
// backends, client, rotor and backends in this process. For profiling the
// proxy's own path; throughput figures come from bench/serve.sh with wrk.
func BenchmarkProxyGET(b *testing.B) {
	t := &testing.T{}
	a, bb, c := newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")
	defer a.Close()
	defer bb.Close()
	defer c.Close()
	r := startRotorB(b, webConfig("round_robin", a, bb, c))
	url := r.url("web")
	getInParallel(b, &http.Transport{MaxIdleConnsPerHost: 256}, url)
}

// getInParallel GETs url through tr from every benchmark goroutine, the
// bodies read to their end.
func getInParallel(b *testing.B, tr *http.Transport, url string) {
	inParallel(b, tr, func(cl *http.Client) (*http.Response, error) { return cl.Get(url) })
}

// inParallel sends a request through tr with send from every benchmark
// goroutine, the answers' bodies read to their end.
func inParallel(b *testing.B, tr *http.Transport, send func(*http.Client) (*http.Response, error)) {
	cl := &http.Client{Transport: tr}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := send(cl)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	tr.CloseIdleConnections()
}

// BenchmarkProxyChunkedPOST: 2 KB POSTs of no known length, as Go's
// client sends them (the head and the body's chunk in one write, the
// last chunk in another: in hand when both have come by the time rotor
// reads, read ahead otherwise), through the reverse proxy to a local
// backend that reads them; client, rotor and backend in this process.
// Most of the bytes it allocates a request are the client's (its copy
// of a body of no known length takes a 32 KiB buffer).
func BenchmarkProxyChunkedPOST(b *testing.B) {
	t := &testing.T{}
	a := newBackend(t, "a")
	defer a.Close()
	r := startRotorB(b, webConfig("round_robin", a))
	body := strings.Repeat("p", 2000)
	inParallel(b, &http.Transport{MaxIdleConnsPerHost: 256}, func(cl *http.Client) (*http.Response, error) {
		// A reader of no known length: the body goes chunked.
		return cl.Post(r.url("web"), "text/plain", io.MultiReader(strings.NewReader(body)))
	})
}

// BenchmarkForwardGET: absolute-URI GETs through the forward listener's
// direct route to a local backend, client, rotor and backend in this
// process: the forward path's own cost, allocations included.
func BenchmarkForwardGET(b *testing.B) {
	t := &testing.T{}
	a := newBackend(t, "a")
	defer a.Close()
	r := startRotorB(b, `admin: {listen: "off"}
listeners:
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes, allow_targets: [127.0.0.0/8]}
pools:
  - {name: routes, endpoints: [{name: direct, url: "direct://"}]}
`)
	proxyURL, err := url.Parse(r.url("out"))
	if err != nil {
		b.Fatal(err)
	}
	getInParallel(b, &http.Transport{MaxIdleConnsPerHost: 256, Proxy: http.ProxyURL(proxyURL)}, a.URL+"/")
}

// BenchmarkUpgradedEcho: 64-byte messages and their echoes over
// upgraded connections (WebSocket-like) through the reverse proxy, one
// connection per benchmark goroutine (25 a core), client, rotor and an
// echoing backend in this process: what relaying an upgraded connection
// costs a message.
func BenchmarkUpgradedEcho(b *testing.B) {
	r := startRotorB(b, webConfig("round_robin", newUpgradeEcho(b)))
	addr := r.Addr("web").String()
	msg := []byte(strings.Repeat("m", 64))
	b.SetBytes(int64(len(msg)))
	b.SetParallelism(25) // 50 connections on two cores
	b.RunParallel(func(pb *testing.PB) {
		c, br := upgrade(b, addr)
		defer c.Close()
		back := make([]byte, len(msg))
		for pb.Next() {
			if _, err := c.Write(msg); err != nil {
				b.Error(err)
				return
			}
			if _, err := io.ReadFull(br, back); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
