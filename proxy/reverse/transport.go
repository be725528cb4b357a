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

// cancelBody releases the request's deadline context when the response
// body is closed: the context must outlive roundTrip for the body to
// stream.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

// Unwrap returns the body it wraps, for h1's look through it.
func (b *cancelBody) Unwrap() io.ReadCloser { return b.ReadCloser }

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// roundTrip runs the request's proxy.Flight, sending out to each endpoint
// the flight picks until one answers for good. cancel, when not nil, ends
// out's context (the total's); it is called unless the answer's body
// streams, whose Close calls it.
func (h *Handler) roundTrip(out *http.Request, info *reqInfo, cancel context.CancelFunc) (answer *http.Response, _ error) {
	pool := info.pool
	f := &info.flight
	var began time.Time // the request's start, when the pool keeps the system's time
	if pool.Clock == nil {
		began = info.served
	}
	pool.Begin(f, proxy.Request{Key: info.key, Pin: info.pinned, Idempotent: proxy.Idempotent(out.Method), Hold: true, At: began})
	info.started = true
	if info.body != nil {
		// With no answer the client's body is done with. With one, the
		// transport may still be sending it as the answer comes (a
		// backend that answers an upload early, before the client has
		// sent it all); the server ends it once the answer is passed on.
		// Closed now, the transport's send would fail, and net/http would
		// cut the answer with the connection.
		defer func() {
			if answer == nil {
				info.body.Close()
			}
		}()
	}
	if cancel == nil {
		cancel = func() {}
	}
	ctx := out.Context()
	client := info.client // out's context without the total
	in := out.URL
	for try := 0; ; try++ {
		if err := client.Err(); err != nil {
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
		// The first try sends out itself; a later one a copy, as a
		// transport may still hold the request a failed try sent.
		req, u := out, &info.url
		if try > 0 {
			req, u = new(http.Request), new(url.URL)
			*req = *out
			if info.body != nil {
				req.Body = info.body.Lend() // kept whole: from its start
			}
		}
		target := pool.Targets[ep.Name]
		*u = *in
		u.Scheme, u.Host = target.Scheme, target.Host
		u.Path, u.RawPath = joinPath(target, in)
		u.RawQuery = info.query
		if target.RawQuery != "" {
			u.RawQuery = target.RawQuery + "&" + info.query
		}
		req.URL = u
		if !pool.Transport.Short(req) {
			// net/http's transport may go on writing the request after
			// its answer came: a later try's copy too shares the
			// header (info.header) and the trace (info.trace). The
			// request's own map, which the server takes back when the
			// handler returns, is not lent to it: it and the later
			// tries get a copy.
			if info.inPlace {
				out.Header = out.Header.Clone()
				req.Header, info.inPlace = out.Header, false
			}
			info.held = true
		}
		// The first try's start is the handler's, a few microseconds of
		// routing earlier: one reading of the clock fewer. Not the
		// record's, which may count the client's upload (h1.Began).
		start := info.served
		if try > 0 {
			start = time.Now()
		}
		waited := info.body.Waited()
		resp, err := pool.Transport.RoundTripTraced(req, &info.trace, info.read)
		end := time.Now()
		kind := proxy.Classify(err, client)
		switch {
		case kind == health.Local:
			// Rotor's own fault (Classify: the body's file, or no
			// socket to be had), whatever else ended meanwhile.
		case err != nil && proxy.BrokeTry(info.body, client):
			kind = health.Client // the client's body broke the try
		case err != nil && ctx.Err() != nil && client.Err() == nil:
			kind = health.Timeout // the total ran out
		}
		res := proxy.Result{
			Outcome: health.Outcome{Err: kind, Latency: proxy.TryLatency(info.body, start, end, waited), At: end},
			Unsent:  err != nil && proxy.IsDialError(err),
			Spent:   info.body != nil && info.body.Spent(),
		}
		if resp != nil {
			res.Outcome.Status = resp.StatusCode
		}
		if f.Done(res) {
			if info.body != nil {
				info.body.Again()
			}
			if resp != nil {
				_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
				resp.Body.Close()
			}
			continue
		}
		if info.total != nil {
			info.total.Stop()
		}
		if err != nil {
			cancel()
			info.kind = kind
			if kind == health.Timeout {
				return nil, errors.Join(proxy.ErrTimeout, err)
			}
			return nil, err
		}
		if info.total != nil && resp.StatusCode != http.StatusSwitchingProtocols {
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
