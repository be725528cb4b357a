package config

import (
	"time"
)

// File is the whole configuration file of `rotor serve`. Its shape is a
// contract users and tests write against: names are kept, fields are added.
// Every field has a documented default (docs/CONFIG.md); zero means that
// default.
type File struct {
	Admin     Admin      `yaml:"admin"`
	Log       Log        `yaml:"log"`
	Listeners []Listener `yaml:"listeners"`
	Pools     []Pool     `yaml:"pools"`
	State     State      `yaml:"state"`
}

// State says where endpoint health (EWMAs, counters, breakers) and sticky
// pins live: in this process (memory, the default), or in Redis, shared
// by every rotor that names the same server and prefix.
type State struct {
	Store string `yaml:"store"` // memory (default) or redis
	// Address is one Redis server, host:port; Addresses several: a Redis
	// Cluster's seed nodes, or Sentinels when MasterName is set.
	Address    string   `yaml:"address"`
	Addresses  []string `yaml:"addresses"`
	MasterName string   `yaml:"master_name"` // Sentinel: the master's name
	Username   string   `yaml:"username"`
	Password   string   `yaml:"password"` // usually ${REDIS_PASSWORD}
	DB         int      `yaml:"db"`
	Prefix     string   `yaml:"prefix"` // default "rotor:"
	// Staleness is how often the shared copy is read back (default
	// 100ms); picks never wait on Redis, they read the local copy.
	Staleness time.Duration `yaml:"staleness"`
	// Timeout bounds every Redis operation (default 50ms); past it the
	// instance serves on its local state.
	Timeout time.Duration `yaml:"timeout"`
	TLS     *ClientTLS    `yaml:"tls"`
}

// ClientTLS is how rotor speaks TLS as a client: to Redis (state.tls),
// and to a pool's https endpoints (pools[].tls).
type ClientTLS struct {
	CA         string `yaml:"ca"`   // PEM file of the CAs to trust; default the system's
	Cert       string `yaml:"cert"` // client certificate, with Key
	Key        string `yaml:"key"`
	ServerName string `yaml:"server_name"`
}

// Admin is the admin listener: metrics, status, drain, reload.
type Admin struct {
	Listen string `yaml:"listen"` // default 127.0.0.1:9901; "off" disables it
	// Token, usually ${VAR}, is required with every change made through
	// the admin listener (drain, undrain, reload). Without one, changes are
	// accepted only when Listen is a loopback address.
	Token string `yaml:"token"`
}

// Log configures logging.
type Log struct {
	Format string `yaml:"format"` // text (default) or json
	Level  string `yaml:"level"`  // debug, info (default), warn, error
	Access bool   `yaml:"access"` // one line per request
}

// Listener is one place rotor accepts connections.
type Listener struct {
	Name   string  `yaml:"name"`
	Kind   string  `yaml:"kind"` // http, tcp or forward
	Listen string  `yaml:"listen"`
	Routes []Route `yaml:"routes"` // http
	Pool   string  `yaml:"pool"`   // tcp; for http, the pool when no route matches
	TLS    *TLS    `yaml:"tls"`    // http: serve HTTPS (and HTTP/2)
	// TrustedProxies are the CIDRs whose X-Forwarded-* headers are kept and
	// extended; from anyone else they are replaced.
	TrustedProxies []string         `yaml:"trusted_proxies"`
	Timeouts       ListenerTimeouts `yaml:"timeouts"`
	// MaxHeaderBytes caps a request's head, its request line and headers
	// (default 1 MiB): 414 for a longer URI, 431 for a larger head.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxBodyBytes caps a request's body (default 0: no cap): 413 above it.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxConcurrentStreams caps an HTTP/2 connection's streams in flight
	// (default 128).
	MaxConcurrentStreams int `yaml:"max_concurrent_streams"`

	// Auth is a forward listener's client authentication.
	Auth *Auth `yaml:"auth"`
	// AllowTargets are ranges a forward listener may reach although they
	// are loopback, private, link-local or metadata addresses.
	AllowTargets []string `yaml:"allow_targets"`
	// ConnectPorts are the ports CONNECT may reach (default [443]).
	ConnectPorts []int `yaml:"connect_ports"`
}

// Auth is Basic authentication for a forward listener's clients.
type Auth struct {
	Users map[string]string `yaml:"users"` // user: password, usually ${VAR}
}

// TLS names a certificate and key in PEM files.
type TLS struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// ListenerTimeouts bound how long clients may take.
type ListenerTimeouts struct {
	ReadHeader time.Duration `yaml:"read_header"` // default 10s
	// Body bounds the wait between two reads of a request body (default
	// 60s, nginx's client_body_timeout): 408 when a client stalls.
	Body time.Duration `yaml:"body"`
	Idle time.Duration `yaml:"idle"` // default 60s
	// Shutdown is how long SIGTERM waits for requests and connections in
	// flight before cutting them (default 30s).
	Shutdown time.Duration `yaml:"shutdown"`
	// Tunnel is how long a relayed connection (a tcp listener's, an
	// upgraded one, a CONNECT tunnel) may move no byte either way before
	// it is closed (default 1h; HAProxy's timeout tunnel).
	Tunnel time.Duration `yaml:"tunnel"`
}

// Route sends the requests it matches to a pool. Every condition given
// must hold.
type Route struct {
	Match Match  `yaml:"match"`
	Pool  string `yaml:"pool"`
}

// Match is a route's conditions.
type Match struct {
	Host       string            `yaml:"host"`        // exact, or *.example.com
	PathPrefix string            `yaml:"path_prefix"` // default /
	Header     map[string]string `yaml:"header"`      // name: exact value ("*": present)
	Cookie     map[string]string `yaml:"cookie"`      // name: exact value ("*": present)
}

// Pool is a named set of endpoints and the policy that picks among them.
type Pool struct {
	Name      string     `yaml:"name"`
	Policy    string     `yaml:"policy"` // default round_robin
	Choices   int        `yaml:"choices"`
	Gamma     *float64   `yaml:"gamma"`
	Sticky    Sticky     `yaml:"sticky"`
	Placement Placement  `yaml:"placement"`
	Key       Key        `yaml:"key"`
	Endpoints []Endpoint `yaml:"endpoints"`
	Health    Health     `yaml:"health"`
	Retries   Retries    `yaml:"retries"`
	Timeouts  Timeouts   `yaml:"timeouts"`
	// FailStatuses are the statuses that count against an endpoint
	// (default 5xx,429).
	FailStatuses string `yaml:"fail_statuses"`
	// StickyCookie, when set, pins each client to an endpoint with a
	// cookie rotor sets and signs.
	StickyCookie *StickyCookie `yaml:"sticky_cookie"`
	// EndpointsFrom finds endpoints in DNS, beside (or instead of) those
	// listed: nginx's resolve, HAProxy's server-template, Envoy's
	// STRICT_DNS.
	EndpointsFrom *EndpointsFrom `yaml:"endpoints_from"`
	// BlockedBody, on a route pool, is a regular expression: a 2xx answer
	// whose first 64 KiB match it is the route's failure ("access denied").
	BlockedBody string `yaml:"blocked_body"`
	// TLS is how the pool's https endpoints are reached and checked: the
	// CAs to trust, a client certificate, the name to verify.
	TLS *ClientTLS `yaml:"tls"`
	// RequestBuffering (default true) reads a request body of no known
	// length ahead, and sends one that ends within 64 KiB with its
	// length (nginx's proxy_request_buffering); false streams every such
	// body to the endpoint as it comes.
	RequestBuffering *bool `yaml:"request_buffering"`
	// RequestBufferBytes (default 64 MiB, DefaultRequestBuffer) is the
	// most of such a body read before its request goes on: past 64 KiB
	// into a temporary file, and one that ends within it goes on with its
	// length too (nginx buffers a body to a file); a longer one goes on
	// chunked, what was read first.
	RequestBufferBytes int64 `yaml:"request_buffer_bytes"`
}

// Sticky configures the sticky policy.
type Sticky struct {
	Hash bool          `yaml:"hash"`
	TTL  time.Duration `yaml:"ttl"`
	// MaxEntries bounds the table (default 100000): a full table forgets
	// its least recently seen key.
	MaxEntries int    `yaml:"max_entries"`
	OnFull     string `yaml:"on_full"` // break (default) or reject
	Inner      string `yaml:"inner"`   // default least_conn
}

// Placement configures the key-placement policies.
type Placement struct {
	VNodes    int     `yaml:"vnodes"`
	Hash      string  `yaml:"hash"`
	Epsilon   float64 `yaml:"epsilon"`
	TableSize int     `yaml:"table_size"`
}

// Key says where key-based policies find a request's key. One field.
type Key struct {
	Header   string `yaml:"header"`
	Cookie   string `yaml:"cookie"`
	Query    string `yaml:"query"`
	ClientIP bool   `yaml:"client_ip"`
	Path     bool   `yaml:"path"`
	// TargetHost keys a forward pool's requests by the host they go to.
	TargetHost bool `yaml:"target_host"`
}

// Endpoint is one backend.
type Endpoint struct {
	Name        string  `yaml:"name"`
	URL         string  `yaml:"url"`     // http pools
	Address     string  `yaml:"address"` // tcp pools: host:port
	Weight      int     `yaml:"weight"`
	Backup      bool    `yaml:"backup"`
	Cost        float64 `yaml:"cost"`
	MaxInflight int64   `yaml:"max_inflight"`
	// InsecureSkipVerify, on a route, accepts any certificate from targets
	// reached over it (proxies that terminate TLS); logged as a warning.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// EndpointsFrom is a DNS name whose records are a pool's endpoints, read
// again every Refresh. Each change goes through the reload path: endpoints
// that stay keep their state, new ones warm up (slow_start), removed ones
// drain. A failing lookup keeps the last good set.
type EndpointsFrom struct {
	DNS  string `yaml:"dns"`  // the name to look up
	Type string `yaml:"type"` // A (default), AAAA or SRV
	// Port is the endpoints' port for A and AAAA records (SRV records
	// carry their own).
	Port    int           `yaml:"port"`
	Refresh time.Duration `yaml:"refresh"` // default 10s
	// Resolver is a DNS server, host:port, to ask instead of the system's.
	Resolver string `yaml:"resolver"`
	// Scheme is an http pool's endpoints' scheme: http (default) or https.
	Scheme string `yaml:"scheme"`
	// The fields every endpoint found takes, as a listed endpoint's.
	Weight      int     `yaml:"weight"`
	Backup      bool    `yaml:"backup"`
	Cost        float64 `yaml:"cost"`
	MaxInflight int64   `yaml:"max_inflight"`
}

// Health tunes the health model and active checks.
type Health struct {
	Check   *Check  `yaml:"check"`
	Breaker Breaker `yaml:"breaker"`
	EWMA    EWMA    `yaml:"ewma"`
	// SlowStart ramps an endpoint's share up over this window after it
	// comes back (default 0: no ramp).
	SlowStart time.Duration `yaml:"slow_start"`
	// PanicThreshold: when fewer than this share of endpoints are healthy,
	// spread over all of them (Envoy's panic mode). Default 0: off.
	PanicThreshold float64 `yaml:"panic_threshold"`
	// WaitFirstCheck keeps new endpoints out until their first check passes.
	WaitFirstCheck bool `yaml:"wait_first_check"`
}

// Check is an active health check.
type Check struct {
	Kind     string        `yaml:"kind"`   // http (default for http pools) or tcp
	Path     string        `yaml:"path"`   // default /
	Expect   string        `yaml:"expect"` // statuses that pass, default 2xx
	Interval time.Duration `yaml:"interval"`
	Timeout  time.Duration `yaml:"timeout"`
	Rise     int           `yaml:"rise"`
	Fall     int           `yaml:"fall"`
}

// Breaker tunes the circuit breaker.
type Breaker struct {
	Threshold int           `yaml:"threshold"`
	Cooldown  time.Duration `yaml:"cooldown"`
}

// EWMA tunes the running estimates.
type EWMA struct {
	SuccessDecay float64       `yaml:"success_decay"`
	LatencyDecay float64       `yaml:"latency_decay"`
	CostWeight   float64       `yaml:"cost_weight"`
	PeakDecay    time.Duration `yaml:"peak_decay"`
}

// Retries bound how a failed request is tried again on another endpoint.
type Retries struct {
	Attempts int     `yaml:"attempts"` // tries in all, default 2 (one retry)
	Budget   float64 `yaml:"budget"`   // extra tries as a share of requests, default 0.2
	// Statuses are the statuses retried for idempotent requests
	// (default 502,503,504; for a forward pool, its fail_statuses).
	Statuses string `yaml:"statuses"`
}

// Timeouts bound the work on one request.
type Timeouts struct {
	Connect time.Duration `yaml:"connect"` // default 2s
	Try     time.Duration `yaml:"try"`     // to response headers, per attempt; default 10s
	Total   time.Duration `yaml:"total"`   // all attempts; default 30s
	// Read bounds each wait for a byte of an answer's body, once its head
	// came (nginx's proxy_read_timeout); default 60s (DefaultRead, applied
	// where the pool is built: tcp pools have no answers).
	Read time.Duration `yaml:"read"`
}

// StickyCookie pins clients with a signed cookie.
type StickyCookie struct {
	Name   string        `yaml:"name"`   // default rotor_sticky
	Secret string        `yaml:"secret"` // required: HMAC key, usually ${VAR}
	TTL    time.Duration `yaml:"ttl"`    // default 1h
}
