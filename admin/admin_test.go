package admin_test

import (
	"encoding/json"
	"errors"
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
	return c, admin.Handler(c, admin.NewMetrics(c.Pools))
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
	m.Served(&proxy.Record{Listener: "out", Kind: proxy.KindConnect, Pool: "s", Status: 403, Reason: "port_forbidden"})
	c := &control{pool: p}
	body := do(admin.Handler(c, m), "GET", "/metrics").Body.String()
	for _, want := range []string{
		`rotor_sticky_total{event="pinned",pool="s"} 1`, `rotor_sticky_total{event="hit",pool="s"} 2`, `rotor_sticky_entries{pool="s"} 1`,
		`rotor_bytes_total{direction="in",listener="db"} 1000`, `rotor_bytes_total{direction="out",listener="db"} 3096`,
		`rotor_tcp_connections_total{endpoint="a",listener="db",pool="s",result="ok"} 1`,
		`rotor_tcp_connections_total{endpoint="",listener="db",pool="s",result="no_endpoint"} 1`,
		`rotor_requests_total{code="101",endpoint="a",kind="http",listener="web",pool="s"} 1`,
		`rotor_retries_total{listener="web",pool="s"} 1`,
		`rotor_refused_total{listener="out",reason="port_forbidden"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
