package h1

import (
	"bufio"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/rotor-lb/rotor/internal/rawio"
)

// response is the short way's http.ResponseWriter. It frames an answer
// as net/http's server does: the handler's Content-Length when it gave a
// valid one; else, for an answer that ends within its first 2 KiB, the
// length of what it wrote; else chunked for HTTP/1.1 and to the close for
// HTTP/1.0. A Content-Type is sniffed when none was given, a Date added,
// the headers a status cannot carry dropped, trailers (declared in
// Trailer, or named with http.TrailerPrefix) sent after a chunked body,
// and the header map written as net/http's Header.WriteSubset writes it
// (sorted, names that are not tokens left out, line breaks in values made
// spaces).
type response struct {
	c          *clientConn
	req        *http.Request
	header     http.Header
	own        http.Header   // the pooled answer's own map, header unless it took a backend's (PassHeader)
	taken      bool          // header is a backend's, taken by PassHeader
	answer     *answerBlock  // the backend's answer passed on (PassAnswer), given back with the answer
	headerDone bool          // nothing holds the request's header values past the handler (HeaderDone)
	bw         *bufio.Writer // nil until the first byte is written

	status  int
	sent    http.Header // the header as it was at WriteHeader, when the head waits for the body
	cl      int64       // Content-Length given; -1: none
	written int64       // body bytes written
	held    []byte      // the body's bytes not framed yet: the first ones, while the head waits for them; then, chunked, the next chunk's (heldBuf's)
	heldBuf *[bufferBeforeChunking]byte
	wait    bool // the head waits for the first body bytes (to sniff or to count)
	done    bool // the handler returned
	head    bool // a HEAD request: the body is dropped
	chunked bool
	chunk   [3][]byte // a large chunk's size line, bytes and end, for one Writev
	line    [20]byte  // a large chunk's size line

	closeAfter bool // the connection closes after this answer
	wantsClose bool // the request asked for the close
	want10     bool // an HTTP/1.0 request that asked for keep-alive
}

// bodyAllowed reports whether a status may carry a body (RFC 9110).
func bodyAllowed(status int) bool {
	return (status < 100 || status > 199) && status != http.StatusNoContent && status != http.StatusNotModified
}

func (w *response) Header() http.Header { return w.header }

// TakeHeader makes src the answer's header while its own is empty and
// its head unwritten (HeaderTaker); release gives it back to HeaderMap.
func (w *response) TakeHeader(src http.Header) bool {
	if w.status != 0 || len(w.header) != 0 {
		return false
	}
	w.header, w.taken = src, true
	return true
}

func (w *response) WriteHeader(code int) {
	if w.status != 0 {
		w.c.s.logf("http: superfluous response.WriteHeader call")
		return
	}
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		// Informational: written at once, the header map with it (RFC
		// 8297: 103 Early Hints), the map left as it is; never at once
		// with a 100 Continue a read of the body sends.
		if s := w.c.stream; s != nil {
			s.contMu.Lock()
			defer s.contMu.Unlock()
		}
		bw := w.writer()
		var fields [16]headerField
		b := appendStatusLine(bw.AvailableBuffer(), w.req.ProtoMinor == 1, code)
		b = appendFields(b, sortedFields(fields[:], w.header, noBodyFields), nil)
		_, _ = bw.Write(append(b, "\r\n"...))
		_ = bw.Flush()
		return
	}
	w.status = code
	// What the head needs to know of the header, learnt once: the head
	// is written from it at once unless it waits for the body.
	var buf [16]headerField
	f, fields := factsOf(buf[:], w.header)
	cl := f.lengthValue
	if cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err == nil && v >= 0 {
			w.cl = v
		}
	}
	// A HEAD answer waits too: what its handler writes is dropped, but
	// counted and sniffed, as net/http does.
	w.wait = bodyAllowed(code) && (w.cl < 0 || !f.typed && f.encoding == "")
	if w.wait {
		// What the handler does to its header map from here on is not the
		// head's (trailers, say): the head waiting for the body keeps a
		// copy, taken as net/http takes it (an invalid length in it).
		w.sent = w.header.Clone()
	}
	if cl != "" && w.cl < 0 {
		w.c.s.logf("http: invalid Content-Length of %q", cl)
		w.header.Del("Content-Length")
		f, fields = factsOf(buf[:], w.header)
	}
	if !w.wait {
		w.writeHeadOf(nil, f, fields)
	}
}

// bufferBeforeChunking is how much of a body of no given length is held
// to learn whether it ends within it (net/http's size).
const bufferBeforeChunking = 2048

func (w *response) Write(p []byte) (int, error) { return w.write(p, true) }

// WriteString is Write without a copy of s; what it writes chunked is
// gathered into chunks of 2 KiB whatever its length, as net/http's
// server gathers a string (its buffer writes no string past itself).
func (w *response) WriteString(s string) (int, error) {
	return w.write(unsafe.Slice(unsafe.StringData(s), len(s)), false)
}

// write writes p, which it only reads; direct: a chunk larger than the
// room held bytes leave may go whole (writeBody).
func (w *response) write(p []byte, direct bool) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.written += int64(len(p))
	if w.cl >= 0 && w.written > w.cl {
		return 0, http.ErrContentLength
	}
	if w.wait {
		if len(w.held)+len(p) <= bufferBeforeChunking {
			w.hold(p)
			return len(p), nil
		}
		w.commit(p)
	}
	if w.head {
		return len(p), nil
	}
	return w.writeBody(p, direct)
}

// commit writes the head that waited, with the body held so far; next
// is the body about to be written after it, which a type is sniffed from
// too, as net/http sniffs the first bytes of the body whatever their
// writes.
func (w *response) commit(next []byte) {
	held := w.held
	w.wait = false
	first := held
	if len(held) < sniffLen && len(next) > 0 {
		first = append(held[:len(held):len(held)], next[:min(len(next), sniffLen-len(held))]...)
	}
	w.writeHead(first)
	if w.chunked && !w.head {
		return // the first chunk's bytes, gathered on (writeBody)
	}
	if len(held) > 0 && !w.head {
		_, _ = w.writeBody(held, true)
	}
	w.held = w.held[:0]
}

// hold keeps p among the body's bytes not framed yet.
func (w *response) hold(p []byte) {
	if w.heldBuf == nil {
		w.heldBuf = heldBufs.Get().(*[bufferBeforeChunking]byte)
		w.held = w.heldBuf[:0]
	}
	w.held = append(w.held, p...)
}

var heldBufs = sync.Pool{New: func() any { return new([bufferBeforeChunking]byte) }}

// sniffLen is what http.DetectContentType reads at most.
const sniffLen = 512

// Window is where a copy reads the bytes of a body this answer sends
// chunked (proxy.Framer): at rawio.ChunkWindow's offset in buf, so that the
// kernel copies each into the client's socket aligned. An answer with a
// length, or not chunked, reads into the whole buffer.
func (w *response) Window(buf []byte) []byte {
	chunks := w.chunked || w.wait && w.cl < 0 && !w.head && w.req.ProtoMinor == 1
	if !chunks {
		return buf
	}
	return rawio.ChunkWindow(buf)
}

// writeBody writes p, framed as the head said. Chunked, the handler's
// writes are gathered into chunks as net/http's server gathers them (a
// buffer of 2 KiB before its chunk writer): a chunk is 2 KiB of them, or,
// direct, one write larger than the room the buffer has when it holds
// nothing; what is left is held until the next write, a flush or the
// answer's end.
func (w *response) writeBody(p []byte, direct bool) (int, error) {
	if !w.chunked {
		return w.writer().Write(p)
	}
	n := 0
	for len(p) > bufferBeforeChunking-len(w.held) {
		if len(w.held) == 0 && direct {
			m, err := w.writeChunk(p)
			return n + m, err
		}
		k := bufferBeforeChunking - len(w.held)
		w.held = append(w.held, p[:k]...)
		p, n = p[k:], n+k
		if err := w.writeHeld(); err != nil {
			return n, err
		}
	}
	if len(p) > 0 {
		w.hold(p)
	}
	return n + len(p), nil
}

// writeHeld writes the chunk held, if any.
func (w *response) writeHeld() error {
	if len(w.held) == 0 {
		return nil
	}
	_, err := w.writeChunk(w.held)
	w.held = w.held[:0]
	return err
}

// writeChunk writes p as one chunk.
func (w *response) writeChunk(p []byte) (int, error) {
	bw := w.writer()
	line := append(strconv.AppendInt(w.line[:0], int64(len(p)), 16), "\r\n"...)
	if bw.Buffered() == 0 && len(line)+len(p)+len("\r\n") > bw.Available() {
		// A chunk the buffer cannot hold: through it, its size line
		// and its first bytes would leave in one write, the rest in a
		// second and its end in a third (when flushed), each a system
		// call and the last a two-byte segment. Together they take one.
		w.chunk = [3][]byte{line, p, crlf}
		n, err := w.c.out.Writev(w.chunk[:])
		w.chunk = [3][]byte{}
		return min(max(n-len(line), 0), len(p)), err
	}
	_, _ = bw.Write(line)
	n, err := bw.Write(p)
	if err == nil {
		_, err = bw.WriteString("\r\n")
	}
	return n, err
}

var crlf = []byte("\r\n")

// Flush writes what is buffered to the client, the head first.
func (w *response) Flush() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.wait {
		w.commit(nil)
	}
	if w.chunked {
		_ = w.writeHeld()
	}
	_ = w.writer().Flush()
}

// SetReadDeadline bounds the reads of the request's body
// (http.ResponseController): those of a body its handler reads from the
// connection (streamBody; a deadline past ends a read waiting now). A
// body read whole before the handler ran has none to bound.
func (w *response) SetReadDeadline(t time.Time) error {
	if s := w.c.stream; s != nil {
		s.setDeadline(t)
	}
	return nil
}

func (w *response) writer() *bufio.Writer {
	if w.bw == nil {
		w.bw = writers.Get().(*bufio.Writer)
		w.bw.Reset(w.c.out)
	}
	return w.bw
}

func (w *response) putWriter() {
	if w.bw != nil {
		w.bw.Reset(nil)
		writers.Put(w.bw)
		w.bw = nil
	}
}

// finish ends the answer once the handler returned: the head if it still
// waits, the last chunk and the trailers, and a flush, whose error it
// returns. closeAfter says then whether the connection may carry another
// request.
func (w *response) finish() error {
	defer w.putWriter()
	w.done = true
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.wait {
		w.commit(nil)
	}
	bw := w.writer()
	if w.chunked {
		_ = w.writeHeld()
		_, _ = bw.WriteString("0\r\n")
		w.writeTrailers(bw)
		_, _ = bw.WriteString("\r\n")
	}
	if w.cl >= 0 && w.written != w.cl && bodyAllowed(w.status) && !w.head {
		w.closeAfter = true // the client cannot tell where this answer ends
	}
	return bw.Flush()
}

// writeTrailers writes the declared trailers and those named with
// http.TrailerPrefix.
func (w *response) writeTrailers(bw *bufio.Writer) {
	var t http.Header
	for _, v := range w.headHeader()["Trailer"] {
		for _, k := range strings.Split(v, ",") {
			k = http.CanonicalHeaderKey(strings.TrimSpace(k))
			switch k {
			case "", "Transfer-Encoding", "Content-Length", "Trailer":
				continue
			}
			if vv, ok := w.header[k]; ok {
				if t == nil {
					t = http.Header{}
				}
				t[k] = vv
			}
		}
	}
	for k, vv := range w.header {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			if t == nil {
				t = http.Header{}
			}
			t[http.CanonicalHeaderKey(name)] = vv
		}
	}
	if t != nil {
		var fields [16]headerField
		_, _ = bw.Write(appendFields(bw.AvailableBuffer(), sortedFields(fields[:], t, nil), nil))
	}
}

// read is the head of the backend's answer passed on as the strict
// reader read it, nil when there is none (appendFields).
func (w *response) read() *ReadHead {
	if w.answer == nil {
		return nil
	}
	return &w.answer.read
}

// noBodyFields are the fields an informational answer leaves out.
var noBodyFields = []string{"Content-Length", "Transfer-Encoding"}

// headHeader is the header the head is written from: the copy taken at
// WriteHeader when the head waited for the body, else the handler's.
func (w *response) headHeader() http.Header {
	if w.sent != nil {
		return w.sent
	}
	return w.header
}

// headFacts is what deciding an answer's framing needs to know of its
// header, learnt in one pass over it rather than a lookup a question.
type headFacts struct {
	te, connection, encoding string // the first values of Transfer-Encoding, Connection and Content-Encoding
	lengthValue              string // the first value of Content-Length
	length, typed, dated     bool   // Content-Length, Content-Type, Date present
	hasConnection            bool   // Connection present
	trailers                 bool   // trailers declared in Trailer or named with http.TrailerPrefix
}

// factsOf learns f of h as it collects h's fields in buf, those named
// with http.TrailerPrefix (never written in a head) left out.
func factsOf(buf []headerField, h http.Header) (f headFacts, fields []headerField) {
	fields = buf[:0]
	for k, vv := range h {
		switch k {
		case "Transfer-Encoding":
			f.te = firstOf(vv)
		case "Connection":
			f.hasConnection, f.connection = true, firstOf(vv)
		case "Content-Encoding":
			f.encoding = firstOf(vv)
		case "Content-Length":
			f.length, f.lengthValue = true, firstOf(vv)
		case "Content-Type":
			f.typed = true
		case "Date":
			f.dated = true
		case "Trailer":
			f.trailers = f.trailers || len(vv) > 0
		default:
			if strings.HasPrefix(k, http.TrailerPrefix) {
				f.trailers = true
				continue
			}
		}
		fields = append(fields, headerField{k, vv})
	}
	return f, fields
}

// firstOf is a field's first value, "" when it has none.
func firstOf(vv []string) string {
	if len(vv) > 0 {
		return vv[0]
	}
	return ""
}

// writeHead writes the status line and the header, deciding the framing
// as net/http's server does (its chunkWriter.writeHeader); p is the body
// held so far, all of it when the handler is done.
func (w *response) writeHead(p []byte) {
	var buf [16]headerField
	f, fields := factsOf(buf[:], w.headHeader())
	w.writeHeadOf(p, f, fields)
}

// writeHeadOf is writeHead with the facts and the fields of the head's
// header learnt already (factsOf).
func (w *response) writeHeadOf(p []byte, f headFacts, fields []headerField) {
	// The fields the header has that the head leaves out besides those
	// factsOf left out; naming one it lacks changes nothing.
	var skipBuf [8]string
	skip := skipBuf[:0]
	var x extraHeader
	code := w.status
	body := bodyAllowed(code)
	hasTE := f.te != ""
	if w.done && !f.trailers && !hasTE && body && !f.length && (!w.head || len(p) > 0) {
		w.cl = int64(len(p))
		x.contentLength = strconv.Itoa(len(p))
	}
	hasCL := w.cl >= 0
	if w.want10 && (w.head || hasCL || !body) {
		if !f.hasConnection {
			x.connection = "keep-alive"
		}
	} else if w.req.ProtoMinor == 0 || w.wantsClose {
		w.closeAfter = true
	}
	if f.connection == "close" || w.c.s.inShutdown.Load() {
		w.closeAfter = true
	}
	if s := w.c.stream; s != nil && !s.headGoesOut() {
		w.closeAfter = true // the rest of the body is not to be read
	}
	if body {
		if !f.typed && f.encoding == "" && !hasTE && len(p) > 0 {
			x.contentType = http.DetectContentType(p)
		}
	} else {
		skip = append(skip, "Content-Length", "Transfer-Encoding")
		if code == http.StatusNotModified {
			skip = append(skip, "Content-Type")
		}
	}
	if !f.dated {
		x.date = *w.c.s.date.Load()
	}
	if hasCL && hasTE && f.te != "identity" {
		w.c.s.logf("http: WriteHeader called with both Transfer-Encoding of %q and a Content-Length of %d", f.te, w.cl)
		skip = append(skip, "Content-Length")
		x.contentLength = ""
		hasCL, w.cl = false, -1
	}
	switch {
	case w.head || !body || hasCL:
		skip = append(skip, "Transfer-Encoding")
	case w.req.ProtoMinor == 1 && f.te == "identity":
		w.closeAfter = true
		skip = append(skip, "Transfer-Encoding")
	case w.req.ProtoMinor == 1:
		w.chunked = true
		x.transferEncoding = "chunked"
		if f.te == "chunked" {
			skip = append(skip, "Transfer-Encoding")
		}
	default:
		w.closeAfter = true
		skip = append(skip, "Transfer-Encoding")
	}
	if w.chunked {
		skip = append(skip, "Content-Length")
	}
	if w.closeAfter && code != http.StatusSwitchingProtocols && !hasToken(f.connection, "close") {
		skip = append(skip, "Connection")
		if w.req.ProtoMinor == 1 {
			x.connection = "close"
		}
	}
	// The fields less those skipped, in place.
	kept := fields[:0]
	for _, fl := range fields {
		if !slices.Contains(skip, fl.name) {
			kept = append(kept, fl)
		}
	}
	sortFields(kept)
	bw := w.writer()
	b := appendStatusLine(bw.AvailableBuffer(), w.req.ProtoMinor == 1, code)
	b = appendFields(b, kept, w.read())
	b = x.append(b)
	_, _ = bw.Write(append(b, "\r\n"...))
}

// extraHeader is what the server adds to the handler's header.
type extraHeader struct {
	contentType, connection, transferEncoding, contentLength string
	date                                                     []byte
}

func (x *extraHeader) append(b []byte) []byte {
	// In net/http's order.
	if x.date != nil {
		b = append(b, "Date: "...)
		b = append(b, x.date...)
		b = append(b, "\r\n"...)
	}
	for _, kv := range [...][2]string{
		{"Content-Length", x.contentLength}, {"Content-Type", x.contentType},
		{"Connection", x.connection}, {"Transfer-Encoding", x.transferEncoding},
	} {
		if kv[1] != "" {
			b = append(b, kv[0]...)
			b = append(b, ": "...)
			b = append(b, kv[1]...)
			b = append(b, "\r\n"...)
		}
	}
	return b
}

func appendStatusLine(b []byte, is11 bool, code int) []byte {
	if is11 {
		b = append(b, "HTTP/1.1 "...)
	} else {
		b = append(b, "HTTP/1.0 "...)
	}
	b = strconv.AppendInt(b, int64(code), 10)
	if text := http.StatusText(code); text != "" {
		b = append(b, ' ')
		b = append(b, text...)
	} else {
		b = append(b, " status code "...)
		b = strconv.AppendInt(b, int64(code), 10)
	}
	return append(b, "\r\n"...)
}

// hasToken reports whether token is in v as a word, ASCII case aside: a
// space, a tab, a comma or an end on each side. It is net/http's server's
// test for close and keep-alive in a Connection header (looser than a
// list of tokens: "x close" has it), and the short way decides as
// net/http does.
func hasToken(v, token string) bool {
	boundary := func(b byte) bool { return b == ' ' || b == '\t' || b == ',' }
	for i := 0; i+len(token) <= len(v); i++ {
		end := i + len(token)
		if (i == 0 || boundary(v[i-1])) && (end == len(v) || boundary(v[end])) && asciiEqualFold(v[i:end], token) {
			return true
		}
	}
	return false
}

// asciiEqualFold is strings.EqualFold for ASCII only: "\u212a" (the Kelvin
// sign) is not a "k" here.
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
