// Package server runs `rotor serve`: it turns a config file into
// listeners (HTTP reverse proxy, TCP proxy), pools and health checks, and
// an admin listener; reloads on SIGHUP or POST /admin/reload without losing
// endpoint health; and on SIGTERM stops accepting, lets requests and
// connections in flight finish up to a deadline, and exits.
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
	"sync"
	"syscall"
	"time"

	"github.com/rotor-lb/rotor/admin"
	"github.com/rotor-lb/rotor/check"
	"github.com/rotor-lb/rotor/config"
	"github.com/rotor-lb/rotor/proxy"
	"github.com/rotor-lb/rotor/proxy/forward"
	"github.com/rotor-lb/rotor/proxy/reverse"
	"github.com/rotor-lb/rotor/proxy/tcp"
)

// Server is one running rotor.
type Server struct {
	path   string
	getenv func(string) string
	log    *slog.Logger
	level  *slog.LevelVar

	mu       sync.Mutex // serialises reloads and shutdown
	cur      *built
	state    map[string]*poolState // by pool name
	checkers []*check.Checker
	reload   admin.ReloadStatus
	metrics  *admin.Metrics
	handlers map[string]*reverse.Handler
	forwards map[string]*forward.Handler
	https    map[string]*http.Server
	tcps     map[string]*tcp.Proxy
	admin    *http.Server
	addrs    map[string]net.Addr // listener name -> bound address
	serveErr chan error
}

// New loads the config at path and builds the server without binding
// anything. Logs go to logOut.
func New(path string, getenv func(string) string, logOut io.Writer) (*Server, error) {
	cfg, err := config.Load(path, getenv)
	if err != nil {
		return nil, err
	}
	s := &Server{
		path: path, getenv: getenv, level: new(slog.LevelVar), state: map[string]*poolState{},
		handlers: map[string]*reverse.Handler{}, forwards: map[string]*forward.Handler{}, https: map[string]*http.Server{}, tcps: map[string]*tcp.Proxy{},
		addrs: map[string]net.Addr{}, serveErr: make(chan error, 8),
	}
	s.setLog(cfg.Log, logOut)
	s.metrics = admin.NewMetrics(s.Pools)
	s.metrics.TCPBytes = s.tcpBytes
	b, err := s.build(cfg)
	if err != nil {
		return nil, err
	}
	s.cur = b
	s.reload = admin.ReloadStatus{Generation: 1, At: time.Now()}
	return s, nil
}

func (s *Server) setLog(l config.Log, out io.Writer) {
	_ = s.level.UnmarshalText([]byte(l.Level))
	opts := &slog.HandlerOptions{Level: s.level}
	if l.Format == "json" {
		s.log = slog.New(slog.NewJSONHandler(out, opts))
	} else {
		s.log = slog.New(slog.NewTextHandler(out, opts))
	}
}

func (s *Server) now() time.Time { return time.Now() }

// Log returns the server's logger.
func (s *Server) Log() *slog.Logger { return s.log }

// Addr returns the address a listener is bound to ("admin" for the admin
// listener); nil before Start.
func (s *Server) Addr(name string) net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addrs[name]
}

// Pools returns the admin's view of the pools.
func (s *Server) Pools() []admin.PoolView {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur.views
}

// tcpBytes reads the bytes each tcp listener has relayed.
func (s *Server) tcpBytes() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int64, len(s.tcps))
	for name, p := range s.tcps {
		out[name] = p.Bytes.Load()
	}
	return out
}

// ReloadStatus says how the last reload went.
func (s *Server) ReloadStatus() admin.ReloadStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reload
}

// Start binds every listener and starts serving and checking.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cfg := s.cur.cfg
	var bound []net.Listener
	fail := func(err error) error {
		for _, ln := range bound {
			ln.Close()
		}
		return err
	}
	lns := map[string]net.Listener{}
	for _, l := range cfg.Listeners {
		ln, err := net.Listen("tcp", l.Listen)
		if err != nil {
			return fail(fmt.Errorf("listeners.%s.listen: %w", l.Name, err))
		}
		bound = append(bound, ln)
		lns[l.Name] = ln
		s.addrs[l.Name] = ln.Addr()
	}
	var adminLn net.Listener
	if cfg.Admin.Listen != "off" {
		ln, err := net.Listen("tcp", cfg.Admin.Listen)
		if err != nil {
			return fail(fmt.Errorf("admin.listen: %w", err))
		}
		adminLn = ln
		s.addrs["admin"] = ln.Addr()
	}
	for _, l := range cfg.Listeners {
		ln := lns[l.Name]
		switch l.Kind {
		case "http":
			h := reverse.NewHandler(l.Name, s.cur.tables[l.Name], s.log, cfg.Log.Access, s.metrics)
			srv := s.httpServer(l, h)
			s.handlers[l.Name], s.https[l.Name] = h, srv
			if l.TLS != nil {
				cert, err := tls.LoadX509KeyPair(l.TLS.Cert, l.TLS.Key)
				if err != nil {
					return fail(fmt.Errorf("listeners.%s.tls: %w", l.Name, err))
				}
				srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
				// ServeTLS, not Serve on a TLS listener: it is what sets
				// up HTTP/2 for clients.
				go s.serve(l.Name, func() error { return srv.ServeTLS(ln, "", "") })
			} else {
				go s.serve(l.Name, func() error { return srv.Serve(ln) })
			}
		case "forward":
			h := forward.NewHandler(l.Name, s.cur.forwards[l.Name], s.log, s.metrics)
			srv := s.httpServer(l, h)
			s.forwards[l.Name], s.https[l.Name] = h, srv
			go s.serve(l.Name, func() error { return srv.Serve(ln) })
		case "tcp":
			p := tcp.New(l.Name, s.cur.pools[l.Pool], s.log, s.metrics)
			s.tcps[l.Name] = p
			go s.serve(l.Name, func() error { return p.Serve(ln) })
		}
		s.log.Info("listening", "listener", l.Name, "kind", l.Kind, "addr", ln.Addr().String())
	}
	if adminLn != nil {
		s.admin = &http.Server{Handler: admin.Handler(s, s.metrics), ReadHeaderTimeout: 10 * time.Second}
		go s.serve("admin", func() error { return s.admin.Serve(adminLn) })
		s.log.Info("admin listening", "addr", adminLn.Addr().String())
	}
	s.startChecks()
	return nil
}

// httpServer is the http.Server for an http or forward listener, with
// its timeouts and header limit.
func (s *Server) httpServer(l config.Listener, h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.Timeouts.ReadHeader,
		IdleTimeout:       l.Timeouts.Idle,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
}

func (s *Server) serve(name string, f func() error) {
	if err := f(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.log.Error("listener stopped", "listener", name, "error", err)
		s.serveErr <- fmt.Errorf("listener %s: %w", name, err)
	}
}

// startChecks starts the current config's health checks. Called with mu.
func (s *Server) startChecks() {
	for _, c := range s.checkers {
		c.Stop()
	}
	s.checkers = nil
	for _, cs := range s.cur.checks {
		s.checkers = append(s.checkers, check.Start(cs.spec, cs.targets, s.log.With("pool", cs.pool)))
	}
}

// Reload loads the config file again. A config that does not load,
// validate or build is refused and the running one keeps serving; the
// error is logged and kept for the admin API. Endpoint health, in-flight
// counts and breakers carry over for endpoints that remain.
func (s *Server) Reload() error {
	err := s.reloadOnce()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.reload.Error = err.Error()
		s.log.Error("reload refused; the previous config keeps serving", "error", err)
		return err
	}
	return nil
}

func (s *Server) reloadOnce() error {
	cfg, err := config.Load(s.path, s.getenv)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if why := sameListeners(s.cur.cfg, cfg); why != "" {
		return fmt.Errorf("%s: %s; restart rotor to apply it", s.path, why)
	}
	b, err := s.build(cfg)
	if err != nil {
		return err
	}
	s.cur = b
	for _, l := range cfg.Listeners {
		switch l.Kind {
		case "http":
			if h := s.handlers[l.Name]; h != nil {
				h.SetTable(b.tables[l.Name])
			}
		case "tcp":
			if p := s.tcps[l.Name]; p != nil {
				p.SetPool(b.pools[l.Pool])
			}
		case "forward":
			if h := s.forwards[l.Name]; h != nil {
				h.SetSettings(b.forwards[l.Name])
			}
		}
	}
	s.level.Set(levelOf(cfg.Log.Level))
	s.startChecks()
	s.reload = admin.ReloadStatus{Generation: s.reload.Generation + 1, At: time.Now()}
	s.log.Info("reloaded", "generation", s.reload.Generation)
	return nil
}

func levelOf(s string) slog.Level {
	var l slog.Level
	_ = l.UnmarshalText([]byte(s))
	return l
}

// Shutdown stops accepting, waits for requests and connections in flight
// up to each listener's shutdown timeout (bounded by ctx), then closes
// what is left and stops the checks.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var wg sync.WaitGroup
	errs := make(chan error, len(s.https)+len(s.tcps)+1)
	for _, l := range s.cur.cfg.Listeners {
		lctx, cancel := context.WithTimeout(ctx, l.Timeouts.Shutdown)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel()
			var err error
			if srv := s.https[l.Name]; srv != nil {
				if err = srv.Shutdown(lctx); err != nil {
					srv.Close()
				}
				if h := s.handlers[l.Name]; h != nil {
					h.CloseIdle()
				}
				if h := s.forwards[l.Name]; h != nil {
					waited := make(chan struct{})
					go func() { h.WaitTunnels(); close(waited) }()
					select {
					case <-waited:
					case <-lctx.Done():
						err = fmt.Errorf("CONNECT tunnels still open: %w", lctx.Err())
					}
				}
			}
			if p := s.tcps[l.Name]; p != nil {
				err = p.Shutdown(lctx)
			}
			if err != nil {
				errs <- fmt.Errorf("listener %s: %w", l.Name, err)
			}
		}()
	}
	wg.Wait()
	if s.admin != nil {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		_ = s.admin.Shutdown(actx)
		cancel()
	}
	for _, c := range s.checkers {
		c.Stop()
	}
	s.checkers = nil
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// Run starts the server and serves until SIGTERM or SIGINT (graceful
// shutdown) or ctx ends; SIGHUP reloads.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Start(); err != nil {
		return err
	}
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
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

var _ proxy.Observer = (*admin.Metrics)(nil)
