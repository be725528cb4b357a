package forward

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sync"
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
	// BlockedBody, when set, marks a 2xx whose first 64 KiB match it as
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
	// OnOutcome, when set, is told every try's outcome (for reports).
	OnOutcome func(route string, o health.Outcome, v health.Verdict)
	// Clock and Rand, for tests; nil means the system's.
	Clock health.Clock
	Rand  balance.Rand
}

// Transport is an http.RoundTripper that sends each request over the route
// a policy picks, learns from every outcome, and can retry on another
// route: the same proxy.Flight as every rotor listener. A Go client gets
// rotation by setting Client.Transport.
type Transport struct {
	pool      *proxy.Pool
	routes    map[string]*Route
	blocked   *regexp.Regexp
	key       func(*http.Request) string
	onOutcome func(route string, o health.Outcome, v health.Verdict)
}

var _ http.RoundTripper = (*Transport)(nil)

// NewTransport builds a transport over routes (unique names), with a pool
// of its own.
func NewTransport(routes []*Route, opts Options) (*Transport, error) {
	if opts.Policy == nil {
		sc, _ := balance.NewScored(balance.DefaultGamma)
		opts.Policy = sc
	}
	if opts.Attempts == 0 {
		opts.Attempts = 2
	}
	if opts.Budget == 0 {
		opts.Budget = 0.2
	}
	classes := opts.Classifier
	if classes == nil {
		classes = health.MustClassifier(health.RouteStatuses)
	}
	bp := balance.NewPool("routes", balance.Options{Clock: opts.Clock, Rand: opts.Rand})
	eps := make([]balance.EndpointConfig, len(routes))
	for i, r := range routes {
		if r == nil {
			return nil, fmt.Errorf("forward: route %d is nil", i)
		}
		eps[i] = balance.EndpointConfig{Name: r.Name, Addr: r.String()}
	}
	if err := bp.Configure(balance.Config{Policy: opts.Policy, Endpoints: eps, Health: opts.Health, Classifier: classes}); err != nil {
		return nil, err
	}
	pool := &proxy.Pool{
		Name: "routes", Snapshot: bp.Snapshot(), Attempts: opts.Attempts, RetryStatuses: classes,
		Budget: proxy.NewBudget(opts.Budget), Clock: opts.Clock,
	}
	return NewTransportOnPool(pool, routes, opts), nil
}

// NewTransportOnPool builds a transport over a pool its caller built
// (rotor serve builds it with the rest of its runtime); routes are matched
// to the pool's endpoints by name. Of opts it reads BlockedBody, Key and
// OnOutcome.
func NewTransportOnPool(pool *proxy.Pool, routes []*Route, opts Options) *Transport {
	t := &Transport{pool: pool, routes: map[string]*Route{}, blocked: opts.BlockedBody, key: opts.Key, onOutcome: opts.OnOutcome}
	for _, r := range routes {
		t.routes[r.Name] = r
	}
	return t
}

// Pool returns the pool of routes.
func (t *Transport) Pool() *proxy.Pool { return t.pool }

// Route returns the named route.
func (t *Transport) Route(name string) *Route { return t.routes[name] }

// RoundTrip sends req over a route. The route counts it in flight until
// the answer's body is closed.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, _, err := t.RoundTripRoute(req)
	return resp, err
}

// Trip says how a request went over the routes.
type Trip struct {
	Route    string // the route of the last try; "" when none was picked
	Attempts int
	Reason   string // why it failed, when it did (proxy.Reason, "target_forbidden")
	// The route's in-flight count for the answer, held until it has
	// been passed on.
	held proxy.Held
}

// RoundTripRoute is RoundTrip that also says which route carried the
// request (the last tried, when all failed).
func (t *Transport) RoundTripRoute(req *http.Request) (*http.Response, string, error) {
	resp, trip, err := t.roundTrip(req, nil)
	if err != nil {
		trip.held.End()
		return nil, trip.Route, err
	}
	resp.Body = &heldBody{ReadCloser: resp.Body, held: trip.held}
	return resp, trip.Route, nil
}

// heldBody is an answer's body that ends its route's in-flight count
// when it is closed.
type heldBody struct {
	io.ReadCloser
	once sync.Once
	held proxy.Held
}

func (b *heldBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.held.End)
	return err
}

// roundTrip runs the request's flight. body, when given, is the client's
// body as a forward listener read it: its errors are the client's.
func (t *Transport) roundTrip(req *http.Request, body *proxy.Body) (resp *http.Response, trip Trip, err error) {
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		closeBody(req)
		trip.Reason = "bad_request"
		return nil, trip, fmt.Errorf("forward: scheme %q is not http or https", req.URL.Scheme)
	}
	hasBody := req.Body != nil && req.Body != http.NoBody
	key := ""
	if t.key != nil {
		key = t.key(req)
	}
	f := t.pool.Start(proxy.Request{Key: key, Idempotent: proxy.Idempotent(req.Method), Hold: true})
	defer func() { trip.Attempts = f.Attempts() }()
	for {
		ep, err := f.Next()
		if err != nil {
			closeBody(req)
			trip.Reason = proxy.Reason(err, health.NoError)
			return nil, trip, err
		}
		trip.Route = ep.Name
		r := t.routes[ep.Name]
		if r == nil {
			f.Done(proxy.Result{Outcome: health.Outcome{Err: health.Local}})
			closeBody(req)
			trip.Reason = "local"
			return nil, trip, fmt.Errorf("forward: route %q has no dialer", ep.Name)
		}
		if err := r.CheckTarget(req.Context(), req.URL.Hostname(), req.URL.Scheme == "https"); err != nil {
			f.Done(proxy.Result{Outcome: health.Outcome{Err: health.Local}})
			closeBody(req)
			trip.Reason = "target_forbidden"
			if !errors.Is(err, ErrForbiddenTarget) {
				trip.Reason = "resolve" // not resolved here, so not checked: not carried
			}
			return nil, trip, err
		}
		out := req
		switch {
		case body != nil: // a listener's client body, lent to each try
			o := *req // shallow: the headers are shared, and not changed here
			o.Body = body.Lend()
			out = &o
		case f.Attempts() > 1 && hasBody: // a retry: only made when GetBody is there
			fresh, err := req.GetBody()
			if err != nil {
				f.Done(proxy.Result{Outcome: health.Outcome{Err: health.Local}})
				trip.Reason = "local"
				return nil, trip, err
			}
			out = req.Clone(req.Context())
			out.Body = fresh
		}
		start, waited := time.Now(), body.Waited()
		resp, err := r.transport.RoundTrip(out)
		end := time.Now()
		// No At: the pool's clock (a test's, perhaps) dates the outcome.
		o := health.Outcome{Err: proxy.Classify(err, req.Context()), Latency: proxy.TryLatency(body, start, end, waited)}
		switch {
		case err != nil && errors.Is(err, ErrForbiddenTarget):
			o.Err = health.Local // the route's dial refused the address it resolved
			trip.Reason = "target_forbidden"
		case err != nil && isResolveError(err):
			o.Err = health.Local // the target's name, not the route
			trip.Reason = "resolve"
		case o.Err == health.Local:
			// Rotor's own fault (Classify: the body's file, or no
			// socket to be had), not the client's, whatever else ended
			// meanwhile.
		case err != nil && proxy.BrokeTry(body, req.Context()):
			o.Err = health.Client
			trip.Reason = proxy.ClientReason(body.Err())
		}
		if resp != nil {
			o.Status = resp.StatusCode
			if t.blocked != nil && resp.StatusCode < 300 {
				if blocked, berr := t.sniff(resp); berr == nil && blocked {
					o.Err = health.Blocked
				}
			}
		}
		// The body can go again only if nothing of it was read, or the
		// caller can make it anew.
		spent := hasBody && (body != nil && body.Spent() || body == nil && req.GetBody == nil)
		retry := f.Done(proxy.Result{Outcome: o, Unsent: err != nil && proxy.IsDialError(err), Spent: spent})
		if t.onOutcome != nil {
			t.onOutcome(ep.Name, o, f.Verdict())
		}
		if retry && body != nil {
			body.Again()
		}
		if !retry {
			if err != nil && trip.Reason == "" {
				trip.Reason = proxy.Reason(err, o.Err)
			}
			trip.held = f.Handoff() // the answer's, whatever its status; nothing after an error
			return resp, trip, err
		}
		if resp != nil {
			_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
			resp.Body.Close()
		}
	}
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
	return t.blocked.Match(head), nil
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
