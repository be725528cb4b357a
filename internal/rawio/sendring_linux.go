//go:build linux && !norawio

package rawio

import (
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A SendRing sends to several sockets in one system call: an io_uring
// whose sends are each made as it is submitted. Every send carries
// MSG_DONTWAIT, so none waits in the ring for room in its socket (it
// completes with EAGAIN instead, as Send does) and all have completed
// when the call returns.
//
// A send's socket wakes its reader as it is written. Sent one system
// call each, the sends of a busy core let each woken reader run (and, on
// a core shared with it, take the core from the sender) between one send
// and the next; sent in one call, the reader woken first finds the
// others' bytes there too when it runs.
//
// A SendRing is not safe for concurrent use.
type SendRing struct {
	fd      int
	sqRing  []byte
	cqRing  []byte
	sqeMem  []byte
	sqHead  *uint32
	sqTail  *uint32
	sqMask  uint32
	sqArray unsafe.Pointer
	cqHead  *uint32
	cqTail  *uint32
	cqMask  uint32
	cqes    unsafe.Pointer
	size    int
}

// A Sending is one send of a SendRing's batch: what socket FD takes now
// of P, as Send returns it (N, Err).
type Sending struct {
	FD  uintptr
	P   []byte
	N   int
	Err error
}

// The kernel's io_uring ABI (include/uapi/linux/io_uring.h), the part a
// ring of sends uses.
type (
	uringParams struct {
		sqEntries, cqEntries      uint32
		flags                     uint32
		sqThreadCPU, sqThreadIdle uint32
		features, wqFD            uint32
		resv                      [3]uint32
		sqOff                     sqOffsets
		cqOff                     cqOffsets
	}
	sqOffsets struct {
		head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
		userAddr                                                        uint64
	}
	cqOffsets struct {
		head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
		userAddr                                                        uint64
	}
	uringSQE struct {
		opcode      uint8
		flags       uint8
		ioprio      uint16
		fd          int32
		off         uint64
		addr        uint64
		len         uint32
		msgFlags    uint32
		userData    uint64
		bufIndex    uint16
		personality uint16
		spliceFDIn  int32
		addr3       uint64
		pad         uint64
	}
	uringCQE struct {
		userData uint64
		res      int32
		flags    uint32
	}
)

const (
	sysIOUringSetup = 425 // the same number on every architecture
	sysIOUringEnter = 426
	// IORING_SETUP_SUBMIT_ALL (Linux 5.18): a send whose submission fails
	// does not stop the ones after it. Kernels without it refuse the
	// ring, and with it they have IORING_OP_SEND (5.6).
	setupSubmitAll = 1 << 7
	opSend         = 26 // IORING_OP_SEND
	enterGetEvents = 1  // IORING_ENTER_GETEVENTS
	offCQRing      = 0x8000000
	offSQEs        = 0x10000000
)

// NewSendRing makes a ring for batches of up to size sends (a power of
// two, at most 4096). It fails where the kernel has no io_uring with
// what the ring needs (before 5.18), or refuses it (a seccomp filter, as
// container runtimes' defaults are; kernel.io_uring_disabled).
func NewSendRing(size int) (*SendRing, error) {
	p := uringParams{flags: setupSubmitAll}
	fd, _, errno := syscall.Syscall(sysIOUringSetup, uintptr(size), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, os.NewSyscallError("io_uring_setup", errno)
	}
	syscall.CloseOnExec(int(fd))
	r := &SendRing{fd: int(fd), size: int(p.sqEntries)}
	mmap := func(off int64, n uint32) ([]byte, error) {
		b, err := unix.Mmap(r.fd, off, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			r.Close()
			return nil, os.NewSyscallError("mmap", err)
		}
		return b, nil
	}
	var err error
	if r.sqRing, err = mmap(0, p.sqOff.array+p.sqEntries*4); err != nil {
		return nil, err
	}
	if r.cqRing, err = mmap(offCQRing, p.cqOff.cqes+p.cqEntries*uint32(unsafe.Sizeof(uringCQE{}))); err != nil {
		return nil, err
	}
	if r.sqeMem, err = mmap(offSQEs, p.sqEntries*uint32(unsafe.Sizeof(uringSQE{}))); err != nil {
		return nil, err
	}
	sq, cq := unsafe.Pointer(&r.sqRing[0]), unsafe.Pointer(&r.cqRing[0])
	r.sqHead = (*uint32)(unsafe.Add(sq, p.sqOff.head))
	r.sqTail = (*uint32)(unsafe.Add(sq, p.sqOff.tail))
	r.sqMask = *(*uint32)(unsafe.Add(sq, p.sqOff.ringMask))
	r.sqArray = unsafe.Add(sq, p.sqOff.array)
	r.cqHead = (*uint32)(unsafe.Add(cq, p.cqOff.head))
	r.cqTail = (*uint32)(unsafe.Add(cq, p.cqOff.tail))
	r.cqMask = *(*uint32)(unsafe.Add(cq, p.cqOff.ringMask))
	r.cqes = unsafe.Add(cq, p.cqOff.cqes)
	return r, nil
}

// Size is the most sends a batch may hold.
func (r *SendRing) Size() int { return r.size }

// Close ends the ring.
func (r *SendRing) Close() error {
	for _, m := range [][]byte{r.sqRing, r.cqRing, r.sqeMem} {
		if m != nil {
			unix.Munmap(m)
		}
	}
	return syscall.Close(r.fd)
}

// Send makes each of ss's sends (at most Size), in one system call as a
// rule, and sets each one's N and Err as Send would: a short count when
// its socket took part of it, EAGAIN when it took nothing. A batch of
// one is a Send, a sendto costing less than a ring's call. The sockets
// must be valid until Send returns.
func (r *SendRing) Send(ss []*Sending) {
	if len(ss) == 1 {
		ss[0].N, ss[0].Err = Send(ss[0].FD, ss[0].P)
		return
	}
	tail := atomic.LoadUint32(r.sqTail)
	for i, s := range ss {
		at := (tail + uint32(i)) & r.sqMask
		*(*uringSQE)(unsafe.Add(unsafe.Pointer(&r.sqeMem[0]), uintptr(at)*unsafe.Sizeof(uringSQE{}))) = uringSQE{
			opcode:   opSend,
			fd:       int32(s.FD),
			addr:     uint64(uintptr(unsafe.Pointer(unsafe.SliceData(s.P)))),
			len:      uint32(len(s.P)),
			msgFlags: syscall.MSG_DONTWAIT | syscall.MSG_NOSIGNAL,
			userData: uint64(i),
		}
		*(*uint32)(unsafe.Add(r.sqArray, uintptr(at)*4)) = at
	}
	atomic.StoreUint32(r.sqTail, tail+uint32(len(ss)))
	// Submitted, the sends are made before the call returns, and their
	// completions are there when it does: the call is raw (it does not
	// block). A submission cut short (a signal) is made again; a
	// completion not there yet (a kernel that queued a send after all) is
	// waited for, the scheduler told: the buffers are the kernel's until
	// it completes.
	for atomic.LoadUint32(r.sqHead) != tail+uint32(len(ss)) {
		left := tail + uint32(len(ss)) - atomic.LoadUint32(r.sqHead)
		_, _, errno := syscall.RawSyscall6(sysIOUringEnter, uintptr(r.fd), uintptr(left), 0, 0, 0, 0)
		if errno != 0 && errno != syscall.EINTR && errno != syscall.EAGAIN && errno != syscall.EBUSY {
			// The ring itself failed (it cannot, short of a kernel bug):
			// the sends not taken are withdrawn and failed.
			atomic.StoreUint32(r.sqTail, atomic.LoadUint32(r.sqHead))
			taken := atomic.LoadUint32(r.sqHead) - tail
			for _, s := range ss[taken:] {
				s.N, s.Err = 0, errno
			}
			ss = ss[:taken]
			break
		}
	}
	for got := 0; got < len(ss); {
		head, end := atomic.LoadUint32(r.cqHead), atomic.LoadUint32(r.cqTail)
		for ; head != end; head++ {
			c := (*uringCQE)(unsafe.Add(r.cqes, uintptr(head&r.cqMask)*unsafe.Sizeof(uringCQE{})))
			s := ss[c.userData]
			switch {
			case c.res == -int32(syscall.EINTR): // made again, as Send makes it
				s.N, s.Err = Send(s.FD, s.P)
			case c.res < 0:
				s.N, s.Err = 0, syscall.Errno(-c.res)
			default:
				s.N, s.Err = int(c.res), nil
			}
			got++
		}
		atomic.StoreUint32(r.cqHead, head)
		if got < len(ss) {
			syscall.Syscall6(sysIOUringEnter, uintptr(r.fd), 0, uintptr(len(ss)-got), enterGetEvents, 0, 0)
		}
	}
}
