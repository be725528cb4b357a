package server

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/rotor-lb/rotor/admin"
	"github.com/rotor-lb/rotor/config"
)

// adminServer is the admin listener's server. Its handler holds the
// admin.token in force: a reload that changes the token swaps it, and the
// connections open already take the new one with their next request.
type adminServer struct {
	http *http.Server
	addr net.Addr
	h    atomic.Pointer[http.Handler]
}

func (a *adminServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*a.h.Load()).ServeHTTP(w, r)
}

// startAdmin serves the admin API on ln, with c's token. Called with mu.
func (s *Server) startAdmin(ln net.Listener, c config.Admin) *adminServer {
	if s.history == nil {
		s.history = admin.NewHistory(s.Pools, historyEvery, historyKeep)
		s.history.Start()
	}
	a := &adminServer{addr: ln.Addr()}
	a.http = &http.Server{Handler: a, ReadHeaderTimeout: adminBounds.head, ReadTimeout: adminBounds.read,
		WriteTimeout: adminBounds.write, IdleTimeout: adminBounds.idle, MaxHeaderBytes: adminBounds.headBytes,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}
	s.setAdmin(a, c)
	go s.serve("admin", nil, func() error { return a.http.Serve(ln) })
	s.log.Info("admin listening", "addr", a.addr.String())
	return a
}

// setAdmin gives a the handler of c. Called with mu.
func (s *Server) setAdmin(a *adminServer, c config.Admin) {
	tcpAddr, _ := a.addr.(*net.TCPAddr)
	opts := admin.Options{Token: c.Token, Loopback: tcpAddr != nil && tcpAddr.IP.IsLoopback(), History: s.history}
	var h http.Handler = admin.Handler(s, s.metrics, opts)
	a.h.Store(&h)
}

// reloadAdmin applies admin section c, the reload's, where it differs
// from was, the one in force: a new token is the handler's; at a new
// address, ln, bound by the reload, the admin API serves anew and the
// old server drains. Called with mu.
func (s *Server) reloadAdmin(was, c config.Admin, ln net.Listener) {
	if was == c {
		return
	}
	old := s.admin
	if ln == nil && c.Listen != "off" {
		s.setAdmin(old, c) // the address is the same: the token changed
		s.log.Info("admin token changed")
		return
	}
	s.admin = nil
	if ln != nil {
		s.admin = s.startAdmin(ln, c)
	}
	if old == nil {
		return
	}
	// What the old server still answers goes by the new token too.
	s.setAdmin(old, c)
	s.log.Info("admin moved: the old address drains", "addr", old.addr.String())
	s.retiring.Add(1)
	go func() {
		defer s.retiring.Done()
		old.stop(context.Background())
	}()
	if s.admin == nil {
		s.history.Stop()
		s.history = nil
	}
}

// adminBounds are what the admin listener's clients get: a request's
// head within 10 s and 64 KiB (its requests carry no body to speak of),
// the whole request within 30 s and its answer too (a client that reads
// none of /metrics holds nothing past it), and a keep-alive connection
// idle for 60 s closed, as a listener's by default (timeouts.idle).
var adminBounds = struct {
	head, read, write, idle time.Duration
	headBytes               int
}{10 * time.Second, 30 * time.Second, 30 * time.Second, config.DefaultIdle, 64 << 10}

// stop lets a's requests in flight finish within adminDrain (and ctx),
// then closes what is left: at shutdown, or once a reload moved it.
func (a *adminServer) stop(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, adminDrain)
	defer cancel()
	if err := a.http.Shutdown(ctx); err != nil {
		_ = a.http.Close()
	}
}

// adminDrain bounds how long an admin server that stops waits for its
// requests in flight.
const adminDrain = time.Second
