//go:build unix && !norawio

package rawio

import (
	"bytes"
	"syscall"
	"testing"
)

// Write sends all of p, and stops with EAGAIN, having written what fit,
// when a non-blocking pipe is full; Read gets the bytes back, and EAGAIN
// once the pipe is empty.
func TestReadWrite(t *testing.T) {
	var fds [2]int
	if err := syscall.Pipe(fds[:]); err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if err := syscall.SetNonblock(fd, true); err != nil {
			t.Fatal(err)
		}
	}
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	r, w := uintptr(fds[0]), uintptr(fds[1])

	msg := bytes.Repeat([]byte("rotor "), 100)
	if n, err := Write(w, msg); n != len(msg) || err != nil {
		t.Fatalf("Write: %d, %v; want %d, nil", n, err, len(msg))
	}
	got := make([]byte, 2*len(msg))
	if n, err := Read(r, got); err != nil || !bytes.Equal(got[:n], msg) {
		t.Fatalf("Read: %q, %v", got[:n], err)
	}
	if _, err := Read(r, got); err != syscall.EAGAIN {
		t.Fatalf("Read of an empty pipe: %v, want EAGAIN", err)
	}

	big := make([]byte, 4<<20) // more than a pipe holds
	n, err := Write(w, big)
	if err != syscall.EAGAIN || n <= 0 || n >= len(big) {
		t.Fatalf("Write to a pipe that fills: %d, %v; want part of it and EAGAIN", n, err)
	}
}
