package server

import (
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rotor-lb/rotor/config"
)

const buildConfig = `admin: {listen: "127.0.0.1:0"}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app, trusted_proxies: [10.0.0.0/8]}
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes, allow_targets: [127.0.0.0/8]}
  - {name: db, kind: tcp, listen: "127.0.0.1:0", pool: tcpapp}
pools:
  - name: app
    policy: sticky
    key: {header: X-User}
    health: {check: {path: /healthz}, wait_first_check: true}
    endpoints:
      - {name: a, url: "http://127.0.0.1:9001"}
      - {name: b, url: "http://127.0.0.1:9002"}
  - name: routes
    blocked_body: "(?i)denied"
    endpoints:
      - {name: direct, url: "direct://"}
  - name: tcpapp
    endpoints:
      - {name: t, address: "127.0.0.1:9003"}
`

// Every step at which building a runtime can fail leaves the running one
// as it was: the same runtime, the same homes holding the same values,
// and no endpoint state left behind in any store. The config is changed
// past validation (which catches most of these first), so that each
// build step's own refusal is what is tested.
func TestEveryBuildFailureChangesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rotor.yaml")
	if err := os.WriteFile(path, []byte(buildConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := New(path, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	pool := func(f *config.File, name string) *config.Pool {
		for i := range f.Pools {
			if f.Pools[i].Name == name {
				return &f.Pools[i]
			}
		}
		t.Fatalf("no pool %s", name)
		return nil
	}
	listener := func(f *config.File, name string) *config.Listener {
		for i := range f.Listeners {
			if f.Listeners[i].Name == name {
				return &f.Listeners[i]
			}
		}
		t.Fatalf("no listener %s", name)
		return nil
	}
	// Each case also adds an endpoint and a pool before it breaks, so a
	// build that got as far as making their states must give them back.
	grow := func(f *config.File) {
		app := pool(f, "app")
		app.Endpoints = append(app.Endpoints, config.Endpoint{Name: "new", URL: "http://127.0.0.1:9009"})
		extra := *pool(f, "app")
		extra.Endpoints = slices.Clone(extra.Endpoints[:2])
		check := *extra.Health.Check
		extra.Health.Check = &check
		extra.Name = "extra"
		f.Pools = append([]config.Pool{extra}, f.Pools...)
	}
	for _, tc := range []struct {
		name   string
		break_ func(f *config.File)
		want   string
	}{
		{"policy", func(f *config.File) { pool(f, "app").Policy = "p3c" }, `pools.app: "p3c" is not a policy`},
		{"fail statuses", func(f *config.File) { pool(f, "app").FailStatuses = "6xx" }, "pools.app.fail_statuses"},
		{"retry statuses", func(f *config.File) { pool(f, "app").Retries.Statuses = "abc" }, "pools.app.retries.statuses"},
		{"check expect", func(f *config.File) { pool(f, "app").Health.Check.Expect = "9xx" }, "pools.app.health.check.expect"},
		{"backend url", func(f *config.File) { pool(f, "app").Endpoints[1].URL = "ftp://x" }, "pools.app.endpoints.b.url"},
		{"route url", func(f *config.File) { pool(f, "routes").Endpoints[0].URL = "direct://user@" }, "pools.routes.endpoints.direct.url"},
		{"tcp address", func(f *config.File) { pool(f, "tcpapp").Endpoints[0].Address = "nohostport" }, "pools.tcpapp.endpoints.t.address"},
		{"endpoint twice", func(f *config.File) {
			app := pool(f, "app")
			app.Endpoints = append(app.Endpoints, app.Endpoints[0])
		}, `"a" appears twice`},
		{"panic threshold", func(f *config.File) { pool(f, "app").Health.PanicThreshold = 2 }, "panic_threshold"},
		{"trusted proxies", func(f *config.File) { listener(f, "web").TrustedProxies = []string{"nonsense"} }, "listeners.web.trusted_proxies"},
		{"allow targets", func(f *config.File) { listener(f, "out").AllowTargets = []string{"nonsense"} }, "listeners.out.allow_targets"},
		{"blocked body", func(f *config.File) { pool(f, "routes").BlockedBody = "(" }, "pools.routes.blocked_body"},
		{"certificate", func(f *config.File) {
			listener(f, "web").TLS = &config.TLS{Cert: filepath.Join(dir, "missing.pem"), Key: filepath.Join(dir, "missing.key")}
		}, "listeners.web.tls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := s.rt.Load()
			homes := maps.Clone(s.homes)
			values := map[string]home{}
			stores := map[string][]string{}
			for name, h := range s.homes {
				values[name] = *h
				stores[name] = h.balance.Store().Names()
			}
			cfg, err := config.Load(path, func(string) string { return "" })
			if err != nil {
				t.Fatal(err)
			}
			grow(cfg)
			tc.break_(cfg)
			if _, err := s.build(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("build: %v, want an error saying %q", err, tc.want)
			}
			if s.rt.Load() != rt {
				t.Fatal("a failed build swapped the runtime")
			}
			if !maps.Equal(homes, s.homes) {
				t.Fatal("a failed build changed the set of homes")
			}
			for name, h := range s.homes {
				v := values[name]
				if h.balance != v.balance || h.policy != v.policy || h.policyKey != v.policyKey || h.budget != v.budget ||
					h.transport != v.transport || !maps.Equal(h.routes, v.routes) {
					t.Fatalf("a failed build changed the home of pool %s", name)
				}
				if got := h.balance.Store().Names(); !slices.Equal(got, stores[name]) {
					t.Fatalf("pool %s: the store holds %v after a failed build, want %v", name, got, stores[name])
				}
				if h.balance.Snapshot() != rt.pools[name].snap {
					t.Fatalf("pool %s: a failed build published a snapshot", name)
				}
			}
		})
	}
}
