//go:build !linux || norawio

package h1

import (
	"syscall"

	"github.com/rotor-lb/rotor/internal/rawio"
)

// Outside Linux a connection waits for its next request, and for its
// backend's answer, in Go's poller: there is no ready queue
// (ready_linux.go).
type readyQueue struct{}

type waiter struct{}

var readySockets readyQueue

func (q *readyQueue) wait(w *waiter, fd uintptr) bool      { return false }
func (q *readyQueue) remove(w *waiter, rc syscall.RawConn) {}
func (w *waiter) init()                                    {}
func (w *waiter) poke()                                    {}
func (q *readyQueue) together(w *waiter)                   {}
func (q *readyQueue) inTurn(w *waiter) bool                { return false }
func (q *readyQueue) serving(d int32)                      {}

func (q *readyQueue) sendWithTurn(w *waiter, fd uintptr, p []byte) (int, error) {
	return rawio.Write(fd, p)
}
