// Package check runs active health checks: every interval each endpoint is
// probed (an HTTP request expecting a status, or a TCP connect), and after
// Rise passes in a row it is marked up, after Fall failures in a row down.
// A down endpoint is not picked (health.State.Available).
package check

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/proxy"
)

// Spec is what to check and how often.
type Spec struct {
	Kind     string // "http" or "tcp"
	Path     string // http
	Expect   *health.Classifier
	Interval time.Duration
	Timeout  time.Duration
	Rise     int
	Fall     int
	TLS      *tls.Config // http: how https endpoints are reached (nil: the system's roots)
}

// Target is one endpoint to check.
type Target struct {
	Name  string
	State *health.State
	URL   *url.URL // http: the endpoint's base URL
	Addr  string   // tcp: host:port
}

// Checker checks one pool's endpoints until stopped.
type Checker struct {
	spec    Spec
	targets []Target
	log     *slog.Logger
	client  *http.Client
	stop    context.CancelFunc
	done    chan struct{}

	mu     sync.Mutex
	passes map[string]int // guarded by mu: consecutive passes
	fails  map[string]int // guarded by mu: consecutive failures
}

// Start begins checking targets now and every interval after.
func Start(spec Spec, targets []Target, log *slog.Logger) *Checker {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Checker{
		spec: spec, targets: targets, log: log, stop: cancel, done: make(chan struct{}),
		passes: map[string]int{}, fails: map[string]int{},
		client: &http.Client{
			Timeout:       spec.Timeout,
			Transport:     &http.Transport{DisableKeepAlives: true, Proxy: nil, TLSClientConfig: spec.TLS},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
	go c.loop(ctx)
	return c
}

// Stop ends the checks and waits for the last round.
func (c *Checker) Stop() {
	c.stop()
	<-c.done
}

func (c *Checker) loop(ctx context.Context) {
	defer close(c.done)
	t := time.NewTicker(c.spec.Interval)
	defer t.Stop()
	for {
		c.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (c *Checker) round(ctx context.Context) {
	var wg sync.WaitGroup
	for _, tg := range c.targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.probe(ctx, tg)
			if ctx.Err() != nil {
				return
			}
			if proxy.HostShort(err) {
				// The probe could not be sent (no descriptor, say):
				// it says nothing of the endpoint, neither way.
				c.log.Warn("health check not sent: this host ran short", "endpoint", tg.Name, "error", redact(err))
				return
			}
			c.record(tg, err)
		}()
	}
	wg.Wait()
}

func (c *Checker) probe(ctx context.Context, tg Target) error {
	ctx, cancel := context.WithTimeout(ctx, c.spec.Timeout)
	defer cancel()
	if c.spec.Kind == "tcp" {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", tg.Addr)
		if err != nil {
			return err
		}
		return conn.Close()
	}
	u := *tg.URL
	u.Path = singleJoin(u.Path, c.spec.Path)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "rotor-health-check")
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if !c.spec.Expect.FailsOn(resp.StatusCode) { // Expect holds the passing statuses
		return fmt.Errorf("status %d, want %s", resp.StatusCode, c.spec.Expect)
	}
	return nil
}

func singleJoin(a, b string) string {
	if a == "" || a == "/" {
		return b
	}
	if a[len(a)-1] == '/' {
		a = a[:len(a)-1]
	}
	return a + b
}

func (c *Checker) record(tg Target, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if err == nil {
		c.fails[tg.Name] = 0
		c.passes[tg.Name]++
		if tg.State.Down() && c.passes[tg.Name] >= c.spec.Rise {
			tg.State.SetDown(false, now)
			c.log.Info("endpoint up", "endpoint", tg.Name, "passes", c.passes[tg.Name])
		}
		return
	}
	c.passes[tg.Name] = 0
	c.fails[tg.Name]++
	if !tg.State.Down() && c.fails[tg.Name] >= c.spec.Fall {
		tg.State.SetDown(true, now)
		c.log.Warn("endpoint down", "endpoint", tg.Name, "failures", c.fails[tg.Name], "error", redact(err))
	}
}

// redact keeps URL credentials out of logged errors.
func redact(err error) string {
	if ue, ok := err.(*url.Error); ok {
		if u, perr := url.Parse(ue.URL); perr == nil {
			return ue.Op + " " + u.Redacted() + ": " + ue.Err.Error()
		}
	}
	return err.Error()
}
