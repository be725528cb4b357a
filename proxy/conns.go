package proxy

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Conns tracks the connections a drain must wait for that net/http's
// Server.Shutdown does not: upgraded connections (WebSocket) and CONNECT
// tunnels, which it forgets once hijacked, and every TCP proxy connection.
// Shutdown waits for them up to a deadline, then closes what is left.
// The zero value is ready to use.
type Conns struct {
	mu      sync.Mutex
	open    map[*entry]struct{} // guarded by mu
	closing bool                // guarded by mu
	idle    chan struct{}       // guarded by mu; closed when closing and none open
}

type entry struct{ closers []io.Closer }

// Add tracks one session: closers are what Shutdown closes at its
// deadline (both sides of a tunnel, say). The returned done must be called
// once when the session ends. ok is false when a shutdown has begun: the
// caller should close the session at once (done is still to be called).
func (c *Conns) Add(closers ...io.Closer) (done func(), ok bool) {
	e := &entry{closers: closers}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open == nil {
		c.open = map[*entry]struct{}{}
	}
	c.open[e] = struct{}{}
	var once sync.Once
	return func() { once.Do(func() { c.remove(e) }) }, !c.closing
}

func (c *Conns) remove(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.open, e)
	if c.closing && len(c.open) == 0 && c.idle != nil {
		close(c.idle)
		c.idle = nil
	}
}

// Len returns the sessions open.
func (c *Conns) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.open)
}

// Shutdown waits until every session has ended or ctx is done; then it
// closes the sessions left and waits for them to end. It returns ctx's
// error when it had to close any.
func (c *Conns) Shutdown(ctx context.Context) error {
	c.mu.Lock()
	c.closing = true
	if len(c.open) == 0 {
		c.mu.Unlock()
		return nil
	}
	idle := make(chan struct{})
	c.idle = idle
	c.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
	}
	c.mu.Lock()
	var cut []io.Closer
	for e := range c.open {
		cut = append(cut, e.closers...)
	}
	c.mu.Unlock()
	for _, cl := range cut {
		_ = cl.Close()
	}
	<-idle
	return ctx.Err()
}

// CountingConn counts the bytes read from and written to a connection.
type CountingConn struct {
	net.Conn
	In, Out atomic.Int64
	onClose func()
	once    sync.Once
}

// NewCountingConn wraps c; onClose, when set, runs once on the first
// Close.
func NewCountingConn(c net.Conn, onClose func()) *CountingConn {
	return &CountingConn{Conn: c, onClose: onClose}
}

func (c *CountingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.In.Add(int64(n))
	return n, err
}

func (c *CountingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.Out.Add(int64(n))
	return n, err
}

// WriteTo copies what the connection reads to w until it ends, as Splice
// copies (see copyConn): io.Copy takes it, so an upgraded connection
// that ReverseProxy copies holds no 32 KiB buffer while it waits.
func (c *CountingConn) WriteTo(w io.Writer) (int64, error) { return copyConn(w, c) }

// ReadFrom writes what r reads to the connection until r ends, as WriteTo.
func (c *CountingConn) ReadFrom(r io.Reader) (int64, error) { return copyConn(c, r) }

// Close closes the connection and runs onClose once.
func (c *CountingConn) Close() error {
	err := c.Conn.Close()
	if c.onClose != nil {
		c.once.Do(c.onClose)
	}
	return err
}
