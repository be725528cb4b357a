// Package proxy is the one request lifecycle every rotor listener runs:
// pick an endpoint (the pool's fallback order: pinned, panic mode,
// primaries, backups, least bad), admit it (breaker, in-flight cap, slow
// start), connect, classify the outcome, report it, and decide whether to
// try again on another endpoint, within the retry budget and the total
// time. The reverse proxy, the forward proxy (absolute-URI requests and
// CONNECT), the TCP proxy and the tools that send traffic (rotor fetch,
// rotor bench) are protocol adapters around a Flight; the simulator drives
// the same Flight on virtual time.
//
// It also holds what the listeners share around that lifecycle: the
// mapping of errors to outcomes and statuses, the access Record every
// listener kind writes to the log and the metrics, and Conns, which
// tracks the connections a drain must wait for. It does not import
// net/http.
package proxy

import (
	"sync"
	"time"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
)

// Pool is a pool as every listener runs it: a balance snapshot (the
// endpoints, their tiers, the policy and its fallbacks) and the rules of a
// request's tries. It is immutable; a reload builds a new one around a new
// snapshot, and endpoint health carries over through the snapshot's store.
type Pool struct {
	Name     string
	Snapshot *balance.Snapshot
	// Attempts is tries in all, each on an endpoint not tried before while
	// there is one (0 means 1: no retry).
	Attempts int
	// RetryStatuses are the answers worth another try, for a request that
	// may be sent twice; nil retries on errors only.
	RetryStatuses *health.Classifier
	// Budget bounds retries to a share of requests; nil does not bound
	// them (Attempts still does).
	Budget *Budget
	// Total bounds the time to start another try: no retry begins after
	// it has passed since the request started. 0 is no bound.
	Total time.Duration
	// Clock tells the time; nil means the system clock.
	Clock health.Clock
}

// Request is what a Flight needs to know of the request it carries.
type Request struct {
	// Key is the request's key for key-based and sticky policies.
	Key string
	// Pin names the endpoint to try first when it is available (a sticky
	// cookie's).
	Pin string
	// Idempotent: the request may be sent twice (RFC 9110, 9.2.2), so a
	// failure after it may have reached the endpoint can still be tried
	// again elsewhere. A request the endpoint cannot have seen may always
	// be tried again.
	Idempotent bool
	// Hold keeps the endpoint's in-flight count past a successful outcome,
	// until End: a TCP connection or a tunnel counts while it stays open,
	// although its outcome (it was established) is known at once, and an
	// HTTP answer until its body has been passed on (an upgraded one
	// while its relay lasts), although it is judged on its head: a
	// stream, a download, a WebSocket are load on the endpoint for as
	// long as they last, as nginx's and HAProxy's connection counts and
	// Envoy's active requests see them.
	Hold bool
	// At is when the request began by the pool's clock, for a caller
	// that read it already; zero: the flight reads the clock itself.
	At time.Time
}

// Idempotent reports whether an HTTP method may be sent twice (RFC 9110,
// 9.2.2): what Request.Idempotent is for an HTTP request.
func Idempotent(method string) bool {
	switch method {
	case "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return true
	}
	return false
}

// Result is what one try came to.
type Result struct {
	// Outcome is what the endpoint did: a status, or how it failed, and
	// the latency (for HTTP, the time to response headers; for a TCP
	// connection or a CONNECT tunnel, the time to establish it). What a
	// client did wrong (went away, sent a malformed body) has Err
	// health.Canceled or health.Client, and is never the endpoint's.
	Outcome health.Outcome
	// Unsent: the endpoint cannot have seen the request (no connection
	// was made), so it may go again whatever it is.
	Unsent bool
	// Spent: the request cannot be sent again (its body was read and is
	// gone).
	Spent bool
}

// Flight is one request's way through a pool, one try at a time:
//
//	f := pool.Start(req)
//	for {
//		ep, err := f.Next() // pick and admit
//		if err != nil { ... } // 503: no endpoint
//		res := send(ep)       // connect, send, classify
//		if !f.Done(res) {     // report; another try?
//			break
//		}
//	}
//	f.End()
//
// It is not safe for concurrent use.
type Flight struct {
	pool     *Pool
	req      Request
	clock    health.Clock
	start    time.Time // by clock, read when there is a total to bound; zero: not read
	deadline time.Time // zero: none
	tried    []string
	try      Held // the last try's pick, and whether its count is held
	attempts int
	verdict  health.Verdict
	budgeted bool // a retry was refused by the budget
}

// Start begins a request's flight: it takes the clock's time for the
// total, and pays the request's share into the retry budget when the pool
// retries at all.
func (p *Pool) Start(r Request) *Flight {
	f := new(Flight)
	p.Begin(f, r)
	return f
}

// Begin is Start into f, reusing its memory: for a caller that runs many
// flights one after another, as the simulator does. f must be ended.
func (p *Pool) Begin(f *Flight, r Request) {
	*f = Flight{pool: p, req: r, clock: p.Clock, verdict: health.Ignore, tried: f.tried[:0]}
	if f.clock == nil {
		f.clock = health.SystemClock{}
	}
	if p.Total > 0 {
		f.start = r.At
		if f.start.IsZero() {
			f.start = f.clock.Now()
		}
		f.deadline = f.start.Add(p.Total)
	}
	if p.Attempts > 1 && p.Budget != nil {
		p.Budget.Deposit()
	}
}

// Next picks and admits the endpoint for the next try. The error is
// balance.ErrNoEndpoint when no endpoint may take the request at all, or
// balance.ErrRejected when the policy refused it by rule (both 503).
func (f *Flight) Next() (*balance.Endpoint, error) {
	f.End() // a try not reported is given back
	r := balance.Request{Key: f.req.Key, Tried: f.tried}
	if f.attempts == 0 {
		// The first pick is dated by the start, when it was read: a
		// policy that weighs time need not read the clock again.
		r.Pin = f.req.Pin
		if !f.start.IsZero() {
			r.At = f.start.UnixNano()
		}
	}
	pk, err := f.pool.Snapshot.Pick(r)
	if err != nil {
		return nil, err
	}
	f.try = Held{pick: pk, held: true}
	f.attempts++
	return pk.Endpoint, nil
}

// Done reports the current try's result to the endpoint's health and says
// whether to try again: only after a failure, while tries and time are
// left, when the request may be sent again (it never reached the endpoint,
// or it is idempotent, still whole, and failed by an error or a retryable
// status), and when the budget allows. The try's in-flight count ends
// here, unless the request holds and the try is what carries it on: it
// answered (a status the pool counts as a failure too, whose body still
// streams from the endpoint) and is not tried again.
func (f *Flight) Done(res Result) bool {
	if !f.try.held {
		return false
	}
	f.verdict = f.try.pick.Report(res.Outcome)
	again := f.again(res)
	if !f.req.Hold || again || res.Outcome.Err != health.NoError {
		f.End()
	}
	if again {
		f.tried = append(f.tried, f.try.pick.Endpoint.Name)
	}
	return again
}

// again says whether a try with result res, just reported, is followed
// by another (Done).
func (f *Flight) again(res Result) bool {
	if f.verdict != health.Failure || f.attempts >= max(f.pool.Attempts, 1) {
		return false
	}
	if !f.deadline.IsZero() && !f.clock.Now().Before(f.deadline) {
		return false
	}
	if !res.Unsent && !(f.req.Idempotent && !res.Spent && f.retryable(res.Outcome)) {
		return false
	}
	if f.pool.Budget != nil && !f.pool.Budget.Withdraw() {
		f.budgeted = true
		return false
	}
	return true
}

// retryable: an error, or a status the pool retries.
func (f *Flight) retryable(o health.Outcome) bool {
	if o.Err != health.NoError {
		return true
	}
	return f.pool.RetryStatuses != nil && f.pool.RetryStatuses.FailsOn(o.Status)
}

// End ends the last try's in-flight count if it is still held: call it
// when the connection a held request opened closes. It is safe to call
// more than once.
func (f *Flight) End() { f.try.End() }

// Handoff takes the last try's in-flight count, still held, from the
// flight, for what outlives it (an upgraded connection's relay): the
// flight's End no longer ends it; the Held's does.
func (f *Flight) Handoff() Held {
	h := f.try
	f.try.held = false
	return h
}

// Held is a try's in-flight count, held until what the try carries ends.
// The zero Held holds nothing.
type Held struct {
	pick balance.Pick
	held bool
}

// End ends the count if it is still held; it is safe to call more than
// once, not concurrently.
func (h *Held) End() {
	if h.held {
		h.held = false
		h.pick.Release()
	}
}

// Endpoint returns the endpoint of the last try, nil before the first.
func (f *Flight) Endpoint() *balance.Endpoint { return f.try.pick.Endpoint }

// Attempts returns the tries made.
func (f *Flight) Attempts() int { return f.attempts }

// Verdict returns the verdict on the last reported try (Ignore before).
func (f *Flight) Verdict() health.Verdict { return f.verdict }

// Deadline returns the end of the total time, and whether there is one.
func (f *Flight) Deadline() (time.Time, bool) { return f.deadline, !f.deadline.IsZero() }

// Budgeted reports whether a retry was refused by the budget.
func (f *Flight) Budgeted() bool { return f.budgeted }

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

// Ratio returns the retries allowed per request.
func (b *Budget) Ratio() float64 { return b.ratio }

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
