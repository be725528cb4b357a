package server_test

import (
	"io"
	"net/http"
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
	tr := &http.Transport{MaxIdleConnsPerHost: 256}
	cl := &http.Client{Transport: tr}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := cl.Get(url)
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
