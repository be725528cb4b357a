package config

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/internal/secret"
	"github.com/rotor-lb/rotor/proxy/forward"
)

// Defaults documented in docs/CONFIG.md.
const (
	DefaultAdminListen    = "127.0.0.1:9901"
	MinAdminToken         = 16
	DefaultReadHeader     = 10 * time.Second
	DefaultBodyTimeout    = 60 * time.Second
	DefaultStreams        = 128
	DefaultIdle           = 60 * time.Second
	DefaultShutdown       = 30 * time.Second
	DefaultTunnel         = time.Hour
	MinTunnel             = time.Second
	DefaultMaxHeaderBytes = 1 << 20
	DefaultConnect        = 2 * time.Second
	DefaultTry            = 10 * time.Second
	DefaultTotal          = 30 * time.Second
	DefaultRead           = 60 * time.Second
	DefaultRequestBuffer  = 64 << 20
	DefaultAttempts       = 2
	DefaultBudget         = 0.2
	DefaultRetryStatuses  = "502,503,504"
	DefaultCheckInterval  = 2 * time.Second
	DefaultCheckTimeout   = time.Second
	DefaultRise           = 2
	DefaultFall           = 3
	DefaultStickyCookie   = "rotor_sticky"
	DefaultStickyTTL      = time.Hour
	DefaultStatePrefix    = "rotor:"
	DefaultStaleness      = 100 * time.Millisecond
	DefaultStateTimeout   = 50 * time.Millisecond
	DefaultDNSRefresh     = 10 * time.Second
)

// KeyedPolicies need a request key.
var KeyedPolicies = []string{"ring", "rendezvous", "maglev", "bounded"}

func (f *File) applyDefaults() {
	if f.Admin.Listen == "" {
		f.Admin.Listen = DefaultAdminListen
	}
	if f.Log.Format == "" {
		f.Log.Format = "text"
	}
	if f.State.Store == "" {
		f.State.Store = "memory"
	}
	if f.State.Store == "redis" {
		if f.State.Prefix == "" {
			f.State.Prefix = DefaultStatePrefix
		}
		if f.State.Staleness == 0 {
			f.State.Staleness = DefaultStaleness
		}
		if f.State.Timeout == 0 {
			f.State.Timeout = DefaultStateTimeout
		}
	}
	if f.Log.Level == "" {
		f.Log.Level = "info"
	}
	for i := range f.Listeners {
		l := &f.Listeners[i]
		if l.Timeouts.ReadHeader == 0 {
			l.Timeouts.ReadHeader = DefaultReadHeader
		}
		if l.Timeouts.Idle == 0 {
			l.Timeouts.Idle = DefaultIdle
		}
		if l.Timeouts.Body == 0 {
			l.Timeouts.Body = DefaultBodyTimeout
		}
		if l.MaxConcurrentStreams == 0 {
			l.MaxConcurrentStreams = DefaultStreams
		}
		if l.Timeouts.Shutdown == 0 {
			l.Timeouts.Shutdown = DefaultShutdown
		}
		if l.Timeouts.Tunnel == 0 {
			l.Timeouts.Tunnel = DefaultTunnel
		}
		if l.MaxHeaderBytes == 0 {
			l.MaxHeaderBytes = DefaultMaxHeaderBytes
		}
		for j := range l.Routes {
			if l.Routes[j].Match.PathPrefix == "" {
				l.Routes[j].Match.PathPrefix = "/"
			}
		}
	}
	forwardPools := map[string]bool{}
	for _, l := range f.Listeners {
		if l.Kind == "forward" && l.Pool != "" {
			forwardPools[l.Pool] = true
		}
	}
	for i := range f.Pools {
		p := &f.Pools[i]
		if ef := p.EndpointsFrom; ef != nil {
			if ef.Type == "" {
				ef.Type = "A"
			}
			if ef.Refresh == 0 {
				ef.Refresh = DefaultDNSRefresh
			}
			if ef.Scheme == "" {
				ef.Scheme = "http"
			}
		}
		if p.Policy == "" {
			p.Policy = "round_robin"
			if forwardPools[p.Name] {
				p.Policy = "scored" // routes: pick by health (article 001)
			}
		}
		if p.FailStatuses == "" && forwardPools[p.Name] {
			p.FailStatuses = health.RouteStatuses
		}
		if p.Timeouts.Connect == 0 {
			p.Timeouts.Connect = DefaultConnect
		}
		if p.Timeouts.Try == 0 {
			p.Timeouts.Try = DefaultTry
		}
		if p.Timeouts.Total == 0 {
			p.Timeouts.Total = DefaultTotal
		}
		if p.Retries.Attempts == 0 {
			p.Retries.Attempts = DefaultAttempts
		}
		if p.Retries.Budget == 0 {
			p.Retries.Budget = DefaultBudget
		}
		if p.Retries.Statuses == "" {
			p.Retries.Statuses = DefaultRetryStatuses
			if forwardPools[p.Name] {
				// A route that refuses (403, 407, 429, 5xx) is worth
				// another try on another route: rotation's point.
				p.Retries.Statuses = p.FailStatuses
			}
		}
		if c := p.Health.Check; c != nil {
			if c.Path == "" {
				c.Path = "/"
			}
			if c.Expect == "" {
				c.Expect = "2xx"
			}
			if c.Interval == 0 {
				c.Interval = DefaultCheckInterval
			}
			if c.Timeout == 0 {
				c.Timeout = min(DefaultCheckTimeout, c.Interval)
			}
			if c.Rise == 0 {
				c.Rise = DefaultRise
			}
			if c.Fall == 0 {
				c.Fall = DefaultFall
			}
		}
		if sc := p.StickyCookie; sc != nil {
			if sc.Name == "" {
				sc.Name = DefaultStickyCookie
			}
			if sc.TTL == 0 {
				sc.TTL = DefaultStickyTTL
			}
		}
	}
}

// resolvePaths makes the file paths in the config that are relative
// relative to dir, the config file's directory, as nginx and Caddy read
// theirs: the same file works whatever directory rotor starts in.
func (f *File) resolvePaths(dir string) {
	abs := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	for i := range f.Listeners {
		if t := f.Listeners[i].TLS; t != nil {
			abs(&t.Cert)
			abs(&t.Key)
		}
	}
	clientTLS := func(t *ClientTLS) {
		if t != nil {
			abs(&t.CA)
			abs(&t.Cert)
			abs(&t.Key)
		}
	}
	clientTLS(f.State.TLS)
	for i := range f.Pools {
		clientTLS(f.Pools[i].TLS)
	}
}

type pathError struct{ path, msg string }

// misplaced finds the listener fields set on a kind of listener that has
// no use for them (a header bound on a tcp listener, credentials on an
// http one), as nginx refuses a directive where it is not allowed: set,
// it would look as if it held. Run before the defaults fill them in.
func (f *File) misplaced() []pathError {
	var errs []pathError
	for i, l := range f.Listeners {
		path := "listeners." + l.Name
		if l.Name == "" {
			path = fmt.Sprintf("listeners[%d]", i)
		}
		httpOnly := map[string]bool{
			"trusted_proxies":        len(l.TrustedProxies) > 0,
			"max_concurrent_streams": l.MaxConcurrentStreams != 0,
		}
		requests := map[string]bool{ // what bounds a listener that reads requests
			"timeouts.read_header": l.Timeouts.ReadHeader != 0,
			"timeouts.body":        l.Timeouts.Body != 0,
			"timeouts.idle":        l.Timeouts.Idle != 0,
			"max_header_bytes":     l.MaxHeaderBytes != 0,
			"max_body_bytes":       l.MaxBodyBytes != 0,
		}
		forwardOnly := map[string]bool{
			"auth":          l.Auth != nil,
			"allow_targets": len(l.AllowTargets) > 0,
			"connect_ports": len(l.ConnectPorts) > 0,
		}
		check := func(fields map[string]bool, rule string) {
			for _, field := range slices.Sorted(maps.Keys(fields)) {
				if fields[field] {
					errs = append(errs, errAt(path+"."+field, "%s; this is %s %s listener", rule, article(l.Kind), l.Kind))
				}
			}
		}
		switch l.Kind {
		case "http":
			check(forwardOnly, "is for forward listeners")
		case "forward":
			check(httpOnly, "is for http listeners")
		case "tcp":
			check(httpOnly, "is for http listeners")
			check(requests, "is for http and forward listeners, which read requests")
			check(forwardOnly, "is for forward listeners")
		}
	}
	return errs
}

// article is a or an, as said before kind (http, tcp, forward).
func article(kind string) string {
	if kind == "http" {
		return "an"
	}
	return "a"
}

func errAt(path, format string, args ...any) pathError {
	return pathError{path, fmt.Sprintf(format, args...)}
}

// HealthConfig is the pool's health model tuning.
func (p *Pool) HealthConfig() health.Config {
	return health.Config{
		SuccessDecay: p.Health.EWMA.SuccessDecay, LatencyDecay: p.Health.EWMA.LatencyDecay,
		Threshold: p.Health.Breaker.Threshold, Cooldown: p.Health.Breaker.Cooldown,
		CostWeight: p.Health.EWMA.CostWeight, PeakDecay: p.Health.EWMA.PeakDecay,
	}
}

// PolicyParams are the pool's policy settings.
func (p *Pool) PolicyParams() PolicyParams {
	return PolicyParams{
		Choices: p.Choices, Gamma: p.Gamma,
		StickyHash: p.Sticky.Hash, StickyTTL: p.Sticky.TTL, StickyEntries: p.Sticky.MaxEntries, StickyOnFull: p.Sticky.OnFull, StickyInner: p.Sticky.Inner,
		VNodes: p.Placement.VNodes, Hash: p.Placement.Hash, Epsilon: p.Placement.Epsilon, TableSize: p.Placement.TableSize,
	}
}

func (f *File) validate() []pathError {
	var errs []pathError
	add := func(e pathError) { errs = append(errs, e) }
	if f.Admin.Listen != "off" {
		if err := checkHostPort(f.Admin.Listen); err != nil {
			add(errAt("admin.listen", "%v", err))
		}
	}
	if t := f.Admin.Token; t != "" && (len(t) < MinAdminToken || strings.TrimSpace(t) != t || strings.ContainsAny(t, " \t\r\n")) {
		add(errAt("admin.token", "must be at least %d characters with no spaces (it was %d long)", MinAdminToken, len(t)))
	}
	errs = append(errs, f.State.validate()...)
	if !slices.Contains([]string{"text", "json"}, f.Log.Format) {
		add(errAt("log.format", "%q is not text or json", f.Log.Format))
	}
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, f.Log.Level) {
		add(errAt("log.level", "%q is not debug, info, warn or error", f.Log.Level))
	}
	if len(f.Listeners) == 0 {
		add(errAt("listeners", "at least one listener is required"))
	}
	pools := map[string]*Pool{}
	use := map[string]string{} // pool -> kind of listener using it
	for i := range f.Pools {
		p := &f.Pools[i]
		path := "pools." + p.Name
		if p.Name == "" {
			path = fmt.Sprintf("pools[%d]", i)
			add(errAt(path+".name", "required"))
			continue
		}
		if pools[p.Name] != nil {
			add(errAt(path+".name", "%q appears twice", p.Name))
		}
		pools[p.Name] = p
	}
	listenerNames := map[string]bool{}
	for i, l := range f.Listeners {
		path := "listeners." + l.Name
		if l.Name == "" {
			path = fmt.Sprintf("listeners[%d]", i)
			add(errAt(path+".name", "required"))
		} else if listenerNames[l.Name] {
			add(errAt(path+".name", "%q appears twice", l.Name))
		}
		listenerNames[l.Name] = true
		if err := checkHostPort(l.Listen); err != nil {
			add(errAt(path+".listen", "%v", err))
		} else if other := sharer(f, i); other != "" {
			add(errAt(path+".listen", "%q is %s's address too: two sockets cannot take one address and port", l.Listen, other))
		}
		poolRef := func(p, at string) {
			if pools[p] == nil {
				add(errAt(at, "pool %q does not exist (pools: %s)", p, strings.Join(names(f.Pools, func(p Pool) string { return p.Name }), ", ")))
				return
			}
			if other, ok := use[p]; ok && other != l.Kind {
				add(errAt(at, "pool %q is used by both a %s and a %s listener", p, other, l.Kind))
			}
			use[p] = l.Kind
		}
		switch l.Kind {
		case "http":
			if len(l.Routes) == 0 && l.Pool == "" {
				add(errAt(path+".routes", "an http listener needs routes or a pool"))
			}
			for j, r := range l.Routes {
				rp := fmt.Sprintf("%s.routes[%d]", path, j)
				if !strings.HasPrefix(r.Match.PathPrefix, "/") {
					add(errAt(rp+".match.path_prefix", "must start with / (got %q)", r.Match.PathPrefix))
				}
				if r.Pool == "" {
					add(errAt(rp+".pool", "required"))
				} else {
					poolRef(r.Pool, rp+".pool")
				}
			}
			if l.Pool != "" {
				poolRef(l.Pool, path+".pool")
			}
			if l.TLS != nil {
				for field, file := range map[string]string{"cert": l.TLS.Cert, "key": l.TLS.Key} {
					if file == "" {
						add(errAt(path+".tls."+field, "required"))
					} else if _, err := os.Stat(file); err != nil {
						add(errAt(path+".tls."+field, "%v", err))
					}
				}
			}
		case "forward":
			if l.Pool == "" {
				add(errAt(path+".pool", "required for a forward listener"))
			} else {
				poolRef(l.Pool, path+".pool")
			}
			if len(l.Routes) > 0 || l.TLS != nil {
				add(errAt(path, "a forward listener has no routes and no tls"))
			}
			if l.Auth != nil {
				if len(l.Auth.Users) == 0 {
					add(errAt(path+".auth.users", "at least one user is required"))
				}
				for u, pw := range l.Auth.Users {
					if pw == "" {
						add(errAt(path+".auth.users."+u, "empty password"))
					}
				}
			}
			for j, c := range l.AllowTargets {
				if _, err := ParsePrefix(c); err != nil {
					add(errAt(fmt.Sprintf("%s.allow_targets[%d]", path, j), "%v", err))
				}
			}
			for j, port := range l.ConnectPorts {
				if port < 1 || port > 65535 {
					add(errAt(fmt.Sprintf("%s.connect_ports[%d]", path, j), "%d is not a port", port))
				}
			}
		case "tcp":
			if l.Pool == "" {
				add(errAt(path+".pool", "required for a tcp listener"))
			} else {
				poolRef(l.Pool, path+".pool")
			}
			if len(l.Routes) > 0 {
				add(errAt(path+".routes", "a tcp listener has no routes: it reads no requests"))
			}
			if l.TLS != nil {
				add(errAt(path+".tls", "tls is for http listeners"))
			}
		default:
			add(errAt(path+".kind", "%q is not a listener kind (http, tcp, forward)", l.Kind))
		}
		for j, c := range l.TrustedProxies {
			if _, err := ParsePrefix(c); err != nil {
				add(errAt(fmt.Sprintf("%s.trusted_proxies[%d]", path, j), "%v", err))
			}
		}
		if l.MaxHeaderBytes < 0 {
			add(errAt(path+".max_header_bytes", "must be positive"))
		}
		if l.MaxBodyBytes < 0 {
			add(errAt(path+".max_body_bytes", "must be zero (no cap) or positive"))
		}
		if l.MaxConcurrentStreams < 0 {
			add(errAt(path+".max_concurrent_streams", "must be positive"))
		}
		for field, d := range map[string]time.Duration{"read_header": l.Timeouts.ReadHeader, "body": l.Timeouts.Body, "idle": l.Timeouts.Idle, "shutdown": l.Timeouts.Shutdown, "tunnel": l.Timeouts.Tunnel} {
			if d < 0 {
				add(errAt(path+".timeouts."+field, "must be positive (got %v)", d))
			}
		}
		if d := l.Timeouts.Tunnel; d > 0 && d < MinTunnel {
			add(errAt(path+".timeouts.tunnel", "must be at least %v (got %v): the relays tell bytes moving apart at a tenth of a second", MinTunnel, d))
		}
	}
	for i := range f.Pools {
		p := &f.Pools[i]
		if p.Name != "" {
			errs = append(errs, p.validate("pools."+p.Name, use[p.Name])...)
		}
	}
	return errs
}

func (p *Pool) validate(path, kind string) []pathError {
	var errs []pathError
	add := func(e pathError) { errs = append(errs, e) }
	if _, err := NewPolicy(p.Policy, p.PolicyParams()); err != nil {
		field := ".policy"
		if !slices.Contains(PolicyNames, p.Policy) {
			add(errAt(path+field, "%v", err))
		} else {
			add(errAt(path, "%v", err))
		}
	}
	keys := 0
	for _, set := range []bool{p.Key.Header != "", p.Key.Cookie != "", p.Key.Query != "", p.Key.ClientIP, p.Key.Path, p.Key.TargetHost} {
		if set {
			keys++
		}
	}
	if keys > 1 {
		add(errAt(path+".key", "give one of header, cookie, query, client_ip, path"))
	}
	if keys == 0 && kind != "tcp" && slices.Contains(KeyedPolicies, p.Policy) {
		add(errAt(path+".key", "required by policy %s (header, cookie, query, client_ip or path)", p.Policy))
	}
	if ef := p.EndpointsFrom; ef != nil {
		errs = append(errs, ef.validate(path+".endpoints_from", kind)...)
	} else if len(p.Endpoints) == 0 {
		add(errAt(path+".endpoints", "at least one endpoint is required (or endpoints_from)"))
	}
	seen := map[string]bool{}
	primaries := 0
	for i, e := range p.Endpoints {
		ep := path + ".endpoints." + e.Name
		if e.Name == "" {
			ep = fmt.Sprintf("%s.endpoints[%d]", path, i)
			add(errAt(ep+".name", "required"))
		} else if seen[e.Name] {
			add(errAt(ep+".name", "%q appears twice", e.Name))
		}
		seen[e.Name] = true
		if !e.Backup {
			primaries++
		}
		errs = append(errs, checkEndpointFields(ep, e.Weight, e.Cost, e.MaxInflight)...)
		switch {
		case e.URL != "" && e.Address != "":
			add(errAt(ep, "give url or address, not both"))
		case kind == "forward":
			if e.URL == "" {
				add(errAt(ep+".url", "required for a route (direct://, http://host:port or socks5://host:port)"))
			} else if _, err := forward.ParseRouteURL(e.URL); err != nil {
				add(errAt(ep+".url", "%v", err))
			}
		case kind == "tcp" && e.Address == "":
			add(errAt(ep+".address", "required for a tcp pool (host:port)"))
		case kind != "tcp" && e.URL == "":
			add(errAt(ep+".url", "required for an http pool (http://host:port)"))
		case e.Address != "":
			if err := checkHostPort(e.Address); err != nil {
				add(errAt(ep+".address", "%v", err))
			}
		default:
			if _, err := ParseBackendURL(e.URL); err != nil {
				add(errAt(ep+".url", "%v", err))
			}
		}
	}
	if len(p.Endpoints) > 0 && primaries == 0 {
		add(errAt(path+".endpoints", "every endpoint is a backup: at least one must not be"))
	}
	hc := p.HealthConfig().Normalize()
	if err := hc.Validate(); err != nil {
		field, msg, _ := strings.Cut(err.Error(), ": ")
		sub := map[string]string{"threshold": "breaker.threshold", "cooldown": "breaker.cooldown"}[field]
		if sub == "" {
			sub = "ewma." + field
		}
		add(errAt(path+".health."+sub, "%s", msg))
	}
	if c := p.Health.Check; c != nil {
		cp := path + ".health.check"
		if c.Kind == "" {
			c.Kind = map[bool]string{true: "tcp", false: "http"}[kind == "tcp"]
		}
		switch c.Kind {
		case "http":
			if kind == "tcp" {
				add(errAt(cp+".kind", "a tcp pool is checked by tcp connect"))
			}
			if !strings.HasPrefix(c.Path, "/") {
				add(errAt(cp+".path", "must start with / (got %q)", c.Path))
			}
			if _, err := health.NewClassifier(c.Expect); err != nil {
				add(errAt(cp+".expect", "%v", err))
			}
		case "tcp":
		default:
			add(errAt(cp+".kind", "%q is not a check kind (http, tcp)", c.Kind))
		}
		if c.Interval <= 0 {
			add(errAt(cp+".interval", "must be positive (got %v)", c.Interval))
		}
		if c.Timeout <= 0 || c.Timeout > c.Interval {
			add(errAt(cp+".timeout", "must be positive and at most the interval %v (got %v)", c.Interval, c.Timeout))
		}
		if c.Rise < 1 {
			add(errAt(cp+".rise", "must be at least 1 (got %d)", c.Rise))
		}
		if c.Fall < 1 {
			add(errAt(cp+".fall", "must be at least 1 (got %d)", c.Fall))
		}
	}
	if p.Health.SlowStart < 0 {
		add(errAt(path+".health.slow_start", "must be zero or positive (got %v)", p.Health.SlowStart))
	}
	if p.Health.PanicThreshold < 0 || p.Health.PanicThreshold > 1 {
		add(errAt(path+".health.panic_threshold", "must be between 0 and 1 (got %v)", p.Health.PanicThreshold))
	}
	if p.FailStatuses != "" {
		if _, err := health.NewClassifier(p.FailStatuses); err != nil {
			add(errAt(path+".fail_statuses", "%v", err))
		}
	}
	if p.Retries.Attempts < 1 || p.Retries.Attempts > 10 {
		add(errAt(path+".retries.attempts", "must be between 1 and 10 (got %d)", p.Retries.Attempts))
	}
	if p.Retries.Budget < 0 || p.Retries.Budget > 1 {
		add(errAt(path+".retries.budget", "must be between 0 and 1 (got %v)", p.Retries.Budget))
	}
	if _, err := health.NewClassifier(p.Retries.Statuses); err != nil {
		add(errAt(path+".retries.statuses", "%v", err))
	}
	for field, d := range map[string]time.Duration{"connect": p.Timeouts.Connect, "try": p.Timeouts.Try, "total": p.Timeouts.Total, "read": p.Timeouts.Read} {
		if d < 0 {
			add(errAt(path+".timeouts."+field, "must be positive (got %v)", d))
		}
	}
	if p.BlockedBody != "" {
		if _, err := regexp.Compile(p.BlockedBody); err != nil {
			add(errAt(path+".blocked_body", "not a regular expression: %v", err))
		}
	}
	if t := p.TLS; t != nil {
		switch {
		case kind == "tcp" || kind == "forward":
			add(errAt(path+".tls", "is for http pools, whose https endpoints it reaches"))
		case !p.hasHTTPS():
			add(errAt(path+".tls", "no endpoint is https (url https://..., or endpoints_from's scheme: https)"))
		}
		errs = append(errs, t.validate(path+".tls")...)
	}
	if p.Timeouts.Read != 0 && kind == "tcp" {
		add(errAt(path+".timeouts.read", "is for http and forward pools, whose backends answer (a tcp listener's connections are bounded by its timeouts.tunnel)"))
	}
	if p.RequestBuffering != nil && kind == "tcp" {
		add(errAt(path+".request_buffering", "is for http and forward pools, whose requests have bodies"))
	}
	switch {
	case p.RequestBufferBytes < 0:
		add(errAt(path+".request_buffer_bytes", "must be positive (got %d)", p.RequestBufferBytes))
	case p.RequestBufferBytes != 0 && kind == "tcp":
		add(errAt(path+".request_buffer_bytes", "is for http and forward pools, whose requests have bodies"))
	case p.RequestBufferBytes != 0 && p.RequestBuffering != nil && !*p.RequestBuffering:
		add(errAt(path+".request_buffer_bytes", "buffers nothing with request_buffering false"))
	}
	if p.Key.TargetHost && kind != "forward" {
		add(errAt(path+".key.target_host", "is for forward pools"))
	}
	if sc := p.StickyCookie; sc != nil {
		if len(sc.Secret) < 16 {
			add(errAt(path+".sticky_cookie.secret", "must be at least 16 characters (it signs the cookie)"))
		}
		if sc.TTL < 0 {
			add(errAt(path+".sticky_cookie.ttl", "must be positive (got %v)", sc.TTL))
		}
		if kind == "tcp" {
			add(errAt(path+".sticky_cookie", "cookies are for http pools"))
		}
	}
	return errs
}

// hasHTTPS reports whether any of the pool's endpoints is reached over
// https.
func (p *Pool) hasHTTPS() bool {
	if p.EndpointsFrom != nil && p.EndpointsFrom.Scheme == "https" {
		return true
	}
	for _, e := range p.Endpoints {
		if u, err := url.Parse(e.URL); err == nil && u.Scheme == "https" {
			return true
		}
	}
	return false
}

// sharer names what before listener i in f (the admin listener, or an
// earlier listener) listens where it would, so that binding it would
// fail: the same port and the same host, or a wildcard host on either
// side (Go listens on "", "0.0.0.0" and "::" alike, on both families).
// Port 0 (any free port) shares nothing; names are not resolved.
func sharer(f *File, i int) string {
	if f.Admin.Listen != "off" && sameSocket(f.Admin.Listen, f.Listeners[i].Listen) {
		return "admin.listen"
	}
	for j := range i {
		if sameSocket(f.Listeners[j].Listen, f.Listeners[i].Listen) {
			return "listeners." + f.Listeners[j].Name
		}
	}
	return ""
}

func sameSocket(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil {
		return false
	}
	na, errA := net.LookupPort("tcp", pa)
	nb, errB := net.LookupPort("tcp", pb)
	if errA != nil || errB != nil || na != nb || na == 0 {
		return false
	}
	ia, ib := net.ParseIP(ha), net.ParseIP(hb)
	wild := func(h string, ip net.IP) bool { return h == "" || ip != nil && ip.IsUnspecified() }
	return ha == hb || wild(ha, ia) || wild(hb, ib) || ia != nil && ia.Equal(ib)
}

func checkHostPort(s string) error {
	if s == "" {
		return fmt.Errorf("required (host:port)")
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port", s)
	}
	_ = host
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("%q has no valid port", s)
	}
	return nil
}

// ParseBackendURL checks an endpoint URL of an http pool. Its errors never
// show the URL's userinfo.
func ParseBackendURL(s string) (*url.URL, error) {
	u, err := secret.ParseURL(s)
	if err != nil {
		return nil, err
	}
	// The messages name the scheme or host at fault, never the URL: the
	// rest of it may hold credentials.
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("scheme %q: must be http or https", u.Scheme)
	case u.Host == "":
		return nil, fmt.Errorf("%s://: no host", u.Scheme)
	case u.User != nil:
		return nil, fmt.Errorf("%s://%s: credentials in a backend URL are not sent; remove them", u.Scheme, u.Host)
	}
	return u, nil
}

func (st *State) validate() []pathError {
	var errs []pathError
	add := func(e pathError) { errs = append(errs, e) }
	switch st.Store {
	case "memory":
		if st.Address != "" || len(st.Addresses) > 0 || st.Password != "" || st.TLS != nil || st.MasterName != "" {
			add(errAt("state.store", "the Redis settings need store: redis (got memory)"))
		}
		return errs
	case "redis":
	default:
		add(errAt("state.store", "%q is not memory or redis", st.Store))
		return errs
	}
	switch {
	case st.Address == "" && len(st.Addresses) == 0:
		add(errAt("state.address", "required with store: redis (host:port), or addresses for a cluster or Sentinels"))
	case st.Address != "" && len(st.Addresses) > 0:
		add(errAt("state.addresses", "give address or addresses, not both"))
	}
	if st.Address != "" {
		if err := checkHostPort(st.Address); err != nil {
			add(errAt("state.address", "%v", err))
		}
	}
	for i, a := range st.Addresses {
		if err := checkHostPort(a); err != nil {
			add(errAt(fmt.Sprintf("state.addresses[%d]", i), "%v", err))
		}
	}
	if st.DB < 0 || st.DB > 15 {
		add(errAt("state.db", "must be between 0 and 15 (got %d)", st.DB))
	}
	if st.DB != 0 && len(st.Addresses) > 1 && st.MasterName == "" {
		add(errAt("state.db", "a Redis Cluster has only db 0 (got %d)", st.DB))
	}
	if st.Staleness < 10*time.Millisecond || st.Staleness > time.Minute {
		add(errAt("state.staleness", "must be between 10ms and 1m (got %v)", st.Staleness))
	}
	if st.Timeout < time.Millisecond || st.Timeout > 10*time.Second {
		add(errAt("state.timeout", "must be between 1ms and 10s (got %v)", st.Timeout))
	}
	if strings.ContainsAny(st.Prefix, " \t\r\n{}") {
		add(errAt("state.prefix", "must not contain spaces or braces (got %q)", st.Prefix))
	}
	if t := st.TLS; t != nil {
		errs = append(errs, t.validate("state.tls")...)
	}
	return errs
}

func (t *ClientTLS) validate(path string) []pathError {
	var errs []pathError
	if (t.Cert == "") != (t.Key == "") {
		errs = append(errs, errAt(path, "cert and key go together"))
	}
	if t.ServerName != "" && (len(t.ServerName) > 253 || strings.ContainsAny(t.ServerName, " /:@")) {
		errs = append(errs, errAt(path+".server_name", "must be a host name (got %q)", t.ServerName))
	}
	return errs
}

func (ef *EndpointsFrom) validate(path, kind string) []pathError {
	var errs []pathError
	add := func(e pathError) { errs = append(errs, e) }
	if kind == "forward" {
		add(errAt(path, "a route pool lists its routes; endpoints_from is for http and tcp pools"))
	}
	name := strings.TrimSuffix(ef.DNS, ".")
	if name == "" || len(name) > 253 || strings.ContainsAny(name, " /:@") {
		add(errAt(path+".dns", "must be a DNS name (got %q)", ef.DNS))
	}
	switch ef.Type {
	case "A", "AAAA":
		if ef.Port < 1 || ef.Port > 65535 {
			add(errAt(path+".port", "required for %s records: 1 to 65535 (got %d)", ef.Type, ef.Port))
		}
	case "SRV":
		if ef.Port != 0 {
			add(errAt(path+".port", "SRV records carry their ports; leave it out"))
		}
	default:
		add(errAt(path+".type", "%q is not A, AAAA or SRV", ef.Type))
	}
	if ef.Refresh < 100*time.Millisecond || ef.Refresh > 24*time.Hour {
		add(errAt(path+".refresh", "must be between 100ms and 24h (got %v)", ef.Refresh))
	}
	if ef.Resolver != "" {
		if err := checkHostPort(ef.Resolver); err != nil {
			add(errAt(path+".resolver", "%v", err))
		}
	}
	if kind != "tcp" && ef.Scheme != "http" && ef.Scheme != "https" {
		add(errAt(path+".scheme", "must be http or https (got %q)", ef.Scheme))
	}
	return append(errs, checkEndpointFields(path, ef.Weight, ef.Cost, ef.MaxInflight)...)
}

// checkEndpointFields checks the fields a listed endpoint and an
// endpoints_from template share.
func checkEndpointFields(path string, weight int, cost float64, maxInflight int64) []pathError {
	var errs []pathError
	if weight < 0 {
		errs = append(errs, errAt(path+".weight", "must be at least 1 (got %d)", weight))
	}
	if cost < 0 {
		errs = append(errs, errAt(path+".cost", "must be zero or positive (got %v)", cost))
	}
	if maxInflight < 0 {
		errs = append(errs, errAt(path+".max_inflight", "must be zero or positive (got %d)", maxInflight))
	}
	return errs
}
