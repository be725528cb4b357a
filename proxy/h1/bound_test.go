package h1

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/internal/testtool"
)

// stuckPair returns a connection handed to net/http (prefixConn) bounded
// by stall, whose peer reads nothing, and that peer.
func stuckPair(t *testing.T, stall time.Duration) (*prefixConn, net.Conn) {
	t.Helper()
	peer, tc := testtool.TCPPair(t)
	rc, err := tc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return newPrefixConn(tc, rc, prefix{}, stall), peer
}

// A write to a peer that reads nothing fails once it has made no progress
// for the stall, having written what the sockets took; a deadline the
// connection's user sets nearer than the stall, or one set from another
// goroutine to cut the write, ends it at once, the bound not setting it
// again; and the user's deadline holds after the write.
func TestHandedWritesBounded(t *testing.T) {
	big := make([]byte, 64<<20)
	t.Run("the stall", func(t *testing.T) {
		c, _ := stuckPair(t, 300*time.Millisecond)
		start := time.Now()
		n, err := c.Write(big)
		if !errors.Is(err, os.ErrDeadlineExceeded) || n == 0 || n == len(big) {
			t.Fatalf("wrote %d of %d: %v, want part of it and the deadline", n, len(big), err)
		}
		if d := time.Since(start); d < 300*time.Millisecond || d > 5*time.Second {
			t.Fatalf("the write ended after %v, want the 300ms stall", d)
		}
	})
	t.Run("a nearer deadline of the user's", func(t *testing.T) {
		c, _ := stuckPair(t, time.Minute)
		if err := c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := c.Write(big); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%v, want the user's deadline", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("the write ended after %v, want the user's 200ms", d)
		}
		// Still the user's: the next write fails at once.
		start = time.Now()
		if _, err := c.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) > time.Second {
			t.Fatalf("%v after %v, want the deadline at once", err, time.Since(start))
		}
	})
	t.Run("cut from another goroutine", func(t *testing.T) {
		c, _ := stuckPair(t, time.Minute)
		time.AfterFunc(200*time.Millisecond, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
		start := time.Now()
		if _, err := c.Write(big); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%v, want the cut", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("the cut write ended after %v", d)
		}
	})
	t.Run("no bound", func(t *testing.T) {
		c, peer := stuckPair(t, 0)
		time.AfterFunc(time.Second, func() { peer.Close() })
		start := time.Now()
		if _, err := c.Write(big); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%v, want the peer's end", err)
		}
		if d := time.Since(start); d < time.Second {
			t.Fatalf("the write ended after %v, before the peer did", d)
		}
	})
}
