//go:build linux && !norawio

package rawio

import (
	"os"
	"syscall"
	"unsafe"
)

// An Epoll is an epoll set handed to Go's poller: a goroutine waits on
// it as on a socket (the set is readable while any of its events is
// pending) and takes its events with PollNow, so an event loop of rotor's
// own holds no thread while idle and the scheduler runs it like any other
// goroutine.
type Epoll struct {
	FD   int
	File *os.File
	Raw  syscall.RawConn
}

// NewEpoll makes an epoll set and hands it to Go's poller. Closing File
// ends it.
func NewEpoll() (*Epoll, error) {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	// Non-blocking, so that os.NewFile hands it to Go's poller.
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	f := os.NewFile(uintptr(fd), "epoll")
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Epoll{FD: fd, File: f, Raw: raw}, nil
}

// EdgeTriggered is EPOLLET as the uint32 an event's mask is (syscall's
// constant is a negative int).
const EdgeTriggered = uint32(1) << 31

// PollNow returns the events pending on the epoll set ep, without
// waiting: a raw call, as it never blocks.
func PollNow(ep int, events []syscall.EpollEvent) (int, error) {
	return Again(func() (uintptr, syscall.Errno) {
		n, _, errno := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(ep),
			uintptr(unsafe.Pointer(unsafe.SliceData(events))), uintptr(len(events)), 0, 0, 0)
		return n, errno
	})
}
