package server

import (
	"errors"
	"net"
	"testing"
	"time"
)

// A socket handed over between two views: an Accept waiting in the old
// one returns at once, refused, and the socket stays open for the new
// one, which takes what came meanwhile (held in the backlog); the old
// view's Close leaves it open, the new one's closes it.
func TestSocketHandOver(t *testing.T) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s := newSocket(ln)
	old := s.first()
	accepted := make(chan error, 1)
	go func() {
		c, err := old.Accept()
		if c != nil {
			c.Close()
			err = errors.New("the old view took a connection")
		}
		accepted <- err
	}()
	time.Sleep(50 * time.Millisecond) // the Accept waits in the socket
	next := s.handOver(old)
	select {
	case err := <-accepted:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("the old view's Accept: %v, want net.ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the old view's Accept still waits after the handover")
	}
	if _, err := old.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("the old view accepts after the handover: %v", err)
	}
	// A client connecting before the new servers accept.
	c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	old.Close()
	sc, err := next.Accept()
	if err != nil {
		t.Fatalf("the new view: %v", err)
	}
	if sc.RemoteAddr().String() != c.LocalAddr().String() {
		t.Fatalf("the new view took %v, want the client at %v", sc.RemoteAddr(), c.LocalAddr())
	}
	sc.Close()
	next.Close()
	if _, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		t.Fatal("the socket is open after the new view closed it")
	}
}
