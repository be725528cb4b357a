package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync"

	"golang.org/x/net/http/httpguts"
)

// writeRequest writes r, a request of the short way (no body), as
// Request.Write writes it, byte for byte: directly when its parts are
// plain, through Request.Write otherwise. Plain: no Close, no
// Transfer-Encoding or Trailer, no opaque URL, an ASCII Host that is
// valid and has no zone, a target without control characters, and no
// trace watching what is written. Request.Write's rules: the request
// line, Host (the request's, else the URL's), User-Agent (Go's unless the
// header has one; none when it is empty), then the other fields sorted by
// name as Header.WriteSubset writes them (appendFields; the values cut
// from read, the client's head, if known, as they are).
func writeRequest(bw *bufio.Writer, r *http.Request, body []byte, trace *httptrace.ClientTrace, read *ReadHead) error {
	host := r.Host
	if host == "" {
		host = r.URL.Host
	}
	// A chunked body in hand (all of it came, with no trailer) leaves with
	// its length, as nginx sends a body it has read: backends that take
	// no chunked requests (WSGI servers by default, Python's http.server)
	// take it, and learn its length before they read it.
	inHand := r.ContentLength < 0 && len(body) > 0 && len(r.TransferEncoding) == 1 && r.TransferEncoding[0] == "chunked"
	if r.Close || len(r.TransferEncoding) > 0 && !inHand || r.Trailer != nil || r.URL.Opaque != "" ||
		!plainHost(host) || watched(trace) {
		return netWriteRequest(bw, r, body, trace)
	}
	target := r.URL.RequestURI()
	if !ctlFree(target) {
		return netWriteRequest(bw, r, body, trace)
	}
	ua := "Go-http-client/1.1"
	if v, ok := r.Header["User-Agent"]; ok {
		ua = ""
		if len(v) > 0 {
			ua = v[0]
		}
	}
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	b := bw.AvailableBuffer()
	b = append(b, method...)
	b = append(b, ' ')
	b = append(b, target...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\n"...)
	if ua != "" {
		b = append(b, "User-Agent: "...)
		if read != nil && read.cut(ua) {
			b = append(b, ua...)
		} else {
			b = appendValue(b, ua)
		}
		b = append(b, "\r\n"...)
	}
	switch {
	case len(body) > 0, method == http.MethodPost, method == http.MethodPut, method == http.MethodPatch:
		// As Request.Write: a length for a body, and for these methods
		// without one ("Content-Length: 0", which many servers expect).
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(body)), 10)
		b = append(b, "\r\n"...)
	}
	var fields [24]headerField
	b = appendFields(b, requestFields(fields[:], r.Header), read)
	b = append(b, "\r\n"...)
	_, err := bw.Write(b)
	if err == nil && len(body) > 0 {
		_, err = bw.Write(body)
	}
	return err
}

// netWriteRequest writes r with net/http's Request.Write, body (read
// from r's already) as its body, trace told of it.
func netWriteRequest(bw *bufio.Writer, r *http.Request, body []byte, trace *httptrace.ClientTrace) error {
	r2 := *r
	if len(body) > 0 {
		r2.Body, r2.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		r2.TransferEncoding = nil // with its length, chunked as it came or not
	}
	if trace != nil && httptrace.ContextClientTrace(r.Context()) != trace {
		r2 = *r2.WithContext(httptrace.WithClientTrace(r.Context(), trace))
	}
	return r2.Write(bw)
}

// plainHost: a Host Request.Write sends as it is (ASCII needs no
// Punycode; a valid one is not dropped; no zone to remove).
func plainHost(host string) bool {
	for i := 0; i < len(host); i++ {
		if host[i] >= 0x80 || host[i] == '%' {
			return false
		}
	}
	return httpguts.ValidHostHeader(host)
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\r' || b == '\n' }

// watched reports whether a trace wants to hear of the request's writing.
func watched(t *httptrace.ClientTrace) bool {
	return t != nil && (t.WroteHeaderField != nil || t.WroteHeaders != nil || t.WroteRequest != nil)
}

// readResponse reads a server's answer to r from br: the strict way when
// its head is plain and came whole in what br holds, through net/http's
// ReadResponse otherwise (from the same bytes: the strict way only looks
// at them until it takes them).
//
// hopFree: the head was read the strict way and had no hop-by-hop field
// (isHopByHop), so none is to be looked for (RemoveHopByHopOf).
func readResponse(br *bufio.Reader, r *http.Request) (resp *http.Response, a *answerBlock, hopFree bool, err error) {
	if _, err := br.Peek(1); err != nil {
		// What ReadResponse returns when its first read fails: that
		// error (a reset, a timeout), the end of the stream as unexpected.
		// Asking it again would read again, and a reset socket reads as
		// ended.
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, nil, false, err
	}
	if a, n, hopFree := strictResponse(br, r); a != nil {
		br.Discard(n)
		return &a.resp, a, hopFree, nil
	}
	resp, err = http.ReadResponse(br, r)
	return resp, nil, false, err
}

// strictResponse is parseResponse over the head br holds, and the head's
// length; nil when the head is not whole in it or not taken. It reads
// nothing.
func strictResponse(br *bufio.Reader, r *http.Request) (a *answerBlock, n int, hopFree bool) {
	b, _ := br.Peek(br.Buffered())
	n, lines := headEnd(b)
	if n == 0 {
		return nil, 0, false
	}
	a, hopFree = parseResponse(b[:n], lines-1, br, r)
	return a, n, hopFree
}

// headEnd walks b's lines to the first empty one ("\r\n") and returns the
// length of the head through it and the lines before it; 0 when b holds
// no empty line. A head parseResponse takes has every line ending in
// CRLF: its end is the first CRLFCRLF.
func headEnd(b []byte) (n, lines int) {
	for at := 0; ; lines++ {
		i := bytes.IndexByte(b[at:], '\n')
		if i < 0 {
			return 0, 0
		}
		if i == 1 && b[at] == '\r' {
			return at + 2, lines
		}
		at += i + 1
	}
}

// parseResponse reads an answer's head the strict way: it returns the
// response only when it is one net/http's ReadResponse would make the
// same of, and nil for everything else, which ReadResponse then reads.
// head is the whole head, its empty line included; the body, if any,
// follows it in br.
//
// Taken: HTTP/1.1 or HTTP/1.0, a final status from 200 to 599 with a
// reason without control characters, every line ending in CRLF, names
// that are tokens and values without control characters, no
// Transfer-Encoding, and one Content-Length of digits alone (none only
// where no body can follow: an answer to HEAD, 204 and 304). Left to
// ReadResponse: informational answers, chunked and read-to-the-close
// bodies, repeated Content-Length, obs-fold, bare LF, and anything that
// does not parse. The response is ReadResponse's to the field: its
// ContentLength, Close by the version and the Connection header (a
// "close" deleted from an HTTP/1.1 answer's header, as ReadResponse does),
// Pragma: no-cache mirrored in Cache-Control, a body that ends with io.EOF
// on its last byte and with io.ErrUnexpectedEOF when the connection ends
// before it. The response is a.resp. hopFree: the head had no hop-by-hop
// field.
func parseResponse(head []byte, fields int, br *bufio.Reader, r *http.Request) (a *answerBlock, hopFree bool) {
	s := headText(head) // one string for every name and value
	eol := indexCRLF(s, 0)
	if eol < 0 {
		return nil, false
	}
	code, minor, ok := statusLine(s[:eol])
	if !ok {
		return nil, false
	}
	a = answerBlocks.Get().(*answerBlock)
	lines, h := newHeaderLines(s, eol, fields, a.vals[:])
	resp := &a.resp
	*resp = http.Response{
		Status: s[len("HTTP/1.1 "):eol], StatusCode: code,
		Proto: s[:len("HTTP/1.1")], ProtoMajor: 1, ProtoMinor: minor,
		Header: h, Request: r, Body: http.NoBody,
	}
	length, connection, pragma, hop := int64(-1), false, false, false
	for {
		name, value, ok := lines.next()
		if !ok {
			break
		}
		switch name {
		case "Transfer-Encoding":
			return a.drop(h), false
		case "Content-Length":
			if length >= 0 {
				return a.drop(h), false
			}
			if length = digits(value); length < 0 {
				return a.drop(h), false
			}
		case "Connection":
			connection = true
		case "Pragma":
			pragma = true
		}
		hop = hop || isHopByHop(name)
		lines.add(resp.Header, name, value)
	}
	if lines.bad {
		return a.drop(h), false
	}
	switch {
	case r.Method == http.MethodHead:
		resp.ContentLength = length // -1 without a Content-Length
	case code == http.StatusNoContent || code == http.StatusNotModified:
		resp.ContentLength = 0
	case length < 0:
		return a.drop(h), false // to the close: ReadResponse's
	default:
		resp.ContentLength = length
		if length > 0 {
			a.fixed = fixedBody{br: br, left: length}
			resp.Body = &a.fixed
		}
	}
	if pragma {
		pragmaNoCache(resp.Header)
	}
	if connection {
		resp.Close = closes(minor, resp.Header["Connection"])
	} else {
		resp.Close = closes(minor, nil)
	}
	if resp.Close && minor == 1 {
		resp.Header.Del("Connection")
	}
	a.read.text = s
	return a, !hop
}

// statusLine checks "HTTP/1.x NNN reason" for a final status and returns
// its code and x.
func statusLine(line string) (code, minor int, ok bool) {
	if len(line) < len("HTTP/1.1 200") || line[:len("HTTP/1.")] != "HTTP/1." || line[8] != ' ' {
		return 0, 0, false
	}
	switch line[7] {
	case '0':
	case '1':
		minor = 1
	default:
		return 0, 0, false
	}
	c := line[9:12]
	if c[0] < '2' || c[0] > '5' || c[1] < '0' || c[1] > '9' || c[2] < '0' || c[2] > '9' {
		return 0, 0, false
	}
	if len(line) > 12 && line[12] != ' ' {
		return 0, 0, false
	}
	if len(line) > 13 && !plainText(line[13:]) {
		return 0, 0, false
	}
	return int(c[0]-'0')*100 + int(c[1]-'0')*10 + int(c[2]-'0'), minor, true
}

// digits is a Content-Length of one to 18 digits, and -1 for anything
// else (longer ones are ReadResponse's to judge).
func digits(v string) int64 {
	if len(v) == 0 || len(v) > 18 {
		return -1
	}
	n := int64(0)
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return -1
		}
		n = n*10 + int64(v[i]-'0')
	}
	return n
}

// pragmaNoCache mirrors "Pragma: no-cache" in Cache-Control when there
// is none, as net/http does for requests and responses it reads.
func pragmaNoCache(h http.Header) (added bool) {
	if pragma := h["Pragma"]; len(pragma) > 0 && pragma[0] == "no-cache" {
		if _, ok := h["Cache-Control"]; !ok {
			h["Cache-Control"] = []string{"no-cache"}
			return true
		}
	}
	return false
}

// closes reports whether a message of HTTP/1.minor with these
// Connection values closes its connection after it: "close" in 1.1, and
// anything but "keep-alive" in 1.0.
func closes(minor int, connection []string) bool {
	if httpguts.HeaderValuesContainsToken(connection, "close") {
		return true
	}
	return minor == 0 && !httpguts.HeaderValuesContainsToken(connection, "keep-alive")
}

// An answerBlock is where the short way makes a backend's answer: the
// response, its body, the body's wrapper and the array its header's
// values are taken from, as one, from answerBlocks. It goes back once the
// client's answer it was passed to is finished (PassAnswer): an answer
// that went elsewhere is left to the collector.
type answerBlock struct {
	resp  http.Response
	fixed fixedBody
	body  body
	vals  [8]string
	read  ReadHead // the head read, for the answer passed on (appendFields)
}

var answerBlocks = sync.Pool{New: func() any { return new(answerBlock) }}

// drop gives back a block whose head was not taken, and h, the map made
// for it; it returns nil.
func (a *answerBlock) drop(h http.Header) *answerBlock {
	PutHeaderMap(h)
	putAnswerBlock(a)
	return nil
}

// putAnswerBlock gives a back, zeroed: nothing it held is reachable
// through it any longer.
func putAnswerBlock(a *answerBlock) {
	*a = answerBlock{}
	answerBlocks.Put(a)
}

// answerOf returns the block res was made in; nil when it was not made
// in one.
func answerOf(res *http.Response) *answerBlock {
	if b := shortBody(res.Body); b != nil && b.block != nil && &b.block.resp == res {
		return b.block
	}
	return nil
}

// shortBody returns the short way's wrapper of an answer's body, when rc
// is one or wraps one (through an Unwrap() io.ReadCloser); nil otherwise.
func shortBody(rc io.ReadCloser) *body {
	for {
		switch b := rc.(type) {
		case *body:
			return b
		case interface{ Unwrap() io.ReadCloser }:
			rc = b.Unwrap()
		default:
			return nil
		}
	}
}

// fixedBody is a body of a known length, read from the connection's
// buffered reader as net/http's would be: io.EOF with its last bytes,
// io.ErrUnexpectedEOF if the connection ends before them.
type fixedBody struct {
	br   *bufio.Reader
	left int64
}

func (b *fixedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.br.Read(p)
	b.left -= int64(n)
	switch {
	case err == io.EOF:
		b.left, err = 0, io.ErrUnexpectedEOF // and io.EOF from then on
	case err == nil && n > 0 && b.left == 0:
		err = io.EOF
	}
	return n, err
}

func (b *fixedBody) Close() error { return nil }
