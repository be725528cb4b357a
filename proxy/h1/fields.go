package h1

import (
	"net/http"
	"slices"
	"strings"
	"unsafe"
)

// Value returns the first value of the field name, "" when there is
// none: Header.Get for a name that is canonical already, as the keys of a
// parsed header and the names in rotor's code are. Get canonicalizes its
// argument first, which costs more than the lookup itself.
func Value(h http.Header, name string) string { return firstOf(h[name]) }

// headerField is one name of a header map and its values, as it is written.
type headerField struct {
	name   string
	values []string
}

// sortedFields returns h's fields sorted by name, in buf when they fit,
// less those skip names: the fields net/http's Header.WriteSubset writes,
// in its order.
func sortedFields(buf []headerField, h http.Header, skip []string) []headerField {
	fields := buf[:0]
	for name, values := range h {
		if !slices.Contains(skip, name) {
			fields = append(fields, headerField{name, values})
		}
	}
	sortFields(fields)
	return fields
}

// requestFields is sortedFields for a request's header as Request.Write
// writes it: less the fields it leaves out or writes from elsewhere
// (Host, User-Agent, Content-Length, Transfer-Encoding, Trailer), told
// apart by a switch, which looks at a name's length first, where a list
// compares each name with each of its own.
func requestFields(buf []headerField, h http.Header) []headerField {
	fields := buf[:0]
	for name, values := range h {
		switch name {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
		default:
			fields = append(fields, headerField{name, values})
		}
	}
	sortFields(fields)
	return fields
}

// sortFields sorts fields by name.
func sortFields(fields []headerField) {
	if len(fields) > 12 {
		slices.SortFunc(fields, func(a, b headerField) int { return strings.Compare(a.name, b.name) })
		return
	}
	// A head's few fields sort quicker by insertion.
	for i := 1; i < len(fields); i++ {
		for j := i; j > 0 && nameBefore(fields[j].name, fields[j-1].name); j-- {
			fields[j], fields[j-1] = fields[j-1], fields[j]
		}
	}
}

// nameBefore reports a < b, in line: eight bytes at a time while both
// have them (names that differ late share a prefix: X-Forwarded-), then
// byte by byte. The runtime's comparison is a call, and a setting-up
// for long strings, where two names most often differ within their
// first few bytes.
func nameBefore(a, b string) bool {
	for len(a) >= 8 && len(b) >= 8 {
		if x, y := word(a), word(b); x != y {
			return x < y
		}
		a, b = a[8:], b[8:]
	}
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}

// word is s's first eight bytes, the first the most significant: words
// compare as their bytes do.
func word(s string) uint64 {
	_ = s[7]
	return uint64(s[0])<<56 | uint64(s[1])<<48 | uint64(s[2])<<40 | uint64(s[3])<<32 |
		uint64(s[4])<<24 | uint64(s[5])<<16 | uint64(s[6])<<8 | uint64(s[7])
}

// appendFields appends fields as net/http's Header.WriteSubset writes
// them, byte for byte: names that are not tokens left out, and each value
// with CR and LF made spaces and the whitespace at its ends trimmed. A
// name or a value cut from commonNames' one string (CommonName,
// CommonValue), and a value cut from the head read (nil: none), need no
// look to be written as they are.
func appendFields(b []byte, fields []headerField, read *ReadHead) []byte {
	if read == nil {
		read = &noHead
	}
	for _, f := range fields {
		if !known(f.name) && !validName(f.name) {
			continue
		}
		for _, v := range f.values {
			b = append(b, f.name...)
			b = append(b, ": "...)
			if read.cut(v) || known(v) {
				b = append(b, v...)
			} else {
				b = appendValue(b, v)
			}
			b = append(b, "\r\n"...)
		}
	}
	return b
}

// A ReadHead is a head the strict way read (a client's request,
// parseHead; a backend's answer, parseResponse): the one string its
// names and values were cut from (headText). Every string the readers
// cut from it lies within one of its lines, which hold no CR or LF but
// the one that ends each (indexCRLF, scanHead, headEnd), and the string
// itself is never handed out: so a string that lies within it has no CR
// or LF, and one that does not begin or end with a space or a tab is
// what appendValue would make of it, to the byte. A value passed on as
// it came is such a string, and is written without being looked at
// twice; one the handler made is not, and is checked as before. (A
// string's bytes never change, and the ReadHead keeps them from being
// freed and reused while it holds them.) A request's has its client's
// address too, when no byte of it needs a look (plainAddr): the
// forwarding fields' values are cut from it. A request's also tells
// whether its head had none of the fields a proxy leaves out (sendable:
// OutgoingInPlace), and whether it had a User-Agent.
type ReadHead struct {
	text, addr      string
	sendable, agent bool
}

// noHead is no head: nothing is cut from it.
var noHead ReadHead

// cut reports whether v is a string cut from the head, or from the
// client's address, that appendValue leaves as it is. (The only bytes
// up to a space a head's lines hold are spaces and tabs, and an address
// has none.)
func (r *ReadHead) cut(v string) bool {
	return v != "" && v[0] > ' ' && v[len(v)-1] > ' ' && (within(v, r.text) || within(v, r.addr))
}

// plainAddr reports whether every piece of a, a client's address, is
// what appendValue leaves as it is: no byte of it a control byte, a
// space or above ASCII (an IP address and a port are digits, dots,
// colons, brackets and hex; an IPv6 zone is an interface's name).
func plainAddr(a string) bool {
	for i := 0; i < len(a); i++ {
		if a[i] <= ' ' || a[i] >= 0x7f {
			return false
		}
	}
	return true
}

// within reports whether v's bytes lie within s's.
func within(v, s string) bool {
	d := uintptr(unsafe.Pointer(unsafe.StringData(v))) - uintptr(unsafe.Pointer(unsafe.StringData(s)))
	return len(v) <= len(s) && d <= uintptr(len(s)-len(v))
}

// known reports whether s was cut from tokenText (CommonName,
// CommonValue): a token, as every piece of it is, and so a value
// appendValue leaves as it is.
func known(s string) bool { return s != "" && within(s, tokenText) }

// validName reports whether name is a token (httpguts.ValidHeaderFieldName),
// four bytes at a time.
func validName(name string) bool {
	if name == "" {
		return false
	}
	k := uint8(tokenByte)
	for len(name) >= 4 {
		k &= byteClass[name[0]] & byteClass[name[1]] & byteClass[name[2]] & byteClass[name[3]]
		name = name[4:]
	}
	for i := 0; i < len(name); i++ {
		k &= byteClass[name[i]]
	}
	return k&tokenByte != 0
}

// appendValue appends v trimmed of ASCII whitespace at its ends, a CR or
// LF within it made a space: what WriteSubset's replacement and
// textproto.TrimString make of it.
func appendValue(b []byte, v string) []byte {
	for len(v) > 0 && isSpace(v[0]) {
		v = v[1:]
	}
	for len(v) > 0 && isSpace(v[len(v)-1]) {
		v = v[:len(v)-1]
	}
	if ctlFree(v) || strings.IndexByte(v, '\r') < 0 && strings.IndexByte(v, '\n') < 0 {
		return append(b, v...)
	}
	start := len(b)
	b = append(b, v...)
	for i := start; i < len(b); i++ {
		if b[i] == '\r' || b[i] == '\n' {
			b[i] = ' '
		}
	}
	return b
}

// CopyHeader adds src's fields to dst, keys taken as they are (a parsed
// header's are canonical): a field dst lacks shares src's values, one it
// has gets them after its own.
func CopyHeader(dst, src http.Header) {
	for k, vv := range src {
		if have, ok := dst[k]; ok {
			dst[k] = append(have, vv...)
		} else {
			dst[k] = vv
		}
	}
}

// A HeaderTaker is an answer that can take a backend's header map whole,
// as its own (PassHeader): it does, and reports true, while its own is
// still empty and its head unwritten. The short way's answer is one, and
// HTTP/2's; a map taken from a backend's answer read the strict way goes
// back to HeaderMap's maps (PutHeaderMap) once the answer is done.
type HeaderTaker interface {
	TakeHeader(src http.Header) bool
}

// PassHeader makes src, a backend's answer's header, the header of w's
// answer. An answer that is a HeaderTaker, or that w unwraps to, takes it
// whole, in place of its own, as long as its own is still empty and its
// head unwritten: a proxy's answer then costs no copy of the backend's
// fields. Any other writer gets src's fields added to its own
// (CopyHeader). src is w's from then on.
func PassHeader(w http.ResponseWriter, src http.Header) { passHeader(w, takerOf(w), src) }

// passHeader is PassHeader with t, w's HeaderTaker (nil: none).
func passHeader(w http.ResponseWriter, t HeaderTaker, src http.Header) {
	if t != nil && src != nil && t.TakeHeader(src) {
		return
	}
	CopyHeader(w.Header(), src)
}

// PassAnswer is PassHeader with res's header, res being the answer to
// w's request from a backend. When the Transport read res the short way
// and w is the short way's server's answer, w takes res's block too (the
// response, its body's wrappers and the array its header's values are
// in) and gives it back once it is finished: the handler keeps nothing
// of res past its return.
func PassAnswer(w http.ResponseWriter, res *http.Response) {
	t := takerOf(w)
	if sw, ok := t.(*response); ok && sw.answer == nil {
		sw.answer = answerOf(res)
	}
	passHeader(w, t, res.Header)
}

// HeaderDone tells the short way's server, when w is (or unwraps to) its
// answer, that once the handler has returned nothing holds the request's
// header values any longer: no transport may still be writing a header
// sent on, which shares them. The server then reads the next request's
// values into the same array. Without it each request's are its own.
func HeaderDone(w http.ResponseWriter) {
	if sw, ok := takerOf(w).(*response); ok {
		sw.headerDone = true
	}
}

// RequestHead returns the head of the request w answers as the short
// way's server read it, for RoundTripTraced to write the values sent on
// as they came without checking them again; nil when w is not (and does
// not unwrap to) the short way's answer. It is the request's: good until
// the handler returns.
func RequestHead(w http.ResponseWriter) *ReadHead {
	if sw, ok := takerOf(w).(*response); ok && sw.c.block != nil {
		return &sw.c.block.read
	}
	return nil
}

// takerOf returns the HeaderTaker w is or unwraps to; nil when there is
// none.
func takerOf(w http.ResponseWriter) HeaderTaker {
	if sw, ok := w.(*response); ok {
		return sw // most often, and a look at w's type alone
	}
	for u := w; ; {
		if t, ok := u.(HeaderTaker); ok {
			return t
		}
		uw, ok := u.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		u = uw.Unwrap()
	}
}
