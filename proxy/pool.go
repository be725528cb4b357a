// Package proxy holds what rotor's proxies share: a pool as the proxies
// run it (primaries, backups, panic mode, slow start, the request key,
// retries and their budget, timeouts) and the one mapping of errors to
// statuses.
package proxy

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
)

// KeyFunc extracts a request's key for key-based policies.
type KeyFunc func(r *http.Request) string

// Pool is a pool as the proxies run it. It is immutable once built; a
// reload builds a new one around the same balance.Pools, so endpoint health
// carries over.
type Pool struct {
	Name    string
	Primary *balance.Pool
	Backup  *balance.Pool // nil without backup endpoints
	Key     KeyFunc       // nil: no key
	Targets map[string]*url.URL
	// Addrs are the tcp endpoints' addresses by name.
	Addrs map[string]string

	// Transport carries http pools' requests: keep-alive connections per
	// endpoint, the connect timeout in its dialer and the per-try timeout
	// as its response-header timeout.
	Transport *http.Transport

	Attempts      int
	RetryStatuses *health.Classifier
	Budget        *Budget
	Connect       time.Duration
	Try           time.Duration
	Total         time.Duration

	PanicThreshold float64
	SlowStart      time.Duration
	Sticky         *StickyCookie
}

// NewTransport returns the transport for an http pool.
func NewTransport(connect, try time.Duration) *http.Transport {
	dialer := &net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}
	return &http.Transport{
		DialContext:           dialer.DialContext,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   512,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		ResponseHeaderTimeout: try,
		// Backends get HTTP/1.1 keep-alive pools; clients may speak HTTP/2.
		ForceAttemptHTTP2: false,
	}
}

// ErrTimeout means the endpoint did not answer in time (504).
var ErrTimeout = errors.New("proxy: timeout")

// Pick chooses an endpoint: in panic mode (too few primaries healthy) any
// primary; else an available primary, then an available backup, then the
// least bad primary. exclude names endpoints already tried by this
// request, avoided when anything else is available.
func (p *Pool) Pick(r balance.Request, exclude []string) (balance.Pick, error) {
	if p.PanicThreshold > 0 && p.Primary.HealthyShare() < p.PanicThreshold {
		return p.Primary.PickAny()
	}
	accept := func(ep *balance.Endpoint) bool { return !slices.Contains(exclude, ep.Name) && p.warm(ep) }
	for _, pool := range []*balance.Pool{p.Primary, p.Backup} {
		if pool == nil {
			continue
		}
		pk, err := pool.PickAvailableIf(r, accept)
		if err != balance.ErrNoEndpoint {
			return pk, err
		}
	}
	return p.Primary.Pick(r)
}

// warm applies slow start: an endpoint that came back less than SlowStart
// ago takes a pick with probability elapsed/SlowStart (at least 10%), so its
// share ramps up instead of jumping to full at once.
func (p *Pool) warm(ep *balance.Endpoint) bool {
	if p.SlowStart <= 0 {
		return true
	}
	since := ep.State.UpSince()
	if since.IsZero() {
		return true
	}
	f := float64(time.Since(since)) / float64(p.SlowStart)
	if f >= 1 {
		return true
	}
	return rand.Float64() < max(f, 0.1)
}

// Classify turns a transport error into an outcome kind: whether the
// endpoint or the client is to blame, and whether the endpoint could have
// seen the request.
func Classify(err error, ctx context.Context) health.ErrorKind {
	switch {
	case err == nil:
		return health.NoError
	case ctx.Err() == context.Canceled || errors.Is(err, context.Canceled):
		return health.Canceled
	case errors.Is(err, ErrTimeout) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		return health.Timeout
	case IsDialError(err):
		return health.ConnectError
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return health.Timeout
	}
	return health.Broken
}

// IsDialError reports whether err happened before a connection existed,
// so the endpoint saw nothing and any request may be retried.
func IsDialError(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// Status maps an error to the status the client gets: 503 when no endpoint
// can take the request, 504 on a timeout, 499 when the client went away
// (logged, never sent), 502 for anything else an endpoint did wrong.
func Status(err error, kind health.ErrorKind) int {
	switch {
	case errors.Is(err, balance.ErrNoEndpoint), errors.Is(err, balance.ErrRejected):
		return http.StatusServiceUnavailable
	case kind == health.Canceled:
		return 499
	case kind == health.Timeout:
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}

// Budget bounds retries to a share of requests (Finagle's RetryBudget):
// each request deposits ratio tokens, each retry withdraws one; a small
// reserve lets a quiet pool retry at all. A dying pool is not hammered
// with retries on top of its load.
type Budget struct {
	mu      sync.Mutex
	ratio   float64 // immutable
	tokens  float64 // guarded by mu
	reserve float64 // immutable: the most tokens kept
}

// NewBudget returns a budget allowing ratio retries per request.
func NewBudget(ratio float64) *Budget {
	return &Budget{ratio: ratio, tokens: 10, reserve: 10 + 1000*ratio}
}

// Deposit is called once per request.
func (b *Budget) Deposit() {
	b.mu.Lock()
	b.tokens = min(b.tokens+b.ratio, b.reserve)
	b.mu.Unlock()
}

// Withdraw reports whether a retry may go.
func (b *Budget) Withdraw() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// Splice copies both ways between a and b until both directions end, and
// returns the bytes copied. When one side stops sending, the other is told
// by a half-close, so protocols that finish by shutting one direction
// work.
func Splice(a, b net.Conn) int64 {
	var n atomic.Int64
	var wg sync.WaitGroup
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		c, _ := io.Copy(dst, src)
		n.Add(c)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			dst.Close()
		}
	}
	wg.Add(2)
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
	return n.Load()
}
