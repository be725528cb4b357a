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
// It copies through pooled 32 KiB buffers, not the kernel's splice(2):
// io.Copy between two TCP connections would splice through a pair of
// pipes per direction, four descriptors more per connection, kept in a
// pool until a garbage collection. A proxied connection costs its two
// sockets and nothing else.
func Splice(a, b net.Conn) (aToB, bToA int64) {
	var wg sync.WaitGroup
	cp := func(dst, src net.Conn, n *int64) {
		defer wg.Done()
		buf := copyBuffers.Get().(*[32 << 10]byte)
		// Only Read and Write: io.CopyBuffer must not find ReadFrom or
		// WriteTo, which are what splice through pipes.
		*n, _ = io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, buf[:])
		copyBuffers.Put(buf)
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

var copyBuffers = sync.Pool{New: func() any { return new([32 << 10]byte) }}
