//go:build linux && !norawio

package rawio

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"testing"
)

// A SendRing's batch sends each socket its bytes, and reports each send
// as Send would, whatever the others did: all of it, a short count on a
// socket that takes part, EAGAIN on a full one, EPIPE to a peer gone,
// EBADF on no socket at all. Batches go on past the ring's size, as its
// entries wrap.
func TestSendRing(t *testing.T) {
	ring, err := NewSendRing(8)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("NewSendRing: %v", err)
		}
		t.Skipf("SKIP: this kernel gives no io_uring to send with (%v); rotor sends one system call at a time here", err)
	}
	defer ring.Close()
	if ring.Size() != 8 {
		t.Fatalf("Size: %d, want 8", ring.Size())
	}

	r1, w1 := pair(t)
	r2, w2 := pair(t)
	_, wShort := pair(t)
	_, wFull := pair(t)
	if n, err := Write(wFull, make([]byte, 4<<20)); err != syscall.EAGAIN {
		t.Fatalf("filling a socket: %d, %v", n, err)
	}
	gone, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(gone[1])
	syscall.Close(gone[0])
	none, err := syscall.Dup(int(w1))
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(none) // a number that is no descriptor now

	big := make([]byte, 4<<20)
	for round := range 10 {
		m1, m2 := fmt.Appendf(nil, "first %d", round), fmt.Appendf(nil, "second %d", round)
		ss := []*Sending{
			{FD: w1, P: m1},
			{FD: wShort, P: big},
			{FD: wFull, P: m1},
			{FD: uintptr(gone[1]), P: m1},
			{FD: uintptr(none), P: m1},
			{FD: w2, P: m2},
		}
		ring.Send(ss)
		if s := ss[0]; s.N != len(m1) || s.Err != nil {
			t.Fatalf("round %d, a socket with room: %d, %v", round, s.N, s.Err)
		}
		if s := ss[1]; round == 0 && (s.N <= 0 || s.N >= len(big) || s.Err != nil) {
			t.Fatalf("round 0, more than the socket holds: %d, %v; want a short count", s.N, s.Err)
		} else if round > 0 && (s.N != 0 || s.Err != syscall.EAGAIN) {
			t.Fatalf("round %d, the socket filled by round 0: %d, %v; want 0 and EAGAIN", round, s.N, s.Err)
		}
		if s := ss[2]; s.N != 0 || s.Err != syscall.EAGAIN {
			t.Fatalf("round %d, a full socket: %d, %v; want 0 and EAGAIN", round, s.N, s.Err)
		}
		if s := ss[3]; s.Err != syscall.EPIPE {
			t.Fatalf("round %d, a peer gone: %d, %v; want EPIPE", round, s.N, s.Err)
		}
		if s := ss[4]; s.Err != syscall.EBADF {
			t.Fatalf("round %d, no descriptor: %d, %v; want EBADF", round, s.N, s.Err)
		}
		if s := ss[5]; s.N != len(m2) || s.Err != nil {
			t.Fatalf("round %d, a send after the failures: %d, %v", round, s.N, s.Err)
		}
		for _, c := range []struct {
			fd   uintptr
			want []byte
		}{{r1, m1}, {r2, m2}} {
			got := make([]byte, 64)
			if n, err := Read(c.fd, got); err != nil || !bytes.Equal(got[:n], c.want) {
				t.Fatalf("round %d: read %q, %v; want %q", round, got[:n], err, c.want)
			}
		}
	}
}
