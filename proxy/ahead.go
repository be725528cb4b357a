package proxy

import (
	"bytes"
	"io"
	"os"
	"runtime"
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
// to MaxAhead bytes and one more in memory, and past them, when spool is
// over MaxAhead, on into a temporary file until it has spool bytes and
// one more in all (nginx buffers a body to a file past its
// client_body_buffer_size). whole: it ended within what was read, n
// bytes, and goes on with its length; within MaxAhead it is in hand from
// now on (a lent body's Held and Take give it whole). Otherwise what was
// read goes first to the try that reads the body, before the rest.
// Nothing read ahead is spent: a try that fails before it takes the body
// leaves it whole for the next.
//
// ok is false when nothing was read: bodies read ahead hold the budget
// (64 MiB together), and this one goes on as it comes. Past MaxAhead,
// bodies spooled hold at most spoolBudget on disk together (1 GiB), and
// a body that would pass it, or whose file cannot be made or written,
// goes on with what was read so far first. An error is the client's body's, kept as
// any read's is (Err).
//
// The read is as bounded as the body's reads are (the listener's body
// timeout and maximum, proxy.LimitBody or the server's own).
func (b *Body) ReadAhead(spool int64) (n int64, whole, ok bool, err error) {
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
		b.keep(b.ahead, nil)
		return int64(got), true, true, nil
	case err != nil:
		return int64(got), false, true, err
	}
	if spool > MaxAhead {
		return b.spoolRest(spool, buf[:])
	}
	return int64(got), false, true, nil
}

// spoolBudget bounds the bytes bodies read ahead hold on disk at once.
var spoolBudget int64 = 1 << 30 // tests set it lower

var spoolHeld atomic.Int64

// createSpool makes a body's temporary file in $TMPDIR and removes it at
// once; name is the file's name where an open file cannot be removed
// (Windows), for drop to remove once it is closed. Tests make one that
// fails.
var createSpool = func() (f *os.File, name string, err error) {
	f, err = os.CreateTemp("", "rotor-body-")
	if err != nil {
		return nil, "", err
	}
	if os.Remove(f.Name()) != nil {
		name = f.Name()
	}
	return f, name, nil
}

// SpoolReady reports why bodies cannot be read ahead into a file, if they
// cannot: it makes one and drops it. Where they cannot, a body past
// MaxAhead goes on as it comes.
func SpoolReady() error {
	f, name, err := createSpool()
	if err != nil {
		return err
	}
	f.Close()
	if name != "" {
		os.Remove(name)
	}
	return nil
}

// spooled is the part of a body read ahead into a file: size bytes, of
// which the tries have taken off. It holds hold bytes of spoolBudget
// until dropped.
type spooled struct {
	f         *os.File
	name      string // the file's name while it could not be removed at once
	size, off int64  // off: read by the body's reads alone, one at a time
	hold      int64
	dropped   atomic.Bool
}

// spoolRest goes on reading the body past what ReadAhead read into
// memory (b.ahead), into a temporary file of its own, the file first
// holding what b.ahead held, until the body ends or limit bytes and one
// more are read, through buf (ReadAhead's, free again). Each piece takes
// its bytes of spoolBudget as it is written: a piece the budget or the
// disk does not take stays in memory after what the file has, and the
// rest goes on as it comes. The file is removed at once (where an open
// file can be), and closed, its budget given back, when a try has taken
// it all, the body is closed, or the body is no longer reachable.
func (b *Body) spoolRest(limit int64, buf []byte) (n int64, whole, ok bool, err error) {
	n = int64(len(b.ahead))
	if !takeSpool(n) {
		return n, false, true, nil
	}
	f, name, cerr := createSpool()
	if cerr != nil {
		spoolHeld.Add(-n)
		return n, false, true, nil // goes on as it comes
	}
	sp := &spooled{f: f, name: name, hold: n}
	if _, werr := f.Write(b.ahead); werr != nil {
		sp.drop()
		return n, false, true, nil
	}
	sp.size, b.ahead = n, nil
	defer func() {
		b.spool.Store(sp)
		runtime.AddCleanup(b, func(sp *spooled) { sp.drop() }, sp)
		if whole {
			b.keep(b.ahead, sp)
		}
	}()
	for n <= limit {
		k, rerr := b.read(buf[:min(int64(len(buf)), limit+1-n)])
		if k > 0 {
			n += int64(k)
			m := 0
			if takeSpool(int64(k)) {
				sp.hold += int64(k)
				m, _ = f.Write(buf[:k])
				sp.size += int64(m)
			}
			if m < k {
				// The budget or the disk took no more: what the file
				// has goes first, the rest of these bytes after it,
				// then the rest as it comes.
				b.ahead = bytes.Clone(buf[m:k])
				limit = n - 1
			}
		}
		switch {
		case rerr == io.EOF:
			return n, true, true, nil
		case rerr != nil:
			return n, false, true, rerr
		}
	}
	return n, false, true, nil
}

// takeSpool takes k bytes of spoolBudget, if it has them.
func takeSpool(k int64) bool {
	if spoolHeld.Add(k) > spoolBudget {
		spoolHeld.Add(-k)
		return false
	}
	return true
}

// readAt reads the file from off into p, up to its size. off is its
// reader's: the body's own (sp.off), or a try's after Again (resent).
func (sp *spooled) readAt(p []byte, off int64) (int, error) {
	k := min(int64(len(p)), sp.size-off)
	n, err := sp.f.ReadAt(p[:k], off)
	if n == int(k) {
		err = nil
	}
	return n, err
}

// drop closes the file and gives back its budget, once. A read of the
// file in flight fails (os.ErrClosed).
func (sp *spooled) drop() {
	if sp.dropped.Swap(true) {
		return
	}
	sp.f.Close()
	if sp.name != "" {
		os.Remove(sp.name)
	}
	spoolHeld.Add(-sp.hold)
}
