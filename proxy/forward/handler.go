package forward

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/internal/secret"
	"github.com/rotor-lb/rotor/proxy"
	"github.com/rotor-lb/rotor/proxy/h1"
)

// Settings are a forward-proxy listener's rules, swapped whole on reload.
type Settings struct {
	Transport *Transport
	// Users are the clients' Basic credentials, user -> password; empty
	// means no authentication.
	Users map[string]string
	// ConnectPorts are the ports CONNECT may reach (443 by default).
	ConnectPorts []int
	// TunnelTimeout bounds establishing a CONNECT tunnel over a route
	// (10s by default).
	TunnelTimeout time.Duration
	// Buffer is the most of a request body of no known length read
	// before its request goes on (h1.ReadAhead): 0 sends every such body
	// as it comes.
	Buffer int64
}

// Handler is a forward proxy: clients send it absolute-URI requests and
// CONNECT tunnels; it sends them over the route the pool picks.
type Handler struct {
	name     string
	settings func() *Settings
	log      *slog.Logger
	obs      proxy.Observer
	conns    *proxy.Conns
}

// NewHandler returns a forward-proxy handler for the listener name;
// settings gives the rules in force (a reload swaps them). CONNECT tunnels
// are tracked in o.Conns.
func NewHandler(name string, settings func() *Settings, o proxy.Options) *Handler {
	o = o.Normalize()
	return &Handler{name: name, settings: settings, log: o.Log, obs: o.Observer, conns: o.Conns}
}

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
	s := h.settings()
	record := &proxy.Record{
		Listener: h.name, Kind: proxy.KindForward, Method: r.Method, Host: r.Host, Proto: r.Proto, Client: r.RemoteAddr,
		Start: h1.Began(r, time.Now()), Pool: s.Transport.pool.Name,
	}
	if r.Method == http.MethodConnect {
		record.Kind = proxy.KindConnect
	} else {
		record.Path = r.URL.Path
	}
	rec := &counter{ResponseWriter: w}
	var release func() // a tunnel's drain session, ended once it is recorded
	finish := func() {
		record.Duration = time.Since(record.Start)
		if record.Kind != proxy.KindConnect || record.Status != http.StatusOK {
			record.BytesOut += rec.n
		}
		h.obs.Served(record)
		if release != nil {
			release()
		}
	}
	relayed := false // a tunnel is recorded when its relay is over
	defer func() {
		if !relayed {
			finish()
		}
	}()
	if !h.authorized(s, r) {
		rec.Header().Set("Proxy-Authenticate", `Basic realm="rotor"`)
		h.refuse(rec, record, http.StatusProxyAuthRequired, "auth", "proxy authentication required")
		return
	}
	if r.Method == http.MethodConnect {
		var relay func(end func())
		release, relay = h.connect(s, rec, r, record)
		if relay != nil {
			// Relayed from here on without this goroutine; nothing of
			// the server's connection is held meanwhile.
			relayed, rec.ResponseWriter = true, nil
			relay(finish)
		}
		return
	}
	if !r.URL.IsAbs() || r.URL.Host == "" {
		h.refuse(rec, record, http.StatusBadRequest, "bad_request", "a forward proxy takes absolute-URI requests (http://host/path) or CONNECT")
		return
	}
	// Shallow: nothing on the way changes the request, and its header is
	// new (h1.Outgoing), its values shared with the client's.
	out := r.WithContext(r.Context())
	out.RequestURI = ""
	out.Header = h1.Outgoing(r.Header, nil, nil)
	var body *proxy.Body
	if r.ContentLength == 0 {
		out.Body = nil
	} else {
		body = proxy.NewBody(r.Body)
		out.Body = body
		defer body.Close()
	}
	var resp *http.Response
	var trip Trip
	err := h1.ReadAhead(out, body, s.Buffer)
	if err == nil {
		resp, trip, err = s.Transport.roundTrip(out, body)
	} else {
		trip.Reason = proxy.ClientReason(err) // nothing was picked
	}
	defer trip.held.End() // in flight until the answer has been passed on
	record.Endpoint, record.Attempts = trip.Route, trip.Attempts
	if body != nil {
		record.BytesIn = body.Len()
	}
	if err != nil {
		status := h.fail(r, trip, err, body != nil && body.Err() != nil)
		if body != nil && body.Err() != nil && status != proxy.StatusClientClosed {
			// The client's body broke the request: its fault, said as such.
			status = proxy.ClientStatus(body.Err())
			rec.Header().Set("Connection", "close")
		}
		record.Status, record.Reason = status, trip.Reason
		if status == proxy.StatusClientClosed {
			h1.AbortGone(r) // recorded by the deferred finish as it unwinds
			return
		}
		http.Error(rec, http.StatusText(status), status)
		return
	}
	defer resp.Body.Close()
	h1.RemoveHopByHopOf(resp)
	h1.PassAnswer(rec, resp)
	rec.WriteHeader(resp.StatusCode)
	record.Status = resp.StatusCode
	rerr, werr := proxy.CopyAnswer(flushWriter{rec}, resp.Body)
	if rerr == nil && werr == nil {
		return
	}
	record.Reason = proxy.CutReason(rerr)
	if rerr != nil {
		h.log.Debug("answer cut", "listener", h.name, "host", r.URL.Hostname(), "error", secret.Text(rerr.Error()))
	}
	// The head has gone: the client's connection is aborted (recorded on
	// the way out), so that a cut body, chunked, does not end with a last
	// chunk as if whole. Only a server recovers the abort.
	if r.Context().Value(http.ServerContextKey) != nil {
		panic(http.ErrAbortHandler)
	}
}

// refuse answers a request rotor will not carry, with the reason recorded.
func (h *Handler) refuse(w http.ResponseWriter, record *proxy.Record, status int, reason, msg string) {
	record.Status, record.Reason = status, reason
	h.log.Debug("refused", "listener", h.name, "client", record.Client, "host", record.Host, "reason", reason)
	http.Error(w, msg, status)
}

// fail logs a failed request and returns the status for it. One the
// client's body failed (clients) is logged at debug, as the reverse
// proxy logs it: the client's fault, nothing an operator can mend.
func (h *Handler) fail(r *http.Request, trip Trip, err error, clients bool) int {
	if errors.Is(err, ErrForbiddenTarget) {
		h.log.Warn("target refused", "listener", h.name, "host", r.URL.Hostname(), "error", err)
		return http.StatusForbidden
	}
	kind := proxy.Classify(err, r.Context())
	status := proxy.Status(err, kind)
	switch {
	case clients:
		h.log.Debug("bad request body", "listener", h.name, "host", r.URL.Hostname(), "error", secret.Text(err.Error()))
	case status != proxy.StatusClientClosed:
		h.log.Warn("forward failed", "listener", h.name, "route", trip.Route, "host", r.URL.Hostname(), "status", status, "error", secret.Text(err.Error()))
	}
	return status
}

// connect opens a tunnel to the CONNECT target over the route the pool
// picks, trying another route when establishing it fails. Its outcome is
// the time to establish the tunnel (dial, and the route's handshake); the
// route counts the tunnel in flight until it closes. It returns what ends
// the tunnel's drain session (nil when there was none), and, once the
// tunnel is established, what relays it (proxy.SpliceThen) and calls end
// when it is over.
func (h *Handler) connect(s *Settings, w *counter, r *http.Request, record *proxy.Record) (release func(), relay func(end func())) {
	host, portStr, err := net.SplitHostPort(r.Host)
	port, perr := strconv.Atoi(portStr)
	if err != nil || perr != nil {
		h.refuse(w, record, http.StatusBadRequest, "bad_request", "CONNECT wants host:port")
		return
	}
	ports := s.ConnectPorts
	if len(ports) == 0 {
		ports = []int{443}
	}
	if !slices.Contains(ports, port) {
		h.refuse(w, record, http.StatusForbidden, "port_forbidden", "CONNECT to this port is not allowed")
		return
	}
	t := s.Transport
	timeout := s.TunnelTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	key := ""
	if t.key != nil {
		key = t.key(r)
	}
	f := t.pool.Start(proxy.Request{Key: key, Idempotent: true, Hold: true})
	defer func() {
		record.Attempts = f.Attempts()
		if relay == nil {
			f.End()
		}
	}()
	// refuseTarget ends a try that the target, not the route, stopped:
	// 403 for an address that is not allowed, 502 for a name that did not
	// resolve (so could not be checked, so is not carried).
	refuseTarget := func(err error, forbidden bool) {
		f.Done(proxy.Result{Outcome: health.Outcome{Err: health.Local}})
		if forbidden {
			h.log.Warn("target refused", "listener", h.name, "host", host, "error", err)
			h.refuse(w, record, http.StatusForbidden, "target_forbidden", "target not allowed")
			return
		}
		h.log.Warn("target not resolved", "listener", h.name, "host", host, "error", err)
		h.refuse(w, record, http.StatusBadGateway, "resolve", http.StatusText(http.StatusBadGateway))
	}
	var conn net.Conn
	for {
		ep, err := f.Next()
		if err != nil {
			h.log.Warn("tunnel failed", "listener", h.name, "target", r.Host, "error", err)
			w.Header().Set("Connection", "close")
			h.refuse(w, record, proxy.StatusServiceUnavailable, proxy.Reason(err, health.NoError), http.StatusText(proxy.StatusServiceUnavailable))
			return
		}
		record.Endpoint = ep.Name
		route := t.routes[ep.Name]
		if err := route.CheckTarget(r.Context(), host, true); err != nil {
			refuseTarget(err, errors.Is(err, ErrForbiddenTarget))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		start := time.Now()
		conn, err = route.DialTunnel(ctx, r.Host)
		cancel()
		o := health.Outcome{Err: proxy.Classify(err, r.Context()), Latency: time.Since(start)}
		var se *StatusError
		switch {
		case err == nil:
			o.Status = http.StatusOK
		case errors.As(err, &se):
			o = health.Outcome{Status: se.Status, Latency: o.Latency}
		case errors.Is(err, ErrForbiddenTarget), isResolveError(err):
			refuseTarget(err, errors.Is(err, ErrForbiddenTarget))
			return
		}
		retry := f.Done(proxy.Result{Outcome: o, Unsent: true})
		if t.onOutcome != nil {
			t.onOutcome(ep.Name, o, f.Verdict())
		}
		if err == nil {
			break
		}
		if !retry {
			status := proxy.Status(err, o.Err)
			if o.Err == health.Canceled {
				record.Status, record.Reason = status, "client_gone"
				return
			}
			h.log.Warn("tunnel failed", "listener", h.name, "route", ep.Name, "target", r.Host, "error", secret.Text(err.Error()))
			h.refuse(w, record, status, proxy.Reason(err, o.Err), http.StatusText(status))
			return
		}
	}
	client, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		conn.Close()
		record.Status, record.Reason = http.StatusInternalServerError, "local"
		return
	}
	sess, ok := h.conns.Add(client, conn)
	release = sess.Done
	closeBoth := func() {
		client.Close()
		conn.Close()
	}
	if !ok {
		record.Status, record.Reason = proxy.StatusServiceUnavailable, "shutting_down"
		_, _ = brw.WriteString("HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n\r\n")
		_ = brw.Flush()
		closeBoth()
		return
	}
	record.Status = http.StatusOK
	_, _ = brw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
	_ = brw.Flush()
	// What the client sent behind its CONNECT, read with it, goes first;
	// the rest is the sockets' own, which the relay loop can take.
	if n := brw.Reader.Buffered(); n > 0 {
		early, _ := brw.Reader.Peek(n)
		m, err := conn.Write(early)
		record.BytesIn += int64(m)
		if err != nil {
			closeBoth()
			return
		}
	}
	return release, func(end func()) {
		proxy.SpliceThen(client, conn, sess, func(in, out int64) {
			closeBoth()
			record.BytesIn += in
			record.BytesOut = out
			if sess.Idled() {
				record.Reason = proxy.ReasonIdle
			}
			f.End()
			end()
		})
	}
}

// isResolveError reports whether err is a name that did not resolve: the
// target's fault, or the resolver's, never a route's.
func isResolveError(err error) bool {
	var dnsErr *net.DNSError
	return errors.As(err, &dnsErr)
}

// counter notes the bytes of a response written through it. Unwrap lets
// http.ResponseController reach the connection.
type counter struct {
	http.ResponseWriter
	n int64
}

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *counter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// Window passes the client's writer's on (proxy.Framer).
func (c *counter) Window(b []byte) []byte { return proxy.WindowOf(c.ResponseWriter, b) }

// flushWriter flushes after each write, so streams reach the client.
type flushWriter struct{ w *counter }

// Window passes the counter's on (proxy.Framer).
func (f flushWriter) Window(b []byte) []byte { return f.w.Window(b) }

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if fl, ok := f.w.ResponseWriter.(http.Flusher); ok {
		fl.Flush()
	}
	return n, err
}
