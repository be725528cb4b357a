// Package tcp is rotor's layer-4 proxy: it accepts connections, runs each
// one's proxy.Flight (the client address is the key for key-based
// policies), dials the endpoint picked, and splices bytes both ways
// without reading them.
package tcp

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/proxy"
)

// Pool is a pool as the TCP proxy runs it: the lifecycle's pool, and
// where each endpoint listens. Immutable; a reload builds a new one.
type Pool struct {
	*proxy.Pool
	Addrs   map[string]string // host:port by endpoint name
	Connect time.Duration     // bounds each dial
}

// Proxy serves one tcp listener.
type Proxy struct {
	name  string
	pool  func() *Pool
	log   *slog.Logger
	obs   proxy.Observer
	conns *proxy.Conns

	mu   sync.Mutex
	ln   net.Listener // guarded by mu
	wg   sync.WaitGroup
	done atomic.Bool

	// Bytes counts bytes relayed, both ways.
	Bytes atomic.Int64
}

// New returns a proxy for the listener named name; pool gives the pool in
// force (a reload swaps it; open connections keep their endpoint).
// Connections are tracked in o.Conns.
func New(name string, pool func() *Pool, o proxy.Options) *Proxy {
	o = o.Normalize()
	return &Proxy{name: name, pool: pool, log: o.Log, obs: o.Observer, conns: o.Conns}
}

// Serve accepts on ln until Shutdown. It returns nil after Shutdown.
func (p *Proxy) Serve(ln net.Listener) error {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	var backoff proxy.AcceptBackoff
	if p.log != nil {
		backoff.Log = p.log.With("listener", p.name)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			if p.done.Load() {
				return nil
			}
			if backoff.Wait(err) {
				continue
			}
			return err
		}
		backoff.Accepted()
		p.wg.Add(1)
		go p.handle(c)
	}
}

// Shutdown stops accepting and waits for open connections to finish until
// ctx is done, then cuts the rest.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.done.Store(true)
	if p.ln != nil {
		p.ln.Close()
	}
	p.mu.Unlock()
	err := p.conns.Shutdown(ctx)
	p.wg.Wait()
	return err
}

// handle proxies one connection: a backend dialled in the pool's flight,
// then the two relayed (proxy.SpliceThen: in the event loop, with no
// goroutine waiting) until both directions end, and the connection
// recorded.
func (p *Proxy) handle(client net.Conn) {
	record := &proxy.Record{Listener: p.name, Kind: proxy.KindTCP, Client: client.RemoteAddr().String(), Start: time.Now()}
	var f *proxy.Flight
	// One session for the drain: the client, and the backend once
	// dialled. It ends once the connection is recorded.
	sess, ok := p.conns.Add(client)
	end := func(backend net.Conn) {
		if backend != nil {
			backend.Close()
		}
		client.Close()
		if f != nil {
			f.End()
			record.Attempts = f.Attempts()
		}
		record.Duration = time.Since(record.Start)
		p.obs.Served(record)
		sess.Done()
		p.wg.Done()
	}
	if !ok {
		record.Reason = "shutting_down"
		end(nil)
		return
	}
	pool := p.pool()
	record.Pool = pool.Name
	key, _, _ := net.SplitHostPort(record.Client)
	f = pool.Start(proxy.Request{Key: key, Idempotent: true, Hold: true})
	backend := p.dial(pool, f, record)
	if backend == nil {
		end(nil)
		return
	}
	if !sess.Replace(client, backend) {
		record.Reason = "shutting_down" // the drain's deadline passed while dialling
		end(backend)
		return
	}
	proxy.SpliceThen(client, backend, sess, func(in, out int64) {
		record.BytesIn, record.BytesOut = in, out
		if sess.Idled() {
			record.Reason = proxy.ReasonIdle
		}
		p.Bytes.Add(in + out)
		end(backend)
	})
}

// dial connects to the endpoint f picks, trying another while the flight
// allows; nil, with the record's reason, when none could be had.
func (p *Proxy) dial(pool *Pool, f *proxy.Flight, record *proxy.Record) net.Conn {
	for {
		ep, err := f.Next()
		if err != nil {
			record.Reason = proxy.Reason(err, health.NoError)
			p.log.Warn("no endpoint", "listener", p.name, "pool", pool.Name, "client", record.Client)
			return nil
		}
		record.Endpoint = ep.Name
		dialStart := time.Now()
		backend, err := net.DialTimeout("tcp", pool.Addrs[ep.Name], pool.Connect)
		kind := proxy.Classify(err, context.Background())
		if !f.Done(proxy.Result{Outcome: health.Outcome{Err: kind, Latency: time.Since(dialStart)}, Unsent: true}) {
			if err != nil {
				record.Reason = kind.String()
				p.log.Warn("dial failed", "listener", p.name, "endpoint", ep.Name, "error", err)
				return nil
			}
			return backend
		}
		p.log.Debug("dial failed, trying another endpoint", "listener", p.name, "endpoint", ep.Name, "error", err)
	}
}
