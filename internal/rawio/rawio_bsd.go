//go:build unix && !linux && !norawio

package rawio

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

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

// Sendv writes what fd takes now of bufs, in order, with one writev(2),
// again while the call is interrupted; empty buffers are skipped, and at
// most MaxVec are sent in a call.
func Sendv(fd uintptr, bufs [][]byte) (int, error) {
	var iov [MaxVec]unix.Iovec
	k := iovecs(&iov, bufs)
	if k == 0 {
		return 0, nil
	}
	return Again(func() (uintptr, syscall.Errno) {
		r, _, errno := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(k))
		return r, errno
	})
}

// Peek looks at socket fd without taking from it or waiting: n is 1 when
// a byte is there, 0 with no error at its end; EAGAIN when nothing is.
func Peek(fd uintptr) (n int, err error) {
	var b [1]byte
	return Look(fd, b[:])
}

// Look copies into p what socket fd holds, up to len(p), without taking
// it or waiting: 0 with no error at its end; EAGAIN when nothing is there.
func Look(fd uintptr, p []byte) (n int, err error) {
	n, _, err = syscall.Recvfrom(int(fd), p, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return n, err
}

// Unsent cannot be told here: ok is false.
func Unsent(fd uintptr) (n int, ok bool) { return 0, false }
