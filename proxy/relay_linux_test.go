//go:build !norawio

package proxy

import (
	"bytes"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// relayed joins a client end and a backend end through the loop l; done
// is closed once the relay ends.
func relayed(t *testing.T, l *loop) (client, backend *net.TCPConn, done <-chan struct{}) {
	client, a := tcpPair(t)
	b, backend := tcpPair(t)
	ch := make(chan struct{})
	if l.relay(a, b, nil, func(int64, int64) { close(ch) }) == nil {
		t.Fatal("the loop did not take the connections")
	}
	return client, backend, ch
}

// The loop takes turns: an exchange of small messages goes on while a
// transfer without end runs beside it on the same loop, and the
// transfer, whose reads run out of their budget a turn (with no new event
// to bring the loop back to it), is taken up again after the others'
// events. The loop's goroutine ends, and its epoll set is closed, with its
// last relay.
func TestRelayLoopIsShared(t *testing.T) {
	l := newLoop()
	bulkClient, bulkBackend, bulkDone := relayed(t, l)
	var stop atomic.Bool
	go func() { // writes until told to stop, as fast as it can
		chunk := make([]byte, 256<<10)
		for !stop.Load() {
			if _, err := bulkClient.Write(chunk); err != nil {
				return
			}
		}
		_ = bulkClient.CloseWrite()
	}()
	var received atomic.Int64
	go func() {
		n, _ := io.Copy(io.Discard, bulkBackend)
		received.Store(n)
		_ = bulkBackend.CloseWrite()
	}()

	client, backend, done := relayed(t, l)
	go func() { // echoes
		_, _ = io.Copy(backend, backend)
		_ = backend.CloseWrite()
	}()
	_ = client.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64)
	for i := range 300 {
		msg := []byte{byte(i), byte(i >> 8), 'x'}
		if _, err := client.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(client, buf[:len(msg)]); err != nil || !bytes.Equal(buf[:len(msg)], msg) {
			t.Fatalf("round trip %d beside the transfer: %v", i, err)
		}
	}
	if received.Load() != 0 {
		t.Fatal("the transfer ended before the exchange did: nothing was shared")
	}
	stop.Store(true)
	_ = client.CloseWrite()
	if rest, err := io.ReadAll(client); len(rest) != 0 || err != nil {
		t.Fatalf("after the exchange: %d bytes more, %v", len(rest), err)
	}
	for _, ch := range []<-chan struct{}{done, bulkDone} {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("a relay did not end after both its sides did")
		}
	}
	for _, c := range []net.Conn{client, backend, bulkClient, bulkBackend} {
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		l.mu.Lock()
		idle := l.ep == nil && l.live == 0
		l.mu.Unlock()
		if idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the loop kept its epoll set with no relay left")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// New relays go to as many loops as GOMAXPROCS is when each starts, not
// when the first did: Go changes it while running (a container's CPU
// limit), and a loop past it takes no new relay.
func TestRelayLoopsFollowGOMAXPROCS(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	started := func(k int) map[*loop]int {
		seen := map[*loop]int{}
		for range k {
			client, a := tcpPair(t)
			b, backend := tcpPair(t)
			done := make(chan struct{})
			r := startRelay(a, b, nil, func(int64, int64) { close(done) })
			if r == nil {
				t.Fatal("the connections were not relayed")
			}
			seen[r.l]++
			client.Close()
			backend.Close()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("a relay did not end after both its sides closed")
			}
		}
		return seen
	}
	runtime.GOMAXPROCS(3)
	if seen := started(6); len(seen) != 3 {
		t.Fatalf("GOMAXPROCS 3: six relays went to %d loops, want 3", len(seen))
	}
	runtime.GOMAXPROCS(1)
	if seen := started(4); len(seen) != 1 {
		t.Fatalf("GOMAXPROCS 1: four relays went to %d loops, want 1", len(seen))
	}
	runtime.GOMAXPROCS(4)
	if seen := started(8); len(seen) != 4 {
		t.Fatalf("GOMAXPROCS 4: eight relays went to %d loops, want 4", len(seen))
	}
}
