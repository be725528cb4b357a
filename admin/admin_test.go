package admin_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/admin"
	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/proxy"
)

// control is a small server: one pool, reloads that fail on demand.
type control struct {
	pool    *balance.Pool
	fail    bool
	reloads int
}

func (c *control) Pools() []admin.PoolView {
	return []admin.PoolView{{Name: "app", Snapshot: c.pool.Snapshot()}}
}

func (c *control) Listeners() []admin.ListenerView {
	return []admin.ListenerView{{Name: "web", Kind: "http", Addr: "127.0.0.1:8080"}}
}

func (c *control) State() admin.StateStatus { return admin.StateStatus{Store: "memory", Healthy: true} }

func (c *control) Reload() error {
	if c.fail {
		return errors.New("rotor.yaml:3: pools.app.policy: bad")
	}
	c.reloads++
	return nil
}

func (c *control) ReloadStatus() admin.ReloadStatus {
	return admin.ReloadStatus{Generation: 1 + c.reloads}
}

func setup(t *testing.T) (*control, http.Handler) {
	p := balance.NewPool("app", balance.Options{})
	if err := p.Configure(balance.Config{Policy: &balance.RoundRobin{}, Endpoints: []balance.EndpointConfig{{Name: "a"}, {Name: "b"}}}); err != nil {
		t.Fatal(err)
	}
	c := &control{pool: p}
	return c, admin.Handler(c, admin.NewMetrics(c.Pools), admin.Options{Loopback: true})
}

func do(h http.Handler, method, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec
}

func TestAdminAPI(t *testing.T) {
	c, h := setup(t)
	if rec := do(h, "GET", "/healthz"); rec.Code != 200 || rec.Body.String() != "ok\n" {
		t.Fatalf("healthz: %d %q", rec.Code, rec.Body)
	}
	if rec := do(h, "POST", "/admin/endpoints/app/b/drain"); rec.Code != 200 || !c.pool.Snapshot().Get("b").State.Draining() {
		t.Fatalf("drain: %d", rec.Code)
	}
	for path, want := range map[string]int{
		"/admin/endpoints/app/zz/drain":  404,
		"/admin/endpoints/nope/a/drain":  404,
		"/admin/endpoints/app/a/destroy": 404,
	} {
		if rec := do(h, "POST", path); rec.Code != want {
			t.Errorf("%s: %d, want %d", path, rec.Code, want)
		}
	}
	if rec := do(h, "GET", "/admin/endpoints/app/a/drain"); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET on a POST endpoint: %d", rec.Code)
	}
	var doc admin.StatusDoc
	rec := do(h, "GET", "/status")
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Listeners) != 1 || doc.Listeners[0].Kind != "http" {
		t.Fatalf("status listeners %+v", doc.Listeners)
	}
	if len(doc.Pools) != 1 || len(doc.Pools[0].Endpoints) != 2 || !doc.Pools[0].Endpoints[1].Draining || doc.Pools[0].Policy != "round_robin" {
		t.Fatalf("status %+v", doc)
	}
	if rec := do(h, "POST", "/admin/reload"); rec.Code != 200 || c.reloads != 1 {
		t.Fatalf("reload: %d", rec.Code)
	}
	c.fail = true
	if rec := do(h, "POST", "/admin/reload"); rec.Code != 400 || !strings.Contains(rec.Body.String(), "pools.app.policy") {
		t.Fatalf("bad reload: %d %s", rec.Code, rec.Body)
	}
	if rec := do(h, "GET", "/metrics"); rec.Code != 200 || !strings.Contains(rec.Body.String(), `rotor_endpoint_draining{endpoint="b",pool="app"} 1`) {
		t.Fatalf("metrics: %d", rec.Code)
	}
}

func TestStickyAndRecordMetrics(t *testing.T) {
	st, _ := balance.NewSticky(balance.StickyOptions{})
	p := balance.NewPool("s", balance.Options{})
	_ = p.Configure(balance.Config{Policy: st, Endpoints: []balance.EndpointConfig{{Name: "a"}}})
	for range 3 {
		pk, _ := p.Pick(balance.Request{Key: "k"})
		pk.Done(health.Outcome{Status: 200})
	}
	views := func() []admin.PoolView { return []admin.PoolView{{Name: "s", Snapshot: p.Snapshot(), Sticky: st}} }
	m := admin.NewMetrics(views)
	m.Served(&proxy.Record{Listener: "db", Kind: proxy.KindTCP, Pool: "s", Endpoint: "a", BytesIn: 1000, BytesOut: 3096, Duration: time.Second})
	m.Served(&proxy.Record{Listener: "db", Kind: proxy.KindTCP, Pool: "s", Reason: "no_endpoint"})
	m.Served(&proxy.Record{Listener: "web", Kind: proxy.KindHTTP, Pool: "s", Endpoint: "a", Status: 101, Attempts: 2})
	for _, status := range []int{200, 502, 200} { // a series taken again, and one beside it
		m.Served(&proxy.Record{Listener: "web", Kind: proxy.KindHTTP, Pool: "s", Endpoint: "a", Status: status, BytesIn: 10, BytesOut: 100, Duration: time.Millisecond})
	}
	m.Served(&proxy.Record{Listener: "out", Kind: proxy.KindConnect, Pool: "s", Status: 403, Reason: "port_forbidden"})
	c := &control{pool: p}
	body := do(admin.Handler(c, m, admin.Options{}), "GET", "/metrics").Body.String()
	for _, want := range []string{
		`rotor_sticky_total{event="pinned",pool="s"} 1`, `rotor_sticky_total{event="hit",pool="s"} 2`, `rotor_sticky_entries{pool="s"} 1`,
		`rotor_bytes_total{direction="in",listener="db"} 1000`, `rotor_bytes_total{direction="out",listener="db"} 3096`,
		`rotor_tcp_connections_total{endpoint="a",listener="db",pool="s",result="ok"} 1`,
		`rotor_tcp_connections_total{endpoint="",listener="db",pool="s",result="no_endpoint"} 1`,
		`rotor_requests_total{code="101",endpoint="a",kind="http",listener="web",pool="s"} 1`,
		`rotor_requests_total{code="200",endpoint="a",kind="http",listener="web",pool="s"} 2`,
		`rotor_requests_total{code="502",endpoint="a",kind="http",listener="web",pool="s"} 1`,
		`rotor_bytes_total{direction="in",listener="web"} 30`, `rotor_bytes_total{direction="out",listener="web"} 300`,
		`rotor_request_duration_seconds_count{listener="web",pool="s"} 4`,
		`rotor_retries_total{listener="web",pool="s"} 1`,
		`rotor_refused_total{listener="out",reason="port_forbidden"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// Every request counts in its own series however many series there are:
// more than the metrics keep at hand, sharing their places, and taking
// turns in them.
func TestRequestSeriesManyKeys(t *testing.T) {
	p := balance.NewPool("s", balance.Options{})
	m := admin.NewMetrics(func() []admin.PoolView { return []admin.PoolView{{Name: "s", Snapshot: p.Snapshot()}} })
	statuses := []int{200, 502}
	const endpoints, rounds = 40, 3
	for range rounds {
		for i := range endpoints {
			for _, status := range statuses {
				// A name made anew each time, as a record's may be.
				m.Served(&proxy.Record{Listener: "web", Kind: proxy.KindHTTP, Pool: "s", Endpoint: fmt.Sprintf("e%d", i), Status: status})
			}
		}
	}
	body := do(admin.Handler(&control{pool: p}, m, admin.Options{}), "GET", "/metrics").Body.String()
	for i := range endpoints {
		for _, status := range statuses {
			want := fmt.Sprintf(`rotor_requests_total{code="%d",endpoint="e%d",kind="http",listener="web",pool="s"} %d`, status, i, rounds)
			if !strings.Contains(body, want+"\n") {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	}
	if want := fmt.Sprintf(`rotor_request_duration_seconds_count{listener="web",pool="s"} %d`, rounds*endpoints*len(statuses)); !strings.Contains(body, want) {
		t.Errorf("/metrics lacks %s", want)
	}
}

// Changes are POSTs that another site cannot make through a browser, that
// need the token when one is set, and that a listener off loopback refuses
// without one. Reading is open.
func TestAdminChangesAreGuarded(t *testing.T) {
	const token = "0123456789abcdef-secret"
	c, _ := setup(t)
	m := admin.NewMetrics(c.Pools)
	drain := func(h http.Handler, hdr map[string]string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/admin/endpoints/app/a/drain", nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	open := admin.Handler(c, m, admin.Options{Loopback: true})
	locked := admin.Handler(c, m, admin.Options{Loopback: true, Token: token})
	exposed := admin.Handler(c, m, admin.Options{Loopback: false})
	exposedWithToken := admin.Handler(c, m, admin.Options{Loopback: false, Token: token})
	for _, tc := range []struct {
		name string
		h    http.Handler
		hdr  map[string]string
		want int
	}{
		{"loopback, a tool", open, nil, 200},
		{"loopback, same origin page", open, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://example.com"}, 200},
		{"loopback, another site", open, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.test"}, 403},
		{"loopback, another origin, old browser", open, map[string]string{"Origin": "http://evil.test"}, 403},
		{"token, none given", locked, nil, 401},
		{"token, wrong", locked, map[string]string{"Authorization": "Bearer nope"}, 401},
		{"token, right", locked, map[string]string{"Authorization": "Bearer " + token}, 200},
		{"token, right, another site", locked, map[string]string{"Authorization": "Bearer " + token, "Sec-Fetch-Site": "cross-site"}, 403},
		{"not loopback, no token", exposed, nil, 403},
		{"not loopback, token", exposedWithToken, map[string]string{"Authorization": "bearer " + token}, 200},
	} {
		rec := drain(tc.h, tc.hdr)
		if rec.Code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, rec.Code, rec.Body, tc.want)
		}
		if strings.Contains(rec.Body.String(), token) {
			t.Errorf("%s: the answer shows the token", tc.name)
		}
	}
	for _, path := range []string{"/status", "/ui", "/ui/assets/live.js", "/metrics"} {
		if rec := do(exposed, "GET", path); rec.Code != 200 {
			t.Errorf("GET %s off loopback: %d", path, rec.Code)
		}
	}
	rec := do(open, "GET", "/ui")
	if h := rec.Header(); !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") || h.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("/ui headers %v", h)
	}
}

func TestHistory(t *testing.T) {
	c, _ := setup(t)
	h := admin.NewHistory(c.Pools, time.Second, 3)
	now := time.Unix(1000, 0)
	for i := range 5 {
		for range i { // i picks of a in sample i
			pk, err := c.pool.Pick(balance.Request{})
			if err != nil {
				t.Fatal(err)
			}
			pk.Done(health.Outcome{Status: 200, Latency: 20 * time.Millisecond})
		}
		h.Sample(now.Add(time.Duration(i) * time.Second))
	}
	doc := h.Doc()
	if len(doc.Pools) != 1 || len(doc.Pools[0].Endpoints) != 2 {
		t.Fatalf("history %+v", doc)
	}
	a, b := doc.Pools[0].Endpoints[0], doc.Pools[0].Endpoints[1]
	if a.Name != "a" || len(a.T) != 3 || a.T[0] != 1002000 || a.T[2] != 1004000 {
		t.Fatalf("a's times %v, want the last three", a.T)
	}
	// Round robin splits 2, 3 and 4 picks between a and b.
	if got := a.Picks[0] + a.Picks[1] + a.Picks[2] + b.Picks[0] + b.Picks[1] + b.Picks[2]; got != 9 {
		t.Fatalf("picks a %v b %v, want 9 in all", a.Picks, b.Picks)
	}
	if a.LatencyMS[2] < 19 || a.LatencyMS[2] > 21 || a.Success[2] != 1 {
		t.Fatalf("a's latency %v success %v", a.LatencyMS, a.Success)
	}
	// An endpoint a reload removed is forgotten.
	if err := c.pool.Configure(balance.Config{Policy: &balance.RoundRobin{}, Endpoints: []balance.EndpointConfig{{Name: "a"}}}); err != nil {
		t.Fatal(err)
	}
	h.Sample(now.Add(10 * time.Second))
	if doc := h.Doc(); len(doc.Pools[0].Endpoints) != 1 {
		t.Fatalf("after removing b: %+v", doc.Pools[0].Endpoints)
	}
}
