//go:build !linux

package proxy

import "net"

// relayTCP: outside Linux, Splice copies with a goroutine a direction.
func relayTCP(a, b net.Conn, s *Session) (aToB, bToA int64, ok bool) { return 0, 0, false }
