package h1

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"golang.org/x/net/http/httpguts"
)

// parseHead reads a request's head the strict way: it returns the request
// only when the head is one the server may answer without net/http's
// server, and nil for everything else, which goes to net/http's server
// with its bytes untouched (that server then answers it, or refuses it
// with the status it gives). head is the whole head, its empty line
// included.
//
// Taken: an origin-form target ("/..."), or an absolute-form one in
// http:// (a forward proxy's), HTTP/1.1 or HTTP/1.0, exactly one
// valid Host, every line ending in CRLF, names that are tokens and values
// without control characters, and a body framed once, if at all: a
// Content-Length of up to 18 digits, or, on HTTP/1.1, one
// Transfer-Encoding of chunked (then, as net/http reads it, not in the
// header, in TransferEncoding, the length -1). Left to net/http: a body
// framed both ways, other codings, Upgrade (and so h2c), obs-fold, "*",
// authority-form (CONNECT) and other absolute-form targets, bare LF, and
// anything that does not parse. The server decides which of the bodies
// taken it reads, and how (Expect among them). What is taken
// becomes the request net/http would have made of the same bytes: the
// URL url.ParseRequestURI makes of the target, Host out of the header map, Pragma:
// no-cache mirrored in Cache-Control, Close set by the Connection header
// and the version.
//
// base gives the request its context and client address; a, a zeroed
// block from headBlocks, is where the request and its URL are made.
// connection is the request's first Connection value, "" when it has
// none. size is the head's size as HeadSize counts it.
func parseHead(head []byte, base *http.Request, a *headBlock) (r *http.Request, connection string, size int) {
	// One string holds every name and value (headText).
	s := headText(head)
	eol := indexCRLF(s, 0)
	if eol < 0 {
		return nil, "", 0
	}
	method, target, proto, ok := requestLine(s[:eol])
	if !ok {
		return nil, "", 0
	}
	r = &a.r
	*r = *base
	r.Method, r.RequestURI, r.Proto, r.ProtoMajor, r.Body = method, target, proto, 1, http.NoBody
	if proto == "HTTP/1.1" {
		r.ProtoMinor = 1
	}
	// Every LF of a head scanHead found ends a CRLF: counted as one byte,
	// the lines are counted at IndexByte's pace.
	// The values' array: the block's last one when its handler said
	// nothing held it any longer (HeaderDone), else a new one.
	if a.vals == nil {
		a.vals = new([8]string)
	}
	fields, h := newHeaderLines(s, eol, bytes.Count(head, lf)-2, a.vals[:])
	r.Header = h
	hosts, length, chunked, hasConnection, pragma := 0, false, false, false, false
	sendable, agent := true, false
	size = len(method) + len(target) + len(proto) + 4
	for {
		name, value, ok := fields.next()
		if !ok {
			break
		}
		switch name {
		case "Host":
			hosts++
			r.Host = value
			continue
		case "Upgrade":
			return nil, "", 0
		case "Transfer-Encoding":
			// One field, "chunked", on HTTP/1.1 (net/http ignores it on
			// HTTP/1.0): not a field of the header, as net/http reads it,
			// and not sent on as it came.
			if chunked || proto != "HTTP/1.1" || !strings.EqualFold(value, "chunked") {
				return nil, "", 0
			}
			chunked, sendable = true, false
			continue
		case "Expect":
			a.expect = true
		case "Content-Length":
			// One length: as net/http reads it, decimal digits alone.
			n, ok := bodyLength(value)
			if !ok || length {
				return nil, "", 0
			}
			r.ContentLength, length = n, true
		case "Connection":
			if !hasConnection {
				connection, hasConnection = value, true
			}
		case "Pragma":
			pragma = true
		case "User-Agent":
			agent = true
		}
		sendable = sendable && !leftOut(name)
		fields.add(r.Header, name, value)
		size += len(name) + len(value) + 4
	}
	if fields.bad || hosts != 1 || !httpguts.ValidHostHeader(r.Host) {
		return nil, "", 0
	}
	if chunked {
		if length {
			// Framed twice: net/http's, which drops the length and
			// closes the connection after the answer (RFC 9112, 6.1).
			return nil, "", 0
		}
		r.ContentLength, r.TransferEncoding = -1, chunkedTE
	}
	u := &a.u
	if !plainTarget(target, u) {
		parsed, err := url.ParseRequestURI(target)
		if err != nil {
			return nil, "", 0
		}
		u = parsed
	}
	r.URL = u
	if u.Host != "" {
		// Absolute form (a forward proxy's request): the target's host is
		// the request's, whatever the Host header says (RFC 9112, 3.2.2).
		r.Host = u.Host
	}
	size += len("Host: ") + len(r.Host) + 2
	if pragma && pragmaNoCache(r.Header) {
		size += len("Cache-Control: no-cache\r\n")
	}
	if hasConnection {
		r.Close = closes(r.ProtoMinor, r.Header["Connection"])
	} else {
		r.Close = closes(r.ProtoMinor, nil)
	}
	a.read.text, a.read.sendable, a.read.agent = s, sendable, agent
	return r, connection, size
}

// headBlock is a request the short way reads, made as one with its URL.
// The server takes one for each head from headBlocks and gives it back,
// zeroed, once the request's handler has returned and its answer is
// finished, as it gives back the request's header map: a handler keeps
// neither the request nor its URL past its answer (a request sent on is
// a copy, with a URL of its own). The array the header's values are
// taken from goes back with it only when the handler said nothing held
// them any longer (HeaderDone): a header sent on shares them, and
// net/http's transport may still be writing it after the answer came.
type headBlock struct {
	r    http.Request
	u    url.URL
	vals *[8]string
	read ReadHead // the head read (RequestHead)
	// expect: the head has an Expect field, which the server meets only
	// for a body it reads before the handler runs (startBody) or as the
	// handler reads it (streamBody).
	expect bool
}

// chunkedTE is the TransferEncoding of every chunked request the short
// way reads: one array, never written, as net/http's transport may still
// read a request's after its handler has returned (it sends the body on
// as the answer is passed back), when the request's block is another's.
var chunkedTE = []string{"chunked"}

var headBlocks = sync.Pool{New: func() any { return new(headBlock) }}

// headText returns head as the one string a head's names and values are
// cut from. A head of up to maxChunkedHead bytes is copied to the end of
// a chunk shared with the heads before it, from headChunks, rather than
// to an allocation of its own (two a request, which brought the
// allocator's code into every request: docs/BENCHMARKS.md, "Heads cut
// from shared chunks"). A chunk's bytes are written once, at its end,
// and never again, so what was cut from it stays as it was (as
// strings.Builder promises); a full chunk is let go and lives on while
// anything holds a string of it. So a value kept past its request keeps
// its chunk, up to headChunkSize bytes, where it kept its head: a larger
// head gets a string of its own.
func headText(head []byte) string {
	if len(head) > maxChunkedHead {
		return string(head)
	}
	c := headChunks.Get().(*headChunk)
	s := c.text(head)
	headChunks.Put(c)
	return s
}

const (
	headChunkSize  = 4 << 10
	maxChunkedHead = 1 << 10
)

// headChunk is the chunk heads are being copied to.
type headChunk struct{ b strings.Builder }

var headChunks = sync.Pool{New: func() any { return new(headChunk) }}

// text copies p to the end of the chunk, a new one when it has no room
// left, and returns it as a string.
func (c *headChunk) text(p []byte) string {
	if c.b.Cap()-c.b.Len() < len(p) {
		c.b = strings.Builder{} // the full one is left to the strings cut from it
		c.b.Grow(headChunkSize)
	}
	at := c.b.Len()
	c.b.Write(p)
	return c.b.String()[at:]
}

// putHeadBlock gives a back to headBlocks, emptied (emptyHeadBlock).
func putHeadBlock(a *headBlock, valsFree bool) {
	emptyHeadBlock(a, valsFree)
	headBlocks.Put(a)
}

// emptyHeadBlock zeroes a so that it holds nothing of its request; its
// values' array, emptied, stays with it when valsFree, else is left to
// whatever holds it.
func emptyHeadBlock(a *headBlock, valsFree bool) {
	vals := a.vals
	*a = headBlock{}
	if valsFree && vals != nil {
		*vals = [8]string{}
		a.vals = vals
	}
}

// plainTarget fills u with what url.ParseRequestURI makes of target when
// target is an origin-form path that needs no unescaping or escaping
// (its bytes unreserved ones, sub-delims but for !'()*, ':', '@' and '/'),
// with a query or none (no control character in it); false for any
// other, which ParseRequestURI then parses.
func plainTarget(target string, u *url.URL) bool {
	if target == "" || target[0] != '/' {
		return false
	}
	path, query, hasQuery := strings.Cut(target, "?")
	for i := 0; i < len(path); i++ {
		if byteClass[path[i]]&pathByte == 0 {
			return false
		}
	}
	for i := 0; i < len(query); i++ {
		if c := query[i]; c < ' ' || c == 0x7f {
			return false
		}
	}
	*u = url.URL{Path: path, RawQuery: query, ForceQuery: hasQuery && query == ""}
	return true
}

// bodyLength parses a Content-Length of one to eighteen decimal digits
// (a longer one, which may not fit an int64, is net/http's to read).
func bodyLength(v string) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	n := int64(0)
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(v[i]-'0')
	}
	return n, true
}

var lf = []byte("\n")

// scanHead looks through a head as it comes, from from, where it left
// off (the start of a line): it returns the head's length once its empty
// line came, 0 while more is to come, and -1 when the bytes are not a
// head the strict reader takes: a line ending in a bare LF, an empty line
// first, or, while the head is not whole, a whole line parseHead would
// refuse (net/http answers such a line as soon as it reads it). next is
// where to go on from: each line is checked once however the head comes,
// so a client that sends it a byte at a time costs no more than one that
// sends it whole.
func scanHead(b []byte, from int) (n, next int) {
	// A head that came whole is checked by parseHead alone.
	for at := from; ; {
		i := bytes.IndexByte(b[at:], '\n')
		if i < 0 {
			break
		}
		lf := at + i
		if lf == 0 || b[lf-1] != '\r' {
			return -1, from
		}
		if lf-1 == at { // the empty line
			if at == 0 {
				return -1, from
			}
			return lf + 1, from
		}
		at = lf + 1
	}
	for {
		i := bytes.IndexByte(b[from:], '\n')
		if i < 0 {
			return 0, from
		}
		line := string(b[from : from+i-1])
		if from == 0 {
			if _, _, _, ok := requestLine(line); !ok {
				return -1, from
			}
		} else if _, _, ok := field(line); !ok {
			return -1, from
		}
		from += i + 1
	}
}

// headerLines walks the field lines of a whole head, from the line after
// the first, and files them in a header map.
type headerLines struct {
	s      string
	at     int
	bad    bool      // a line field refuses, or no empty line
	values []string  // one array for the head's values, taken one by one
	names  [8]string // the first names filed: a repeat is found among them without a lookup
	filed  int       // names filed
}

// newHeaderLines returns a walk over the fields of a head (s, eol the
// end of its first line) that has n field lines, and a header map; the
// map and the values' array are made once, at their size, the array in
// buf when it fits.
func newHeaderLines(s string, eol, n int, buf []string) (l headerLines, h http.Header) {
	n = max(n, 0)
	values := buf[:min(n, len(buf))]
	if n > len(buf) {
		values = make([]string, n)
	}
	return headerLines{s: s, at: eol + 2, values: values}, HeaderMap(n)
}

// headerMaps are empty header maps of requests and of backends' answers
// taken (HeaderTaker), given back once done with (PutHeaderMap) by the
// short way's answers and HTTP/2's, for the heads read, a client's or a
// backend's.
var headerMaps = sync.Pool{New: func() any { return make(http.Header) }}

// HeaderMap returns an empty map for n fields: one used before, when n
// is few.
func HeaderMap(n int) http.Header {
	if n > 8 {
		return make(http.Header, n)
	}
	return headerMaps.Get().(http.Header)
}

// PutHeaderMap gives h, which nothing holds any longer, back to
// HeaderMap, emptied: unless it is nil, or has grown large.
func PutHeaderMap(h http.Header) {
	if h != nil && len(h) <= 16 {
		clear(h)
		headerMaps.Put(h)
	}
}

// next returns the next field, by field's rules; false at the empty line
// that ends the head, or at a line that is not a plain field (bad is then
// set).
func (l *headerLines) next() (name, value string, ok bool) {
	end := indexCRLF(l.s, l.at)
	if end < 0 {
		l.bad = true
		return "", "", false
	}
	if end == l.at {
		return "", "", false
	}
	if name, value, ok = field(l.s[l.at:end]); !ok {
		l.bad = true
		return "", "", false
	}
	l.at = end + 2
	return name, value, true
}

// add adds value to h's name. The first value of each name is taken from
// the head's array (a slice of capacity one, so that a second value
// appends elsewhere).
func (l *headerLines) add(h http.Header, name, value string) {
	if l.repeats(h, name) {
		h[name] = append(h[name], value)
		return
	}
	l.values[0] = value
	h[name] = l.values[:1:1]
	l.values = l.values[1:]
}

// repeats reports whether name was filed before: among the first names
// filed, which it joins, while they are few, in h beyond them.
func (l *headerLines) repeats(h http.Header, name string) bool {
	if l.filed >= len(l.names) {
		_, seen := h[name]
		return seen
	}
	for _, n := range l.names[:l.filed] {
		if n == name {
			return true
		}
	}
	l.names[l.filed] = name
	l.filed++
	return false
}

// indexCRLF is the index of the first CR in s from from on, when an LF
// follows it, and -1 when none does.
func indexCRLF(s string, from int) int {
	i := strings.IndexByte(s[from:], '\r')
	if i < 0 || from+i+1 >= len(s) || s[from+i+1] != '\n' {
		return -1
	}
	return from + i
}

// requestLine splits "METHOD SP target SP HTTP/1.x".
func requestLine(line string) (method, target, proto string, ok bool) {
	sp := -1
	for i := 0; i < len(line); i++ {
		if line[i] == ' ' {
			sp = i
			break
		}
		if !httpguts.IsTokenRune(rune(line[i])) {
			return "", "", "", false
		}
	}
	if sp <= 0 {
		return "", "", "", false
	}
	method, rest := line[:sp], line[sp+1:]
	if len(rest) < len(" HTTP/1.1")+1 || rest[0] != '/' && !strings.HasPrefix(rest, "http://") {
		return "", "", "", false
	}
	target, proto = rest[:len(rest)-len(" HTTP/1.1")], rest[len(rest)-len("HTTP/1.1"):]
	if rest[len(target)] != ' ' || proto != "HTTP/1.1" && proto != "HTTP/1.0" {
		return "", "", "", false
	}
	for i := 0; i < len(target); i++ {
		if c := target[i]; c <= ' ' || c >= 0x7f {
			return "", "", "", false
		}
	}
	return method, target, proto, true
}

// field splits a header line into its canonical name and its value
// without the whitespace around it; ok is false for a line net/http's
// server may judge differently (obs-fold, no colon, a name that is not a
// token, whitespace before the colon, a control character in the value).
func field(line string) (name, value string, ok bool) {
	colon := strings.IndexByte(line, ':')
	if colon <= 0 {
		return "", "", false
	}
	name = line[:colon]
	if n, common := commonName(name); common {
		name = n
	} else if name, ok = uncommonName(name); !ok {
		return "", "", false
	}
	v := line[colon+1:]
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	if !plainText(v) {
		return "", "", false
	}
	return name, v, true
}

// uncommonName checks a name that is not among commonNames: a token,
// made canonical if it is not.
func uncommonName(name string) (string, bool) {
	// A name is canonical when no word of it starts in lower case or has
	// upper case further on: want is the case a byte may not be in.
	bad, want := uint8(0), uint8(lowerByte)
	for i := 0; i < len(name); i++ {
		k := byteClass[name[i]]
		if k&tokenByte == 0 {
			return "", false
		}
		bad |= k & want
		want = upperByte >> (k & dashByte >> dashShift) // lowerByte after a '-'
	}
	if bad != 0 {
		name = http.CanonicalHeaderKey(name)
	}
	return name, true
}

// commonNames are the field names clients and servers send most, each
// filed by itself and in lower case (as HTTP/2's, and many HTTP/1.1
// clients'), each to its canonical form: such a name is known for a token
// and made canonical by one look at a table (commonName), and without an
// allocation. The canonical forms are cut from one string, tokenText,
// all of whose bytes are a token's, as are those of the values rotor's
// own code sends most, which it ends with (CommonValue): a writer knows a
// name cut from it for a token, and a value for one it writes as it is,
// without looking at either (known).
var commonNames = []string{
	"Accept", "Accept-Charset", "Accept-Encoding", "Accept-Language", "Accept-Ranges",
	"Access-Control-Request-Headers", "Access-Control-Request-Method", "Age", "Authorization",
	"Cache-Control", "Connection", "Content-Disposition", "Content-Encoding", "Content-Language",
	"Content-Length", "Content-Location", "Content-Range", "Content-Type", "Cookie", "Date", "Dnt",
	"Etag", "Expect", "Expires", "Forwarded", "From", "Host", "If-Match", "If-Modified-Since",
	"If-None-Match", "If-Range", "If-Unmodified-Since", "Keep-Alive", "Last-Modified", "Link",
	"Location", "Origin", "Pragma", "Priority", "Proxy-Authorization", "Proxy-Connection", "Range",
	"Referer", "Retry-After", "Sec-Fetch-Dest", "Sec-Fetch-Mode", "Sec-Fetch-Site", "Sec-Fetch-User",
	"Server", "Set-Cookie", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
	"Upgrade-Insecure-Requests", "User-Agent", "Vary", "Via", "X-Forwarded-For", "X-Forwarded-Host",
	"X-Forwarded-Proto", "X-Real-Ip", "X-Request-Id", "X-Requested-With",
}

// The common names' table: a name's key (commonKey) times commonMul, its
// top nine bits, is the slot of the one common name with that key, by
// both of its forms (the key is blind to case); the slot holds its index
// in commonForms, plus one (0: none). commonMul is found when the program
// starts, the first multiplier that gives each name a slot of its own:
// where a map hashes all of a name and probes its groups, a look here is
// four bytes, a multiplication and one or two comparisons.
type commonForm struct{ canonical, lower string }

var tokenText, commonForms, commonSlots, commonMul = commonTable()

func commonTable() (text string, forms []commonForm, slots [512]uint8, mul uint32) {
	text = strings.Join(commonNames, "") + scheme
	at := 0
	for _, n := range commonNames {
		c := text[at : at+len(n)]
		at += len(n)
		forms = append(forms, commonForm{c, strings.ToLower(c)})
	}
	for mul = 0x9e3779b1; ; mul += 2 {
		clear(slots[:])
		fits := true
		for i, f := range forms {
			slot := &slots[commonKey(f.canonical)*mul>>23]
			if *slot != 0 {
				fits = false
				break
			}
			*slot = uint8(i + 1)
		}
		if fits {
			return text, forms, slots, mul
		}
	}
}

// commonKey is a name's length and its first and last two bytes, in lower
// case (a name of two bytes or more).
func commonKey(name string) uint32 {
	n := len(name)
	return uint32(n) | uint32(name[0]|0x20)<<8 | uint32(name[n-1]|0x20)<<16 | uint32(name[n-2]|0x20)<<24
}

// commonName returns the canonical form of name, cut from tokenText, when
// name is one of commonNames by itself or in lower case.
func commonName(name string) (string, bool) {
	if len(name) < 2 {
		return "", false
	}
	i := commonSlots[commonKey(name)*commonMul>>23]
	if i == 0 {
		return "", false
	}
	f := &commonForms[i-1]
	if name == f.canonical || name == f.lower {
		return f.canonical, true
	}
	return "", false
}

// scheme ends tokenText: X-Forwarded-Proto's values, "http" its first
// four bytes.
const scheme = "https"

// CommonName returns name as the short way's readers file it: one of
// commonNames in its canonical form, cut from tokenText, which a writer
// knows for a token without looking at it; any other name as it is. A
// name a handler sets often is best made once with it.
func CommonName(name string) string {
	if c, ok := commonName(name); ok {
		return c
	}
	return name
}

// CommonValue is CommonName for the values rotor's own code sends most
// ("http", "https": X-Forwarded-Proto's): cut from tokenText, a writer
// writes them as they are without looking at them.
func CommonValue(v string) string {
	if v == "http" || v == "https" {
		return tokenText[len(tokenText)-len(scheme):][:len(v)]
	}
	return v
}

// The classes of bytes the strict readers tell apart.
const (
	tokenByte = 1 << iota // may be in a field name: a tchar (RFC 9110, 5.6.2)
	lowerByte             // a to z
	upperByte             // A to Z
	textByte              // may be in a field value or a reason phrase: no control character but tab
	pathByte              // stands for itself in a URL's path (url.URL's EscapedPath does not escape it)
	dashByte              // '-'
)

// dashShift is dashByte's bit: a class shifted right by it is 1 for '-'.
const dashShift = 5

// byteClass is each byte's classes.
var byteClass = func() (t [256]uint8) {
	for c := range 256 {
		if httpguts.IsTokenRune(rune(c)) {
			t[c] |= tokenByte
		}
		if 'a' <= c && c <= 'z' {
			t[c] |= lowerByte
		}
		if 'A' <= c && c <= 'Z' {
			t[c] |= upperByte
		}
		if c >= ' ' && c != 0x7f || c == '\t' {
			t[c] |= textByte
		}
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.~$&+,/:;=@", byte(c)) >= 0 {
			t[c] |= pathByte
		}
		if c == '-' {
			t[c] |= dashByte
		}
	}
	return t
}()

// plainText reports whether s has no control character but tab: what a
// field value or a reason phrase may hold for the strict readers.
func plainText(s string) bool {
	if ctlFree(s) {
		return true
	}
	for i := 0; i < len(s); i++ {
		if byteClass[s[i]]&textByte == 0 {
			return false
		}
	}
	return true
}

// Eight bytes at a time: ones has 1 in each byte, highs each byte's high
// bit.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// ctlFree reports whether s has no control character at all (tab being
// one): no byte below 0x20 and none 0x7f. It tests eight bytes at a time,
// the last eight overlapping those before them.
func ctlFree(s string) bool {
	if len(s) < 8 {
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < ' ' || c == 0x7f {
				return false
			}
		}
		return true
	}
	last := s[len(s)-8:]
	for len(s) > 8 {
		if hasCtl(s[:8]) {
			return false
		}
		s = s[8:]
	}
	return !hasCtl(last)
}

// hasCtl reports whether w, eight bytes, has a control byte: (x - n*ones)
// &^ x & highs is not 0 exactly when a byte of x is below n (n at most
// 0x80), the lowest such byte borrowing and none before it.
func hasCtl(w string) bool {
	x := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
		uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
	del := x ^ 0x7f*ones // a byte 0x7f is 0 in del
	return ((x-0x20*ones)&^x|(del-ones)&^del)&highs != 0
}
