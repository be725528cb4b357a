//go:build linux && !norawio

package rawio_test

import (
	"io"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/internal/rawio"
	"github.com/rotor-lb/rotor/internal/testtool"
)

// Unsent tells the bytes a TCP socket holds that its peer has not taken:
// none before a write, some once the peer's buffers are full and it reads
// nothing, fewer as it reads, none once it has read everything.
func TestUnsent(t *testing.T) {
	c, peer := testtool.TCPPair(t)
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	unsent := func() int {
		n, ok := -1, false
		_ = rc.Control(func(fd uintptr) { n, ok = rawio.Unsent(fd) })
		if !ok {
			t.Fatal("Unsent cannot tell on Linux")
		}
		return n
	}
	if n := unsent(); n != 0 {
		t.Fatalf("%d unsent before any write", n)
	}
	// Fill both sides' buffers: the writes end at the deadline (set again
	// if it passed before the first write began: a busy machine).
	var wrote int
	for wrote == 0 {
		_ = c.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
		wrote, _ = c.Write(make([]byte, 64<<20))
	}
	full := unsent()
	if full <= 0 || full > wrote {
		t.Fatalf("%d unsent after %d bytes written to a peer that reads nothing", full, wrote)
	}
	if _, err := io.ReadFull(peer, make([]byte, 256<<10)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for unsent() >= full {
		if time.Now().After(deadline) {
			t.Fatalf("still %d unsent after the peer read 256 KiB of %d", unsent(), full)
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := io.ReadFull(peer, make([]byte, wrote-256<<10)); err != nil {
		t.Fatal(err)
	}
	for unsent() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("still %d unsent after the peer read everything", unsent())
		}
		time.Sleep(time.Millisecond)
	}
}
