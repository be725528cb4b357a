//go:build unix && !norawio

package rawio

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

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

// Again makes a raw system call, and again while it is interrupted
// (EINTR), and returns its result as a count and an error. sys makes the
// call with its own arguments: a pointer among them must become a
// uintptr in the call's own expression, which a caller that converted it
// first and passed the number in would not do (a stack that moved in
// between would leave it pointing at the old one).
func Again(sys func() (r uintptr, errno syscall.Errno)) (int, error) {
	for {
		r, errno := sys()
		switch errno {
		case 0:
			return int(r), nil
		case syscall.EINTR:
		default:
			return 0, errno
		}
	}
}

// MaxVec is the most buffers Sendv sends in one call.
const MaxVec = 4

// iovecs points iov at bufs' non-empty buffers, MaxVec at the most, and
// returns how many it took: Sendv's vector.
func iovecs(iov *[MaxVec]unix.Iovec, bufs [][]byte) int {
	k := 0
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		if k == MaxVec {
			break
		}
		iov[k].Base = unsafe.SliceData(b)
		iov[k].SetLen(len(b))
		k++
	}
	return k
}

// Writev writes bufs to fd, in order, until all of them are written,
// again while a call is interrupted; it stops at any other error (EAGAIN:
// the socket can take no more now) and returns how much was written
// before it. bufs is left holding what was not written.
func Writev(fd uintptr, bufs [][]byte) (int, error) {
	n := 0
	for {
		for len(bufs) > 0 && len(bufs[0]) == 0 {
			bufs = bufs[1:]
		}
		if len(bufs) == 0 {
			return n, nil
		}
		m, err := Sendv(fd, bufs)
		if err != nil {
			return n, err
		}
		n += m
		for i := range bufs {
			k := min(m, len(bufs[i]))
			bufs[i] = bufs[i][k:]
			if m -= k; m == 0 {
				break
			}
		}
	}
}

// Shutdown shuts both directions of socket fd down.
func Shutdown(fd uintptr) error { return syscall.Shutdown(int(fd), syscall.SHUT_RDWR) }
