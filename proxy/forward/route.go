// Package forward is rotor's way out: routes (direct, through an HTTP
// proxy, through SOCKS5), an http.RoundTripper that picks a route per
// request by health and retries on another, and a forward-proxy handler
// (absolute-URI requests and CONNECT tunnels) for clients that set
// HTTP_PROXY. Targets are checked against private and metadata ranges on
// the address actually dialled.
package forward

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"golang.org/x/net/proxy"

	"github.com/rotor-lb/rotor/internal/secret"
	"github.com/rotor-lb/rotor/proxy/h1"
)

// Route is one way out to the internet.
type Route struct {
	Name string
	// URL is "direct://", "http://[user:pass@]host:port" or
	// "socks5://[user:pass@]host:port".
	URL *url.URL
	// InsecureSkipVerify accepts any certificate from targets reached over
	// this route: for proxies that terminate TLS themselves (article 001's
	// smart proxy presents its own certificate). Logged as a warning.
	InsecureSkipVerify bool

	guard     *Guard
	connect   time.Duration
	try       time.Duration
	transport *h1.Transport
}

// RouteOptions describe a route to NewRoute.
type RouteOptions struct {
	Name string
	// URL is "direct://", "http://[user:pass@]host:port" or
	// "socks5://[user:pass@]host:port" (ParseRouteURL).
	URL                string
	InsecureSkipVerify bool
	// Guard decides which targets the route may reach; nil means the
	// default guard, which refuses the Blocked ranges.
	Guard *Guard
	// Connect bounds dialing the route (or the target, for direct);
	// 0 means 10s.
	Connect time.Duration
	// Try bounds the wait for response headers; 0 means 30s.
	Try time.Duration
	// Read bounds each wait for a byte of an answer's body (over
	// HTTP/1.1: an HTTP/2 connection's streams share its reads); 0: none.
	Read time.Duration
}

// ParseRouteURL checks a route URL. Its errors never show the URL's
// userinfo (a token may stand as the user).
func ParseRouteURL(s string) (*url.URL, error) {
	u, err := secret.ParseURL(s)
	if err != nil {
		return nil, err
	}
	// The messages name the scheme, host or port at fault, never the URL:
	// the rest of it may hold credentials.
	switch u.Scheme {
	case "direct":
		if u.Host != "" || u.User != nil || u.Opaque != "" || u.Path != "" && u.Path != "/" {
			return nil, fmt.Errorf("direct:// takes no host, user or path")
		}
	case "http", "socks5":
		if u.Host == "" {
			return nil, fmt.Errorf("%s://: no host", u.Scheme)
		}
		host, port, err := net.SplitHostPort(u.Host)
		if err != nil || host == "" || port == "" {
			return nil, fmt.Errorf("host %q: want host:port", u.Host)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("host %q: %q is not a port", u.Host, port)
		}
	default:
		return nil, fmt.Errorf("scheme %q: must be direct, http or socks5", u.Scheme)
	}
	return u, nil
}

// NewRoute builds a route. Its errors never show the URL's userinfo.
func NewRoute(o RouteOptions) (*Route, error) {
	if o.Name == "" {
		return nil, fmt.Errorf("route: a name is required")
	}
	u, err := ParseRouteURL(o.URL)
	if err != nil {
		return nil, err
	}
	if o.Guard == nil {
		o.Guard = &Guard{}
	}
	if o.Connect <= 0 {
		o.Connect = 10 * time.Second
	}
	if o.Try <= 0 {
		o.Try = 30 * time.Second
	}
	r := &Route{Name: o.Name, URL: u, InsecureSkipVerify: o.InsecureSkipVerify, guard: o.Guard, connect: o.Connect, try: o.Try}
	t := &http.Transport{
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ResponseHeaderTimeout: o.Try,
		// Both ways bound a target's head alike, as the reverse proxy
		// bounds a backend's.
		MaxResponseHeaderBytes: h1.MaxResponseHeader,
		ForceAttemptHTTP2:      true,
		// A client's Accept-Encoding goes out as it came, and the answer
		// comes back as the target encoded it.
		DisableCompression: true,
		TLSClientConfig:    &tls.Config{InsecureSkipVerify: o.InsecureSkipVerify}, // #nosec G402 -- per-route opt-in, logged
	}
	switch u.Scheme {
	case "direct":
		d := &net.Dialer{Timeout: o.Connect, KeepAlive: 30 * time.Second, Control: o.Guard.Control}
		t.DialContext = d.DialContext
	case "http":
		// http targets go to the proxy as absolute-URI requests (with
		// Basic auth from u.User); https targets through a CONNECT tunnel
		// this route opens itself, to the address it checked.
		t.Proxy = func(req *http.Request) (*url.URL, error) {
			if req.URL.Scheme == "http" {
				return u, nil
			}
			return nil, nil
		}
		d := &net.Dialer{Timeout: o.Connect, KeepAlive: 30 * time.Second}
		t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == u.Host {
				return d.DialContext(ctx, network, addr) // the proxy itself
			}
			return r.DialTunnel(ctx, addr)
		}
	case "socks5":
		t.DialContext = r.dialSOCKS
	}
	// Plain-http targets a route dials itself (direct, SOCKS5) take the
	// short way for bodiless GETs; an HTTP-proxy route (t.Proxy set) sends
	// them to the proxy as absolute-URI requests, through t.
	r.transport = h1.New(t)
	r.transport.AnswerIdle = o.Read
	return r, nil
}

// String names the route and where it goes, userinfo masked.
func (r *Route) String() string { return r.Name + " (" + secret.URL(r.URL) + ")" }

// CheckTarget refuses a target host the route's guard forbids, before
// anything is sent. What the route dials itself is checked as it is
// dialled, on the address dialled: a direct route's every dial, a SOCKS5
// route's target (resolved here, checked, and sent as an address), an
// HTTP-proxy route's CONNECT tunnels (likewise), so here only literal
// addresses are checked, for an early and clear refusal. tunnel says the
// request goes through such a dial: a CONNECT, or an https request. The
// one request this route cannot pin is a plain-http one through an HTTP
// proxy, which the proxy dials itself from the URL: for it the name is
// resolved and checked here, and the proxy resolves it again.
func (r *Route) CheckTarget(ctx context.Context, host string, tunnel bool) error {
	if r.URL.Scheme == "http" && !tunnel {
		return r.guard.CheckHost(ctx, host)
	}
	return r.guard.CheckLiteral(host)
}

// Transport returns the route's transport.
func (r *Route) Transport() *h1.Transport { return r.transport }

func (r *Route) socksDialer() (proxy.ContextDialer, error) {
	var auth *proxy.Auth
	if r.URL.User != nil {
		pass, _ := r.URL.User.Password()
		auth = &proxy.Auth{User: r.URL.User.Username(), Password: pass}
	}
	d, err := proxy.SOCKS5("tcp", r.URL.Host, auth, &net.Dialer{Timeout: r.connect, KeepAlive: 30 * time.Second})
	if err != nil {
		return nil, err
	}
	return d.(proxy.ContextDialer), nil
}

// dialSOCKS opens a connection to addr through the SOCKS5 proxy, to the
// address the guard checked: the name is resolved here, once.
func (r *Route) dialSOCKS(ctx context.Context, network, addr string) (net.Conn, error) {
	target, err := r.checked(ctx, addr)
	if err != nil {
		return nil, err
	}
	d, err := r.socksDialer()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.connect+30*time.Second)
	defer cancel()
	return d.DialContext(ctx, network, target)
}

// checked resolves host:port's host with the guard and returns the
// checked address with the port.
func (r *Route) checked(ctx context.Context, hostport string) (string, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", err
	}
	addr, err := r.guard.Resolve(ctx, host)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(addr.String(), port), nil
}

// DialTunnel opens a byte stream to target (host:port) over the route:
// a guarded dial for direct, a SOCKS5 CONNECT, or an HTTP CONNECT through
// the proxy. The last two go to the address the guard resolved and
// checked, never to the name.
func (r *Route) DialTunnel(ctx context.Context, target string) (net.Conn, error) {
	switch r.URL.Scheme {
	case "direct":
		d := &net.Dialer{Timeout: r.connect, Control: r.guard.Control}
		return d.DialContext(ctx, "tcp", target)
	case "socks5":
		return r.dialSOCKS(ctx, "tcp", target)
	}
	target, err := r.checked(ctx, target)
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{Timeout: r.connect}
	conn, err := d.DialContext(ctx, "tcp", r.URL.Host)
	if err != nil {
		return nil, err
	}
	// The proxy's answer is a response head, bounded as one: in time by
	// the try (or the caller's deadline, if sooner), in size by
	// h1.MaxResponseHeader; the caller going away ends the wait.
	dl := time.Now().Add(r.try)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	_ = conn.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if r.URL.User != nil {
		pass, _ := r.URL.User.Password()
		req += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(r.URL.User.Username()+":"+pass)) + "\r\n"
	}
	head := &headReader{conn: conn, left: h1.MaxResponseHeader}
	br := bufio.NewReader(head)
	var resp *http.Response
	if _, err = conn.Write([]byte(req + "\r\n")); err == nil {
		if resp, err = http.ReadResponse(br, &http.Request{Method: http.MethodConnect}); err != nil {
			err = h1.HeadError(err, head.err)
		}
	}
	if !stop() && err == nil {
		err = ctx.Err() // the wait was ended for the caller
	}
	if err != nil {
		conn.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		conn.Close()
		return nil, &StatusError{Status: resp.StatusCode}
	}
	_ = conn.SetDeadline(time.Time{})
	if br.Buffered() > 0 { // bytes the proxy sent after its answer belong to the tunnel
		return &bufferedConn{Conn: conn, r: br}, nil
	}
	return conn, nil
}

// errTunnelHead: a route's answer to CONNECT longer than a head may be.
var errTunnelHead = fmt.Errorf("route's answer to CONNECT exceeds %d bytes", h1.MaxResponseHeader)

// headReader reads a route's answer to CONNECT from its connection, up to
// left bytes, and keeps what made a read fail.
type headReader struct {
	conn net.Conn
	left int
	err  error
}

func (h *headReader) Read(p []byte) (int, error) {
	if h.left <= 0 {
		h.err = errTunnelHead
		return 0, h.err
	}
	if len(p) > h.left {
		p = p[:h.left]
	}
	n, err := h.conn.Read(p)
	h.left -= n
	if err != nil {
		h.err = err
	}
	return n, err
}

// StatusError is a route's refusal of a CONNECT, by status.
type StatusError struct{ Status int }

func (e *StatusError) Error() string { return fmt.Sprintf("route answered CONNECT with %d", e.Status) }

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

// Read gives what came with the answer first, then reads the connection
// (not through the head's bound).
func (c *bufferedConn) Read(p []byte) (int, error) {
	if c.r.Buffered() > 0 {
		return c.r.Read(p)
	}
	return c.Conn.Read(p)
}

// Close releases idle connections.
func (r *Route) Close() { r.transport.CloseIdleConnections() }
