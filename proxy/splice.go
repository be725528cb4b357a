package proxy

import (
	"io"
	"net"
	"sync"
)

// Splice copies both ways between a and b until both directions end, and
// returns the bytes copied from a to b and from b to a. When one side
// stops sending, the other is told by a half-close, so protocols that
// finish by shutting one direction work.
//
// It copies through its own buffers, not the kernel's splice(2): io.Copy
// between two TCP connections would splice through a pair of pipes per
// direction, four descriptors more per connection, kept in a pool until a
// garbage collection. A proxied connection costs its two sockets and
// nothing else; see copyConn for the buffers.
func Splice(a, b net.Conn) (aToB, bToA int64) {
	var wg sync.WaitGroup
	cp := func(dst, src net.Conn, n *int64) {
		defer wg.Done()
		*n, _ = copyConn(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			dst.Close()
		}
	}
	wg.Add(2)
	go cp(b, a, &aToB)
	go cp(a, b, &bToA)
	wg.Wait()
	return aToB, bToA
}

// waitBuffer is what one direction of a connection holds while it waits
// for bytes. A read that fills it means more is coming: the copy goes on
// through a pooled copyBuffer until a read comes back short (the socket
// is drained), and gives it back before it waits again. An idle
// connection so holds 2 x 4 KiB, not 2 x 32 KiB that a burst once
// filled; a bulk transfer pays one small read each time the socket runs
// dry.
const waitBuffer = 4 << 10

// copyConn copies src to dst until src ends (io.EOF, reported as nil, as
// io.Copy does) or either fails, and returns the bytes written.
func copyConn(dst io.Writer, src io.Reader) (int64, error) {
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
