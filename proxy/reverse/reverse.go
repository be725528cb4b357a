// Package reverse is rotor's HTTP reverse proxy: net/http/httputil's
// ReverseProxy with Rewrite, a transport that picks an endpoint per attempt
// and retries on another within a budget, routes matched on host, path,
// header and cookie, trusted X-Forwarded-* handling, signed sticky cookies
// and one mapping of errors to statuses.
package reverse

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/proxy"
)

// Route sends matching requests to a pool. Every condition set must hold.
type Route struct {
	Host       string            // exact, or "*.example.com"; "" matches any
	PathPrefix string            // "/" matches any
	Header     map[string]string // value "*" means present
	Cookie     map[string]string // value "*" means present
	Pool       *proxy.Pool
}

// Table is one listener's routing, swapped whole on reload.
type Table struct {
	Routes []Route
	// Default takes requests no route matched; nil answers 404.
	Default *proxy.Pool
	// Trusted are the peers whose X-Forwarded-* headers are believed.
	Trusted []netip.Prefix
}

// Handler is one HTTP listener's handler.
type Handler struct {
	name   string
	table  atomic.Pointer[Table]
	log    *slog.Logger
	access bool
	obs    proxy.Observer
	rp     *httputil.ReverseProxy
}

type ctxKey struct{}

// reqInfo carries one request's state between ServeHTTP, the transport,
// ModifyResponse and ErrorHandler.
type reqInfo struct {
	pool      *proxy.Pool
	key       string
	pinned    string // from a valid sticky cookie
	setCookie string // endpoint to pin the client to
	endpoint  string // the endpoint that answered
	kind      health.ErrorKind
	secure    bool
}

// NewHandler returns a handler for the listener named name.
func NewHandler(name string, t *Table, log *slog.Logger, access bool, obs proxy.Observer) *Handler {
	if obs == nil {
		obs = proxy.NopObserver{}
	}
	h := &Handler{name: name, log: log, access: access, obs: obs}
	h.table.Store(t)
	h.rp = &httputil.ReverseProxy{
		Rewrite:        h.rewrite,
		Transport:      &retrier{h: h},
		ModifyResponse: h.modifyResponse,
		ErrorHandler:   h.errorHandler,
		BufferPool:     bufferPool{},
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return h
}

// SetTable swaps the routing (reload).
func (h *Handler) SetTable(t *Table) { h.table.Store(t) }

// CloseIdle drops idle backend connections of every pool routed to.
func (h *Handler) CloseIdle() {
	t := h.table.Load()
	for _, r := range t.Routes {
		r.Pool.Transport.CloseIdleConnections()
	}
	if t.Default != nil {
		t.Default.Transport.CloseIdleConnections()
	}
}

func (t *Table) match(r *http.Request) *proxy.Pool {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(host)
	for _, rt := range t.Routes {
		if rt.Host != "" {
			if strings.HasPrefix(rt.Host, "*.") {
				if !strings.HasSuffix(host, rt.Host[1:]) {
					continue
				}
			} else if host != strings.ToLower(rt.Host) {
				continue
			}
		}
		if !strings.HasPrefix(r.URL.Path, rt.PathPrefix) {
			continue
		}
		ok := true
		for name, want := range rt.Header {
			got, present := r.Header[http.CanonicalHeaderKey(name)]
			if !present || want != "*" && (len(got) == 0 || got[0] != want) {
				ok = false
			}
		}
		for name, want := range rt.Cookie {
			c, err := r.Cookie(name)
			if err != nil || want != "*" && c.Value != want {
				ok = false
			}
		}
		if ok {
			return rt.Pool
		}
	}
	return t.Default
}

// ServeHTTP routes the request and proxies it.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	t := h.table.Load()
	pool := t.match(r)
	rec := &recorder{ResponseWriter: w}
	if pool == nil {
		http.Error(rec, "no route for this request", http.StatusNotFound)
		h.done(r, rec, "", "", start)
		return
	}
	info := &reqInfo{pool: pool, secure: r.TLS != nil}
	if pool.Key != nil {
		info.key = pool.Key(r)
	}
	if pool.Sticky != nil {
		info.pinned, _ = pool.Sticky.Endpoint(r, start)
	}
	ctx := context.WithValue(r.Context(), ctxKey{}, info)
	h.rp.ServeHTTP(rec, r.WithContext(ctx))
	h.done(r, rec, pool.Name, info.endpoint, start)
}

func (h *Handler) done(r *http.Request, rec *recorder, pool, endpoint string, start time.Time) {
	d := time.Since(start)
	status := rec.status
	if status == 0 {
		status = 499 // nothing was written: the client went away
	}
	h.obs.Served(h.name, pool, endpoint, status, d)
	if h.access {
		h.log.Info("request", "listener", h.name, "method", r.Method, "host", r.Host, "path", r.URL.Path,
			"status", status, "bytes", rec.bytes, "duration", d, "pool", pool, "endpoint", endpoint,
			"client", r.RemoteAddr)
	}
}

// rewrite sets the forwarding headers. X-Forwarded-For, -Host and -Proto
// from a trusted peer are kept and extended; from anyone else they are
// dropped and set afresh, so a client cannot spoof its address. The
// original Host is passed on, as Caddy does.
func (h *Handler) rewrite(pr *httputil.ProxyRequest) {
	trust := trusted(h.table.Load().Trusted, pr.In.RemoteAddr)
	if v := pr.In.Header.Values("X-Forwarded-For"); trust && len(v) > 0 {
		pr.Out.Header["X-Forwarded-For"] = append([]string(nil), v...)
	}
	pr.SetXForwarded()
	if trust {
		for _, k := range []string{"X-Forwarded-Host", "X-Forwarded-Proto"} {
			if v := pr.In.Header.Get(k); v != "" {
				pr.Out.Header.Set(k, v)
			}
		}
	}
	pr.Out.Host = pr.In.Host
}

func trusted(prefixes []netip.Prefix, remote string) bool {
	if len(prefixes) == 0 {
		return false
	}
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	addr = addr.Unmap()
	for _, p := range prefixes {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

func (h *Handler) modifyResponse(resp *http.Response) error {
	info, ok := resp.Request.Context().Value(ctxKey{}).(*reqInfo)
	if ok && info.setCookie != "" && info.pool.Sticky != nil {
		resp.Header.Add("Set-Cookie", info.pool.Sticky.Cookie(info.setCookie, time.Now(), info.secure).String())
	}
	return nil
}

// errorHandler answers for a request no endpoint served.
func (h *Handler) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	kind := proxy.Classify(err, r.Context())
	if info, ok := r.Context().Value(ctxKey{}).(*reqInfo); ok && info.kind != health.NoError {
		kind = info.kind
	}
	status := proxy.Status(err, kind)
	if status == 499 {
		h.log.Debug("client went away", "listener", h.name, "path", r.URL.Path)
		return
	}
	h.log.Warn("proxy error", "listener", h.name, "path", r.URL.Path, "status", status, "error", err)
	http.Error(w, http.StatusText(status), status)
}

// recorder notes the status and size of a response. Unwrap lets
// http.ResponseController reach the connection for flushes and upgrades.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Flush passes flushes on (ReverseProxy flushes event streams at once).
func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// bufferPool lends ReverseProxy its copy buffers, which it would otherwise
// allocate, 32 KiB each, for every response.
type bufferPool struct{}

var buffers = sync.Pool{New: func() any { return new([32 << 10]byte) }}

func (bufferPool) Get() []byte  { return buffers.Get().(*[32 << 10]byte)[:] }
func (bufferPool) Put(b []byte) { buffers.Put((*[32 << 10]byte)(b[:32<<10])) }
