package forward

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"time"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/proxy"
)

// Options tune a Transport. Zero values mean the defaults.
type Options struct {
	// Policy picks routes; nil means scored (gamma 1). Round robin is the
	// control to compare with.
	Policy balance.Policy
	// Health tunes the health model (article 001's defaults).
	Health health.Config
	// Classifier says which outcomes are a route's failure; nil means
	// connection errors, timeouts, 403, 407, 429 and 5xx. A target's 404
	// is not the route's fault.
	Classifier *health.Classifier
	// BlockedBody, when set, marks a 200 whose first 64 KiB match it as
	// blocked: a failure of the route ("access denied" pages).
	BlockedBody *regexp.Regexp
	// Attempts is tries in all, on distinct routes when there are (2).
	Attempts int
	// Budget is retries as a share of requests (0.2).
	Budget float64
	// Key, when set, gives a request's session key: with a keyed policy
	// (rendezvous, bounded) the same key keeps the same route while it is
	// healthy.
	Key func(*http.Request) string
	// Guard checks targets; nil refuses private, loopback, link-local and
	// metadata ranges.
	Guard *Guard
	// OnOutcome, when set, is told every attempt's outcome (for reports).
	OnOutcome func(route string, o health.Outcome, v health.Verdict)
	// Clock and Rand, for tests; nil means the system's.
	Clock health.Clock
	Rand  balance.Rand
}

// Transport is an http.RoundTripper that sends each request over the route
// a policy picks, learns from every outcome, and can retry on another
// route. A Go client gets rotation by setting Client.Transport.
type Transport struct {
	pool    *balance.Pool
	routes  map[string]*Route
	opts    Options
	budget  *proxy.Budget
	classes *health.Classifier
}

var _ http.RoundTripper = (*Transport)(nil)

// NewTransport builds a transport over routes (unique names).
func NewTransport(routes []*Route, opts Options) (*Transport, error) {
	if opts.Policy == nil {
		sc, _ := balance.NewScored(balance.DefaultGamma)
		opts.Policy = sc
	}
	pool := balance.NewPool("routes", balance.Options{Clock: opts.Clock, Rand: opts.Rand})
	eps := make([]balance.EndpointConfig, len(routes))
	for i, r := range routes {
		eps[i] = balance.EndpointConfig{Name: r.Name, Addr: r.URL.Redacted()}
	}
	classes := opts.Classifier
	if classes == nil {
		classes = health.MustClassifier(health.RouteStatuses)
	}
	if err := pool.Configure(balance.Config{Policy: opts.Policy, Endpoints: eps, Health: opts.Health, Classifier: classes}); err != nil {
		return nil, err
	}
	return NewTransportOnPool(pool, routes, opts), nil
}

// NewTransportOnPool builds a transport over a pool its caller configures
// (rotor serve keeps pools across reloads); routes are matched to the
// pool's endpoints by name.
func NewTransportOnPool(pool *balance.Pool, routes []*Route, opts Options) *Transport {
	if opts.Attempts == 0 {
		opts.Attempts = 2
	}
	if opts.Budget == 0 {
		opts.Budget = 0.2
	}
	if opts.Guard == nil {
		opts.Guard = &Guard{}
	}
	classes := opts.Classifier
	if classes == nil {
		classes = health.MustClassifier(health.RouteStatuses)
	}
	t := &Transport{pool: pool, routes: map[string]*Route{}, opts: opts, budget: proxy.NewBudget(opts.Budget), classes: classes}
	for _, r := range routes {
		t.routes[r.Name] = r
	}
	return t
}

// Pool returns the pool of routes.
func (t *Transport) Pool() *balance.Pool { return t.pool }

// RoundTrip sends req over a route.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, _, err := t.RoundTripRoute(req)
	return resp, err
}

// RoundTripRoute is RoundTrip that also says which route carried the
// request (the last tried, when all failed).
func (t *Transport) RoundTripRoute(req *http.Request) (*http.Response, string, error) {
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		closeBody(req)
		return nil, "", fmt.Errorf("forward: scheme %q is not http or https", req.URL.Scheme)
	}
	if err := t.opts.Guard.CheckHost(req.Context(), req.URL.Hostname()); err != nil {
		closeBody(req)
		return nil, "", err
	}
	if t.opts.Attempts > 1 {
		t.budget.Deposit() // the budget only matters when retries are allowed
	}
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	key := ""
	if t.opts.Key != nil {
		key = t.opts.Key(req)
	}
	var tried []string
	route := ""
	for attempt := 1; ; attempt++ {
		pk, err := t.pick(key, tried)
		if err != nil {
			closeBody(req)
			return nil, route, err
		}
		route = pk.Endpoint.Name
		r := t.routes[route]
		if r == nil {
			pk.Done(health.Outcome{Err: health.Local})
			closeBody(req)
			return nil, route, fmt.Errorf("forward: route %q has no dialer", route)
		}
		out := req
		if attempt > 1 && req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				pk.Done(health.Outcome{Err: health.Local})
				return nil, route, err
			}
			out = req.Clone(req.Context())
			out.Body = body
		}
		start := time.Now()
		resp, err := r.transport.RoundTrip(out)
		end := time.Now()
		o := health.Outcome{Err: proxy.Classify(err, req.Context()), Latency: end.Sub(start)}
		if resp != nil {
			o.Status = resp.StatusCode
			if t.opts.BlockedBody != nil && resp.StatusCode < 300 {
				if blocked, berr := t.sniff(resp); berr == nil && blocked {
					o.Err = health.Blocked
				}
			}
		}
		v := pk.Done(o)
		if t.opts.OnOutcome != nil {
			t.opts.OnOutcome(route, o, v)
		}
		retry := v == health.Failure && attempt < t.opts.Attempts && req.Context().Err() == nil &&
			(replayable || err != nil && proxy.IsDialError(err)) && t.budget.Withdraw()
		if !retry {
			return resp, route, err
		}
		if resp != nil {
			_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
			resp.Body.Close()
		}
		tried = append(tried, route)
	}
}

func (t *Transport) pick(key string, tried []string) (balance.Pick, error) {
	pk, err := t.pool.PickAvailableIf(balance.Request{Key: key}, func(ep *balance.Endpoint) bool {
		return !slices.Contains(tried, ep.Name)
	})
	if err != balance.ErrNoEndpoint {
		return pk, err
	}
	return t.pool.Pick(balance.Request{Key: key})
}

// sniff reads up to 64 KiB of the body, checks it for the blocked pattern
// and puts it back in front of the rest.
func (t *Transport) sniff(resp *http.Response) (bool, error) {
	head, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	if err != nil {
		return false, err
	}
	return t.opts.BlockedBody.Match(head), nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// CloseIdleConnections closes every route's idle connections.
func (t *Transport) CloseIdleConnections() {
	for _, r := range t.routes {
		r.Close()
	}
}

// Route returns the named route.
func (t *Transport) Route(name string) *Route { return t.routes[name] }
