package h1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rotor-lb/rotor/internal/rawio"
	"github.com/rotor-lb/rotor/proxy"
)

// streamBody is a request body the short way reads as its handler reads
// it, as net/http's server does, where it is not read whole before the
// handler runs (startBody): one longer than maxInHand (or than the bytes
// the in-hand budget has left), and every chunked one. It reads what came
// with the head first, out of the connection's buffer, then the socket:
// over TLS through the TLS connection; in cleartext with a read of the
// connection's descriptor that does not wait (the handler runs inside the
// connection's raw read, which holds it) and, when the socket has nothing,
// through a second descriptor of it that waits in Go's poller, as the
// watch of a long request does. A chunked body's sizes, ends and trailer
// are read through the buffer, its data straight into the reader's bytes
// when none is buffered; a body of a known length is read straight into
// them. What comes after the body stays in the buffer: the next request.
//
// Its reads may come from another goroutine than the handler's (a
// transport that writes a request while it reads the answer) and go on
// after the handler has returned: the server ends the body then (end),
// which stops a read that waits and fails those after it, before the
// connection goes on. A request that asked for 100 Continue is sent it
// before the first read that waits for the body, unless the answer's head
// has gone out (as net/http sends it). What the handler left of the body
// is read and dropped once its answer is out (drain), so that the
// connection carries the next request, as nginx discards it: up to 256
// KiB (net/http's bound on what it reads of a body past its handler), in
// the body timeout (5 s when there is none). An answer whose head goes out
// before the body is read whole says the connection closes when the rest
// is not to be drained: more than that is known to be left, the client
// may be holding it back for a 100 Continue it was not sent, or the body
// failed; so does one whose drain does not come to the body's end.
//
// It is held to the server's limits, as proxy.LimitBody holds a body
// net/http's server reads: at most the server's body limit (SetBodyLimits; proxy.ErrBodyTooLarge
// past them), and each read waiting at most the body timeout
// (proxy.ErrBodyTimeout), or until the deadline the handler gave
// (http.ResponseController's SetReadDeadline); a chunk's size line and
// the trailer are held to the connection's buffer (4 KiB), as net/http
// holds them to its reader's.
type streamBody struct {
	c       *clientConn
	r       *http.Request
	fd      uintptr // the connection's descriptor (cleartext)
	chunked bool
	max     int64 // the server's body limit when the body began (0: none); a reload's new one holds for the next

	mu     sync.Mutex   // held by a read, and taken by end
	left   int64        // of a length: the bytes to come; chunked: of the chunk being read (guarded by mu)
	phase  int          // chunked: what comes next (guarded by mu)
	frame  chunkFraming // chunked: the framing read so far (guarded by mu)
	err    error        // what every read returns from now on: io.EOF once whole, or what broke the body (guarded by mu)
	closed bool         // closed by its reader, or ended (guarded by mu)
	got    atomic.Int64 // the body's bytes read so far (written under mu; read by the answer's head too)
	failed atomic.Bool  // the body failed: the client's framing, end, pace or size

	whole   atomic.Bool  // read to its end
	ending  atomic.Bool  // ended by the server: no read waits any longer
	by      atomic.Int64 // the reads' deadline SetReadDeadline gave, in ns since the epoch (0: none)
	byGiven atomic.Bool  // SetReadDeadline was called: by, not the server's body timeout, bounds the reads

	// endMu orders a Close against the server's end: a Close that comes
	// after it (a transport giving the body up once its connection is
	// gone, proxy's Abort) leaves the body to the server, whose drain may
	// be reading it by then (ended).
	endMu sync.Mutex
	ended bool // guarded by endMu

	contMu  sync.Mutex
	expect  bool // 100 Continue is owed (guarded by contMu)
	headOut bool // the answer's head is going out: 100 Continue no longer (guarded by contMu)

	waitMu sync.Mutex // guards waitF against end's deadline
	waitF  *os.File   // the second descriptor of the socket (cleartext), once a read has had to wait
	waitRC syscall.RawConn
	tlsBy  bool // a read deadline was set on a TLS connection
}

// Where a chunked body is.
const (
	chunkSize    = iota // a size line comes next
	chunkData           // the chunk's data (left bytes of it)
	chunkEnd            // the CRLF after a chunk's data
	chunkTrailer        // the trailer's lines, up to the empty one
)

// discardMax is the most of a body net/http's server would read past
// its handler, to keep the connection (its maxPostHandlerReadBytes).
const discardMax = 256 << 10

// Errors of a body read as its handler reads it: the client's.
var (
	errBodyCut     = errors.New("h1: request body cut short")
	errChunkLine   = errors.New("h1: malformed chunk size line")
	errChunkEnd    = errors.New("h1: chunk data not followed by CRLF")
	errLongTrailer = errors.New("h1: request trailer too long")
	errBadTrailer  = errors.New("h1: malformed request trailer")
	errChunkExcess = errors.New("h1: chunked request body holds too much besides its data")
	errBodyEnded   = errors.New("h1: request body read after its handler returned")
)

// startStream makes r's body one read as its handler reads it, unless it
// goes to net/http (false): a CONNECT with a body, a request that
// declares a trailer, and an Expect other than one 100-continue on
// HTTP/1.1, which net/http answers as it does.
func (c *clientConn) startStream(r *http.Request, expect bool, fd uintptr) bool {
	if r.Method == http.MethodConnect {
		return false
	}
	if _, ok := r.Header["Trailer"]; ok {
		return false // net/http's, which checks the names it declares and gives them to the request first
	}
	if expect {
		v := r.Header["Expect"]
		if r.ProtoMinor == 0 || len(v) != 1 || !strings.EqualFold(strings.TrimSpace(v[0]), "100-continue") {
			return false
		}
	}
	b := &streamBody{c: c, r: r, fd: fd, chunked: r.ContentLength < 0, left: r.ContentLength, expect: expect, max: c.s.maxBody.Load()}
	if b.chunked {
		b.left = 0
	}
	r.Body = b
	c.stream = b
	c.streaming.Store(true)
	return true
}

func (b *streamBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.readLocked(p)
}

// readLocked is Read with b.mu held, closed or not.
func (b *streamBody) readLocked(p []byte) (int, error) {
	switch {
	case b.err != nil:
		return 0, b.err
	case len(p) == 0:
		return 0, nil
	}
	max := b.max
	got := b.got.Load()
	if max > 0 && int64(len(p)) > max-got+1 {
		p = p[:max-got+1] // a byte more than allowed tells the body is over
	}
	var n int
	var err error
	if b.chunked {
		n, err = b.readChunked(p)
	} else {
		n, err = b.readLength(p)
	}
	if got += int64(n); max > 0 && got > max {
		n -= int(got - max)
		err = proxy.ErrBodyTooLarge
	}
	b.got.Store(got)
	if err == errBodyEnded {
		// Stopped by end, where it was: the drain reads on from there.
		return n, err
	}
	if err != nil {
		b.err = err
		// A body of a length the client's end cut short less than
		// 256 KiB before its end counts as read to it, as net/http's
		// does (its reader saw EOF, and it would discard that much): the
		// answer does not say close, and the connection's next read
		// finds the end. A chunked one cut short does not.
		if err == io.EOF || err == io.ErrUnexpectedEOF && !b.chunked && b.left < discardMax {
			if b.tlsBy {
				// The watch may read the connection from now on.
				_ = b.c.tc.SetReadDeadline(time.Time{})
				b.tlsBy = false
			}
			b.whole.Store(true)
			b.c.streaming.Store(false) // the connection may be watched from now on
		} else {
			b.failed.Store(true)
		}
	}
	return n, err
}

// Close closes the body to its reader: reads from now on fail, and one
// waiting for the client now is stopped (errBodyEnded) rather than waited
// for, so that a transport that gives the body up while its read of it
// waits (its connection to the backend gone) is not held until the body
// timeout. What is left is drained after the answer. Once the server has
// ended the body (its handler returned), Close does nothing.
func (b *streamBody) Close() error {
	b.endMu.Lock()
	if b.ended {
		b.endMu.Unlock()
		return nil // the server's now: its drain may be reading
	}
	if !b.whole.Load() {
		b.ending.Store(true)
		b.stopWait()
	}
	b.endMu.Unlock()
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return nil
}

func (b *streamBody) readLength(p []byte) (int, error) {
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n := b.fromBuffer(p)
	if n == 0 {
		var err error
		if n, err = b.readSocket(p); err != nil {
			return 0, err
		}
	} else if n < len(p) {
		n += b.readNow(p[n:])
	}
	b.left -= int64(n)
	if b.left == 0 {
		return n, io.EOF
	}
	return n, nil
}

// readChunked reads chunks' data into p until it is full, or until the
// next thing to read must be waited for and some data is read already.
func (b *streamBody) readChunked(p []byte) (n int, err error) {
	for n < len(p) {
		if b.phase == chunkData {
			q := p[n:]
			if int64(len(q)) > b.left {
				q = q[:b.left]
			}
			m := b.fromBuffer(q)
			if m == 0 && n > 0 {
				if m = b.readNow(q); m == 0 {
					return n, nil
				}
			} else if m == 0 {
				if m, err = b.readSocket(q); err != nil {
					return 0, err
				}
			}
			n += m
			if b.left -= int64(m); b.left == 0 {
				b.phase = chunkEnd
			}
			continue
		}
		if b.phase == chunkTrailer {
			ok, err := b.fill(n == 0, trailerAhead)
			if err != nil {
				return n, err
			}
			if !ok {
				return n, nil // the rest waits for the next read
			}
			return n, b.trailer()
		}
		line, ok, err := b.line(n == 0)
		if err != nil {
			return n, err
		}
		if !ok {
			return n, nil // the rest waits for the next read
		}
		switch b.phase {
		case chunkEnd:
			if len(line) != 0 {
				return n, errChunkEnd
			}
			b.phase = chunkSize
		case chunkSize:
			size, err := b.frame.size(line)
			if err != nil {
				return n, err
			}
			b.left, b.phase = size, chunkData
			if size == 0 {
				b.phase = chunkTrailer
			}
		}
	}
	return n, nil
}

// chunkFraming holds a chunked body's framing to what net/http's
// chunked reader takes (both ways of reading one, streamBody and
// wholeChunks, go by it): a size line, its CRLF included, within that
// reader's 4 KiB buffer, and all the framing (size lines, and the CRLF
// after each chunk's data) at most 16 KiB over 16 bytes a chunk and
// twice the data, so that extensions, which are read and dropped, cannot
// make a body mostly bytes besides its data (Go's fix for CVE-2023-39326,
// which the short way would otherwise not have).
type chunkFraming struct {
	excess int64
}

// maxChunkLine is the longest size line taken, its CRLF included.
const maxChunkLine = bufSize

// size reads the size line of the next chunk, line without its CRLF.
func (f *chunkFraming) size(line []byte) (int64, error) {
	if len(line)+2 > maxChunkLine {
		return 0, errChunkLine
	}
	n, ok := chunkSizeOf(line)
	if !ok {
		return 0, errChunkLine
	}
	f.excess = max(f.excess+int64(len(line))+2-16-2*n, 0)
	if f.excess > 16<<10 {
		return 0, errChunkExcess
	}
	return n, nil
}

// chunkSizeOf reads a chunk's size line as net/http's chunked reader
// does: hexadecimal digits, then whatever extension after a semicolon
// (ignored), whitespace at the end dropped; at most 15 digits here. A
// CR anywhere in it (its CRLF taken off) is refused, as net/http
// refuses one before the line's end.
func chunkSizeOf(line []byte) (int64, bool) {
	if bytes.IndexByte(line, '\r') >= 0 {
		return 0, false
	}
	line = bytes.TrimRight(line, " \t")
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	if len(line) == 0 || len(line) > 15 {
		return 0, false
	}
	n := int64(0)
	for _, c := range line {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | int64(d)
	}
	return n, true
}

// line takes the next line of the body's framing out of the buffer,
// without its CRLF; ok false: it is not all buffered, or in the socket,
// and may not be waited for. A line longer than the buffer is an error,
// and so is one that ends in a bare LF: a size line or a chunk's end
// needs its CR, as in net/http.
func (b *streamBody) line(wait bool) (line []byte, ok bool, err error) {
	if ok, err = b.fill(wait, hasLine); !ok {
		return nil, false, err
	}
	c := b.c
	i := bytes.IndexByte(c.buf[c.r:c.w], '\n')
	end := c.r + i
	if i == 0 || c.buf[end-1] != '\r' {
		return nil, false, errChunkLine
	}
	line = c.buf[c.r : end-1]
	c.r = end + 1
	return line, true, nil
}

func hasLine(p []byte) bool { return bytes.IndexByte(p, '\n') >= 0 }

// trailerAhead reports whether the trailer can be read from p, as
// net/http's body reader decides it: an empty one (CRLF), or lines with
// a CRLF CRLF somewhere ahead within its buffer, which it waits for
// (it will not read an unbounded trailer line by line). So a trailer
// that opens with a bare LF ends the body only once a CRLF CRLF came.
func trailerAhead(p []byte) bool {
	return len(p) >= 2 && (p[0] == '\r' && p[1] == '\n' || bytes.Contains(p, crlf2))
}

var crlf2 = []byte("\r\n\r\n")

// trailer takes the trailer, all of it buffered (trailerAhead), out of
// the buffer, and gives its fields to the request: io.EOF, the body's
// end. It is read as net/http reads it, as a header (textproto: lines
// may end in a bare LF, and continue on the next after a space), up to
// its first empty line.
func (b *streamBody) trailer() error {
	c := b.c
	p := c.buf[c.r:c.w]
	if p[0] == '\r' && p[1] == '\n' {
		c.r += 2
		return io.EOF
	}
	end := 0
	for {
		i := bytes.IndexByte(p[end:], '\n')
		line := p[end : end+i]
		end += i + 1
		if len(line) == 0 || len(line) == 1 && line[0] == '\r' {
			break
		}
	}
	h, err := textproto.NewReader(bufio.NewReaderSize(bytes.NewReader(p[:end]), bufSize)).ReadMIMEHeader()
	if err != nil {
		return errBadTrailer
	}
	c.r += end
	if b.r.Trailer == nil {
		b.r.Trailer = make(http.Header, len(h))
	}
	for k, v := range h {
		b.r.Trailer[k] = v
	}
	return io.EOF
}

// fill reads into the connection's buffer until ready holds of what is
// in it, within the first bufSize bytes (net/http's reader looks for a
// line, or a trailer's end, within its 4 KiB buffer, which a connection
// holding the long buffer keeps to as well); ok false: it does not yet,
// and the socket has nothing more that may be taken without waiting.
// bufSize bytes held first are an error.
func (b *streamBody) fill(wait bool, ready func([]byte) bool) (ok bool, err error) {
	c := b.c
	for now := true; ; {
		if c.buf != nil && ready(c.buf[c.r:min(c.w, c.r+bufSize)]) {
			return true, nil
		}
		if !wait && !now {
			return false, nil
		}
		if c.buf == nil {
			c.take()
		}
		c.compact()
		if c.w >= bufSize {
			if b.phase == chunkTrailer {
				return false, errLongTrailer
			}
			return false, errChunkLine
		}
		var n int
		if wait {
			if n, err = b.readSocket(c.buf[c.w:]); err != nil {
				return false, err
			}
		} else if n, now = b.readNow(c.buf[c.w:]), false; n == 0 {
			c.release()
			return false, nil
		}
		c.w += n
	}
}

// fromBuffer copies into p what the connection's buffer holds.
func (b *streamBody) fromBuffer(p []byte) int {
	c := b.c
	if c.buf == nil || c.r == c.w {
		return 0
	}
	n := copy(p, c.buf[c.r:c.w])
	c.r += n
	if c.r == c.w {
		c.release()
	}
	return n
}

// readNow reads into p what the socket holds now, without waiting, so
// that a read of the body gives its reader all that has come (and the
// transport sends it on in fewer, larger pieces): 0 when the socket
// holds nothing, or on its end or an error, which the next read that
// waits meets. Over TLS, nothing: a read of the TLS connection may wait.
func (b *streamBody) readNow(p []byte) int {
	if b.c.tls != nil || b.ending.Load() || len(p) == 0 {
		return 0
	}
	n, err := rawio.Read(b.fd, p)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// readSocket reads what the socket has into p, waiting for it up to the
// reads' deadline: at least a byte, or an error (io.ErrUnexpectedEOF at
// the client's end, proxy.ErrBodyTimeout past the deadline).
func (b *streamBody) readSocket(p []byte) (int, error) {
	b.sendContinue()
	by := b.deadline()
	c := b.c
	if c.tls != nil {
		_ = c.tc.SetReadDeadline(by)
		b.tlsBy = true
		if b.ending.Load() {
			return 0, errBodyEnded
		}
		n, err := c.tls.Read(p)
		if n == 0 && b.ending.Load() {
			return 0, errBodyEnded // stopped by end
		}
		return readResult(n, err)
	}
	if b.waitF == nil {
		n, err := rawio.Read(b.fd, p)
		if err != syscall.EAGAIN {
			return readResult(n, os.NewSyscallError("read", err))
		}
		if err := b.openWait(); err != nil {
			return 0, err
		}
	}
	_ = b.waitF.SetReadDeadline(by)
	if b.ending.Load() {
		return 0, errBodyEnded
	}
	var n int
	var rerr error
	err := b.waitRC.Read(func(fd uintptr) bool {
		n, rerr = rawio.Read(fd, p)
		return rerr != syscall.EAGAIN
	})
	if err != nil {
		if b.ending.Load() {
			return 0, errBodyEnded // stopped by end
		}
		return readResult(0, err) // past the deadline (os.ErrDeadlineExceeded)
	}
	return readResult(n, os.NewSyscallError("read", rerr))
}

// readResult is what a read of the socket says of the body: an end
// before the body's is a cut body.
func readResult(n int, err error) (int, error) {
	switch {
	case n > 0:
		return n, nil
	case err == nil, err == io.EOF:
		return 0, io.ErrUnexpectedEOF
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return 0, errors.Join(proxy.ErrBodyTimeout, err)
	}
	return 0, errors.Join(errBodyCut, err)
}

// openWait opens the second descriptor of the socket that reads wait on.
func (b *streamBody) openWait() error {
	f, err := b.c.tc.File()
	if err != nil {
		return err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return err
	}
	b.waitMu.Lock()
	b.waitF, b.waitRC = f, rc
	b.waitMu.Unlock()
	return nil
}

// deadline is when the next read of the body must have come: what
// SetReadDeadline gave, else the server's body timeout from now.
func (b *streamBody) deadline() time.Time {
	if b.byGiven.Load() {
		if ns := b.by.Load(); ns != 0 {
			return time.Unix(0, ns)
		}
		return time.Time{}
	}
	if d := b.c.s.bodyTimeout(); d > 0 {
		return time.Now().Add(d)
	}
	return time.Time{}
}

// setDeadline bounds the body's reads from now on (SetReadDeadline).
func (b *streamBody) setDeadline(t time.Time) {
	ns := int64(0)
	if !t.IsZero() {
		ns = max(t.UnixNano(), 1)
	}
	b.by.Store(ns)
	b.byGiven.Store(true)
	if !t.IsZero() && !t.After(time.Now()) {
		b.stopWait() // a deadline past ends a read that waits now
	}
}

// sendContinue sends the 100 Continue the request asked for, once,
// unless the answer's head has gone out.
func (b *streamBody) sendContinue() {
	b.contMu.Lock()
	defer b.contMu.Unlock()
	if !b.expect {
		return
	}
	b.expect = false
	if b.headOut {
		return
	}
	// A failed write leaves the client's end, or its silence, to the read.
	if b.c.tls != nil {
		_, _ = b.c.tls.Write(continue100)
	} else {
		_, _ = b.c.tc.Write(continue100)
	}
}

// headGoesOut says the answer's head is about to be written, and whether
// the connection may carry another request after it: the body was read
// whole, or what is left of it is to be drained after the answer (false:
// the answer says the connection closes).
func (b *streamBody) headGoesOut() (keep bool) {
	b.contMu.Lock()
	b.headOut = true
	owed := b.expect
	b.contMu.Unlock()
	if b.whole.Load() {
		return true
	}
	return !owed && !b.failed.Load() && (b.chunked || b.r.ContentLength-b.got.Load() <= discardMax)
}

// drainWait bounds a drain when the server has no body timeout
// (nginx's lingering_timeout).
const drainWait = 5 * time.Second

// drain reads what is left of the body and drops it, once its handler
// has returned (end) and its answer is out: up to discardMax bytes,
// within the body timeout, or drainWait when there is none, from now. It
// reports whether the body came to its end: if not, the connection
// closes. Called by the connection's goroutine.
func (b *streamBody) drain() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return b.whole.Load()
	}
	wait := b.c.s.bodyTimeout()
	if wait <= 0 {
		wait = drainWait
	}
	b.by.Store(time.Now().Add(wait).UnixNano())
	b.byGiven.Store(true)
	b.ending.Store(false) // end stopped the reads: this one alone reads now
	buf := proxy.GetBuffer()
	for n := int64(0); n <= discardMax; {
		m, err := b.readLocked(buf[:min(int64(len(buf)), discardMax+1-n)])
		n += int64(m)
		if err != nil {
			break
		}
	}
	proxy.PutBuffer(buf)
	b.letGo(false)
	return b.whole.Load()
}

// letGo gives back what reads of the body held, with none in flight: the
// socket's second descriptor, and a TLS connection's read deadline when
// one was set (or, stopped, must be cleared); the connection may be
// watched again, and its socket may hold what came since (read it before
// a wait).
func (b *streamBody) letGo(stopped bool) {
	b.waitMu.Lock()
	if b.waitF != nil {
		b.waitF.Close()
	}
	b.waitF, b.waitRC = nil, nil
	b.waitMu.Unlock()
	if b.c.tls != nil && (b.tlsBy || stopped) {
		_ = b.c.tc.SetReadDeadline(time.Time{})
		b.tlsBy = false
	}
	b.c.streaming.Store(false)
	b.c.drained = false
}

// stopWait ends a read of the body waiting for the client now.
func (b *streamBody) stopWait() {
	if b.c.tls != nil {
		_ = b.c.tc.SetReadDeadline(aLongTimeAgo)
		return
	}
	b.waitMu.Lock()
	if b.waitF != nil {
		_ = b.waitF.SetReadDeadline(aLongTimeAgo)
	}
	b.waitMu.Unlock()
}

// end ends the body once its handler has returned: a read waiting for
// the client is stopped, and those after it fail. It reports whether the
// body was read whole; if not, the connection must close. Called by the
// connection's goroutine, which reads the connection again after it.
func (b *streamBody) end() (whole bool) {
	b.endMu.Lock()
	b.ended = true
	b.endMu.Unlock()
	if !b.whole.Load() {
		b.ending.Store(true)
		b.stopWait()
	}
	b.mu.Lock() // a read in flight has returned
	defer b.mu.Unlock()
	b.closed = true
	whole = b.whole.Load()
	b.letGo(!whole) // a TLS read stopped by its deadline: cleared
	return whole
}
