package proxy

import (
	"context"
	"log/slog"
	"time"
)

// Listener kinds, as records and metrics name them.
const (
	KindHTTP    = "http"    // a reverse-proxied request (an upgrade included)
	KindForward = "forward" // a forward proxy's absolute-URI request
	KindConnect = "connect" // a forward proxy's CONNECT tunnel
	KindTCP     = "tcp"     // a TCP connection
)

// Record is one request or connection as a listener served it, from
// accept to end: what the access log and the metrics are made of. Every
// listener kind writes one per request or connection, refusals included.
type Record struct {
	Listener string
	Kind     string // KindHTTP, KindForward, KindConnect, KindTCP
	Pool     string // "" when no pool was chosen
	Endpoint string // the endpoint of the last try; "" when none
	// Status is the status the client got: 101 for an upgrade, 200 for an
	// established tunnel, 499 when the client went away first; 0 for a
	// TCP connection.
	Status int
	// Reason says why rotor refused or failed it ("no_endpoint",
	// "target_forbidden", "auth", ...; see Reason); "" when it was served.
	Reason   string
	Method   string
	Host     string // the Host, or the CONNECT target
	Path     string
	Proto    string // the request's protocol: HTTP/1.1, HTTP/2.0, ...; "" for a TCP connection
	Client   string // the client's address
	Start    time.Time
	Duration time.Duration
	BytesIn  int64 // read from the client
	BytesOut int64 // written to the client
	Attempts int   // tries on endpoints
}

// Options are what every listener adapter (reverse, forward, tcp) is
// given: where to log, whom to tell of each record, and the tracker its
// drain waits on.
type Options struct {
	Log      *slog.Logger // nil: discard
	Observer Observer     // told of every request or connection; nil: nobody
	// Conns tracks the connections the drain must wait for (upgrades,
	// tunnels, tcp connections); nil: a tracker of the adapter's own.
	Conns *Conns
}

// Normalize returns o with its defaults filled in.
func (o Options) Normalize() Options {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Observer == nil {
		o.Observer = Observers(nil)
	}
	if o.Conns == nil {
		o.Conns = new(Conns)
	}
	return o
}

// Observer is told of every Record. Implementations must be safe for
// concurrent use and quick.
type Observer interface {
	Served(r *Record)
}

// Observers tells each of its observers.
type Observers []Observer

// Served tells every observer.
func (os Observers) Served(r *Record) {
	for _, o := range os {
		o.Served(r)
	}
}

// AccessLog writes one line per Record at info level.
type AccessLog struct{ Log *slog.Logger }

// Served logs r.
func (a AccessLog) Served(r *Record) {
	attrs := []slog.Attr{
		slog.String("listener", r.Listener), slog.String("kind", r.Kind),
		slog.String("client", r.Client),
	}
	if r.Method != "" {
		attrs = append(attrs, slog.String("method", r.Method))
	}
	attrs = append(attrs, slog.String("host", r.Host))
	if r.Path != "" {
		attrs = append(attrs, slog.String("path", r.Path))
	}
	if r.Proto != "" {
		attrs = append(attrs, slog.String("proto", r.Proto))
	}
	if r.Kind != KindTCP {
		attrs = append(attrs, slog.Int("status", r.Status))
	}
	if r.Reason != "" {
		attrs = append(attrs, slog.String("reason", r.Reason))
	}
	attrs = append(attrs,
		slog.Int64("bytes_in", r.BytesIn), slog.Int64("bytes_out", r.BytesOut),
		slog.Duration("duration", r.Duration),
		slog.String("pool", r.Pool), slog.String("endpoint", r.Endpoint), slog.Int("attempts", r.Attempts),
	)
	a.Log.LogAttrs(context.Background(), slog.LevelInfo, "access", attrs...)
}
