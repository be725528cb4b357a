package forward

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/proxy"
)

// Settings are a forward-proxy listener's rules, swapped whole on reload.
type Settings struct {
	Transport *Transport
	// Users are the clients' Basic credentials, user -> password; empty
	// means no authentication.
	Users map[string]string
	// ConnectPorts are the ports CONNECT may reach (443 by default).
	ConnectPorts []int
	// TunnelTimeout bounds dialing a CONNECT target over a route.
	TunnelTimeout time.Duration
}

// Handler is a forward proxy: clients send it absolute-URI requests and
// CONNECT tunnels; it sends them over the route the pool picks.
type Handler struct {
	name     string
	settings atomic.Pointer[Settings]
	log      *slog.Logger
	obs      proxy.Observer
	tunnels  sync.WaitGroup
}

// NewHandler returns a forward-proxy handler for the listener name.
func NewHandler(name string, s *Settings, log *slog.Logger, obs proxy.Observer) *Handler {
	if obs == nil {
		obs = proxy.NopObserver{}
	}
	h := &Handler{name: name, log: log, obs: obs}
	h.settings.Store(s)
	return h
}

// SetSettings swaps the rules (reload).
func (h *Handler) SetSettings(s *Settings) { h.settings.Store(s) }

// WaitTunnels waits for open CONNECT tunnels, which http.Server.Shutdown
// does not track once hijacked.
func (h *Handler) WaitTunnels() { h.tunnels.Wait() }

func (h *Handler) authorized(s *Settings, r *http.Request) bool {
	if len(s.Users) == 0 {
		return true
	}
	auth := r.Header.Get("Proxy-Authorization")
	scheme, cred, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return false
	}
	user, pass, ok := strings.Cut(string(raw), ":")
	want, known := s.Users[user]
	// Compare even for unknown users, so timing does not tell them apart.
	eq := subtle.ConstantTimeCompare([]byte(pass), []byte(want)) == 1
	return ok && known && eq
}

// ServeHTTP proxies one client request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := h.settings.Load()
	start := time.Now()
	if !h.authorized(s, r) {
		w.Header().Set("Proxy-Authenticate", `Basic realm="rotor"`)
		http.Error(w, "proxy authentication required", http.StatusProxyAuthRequired)
		h.obs.Served(h.name, s.Transport.pool.Name(), "", http.StatusProxyAuthRequired, time.Since(start))
		return
	}
	if r.Method == http.MethodConnect {
		h.connect(s, w, r, start)
		return
	}
	if !r.URL.IsAbs() || r.URL.Host == "" {
		http.Error(w, "a forward proxy takes absolute-URI requests (http://host/path) or CONNECT", http.StatusBadRequest)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	removeHopHeaders(out.Header)
	if r.ContentLength == 0 {
		out.Body = nil
	}
	resp, route, err := s.Transport.RoundTripRoute(out)
	if err != nil {
		status := h.fail(r, route, err)
		if status != 499 {
			http.Error(w, http.StatusText(status), status)
		}
		h.obs.Served(h.name, s.Transport.pool.Name(), route, status, time.Since(start))
		return
	}
	defer resp.Body.Close()
	removeHopHeaders(resp.Header)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(flushWriter{w}, resp.Body)
	h.obs.Served(h.name, s.Transport.pool.Name(), route, resp.StatusCode, time.Since(start))
}

// fail logs a failed request and returns the status for it.
func (h *Handler) fail(r *http.Request, route string, err error) int {
	if errors.Is(err, ErrForbiddenTarget) {
		h.log.Warn("target refused", "listener", h.name, "host", r.URL.Hostname(), "error", err)
		return http.StatusForbidden
	}
	kind := proxy.Classify(err, r.Context())
	status := proxy.Status(err, kind)
	h.log.Warn("forward failed", "listener", h.name, "route", route, "host", r.URL.Hostname(), "status", status, "error", redactErr(err))
	return status
}

// connect opens a tunnel to the CONNECT target over a route, retrying on
// another route when the dial fails.
func (h *Handler) connect(s *Settings, w http.ResponseWriter, r *http.Request, start time.Time) {
	host, portStr, err := net.SplitHostPort(r.Host)
	port, perr := strconv.Atoi(portStr)
	if err != nil || perr != nil {
		http.Error(w, "CONNECT wants host:port", http.StatusBadRequest)
		return
	}
	ports := s.ConnectPorts
	if len(ports) == 0 {
		ports = []int{443}
	}
	allowed := false
	for _, p := range ports {
		allowed = allowed || p == port
	}
	if !allowed {
		http.Error(w, "CONNECT to this port is not allowed", http.StatusForbidden)
		return
	}
	t := s.Transport
	if err := t.opts.Guard.CheckHost(r.Context(), host); err != nil {
		status := h.fail(r, "", err)
		http.Error(w, http.StatusText(status), status)
		return
	}
	timeout := s.TunnelTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	var tried []string
	var conn net.Conn
	var pk balance.Pick
	for attempt := 1; attempt <= t.opts.Attempts; attempt++ {
		if pk, err = t.pick("", tried); err != nil {
			break
		}
		route := t.routes[pk.Endpoint.Name]
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		dialStart := time.Now()
		conn, err = route.DialTunnel(ctx, r.Host)
		cancel()
		if err == nil {
			break
		}
		o := health.Outcome{Err: proxy.Classify(err, r.Context()), Latency: time.Since(dialStart)}
		var se *StatusError
		if errors.As(err, &se) {
			o = health.Outcome{Status: se.Status, Latency: time.Since(dialStart)}
		}
		if errors.Is(err, ErrForbiddenTarget) {
			o = health.Outcome{Err: health.Local}
			pk.Done(o)
			http.Error(w, "target not allowed", http.StatusForbidden)
			return
		}
		pk.Done(o)
		tried = append(tried, pk.Endpoint.Name)
	}
	if conn == nil {
		status := http.StatusBadGateway
		if errors.Is(err, balance.ErrNoEndpoint) {
			status = http.StatusServiceUnavailable
		}
		h.log.Warn("tunnel failed", "listener", h.name, "target", r.Host, "error", redactErr(err))
		http.Error(w, http.StatusText(status), status)
		h.obs.Served(h.name, t.pool.Name(), "", status, time.Since(start))
		return
	}
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		conn.Close()
		pk.Done(health.Outcome{Err: health.Local})
		return
	}
	h.tunnels.Add(1)
	defer h.tunnels.Done()
	_, _ = brw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
	_ = brw.Flush()
	var clientSide net.Conn = client
	if brw.Reader.Buffered() > 0 {
		clientSide = &bufferedConn{Conn: client, r: brw.Reader}
	}
	proxy.Splice(clientSide, conn)
	client.Close()
	conn.Close()
	pk.Done(health.Outcome{Status: http.StatusOK, Latency: time.Since(start)})
	h.obs.Served(h.name, t.pool.Name(), pk.Endpoint.Name, http.StatusOK, time.Since(start))
}

// hopHeaders are removed in both directions (RFC 9110, 7.6.1), with
// Proxy-Authorization: the client's credentials are for rotor, never for
// the target.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func removeHopHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// redactErr keeps route credentials out of logged errors.
func redactErr(err error) string {
	if err == nil {
		return ""
	}
	return redactURLs(err.Error())
}

// redactURLs masks user:pass@ in any URL inside s.
func redactURLs(s string) string {
	for _, scheme := range []string{"http://", "https://", "socks5://"} {
		for i := 0; ; {
			j := strings.Index(s[i:], scheme)
			if j < 0 {
				break
			}
			start := i + j + len(scheme)
			end := start + strings.IndexAny(s[start:]+" ", " /\"")
			if at := strings.LastIndex(s[start:end], "@"); at >= 0 {
				s = s[:start] + "xxxxx" + s[start+at:]
				end = start + len("xxxxx") + (end - start - at)
			}
			i = end
		}
	}
	return s
}

// flushWriter flushes after each write, so streams reach the client.
type flushWriter struct{ w http.ResponseWriter }

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if fl, ok := f.w.(http.Flusher); ok {
		fl.Flush()
	}
	return n, err
}
