package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rotor-lb/rotor/admin"
	"github.com/rotor-lb/rotor/config"
)

// maxFound bounds the endpoints one DNS answer may add: the answer comes
// from outside.
const maxFound = 1024

// lookupTimeout bounds one lookup, all its queries included.
const lookupTimeout = 5 * time.Second

// found is what a runtime was built with from DNS: by pool, the endpoints
// the last good answer gave.
type found map[string][]config.Endpoint

// lookup asks DNS for a pool's endpoints: each address (and, for SRV, each
// target's addresses with the record's port) becomes an endpoint named
// host:port, with the spec's fields. An answer with no address is an
// error: the last good set stays.
func lookup(ctx context.Context, ef *config.EndpointsFrom, tcp bool) (eps []config.Endpoint, err error) {
	defer func() {
		// Go's resolver names the system's server even when Dial went to
		// ours: say which was asked.
		var de *net.DNSError
		if ef.Resolver != "" && errors.As(err, &de) {
			de.Server = ef.Resolver
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	r := net.DefaultResolver
	if ef.Resolver != "" {
		addr := ef.Resolver
		r = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}
	}
	var hostports []string
	add := func(ips []net.IP, port int) {
		for _, ip := range ips {
			hostports = append(hostports, net.JoinHostPort(ip.String(), strconv.Itoa(port)))
		}
	}
	switch ef.Type {
	case "A", "AAAA":
		network := "ip4"
		if ef.Type == "AAAA" {
			network = "ip6"
		}
		ips, err := r.LookupIP(ctx, network, ef.DNS)
		if err != nil {
			return nil, err
		}
		add(ips, ef.Port)
	case "SRV":
		_, srvs, err := r.LookupSRV(ctx, "", "", ef.DNS)
		if err != nil {
			return nil, err
		}
		for _, srv := range srvs {
			ips, err := r.LookupIP(ctx, "ip", srv.Target)
			if err != nil {
				return nil, fmt.Errorf("SRV target %s: %w", srv.Target, err)
			}
			add(ips, int(srv.Port))
		}
	}
	slices.Sort(hostports)
	hostports = slices.Compact(hostports)
	if len(hostports) == 0 {
		return nil, errors.New("no address in the answer")
	}
	if len(hostports) > maxFound {
		return nil, fmt.Errorf("%d addresses in the answer, more than the %d a pool takes from DNS", len(hostports), maxFound)
	}
	eps = make([]config.Endpoint, len(hostports))
	for i, hp := range hostports {
		e := config.Endpoint{Name: hp, Weight: ef.Weight, Backup: ef.Backup, Cost: ef.Cost, MaxInflight: ef.MaxInflight}
		if tcp {
			e.Address = hp
		} else {
			e.URL = ef.Scheme + "://" + hp
		}
		eps[i] = e
	}
	return eps, nil
}

// withFound is a pool's config with the endpoints DNS gave it added after
// the listed ones (a name listed wins).
func withFound(pc config.Pool, f found) config.Pool {
	extra := f[pc.Name]
	if len(extra) == 0 {
		return pc
	}
	eps := slices.Clone(pc.Endpoints)
	for _, e := range extra {
		if !slices.ContainsFunc(pc.Endpoints, func(x config.Endpoint) bool { return x.Name == e.Name }) {
			eps = append(eps, e)
		}
	}
	pc.Endpoints = eps
	return pc
}

// discoverer looks a pool's name up every Refresh and, when the answer
// changes, rebuilds the runtime with it, through the reload path.
type discoverer struct {
	pool string
	spec config.EndpointsFrom
	tcp  bool

	mu       sync.Mutex
	addrs    []string  // guarded by mu: the last good answer
	lastOK   time.Time // guarded by mu
	lastErr  string    // guarded by mu
	failures int64     // guarded by mu

	started bool // guarded by the server's mu
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

func newDiscoverer(pool string, spec config.EndpointsFrom, tcp bool) *discoverer {
	return &discoverer{pool: pool, spec: spec, tcp: tcp, stop: make(chan struct{}), done: make(chan struct{})}
}

// resolve looks the name up once and records the result.
func (d *discoverer) resolve(ctx context.Context) ([]config.Endpoint, error) {
	eps, err := lookup(ctx, &d.spec, d.tcp)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.failures++
		d.lastErr = err.Error()
		return nil, err
	}
	d.lastErr, d.lastOK = "", time.Now()
	d.addrs = d.addrs[:0]
	for _, e := range eps {
		d.addrs = append(d.addrs, e.Name)
	}
	return eps, nil
}

// status is the discoverer's part of /status.
func (d *discoverer) status() *admin.DNSStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	return &admin.DNSStatus{Name: d.spec.DNS, Type: d.spec.Type, Addresses: slices.Clone(d.addrs),
		LastOK: d.lastOK, Error: d.lastErr, Failures: d.failures}
}

// halt tells d to stop, without waiting: its watch may be waiting for
// the server's lock, which the caller may hold. It gives up on its own
// once it sees it is no longer the pool's discoverer.
func (d *discoverer) halt() { d.once.Do(func() { close(d.stop) }) }

// wait waits until a started d has stopped. Call it without the lock.
func (d *discoverer) wait() {
	if d.started {
		<-d.done
	}
}

// looked is a new discoverer and its first answer, found before the
// server's lock was taken.
type looked struct {
	d   *discoverer
	eps []config.Endpoint
	err error
}

// lookAhead looks up, without holding the server's lock, the pools of cfg
// whose DNS spec the running config does not have, so that a reload
// waiting on DNS keeps no other reload, drain or shutdown waiting. Nothing
// is started: discover takes the answers it can use.
func (s *Server) lookAhead(cfg *config.File) map[string]looked {
	s.mu.Lock()
	running := make(map[string]config.EndpointsFrom, len(s.discoverers))
	for name, d := range s.discoverers {
		running[name] = d.spec
	}
	s.mu.Unlock()
	var ahead map[string]looked
	for _, pc := range cfg.Pools {
		if pc.EndpointsFrom == nil {
			continue
		}
		if spec, ok := running[pc.Name]; ok && spec == *pc.EndpointsFrom {
			continue
		}
		if ahead == nil {
			ahead = map[string]looked{}
		}
		ahead[pc.Name] = lookNew(cfg, pc)
	}
	return ahead
}

// lookNew makes pool pc's discoverer and looks its name up once.
func lookNew(cfg *config.File, pc config.Pool) looked {
	d := newDiscoverer(pc.Name, *pc.EndpointsFrom, kindOf(cfg, pc.Name) == "tcp")
	eps, err := d.resolve(context.Background())
	return looked{d, eps, err}
}

// discover resolves, before a build, every pool of cfg that takes its
// endpoints from DNS: a pool whose spec is unchanged keeps its discoverer
// and last answer; a new or changed one takes its answer from ahead
// (lookAhead's) or is looked up now (a failure leaves it with the listed
// endpoints only, and says so). It returns the answers to build with and
// the discoverers to keep; nothing running changes until commitDiscovery.
func (s *Server) discover(cfg *config.File, ahead map[string]looked) (found, map[string]*discoverer) {
	f := found{}
	ds := map[string]*discoverer{}
	var old found
	if rt := s.rt.Load(); rt != nil {
		old = rt.found
	}
	for _, pc := range cfg.Pools {
		if pc.EndpointsFrom == nil {
			continue
		}
		if d := s.discoverers[pc.Name]; d != nil && d.spec == *pc.EndpointsFrom {
			ds[pc.Name], f[pc.Name] = d, old[pc.Name]
			continue
		}
		l, ok := ahead[pc.Name]
		if !ok || l.d.spec != *pc.EndpointsFrom {
			l = lookNew(cfg, pc) // another reload changed it meanwhile
		}
		d, eps, err := l.d, l.eps, l.err
		if err != nil {
			s.log.Warn("dns: no endpoints found; the pool has its listed ones only until an answer comes", "pool", pc.Name, "name", d.spec.DNS, "error", err)
		}
		ds[pc.Name], f[pc.Name] = d, eps
	}
	return f, ds
}

// commitDiscovery keeps ds once the runtime built with them is swapped
// in: discoverers no longer wanted stop, new ones start (when the server
// runs). Called with mu.
func (s *Server) commitDiscovery(ds map[string]*discoverer) {
	for name, d := range s.discoverers {
		if ds[name] != d {
			d.halt()
		}
	}
	s.discoverers = ds
	if s.started {
		s.startDiscovery()
	}
}

// startDiscovery runs the discoverers not yet running. Called with mu.
func (s *Server) startDiscovery() {
	for _, d := range s.discoverers {
		if !d.started {
			d.started = true
			go s.watch(d)
		}
	}
}

// stopDiscovery stops every discoverer and returns them, for the caller
// to wait on once it has let go of mu. Called with mu.
func (s *Server) stopDiscovery() []*discoverer {
	var out []*discoverer
	for _, d := range s.discoverers {
		d.halt()
		out = append(out, d)
	}
	s.discoverers = nil
	return out
}

// watch looks d's name up every Refresh until d halts; an answer that
// differs from the one the runtime was built with rebuilds it.
func (s *Server) watch(d *discoverer) {
	defer close(d.done)
	t := time.NewTicker(d.spec.Refresh)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-d.stop
		cancel()
	}()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
		}
		eps, err := d.resolve(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("dns: lookup failed; keeping the last good endpoints", "pool", d.pool, "name", d.spec.DNS, "error", err)
			}
			continue
		}
		s.rediscovered(d, eps)
	}
}

// rediscovered rebuilds the runtime when d's new answer differs from the
// one in force: endpoints that stay keep their state, new ones warm up,
// removed ones drain, as in a reload.
func (s *Server) rediscovered(d *discoverer, eps []config.Endpoint) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rt := s.rt.Load()
	if s.stopping || s.discoverers[d.pool] != d || slices.Equal(rt.found[d.pool], eps) {
		return
	}
	next := maps.Clone(rt.found)
	if next == nil {
		next = found{}
	}
	next[d.pool] = eps
	nrt, err := s.buildWith(rt.cfg, next, s.discoverers)
	if err != nil {
		s.log.Error("dns: the new endpoints do not build; keeping the running ones", "pool", d.pool, "error", err)
		return
	}
	s.swapIn(nrt)
	s.startChecks(nrt)
	added, removed := diffNames(rt.found[d.pool], eps)
	s.log.Info("dns: endpoints changed", "pool", d.pool, "name", d.spec.DNS,
		"added", strings.Join(added, ","), "removed", strings.Join(removed, ","))
}

func diffNames(before, after []config.Endpoint) (added, removed []string) {
	in := func(list []config.Endpoint, name string) bool {
		return slices.ContainsFunc(list, func(e config.Endpoint) bool { return e.Name == name })
	}
	for _, e := range after {
		if !in(before, e.Name) {
			added = append(added, e.Name)
		}
	}
	for _, e := range before {
		if !in(after, e.Name) {
			removed = append(removed, e.Name)
		}
	}
	return added, removed
}

// kindOf is the kind of listener that uses a pool ("" when none does).
func kindOf(cfg *config.File, pool string) string {
	for _, l := range cfg.Listeners {
		if l.Pool == pool || slices.ContainsFunc(l.Routes, func(r config.Route) bool { return r.Pool == pool }) {
			return l.Kind
		}
	}
	return ""
}
