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
func Splice(a, b net.Conn) (aToB, bToA int64) {
	var wg sync.WaitGroup
	cp := func(dst, src net.Conn, n *int64) {
		defer wg.Done()
		*n, _ = io.Copy(dst, src)
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
