package reverse

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/proxy"
)

// retrier is the ReverseProxy's transport: it runs the request's
// proxy.Flight, sending each try to the endpoint the flight picked.
type retrier struct{ h *Handler }

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
	f := &info.flight
	pool.Begin(f, proxy.Request{Key: info.key, Pin: info.pinned, Idempotent: proxy.Idempotent(out.Method)})
	info.started = true
	if info.body != nil {
		defer info.body.Close()
	}
	// The per-try timeout is the transport's response-header timeout; a
	// context is made only when the total can bind before the tries do.
	ctx, cancel := out.Context(), context.CancelFunc(func() {})
	var totalTimer *time.Timer
	if pool.Total > 0 && time.Duration(max(pool.Attempts, 1))*pool.Transport.Try() > pool.Total {
		// Cancelled by a timer stopped once headers arrive, not a
		// deadline, so that a streaming body is not cut by it.
		ctx, cancel = context.WithCancel(ctx)
		totalTimer = time.AfterFunc(pool.Total, cancel)
	}
	inURL := *out.URL
	for {
		if err := out.Context().Err(); err != nil {
			// The client is gone (an HTTP/2 stream reset, say): nothing
			// is sent for it.
			cancel()
			return nil, err
		}
		ep, err := f.Next()
		if err != nil {
			cancel()
			return nil, err
		}
		if pool.Sticky != nil && ep.Name != info.pinned {
			info.setCookie = ep.Name
		}
		target := pool.Targets[ep.Name]
		u := inURL
		u.Scheme, u.Host = target.Scheme, target.Host
		u.Path, u.RawPath = joinPath(target, &inURL)
		if target.RawQuery != "" {
			u.RawQuery = target.RawQuery + "&" + inURL.RawQuery
		}
		req := out.WithContext(ctx) // shallow: the headers are shared, and not changed here
		req.URL = &u
		if info.body != nil {
			req.Body = info.body.Lend()
		}
		start := time.Now()
		resp, err := pool.Transport.RoundTrip(req)
		end := time.Now()
		kind := proxy.Classify(err, out.Context())
		switch {
		case err != nil && info.body != nil && info.body.Err() != nil:
			kind = health.Client // the client's body broke the try
		case err != nil && ctx.Err() != nil && out.Context().Err() == nil:
			kind = health.Timeout // the total ran out
		}
		res := proxy.Result{
			Outcome: health.Outcome{Err: kind, Latency: end.Sub(start), At: end},
			Unsent:  err != nil && proxy.IsDialError(err),
			Spent:   info.body != nil && info.body.Spent(),
		}
		if resp != nil {
			res.Outcome.Status = resp.StatusCode
		}
		if f.Done(res) {
			if resp != nil {
				_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
				resp.Body.Close()
			}
			continue
		}
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
