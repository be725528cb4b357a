package proxy

import (
	"context"
	"io"
	"sync"
)

// Conns tracks the connections a drain must wait for that net/http's
// Server.Shutdown does not: upgraded connections (WebSocket) and CONNECT
// tunnels, which it forgets once hijacked, and every TCP proxy connection.
// Shutdown waits for them up to a deadline, then closes what is left.
// The zero value is ready to use.
type Conns struct {
	mu      sync.Mutex
	open    map[*Session]struct{} // guarded by mu
	closing bool                  // guarded by mu
	idle    chan struct{}         // guarded by mu; closed when closing and none open
}

// A Session is one session Conns tracks: what a drain waits for and, at
// its deadline, cuts.
type Session struct {
	c    *Conns
	once sync.Once

	mu      sync.Mutex
	closers []io.Closer // guarded by mu
	cut     bool        // guarded by mu
}

// Add tracks one session: closers are what Shutdown closes at its
// deadline (both sides of a tunnel, say). The session's Done must be
// called once it ends. ok is false when a shutdown has begun: the caller
// should close the session at once (Done is still to be called).
func (c *Conns) Add(closers ...io.Closer) (s *Session, ok bool) {
	s = &Session{c: c, closers: closers}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open == nil {
		c.open = map[*Session]struct{}{}
	}
	c.open[s] = struct{}{}
	return s, !c.closing
}

// Done ends the session; calls after the first do nothing.
func (s *Session) Done() { s.once.Do(func() { s.c.remove(s) }) }

// Replace makes what a cut closes closers instead, as when a session's
// second connection is dialled, or its connections are handed to another
// owner. It returns false, and replaces nothing, when the cut has come
// already: the caller closes closers itself.
func (s *Session) Replace(closers ...io.Closer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut {
		return false
	}
	s.closers = closers
	return true
}

// close cuts the session: its closers are closed, and any given to
// Replace later are refused.
func (s *Session) close() {
	s.mu.Lock()
	s.cut = true
	closers := s.closers
	s.mu.Unlock()
	for _, cl := range closers {
		_ = cl.Close()
	}
}

func (c *Conns) remove(s *Session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.open, s)
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
	cut := make([]*Session, 0, len(c.open))
	for s := range c.open {
		cut = append(cut, s)
	}
	c.mu.Unlock()
	for _, s := range cut {
		s.close()
	}
	<-idle
	return ctx.Err()
}
