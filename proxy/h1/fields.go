package h1

import (
	"net/http"
	"slices"
	"strings"
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
// less those skip names and, with trailers, those named with
// http.TrailerPrefix: the fields net/http's Header.WriteSubset writes, in
// its order.
func sortedFields(buf []headerField, h http.Header, skip []string, trailers bool) []headerField {
	fields := buf[:0]
	for name, values := range h {
		if slices.Contains(skip, name) || trailers && strings.HasPrefix(name, http.TrailerPrefix) {
			continue
		}
		fields = append(fields, headerField{name, values})
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
		for j := i; j > 0 && fields[j].name < fields[j-1].name; j-- {
			fields[j], fields[j-1] = fields[j-1], fields[j]
		}
	}
}

// appendFields appends fields as net/http's Header.WriteSubset writes
// them, byte for byte: names that are not tokens left out, and each value
// with CR and LF made spaces and the whitespace at its ends trimmed.
func appendFields(b []byte, fields []headerField) []byte {
	for _, f := range fields {
		if !validName(f.name) {
			continue
		}
		for _, v := range f.values {
			b = append(b, f.name...)
			b = append(b, ": "...)
			b = appendValue(b, v)
			b = append(b, "\r\n"...)
		}
	}
	return b
}

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

// takerOf returns the HeaderTaker w is or unwraps to; nil when there is
// none.
func takerOf(w http.ResponseWriter) HeaderTaker {
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
