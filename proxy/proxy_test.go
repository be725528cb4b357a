package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/proxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBudgetBoundsRetries(t *testing.T) {
	b := proxy.NewBudget(0.2)
	// The reserve lets a quiet pool retry at all...
	n := 0
	for b.Withdraw() {
		n++
	}
	if n != 10 {
		t.Fatalf("reserve allowed %d retries, want 10", n)
	}
	// ...then 1000 requests earn 200 retries, no more.
	for range 1000 {
		b.Deposit()
	}
	n = 0
	for b.Withdraw() {
		n++
	}
	if n < 199 || n > 200 {
		t.Fatalf("1000 requests at budget 0.2 allowed %d retries", n)
	}
}

func TestClassifyAndStatus(t *testing.T) {
	ctx := context.Background()
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, dialErr := net.DialTimeout("tcp", "127.0.0.1:1", time.Second)
	dialShort := func(errno syscall.Errno) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", errno)}
	}
	spoolErr := &url.Error{Op: "Post", URL: "http://127.0.0.1:1/", Err: fmt.Errorf("%w: %w", proxy.ErrSpoolRead, io.ErrUnexpectedEOF)}
	tests := []struct {
		name   string
		err    error
		ctx    context.Context
		kind   health.ErrorKind
		status int
	}{
		{"no endpoint", balance.ErrNoEndpoint, ctx, health.Broken, 503},
		{"rejected", balance.ErrRejected, ctx, health.Broken, 503},
		{"refused dial", dialErr, ctx, health.ConnectError, 502},
		{"timeout", proxy.ErrTimeout, ctx, health.Timeout, 504},
		{"deadline", context.DeadlineExceeded, ctx, health.Timeout, 504},
		{"client gone", errors.New("read: connection reset"), canceled, health.Canceled, 499},
		{"reset", errors.New("read: connection reset"), ctx, health.Broken, 502},
		// The body's file failed to read back, as net/http's transport
		// wraps it: rotor's own fault, 500 (nginx's), whatever the
		// client's context says.
		{"body file", spoolErr, ctx, health.Local, 500},
		{"body file, client gone", spoolErr, canceled, health.Local, 500},
		// No socket to dial with (descriptors, ports): this host's
		// shortage, not the endpoint's.
		{"out of descriptors", dialShort(syscall.EMFILE), ctx, health.Local, 500},
		{"out of local ports", dialShort(syscall.EADDRNOTAVAIL), ctx, health.Local, 500},
	}
	for _, tt := range tests {
		kind := proxy.Classify(tt.err, tt.ctx)
		if kind != tt.kind || proxy.Status(tt.err, kind) != tt.status {
			t.Errorf("%s: kind %v status %d, want %v %d", tt.name, kind, proxy.Status(tt.err, kind), tt.kind, tt.status)
		}
	}
	if !proxy.IsDialError(dialErr) {
		t.Error("a refused dial is not a dial error")
	}
}

// flightPool is a proxy pool over endpoints a, b, c on round robin.
func flightPool(t *testing.T, attempts int, budget *proxy.Budget) (*proxy.Pool, *health.ManualClock) {
	t.Helper()
	clock := health.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	bp := balance.NewPool("p", balance.Options{Clock: clock, Rand: balance.NewSeededRand(1)})
	if err := bp.Configure(balance.Config{Policy: &balance.RoundRobin{},
		Endpoints: []balance.EndpointConfig{{Name: "a"}, {Name: "b"}, {Name: "c"}}}); err != nil {
		t.Fatal(err)
	}
	return &proxy.Pool{Name: "p", Snapshot: bp.Snapshot(), Attempts: attempts, Budget: budget,
		RetryStatuses: health.MustClassifier("502,503,504"), Total: time.Minute, Clock: clock}, clock
}

// fly runs a request through p, each try answered by answer, and returns
// the endpoints tried in order.
func fly(t *testing.T, p *proxy.Pool, r proxy.Request, answer func(ep string) proxy.Result) []string {
	t.Helper()
	f := p.Start(r)
	var tried []string
	for {
		ep, err := f.Next()
		if err != nil {
			t.Fatal(err)
		}
		tried = append(tried, ep.Name)
		if !f.Done(answer(ep.Name)) {
			break
		}
	}
	f.End()
	return tried
}

func inflight(p *proxy.Pool) int64 {
	var n int64
	for _, ep := range p.Snapshot.Endpoints() {
		n += ep.State.Inflight()
	}
	return n
}

// The retry rules, decided in one place for every listener kind.
func TestFlightRetryRules(t *testing.T) {
	fail503 := func(string) proxy.Result { return proxy.Result{Outcome: health.Outcome{Status: 503}} }
	refused := func(string) proxy.Result {
		return proxy.Result{Outcome: health.Outcome{Err: health.ConnectError}, Unsent: true}
	}
	tests := []struct {
		name   string
		req    proxy.Request
		answer func(string) proxy.Result
		want   int // tries
	}{
		{"a retryable status on an idempotent request", proxy.Request{Idempotent: true}, fail503, 3},
		{"a status on a POST is not tried again", proxy.Request{}, fail503, 1},
		{"a refused connection is tried again whatever the method", proxy.Request{}, refused, 3},
		{"a failing status not in the retry list", proxy.Request{Idempotent: true},
			func(string) proxy.Result { return proxy.Result{Outcome: health.Outcome{Status: 500}} }, 1},
		{"a body already sent cannot go again", proxy.Request{Idempotent: true},
			func(string) proxy.Result {
				return proxy.Result{Outcome: health.Outcome{Err: health.Broken}, Spent: true}
			}, 1},
		{"a timeout on an idempotent request", proxy.Request{Idempotent: true},
			func(string) proxy.Result { return proxy.Result{Outcome: health.Outcome{Err: health.Timeout}} }, 3},
		{"the client's fault is not retried, nor charged", proxy.Request{Idempotent: true},
			func(string) proxy.Result { return proxy.Result{Outcome: health.Outcome{Err: health.Client}} }, 1},
		{"a success ends it", proxy.Request{Idempotent: true},
			func(string) proxy.Result { return proxy.Result{Outcome: health.Outcome{Status: 200}} }, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := flightPool(t, 3, nil)
			tried := fly(t, p, tt.req, tt.answer)
			if len(tried) != tt.want {
				t.Fatalf("tried %v, want %d tries", tried, tt.want)
			}
			if len(tried) == 3 && (tried[0] == tried[1] || tried[1] == tried[2] || tried[0] == tried[2]) {
				t.Fatalf("tried %v: a retry went back to an endpoint already tried", tried)
			}
			if n := inflight(p); n != 0 {
				t.Fatalf("%d still in flight", n)
			}
		})
	}
	// The client's fault leaves no mark on the endpoint.
	p, _ := flightPool(t, 3, nil)
	fly(t, p, proxy.Request{}, func(string) proxy.Result {
		return proxy.Result{Outcome: health.Outcome{Err: health.Client}}
	})
	for _, ep := range p.Snapshot.Endpoints() {
		if s := ep.State.Snapshot(time.Time{}); s.Failures != 0 || s.Samples != 0 {
			t.Fatalf("%s charged for the client's fault: %+v", ep.Name, s)
		}
	}
}

// The methods that may be sent twice, RFC 9110's and no other spelling.
func TestIdempotentMethods(t *testing.T) {
	for method, want := range map[string]bool{
		"GET": true, "HEAD": true, "OPTIONS": true, "TRACE": true, "PUT": true, "DELETE": true,
		"POST": false, "PATCH": false, "CONNECT": false, "get": false, "": false,
	} {
		if got := proxy.Idempotent(method); got != want {
			t.Errorf("Idempotent(%q) = %v, want %v", method, got, want)
		}
	}
}

// Retries stay within the budget: with every endpoint failing, 1000
// requests at budget 0.2 make at most 1000 + 10 (reserve) + 200 tries.
func TestFlightBudget(t *testing.T) {
	p, _ := flightPool(t, 3, proxy.NewBudget(0.2))
	tries := 0
	for range 1000 {
		tries += len(fly(t, p, proxy.Request{Idempotent: true}, func(string) proxy.Result {
			return proxy.Result{Outcome: health.Outcome{Status: 503}}
		}))
	}
	if tries > 1210 || tries < 1150 {
		t.Fatalf("%d tries for 1000 requests at budget 0.2, want about 1200 and at most 1210", tries)
	}
}

// No retry starts after the total time.
func TestFlightTotal(t *testing.T) {
	p, clock := flightPool(t, 3, nil)
	tried := fly(t, p, proxy.Request{Idempotent: true}, func(string) proxy.Result {
		clock.Advance(40 * time.Second) // two tries pass the minute
		return proxy.Result{Outcome: health.Outcome{Err: health.Timeout}}
	})
	if len(tried) != 2 {
		t.Fatalf("tried %v, want 2 tries within the total of a minute", tried)
	}
}

// datedPolicy picks the first endpoint not tried and notes the time each
// pick was dated by.
type datedPolicy struct{ at []time.Time }

func (*datedPolicy) Name() string { return "dated" }
func (d *datedPolicy) Build(s *balance.Set) balance.Picker {
	return pickerFunc(func(r balance.Request) (*balance.Endpoint, error) {
		var at time.Time // zero: undated
		if r.At != 0 {
			at = time.Unix(0, r.At).UTC()
		}
		d.at = append(d.at, at)
		for _, ep := range s.Endpoints() {
			if !slices.Contains(r.Tried, ep.Name) {
				return ep, nil
			}
		}
		return nil, balance.ErrNoEndpoint
	})
}

type pickerFunc func(balance.Request) (*balance.Endpoint, error)

func (f pickerFunc) Pick(r balance.Request) (*balance.Endpoint, error) { return f(r) }

// A flight dates its first pick by the start it read for the total, so
// that a policy weighing time need not read the clock; a retry, later,
// is left to read it.
func TestFlightDatesFirstPick(t *testing.T) {
	p, clock := flightPool(t, 2, nil)
	pol := &datedPolicy{}
	bp := p.Snapshot.Pool()
	if err := bp.Configure(balance.Config{Policy: pol, Endpoints: []balance.EndpointConfig{{Name: "a"}, {Name: "b"}}}); err != nil {
		t.Fatal(err)
	}
	p.Snapshot = bp.Snapshot()
	start := clock.Now()
	fly(t, p, proxy.Request{Idempotent: true}, func(string) proxy.Result {
		clock.Advance(time.Second)
		return proxy.Result{Outcome: health.Outcome{Err: health.ConnectError}, Unsent: true}
	})
	if len(pol.at) != 2 || !pol.at[0].Equal(start) || !pol.at[1].IsZero() {
		t.Fatalf("picks dated %v, want the start (%v), then none", pol.at, start)
	}
	p.Total = 0 // no total: the start is not read, and no pick is dated
	pol.at = nil
	fly(t, p, proxy.Request{}, func(string) proxy.Result { return proxy.Result{Outcome: health.Outcome{Status: 200}} })
	if len(pol.at) != 1 || !pol.at[0].IsZero() {
		t.Fatalf("without a total, the pick dated %v, want none", pol.at)
	}
}

// A held request (a TCP connection, a tunnel, an HTTP answer) stays in
// flight after its outcome until End; a failed connection does not.
func TestFlightHold(t *testing.T) {
	p, _ := flightPool(t, 2, nil)
	f := p.Start(proxy.Request{Hold: true})
	ep, _ := f.Next()
	if f.Done(proxy.Result{Outcome: health.Outcome{Err: health.ConnectError}, Unsent: true}) != true {
		t.Fatal("a refused connection was not tried again")
	}
	if ep.State.Inflight() != 0 {
		t.Fatal("a failed held try is still in flight")
	}
	ep, _ = f.Next()
	f.Done(proxy.Result{Outcome: health.Outcome{Latency: time.Millisecond}})
	if ep.State.Inflight() != 1 {
		t.Fatal("an established held try is not in flight")
	}
	f.End()
	f.End()
	if ep.State.Inflight() != 0 {
		t.Fatalf("after End: %d in flight", ep.State.Inflight())
	}

	// An answer the pool counts as a failure (a 503) is let go when
	// another try follows; the last one, which is passed on, is held
	// until End as a success is.
	f = p.Start(proxy.Request{Hold: true, Idempotent: true})
	first, _ := f.Next()
	if !f.Done(proxy.Result{Outcome: health.Outcome{Status: 503}}) {
		t.Fatal("a 503 was not tried again")
	}
	if first.State.Inflight() != 0 {
		t.Fatal("a 503 tried again is still in flight")
	}
	last, _ := f.Next()
	if f.Done(proxy.Result{Outcome: health.Outcome{Status: 503}}) {
		t.Fatal("tried a third time with two attempts")
	}
	if last.State.Inflight() != 1 {
		t.Fatal("the 503 passed on is not in flight while its answer is")
	}
	f.End()
	if last.State.Inflight() != 0 {
		t.Fatalf("after End: %d in flight", last.State.Inflight())
	}
}

// Conns: a shutdown waits for sessions to end, and at its deadline cuts
// the rest.
func TestConnsShutdown(t *testing.T) {
	var c proxy.Conns
	a, b := net.Pipe()
	defer b.Close()
	s, ok := c.Add(a)
	if !ok {
		t.Fatal("refused before shutdown")
	}
	go func() { // the session ends when its connection is cut
		_, _ = a.Read(make([]byte, 1))
		s.Done()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) || c.Len() != 0 {
		t.Fatalf("shutdown: %v, %d open; want the session cut at the deadline", err, c.Len())
	}
	if _, ok := c.Add(); ok {
		t.Fatal("a session was accepted after shutdown")
	}
	var quiet proxy.Conns
	if err := quiet.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
