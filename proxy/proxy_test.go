package proxy_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
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

func TestStickyCookieSignature(t *testing.T) {
	s := &proxy.StickyCookie{Name: "pin", Secret: []byte("0123456789abcdef"), TTL: time.Hour}
	now := time.Unix(1_800_000_000, 0)
	c := s.Cookie("backend-2", now, true)
	if !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteLaxMode {
		t.Fatalf("cookie flags %+v", c)
	}
	req := func(v string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.AddCookie(&http.Cookie{Name: "pin", Value: v})
		return r
	}
	if name, ok := s.Endpoint(req(c.Value), now); !ok || name != "backend-2" {
		t.Fatalf("own cookie: %q %v", name, ok)
	}
	if _, ok := s.Endpoint(req(c.Value), now.Add(2*time.Hour)); ok {
		t.Fatal("an expired cookie was accepted")
	}
	other := &proxy.StickyCookie{Name: "pin", Secret: []byte("another-secret-0000"), TTL: time.Hour}
	if _, ok := other.Endpoint(req(c.Value), now); ok {
		t.Fatal("a cookie signed with another secret was accepted")
	}
	for _, bad := range []string{"", "a.b", "YmFk.1.sig", c.Value + "x", "!!!.1.AAAA"} {
		if _, ok := s.Endpoint(req(bad), now); ok {
			t.Fatalf("cookie %q accepted", bad)
		}
	}
}

func TestClassifyAndStatus(t *testing.T) {
	ctx := context.Background()
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, dialErr := net.DialTimeout("tcp", "127.0.0.1:1", time.Second)
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

// Slow start: an endpoint that has just come back takes a growing share.
func TestSlowStartRamps(t *testing.T) {
	bp := balance.NewPool("p", balance.Options{})
	if err := bp.Configure(balance.Config{Policy: &balance.RoundRobin{}, Endpoints: []balance.EndpointConfig{{Name: "old"}, {Name: "new"}}}); err != nil {
		t.Fatal(err)
	}
	st := bp.Set().Get("new").State
	st.SetDown(true, time.Now())
	st.SetDown(false, time.Now()) // back just now
	p := &proxy.Pool{Name: "p", Primary: bp, SlowStart: time.Hour}
	counts := map[string]int{}
	for range 2000 {
		pk, err := p.Pick(balance.Request{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		counts[pk.Endpoint.Name]++
		pk.Done(health.Outcome{Status: 200})
	}
	// At the start of its window it is accepted at the 10% floor: about
	// 1 in 10 of its turns.
	if counts["new"] > 300 || counts["new"] < 20 {
		t.Fatalf("just back: new got %d of 2000, want a small share", counts["new"])
	}
	p.SlowStart = time.Nanosecond // window over
	counts = map[string]int{}
	for range 2000 {
		pk, _ := p.Pick(balance.Request{}, nil)
		counts[pk.Endpoint.Name]++
		pk.Done(health.Outcome{Status: 200})
	}
	if counts["new"] < 900 {
		t.Fatalf("after the window: new got %d of 2000", counts["new"])
	}
}
