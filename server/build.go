package server

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"time"

	"github.com/rotor-lb/rotor/admin"
	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/check"
	"github.com/rotor-lb/rotor/config"
	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/proxy"
	"github.com/rotor-lb/rotor/proxy/forward"
	"github.com/rotor-lb/rotor/proxy/reverse"
)

// poolState is what outlives reloads for one pool name: the balance pools
// (with their health stores), the policies (round robin's counter, sticky
// tables...) and the retry budget.
type poolState struct {
	primary, backup *balance.Pool
	primaryPolicy   balance.Policy
	backupPolicy    balance.Policy
	policyKey       string
	budget          *proxy.Budget
	budgetRatio     float64
	stores          [2]*health.MemoryStore
	endpoints       map[string]bool  // names in the last config
	transport       *http.Transport  // kept while its timeouts stay the same
	transportKey    [2]time.Duration // connect, try
}

// built is one config turned into runtime values.
type built struct {
	cfg    *config.File
	pools  map[string]*proxy.Pool
	views  []admin.PoolView
	tables map[string]*reverse.Table // http listener name -> routing
	// forwards are the forward listeners' settings, by listener name.
	forwards map[string]*forward.Settings
	checks   []checkSpec
}

type checkSpec struct {
	pool    string
	spec    check.Spec
	targets []check.Target
}

// build turns cfg into runtime pools, reusing s.state by pool name. It
// only configures balance pools after every pool has been validated, so a
// failure changes nothing.
func (s *Server) build(cfg *config.File) (*built, error) {
	type plan struct {
		pc        config.Pool
		policyKey string
		// primaryPolicy and backupPolicy are built when the policy's
		// settings changed (or the pool is new); nil keeps the running ones.
		primaryPolicy, backupPolicy balance.Policy
		expect                      *health.Classifier
		classes                     *health.Classifier
		retry                       *health.Classifier
		primary                     []balance.EndpointConfig
		backup                      []balance.EndpointConfig
		targets                     map[string]*url.URL
		addrs                       map[string]string
		views                       map[string]string
		backups                     map[string]bool
	}
	var plans []*plan
	for _, pc := range cfg.Pools {
		p := &plan{pc: pc, targets: map[string]*url.URL{}, addrs: map[string]string{}, views: map[string]string{}, backups: map[string]bool{}}
		p.policyKey = policyKey(pc)
		var err error
		if st := s.state[pc.Name]; st == nil || st.policyKey != p.policyKey {
			if p.primaryPolicy, err = config.NewPolicy(pc.Policy, pc.PolicyParams()); err != nil {
				return nil, fmt.Errorf("pools.%s: %w", pc.Name, err)
			}
			p.backupPolicy, _ = config.NewPolicy(pc.Policy, pc.PolicyParams())
		}
		if c := pc.Health.Check; c != nil {
			if p.expect, err = health.NewClassifier(c.Expect); err != nil {
				return nil, fmt.Errorf("pools.%s.health.check.expect: %w", pc.Name, err)
			}
		}
		if p.classes, err = health.NewClassifier(pc.FailStatuses); err != nil {
			return nil, fmt.Errorf("pools.%s.fail_statuses: %w", pc.Name, err)
		}
		if p.retry, err = health.NewClassifier(pc.Retries.Statuses); err != nil {
			return nil, fmt.Errorf("pools.%s.retries.statuses: %w", pc.Name, err)
		}
		for _, e := range pc.Endpoints {
			ec := balance.EndpointConfig{Name: e.Name, Addr: e.Address, Weight: e.Weight, Cost: e.Cost, MaxInflight: e.MaxInflight}
			if e.URL != "" {
				u, err := url.Parse(e.URL)
				if err != nil {
					return nil, fmt.Errorf("pools.%s.endpoints.%s.url: not a URL", pc.Name, e.Name)
				}
				p.targets[e.Name] = u
				ec.Addr = u.Redacted()
			}
			p.addrs[e.Name] = e.Address
			p.views[e.Name] = ec.Addr
			p.backups[e.Name] = e.Backup
			if e.Backup {
				p.backup = append(p.backup, ec)
			} else {
				p.primary = append(p.primary, ec)
			}
		}
		plans = append(plans, p)
	}
	// Every pool planned: now touch the running state.
	b := &built{cfg: cfg, pools: map[string]*proxy.Pool{}, tables: map[string]*reverse.Table{}, forwards: map[string]*forward.Settings{}}
	for _, p := range plans {
		pc := p.pc
		st := s.state[pc.Name]
		if st == nil {
			st = &poolState{stores: [2]*health.MemoryStore{health.NewMemoryStore(), health.NewMemoryStore()}, endpoints: map[string]bool{}}
			opts := func(i int) balance.Options { return balance.Options{Store: st.stores[i]} }
			st.primary = balance.NewPool(pc.Name, opts(0))
			st.backup = balance.NewPool(pc.Name+"/backup", opts(1))
			s.state[pc.Name] = st
		}
		if p.primaryPolicy != nil {
			st.primaryPolicy, st.backupPolicy, st.policyKey = p.primaryPolicy, p.backupPolicy, p.policyKey
		}
		if st.budget == nil || st.budgetRatio != pc.Retries.Budget {
			st.budget, st.budgetRatio = proxy.NewBudget(pc.Retries.Budget), pc.Retries.Budget
		}
		hc := pc.HealthConfig()
		// New endpoints wait for their first check when so configured:
		// mark them down before they are published.
		if pc.Health.WaitFirstCheck && pc.Health.Check != nil {
			for i, eps := range [][]balance.EndpointConfig{p.primary, p.backup} {
				for _, ec := range eps {
					if !st.endpoints[ec.Name] {
						st.stores[i].State(ec.Name, hc).SetDown(true, s.now())
					}
				}
			}
		}
		if err := st.primary.Configure(balance.Config{Policy: st.primaryPolicy, Endpoints: p.primary, Health: hc, Classifier: p.classes}); err != nil {
			return nil, fmt.Errorf("pools.%s: %w", pc.Name, err)
		}
		if err := st.backup.Configure(balance.Config{Policy: st.backupPolicy, Endpoints: p.backup, Health: hc, Classifier: p.classes}); err != nil {
			return nil, fmt.Errorf("pools.%s: %w", pc.Name, err)
		}
		st.endpoints = map[string]bool{}
		for _, e := range pc.Endpoints {
			st.endpoints[e.Name] = true
		}
		if key := [2]time.Duration{pc.Timeouts.Connect, pc.Timeouts.Try}; st.transport == nil || st.transportKey != key {
			if st.transport != nil {
				st.transport.CloseIdleConnections()
			}
			st.transport, st.transportKey = proxy.NewTransport(pc.Timeouts.Connect, pc.Timeouts.Try), key
		}
		rp := &proxy.Pool{
			Transport: st.transport,
			Name:      pc.Name, Primary: st.primary, Key: keyFunc(pc.Key), Targets: p.targets, Addrs: p.addrs,
			Attempts: pc.Retries.Attempts, RetryStatuses: p.retry, Budget: st.budget,
			Connect: pc.Timeouts.Connect, Try: pc.Timeouts.Try, Total: pc.Timeouts.Total,
			PanicThreshold: pc.Health.PanicThreshold, SlowStart: pc.Health.SlowStart,
		}
		if len(p.backup) > 0 {
			rp.Backup = st.backup
		}
		if sc := pc.StickyCookie; sc != nil {
			rp.Sticky = &proxy.StickyCookie{Name: sc.Name, Secret: []byte(sc.Secret), TTL: sc.TTL}
		}
		b.pools[pc.Name] = rp
		view := admin.PoolView{Name: pc.Name, Primary: st.primary, Backup: rp.Backup, Addresses: p.views, Backups: p.backups}
		view.Sticky, _ = st.primaryPolicy.(*balance.Sticky)
		b.views = append(b.views, view)
		if c := pc.Health.Check; c != nil {
			cs := checkSpec{pool: pc.Name, spec: check.Spec{Kind: c.Kind, Path: c.Path, Expect: p.expect, Interval: c.Interval, Timeout: c.Timeout, Rise: c.Rise, Fall: c.Fall}}
			for _, bp := range []*balance.Pool{st.primary, st.backup} {
				for _, ep := range bp.Set().Endpoints() {
					cs.targets = append(cs.targets, check.Target{Name: ep.Name, State: ep.State, URL: p.targets[ep.Name], Addr: p.addrs[ep.Name]})
				}
			}
			b.checks = append(b.checks, cs)
		}
	}
	for name, st := range s.state {
		if b.pools[name] == nil {
			delete(s.state, name) // a pool gone from the config
			if st.transport != nil {
				st.transport.CloseIdleConnections()
			}
		}
	}
	for _, l := range cfg.Listeners {
		if l.Kind == "forward" {
			fs, err := s.forwardSettings(l, cfg, b.pools[l.Pool])
			if err != nil {
				return nil, err
			}
			b.forwards[l.Name] = fs
			continue
		}
		if l.Kind != "http" {
			continue
		}
		t := &reverse.Table{}
		for _, r := range l.Routes {
			t.Routes = append(t.Routes, reverse.Route{
				Host: r.Match.Host, PathPrefix: r.Match.PathPrefix, Header: r.Match.Header, Cookie: r.Match.Cookie,
				Pool: b.pools[r.Pool],
			})
		}
		if l.Pool != "" {
			t.Default = b.pools[l.Pool]
		}
		trusted, err := config.ParsePrefixes(l.TrustedProxies)
		if err != nil {
			return nil, fmt.Errorf("listeners.%s.trusted_proxies%w", l.Name, err)
		}
		t.Trusted = trusted
		b.tables[l.Name] = t
	}
	return b, nil
}

// policyKey says what a pool's policy was built from: while it stays the
// same across reloads the policy value (its counters, tables, loads) is
// kept. The gamma pointer is keyed by its value, not its address.
func policyKey(pc config.Pool) string {
	params := pc.PolicyParams()
	gamma := "default"
	if params.Gamma != nil {
		gamma = strconv.FormatFloat(*params.Gamma, 'g', -1, 64)
		params.Gamma = nil
	}
	return fmt.Sprintf("%s %+v gamma=%s", pc.Policy, params, gamma)
}

// keyFunc returns where a pool finds a request's key.
func keyFunc(k config.Key) proxy.KeyFunc {
	switch {
	case k.Header != "":
		h := http.CanonicalHeaderKey(k.Header)
		return func(r *http.Request) string { return r.Header.Get(h) }
	case k.Cookie != "":
		return func(r *http.Request) string {
			if c, err := r.Cookie(k.Cookie); err == nil {
				return c.Value
			}
			return ""
		}
	case k.Query != "":
		return func(r *http.Request) string { return r.URL.Query().Get(k.Query) }
	case k.ClientIP:
		return func(r *http.Request) string {
			host, _, err := net.SplitHostPort(r.RemoteAddr)
			if err != nil {
				return r.RemoteAddr
			}
			return host
		}
	case k.Path:
		return func(r *http.Request) string { return r.URL.Path }
	}
	return nil
}

// sameListeners reports why two configs' listeners differ in a way a
// reload cannot apply (they need new sockets), or "" when they do not.
func sameListeners(a, b *config.File) string {
	if len(a.Listeners) != len(b.Listeners) {
		return "the set of listeners changed"
	}
	for i := range a.Listeners {
		x, y := a.Listeners[i], b.Listeners[i]
		if x.Name != y.Name || x.Kind != y.Kind || x.Listen != y.Listen || (x.TLS == nil) != (y.TLS == nil) ||
			x.TLS != nil && *x.TLS != *y.TLS {
			return "listener " + y.Name + " changed its name, kind, address or tls"
		}
	}
	if a.Admin.Listen != b.Admin.Listen {
		return "admin.listen changed"
	}
	return ""
}

// forwardSettings builds a forward listener's routes and transport over
// its pool's balance pool.
func (s *Server) forwardSettings(l config.Listener, cfg *config.File, pool *proxy.Pool) (*forward.Settings, error) {
	var pc config.Pool
	for _, p := range cfg.Pools {
		if p.Name == l.Pool {
			pc = p
		}
	}
	allow, err := config.ParsePrefixes(l.AllowTargets)
	if err != nil {
		return nil, fmt.Errorf("listeners.%s.allow_targets%w", l.Name, err)
	}
	guard := &forward.Guard{Allow: allow}
	var routes []*forward.Route
	for _, e := range pc.Endpoints {
		u, err := forward.ParseRouteURL(e.URL)
		if err != nil {
			return nil, fmt.Errorf("pools.%s.endpoints.%s.url: %w", pc.Name, e.Name, err)
		}
		if e.InsecureSkipVerify {
			s.log.Warn("route accepts any certificate from targets (insecure_skip_verify)", "pool", pc.Name, "route", e.Name)
		}
		routes = append(routes, forward.NewRoute(e.Name, u, e.InsecureSkipVerify, guard, pc.Timeouts.Connect, pc.Timeouts.Try))
	}
	classes, err := health.NewClassifier(pc.FailStatuses)
	if err != nil {
		return nil, fmt.Errorf("pools.%s.fail_statuses: %w", pc.Name, err)
	}
	opts := forward.Options{Classifier: classes, Attempts: pc.Retries.Attempts, Budget: pc.Retries.Budget, Guard: guard}
	if pc.BlockedBody != "" {
		if opts.BlockedBody, err = regexp.Compile(pc.BlockedBody); err != nil {
			return nil, fmt.Errorf("pools.%s.blocked_body: %w", pc.Name, err)
		}
	}
	if pc.Key.TargetHost {
		opts.Key = func(r *http.Request) string { return r.URL.Hostname() }
	} else if pool.Key != nil {
		opts.Key = pool.Key
	}
	users := map[string]string{}
	if l.Auth != nil {
		users = l.Auth.Users
	}
	return &forward.Settings{
		Transport:     forward.NewTransportOnPool(pool.Primary, routes, opts),
		Users:         users,
		ConnectPorts:  l.ConnectPorts,
		TunnelTimeout: pc.Timeouts.Connect + pc.Timeouts.Try,
	}, nil
}
