// Package server runs `rotor serve`: it turns a config file into a
// runtime (pools, routes, transports, routing tables, health checks) and
// listeners (HTTP reverse proxy, forward proxy, TCP proxy) and an admin
// listener. A reload builds a whole new runtime beside the running one and
// swaps it in with one atomic store, or discards it and changes nothing;
// endpoint health carries over by (pool, endpoint name). On SIGTERM it
// stops accepting, lets requests and connections of every kind finish up
// to each listener's shutdown timeout, and exits.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rotor-lb/rotor/admin"
	"github.com/rotor-lb/rotor/check"
	"github.com/rotor-lb/rotor/config"
	"github.com/rotor-lb/rotor/proxy"
	"github.com/rotor-lb/rotor/proxy/forward"
	"github.com/rotor-lb/rotor/proxy/h1"
	"github.com/rotor-lb/rotor/proxy/h2"
	"github.com/rotor-lb/rotor/proxy/reverse"
	"github.com/rotor-lb/rotor/proxy/tcp"
	"github.com/rotor-lb/rotor/shared"
)

// Server is one running rotor.
type Server struct {
	path    string
	getenv  func(string) string
	log     *slog.Logger
	logs    *logs // log.format in force: a reload changes it, as level
	level   *slog.LevelVar
	metrics *admin.Metrics
	shared  *shared.Client // the Redis state store; nil: in memory

	// rt is the runtime every listener serves with; swapped whole.
	rt atomic.Pointer[runtime]

	mu    sync.Mutex       // serialises Start, reloads and shutdown's bookkeeping; never held while draining
	homes map[string]*home // guarded by mu: what outlives runtimes, by pool name
	// discoverers look up the pools whose endpoints come from DNS.
	discoverers map[string]*discoverer // guarded by mu
	listeners   []*listener            // guarded by mu; bound by Start, changed by reloads
	started     bool                   // guarded by mu: Start has bound the listeners
	retiring    sync.WaitGroup         // listeners (and admin servers) a reload removed, draining
	checkers    []*check.Checker       // guarded by mu
	admin       *adminServer           // guarded by mu; nil: admin.listen is off
	history     *admin.History         // guarded by mu; sampled while the admin listener runs
	stopping    bool                   // guarded by mu

	reload atomic.Pointer[admin.ReloadStatus]
	// listenerViews are the bound listeners, as /status shows them; set
	// by Start.
	listenerViews atomic.Pointer[[]admin.ListenerView]
	serveErr      chan error
}

// listener is one bound listener and what serves it.
type listener struct {
	cfg   config.Listener
	addr  net.Addr
	view  *view        // the socket as its servers accept from it
	http  *http.Server // http and forward
	short *h1.Server   // a cleartext http or forward listener's: net/http's server behind it
	tcp   *tcp.Proxy
	conns *proxy.Conns // upgrades, tunnels, tcp connections
	// rt is what it serves with: its part of the runtime in force, or,
	// once a reload removed it, of the last one it was in, which its
	// requests still in flight finish with.
	rt atomic.Pointer[listenerRuntime]
}

// New loads the config at path and builds the server without binding
// anything. Logs go to logOut.
func New(path string, getenv func(string) string, logOut io.Writer) (*Server, error) {
	cfg, err := config.Load(path, getenv)
	if err != nil {
		return nil, err
	}
	s := &Server{path: path, getenv: getenv, level: new(slog.LevelVar), homes: map[string]*home{}, serveErr: make(chan error, 8)}
	s.setLog(cfg.Log, logOut)
	s.metrics = admin.NewMetrics(s.Pools)
	if cfg.State.Store == "redis" {
		if s.shared, err = newShared(cfg.State, s.log); err != nil {
			return nil, err
		}
	}
	s.metrics.WatchState(s.State)
	f, ds := s.discover(cfg, nil)
	rt, err := s.buildWith(cfg, f, ds)
	if err != nil {
		if s.shared != nil {
			s.shared.Close()
		}
		return nil, err
	}
	s.swapIn(rt)
	s.discoverers = ds
	s.reload.Store(&admin.ReloadStatus{Generation: 1, At: time.Now()})
	return s, nil
}

// Check loads the config at path and builds its runtime, without binding
// or starting anything, then discards it: what it accepts, serve starts
// with. It is what `rotor check-config` runs.
func Check(path string, getenv func(string) string) error {
	cfg, err := config.Load(path, getenv)
	if err != nil {
		return err
	}
	s := &Server{path: path, getenv: getenv, log: slog.New(slog.DiscardHandler), homes: map[string]*home{}}
	if cfg.State.Store == "redis" {
		c, err := newShared(cfg.State, s.log)
		if err != nil {
			return err
		}
		c.Close()
	}
	rt, err := s.build(cfg)
	if err != nil {
		return err
	}
	rt.discard()
	return nil
}

func (s *Server) setLog(l config.Log, out io.Writer) {
	_ = s.level.UnmarshalText([]byte(l.Level))
	s.logs = newLogs(out, s.level, l.Format)
	s.log = s.logs.logger()
}

// Log returns the server's logger.
func (s *Server) Log() *slog.Logger { return s.log }

// Addr returns the address a listener is bound to ("admin" for the admin
// listener); nil before Start.
func (s *Server) Addr(name string) net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.listeners {
		if l.cfg.Name == name {
			return l.addr
		}
	}
	if name == "admin" && s.admin != nil {
		return s.admin.addr
	}
	return nil
}

// Pools returns the admin's view of the pools, from the runtime in force.
func (s *Server) Pools() []admin.PoolView { return s.rt.Load().views }

// Listeners returns the bound listeners, for /status. It takes no lock: a
// reload that waits on DNS does not hold /status up.
func (s *Server) Listeners() []admin.ListenerView {
	if v := s.listenerViews.Load(); v != nil {
		return *v
	}
	return nil
}

// The live page's history: a sample every 2 s, the last 5 minutes.
const (
	historyEvery = 2 * time.Second
	historyKeep  = 150
)

// ReloadStatus says how the last reload went.
func (s *Server) ReloadStatus() admin.ReloadStatus { return *s.reload.Load() }

// Served is the observer every listener tells of each request and
// connection: metrics always, and the access log when log.access is on
// in the runtime in force.
func (s *Server) Served(r *proxy.Record) {
	s.metrics.Served(r)
	if s.rt.Load().cfg.Log.Access {
		proxy.AccessLog{Log: s.log}.Served(r)
	}
}

// Start binds every listener and starts serving and checking.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rt := s.rt.Load()
	cfg := rt.cfg
	var bound []net.Listener
	fail := func(err error) error {
		for _, ln := range bound {
			ln.Close()
		}
		return err
	}
	lns := map[string]*net.TCPListener{}
	for _, l := range cfg.Listeners {
		ln, err := net.Listen("tcp", l.Listen)
		if err != nil {
			return fail(fmt.Errorf("listeners.%s.listen: %w", l.Name, err))
		}
		bound = append(bound, ln)
		lns[l.Name] = ln.(*net.TCPListener)
	}
	if slices.ContainsFunc(cfg.Listeners, func(l config.Listener) bool { return l.Kind != "tcp" }) {
		if err := proxy.SpoolReady(); err != nil {
			s.log.Warn("request bodies of no known length cannot be buffered to a file: past 64 KiB they go on chunked", "dir", os.TempDir(), "error", err)
		}
	}
	var adminLn net.Listener
	if cfg.Admin.Listen != "off" {
		ln, err := net.Listen("tcp", cfg.Admin.Listen)
		if err != nil {
			return fail(fmt.Errorf("admin.listen: %w", err))
		}
		adminLn = ln
	}
	for _, l := range cfg.Listeners {
		s.listeners = append(s.listeners, s.startListener(l, newSocket(lns[l.Name]).first(), rt.listeners[l.Name]))
	}
	s.started = true
	s.storeListenerViews()
	if adminLn != nil {
		s.admin = s.startAdmin(adminLn, cfg.Admin)
	}
	s.startChecks(rt)
	s.startDiscovery()
	if s.shared != nil {
		s.shared.Start()
	}
	return nil
}

// startListener serves listener l on ln, its socket bound already, with
// lr, its part of the runtime in force.
func (s *Server) startListener(l config.Listener, ln *view, lr *listenerRuntime) *listener {
	name := l.Name
	li := &listener{cfg: l, addr: ln.Addr(), view: ln, conns: new(proxy.Conns)}
	li.rt.Store(lr)
	li.conns.SetTunnelIdle(l.Timeouts.Tunnel)
	switch l.Kind {
	case "http":
		h := reverse.NewHandler(name, func() *reverse.Table { return li.rt.Load().table },
			proxy.Options{Log: s.log, Observer: s, Conns: li.conns})
		li.http = s.httpServer(l, h)
		if lr.tls != nil {
			// The certificate in force is the runtime's: a reload
			// (after a renewal, say) serves the new one.
			li.http.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12,
				GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
					return li.rt.Load().tls, nil
				}}
			// HTTP/2 is rotor's own server's, offered to clients
			// (ALPN) beside HTTP/1.1, which is the short way's.
			h2Server(l, li.http).Configure(li.http)
			li.short = s.shortServer(l, li.http)
			go s.serve(name, ln, func() error { return li.short.ServeTLS(ln) })
		} else {
			// Without TLS, HTTP/2 with prior knowledge (h2c): the
			// short way hands a connection that opens with its
			// preface to li.http, which hands it to rotor's server.
			h2Server(l, li.http).ConfigureCleartext(li.http)
			s.serveCleartext(li, ln)
		}
	case "forward":
		h := forward.NewHandler(name, func() *forward.Settings { return li.rt.Load().forward },
			proxy.Options{Log: s.log, Observer: s, Conns: li.conns})
		li.http = s.httpServer(l, h)
		s.serveCleartext(li, ln)
	case "tcp":
		li.tcp = tcp.New(name, func() *tcp.Pool { return li.rt.Load().tcp },
			proxy.Options{Log: s.log, Observer: s, Conns: li.conns})
		go s.serve(name, ln, func() error { return li.tcp.Serve(ln) })
	}
	s.log.Info("listening", "listener", name, "kind", l.Kind, "addr", ln.Addr().String())
	return li
}

// storeListenerViews publishes the bound listeners for /status. Called
// with mu.
func (s *Server) storeListenerViews() {
	views := make([]admin.ListenerView, len(s.listeners))
	for i, li := range s.listeners {
		views[i] = admin.ListenerView{Name: li.cfg.Name, Kind: li.cfg.Kind, Addr: li.addr.String()}
	}
	s.listenerViews.Store(&views)
}

// httpServer is the http.Server for an http or forward listener, with
// its timeouts and its limits on heads and bodies.
func (s *Server) httpServer(l config.Listener, h http.Handler) *http.Server {
	kind := proxy.KindHTTP
	if l.Kind == "forward" {
		kind = proxy.KindForward
	}
	lim := &limits{next: h, listener: l.Name, kind: kind, maxHeader: l.MaxHeaderBytes, obs: s}
	lim.setBodies(l.MaxBodyBytes, l.Timeouts.Body)
	return &http.Server{
		Handler:           lim,
		ReadHeaderTimeout: l.Timeouts.ReadHeader,
		IdleTimeout:       l.Timeouts.Idle,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
}

// h2Server is the HTTP/2 server of http listener l, whose http.Server is
// hs: the listener's bounds on streams, heads and time.
func h2Server(l config.Listener, hs *http.Server) *h2.Server {
	return &h2.Server{MaxConcurrentStreams: uint32(l.MaxConcurrentStreams),
		MaxHeaderBytes: l.MaxHeaderBytes, IdleTimeout: l.Timeouts.Idle, ReadHeaderTimeout: l.Timeouts.ReadHeader,
		ErrorLog: hs.ErrorLog}
}

// serveCleartext serves a cleartext http or forward listener: plain
// requests the short way (h1.Server), the rest (bodies, upgrades,
// CONNECT) by li.http, which the short way hands them to.
func (s *Server) serveCleartext(li *listener, ln *view) {
	li.short = s.shortServer(li.cfg, li.http)
	go s.serve(li.cfg.Name, ln, func() error { return li.short.Serve(ln) })
}

// shortServer is the short way's server in front of hs, for listener l:
// the bodies it reads before their handler runs held to the listener's
// limits, as the handler (limits) holds those it reads.
func (s *Server) shortServer(l config.Listener, hs *http.Server) *h1.Server {
	short := h1.NewServer(hs)
	short.Log = s.log.With("listener", l.Name)
	short.SetBodyLimits(l.Timeouts.Body, l.MaxBodyBytes)
	return short
}

// setBodies holds the requests that come from now on to l's bounds on
// bodies (max_body_bytes, timeouts.body), where the listener's handler
// and the short way read them: a reload's.
func (li *listener) setBodies(l config.Listener) {
	if lim, ok := li.http.Handler.(*limits); ok {
		lim.setBodies(l.MaxBodyBytes, l.Timeouts.Body)
	}
	if li.short != nil {
		li.short.SetBodyLimits(l.Timeouts.Body, l.MaxBodyBytes)
	}
}

// serve runs f, the accept loop of a listener's servers on ln (nil: the
// admin listener's), until it ends: with an error, which ends rotor
// (Run), unless the server was shut down or its socket handed over to
// new servers.
func (s *Server) serve(name string, ln *view, f func() error) {
	if err := f(); err != nil && !errors.Is(err, http.ErrServerClosed) && (ln == nil || !ln.handed()) {
		s.log.Error("listener stopped", "listener", name, "error", err)
		s.serveErr <- fmt.Errorf("listener %s: %w", name, err)
	}
}

// startChecks stops the running health checks and starts rt's. Called
// with mu.
func (s *Server) startChecks(rt *runtime) {
	for _, c := range s.checkers {
		c.Stop()
	}
	s.checkers = nil
	for _, cs := range rt.checks {
		s.checkers = append(s.checkers, check.Start(cs.spec, cs.targets, s.log.With("pool", cs.pool)))
	}
}

// Reload loads the config file again and builds a new runtime beside the
// running one. A config that does not load, validate or build is refused
// and the running runtime keeps serving, unchanged; the error is logged
// and kept for the admin API. Endpoint health, in-flight counts and
// breakers carry over for endpoints that remain.
func (s *Server) Reload() error {
	err := s.reloadOnce()
	if err != nil {
		st := *s.reload.Load()
		st.Error = err.Error()
		s.reload.Store(&st)
		s.log.Error("reload refused; the running config keeps serving", "error", err)
	}
	return err
}

func (s *Server) reloadOnce() error {
	cfg, err := config.Load(s.path, s.getenv)
	if err != nil {
		return err
	}
	ahead := s.lookAhead(cfg)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return fmt.Errorf("shutting down")
	}
	if why := sameServer(s.rt.Load().cfg, cfg); why != "" {
		return fmt.Errorf("%s: %s; restart rotor to apply it", s.path, why)
	}
	// A listener new at its address is bound first, aside: an address
	// that cannot be bound refuses the reload, which changes nothing.
	// One at the address of a listener the file no longer has there (one
	// renamed, or two that swap addresses) takes that one's socket
	// instead (taken), which then drains as one removed; so does one
	// kept whose servers must change (below).
	running := map[string]*listener{}
	bound := map[string]*net.TCPListener{}
	taken := map[string]*listener{}
	var adminLn net.Listener // the admin listener's, at a new address
	closeBound := func() {
		for _, ln := range bound {
			ln.Close()
		}
		if adminLn != nil {
			adminLn.Close()
		}
	}
	was := s.rt.Load().cfg
	if s.started {
		if cfg.Admin.Listen != was.Admin.Listen && cfg.Admin.Listen != "off" {
			if adminLn, err = net.Listen("tcp", cfg.Admin.Listen); err != nil {
				return fmt.Errorf("admin.listen: %w", err)
			}
		}
		now := map[string]string{}
		for _, l := range cfg.Listeners {
			now[l.Name] = l.Listen
		}
		freed := map[string]*listener{}
		for _, li := range s.listeners {
			running[li.cfg.Name] = li
			if _, port, _ := net.SplitHostPort(li.cfg.Listen); now[li.cfg.Name] != li.cfg.Listen && port != "0" {
				freed[li.cfg.Listen] = li
			}
		}
		for _, l := range cfg.Listeners {
			if li := running[l.Name]; li != nil && li.cfg.Listen == l.Listen {
				continue
			}
			if li := freed[l.Listen]; li != nil {
				taken[l.Name] = li
				continue
			}
			ln, err := net.Listen("tcp", l.Listen)
			if err != nil {
				closeBound()
				return fmt.Errorf("listeners.%s.listen: %w", l.Name, err)
			}
			bound[l.Name] = ln.(*net.TCPListener)
		}
	}
	f, ds := s.discover(cfg, ahead)
	rt, err := s.buildWith(cfg, f, ds)
	if err != nil {
		closeBound()
		return err
	}
	// The listeners kept (in the file at their address) take the new
	// runtime with the swap; then the new ones start in their places, and
	// the ones no longer in the file (or moved to another address) drain.
	// A listener kept whose servers must change hands its socket to new
	// ones, and drains as one removed.
	next := make([]*listener, len(cfg.Listeners))
	var kept, retired []*listener
	for i, l := range cfg.Listeners {
		if li := running[l.Name]; li != nil && li.cfg.Listen == l.Listen {
			if why := newServers(li.cfg, l); why != "" {
				s.log.Info("listener serves anew at its address: new servers take its socket, the old ones drain", "listener", l.Name, "changed", why)
				taken[l.Name] = li // still running: it drains
				continue
			}
			delete(running, l.Name)
			li.cfg = l
			li.conns.SetTunnelIdle(l.Timeouts.Tunnel)
			if li.http != nil {
				li.setBodies(l)
			}
			next[i] = li
			kept = append(kept, li)
		}
	}
	for _, li := range s.listeners {
		if running[li.cfg.Name] == li {
			retired = append(retired, li)
		}
	}
	s.listeners = kept
	s.swapIn(rt)
	if s.started {
		for i, l := range cfg.Listeners {
			if next[i] != nil {
				continue
			}
			if old := taken[l.Name]; old != nil {
				next[i] = s.startListener(l, old.view.s.handOver(old.view), rt.listeners[l.Name]) // old is retired below
			} else {
				next[i] = s.startListener(l, newSocket(bound[l.Name]).first(), rt.listeners[l.Name])
			}
		}
		s.listeners = next
		for _, li := range retired {
			s.retire(li)
		}
		s.storeListenerViews()
		s.reloadAdmin(was.Admin, cfg.Admin, adminLn)
	}
	s.commitDiscovery(ds)
	s.level.Set(levelOf(cfg.Log.Level))
	s.logs.setFormat(cfg.Log.Format)
	if s.started {
		s.startChecks(rt)
	}
	gen := s.reload.Load().Generation + 1
	s.reload.Store(&admin.ReloadStatus{Generation: gen, At: time.Now()})
	s.log.Info("reloaded", "generation", gen)
	return nil
}

// retire drains li, a listener a reload removed or gave new servers,
// in the background, within its own timeouts.shutdown, as a shutdown
// drains one; Shutdown waits for it too.
func (s *Server) retire(li *listener) {
	what, start := "removed listener", "listener removed: draining"
	if li.view.handed() {
		what, start = "listener's old servers", "listener's old servers: draining"
	}
	s.log.Info(start, "listener", li.cfg.Name, "addr", li.addr.String())
	s.retiring.Add(1)
	go func() {
		defer s.retiring.Done()
		ctx, cancel := context.WithTimeout(context.Background(), li.cfg.Timeouts.Shutdown)
		defer cancel()
		if err := li.drain(ctx); err != nil {
			s.log.Warn(what+": what was still open at its timeouts.shutdown was cut", "listener", li.cfg.Name, "error", err)
			return
		}
		s.log.Info(what+" drained", "listener", li.cfg.Name)
	}()
}

func levelOf(s string) slog.Level {
	var l slog.Level
	_ = l.UnmarshalText([]byte(s))
	return l
}

// Shutdown stops accepting, then waits for everything in flight on every
// listener (requests, upgraded connections, CONNECT tunnels, TCP
// connections) up to the listener's shutdown timeout (bounded by ctx),
// then cuts what is left and stops the checks. No lock the admin API
// needs is held meanwhile: /status and /metrics answer during the drain.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.stopping = true
	listeners, adminSrv, history := s.listeners, s.admin, s.history
	// The drain's bound is the config in force, which a reload may have
	// changed since the listener started.
	bound := map[string]time.Duration{}
	for _, l := range s.rt.Load().cfg.Listeners {
		bound[l.Name] = l.Timeouts.Shutdown
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	errs := make(chan error, len(listeners))
	for _, li := range listeners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lctx, cancel := context.WithTimeout(ctx, bound[li.cfg.Name])
			defer cancel()
			if err := li.drain(lctx); err != nil {
				errs <- fmt.Errorf("listener %s: %w", li.cfg.Name, err)
			}
		}()
	}
	wg.Wait()
	s.retiring.Wait() // listeners a reload removed, each within its own bound
	if adminSrv != nil {
		adminSrv.stop(ctx)
	}
	if history != nil {
		history.Stop()
	}
	s.mu.Lock()
	for _, c := range s.checkers {
		c.Stop()
	}
	s.checkers = nil
	stopped := s.stopDiscovery()
	if s.shared != nil {
		s.shared.Close()
	}
	for _, h := range s.homes {
		if h.transport != nil {
			h.transport.Close()
		}
		for _, r := range h.routes {
			r.Close()
		}
	}
	s.mu.Unlock()
	for _, d := range stopped {
		d.wait()
	}
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// drain stops one listener: no new connections; requests, upgraded
// connections, tunnels and TCP connections finish until ctx is done; then
// the rest are cut.
func (li *listener) drain(ctx context.Context) error {
	if li.tcp != nil {
		return li.tcp.Shutdown(ctx)
	}
	var wg sync.WaitGroup
	var httpErr, connErr error
	wg.Add(2)
	var srv interface {
		Shutdown(context.Context) error
		Close() error
	} = li.http
	if li.short != nil {
		srv = li.short // shuts li.http down too
	}
	go func() {
		defer wg.Done()
		if httpErr = srv.Shutdown(ctx); httpErr != nil {
			srv.Close()
		}
	}()
	go func() {
		defer wg.Done()
		connErr = li.conns.Shutdown(ctx)
	}()
	wg.Wait()
	if connErr != nil {
		return fmt.Errorf("upgraded connections or tunnels still open: %w", connErr)
	}
	return httpErr
}

// Run starts the server and serves until SIGTERM or SIGINT (graceful
// shutdown) or ctx ends; SIGHUP reloads. The signals are taken before
// the listeners start: a SIGHUP sent as soon as the log says rotor
// listens is a reload, where Go's default for it would end the process.
func (s *Server) Run(ctx context.Context) error {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	if err := s.Start(); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return s.shutdown()
		case err := <-s.serveErr:
			_ = s.shutdown()
			return err
		case v := <-sig:
			if v == syscall.SIGHUP {
				s.log.Info("SIGHUP: reloading", "config", s.path)
				_ = s.Reload()
				continue
			}
			s.log.Info("shutting down", "signal", v.String())
			return s.shutdown()
		}
	}
}

func (s *Server) shutdown() error {
	err := s.Shutdown(context.Background())
	if err != nil {
		s.log.Warn("shutdown cut connections still open at the deadline", "error", err)
	} else {
		s.log.Info("stopped")
	}
	return nil
}

var _ proxy.Observer = (*Server)(nil)
