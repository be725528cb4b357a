// Package bench runs live benchmarks on loopback: fault-injecting routes
// and targets, a load driver that sends the same requests through several
// policies at once, and the reports `rotor bench` and `rotor demo` print.
package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"
)

// RouteSpec is how a simulated route behaves: a forward proxy on
// loopback that adds latency, and refuses requests in set windows of time.
type RouteSpec struct {
	Name    string
	Latency time.Duration // added to each request, +-Jitter
	Jitter  float64       // 0.2: +-20%
	// Blocked: answers 403 ("access denied") from BlockFrom for BlockFor.
	BlockFrom, BlockFor time.Duration
	// Bursts: answers 503 for BurstFor at the start of every BurstEvery
	// (after the first BurstEvery).
	BurstEvery, BurstFor time.Duration
}

// failing says whether the route refuses at elapsed, and how.
func (s RouteSpec) failing(elapsed time.Duration) int {
	if s.BlockFor > 0 && elapsed >= s.BlockFrom && elapsed < s.BlockFrom+s.BlockFor {
		return http.StatusForbidden
	}
	if s.BurstEvery > 0 && elapsed >= s.BurstEvery && elapsed%s.BurstEvery < s.BurstFor {
		return http.StatusServiceUnavailable
	}
	return 0
}

// Server is a loopback HTTP server started by this package.
type Server struct {
	URL  string
	srv  *http.Server
	done chan struct{}
}

// Close stops it.
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	<-s.done
}

func serve(h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + ln.Addr().String(), srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// StartTarget starts the site the benchmarks fetch: it answers every path
// after latency with a small page.
func StartTarget(latency time.Duration) (*Server, error) {
	return serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(latency):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<html><body>page %s</body></html>\n", r.URL.Path)
	}))
}

// StartRoute starts a route with spec's behaviour, its clock starting now.
func StartRoute(spec RouteSpec, seed uint64) (*Server, error) {
	start := time.Now()
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, 7))
	upstream := &http.Transport{MaxIdleConnsPerHost: 64}
	return serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if status := spec.failing(time.Since(start)); status != 0 {
			http.Error(w, "access denied by "+spec.Name, status)
			return
		}
		mu.Lock()
		f := 1 + spec.Jitter*(2*rng.Float64()-1)
		mu.Unlock()
		select {
		case <-time.After(time.Duration(float64(spec.Latency) * f)):
		case <-r.Context().Done():
			return
		}
		if !r.URL.IsAbs() {
			http.Error(w, "a route takes absolute-URI requests", http.StatusBadRequest)
			return
		}
		out := r.Clone(r.Context())
		out.RequestURI = ""
		out.Header.Del("Proxy-Authorization")
		resp, err := upstream.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
}
