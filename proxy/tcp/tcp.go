// Package tcp is rotor's layer-4 proxy: it accepts connections, picks an
// endpoint by the pool's policy (the client address is the key for key-based
// policies), dials it, and splices bytes both ways without reading them.
package tcp

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/proxy"
)

// Proxy serves one tcp listener.
type Proxy struct {
	name string
	pool atomic.Pointer[proxy.Pool]
	log  *slog.Logger
	obs  proxy.Observer

	mu    sync.Mutex
	ln    net.Listener          // guarded by mu
	conns map[net.Conn]struct{} // guarded by mu: client connections open
	wg    sync.WaitGroup
	done  atomic.Bool

	// Bytes counts bytes relayed, both ways.
	Bytes atomic.Int64
}

// New returns a proxy for the listener named name.
func New(name string, pool *proxy.Pool, log *slog.Logger, obs proxy.Observer) *Proxy {
	if obs == nil {
		obs = proxy.NopObserver{}
	}
	p := &Proxy{name: name, log: log, obs: obs, conns: map[net.Conn]struct{}{}}
	p.pool.Store(pool)
	return p
}

// SetPool swaps the pool (reload); open connections keep their endpoint.
func (p *Proxy) SetPool(pool *proxy.Pool) { p.pool.Store(pool) }

// Serve accepts on ln until Shutdown. It returns nil after Shutdown.
func (p *Proxy) Serve(ln net.Listener) error {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if p.done.Load() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		p.mu.Lock()
		if p.done.Load() {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
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
	waited := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(waited)
	}()
	select {
	case <-waited:
		return nil
	case <-ctx.Done():
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		<-waited
		return ctx.Err()
	}
}

func (p *Proxy) handle(client net.Conn) {
	defer func() {
		client.Close()
		p.mu.Lock()
		delete(p.conns, client)
		p.mu.Unlock()
		p.wg.Done()
	}()
	start := time.Now()
	pool := p.pool.Load()
	key, _, _ := net.SplitHostPort(client.RemoteAddr().String())
	var tried []string
	for attempt := 1; attempt <= max(pool.Attempts, 1); attempt++ {
		pk, err := pool.Pick(balance.Request{Key: key}, tried)
		if err != nil {
			p.obs.Served(p.name, pool.Name, "", 503, time.Since(start))
			p.log.Warn("no endpoint", "listener", p.name, "pool", pool.Name, "client", client.RemoteAddr().String())
			return
		}
		addr := pool.Addrs[pk.Endpoint.Name]
		dialStart := time.Now()
		backend, err := net.DialTimeout("tcp", addr, pool.Connect)
		if err != nil {
			kind := proxy.Classify(err, context.Background())
			pk.Done(health.Outcome{Err: kind, Latency: time.Since(dialStart)})
			p.log.Warn("dial failed", "listener", p.name, "endpoint", pk.Endpoint.Name, "error", err)
			if kind == health.ConnectError || kind == health.Timeout {
				tried = append(tried, pk.Endpoint.Name)
				if attempt < pool.Attempts {
					p.obs.Retried(pool.Name)
				}
				continue
			}
			break
		}
		p.mu.Lock()
		p.conns[backend] = struct{}{}
		p.mu.Unlock()
		n := proxy.Splice(client, backend)
		p.mu.Lock()
		delete(p.conns, backend)
		p.mu.Unlock()
		backend.Close()
		p.Bytes.Add(n)
		d := time.Since(start)
		pk.Done(health.Outcome{Latency: d, At: time.Now()})
		p.obs.Served(p.name, pool.Name, pk.Endpoint.Name, 200, d)
		return
	}
	p.obs.Served(p.name, pool.Name, "", 502, time.Since(start))
}
