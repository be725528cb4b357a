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

// cancelBody cancels an attempt's context when the response body is
// closed: the context must outlive RoundTrip for the body to stream.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelCauseFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel(nil)
	return err
}

func (t *retrier) RoundTrip(out *http.Request) (*http.Response, error) {
	info := out.Context().Value(ctxKey{}).(*reqInfo)
	pool := info.pool
	pool.Budget.Deposit()
	var g *guard
	if out.Body != nil && out.Body != http.NoBody {
		g = &guard{body: out.Body}
		defer out.Body.Close()
	}
	deadline := time.Now().Add(pool.Total)
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
				return nil, err
			}
			if pool.Sticky != nil {
				info.setCookie = pk.Endpoint.Name
			}
		}
		target := pool.Targets[pk.Endpoint.Name]
		ctx, cancel := context.WithCancelCause(out.Context())
		try := min(pool.Try, time.Until(deadline))
		timer := time.AfterFunc(max(try, 0), func() { cancel(proxy.ErrTimeout) })
		req := out.Clone(ctx)
		req.URL.Scheme, req.URL.Host = target.Scheme, target.Host
		req.URL.Path, req.URL.RawPath = joinPath(target, out.URL)
		if target.RawQuery != "" {
			req.URL.RawQuery = target.RawQuery + "&" + out.URL.RawQuery
		}
		if g != nil {
			req.Body = g
		}
		start := time.Now()
		resp, err := t.h.transport.RoundTrip(req)
		stopped := timer.Stop()
		end := time.Now()
		kind := proxy.Classify(err, out.Context())
		if !stopped && context.Cause(ctx) == proxy.ErrTimeout {
			kind = health.Timeout
		}
		o := health.Outcome{Err: kind, Latency: end.Sub(start), At: end}
		if resp != nil {
			o.Status = resp.StatusCode
		}
		pk.Done(o)
		retry := attempt < pool.Attempts && out.Context().Err() == nil && time.Now().Before(deadline) &&
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
			cancel(nil)
			tried = append(tried, pk.Endpoint.Name)
			t.h.obs.Retried(pool.Name)
			continue
		}
		info.endpoint = pk.Endpoint.Name
		if err != nil {
			cancel(nil)
			info.kind = kind
			if kind == health.Timeout {
				return nil, errors.Join(proxy.ErrTimeout, err)
			}
			return nil, err
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			// The tunnel lives on the attempt's context; it ends with the
			// request's.
			return resp, nil
		}
		resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
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
