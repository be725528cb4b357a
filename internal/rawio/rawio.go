// Package rawio is the system calls rotor makes itself inside a
// syscall.RawConn's Read, where the net package's own retrying does not
// reach: a read and a write, each made again when a signal interrupts it.
package rawio

import "syscall"

// Read reads from fd into p, again while the call is interrupted (EINTR).
// It returns what read(2) does otherwise: EAGAIN when nothing is there.
func Read(fd uintptr, p []byte) (int, error) {
	for {
		n, err := syscall.Read(int(fd), p)
		if err != syscall.EINTR {
			return n, err
		}
	}
}

// Write writes p to fd until all of it is written, again while a call is
// interrupted; it stops at any other error (EAGAIN: the socket can take
// no more now) and returns how much was written before it.
func Write(fd uintptr, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := syscall.Write(int(fd), p[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}
