package proxy

import (
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/rotor-lb/rotor/internal/rawio"
)

// Splice copies both ways between a and b (connections, or streams such
// as an upgraded answer's body) until both directions end, and
// returns the bytes copied from a to b and from b to a. When one side
// stops sending, the other is told by a half-close, so protocols that
// finish by shutting one direction work. s, when not nil, is the drain's
// session for the two: its cut ends the splice (a and b may have been
// handed over, so closing them might not), and so does its tracker's
// tunnel bound when nothing moves either way for that long.
//
// Two plain TCP connections are relayed in rotor's event loop on Linux
// (see relay_linux.go), others with a goroutine a direction. Either way
// it copies through its own buffers, not the kernel's splice(2): io.Copy
// between two TCP connections would splice through a pair of pipes per
// direction, four descriptors more per connection, kept in a pool until a
// garbage collection. A proxied connection costs its two sockets and
// nothing else; an idle one holds no buffer (see copyConn).
func Splice(a, b io.ReadWriteCloser, s *Session) (aToB, bToA int64) {
	moves := s.watch()
	if aToB, bToA, ok := relayTCP(a, b, s); ok {
		return aToB, bToA
	}
	return copyBoth(a, b, moves)
}

// SpliceThen is Splice without the wait: it returns at once, and then
// gets the counts, in a goroutine of its own, once both directions have
// ended. Two plain TCP connections relayed in the event loop so cost no
// goroutine, and nothing of the caller's, while they last.
func SpliceThen(a, b io.ReadWriteCloser, s *Session, then func(aToB, bToA int64)) {
	moves := s.watch()
	if relayTCPThen(a, b, s, then) {
		return
	}
	go func() { then(copyBoth(a, b, moves)) }()
}

// LoopStats is what an event loop relaying TCP connections is doing.
type LoopStats struct {
	Relays int    // relays on the loop now
	Full   bool   // it keeps up no more: new relays go to another loop
	Moved  uint64 // relays it handed to another loop that kept up
}

// RelayLoops reports the event loops relaying plain TCP connections (on
// Linux), in the order new relays fill them: none before the first relay,
// then up to one a GOMAXPROCS.
func RelayLoops() []LoopStats { return relayLoops() }

// copyBoth copies both ways between a and b, one direction in a goroutine
// of its own and the other in the caller's, until both have ended; each
// direction's end is passed on as a half-close where dst has one. moves,
// when not nil, is bumped at each write.
func copyBoth(a, b io.ReadWriteCloser, moves *atomic.Uint64) (aToB, bToA int64) {
	cp := func(dst, src io.ReadWriteCloser) int64 {
		var w io.Writer = dst
		if moves != nil {
			w = movesWriter{dst, moves}
		}
		n, _ := copyConn(w, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			dst.Close()
		}
		return n
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		aToB = cp(b, a)
	}()
	bToA = cp(a, b)
	<-done
	return aToB, bToA
}

// movesWriter bumps moves at each write to w: the idle watch of a relay
// copied a goroutine a direction.
type movesWriter struct {
	w     io.Writer
	moves *atomic.Uint64
}

func (m movesWriter) Write(p []byte) (int, error) {
	m.moves.Add(1)
	return m.w.Write(p)
}

// waitBuffer is what one direction of a connection holds while it waits
// for bytes when it reads from something other than a socket (a wrapped
// or buffered connection; from a socket, copyRaw holds nothing while it
// waits). A read that fills it means more is coming: the copy goes on
// through a pooled copyBuffer until a read comes back short (the socket
// is drained), and gives it back before it waits again. An idle
// connection so holds 2 x 4 KiB, not 2 x 32 KiB that a burst once
// filled; a bulk transfer pays one small read each time the socket runs
// dry.
const waitBuffer = 4 << 10

// copyConn copies src to dst until src ends (io.EOF, reported as nil, as
// io.Copy does) or either fails, and returns the bytes written. From a
// socket it copies the raw way (copyRaw).
func copyConn(dst io.Writer, src io.Reader) (int64, error) {
	if sc, ok := src.(syscall.Conn); ok && rawio.Supported {
		if rr, err := sc.SyscallConn(); err == nil {
			return copyRaw(dst, rr)
		}
	}
	sp := waitBuffers.Get().(*[waitBuffer]byte)
	defer waitBuffers.Put(sp)
	small := sp[:]
	var total int64
	for {
		n, err := copyRead(dst, src, small, &total)
		if err != nil {
			return total, eof(err)
		}
		if n < len(small) {
			continue
		}
		big := copyBuffers.Get().(*[32 << 10]byte)
		for n == len(big) || n == len(small) {
			if n, err = copyRead(dst, src, big[:], &total); err != nil {
				copyBuffers.Put(big)
				return total, eof(err)
			}
		}
		copyBuffers.Put(big)
	}
}

func eof(err error) error {
	if err == io.EOF {
		return nil
	}
	return err
}

// copyRead reads once from src into buf and writes what came to dst: the
// bytes read, and an error when either side is done (io.EOF included).
func copyRead(dst io.Writer, src io.Reader, buf []byte, total *int64) (int, error) {
	n, rerr := src.Read(buf)
	if n > 0 {
		w, werr := dst.Write(buf[:n])
		*total += int64(w)
		if werr != nil {
			return n, werr
		}
		if w != n {
			return n, io.ErrShortWrite
		}
	}
	return n, rerr
}

var (
	copyBuffers = sync.Pool{New: func() any { return new([32 << 10]byte) }}
	// waitBuffers spares a connection that opens and closes at once an
	// allocation a direction.
	waitBuffers = sync.Pool{New: func() any { return new([waitBuffer]byte) }}
)

// copyRaw is copyConn from a socket: the same reads and writes, but the
// buffer is taken only when bytes came (in a raw read) and given back
// before the copy waits, so an idle direction holds none. Every short
// read is followed by one that finds nothing before the copy waits, as
// Go's Read does: waiting at once would save that read a message, but
// could sleep through the end of the stream when it came with the last
// bytes (one readiness for both, and the poller does not tell a
// half-close apart).
func copyRaw(dst io.Writer, rr syscall.RawConn) (int64, error) {
	var (
		total int64
		big   *[32 << 10]byte
	)
	defer func() {
		if big != nil {
			copyBuffers.Put(big)
		}
	}()
	var n int
	var err error
	read := func(fd uintptr) bool {
		if big == nil {
			big = copyBuffers.Get().(*[32 << 10]byte)
		}
		n, err = rawio.Read(fd, big[:])
		if err == syscall.EAGAIN {
			copyBuffers.Put(big)
			big = nil
			return false // wait for bytes
		}
		return true
	}
	for {
		if rerr := rr.Read(read); rerr != nil {
			return total, rerr
		}
		switch {
		case err != nil:
			return total, os.NewSyscallError("read", err)
		case n == 0:
			return total, nil // the end of the stream
		}
		w, werr := dst.Write(big[:n])
		total += int64(w)
		if werr != nil {
			return total, werr
		}
		if w != n {
			return total, io.ErrShortWrite
		}
		if n < len(big) {
			copyBuffers.Put(big) // drained: the wait holds no buffer
			big = nil
		}
	}
}
