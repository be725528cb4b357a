//go:build !linux || norawio

package proxy

import "io"

// relayTCP: outside Linux, Splice copies with a goroutine a direction.
func relayTCP(a, b io.ReadWriteCloser, s *Session) (aToB, bToA int64, ok bool) { return 0, 0, false }

// relayTCPThen: outside Linux, SpliceThen copies with a goroutine a
// direction.
func relayTCPThen(a, b io.ReadWriteCloser, s *Session, then func(aToB, bToA int64)) bool {
	return false
}

// relayLoops: outside Linux, no loop relays connections.
func relayLoops() []LoopStats { return nil }
