package proxy

import (
	"bytes"
	"io"
	"sync"
	"sync/atomic"
)

// MaxAhead is the longest request body of no known length that is read
// whole before its request goes on (Body.ReadAhead), as long as the
// longest body with a length the short way's server reads whole first.
const MaxAhead = 64 << 10

// aheadBudget bounds the bytes requests hold at once of bodies being read
// ahead; past it a body goes on as it comes, unread.
var aheadBudget int64 = 64 << 20 // tests set it lower

var (
	aheadHeld    atomic.Int64
	aheadBuffers = sync.Pool{New: func() any { return new([aheadSize]byte) }}
)

// aheadSize is what a read ahead reads at most: MaxAhead, and one byte
// more that tells the body goes on.
const aheadSize = MaxAhead + 1

// ReadAhead reads the body ahead, before any try has taken any of it, up
// to MaxAhead bytes and one more. whole: it ended within MaxAhead bytes,
// n of them, and is in hand from now on (a lent body's Held and Take
// give it whole). Otherwise what was read goes first to the try that
// reads the body, before the rest. Nothing read ahead is spent: a try
// that fails before it takes the body leaves it whole for the next.
//
// ok is false when nothing was read: bodies read ahead hold the budget
// (64 MiB together), and this one goes on as it comes. An error is the
// client's body's, kept as any read's is (Err).
//
// The read is as bounded as the body's reads are (the listener's body
// timeout and maximum, proxy.LimitBody or the server's own).
func (b *Body) ReadAhead() (n int64, whole, ok bool, err error) {
	if aheadHeld.Add(aheadSize) > aheadBudget {
		aheadHeld.Add(-aheadSize)
		return 0, false, false, nil
	}
	defer aheadHeld.Add(-aheadSize)
	buf := aheadBuffers.Get().(*[aheadSize]byte)
	defer aheadBuffers.Put(buf)
	got := 0
	for got < aheadSize && err == nil {
		var k int
		k, err = b.read(buf[got:])
		got += k
	}
	// A copy of its own: a transport may still read the body after its
	// request has ended, and the buffer is another's by then.
	b.ahead = bytes.Clone(buf[:got])
	switch {
	case err == io.EOF:
		b.whole = true
		return int64(got), true, true, nil
	case err != nil:
		return int64(got), false, true, err
	}
	return int64(got), false, true, nil
}
