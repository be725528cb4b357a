package reverse

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/proxy"
)

// retrier is the ReverseProxy's transport: each attempt picks an endpoint,
// reports its outcome, and a failed attempt is tried again on another
// endpoint when that is safe and the budget allows.
type retrier struct{ h *Handler }

// idempotent methods may be sent twice (RFC 9110, 9.2.2).
func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// guard wraps the request body so that attempts share it: it is never
// closed by an attempt, and it notes whether any byte was read (after
// which the body cannot be sent again).
type guard struct {
	body io.ReadCloser
	read atomic.Bool
}

func (g *guard) Read(p []byte) (int, error) {
	n, err := g.body.Read(p)
	if n > 0 {
		g.read.Store(true)
	}
	return n, err
}

func (g *guard) Close() error { return nil }

// cancelBody releases the request's deadline context when the response
// body is closed: the context must outlive RoundTrip for the body to
// stream.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

func (t *retrier) RoundTrip(out *http.Request) (*http.Response, error) {
	info := out.Context().Value(ctxKey{}).(*reqInfo)
	pool := info.pool
	if pool.Attempts > 1 {
		pool.Budget.Deposit() // the budget only matters to pools that retry
	}
	var g *guard
	if out.Body != nil && out.Body != http.NoBody {
		g = &guard{body: out.Body}
		defer out.Body.Close()
	}
	// The per-try timeout is the transport's response-header timeout; a
	// context is made only when the total can bind before the tries do.
	ctx, cancel := out.Context(), context.CancelFunc(func() {})
	deadline := time.Now().Add(pool.Total)
	var totalTimer *time.Timer
	if time.Duration(pool.Attempts)*pool.Try > pool.Total {
		// Cancelled by a timer stopped once headers arrive, not a
		// deadline, so that a streaming body is not cut by it.
		ctx, cancel = context.WithCancel(ctx)
		totalTimer = time.AfterFunc(pool.Total, cancel)
	}
	inURL := *out.URL
	var tried []string
	for attempt := 1; ; attempt++ {
		var (
			pk  balance.Pick
			err error
			ok  bool
		)
		if info.pinned != "" && attempt == 1 {
			pk, ok = pool.Primary.PickNamed(info.pinned)
			if !ok && pool.Backup != nil {
				pk, ok = pool.Backup.PickNamed(info.pinned)
			}
		}
		if !ok {
			if pk, err = pool.Pick(balance.Request{Key: info.key}, tried); err != nil {
				cancel()
				return nil, err
			}
			if pool.Sticky != nil {
				info.setCookie = pk.Endpoint.Name
			}
		}
		target := pool.Targets[pk.Endpoint.Name]
		u := inURL
		u.Scheme, u.Host = target.Scheme, target.Host
		u.Path, u.RawPath = joinPath(target, &inURL)
		if target.RawQuery != "" {
			u.RawQuery = target.RawQuery + "&" + inURL.RawQuery
		}
		req := out.WithContext(ctx) // shallow: the headers are shared, and not changed here
		req.URL = &u
		if g != nil {
			req.Body = g
		}
		start := time.Now()
		resp, err := pool.Transport.RoundTrip(req)
		end := time.Now()
		kind := proxy.Classify(err, out.Context())
		if err != nil && ctx.Err() != nil && out.Context().Err() == nil {
			kind = health.Timeout // the total ran out
		}
		o := health.Outcome{Err: kind, Latency: end.Sub(start), At: end}
		if resp != nil {
			o.Status = resp.StatusCode
		}
		pk.Done(o)
		retry := attempt < pool.Attempts && out.Context().Err() == nil && end.Before(deadline) &&
			(g == nil || !g.read.Load()) && kind != health.Canceled
		if retry {
			switch {
			case err != nil:
				retry = proxy.IsDialError(err) || idempotent(out.Method)
			default:
				retry = idempotent(out.Method) && pool.RetryStatuses.FailsOn(resp.StatusCode)
			}
		}
		if retry && pool.Budget.Withdraw() {
			if resp != nil {
				_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
				resp.Body.Close()
			}
			tried = append(tried, pk.Endpoint.Name)
			t.h.obs.Retried(pool.Name)
			continue
		}
		info.endpoint = pk.Endpoint.Name
		if totalTimer != nil {
			totalTimer.Stop()
		}
		if err != nil {
			cancel()
			info.kind = kind
			if kind == health.Timeout {
				return nil, errors.Join(proxy.ErrTimeout, err)
			}
			return nil, err
		}
		if ctx != out.Context() && resp.StatusCode != http.StatusSwitchingProtocols {
			// The body streams past the total's deadline: only the wait
			// for headers was bounded. Release the context with the body.
			resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
		}
		return resp, nil
	}
}

// joinPath puts the request path under the target's path, keeping the
// escaped form when either has one.
func joinPath(target, in *url.URL) (path, rawPath string) {
	if target.Path == "" || target.Path == "/" {
		return in.Path, in.RawPath
	}
	path = strings.TrimSuffix(target.Path, "/") + "/" + strings.TrimPrefix(in.Path, "/")
	if target.RawPath == "" && in.RawPath == "" {
		return path, ""
	}
	return path, strings.TrimSuffix(target.EscapedPath(), "/") + "/" + strings.TrimPrefix(in.EscapedPath(), "/")
}
