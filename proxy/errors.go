package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
)

// ErrTimeout means the endpoint did not answer in time (504).
var ErrTimeout = errors.New("proxy: timeout")

// Classify turns a transport error into an outcome kind: whether the
// endpoint or the client is to blame, and whether the endpoint could have
// seen the request. ctx is the client's request context.
func Classify(err error, ctx context.Context) health.ErrorKind {
	switch {
	case err == nil:
		return health.NoError
	case ownFault(err):
		return health.Local // this host's failure, not the endpoint's
	case ctx.Err() == context.Canceled || errors.Is(err, context.Canceled):
		return health.Canceled
	case errors.Is(err, ErrTimeout) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		return health.Timeout
	case IsDialError(err):
		return health.ConnectError
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return health.Timeout
	}
	return health.Broken
}

// IsDialError reports whether err happened before anything was sent (the
// dial, or a handshake that refused the endpoint's certificate), so the
// endpoint saw nothing and any request may be retried.
func IsDialError(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	// A certificate rotor would not accept: the handshake stopped before
	// anything of the request was sent (nginx retries it as it retries a
	// refused connection).
	var cv *tls.CertificateVerificationError
	return errors.As(err, &cv) || errors.Is(err, syscall.ECONNREFUSED)
}

// Statuses rotor answers with when no endpoint did.
const (
	StatusBadRequest          = 400
	StatusInternalServerError = 500
	StatusBadGateway          = 502
	StatusServiceUnavailable  = 503
	StatusGatewayTimeout      = 504
	// StatusClientClosed is nginx's 499: the client went away before the
	// answer. It is logged and counted, never sent.
	StatusClientClosed = 499
)

// ownFault reports whether err is this host's failure, neither the
// client's nor an endpoint's: the body's file did not read back
// (ErrSpoolRead), or the host ran short (HostShort).
func ownFault(err error) bool { return errors.Is(err, ErrSpoolRead) || HostShort(err) }

// HostShort reports whether err says this host ran short of what a
// socket needs, which comes back: descriptors (EMFILE, ENFILE), kernel
// memory (ENOBUFS, ENOMEM) or local ports for a dial (EADDRNOTAVAIL). It
// says nothing of the peer.
func HostShort(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.EADDRNOTAVAIL)
}

// Status maps an error to the status the client gets: 503 when no endpoint
// can take the request, 500 when rotor failed it itself (ownFault, as
// nginx's 500), 400 when the client's request was at fault, 499 when the
// client went away, 504 on a timeout, 502 for anything else an endpoint
// did wrong.
func Status(err error, kind health.ErrorKind) int {
	switch {
	case errors.Is(err, balance.ErrNoEndpoint), errors.Is(err, balance.ErrRejected):
		return StatusServiceUnavailable
	case ownFault(err):
		return StatusInternalServerError
	case kind == health.Client:
		return StatusBadRequest
	case kind == health.Canceled:
		return StatusClientClosed
	case kind == health.Timeout:
		return StatusGatewayTimeout
	}
	return StatusBadGateway
}

// Reason is a short name for why rotor failed a request, for access logs
// and metrics: "no_endpoint", "rejected", "client", "client_gone",
// "timeout", "connect", "broken"; "" when an endpoint answered.
func Reason(err error, kind health.ErrorKind) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, balance.ErrNoEndpoint):
		return "no_endpoint"
	case errors.Is(err, balance.ErrRejected):
		return "rejected"
	case kind == health.Canceled:
		return "client_gone"
	}
	return kind.String()
}

// AcceptBackoff is an accept loop's wait after an Accept that failed for
// want of something that comes back (HostShort: descriptors, kernel
// memory), or a timeout. The loop waits and accepts again, as nginx and
// net/http's server do, where returning would end the listener; a client
// that opens connections until rotor runs out of descriptors stops none
// of them.
type AcceptBackoff struct {
	// Log, when set, is told of the failures, one a second at most, as
	// nginx logs its accept() failures (an operator learns the host ran
	// short); a second's failures may come between accepts that succeed.
	Log    *slog.Logger
	delay  time.Duration
	logged time.Time
}

// Wait reports whether the loop outlives err, and if so waits first:
// 5 ms, twice as long each time in a row, at most a second.
func (b *AcceptBackoff) Wait(err error) bool {
	var ne net.Error
	if !(errors.As(err, &ne) && ne.Timeout()) && !HostShort(err) {
		return false
	}
	b.delay = min(max(2*b.delay, 5*time.Millisecond), time.Second)
	if now := time.Now(); b.Log != nil && now.Sub(b.logged) >= time.Second {
		b.logged = now
		b.Log.Warn("accept failed: waiting to accept again", "error", err, "wait", b.delay)
	}
	time.Sleep(b.delay)
	return true
}

// Accepted starts the waits over: an Accept succeeded.
func (b *AcceptBackoff) Accepted() { b.delay = 0 }
