// Package reverse is rotor's HTTP reverse proxy: each request's
// proxy.Flight (pick, admit, send, classify, report, retry) over an
// h1.Transport, the answer passed on as net/http/httputil's ReverseProxy
// passes it (hop-by-hop fields, 1xx, trailers, upgrades, streams), routes
// matched on host, path, header and cookie, trusted X-Forwarded-* handling
// and signed sticky cookies.
package reverse

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/proxy"
	"github.com/rotor-lb/rotor/proxy/h1"
)

// KeyFunc extracts a request's key for key-based policies.
type KeyFunc func(r *http.Request) string

// Pool is a pool as the reverse proxy runs it: the lifecycle's pool, and
// how to reach each endpoint. Immutable; a reload builds a new one.
type Pool struct {
	*proxy.Pool
	// Targets are the endpoints' base URLs, by name.
	Targets map[string]*url.URL
	// Transport carries the pool's requests: keep-alive connections per
	// endpoint, the connect timeout in its dialer and the per-try timeout
	// as its wait for response headers (NewTransport).
	Transport *h1.Transport
	Key       KeyFunc       // nil: no key
	Sticky    *StickyCookie // nil: no sticky cookie
	// Buffer is the most of a request body of no known length read
	// before its request goes on (h1.ReadAhead): 0 sends every such body
	// as it comes.
	Buffer int64
}

// NewTransport returns the transport for a pool's backends: keep-alive
// HTTP/1.1 connections, bodiless GETs the short way (package h1), connect
// bounds the dial and try the wait for response headers. It never asks for
// compression itself: a client's Accept-Encoding reaches the backend as it
// came, and the answer reaches the client as the backend encoded it.
func NewTransport(connect, try, read time.Duration, tlsConfig *tls.Config) *h1.Transport {
	dialer := &net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}
	t := h1.New(&http.Transport{
		DialContext:            dialer.DialContext,
		TLSClientConfig:        tlsConfig,
		TLSHandshakeTimeout:    connect, // as nginx and Envoy bound it: part of connecting
		MaxIdleConns:           4096,
		MaxIdleConnsPerHost:    512,
		IdleConnTimeout:        90 * time.Second,
		ExpectContinueTimeout:  time.Second,
		ResponseHeaderTimeout:  try,
		MaxResponseHeaderBytes: h1.MaxResponseHeader,
		DisableCompression:     true,
		// Backends get HTTP/1.1 keep-alive pools; clients may speak HTTP/2.
		ForceAttemptHTTP2: false,
	})
	t.AnswerIdle = read
	return t
}

// Route sends matching requests to a pool. Every condition set must hold.
type Route struct {
	Host       string            // exact, or "*.example.com"; "" matches any
	PathPrefix string            // "/" matches any
	Header     map[string]string // value "*" means present
	Cookie     map[string]string // value "*" means present
	Pool       *Pool
}

// Table is one listener's routing, swapped whole on reload.
type Table struct {
	Routes []Route
	// Default takes requests no route matched; nil answers 404.
	Default *Pool
	// Trusted are the peers whose X-Forwarded-* headers are believed.
	Trusted []netip.Prefix
}

// Handler is one HTTP listener's handler.
type Handler struct {
	name  string
	table func() *Table
	log   *slog.Logger
	obs   proxy.Observer
	conns *proxy.Conns
}

// reqInfo is one request's state from ServeHTTP to its answer. The
// recorder, the record, the flight, the trace and the first try's URL live
// in it: one allocation a request for all of them. Only reqState is made
// anew for each request; the rest, most of its size, is kept from the last
// one and each part set afresh before it is read.
type reqInfo struct {
	reqState

	record    proxy.Record          // set whole by ServeHTTP
	flight    proxy.Flight          // set up anew by Begin, keeping its memory
	trace     httptrace.ClientTrace // its hooks are bound to info for good (got1xx)
	header    http.Header           // out's header; the last request's map, emptied by outHeader
	out       http.Request          // the first try's, set whole by forward, unless the total needs a context of its own
	url       url.URL               // the first try's, set whole by roundTrip
	forwarded [4]string             // the forwarding fields' values, each set by rewrite before the header holds it
	mu        sync.Mutex            // guards answered and continued against got1xx and got100
}

// reqState is what of a request's state starts empty.
type reqState struct {
	rec       recorder
	started   bool      // flight began
	served    time.Time // when the handler began: what the endpoints are timed from (the record may start earlier, h1.Began)
	pool      *Pool
	trusted   bool
	key       string
	pinned    string // from a valid sticky cookie
	setCookie string // endpoint to pin the client to
	body      *proxy.Body
	kind      health.ErrorKind // how the last try failed
	reason    string           // why rotor answered itself or cut the answer
	secure    bool
	held      bool            // a transport may still hold out, its header or trace: not reused
	client    context.Context // the request's, without the total's bound
	total     *time.Timer     // ends the total's context, when it can bind
	query     string          // the query sent, parameters net/url cannot parse dropped
	answered  bool
	continued bool         // a backend's 100 Continue was passed on
	read      *h1.ReadHead // the request's head as the short way's server read it (h1.RequestHead)
	inPlace   bool         // out's header is the request's own map (h1.OutgoingInPlace)
}

// infos are the states of requests that ended, for the next: ServeHTTP
// takes one and gives it back once the request is recorded, unless the
// request was upgraded (its relay records it later) or a transport may
// still hold its first try's request (held).
var infos = sync.Pool{New: func() any { return new(reqInfo) }}

// NewHandler returns a handler for the listener named name; table gives
// the routing in force (a reload swaps it). Upgraded connections are
// tracked in o.Conns.
func NewHandler(name string, table func() *Table, o proxy.Options) *Handler {
	o = o.Normalize()
	return &Handler{name: name, table: table, log: o.Log, obs: o.Observer, conns: o.Conns}
}

func (t *Table) match(r *http.Request) *Pool {
	host, known := "", false // the request's host, lower case, once a route asks
	for _, rt := range t.Routes {
		if rt.Host != "" {
			if !known {
				host, known = r.Host, true
				if h, _, err := splitHostPort(host); err == nil {
					host = h
				}
				host = strings.ToLower(host)
			}
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
	info := infos.Get().(*reqInfo)
	info.reqState = reqState{rec: recorder{ResponseWriter: w, conns: h.conns}}
	if info.trace.Got1xxResponse == nil {
		info.trace.Got1xxResponse, info.trace.Got100Continue = info.got1xx, info.got100
	}
	rec, record := &info.rec, &info.record
	info.served = time.Now()
	*record = proxy.Record{
		Listener: h.name, Kind: proxy.KindHTTP, Method: r.Method, Host: r.Host, Path: r.URL.Path, Proto: r.Proto,
		Client: r.RemoteAddr, Start: h1.Began(r, info.served),
	}
	t := h.table()
	pool := t.match(r)
	if pool == nil {
		http.Error(rec, "no route for this request", http.StatusNotFound)
		record.Reason = "no_route"
		h.finish(record, rec, nil)
		h1.HeaderDone(w) // nothing was sent on
		infos.Put(info)
		return
	}
	record.Pool = pool.Name
	info.pool, info.secure, info.trusted = pool, r.TLS != nil, trusted(t.Trusted, r.RemoteAddr)
	info.read = h1.RequestHead(w)
	info.client = r.Context()
	if pool.Key != nil {
		info.key = pool.Key(r)
	}
	if pool.Sticky != nil {
		info.pinned, _ = pool.Sticky.Endpoint(r, info.served)
	}
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		info.body = proxy.NewBody(r.Body)
		r.Body = info.body
	}
	aborted := h.forward(rec, r, info)
	if info.body != nil {
		info.body.Release() // the answer is passed on: no try follows
	}
	if info.started {
		record.Attempts = info.flight.Attempts()
		if ep := info.flight.Endpoint(); ep != nil {
			record.Endpoint = ep.Name
		}
	}
	record.Reason = info.reason
	if rec.backend != nil {
		// Upgraded: relayed from here on without this goroutine (in the
		// event loop when both ends are plain TCP), and recorded once
		// over. Nothing of the server's connection is held meanwhile.
		// The relay keeps what the record needs, not the request's
		// state, which goes back for the next request as usual.
		rec.ResponseWriter = nil
		up := &upgraded{record: *record, rec: *rec, body: info.body}
		if !info.held {
			infos.Put(info)
		}
		proxy.SpliceThen(up.rec.client, up.rec.backend, up.rec.session, func(in, out int64) {
			up.rec.client.Close()
			up.rec.backend.Close()
			up.rec.held.End()
			up.rec.upIn += in
			up.rec.upOut += out
			if up.rec.session.Idled() {
				up.record.Reason = proxy.ReasonIdle
			}
			h.finish(&up.record, &up.rec, up.body)
		})
		return
	}
	h.finish(record, rec, info.body)
	written := rec.status != 0
	if !info.held {
		// No transport holds the header sent on, which shares the
		// client's values: the server may read the next request's
		// into their array.
		h1.HeaderDone(w)
		infos.Put(info)
	}
	if aborted {
		panic(http.ErrAbortHandler)
	}
	if !written {
		h1.AbortGone(r) // the client went away before its answer
	}
}

// finish completes the record and tells the observer.
func (h *Handler) finish(record *proxy.Record, rec *recorder, body *proxy.Body) {
	record.Duration = time.Since(record.Start)
	record.Status = rec.status
	if record.Status == 0 {
		record.Status = proxy.StatusClientClosed // nothing was written: the client went away
		if record.Reason == "" {
			record.Reason = "client_gone"
		}
	}
	record.BytesOut = rec.bytes
	if body != nil {
		record.BytesIn = body.Len()
	}
	record.BytesIn += rec.upIn
	record.BytesOut += rec.upOut
	h.obs.Served(record)
	if rec.session != nil {
		rec.session.Done()
	}
}

// rewrite sets the forwarding headers on out, the header in goes with.
// X-Forwarded-For, -Host and -Proto and X-Real-IP from a trusted peer are
// kept (X-Forwarded-For extended); from anyone else they are dropped and
// set afresh, so a client cannot spoof its address. The original Host is
// passed on, as Caddy does (the outgoing request keeps in's). X-Forwarded-*
// are set as httputil's SetXForwarded sets them (outHeader has dropped the
// client's), their values in vals, the request's: no allocation for them.
func (h *Handler) rewrite(in *http.Request, out http.Header, trust bool, vals *[4]string) {
	set := func(i int, v string) {
		vals[i] = v
		out[forwardedNames[i]] = vals[i : i+1 : i+1]
	}
	client, _, err := splitHostPort(in.RemoteAddr)
	if err == nil {
		var prior []string
		if trust {
			prior = in.Header["X-Forwarded-For"]
		}
		if len(prior) > 0 {
			set(0, strings.Join(prior, ", ")+", "+client)
		} else {
			set(0, client)
		}
	}
	set(1, in.Host)
	proto := schemeHTTP
	if in.TLS != nil {
		proto = schemeHTTPS
	}
	set(2, proto)
	if trust {
		for _, k := range forwardedNames[1:3] {
			if v := h1.Value(in.Header, k); v != "" {
				out[k] = []string{v}
			}
		}
	}
	if !trust || h1.Value(in.Header, "X-Real-Ip") == "" {
		if err != nil {
			client = in.RemoteAddr
		}
		set(3, client)
	}
}

// forwardedNames are the names of the fields rewrite sets, by their
// places in its values, as h1's writer knows them for tokens without a
// look (h1.CommonName).
var forwardedNames = [4]string{
	h1.CommonName("X-Forwarded-For"), h1.CommonName("X-Forwarded-Host"),
	h1.CommonName("X-Forwarded-Proto"), h1.CommonName("X-Real-Ip"),
}

// X-Forwarded-Proto's values, as h1's writer writes them without a look
// (h1.CommonValue).
var schemeHTTP, schemeHTTPS = h1.CommonValue("http"), h1.CommonValue("https")

// splitHostPort is net.SplitHostPort, quicker for an address of one
// colon and no brackets (an IPv4 address and a port), as every client's
// address of an IPv4 listener is.
func splitHostPort(addr string) (host, port string, err error) {
	if i := strings.IndexByte(addr, ':'); i >= 0 && strings.IndexByte(addr[i+1:], ':') < 0 &&
		strings.IndexByte(addr, '[') < 0 && strings.IndexByte(addr, ']') < 0 {
		return addr[:i], addr[i+1:], nil
	}
	return net.SplitHostPort(addr)
}

func trusted(prefixes []netip.Prefix, remote string) bool {
	if len(prefixes) == 0 {
		return false
	}
	host, _, err := splitHostPort(remote)
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

// setCookie pins the client to the endpoint that answered, when a sticky
// cookie should.
func (h *Handler) setCookie(resp *http.Response, info *reqInfo) {
	if info.setCookie != "" && info.pool.Sticky != nil {
		resp.Header.Add("Set-Cookie", info.pool.Sticky.Cookie(info.setCookie, time.Now(), info.secure).String())
	}
}

// errorHandler answers for a request no endpoint served.
func (h *Handler) errorHandler(w http.ResponseWriter, r *http.Request, info *reqInfo, err error) {
	kind := proxy.Classify(err, r.Context())
	if info.kind != health.NoError {
		kind = info.kind
	}
	if info.body != nil && info.body.Err() != nil {
		kind = health.Client
	}
	status := proxy.Status(err, kind)
	reason := proxy.Reason(err, kind)
	if kind == health.Client && info.body != nil {
		status, reason = proxy.ClientStatus(info.body.Err()), proxy.ClientReason(info.body.Err())
	}
	info.kind, info.reason = kind, reason
	if status == proxy.StatusClientClosed {
		h.log.Debug("client went away", "listener", h.name, "path", r.URL.Path)
		return
	}
	if kind == health.Client {
		// The body cannot be read to its end: the connection cannot be
		// reused after this answer.
		h.log.Debug("bad request body", "listener", h.name, "path", r.URL.Path, "error", err)
		w.Header().Set("Connection", "close")
	} else {
		h.log.Warn("proxy error", "listener", h.name, "path", r.URL.Path, "status", status, "error", err)
	}
	http.Error(w, http.StatusText(status), status)
}

// upgraded is what an upgraded connection's relay keeps of its request
// until it records it.
type upgraded struct {
	record proxy.Record
	rec    recorder
	body   *proxy.Body
}

// recorder notes the status and size of a response. Unwrap lets
// http.ResponseController reach the connection for flushes; Hijack, for
// upgrades, hands out the connection tracked for the drain.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
	conns  *proxy.Conns
	// An upgraded connection: its drain session, its two ends once the
	// answer is through (relayed once the request is recorded), its
	// bytes each way, and the endpoint's in-flight count it holds.
	session         *proxy.Session
	client, backend io.ReadWriteCloser
	upIn, upOut     int64
	held            proxy.Held
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
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

// Window passes the client's writer's on (proxy.Framer).
func (r *recorder) Window(b []byte) []byte { return proxy.WindowOf(r.ResponseWriter, b) }

// Flush passes flushes on (streams are flushed at once).
func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack takes the connection over for an upgrade (protocols are switched
// only after the backend answered 101): the status is 101, and the
// connection is tracked for the drain (r.session) until it is recorded.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(r.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if r.status == 0 {
		r.status = http.StatusSwitchingProtocols
	}
	// The session ends when ServeHTTP has recorded it, not when the
	// connection closes: a drain that waited for it finds it logged.
	s, ok := r.conns.Add(c)
	r.session = s
	if !ok { // shutting down: no new long-lived connections
		c.Close()
		return nil, nil, errors.New("reverse: shutting down")
	}
	return c, brw, nil
}
