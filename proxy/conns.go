package proxy

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Conns tracks the connections a drain must wait for that net/http's
// Server.Shutdown does not: upgraded connections (WebSocket) and CONNECT
// tunnels, which it forgets once hijacked, and every TCP proxy connection.
// Shutdown waits for them up to a deadline, then closes what is left.
// The zero value is ready to use.
//
// It also ends relayed sessions that move nothing either way for longer
// than its tunnel bound (SetTunnelIdle): HAProxy's `timeout tunnel`,
// nginx's `proxy_timeout`, Envoy's tcp_proxy `idle_timeout`.
type Conns struct {
	mu      sync.Mutex
	open    map[*Session]struct{} // guarded by mu
	closing bool                  // guarded by mu
	idle    chan struct{}         // guarded by mu; closed when closing and none open

	tunnel atomic.Int64 // the tunnel bound, in nanoseconds; 0: none
	sweep  *time.Timer  // the next look for idle relays, while one is due; guarded by mu
}

// A Session is one session Conns tracks: what a drain waits for and, at
// its deadline, cuts.
type Session struct {
	c    *Conns
	once sync.Once

	mu      sync.Mutex
	closers []io.Closer // guarded by mu
	cut     bool        // guarded by mu

	// The idle watch of a relayed session: moves is bumped as its bytes
	// move (by the relay, at most once a look of its loop); relaying,
	// seen and still are the sweep's, guarded by c.mu: the moves it saw
	// last and since when they have not changed.
	moves    atomic.Uint64
	relaying bool
	seen     uint64
	still    time.Time
	idled    atomic.Bool // cut for moving nothing past the tunnel bound
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

// SetTunnelIdle bounds how long a relayed session (a TCP connection, an
// upgraded one, a CONNECT tunnel) may move no byte either way: past it
// the session is cut, as a drain's deadline cuts it. It holds for the
// sessions relaying already too; 0 lifts the bound.
func (c *Conns) SetTunnelIdle(d time.Duration) {
	c.tunnel.Store(int64(max(d, 0)))
	c.mu.Lock()
	defer c.mu.Unlock()
	for s := range c.open {
		if s.relaying {
			c.schedule()
			return
		}
	}
}

// sweepEvery is how often the sessions are looked at for a tunnel bound
// of d: a tenth of it, between 10 ms and a second.
func sweepEvery(d time.Duration) time.Duration {
	return min(max(d/10, 10*time.Millisecond), time.Second)
}

// watch starts the session's idle watch as its relay begins, and
// returns what the relay bumps as its bytes move; nil for no session.
func (s *Session) watch() *atomic.Uint64 {
	if s == nil {
		return nil
	}
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	s.relaying, s.seen, s.still = true, s.moves.Load(), time.Now()
	c.schedule()
	return &s.moves
}

// schedule has the sweep look at the sessions after its interval, unless
// a look is due already or no bound is set; c.mu is held. The look runs
// on a timer, not in a goroutine that waits between looks: nothing is
// left running once the sessions have ended.
func (c *Conns) schedule() {
	if d := time.Duration(c.tunnel.Load()); c.sweep == nil && d > 0 {
		c.sweep = time.AfterFunc(sweepEvery(d), c.sweepIdle)
	}
}

// sweepIdle cuts the relaying sessions that moved nothing for the tunnel
// bound, and looks again later while any relays.
func (c *Conns) sweepIdle() {
	now := time.Now()
	bound := time.Duration(c.tunnel.Load())
	var idle []*Session
	c.mu.Lock()
	c.sweep = nil
	relaying := false
	for s := range c.open {
		switch m := s.moves.Load(); {
		case !s.relaying:
		case m != s.seen:
			s.seen, s.still = m, now
			relaying = true
		case bound > 0 && now.Sub(s.still) >= bound:
			s.relaying = false
			idle = append(idle, s)
		default:
			relaying = true
		}
	}
	if relaying {
		c.schedule()
	}
	c.mu.Unlock()
	for _, s := range idle {
		s.idled.Store(true)
		s.close()
	}
}

// ReasonIdle is a relayed session's Record.Reason when it was cut for
// moving nothing past its listener's tunnel bound.
const ReasonIdle = "idle"

// Idled reports whether the session was cut for moving nothing past the
// tunnel bound; false for no session.
func (s *Session) Idled() bool { return s != nil && s.idled.Load() }

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
