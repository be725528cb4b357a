package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Body wraps a client's request body for the tries that send it: it
// counts what was read, notes whether anything was (after which the body
// cannot be sent again, unless all of it is kept), and keeps the error
// reading it hit, which is the client's fault (a malformed chunk, a body
// cut short or too slow), never an endpoint's. It also times its reads:
// what a try spent waiting for the client's bytes is the client's pace,
// not the endpoint's latency (TryLatency).
type Body struct {
	rc     io.ReadCloser
	got    atomic.Int64 // bytes read from rc
	n      atomic.Int64 // bytes tries have taken
	waited atomic.Int64 // nanoseconds spent in reads of rc
	mu     sync.Mutex
	err    error // guarded by mu: the first read error other than EOF
	// What ReadAhead read and no try has taken yet: after the file's
	// (spool), the rest of the body when it is kept (rc is at its end).
	ahead []byte
	// spool, when not nil, is what ReadAhead read past MaxAhead into a
	// file: it goes before ahead (what is left over of that read, if the
	// file took no more) and the rest.
	spool atomic.Pointer[spooled]
	// aborted: a transport gave up sending it (Abort), its backend's
	// connection gone; what reading it then fails with is not the
	// client's.
	aborted atomic.Bool
	// reading is held while a read of rc is in flight (ErrSettled).
	reading sync.Mutex
	// kept: all of the body is kept, in file (nil: none) and then all,
	// so that it can go again, whole, to another try (Again). Set once
	// the body is whole and none of it is to be read from the client
	// any more: read ahead to its end, or taken in hand (a try's Take or
	// first read of a body that came whole with its head). Its file
	// stays until the request ends (Release) or the body is closed, as
	// nginx keeps a buffered body until its request ends.
	kept atomic.Bool
	all  []byte
	file *spooled
	// again: Again was called, and each Lend from now on lends a reader
	// of its own (resent).
	again atomic.Bool
}

// NewBody wraps rc.
func NewBody(rc io.ReadCloser) *Body { return &Body{rc: rc} }

func (b *Body) Read(p []byte) (int, error) {
	if sp := b.spool.Load(); sp != nil {
		n, err := sp.readAt(p, sp.off)
		sp.off += int64(n)
		b.n.Add(int64(n))
		if sp.off == sp.size || err != nil {
			b.spool.Store(nil)
			if !b.kept.Load() {
				sp.drop() // no try after this one reads it
			}
		}
		if err != nil {
			return n, fmt.Errorf("%w: %w", ErrSpoolRead, err)
		}
		if n > 0 || len(p) == 0 {
			return n, nil
		}
	}
	if kept := b.kept.Load(); len(b.ahead) > 0 || kept {
		n := copy(p, b.ahead)
		b.ahead = b.ahead[n:]
		b.n.Add(int64(n))
		if len(b.ahead) == 0 && kept {
			return n, io.EOF
		}
		return n, nil
	}
	if b.got.Load() == 0 && b.keepInHand() {
		return b.Read(p)
	}
	n, err := b.read(p)
	b.n.Add(int64(n))
	return n, err
}

// keepInHand takes a body in hand (InHand) none of which was read whole
// into the body's own, kept, as the first read of it begins: it can go
// again.
func (b *Body) keepInHand() bool {
	h, ok := b.rc.(InHand)
	if !ok {
		return false
	}
	n := h.Held()
	if n < 0 {
		return false
	}
	p, ok := h.Take(n)
	if !ok {
		return false
	}
	b.got.Add(n)
	b.ahead = p
	b.keep(p, nil)
	return true
}

// keep notes that the whole body is kept: file's bytes (nil: none), then
// all's.
func (b *Body) keep(all []byte, file *spooled) {
	b.all, b.file = all, file
	b.kept.Store(true)
}

// read reads rc, timing the read and keeping its error.
func (b *Body) read(p []byte) (int, error) {
	b.reading.Lock()
	defer b.reading.Unlock()
	start := time.Now()
	n, err := b.rc.Read(p)
	b.waited.Add(int64(time.Since(start)))
	b.got.Add(int64(n))
	// A read that fails once the body was given up (Abort) fails for
	// that, not for the client, unless the client's own bounds ended it:
	// those are the client's whoever gave up after them.
	if err != nil && err != io.EOF && (!b.aborted.Load() || errors.Is(err, ErrBodyTimeout) || errors.Is(err, ErrBodyTooLarge)) {
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	return n, err
}

// Close closes the client's body, and drops what of it was spooled to
// disk.
func (b *Body) Close() error {
	if sp := b.spool.Swap(nil); sp != nil {
		sp.drop()
	}
	b.Release()
	return b.rc.Close()
}

// Release lets go of the file a kept body is in, once its request has
// ended (its answer passed on, or none to come): no try follows. A
// transport still sending the body from it then fails, as the exchange
// is over. Without it the file would wait for the body to be closed, or
// to be no longer reachable.
func (b *Body) Release() {
	if b.kept.Load() && b.file != nil {
		b.file.drop()
	}
}

// Len returns the bytes read from the client so far.
func (b *Body) Len() int64 { return b.got.Load() }

// Spent reports whether it cannot be sent again: a try took some of it
// and not all of it is kept (a body read ahead whole, or one in hand, is
// kept, and is never spent), or a try gave it up (Abort). What ReadAhead
// read is not spent until a try takes it.
func (b *Body) Spent() bool {
	return b.n.Load() > 0 && !b.kept.Load() || b.aborted.Load()
}

// Again readies a body for a try after the one that failed: a kept body
// (not Spent, though a try took it) is lent from its start to each try
// from now on, each reading apart from the others, as a transport may
// still be reading the last try's when the next begins. A body no try
// took goes on as it is.
func (b *Body) Again() {
	if b.kept.Load() {
		b.again.Store(true)
	}
}

// Waited returns the time reads of the body have taken so far: the
// client's upload, where a read waited for its bytes. A nil Body has
// waited for nothing.
func (b *Body) Waited() time.Duration {
	if b == nil {
		return 0
	}
	return time.Duration(b.waited.Load())
}

// TryLatency is the latency of a try that ran from start to end, less
// the time it spent waiting for the client's body (b's reads, of which
// waited had passed at start; b may be nil). An endpoint is judged on
// how long it took to answer once it had the request, as nginx's
// upstream times are taken after it has buffered the body: a slow
// client's upload is not the endpoint's slowness. A read still waiting
// at end (an endpoint answering before it took the whole body) is not
// taken off: the endpoint answered without it.
func TryLatency(b *Body, start, end time.Time, waited time.Duration) time.Duration {
	return max(end.Sub(start)-(b.Waited()-waited), 0)
}

// Err returns the error reading it hit, if any.
func (b *Body) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// BrokeTry reports whether the client's body b (nil: none) is what a try
// that failed broke on: a read of it failed. client is the request's
// context: when it has ended, a read still in flight is waited for (at
// most a second, ErrSettled), as a server may end the context as its
// read of the body fails, before that read has returned.
func BrokeTry(b *Body, client context.Context) bool {
	return b != nil && (b.Err() != nil || client.Err() != nil && b.ErrSettled(time.Second) != nil)
}

// ErrSettled is Err once a read in flight, if any, has returned, waiting
// for it at most within: for a request whose client's context ended
// while its body was being sent. Where the server ends the context as
// its read of the body fails (net/http's does, at the body's deadline
// too), the try may fail with the context's end before that read has
// returned its own error, which says whose fault it was (408, 413, 400
// rather than a client gone). A client truly gone ends the read at once
// too.
func (b *Body) ErrSettled(within time.Duration) error {
	for deadline := time.Now().Add(within); !b.reading.TryLock(); {
		if time.Now().After(deadline) {
			return b.Err()
		}
		time.Sleep(time.Millisecond)
	}
	b.reading.Unlock()
	return b.Err()
}

// Lend returns the body for one try: its Close does nothing, as a
// transport closes a request's body after each try and the next try must
// still have it. After Again, a kept body is lent whole, from its start,
// to each try.
func (b *Body) Lend() io.ReadCloser {
	if b.again.Load() {
		return &resent{b: b, file: b.file, mem: b.all}
	}
	return lent{b}
}

type lent struct{ *Body }

func (lent) Close() error { return nil }

// Abort ends the body for a transport whose connection to the backend
// is gone while it sends the body: a read of it that waits for the
// client is stopped (the client's body is closed, in a goroutine of its
// own, as a close may wait for a read in flight), and what that read
// fails with is not the client's fault. The body is spent.
func (l lent) Abort() {
	if l.kept.Load() {
		return // its reads wait for no client, and it can go again
	}
	if l.aborted.Swap(true) {
		return
	}
	go l.rc.Close()
}

// InHand is a body whose bytes are all in memory already (the short way's
// server read it whole before the request was served): a transport that
// sends it whole takes them rather than reading them into a buffer of its
// own.
type InHand interface {
	// Take returns the rest of the body, if it is n bytes, and leaves
	// the body ended; false (nothing taken) otherwise. The bytes are the
	// request's: the taker must not keep them past the request.
	Take(n int64) ([]byte, bool)
	// Held returns the body's length when all of it is in hand and none
	// of it was read, -1 otherwise: the length Take takes of a body of
	// no known length (a chunked one that came whole with its head).
	Held() int64
}

// Take takes the rest of a body in hand (InHand), counted as read.
func (l lent) Take(n int64) ([]byte, bool) {
	if l.spool.Load() != nil {
		return nil, false
	}
	if l.kept.Load() && l.n.Load() == 0 {
		if int64(len(l.ahead)) != n {
			return nil, false
		}
		p := l.ahead
		l.ahead = nil
		l.n.Add(n)
		return p, true
	}
	h, ok := l.rc.(InHand)
	if !ok {
		return nil, false
	}
	p, ok := h.Take(n)
	if ok {
		l.got.Add(int64(len(p)))
		l.n.Add(int64(len(p)))
		l.keep(p, nil)
	}
	return p, ok
}

// Held returns the length of a body in hand none of which was read
// (InHand), -1 for any other.
func (l lent) Held() int64 {
	if l.spool.Load() != nil {
		return -1 // on disk, not in hand
	}
	if l.kept.Load() {
		if l.n.Load() > 0 {
			return -1
		}
		return int64(len(l.ahead))
	}
	h, ok := l.rc.(InHand)
	if !ok || l.n.Load() > 0 {
		return -1
	}
	return h.Held()
}

// WriteTo sends the rest of the body to w in writes of up to CopyBuffer
// bytes. A transport copies a request body with io.Copy, which takes this
// when it is there: a large body goes out in large writes (and, chunked,
// in large chunks) instead of 32 KiB ones.
func (l lent) WriteTo(w io.Writer) (int64, error) { return Copy(w, l.Body) }

// resent is a kept body lent to a try after Again: the body from its
// start, file's bytes then mem's, read apart from any other try's.
type resent struct {
	b    *Body
	file *spooled
	off  int64 // read of file
	mem  []byte
	read bool // some of it was read
}

func (r *resent) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.read = true
	if r.file != nil && r.off < r.file.size {
		n, err := r.file.readAt(p, r.off)
		r.off += int64(n)
		r.b.n.Add(int64(n))
		if err != nil {
			return n, fmt.Errorf("%w: %w", ErrSpoolRead, err)
		}
		return n, nil
	}
	if len(r.mem) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.mem)
	r.mem = r.mem[n:]
	r.b.n.Add(int64(n))
	return n, nil
}

func (r *resent) Close() error { return nil }

// Abort does nothing: a kept body's reads wait for no client.
func (r *resent) Abort() {}

// Held returns the body's length while it is all in memory and none of
// it was read (InHand).
func (r *resent) Held() int64 {
	if r.file != nil || r.read {
		return -1
	}
	return int64(len(r.mem))
}

// Take takes the body whole, if it is in memory, none of it read, and n
// bytes (InHand).
func (r *resent) Take(n int64) ([]byte, bool) {
	if r.Held() != n {
		return nil, false
	}
	p := r.mem
	r.mem, r.read = nil, true
	r.b.n.Add(n)
	return p, true
}

// WriteTo is lent's.
func (r *resent) WriteTo(w io.Writer) (int64, error) { return Copy(w, r) }

// Copy copies src to dst through a lent buffer of CopyBuffer bytes,
// hiding dst's ReadFrom and src's WriteTo, whose own copies would go
// through smaller buffers (a socket's ReadFrom copies a reader it cannot
// splice 32 KiB at a time).
func Copy(dst io.Writer, src io.Reader) (int64, error) {
	buf := GetBuffer()
	defer PutBuffer(buf)
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, buf)
}

// CopyBuffer is the size of the buffers bodies are copied through: large
// enough that a 1 GiB body costs a few thousand writes, and that a
// chunked one goes out in chunks of this size.
const CopyBuffer = 256 << 10

var buffers = sync.Pool{New: func() any { return new([CopyBuffer]byte) }}

// GetBuffer lends a copy buffer of CopyBuffer bytes; PutBuffer gives it back.
func GetBuffer() []byte { return buffers.Get().(*[CopyBuffer]byte)[:] }

// PutBuffer gives back a buffer GetBuffer lent.
func PutBuffer(b []byte) { buffers.Put((*[CopyBuffer]byte)(b[:CopyBuffer])) }

// CopyAnswer copies an answer's body from src, a backend's, to dst, the
// client's, through a lent buffer, and says which side ended it early: a
// failed read (rerr, the backend's end, or the request's context) or a
// failed write (werr: the client is gone). Both nil: the body was whole.
// A caller whose head has gone out aborts the client's connection on
// either, so that a cut body is not taken for a whole one (a chunked
// answer would otherwise end with its last chunk).
//
// A dst that frames what it is given (Framer) says where in the buffer
// each read goes; a dst that flushes is flushed whenever a src that can
// tell (Pauser) has nothing more for now and is to wait for its backend.
func CopyAnswer(dst io.Writer, src io.Reader) (rerr, werr error) {
	whole := GetBuffer()
	defer PutBuffer(whole)
	if p, ok := src.(Pauser); ok {
		if f, ok := dst.(interface{ Flush() }); ok {
			p.WhenPaused(f)
			defer p.WhenPaused(nil)
		}
	}
	for {
		buf := WindowOf(dst, whole)
		n, err := src.Read(buf)
		if n > 0 {
			m, err := dst.Write(buf[:n])
			if err == nil && m < n {
				err = io.ErrShortWrite
			}
			if err != nil {
				return nil, err
			}
		}
		if err == io.EOF {
			return nil, nil
		}
		if err != nil {
			return err, nil
		}
	}
}

// A Pauser is an answer's body that can tell when the backend has sent
// nothing more for now: CopyAnswer has what it passed on flushed to the
// client then, before the wait, as nginx and HAProxy send what they have
// (a body of a known length is otherwise passed on in large writes, and
// a backend that pauses in one would have its first bytes wait with it).
type Pauser interface {
	WhenPaused(f interface{ Flush() })
}

// CutReason is the record's reason for an answer CopyAnswer ended early:
// "timeout" when the backend sent nothing of it for its pool's
// timeouts.read (ErrAnswerStalled), "broken" when the backend's side
// failed otherwise, "client_gone" when the client left (its write
// failed, or the request's context was cancelled).
func CutReason(rerr error) string {
	switch {
	case rerr == nil || errors.Is(rerr, context.Canceled):
		return "client_gone"
	case errors.Is(rerr, ErrAnswerStalled):
		return "timeout"
	}
	return "broken"
}

// ErrAnswerStalled is a read of an answer's body that waited its pool's
// timeouts.read for a byte (nginx's proxy_read_timeout, after the head):
// the backend stalled. A timeout (net.Error), as a deadline's.
var ErrAnswerStalled error = answerStalled{}

type answerStalled struct{}

func (answerStalled) Error() string {
	return "proxy: the backend sent nothing of its answer for its read timeout"
}
func (answerStalled) Timeout() bool   { return true }
func (answerStalled) Temporary() bool { return false }

// ErrSpoolRead is a failed read of a body kept in its temporary file:
// rotor's own fault (health.Local), neither the client's nor the
// endpoint's the try went to.
var ErrSpoolRead = errors.New("reading the request body spooled to disk")

// Errors a limited body returns: the client's, never an endpoint's.
var (
	// ErrBodyTooLarge: the body is over the listener's maximum (413).
	ErrBodyTooLarge = errors.New("request body too large")
	// ErrBodyTimeout: the client sent nothing for the body timeout (408).
	ErrBodyTimeout = errors.New("request body too slow")
)

// ClientStatus is the status for a request whose body failed with err:
// 413 too large, 408 too slow, 400 otherwise (malformed framing, a body
// cut short).
func ClientStatus(err error) int {
	switch {
	case errors.Is(err, ErrBodyTooLarge):
		return 413
	case errors.Is(err, ErrBodyTimeout):
		return 408
	}
	return StatusBadRequest
}

// ClientReason is ClientStatus's reason for records and metrics.
func ClientReason(err error) string {
	switch {
	case errors.Is(err, ErrBodyTooLarge):
		return "body_too_large"
	case errors.Is(err, ErrBodyTimeout):
		return "body_timeout"
	}
	return "bad_request"
}

// LimitBody holds a client's body to the listener's limits: at most max
// bytes (0: no limit), and at most timeout between two reads (0: none;
// nginx's client_body_timeout). deadline sets the connection's read
// deadline (an http.ResponseController's SetReadDeadline); it is set
// before each read and cleared at the end of the body, so the wait for the
// backend's answer is not bounded by it.
func LimitBody(rc io.ReadCloser, max int64, timeout time.Duration, deadline func(time.Time) error) io.ReadCloser {
	if max <= 0 && timeout <= 0 {
		return rc
	}
	return &limited{rc: rc, left: max, max: max, timeout: timeout, deadline: deadline}
}

type limited struct {
	rc       io.ReadCloser
	left     int64 // bytes still allowed, when max > 0
	max      int64
	timeout  time.Duration
	deadline func(time.Time) error
	done     bool
}

func (l *limited) Read(p []byte) (int, error) {
	if l.done {
		return 0, io.EOF
	}
	if l.max > 0 && int64(len(p)) > l.left+1 {
		p = p[:l.left+1] // one byte more than allowed tells the body is over
	}
	if l.timeout > 0 && l.deadline != nil {
		_ = l.deadline(time.Now().Add(l.timeout))
	}
	n, err := l.rc.Read(p)
	if l.max > 0 {
		if int64(n) > l.left {
			n = int(l.left)
			l.left = 0
			l.refuse()
			return n, ErrBodyTooLarge
		}
		l.left -= int64(n)
	}
	var ne interface{ Timeout() bool }
	switch {
	case err == io.EOF:
		// Read whole: the wait for the answer is not the body's.
		l.done = true
		if l.timeout > 0 && l.deadline != nil {
			_ = l.deadline(time.Time{})
		}
	case err != nil && errors.As(err, &ne) && ne.Timeout():
		l.refuse()
		return n, ErrBodyTimeout
	}
	return n, err
}

// refuse ends a body that broke a limit: what is left of it is not read
// (the deadline is now, so the server's own drain of an unread body gives
// up at once and the connection closes).
func (l *limited) refuse() {
	l.done = true
	if l.deadline != nil {
		_ = l.deadline(time.Now())
	}
}

func (l *limited) Close() error { return l.rc.Close() }
