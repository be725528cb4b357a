//go:build unix && !norawio

package rawio

import "syscall"

// Supported: this system's sockets can be read and written raw.
const Supported = true

// Write writes p to fd until all of it is written, again while a call is
// interrupted; it stops at any other error (EAGAIN: the socket can take
// no more now) and returns how much was written before it.
func Write(fd uintptr, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := Send(fd, p[n:])
		if err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}

// Peek looks at socket fd without taking from it or waiting: n is 1 when
// a byte is there, 0 with no error at its end; EAGAIN when nothing is.
func Peek(fd uintptr) (n int, err error) {
	var b [1]byte
	n, _, err = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return n, err
}

// Shutdown shuts both directions of socket fd down.
func Shutdown(fd uintptr) error { return syscall.Shutdown(int(fd), syscall.SHUT_RDWR) }
