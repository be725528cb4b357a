package config_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/config"
	"github.com/rotor-lb/rotor/proxy/forward"
)

// The file shape the serve issue fixes, verbatim.
const contract = `admin: {listen: 127.0.0.1:9901}
listeners:
  - {name: web, kind: http, listen: 127.0.0.1:8080, routes: [{match: {path_prefix: /}, pool: app}]}
  - {name: db, kind: tcp, listen: 127.0.0.1:6432, pool: pg}
pools:
  - name: app
    policy: p2c                      # any policy name from the balancing issue
    key: {header: X-User}            # for key-based policies: header|cookie|query|client_ip|path
    endpoints:
      - {name: a, url: http://127.0.0.1:9001, weight: 2}
      - {name: b, url: http://127.0.0.1:9002}
      - {name: spare, url: http://127.0.0.1:9003, backup: true}
    health:
      check: {path: /healthz, interval: 2s, timeout: 1s, rise: 2, fall: 3}
      breaker: {threshold: 3, cooldown: 15s}
      ewma: {success_decay: 0.3, latency_decay: 0.3}
      slow_start: 30s
      panic_threshold: 0.5
    retries: {attempts: 2, budget: 0.2}
    timeouts: {connect: 2s, try: 10s, total: 30s}
  - name: pg
    policy: least_conn
    endpoints: [{name: pg1, address: 127.0.0.1:5432}]
`

func TestContractParses(t *testing.T) {
	f, err := config.Parse("rotor.yaml", []byte(contract), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	app := f.Pools[0]
	if app.Policy != "p2c" || app.Key.Header != "X-User" || app.Endpoints[0].Weight != 2 || !app.Endpoints[2].Backup ||
		app.Health.Check.Interval != 2*time.Second || app.Health.Breaker.Cooldown != 15*time.Second ||
		app.Health.SlowStart != 30*time.Second || app.Retries.Budget != 0.2 || app.Timeouts.Total != 30*time.Second {
		t.Fatalf("decoded %+v", app)
	}
	if f.Listeners[1].Kind != "tcp" || f.Pools[1].Endpoints[0].Address != "127.0.0.1:5432" {
		t.Fatalf("decoded %+v", f.Listeners[1])
	}
	if f.Listeners[0].Timeouts.ReadHeader != config.DefaultReadHeader || f.Log.Format != "text" {
		t.Fatal("defaults not applied")
	}
}

func TestBadConfigNamesFileLineAndPath(t *testing.T) {
	base := strings.Split(contract, "\n")
	edit := func(line int, text string) string {
		lines := append([]string(nil), base...)
		lines[line-1] = text
		return strings.Join(lines, "\n")
	}
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"unknown field", edit(7, "    polcy: p2c"), `rotor.yaml:7: pools.app.polcy: unknown field (known: name, policy,`},
		{"unknown policy", edit(7, "    policy: p3c"), `rotor.yaml:7: pools.app.policy: "p3c" is not a policy (round_robin, random, least_conn, p2c,`},
		{"wrong type", edit(10, "      - {name: a, url: http://127.0.0.1:9001, weight: heavy}"), `rotor.yaml:10: pools.app.endpoints.a.weight: "heavy" is not a whole number`},
		{"bad duration", edit(15, "      breaker: {threshold: 3, cooldown: soon}"), `rotor.yaml:15: pools.app.health.breaker.cooldown: "soon" is not a duration (250ms, 2s, 1m30s)`},
		{"shared address", edit(4, "  - {name: db, kind: tcp, listen: 127.0.0.1:8080, pool: pg}"), `rotor.yaml:4: listeners.db.listen: "127.0.0.1:8080" is listeners.web's address too: two sockets cannot take one address and port`},
		{"address under a wildcard", edit(4, "  - {name: db, kind: tcp, listen: \"0.0.0.0:8080\", pool: pg}"), `rotor.yaml:4: listeners.db.listen: "0.0.0.0:8080" is listeners.web's address too`},
		{"the admin's address", edit(4, "  - {name: db, kind: tcp, listen: \":9901\", pool: pg}"), `rotor.yaml:4: listeners.db.listen: ":9901" is admin.listen's address too`},
		{"duplicate endpoint", edit(11, "      - {name: a, url: http://127.0.0.1:9002}"), `rotor.yaml:11: pools.app.endpoints.a.name: "a" appears twice`},
		{"missing pool", edit(3, "  - {name: web, kind: http, listen: 127.0.0.1:8080, routes: [{match: {path_prefix: /}, pool: nope}]}"), `rotor.yaml:3: listeners.web.routes[0].pool: pool "nope" does not exist (pools: app, pg)`},
		{"bad kind", edit(4, "  - {name: db, kind: udp, listen: 127.0.0.1:6432, pool: pg}"), `rotor.yaml:4: listeners.db.kind: "udp" is not a listener kind (http, tcp, forward)`},
		{"decay", edit(16, "      ewma: {success_decay: 1.5, latency_decay: 0.3}"), "rotor.yaml:16: pools.app.health.ewma.success_decay: must be in (0, 1] (got 1.5)"},
		{"threshold", edit(15, "      breaker: {threshold: -1, cooldown: 15s}"), "rotor.yaml:15: pools.app.health.breaker.threshold: must be at least 1 (got -1)"},
		{"negative weight", edit(10, "      - {name: a, url: http://127.0.0.1:9001, weight: -2}"), "rotor.yaml:10: pools.app.endpoints.a.weight: must be at least 1 (got -2)"},
		{"bad url", edit(10, "      - {name: a, url: ftp://u:hunter2@127.0.0.1:9001}"), `rotor.yaml:10: pools.app.endpoints.a.url: scheme "ftp": must be http or https`},
		{"credentials in a backend url", edit(10, "      - {name: a, url: http://TOKEN0123@127.0.0.1:9001}"), `rotor.yaml:10: pools.app.endpoints.a.url: http://127.0.0.1:9001: credentials in a backend URL are not sent; remove them`},
		{"listen", edit(3, "  - {name: web, kind: http, listen: 8080, routes: [{match: {path_prefix: /}, pool: app}]}"), `rotor.yaml:3: listeners.web.listen: "8080" is not host:port`},
		{"keyed policy needs a key", edit(8, "    key: {}") + "", ""},
		{"panic threshold", edit(18, "      panic_threshold: 2"), "rotor.yaml:18: pools.app.health.panic_threshold: must be between 0 and 1 (got 2)"},
		{"check timeout", edit(14, "      check: {path: /healthz, interval: 1s, timeout: 2s}"), "rotor.yaml:14: pools.app.health.check.timeout: must be positive and at most the interval 1s (got 2s)"},
		{"read timeout on a tcp pool", edit(22, "    policy: least_conn\n    timeouts: {read: 5m}"), "rotor.yaml:23: pools.pg.timeouts.read: is for http and forward pools, whose backends answer"},
		{"negative read timeout", edit(20, "    timeouts: {connect: 2s, try: 10s, total: 30s, read: -1s}"), "pools.app.timeouts.read: must be positive (got -1s)"},
		{"read timeout", edit(20, "    timeouts: {connect: 2s, try: 10s, total: 30s, read: 5m}"), ""},
		{"request buffering on a tcp pool", edit(22, "    policy: least_conn\n    request_buffering: false"), "rotor.yaml:23: pools.pg.request_buffering: is for http and forward pools, whose requests have bodies"},
		{"request buffer on a tcp pool", edit(22, "    policy: least_conn\n    request_buffer_bytes: 1048576"), "rotor.yaml:23: pools.pg.request_buffer_bytes: is for http and forward pools, whose requests have bodies"},
		{"negative request buffer", edit(20, "    request_buffer_bytes: -1"), "rotor.yaml:20: pools.app.request_buffer_bytes: must be positive (got -1)"},
		{"request buffer streamed", edit(20, "    request_buffering: false\n    request_buffer_bytes: 1048576"), "rotor.yaml:21: pools.app.request_buffer_bytes: buffers nothing with request_buffering false"},
		{"request buffer", edit(20, "    request_buffer_bytes: 1048576"), ""},
		{"tcp pool with url", edit(23, "    endpoints: [{name: pg1, url: http://127.0.0.1:5432}]"), "rotor.yaml:23: pools.pg.endpoints.pg1.address: required for a tcp pool"},
		{"yaml syntax", edit(5, "pools: [oops"), "rotor.yaml: "},
		{"short admin token", edit(1, "admin: {listen: 127.0.0.1:9901, token: hunter2}"), "rotor.yaml:1: admin.token: must be at least 16 characters with no spaces (it was 7 long)"},
		{"admin token with a space", edit(1, "admin: {listen: 127.0.0.1:9901, token: 'hunter2 hunter2 hunter2'}"), "rotor.yaml:1: admin.token: must be at least 16 characters with no spaces"},
		{"admin token", edit(1, "admin: {listen: 0.0.0.0:9901, token: hunter2hunter2hunter2}"), ""},
		{"state store", contract + "state: {store: etcd}\n", `state.store: "etcd" is not memory or redis`},
		{"redis without an address", contract + "state: {store: redis}\n", "state.address: required with store: redis"},
		{"redis settings without redis", contract + "state: {address: 127.0.0.1:6379}\n", "state.store: the Redis settings need store: redis (got memory)"},
		{"redis staleness", contract + "state: {store: redis, address: 127.0.0.1:6379, staleness: 1ms}\n", "state.staleness: must be between 10ms and 1m (got 1ms)"},
		{"redis address", contract + "state: {store: redis, address: redis}\n", `state.address: "redis" is not host:port`},
		{"redis", contract + "state: {store: redis, addresses: [10.0.0.1:6379, 10.0.0.2:6379], password: hunter2}\n", ""},
		{"dns type", edit(8, "    endpoints_from: {dns: app.internal, type: MX, port: 80}"), `pools.app.endpoints_from.type: "MX" is not A, AAAA or SRV`},
		{"dns port", edit(8, "    endpoints_from: {dns: app.internal}"), "pools.app.endpoints_from.port: required for A records: 1 to 65535 (got 0)"},
		{"srv port", edit(8, "    endpoints_from: {dns: _http._tcp.app.internal, type: SRV, port: 80}"), "pools.app.endpoints_from.port: SRV records carry their ports"},
		{"dns scheme", edit(8, "    endpoints_from: {dns: app.internal, port: 80, scheme: ftp}"), `pools.app.endpoints_from.scheme: must be http or https (got "ftp")`},
		{"dns refresh", edit(8, "    endpoints_from: {dns: app.internal, port: 80, refresh: 1ms}"), "pools.app.endpoints_from.refresh: must be between 100ms and 24h (got 1ms)"},
		{"dns name", edit(8, "    endpoints_from: {dns: 'http://app', port: 80}"), `pools.app.endpoints_from.dns: must be a DNS name (got "http://app")`},
		{"dns", edit(8, "    endpoints_from: {dns: app.internal, port: 80, resolver: 127.0.0.1:53, weight: 2}"), ""},
		// A field the listener's kind has no use for is refused, not left to look as if it held.
		{"header bound on tcp", edit(4, "  - {name: db, kind: tcp, listen: 127.0.0.1:6432, pool: pg, max_header_bytes: 4096}"),
			"rotor.yaml:4: listeners.db.max_header_bytes: is for http and forward listeners, which read requests; this is a tcp listener"},
		{"idle timeout on tcp", edit(4, "  - {name: db, kind: tcp, listen: 127.0.0.1:6432, pool: pg, timeouts: {idle: 5s}}"),
			"rotor.yaml:4: listeners.db.timeouts.idle: is for http and forward listeners, which read requests; this is a tcp listener"},
		{"shutdown timeout on tcp", edit(4, "  - {name: db, kind: tcp, listen: 127.0.0.1:6432, pool: pg, timeouts: {shutdown: 5s}}"), ""},
		{"tunnel timeout on tcp", edit(4, "  - {name: db, kind: tcp, listen: 127.0.0.1:6432, pool: pg, timeouts: {tunnel: 10m}}"), ""},
		{"tunnel timeout on http", edit(3, "  - {name: web, kind: http, listen: 127.0.0.1:8080, pool: app, timeouts: {tunnel: 90s}}"), ""},
		{"short tunnel timeout", edit(4, "  - {name: db, kind: tcp, listen: 127.0.0.1:6432, pool: pg, timeouts: {tunnel: 500ms}}"),
			"listeners.db.timeouts.tunnel: must be at least 1s (got 500ms)"},
		{"negative tunnel timeout", edit(4, "  - {name: db, kind: tcp, listen: 127.0.0.1:6432, pool: pg, timeouts: {tunnel: -1s}}"),
			"listeners.db.timeouts.tunnel: must be positive (got -1s)"},
		{"streams on tcp", edit(4, "  - {name: db, kind: tcp, listen: 127.0.0.1:6432, pool: pg, max_concurrent_streams: 8}"),
			"rotor.yaml:4: listeners.db.max_concurrent_streams: is for http listeners; this is a tcp listener"},
		{"credentials on http", edit(3, "  - {name: web, kind: http, listen: 127.0.0.1:8080, pool: app, auth: {users: {a: hunter2}}}"),
			"rotor.yaml:3: listeners.web.auth: is for forward listeners; this is an http listener"},
		{"connect ports on http", edit(3, "  - {name: web, kind: http, listen: 127.0.0.1:8080, pool: app, connect_ports: [443]}"),
			"rotor.yaml:3: listeners.web.connect_ports: is for forward listeners; this is an http listener"},
		{"trusted proxies on forward", edit(4, "  - {name: out, kind: forward, listen: 127.0.0.1:3128, pool: app, trusted_proxies: [10.0.0.0/8]}"),
			"rotor.yaml:4: listeners.out.trusted_proxies: is for http listeners; this is a forward listener"},
		{"http bounds on http", edit(3, "  - {name: web, kind: http, listen: 127.0.0.1:8080, pool: app, max_header_bytes: 4096, max_concurrent_streams: 8, trusted_proxies: [10.0.0.0/8], timeouts: {idle: 5s}}"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse("rotor.yaml", []byte(tt.yaml), func(string) string { return "" })
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err:\n%v\nwant it to contain:\n%s", err, tt.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("a password leaked into the error: %v", err)
			}
		})
	}
}

func TestKeyedPolicyRequiresKey(t *testing.T) {
	y := strings.Replace(contract, "policy: p2c", "policy: ring", 1)
	y = strings.Replace(y, "    key: {header: X-User}            # for key-based policies: header|cookie|query|client_ip|path\n", "", 1)
	_, err := config.Parse("rotor.yaml", []byte(y), func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), "pools.app.key: required by policy ring") {
		t.Fatalf("err %v", err)
	}
}

func TestEnvInterpolation(t *testing.T) {
	y := strings.Replace(contract, "url: http://127.0.0.1:9001", `url: "http://${APP_HOST}:${APP_PORT:-9001}"`, 1)
	env := map[string]string{"APP_HOST": "127.0.0.2"}
	f, err := config.Parse("rotor.yaml", []byte(y), func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Pools[0].Endpoints[0].URL; got != "http://127.0.0.2:9001" {
		t.Fatalf("url %q", got)
	}
	_, err = config.Parse("rotor.yaml", []byte(y), func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), "rotor.yaml:10: pools.app.endpoints.a.url: environment variable APP_HOST is not set") {
		t.Fatalf("unset variable: %v", err)
	}
	// A variable may stand for a number.
	y = strings.Replace(contract, "panic_threshold: 0.5", "panic_threshold: ${PANIC}", 1)
	f, err = config.Parse("rotor.yaml", []byte(y), func(k string) string { return map[string]string{"PANIC": "0.25"}[k] })
	if err != nil || f.Pools[0].Health.PanicThreshold != 0.25 {
		t.Fatalf("number from env: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(contract))
	f.Add([]byte("listeners: [{name: x, kind: tcp, listen: 'a:1', pool: p}]\npools: [{name: p, endpoints: [{name: e, address: 'b:2'}]}]"))
	f.Add([]byte("pools: &a [*a]"))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fc, err := config.Parse("f.yaml", data, func(string) string { return "x" })
		if err == nil && len(fc.Listeners) == 0 {
			t.Fatal("accepted a config with no listener")
		}
		if err != nil && !strings.HasPrefix(err.Error(), "f.yaml") {
			t.Fatalf("error does not name the file: %v", err)
		}
	})
}

// The forward-proxy shape the rotation issue fixes, verbatim.
const forwardContract = `listeners:
  - {name: out, kind: forward, listen: 127.0.0.1:3128, pool: routes,
     auth: {users: {alice: "${ALICE_PASSWORD}"}}, allow_targets: [127.0.0.0/8]}
pools:
  - name: routes
    policy: scored
    endpoints:
      - {name: direct, url: "direct://"}
      - {name: tiny, url: "http://user:${TINY_PASS}@127.0.0.1:8888"}
      - {name: socks, url: "socks5://127.0.0.1:1080", cost: 2}
`

func TestForwardContract(t *testing.T) {
	env := map[string]string{"ALICE_PASSWORD": "a-pass", "TINY_PASS": "t-pass"}
	f, err := config.Parse("rotor.yaml", []byte(forwardContract), func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	l, p := f.Listeners[0], f.Pools[0]
	if l.Kind != "forward" || l.Auth.Users["alice"] != "a-pass" || l.AllowTargets[0] != "127.0.0.0/8" ||
		p.Endpoints[2].Cost != 2 || p.FailStatuses != "5xx,429,403,407" || p.Retries.Statuses != p.FailStatuses {
		t.Fatalf("decoded %+v %+v", l, p)
	}
	// A route whose secret is unset stops loading, naming the variable.
	_, err = config.Parse("rotor.yaml", []byte(forwardContract), func(k string) string {
		return map[string]string{"ALICE_PASSWORD": "a"}[k]
	})
	if err == nil || !strings.Contains(err.Error(), "rotor.yaml:9: pools.routes.endpoints.tiny.url: environment variable TINY_PASS is not set") {
		t.Fatalf("unset route secret: %v", err)
	}
	bad := strings.Replace(forwardContract, `url: "direct://"`, `url: "ftp://x:secretpw@h:1"`, 1)
	_, err = config.Parse("rotor.yaml", []byte(bad), func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error(), `pools.routes.endpoints.direct.url: scheme "ftp": must be direct, http or socks5`) || strings.Contains(err.Error(), "secretpw") {
		t.Fatalf("bad route: %v", err)
	}
}

// What check-config accepts, the route constructor builds: a direct route
// with a user is refused by both, the same way; and a token standing as a
// route's user shows in no error.
func TestRouteURLRulesAreTheConstructors(t *testing.T) {
	for _, raw := range []string{"direct://user@", "direct://h:1", "http://TOKEN0123@h", "ftp://TOKEN0123:@h:1"} {
		y := strings.Replace(forwardContract, `url: "direct://"`, fmt.Sprintf("url: %q", raw), 1)
		_, cfgErr := config.Parse("rotor.yaml", []byte(y), func(string) string { return "x" })
		_, routeErr := forward.NewRoute(forward.RouteOptions{Name: "direct", URL: raw})
		if cfgErr == nil || routeErr == nil {
			t.Fatalf("%s: config %v, route %v: want both to refuse", raw, cfgErr, routeErr)
		}
		if !strings.Contains(cfgErr.Error(), routeErr.Error()) {
			t.Errorf("%s: config says %q, the route %q: one rule, one message", raw, cfgErr, routeErr)
		}
		if strings.Contains(cfgErr.Error(), "TOKEN0123") {
			t.Errorf("%s: the error shows the URL's user: %v", raw, cfgErr)
		}
	}
}

// The sticky table's bound is set in the file, and checked.
func TestStickyMaxEntries(t *testing.T) {
	y := strings.Replace(contract, "policy: p2c", "policy: sticky\n    sticky: {max_entries: 500}", 1)
	f, err := config.Parse("rotor.yaml", []byte(y), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Pools[0].PolicyParams().StickyEntries; got != 500 {
		t.Fatalf("max_entries %d, want 500", got)
	}
	y = strings.Replace(contract, "policy: p2c", "policy: sticky\n    sticky: {max_entries: -5}", 1)
	if _, err := config.Parse("rotor.yaml", []byte(y), nil); err == nil || !strings.Contains(err.Error(), "max_entries: must be positive") {
		t.Fatalf("a negative bound: %v", err)
	}
}

// A policy's key compares its settings by value: the same gamma in two
// files is the same key (the policy, and its state, are kept).
func TestPolicyKeyByValue(t *testing.T) {
	g1, g2, g3 := 2.0, 2.0, 3.0
	a := config.PolicyParams{Gamma: &g1}.Key("scored")
	if a != (config.PolicyParams{Gamma: &g2}).Key("scored") {
		t.Fatal("the same gamma at two addresses gives two keys")
	}
	if a == (config.PolicyParams{Gamma: &g3}).Key("scored") || a == (config.PolicyParams{}).Key("scored") {
		t.Fatal("another gamma, or none, gives the same key")
	}
}

// ${VAR} unquoted in flow style, as the README writes configs, is a
// reference, not YAML syntax.
func TestEnvInFlowStyle(t *testing.T) {
	y := `listeners: [{name: web, kind: http, listen: ${LISTEN:-127.0.0.1:8080}, pool: app}]
pools:
  - {name: app, endpoints: [{name: a, url: http://${HOST}:${PORT}/base, weight: ${WEIGHT}}]}
`
	env := map[string]string{"HOST": "127.0.0.9", "PORT": "9001", "WEIGHT": "3"}
	f, err := config.Parse("rotor.yaml", []byte(y), func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if l, e := f.Listeners[0], f.Pools[0].Endpoints[0]; l.Listen != "127.0.0.1:8080" || e.URL != "http://127.0.0.9:9001/base" || e.Weight != 3 {
		t.Fatalf("listen %q url %q weight %d", l.Listen, e.URL, e.Weight)
	}
	env["WEIGHT"] = "three"
	if _, err := config.Parse("rotor.yaml", []byte(y), func(k string) string { return env[k] }); err == nil ||
		!strings.Contains(err.Error(), `rotor.yaml:3: pools.app.endpoints.a.weight: "three" is not a whole number`) {
		t.Fatalf("a variable that is not a number: %v", err)
	}
}

// Listeners that could not be bound side by side are refused (above);
// these can: another port, another address, the two families' loopback
// addresses, and any number on port 0 (a free port each). A wildcard
// takes its port on both families, as Go listens on it.
func TestAddressesThatCanBeShared(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		both bool // they can be bound side by side
	}{
		{"127.0.0.1:8080", "127.0.0.1:8081", true},
		{"127.0.0.1:8080", "127.0.0.2:8080", true},
		{"127.0.0.1:0", "127.0.0.1:0", true},
		{"[::1]:8080", "127.0.0.1:8080", true},
		{"[::]:8080", "127.0.0.1:8080", false},
		{":8080", "[::1]:8080", false},
		{"127.0.0.1:8080", "0.0.0.0:8080", false},
		{"[::1]:8080", "[0:0::1]:8080", false},
		{"0.0.0.0:8080", "[::1]:8080", false},
	} {
		yaml := fmt.Sprintf(`admin: {listen: "off"}
listeners:
  - {name: a, kind: tcp, listen: %q, pool: pg}
  - {name: b, kind: tcp, listen: %q, pool: pg}
pools:
  - {name: pg, endpoints: [{name: pg1, address: "127.0.0.1:5432"}]}
`, tc.a, tc.b)
		_, err := config.Parse("rotor.yaml", []byte(yaml), func(string) string { return "" })
		if tc.both && err != nil || !tc.both && (err == nil || !strings.Contains(err.Error(), "listeners.b.listen")) {
			t.Errorf("%s beside %s: %v, want them side by side: %v", tc.a, tc.b, err, tc.both)
		}
	}
}
