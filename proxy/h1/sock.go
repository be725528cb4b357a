package h1

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rotor-lb/rotor/internal/rawio"
	"github.com/rotor-lb/rotor/proxy"
)

// sock reads and writes a TCP connection through its raw descriptor with
// rawio (recvfrom and sendto on Linux, without telling the scheduler),
// waiting in Go's poller, with the connection's deadlines, when the
// socket has nothing to read or takes no more: what the connection's own
// Read and Write do through read(2) and write(2), a layer of file I/O
// and the scheduler's bookkeeping less on each call. Errors are the
// connection's: *net.OpError, a deadline's os.ErrDeadlineExceeded, io.EOF
// at the end of the stream. Used by one goroutine a direction at a time.
type sock struct {
	nc net.Conn        // immutable: for the addresses in errors
	rc syscall.RawConn // immutable

	rp      []byte
	rn      int
	rerr    error
	readFn  func(fd uintptr) bool // readStep, made once
	wp      []byte
	wv      [][]byte // Writev's buffers, in place of wp
	wn      int
	werr    error
	writeFn func(fd uintptr) bool // writeStep, made once
	ready   *waiter               // its connection's place in readySockets (nil: none): a write lets the turn run first (together)
	turn    bool                  // the write is to go with its turn's sends (readySockets.inTurn)
	// stall, when not 0, fails a write that makes no progress this long
	// (a client that reads nothing of its answer): a write deadline is
	// set when the socket takes no more, moved on each time it takes some
	// or, at the deadline, when what it holds unsent has fallen since
	// (unsent: the peer read, though not enough to wake the writer), and
	// cleared once the write is done (armed: one is set). A write the
	// socket takes at once sets none.
	stall  time.Duration
	armed  bool
	unsent int // the socket's bytes not yet taken by the peer when the deadline was set; -1: not known
	// readStall, when not 0, fails a read that waits this long for a byte
	// (a backend stalled in its answer) with proxy.ErrAnswerStalled: a
	// read deadline is set when the socket has nothing, and cleared once
	// the read is done (rarmed: one is set). A read that finds bytes sets
	// none. cut, when not nil, is its owner's cut, which sets a deadline
	// in the past from another goroutine: one set here never undoes it.
	readStall time.Duration
	rarmed    bool
	cut       *atomic.Bool
	// paused, when set, is flushed each time a read finds nothing and is
	// to wait: what was passed on of an answer goes to its client before
	// the backend's next bytes are waited for (proxy.Pauser).
	paused interface{ Flush() }
}

func newSock(nc net.Conn, rc syscall.RawConn) *sock {
	s := new(sock)
	s.init(nc, rc)
	return s
}

// init sets s up over nc's descriptor rc, for a sock held by value.
func (s *sock) init(nc net.Conn, rc syscall.RawConn) {
	*s = sock{nc: nc, rc: rc}
	s.readFn, s.writeFn = s.readStep, s.writeStep
}

func (s *sock) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.rp, s.rn, s.rerr = p, 0, nil
	err := s.rc.Read(s.readFn)
	n, rerr := s.rn, s.rerr
	s.rp = nil
	if s.rarmed {
		s.rarmed = false
		if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && !s.isCut() {
			err = proxy.ErrAnswerStalled
		}
		s.setReadDeadline(time.Time{})
	}
	switch {
	case rerr != nil:
		return n, s.opError("read", os.NewSyscallError("read", rerr))
	case err != nil:
		return n, err // closed, or past its deadline
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (s *sock) readStep(fd uintptr) bool {
	n, err := rawio.Read(fd, s.rp)
	if err == syscall.EAGAIN {
		if s.paused != nil {
			s.paused.Flush()
		}
		if s.readStall > 0 && !s.rarmed {
			s.rarmed = true // the wait that follows ends at the deadline
			s.setReadDeadline(time.Now().Add(s.readStall))
		}
		return false
	}
	s.rn, s.rerr = n, err
	return true
}

func (s *sock) isCut() bool { return s.cut != nil && s.cut.Load() }

func (s *sock) setReadDeadline(t time.Time) { setReadDeadline(s.nc, s.cut, t) }

// setReadDeadline sets nc's read deadline to t unless its owner has cut
// it (cut, when not nil, set before the cut's deadline in the past); a
// cut that came while it was set is set again.
func setReadDeadline(nc net.Conn, cut *atomic.Bool, t time.Time) {
	if cut != nil && cut.Load() {
		return
	}
	_ = nc.SetReadDeadline(t)
	if cut != nil && cut.Load() {
		_ = nc.SetReadDeadline(aLongTimeAgo)
	}
}

func (s *sock) Write(p []byte) (int, error) {
	s.turn = false
	if s.ready != nil {
		if s.wv != nil {
			readySockets.together(s.ready)
		} else {
			s.turn = readySockets.inTurn(s.ready)
		}
	}
	s.wp, s.wn, s.werr = p, 0, nil
	err := s.rc.Write(s.writeFn)
	for err != nil && s.armed && errors.Is(err, os.ErrDeadlineExceeded) && s.tookSome() {
		err = s.rc.Write(s.writeFn)
	}
	n, werr := s.wn, s.werr
	s.wp = nil
	if s.armed {
		s.armed = false
		_ = s.nc.SetWriteDeadline(time.Time{})
	}
	switch {
	case werr != nil:
		return n, s.opError("write", os.NewSyscallError("write", werr))
	case err != nil:
		return n, err
	}
	return n, nil
}

// Writev writes bufs in order, as Write writes one buffer, in a system
// call a turn where one Write a buffer would take one each. What is
// written is taken from bufs.
func (s *sock) Writev(bufs [][]byte) (int, error) {
	s.wv = bufs
	n, err := s.Write(nil)
	s.wv = nil
	return n, err
}

func (s *sock) writeStep(fd uintptr) bool {
	var n int
	var err error
	switch {
	case s.turn:
		s.turn = false
		n, err = readySockets.sendWithTurn(s.ready, fd, s.wp[s.wn:])
	case s.wv != nil:
		n, err = rawio.Writev(fd, s.wv)
	default:
		n, err = rawio.Write(fd, s.wp[s.wn:])
	}
	s.wn += n
	if err == syscall.EAGAIN {
		if s.stall > 0 && (n > 0 || !s.armed) {
			// The wait that follows ends at the deadline (Go's poller
			// reads it as it waits).
			s.armed = true
			s.unsent = unsent(fd)
			_ = s.nc.SetWriteDeadline(time.Now().Add(s.stall))
		}
		return false
	}
	s.werr = err
	return true
}

// tookSome says, at the stall's deadline, whether the peer took some of
// what the socket held since the deadline was set, and if so sets it
// again from now: a peer that reads slowly is not one that reads
// nothing, though the socket, woken only once a good part of it is free,
// may not have said so.
func (s *sock) tookSome() bool {
	now := -1
	_ = s.rc.Control(func(fd uintptr) { now = unsent(fd) })
	if now < 0 || s.unsent < 0 || now >= s.unsent {
		return false
	}
	s.unsent = now
	_ = s.nc.SetWriteDeadline(time.Now().Add(s.stall))
	return true
}

// unsent is rawio.Unsent, -1 when not known.
func unsent(fd uintptr) int {
	if n, ok := rawio.Unsent(fd); ok {
		return n
	}
	return -1
}

// opError is err as the connection's own Read or Write would return it.
func (s *sock) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: s.nc.LocalAddr(), Addr: s.nc.RemoteAddr(), Err: err}
}
