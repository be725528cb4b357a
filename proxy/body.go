package proxy

import (
	"io"
	"sync"
	"sync/atomic"
)

// Body wraps a client's request body for the tries that send it: it
// counts what was read, notes whether anything was (after which the body
// cannot be sent again), and keeps the error reading it hit, which is the
// client's fault (a malformed chunk, a body cut short or too slow), never
// an endpoint's.
type Body struct {
	rc  io.ReadCloser
	n   atomic.Int64
	mu  sync.Mutex
	err error // guarded by mu: the first read error other than EOF
}

// NewBody wraps rc.
func NewBody(rc io.ReadCloser) *Body { return &Body{rc: rc} }

func (b *Body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.n.Add(int64(n))
	if err != nil && err != io.EOF {
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	return n, err
}

// Close closes the client's body.
func (b *Body) Close() error { return b.rc.Close() }

// Len returns the bytes read so far.
func (b *Body) Len() int64 { return b.n.Load() }

// Spent reports whether any of it was read: it cannot be sent again.
func (b *Body) Spent() bool { return b.n.Load() > 0 }

// Err returns the error reading it hit, if any.
func (b *Body) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// Lend returns the body for one try: its Close does nothing, as a
// transport closes a request's body after each try and the next try must
// still have it.
func (b *Body) Lend() io.ReadCloser { return lent{b} }

type lent struct{ *Body }

func (lent) Close() error { return nil }
