package server

import (
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/rotor-lb/rotor/admin"
	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/check"
	"github.com/rotor-lb/rotor/config"
	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/internal/secret"
	"github.com/rotor-lb/rotor/proxy"
	"github.com/rotor-lb/rotor/proxy/forward"
	"github.com/rotor-lb/rotor/proxy/h1"
	"github.com/rotor-lb/rotor/proxy/reverse"
	"github.com/rotor-lb/rotor/proxy/tcp"
)

// home is what outlives runtimes for one pool name: the balance pool
// (its endpoint health store and counters), and the values a new runtime
// takes over while their settings stay the same: the policy (round
// robin's counter, smooth weights, sticky tables, bounded loads), the
// retry budget, the backend transport (its keep-alive connections) and
// the routes of each forward listener (theirs).
//
// A home is read, never changed, while a runtime is built; a runtime that
// is swapped in updates it, one that is discarded leaves it as it was.
type home struct {
	balance   *balance.Pool
	policy    balance.Policy
	policyKey config.PolicyKey
	budget    *proxy.Budget
	transport *h1.Transport
	transKey  transportKey
	routes    map[routeKey]*forward.Route
}

type transportKey struct {
	connect, try, read time.Duration
	tls                [sha256.Size]byte // the client TLS section's digest (clientTLS); zero without one
}

// routeKey says what a route is built from: a route with the same key is
// taken over by the next runtime, with its connections.
type routeKey struct {
	listener, name, url string
	insecure            bool
	allow               string
	connect, try, read  time.Duration
}

// runtime is one config turned into everything the listeners serve with:
// pools, routes, transports, guards, routing tables, TLS certificates and
// health checks. It is immutable once built, and swapped in whole.
type runtime struct {
	cfg       *config.File
	found     found // the endpoints DNS gave, by pool
	pools     map[string]*poolRuntime
	listeners map[string]*listenerRuntime
	views     []admin.PoolView
	checks    []checkSpec
}

// poolRuntime is one pool in a runtime.
type poolRuntime struct {
	home      *home // nil until the runtime is swapped in, for a pool new to the server
	next      home  // what the home holds once this runtime is swapped in
	snap      *balance.Snapshot
	proxy     *proxy.Pool
	reverse   *reverse.Pool
	tcp       *tcp.Pool
	tls       *tls.Config                 // http: how its https endpoints are reached; nil: the system's roots
	newTrans  bool                        // next.transport was made by this build
	newRoutes map[routeKey]*forward.Route // routes made by this build
}

// listenerRuntime is what one listener serves with, by kind.
type listenerRuntime struct {
	table   *reverse.Table    // http
	tls     *tls.Certificate  // http with tls
	forward *forward.Settings // forward
	tcp     *tcp.Pool         // tcp
}

type checkSpec struct {
	pool    string
	spec    check.Spec
	targets []check.Target
}

// build turns cfg into a runtime beside the running one, without changing
// anything the running one uses: homes are only read, and whatever the
// build makes (snapshots, transports, routes) is given back when any step
// fails. What validates builds: check-config runs this same code.
func (s *Server) build(cfg *config.File) (*runtime, error) { return s.buildWith(cfg, nil, nil) }

// buildWith builds with the endpoints DNS gave (f), reporting each pool's
// lookups (ds) in /status.
func (s *Server) buildWith(cfg *config.File, f found, ds map[string]*discoverer) (_ *runtime, err error) {
	rt := &runtime{cfg: cfg, found: f, pools: map[string]*poolRuntime{}, listeners: map[string]*listenerRuntime{}}
	defer func() {
		if err != nil {
			rt.discard()
		}
	}()
	kinds := map[string]string{} // pool -> the kind of listener using it
	for _, l := range cfg.Listeners {
		kinds[l.Pool] = l.Kind
		for _, r := range l.Routes {
			kinds[r.Pool] = l.Kind
		}
	}
	for _, pc := range cfg.Pools {
		pc = withFound(pc, f)
		pr, err := s.buildPool(pc, kinds[pc.Name])
		if err != nil {
			return nil, err
		}
		rt.pools[pc.Name] = pr
		view := admin.PoolView{Name: pc.Name, Snapshot: pr.snap}
		if d := ds[pc.Name]; d != nil {
			view.DNS = d.status
		}
		view.Sticky, _ = pr.next.policy.(*balance.Sticky)
		rt.views = append(rt.views, view)
		if c := pc.Health.Check; c != nil {
			expect, err := health.NewClassifier(c.Expect)
			if err != nil {
				return nil, fmt.Errorf("pools.%s.health.check.expect: %w", pc.Name, err)
			}
			cs := checkSpec{pool: pc.Name, spec: check.Spec{Kind: c.Kind, Path: c.Path, Expect: expect, Interval: c.Interval, Timeout: c.Timeout, Rise: c.Rise, Fall: c.Fall, TLS: pr.tls}}
			for _, ep := range pr.snap.Endpoints() {
				tg := check.Target{Name: ep.Name, State: ep.State}
				if pr.reverse != nil {
					tg.URL = pr.reverse.Targets[ep.Name]
				}
				if pr.tcp != nil {
					tg.Addr = pr.tcp.Addrs[ep.Name]
				}
				cs.targets = append(cs.targets, tg)
			}
			rt.checks = append(rt.checks, cs)
		}
	}
	for _, l := range cfg.Listeners {
		lr := &listenerRuntime{}
		switch l.Kind {
		case "http":
			if lr.table, err = s.buildTable(l, rt); err != nil {
				return nil, err
			}
			if l.TLS != nil {
				cert, err := tls.LoadX509KeyPair(l.TLS.Cert, l.TLS.Key)
				if err != nil {
					return nil, fmt.Errorf("listeners.%s.tls: %w", l.Name, err)
				}
				lr.tls = &cert
			}
		case "forward":
			if lr.forward, err = s.buildForward(l, rt); err != nil {
				return nil, err
			}
		case "tcp":
			lr.tcp = rt.pools[l.Pool].tcp
		}
		rt.listeners[l.Name] = lr
	}
	return rt, nil
}

// buildPool builds one pool's runtime from its home, if it has one. kind
// is the kind of listener that uses it.
func (s *Server) buildPool(pc config.Pool, kind string) (*poolRuntime, error) {
	pr := &poolRuntime{home: s.homes[pc.Name], newRoutes: map[routeKey]*forward.Route{}}
	h := pr.home
	if h == nil {
		h = &home{balance: balance.NewPool(pc.Name, balance.Options{Store: s.store(pc.Name)})}
	}
	pr.next = *h
	pr.next.routes = nil // the forward listeners fill it
	params := pc.PolicyParams()
	if key := params.Key(pc.Policy); pr.home == nil || h.policyKey != key {
		pol, err := config.NewPolicy(pc.Policy, params)
		if err != nil {
			return nil, fmt.Errorf("pools.%s: %w", pc.Name, err)
		}
		s.share(pc.Name, pol, params.StickyEntries)
		pr.next.policy, pr.next.policyKey = pol, key
	}
	classes, err := health.NewClassifier(pc.FailStatuses)
	if err != nil {
		return nil, fmt.Errorf("pools.%s.fail_statuses: %w", pc.Name, err)
	}
	retry, err := health.NewClassifier(pc.Retries.Statuses)
	if err != nil {
		return nil, fmt.Errorf("pools.%s.retries.statuses: %w", pc.Name, err)
	}
	if kind == "" {
		kind = "http" // a pool no listener uses is checked as an http one
	}
	var eps []balance.EndpointConfig
	targets, addrs := map[string]*url.URL{}, map[string]string{}
	for _, e := range pc.Endpoints {
		ec := balance.EndpointConfig{Name: e.Name, Weight: e.Weight, Cost: e.Cost, MaxInflight: e.MaxInflight, Backup: e.Backup}
		switch kind {
		case "http":
			u, err := config.ParseBackendURL(e.URL)
			if err != nil {
				return nil, fmt.Errorf("pools.%s.endpoints.%s.url: %w", pc.Name, e.Name, err)
			}
			targets[e.Name], ec.Addr = u, u.String()
		case "forward":
			u, err := forward.ParseRouteURL(e.URL)
			if err != nil {
				return nil, fmt.Errorf("pools.%s.endpoints.%s.url: %w", pc.Name, e.Name, err)
			}
			ec.Addr = secret.URL(u)
		case "tcp":
			if _, _, err := net.SplitHostPort(e.Address); err != nil {
				return nil, fmt.Errorf("pools.%s.endpoints.%s.address: %q is not host:port", pc.Name, e.Name, e.Address)
			}
			addrs[e.Name], ec.Addr = e.Address, e.Address
		}
		eps = append(eps, ec)
	}
	pr.snap, err = h.balance.Build(balance.Config{
		Policy: pr.next.policy, Endpoints: eps, Health: pc.HealthConfig(), Classifier: classes,
		PanicThreshold: pc.Health.PanicThreshold, SlowStart: pc.Health.SlowStart,
		StartDown: pc.Health.WaitFirstCheck && pc.Health.Check != nil,
	})
	if err != nil {
		return nil, fmt.Errorf("pools.%s: %w", pc.Name, err)
	}
	if pr.next.budget == nil || pr.next.budget.Ratio() != pc.Retries.Budget {
		pr.next.budget = proxy.NewBudget(pc.Retries.Budget)
	}
	pr.proxy = &proxy.Pool{
		Name: pc.Name, Snapshot: pr.snap, Attempts: pc.Retries.Attempts, RetryStatuses: retry,
		Budget: pr.next.budget, Total: pc.Timeouts.Total,
	}
	switch kind {
	case "http":
		key := transportKey{connect: pc.Timeouts.Connect, try: pc.Timeouts.Try, read: answerIdle(pc)}
		if pc.TLS != nil {
			if pr.tls, key.tls, err = clientTLS("pools."+pc.Name+".tls", pc.TLS); err != nil {
				return nil, err
			}
		}
		if pr.next.transport == nil || pr.next.transKey != key {
			pr.next.transport, pr.next.transKey, pr.newTrans = reverse.NewTransport(key.connect, key.try, key.read, pr.tls), key, true
		}
		pr.reverse = &reverse.Pool{Pool: pr.proxy, Targets: targets, Transport: pr.next.transport, Key: keyFunc(pc.Key),
			Buffer: buffered(pc)}
		if sc := pc.StickyCookie; sc != nil {
			pr.reverse.Sticky = &reverse.StickyCookie{Name: sc.Name, Secret: []byte(sc.Secret), TTL: sc.TTL}
		}
	case "tcp":
		pr.tcp = &tcp.Pool{Pool: pr.proxy, Addrs: addrs, Connect: pc.Timeouts.Connect}
	}
	return pr, nil
}

// buildTable builds an http listener's routing over the runtime's pools.
func (s *Server) buildTable(l config.Listener, rt *runtime) (*reverse.Table, error) {
	t := &reverse.Table{}
	for _, r := range l.Routes {
		t.Routes = append(t.Routes, reverse.Route{
			Host: r.Match.Host, PathPrefix: r.Match.PathPrefix, Header: r.Match.Header, Cookie: r.Match.Cookie,
			Pool: rt.pools[r.Pool].reverse,
		})
	}
	if l.Pool != "" {
		t.Default = rt.pools[l.Pool].reverse
	}
	trusted, err := config.ParsePrefixes(l.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("listeners.%s.trusted_proxies%w", l.Name, err)
	}
	t.Trusted = trusted
	return t, nil
}

// buildForward builds a forward listener's routes (its guard in each) and
// the transport over its pool.
func (s *Server) buildForward(l config.Listener, rt *runtime) (*forward.Settings, error) {
	pr := rt.pools[l.Pool]
	i := slices.IndexFunc(rt.cfg.Pools, func(p config.Pool) bool { return p.Name == l.Pool })
	pc := rt.cfg.Pools[i]
	ros, err := routeOptions(l, pc)
	if err != nil {
		return nil, err
	}
	var routes []*forward.Route
	for _, ro := range ros {
		key := routeKey{listener: l.Name, name: ro.Name, url: ro.URL, insecure: ro.InsecureSkipVerify,
			allow: strings.Join(l.AllowTargets, ","), connect: ro.Connect, try: ro.Try, read: ro.Read}
		var r *forward.Route
		if pr.home != nil {
			r = pr.home.routes[key] // built from the same settings: taken over
		}
		if r == nil {
			if r, err = forward.NewRoute(ro); err != nil {
				return nil, fmt.Errorf("pools.%s.endpoints.%s.url: %w", pc.Name, ro.Name, err)
			}
			pr.newRoutes[key] = r
			if ro.InsecureSkipVerify {
				s.log.Warn("route accepts any certificate from targets (insecure_skip_verify)", "pool", pc.Name, "route", ro.Name)
			}
		}
		if pr.next.routes == nil {
			pr.next.routes = map[routeKey]*forward.Route{}
		}
		pr.next.routes[key] = r
		routes = append(routes, r)
	}
	opts := forward.Options{}
	if pc.BlockedBody != "" {
		if opts.BlockedBody, err = regexp.Compile(pc.BlockedBody); err != nil {
			return nil, fmt.Errorf("pools.%s.blocked_body: %w", pc.Name, err)
		}
	}
	if pc.Key.TargetHost {
		opts.Key = targetHost
	} else {
		opts.Key = keyFunc(pc.Key)
	}
	users := map[string]string{}
	if l.Auth != nil {
		users = l.Auth.Users
	}
	return &forward.Settings{
		Transport:     forward.NewTransportOnPool(pr.proxy, routes, opts),
		Users:         users,
		ConnectPorts:  l.ConnectPorts,
		TunnelTimeout: pc.Timeouts.Connect + pc.Timeouts.Try,
		Buffer:        buffered(pc),
	}, nil
}

// answerIdle is how long pool pc waits for a byte of an answer's body
// (timeouts.read, a tcp pool's left unset: no default there).
func answerIdle(pc config.Pool) time.Duration {
	if pc.Timeouts.Read > 0 {
		return pc.Timeouts.Read
	}
	return config.DefaultRead
}

// buffered is the most of a request body of no known length pool pc reads
// before its request goes on: 0 when it streams them as they come
// (request_buffering: false).
func buffered(pc config.Pool) int64 {
	switch {
	case pc.RequestBuffering != nil && !*pc.RequestBuffering:
		return 0
	case pc.RequestBufferBytes > 0:
		return pc.RequestBufferBytes
	}
	return config.DefaultRequestBuffer
}

// routeOptions are the routes of forward listener l over pool pc: the
// listener's guard in each, the pool's timeouts.
func routeOptions(l config.Listener, pc config.Pool) ([]forward.RouteOptions, error) {
	allow, err := config.ParsePrefixes(l.AllowTargets)
	if err != nil {
		return nil, fmt.Errorf("listeners.%s.allow_targets%w", l.Name, err)
	}
	guard := &forward.Guard{Allow: allow}
	var out []forward.RouteOptions
	for _, e := range pc.Endpoints {
		out = append(out, forward.RouteOptions{Name: e.Name, URL: e.URL, InsecureSkipVerify: e.InsecureSkipVerify,
			Guard: guard, Connect: pc.Timeouts.Connect, Try: pc.Timeouts.Try, Read: answerIdle(pc)})
	}
	return out, nil
}

// RouteOptions returns the routes of the forward listener over the pool
// named (the first forward listener's pool when pool is ""), as rotor
// serve builds them, and that pool's config: for tools that send traffic
// over a config's routes (rotor bench).
func RouteOptions(cfg *config.File, pool string) ([]forward.RouteOptions, config.Pool, error) {
	for _, l := range cfg.Listeners {
		if l.Kind != "forward" || pool != "" && l.Pool != pool {
			continue
		}
		for _, pc := range cfg.Pools {
			if pc.Name == l.Pool {
				ros, err := routeOptions(l, pc)
				return ros, pc, err
			}
		}
	}
	if pool == "" {
		return nil, config.Pool{}, fmt.Errorf("the config has no forward listener")
	}
	return nil, config.Pool{}, fmt.Errorf("no forward listener uses pool %q", pool)
}

// ForwardTransport builds the runtime of the config at path, as rotor
// serve would, without binding anything, and returns the transport of the
// forward listener over the pool named (the first forward listener's when
// pool is ""): requests sent through it go the way they would through
// rotor serve (policy, retries, budget, backups). close releases the
// runtime. For rotor fetch.
func ForwardTransport(path string, getenv func(string) string, pool string) (_ *forward.Transport, close func(), err error) {
	cfg, err := config.Load(path, getenv)
	if err != nil {
		return nil, nil, err
	}
	s := &Server{path: path, getenv: getenv, log: slog.New(slog.DiscardHandler), homes: map[string]*home{}}
	rt, err := s.build(cfg)
	if err != nil {
		return nil, nil, err
	}
	for _, l := range cfg.Listeners {
		if l.Kind == "forward" && (pool == "" || l.Pool == pool) {
			return rt.listeners[l.Name].forward.Transport, rt.discard, nil
		}
	}
	rt.discard()
	if pool == "" {
		return nil, nil, fmt.Errorf("the config has no forward listener")
	}
	return nil, nil, fmt.Errorf("no forward listener uses pool %q", pool)
}

// targetHost keys a forward request by the host it goes to (for CONNECT,
// the target's host).
func targetHost(r *http.Request) string {
	if r.Method == http.MethodConnect {
		host, _, err := net.SplitHostPort(r.Host)
		if err == nil {
			return host
		}
		return r.Host
	}
	return r.URL.Hostname()
}

// swapIn makes rt the runtime: pools publish their snapshots, homes take
// over what the runtime built, and one atomic store hands it to every
// listener. Then what no runtime uses any more is retired. Called with
// s.mu held.
func (s *Server) swapIn(rt *runtime) {
	old := s.rt.Load()
	homes := make(map[string]*home, len(rt.pools))
	for name, pr := range rt.pools {
		h := pr.home
		if h == nil {
			h = &home{}
		}
		*h = pr.next
		if h.routes == nil {
			h.routes = map[routeKey]*forward.Route{}
		}
		_ = h.balance.Publish(pr.snap)
		pr.home = h
		homes[name] = h
	}
	s.rt.Store(rt)
	s.homes = homes
	for _, li := range s.listeners {
		if lr := rt.listeners[li.cfg.Name]; lr != nil {
			li.rt.Store(lr)
		}
	}
	if old == nil {
		return
	}
	// Retire: transports and routes no home holds any more.
	for name, pr := range old.pools {
		h := homes[name]
		if pr.next.transport != nil && (h == nil || h.transport != pr.next.transport) {
			pr.next.transport.Close()
		}
		for key, r := range pr.next.routes {
			if h == nil || h.routes[key] != r {
				r.Close()
			}
		}
	}
}

// discard gives back what a runtime that will not be swapped in made:
// its snapshots (states only they created are forgotten), transports and
// routes. What it shares with the running runtime is left as it is.
func (rt *runtime) discard() {
	for _, pr := range rt.pools {
		if pr.snap != nil {
			_ = pr.snap.Pool().Discard(pr.snap)
		}
		if pr.newTrans {
			pr.next.transport.Close()
		}
		for _, r := range pr.newRoutes {
			r.Close()
		}
	}
}

// keyFunc returns where a pool finds a request's key.
func keyFunc(k config.Key) reverse.KeyFunc {
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

// sameServer reports why config b differs from a, the one in force, in a
// way a reload cannot apply, or "" when it does not: only the state store
// (every pool keeps the store it was made with). Listeners, the admin
// listener and the log's format all change with a reload.
func sameServer(a, b *config.File) string {
	if !sameState(a.State, b.State) {
		return "state (the store of shared health) changed"
	}
	return ""
}

// newServers says what changed from listener a to b, both at the same
// address, that its servers took when they started: its kind, whether
// it has TLS, and four bounds (net/http's, the short way's and HTTP/2's
// servers read them unlocked while they serve); "" when nothing did,
// and the servers running serve on with b.
func newServers(a, b config.Listener) string {
	var changed []string
	if a.Kind != b.Kind {
		changed = append(changed, fmt.Sprintf("kind (%s to %s)", a.Kind, b.Kind))
	}
	if (a.TLS == nil) != (b.TLS == nil) {
		changed = append(changed, fmt.Sprintf("tls (%v to %v)", a.TLS != nil, b.TLS != nil))
	}
	for _, f := range []struct {
		field    string
		was, now any
	}{
		{"timeouts.read_header", a.Timeouts.ReadHeader, b.Timeouts.ReadHeader},
		{"timeouts.idle", a.Timeouts.Idle, b.Timeouts.Idle},
		{"max_header_bytes", a.MaxHeaderBytes, b.MaxHeaderBytes},
		{"max_concurrent_streams", a.MaxConcurrentStreams, b.MaxConcurrentStreams},
	} {
		if f.was != f.now {
			changed = append(changed, fmt.Sprintf("%s (%v to %v)", f.field, f.was, f.now))
		}
	}
	return strings.Join(changed, ", ")
}
