package server

import (
	"net"
	"sync"
	"time"
)

// socket is a listener's bound socket, which can outlive the servers
// that accept on it: a reload that changes how a listener serves at the
// same address (its kind, TLS, or a bound its servers took when they
// started) starts new servers on the same socket, while the old ones
// drain what they have, so that no connection is refused in between
// and none is accepted by a server on its way out. Each generation of
// servers accepts through a view of it.
type socket struct {
	ln *net.TCPListener

	mu      sync.Mutex
	pending []net.Conn // accepted by a view as it was handed over: the next view's first
}

func newSocket(ln *net.TCPListener) *socket { return &socket{ln: ln} }

// view is the socket as one generation of servers sees it: Accept takes
// from the socket until the view is handed over (or closed), and Close
// closes the socket unless the view was handed over first.
type view struct {
	s          *socket
	handedOver bool           // handed over to the next view (guarded by s.mu)
	closed     bool           // closed (guarded by s.mu)
	accepting  sync.WaitGroup // Accepts inside the socket's own
}

// first is the socket's first view.
func (s *socket) first() *view { return &view{s: s} }

// handOver ends v's accepting and returns the view that takes over:
// an Accept waiting in v returns (the socket's deadline interrupts it),
// and a connection it took meanwhile is the next view's first. Until the
// next view accepts, connections wait in the socket's backlog.
func (s *socket) handOver(v *view) *view {
	s.mu.Lock()
	v.handedOver = true
	s.mu.Unlock()
	_ = s.ln.SetDeadline(time.Unix(1, 0))
	v.accepting.Wait()
	_ = s.ln.SetDeadline(time.Time{})
	return &view{s: s}
}

func (v *view) Accept() (net.Conn, error) {
	s := v.s
	s.mu.Lock()
	if v.handedOver || v.closed {
		s.mu.Unlock()
		return nil, net.ErrClosed
	}
	if len(s.pending) > 0 {
		c := s.pending[0]
		s.pending = s.pending[1:]
		s.mu.Unlock()
		return c, nil
	}
	v.accepting.Add(1) // under mu: a handOver after this waits for it
	s.mu.Unlock()
	c, err := s.ln.Accept()
	s.mu.Lock()
	handed := v.handedOver
	if handed && err == nil {
		// Before Done: the next view, which handOver returns only
		// after it, takes this first.
		s.pending = append(s.pending, c)
	}
	s.mu.Unlock()
	v.accepting.Done()
	if handed {
		return nil, net.ErrClosed
	}
	return c, err
}

// Close closes the socket, unless v was handed over: its servers are on
// their way out, and the socket serves on in the next view's.
func (v *view) Close() error {
	s := v.s
	s.mu.Lock()
	if v.handedOver || v.closed {
		s.mu.Unlock()
		return nil
	}
	v.closed = true
	pending := s.pending
	s.pending = nil
	s.mu.Unlock()
	for _, c := range pending {
		c.Close()
	}
	return s.ln.Close()
}

func (v *view) Addr() net.Addr { return v.s.ln.Addr() }

// handed reports whether v was handed over.
func (v *view) handed() bool {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	return v.handedOver
}
