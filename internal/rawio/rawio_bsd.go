//go:build unix && !linux && !norawio

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

// Send writes what fd takes of p now, again while the call is
// interrupted: a short count with no error when it took part of it,
// EAGAIN when it takes nothing.
func Send(fd uintptr, p []byte) (int, error) {
	for {
		n, err := syscall.Write(int(fd), p)
		if err != syscall.EINTR {
			if err != nil {
				return 0, err
			}
			return n, nil
		}
	}
}

// Peek looks at socket fd without taking from it or waiting: n is 1 when
// a byte is there, 0 with no error at its end; EAGAIN when nothing is.
func Peek(fd uintptr) (n int, err error) {
	var b [1]byte
	n, _, err = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return n, err
}
