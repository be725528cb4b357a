//go:build !linux || norawio

package h1

// Outside Linux an idle connection waits for its next request with its
// goroutine, in Go's poller: there is no park (park_linux.go).
type park struct{}

var parks park

const canPark = false

type parkSlot struct{}

func (p *park) add(c *clientConn) bool   { return false }
func (p *park) close(c *clientConn) bool { return false }
func (p *park) next() *clientConn        { return nil }
