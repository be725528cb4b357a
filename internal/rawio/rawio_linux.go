//go:build linux && !norawio

package rawio

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// On Linux a socket is read and written with recvfrom(2) and sendto(2),
// as HAProxy does: they reach the socket without read(2)'s and write(2)'s
// layers of file I/O. The sockets are non-blocking, so no call blocks:
// each is made raw, without telling the scheduler, which on a request's
// path costs about a tenth of what the call does.

// Read reads from socket fd into p, again while the call is interrupted
// (EINTR). It returns what read(2) does otherwise: 0 at the end of the
// stream, EAGAIN when nothing is there.
func Read(fd uintptr, p []byte) (int, error) {
	return call(unix.SYS_RECVFROM, fd, p, 0)
}

// Send writes what socket fd takes of p now, again while the call is
// interrupted: a short count with no error when it took part of it,
// EAGAIN when it takes nothing. A peer gone is EPIPE, never SIGPIPE.
func Send(fd uintptr, p []byte) (int, error) {
	return call(unix.SYS_SENDTO, fd, p, syscall.MSG_NOSIGNAL)
}

// Sendv writes what socket fd takes now of bufs, in order, with one
// sendmsg(2), again while the call is interrupted: Send for several
// buffers, so that a chunk's size line, its bytes and its end leave in
// one call and one segment train rather than three. Empty buffers are
// skipped, and at most MaxVec are sent in a call (a short count, as when
// the socket takes part).
func Sendv(fd uintptr, bufs [][]byte) (int, error) {
	var iov [MaxVec]unix.Iovec
	k := iovecs(&iov, bufs)
	if k == 0 {
		return 0, nil
	}
	msg := unix.Msghdr{Iov: &iov[0]}
	msg.SetIovlen(k)
	return Again(func() (uintptr, syscall.Errno) {
		r, _, errno := syscall.RawSyscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&msg)), syscall.MSG_NOSIGNAL)
		return r, errno
	})
}

// Peek looks at socket fd without taking from it or waiting: n is 1 when
// a byte is there, 0 with no error at its end; EAGAIN when nothing is.
func Peek(fd uintptr) (int, error) {
	var b [1]byte
	return Look(fd, b[:])
}

// Look copies into p what socket fd holds, up to len(p), without taking
// it or waiting: 0 with no error at its end; EAGAIN when nothing is there.
func Look(fd uintptr, p []byte) (int, error) {
	return call(unix.SYS_RECVFROM, fd, p, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
}

func call(trap, fd uintptr, p []byte, flags uintptr) (int, error) {
	return Again(func() (uintptr, syscall.Errno) {
		r, _, errno := syscall.RawSyscall6(trap, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)), flags, 0, 0)
		return r, errno
	})
}

// Unsent returns the bytes socket fd holds that its peer has not
// acknowledged (SIOCOUTQ): what a writer waiting for room has left to
// go, which falls as the peer reads even while the socket is still too
// full to wake the writer. ok is false when it cannot be told.
func Unsent(fd uintptr) (n int, ok bool) {
	v, err := unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
	return v, err == nil
}
