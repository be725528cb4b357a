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

// Shutdown shuts both directions of socket fd down.
func Shutdown(fd uintptr) error { return syscall.Shutdown(int(fd), syscall.SHUT_RDWR) }
