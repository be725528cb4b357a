package h2

import (
	"errors"
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// A headerBlock is a header block decoded: a HEADERS frame's, with the
// CONTINUATION frames after it. It is what x/net's Framer makes of one
// when its ReadMetaHeaders is set (a MetaHeadersFrame), with the same
// checks, but the connection keeps one block, whose field slice and whose
// decoder's emit function serve all its blocks: x/net's makes the frame,
// a closure and its variables, and grows a new field slice every block,
// about nine allocations a request.
type headerBlock struct {
	dec     *hpack.Decoder
	maxList uint32 // the header list's bound, as HPACK counts

	// The block's HEADERS frame.
	streamID   uint32
	ended      bool // END_STREAM
	selfDepend bool // a priority on the stream itself

	fields []hpack.HeaderField // pseudo-header fields first
	pseudo int                 // fields[:pseudo] are pseudo-header fields

	// truncated: the fields went past the header list's bound, and those
	// after it were dropped.
	truncated bool
	remain    uint32 // what the header list may still take, as HPACK counts
	regular   bool   // a regular field came
	invalid   error  // the first field refused: the rest are not kept
}

// keepFields is the field slice's capacity a connection keeps between
// blocks: a larger one, grown by a long header list, goes.
const keepFields = 64

var (
	errFieldName          = errors.New("h2: invalid header field name")
	errFieldValue         = errors.New("h2: invalid header field value")
	errPseudoAfterRegular = errors.New("h2: pseudo-header field after a regular one")
	errPseudoName         = errors.New("h2: unknown, repeated or mixed pseudo-header fields")
)

// newHeaderBlock returns a connection's block, its header list bound by
// maxList.
func newHeaderBlock(maxList uint32) *headerBlock {
	b := &headerBlock{maxList: maxList}
	b.dec = hpack.NewDecoder(4096, b.emit)
	b.dec.SetMaxStringLength(int(min(maxList, 1<<30)))
	return b
}

// emit takes a decoded field, as readMetaFrame's does: a value with a
// forbidden byte, a name that is not a lower-case token or a
// pseudo-header field after a regular one makes the block invalid, and a
// field past the header list's bound truncates it; either way the fields
// after it are decoded (the dynamic table must follow) and dropped.
func (b *headerBlock) emit(hf hpack.HeaderField) {
	if !httpguts.ValidHeaderFieldValue(hf.Value) {
		b.invalid = errFieldValue // the value is not in the error: it may be a secret
	}
	if strings.HasPrefix(hf.Name, ":") {
		if b.regular {
			b.invalid = errPseudoAfterRegular
		}
	} else {
		b.regular = true
		if !validWireName(hf.Name) {
			b.invalid = errFieldName
		}
	}
	if b.invalid != nil {
		b.dec.SetEmitEnabled(false)
		return
	}
	size := hf.Size()
	if size > b.remain {
		b.dec.SetEmitEnabled(false)
		b.truncated = true
		b.remain = 0
		return
	}
	b.remain -= size
	b.fields = append(b.fields, hf)
	if !b.regular {
		b.pseudo++
	}
}

// validWireName: a field name as HTTP/2 sends it, a token in lower case.
func validWireName(name string) bool {
	if !httpguts.ValidHeaderFieldName(name) {
		return false
	}
	for i := 0; i < len(name); i++ {
		if 'A' <= name[i] && name[i] <= 'Z' {
			return false
		}
	}
	return true
}

// read decodes the block hf begins, reading the CONTINUATION frames that
// follow it from fr (the Framer checks that they do, on hf's stream), as
// readMetaFrame does: a fragment more than twice what the header list may
// still take, or any fragment after a refused field, ends the connection,
// as does a block HPACK cannot decode; a refused field, or pseudo-header
// fields checkPseudo refuses, reset the stream.
func (b *headerBlock) read(hf *http2.HeadersFrame, fr *http2.Framer) error {
	if cap(b.fields) > keepFields {
		b.fields = nil
	}
	b.streamID, b.ended = hf.StreamID, hf.StreamEnded()
	b.selfDepend = hf.HasPriority() && hf.Priority.StreamDep == hf.StreamID
	b.fields, b.pseudo = b.fields[:0], 0
	b.truncated, b.remain, b.regular, b.invalid = false, b.maxList, false, nil
	b.dec.SetEmitEnabled(true)
	var frag interface {
		HeaderBlockFragment() []byte
		HeadersEnded() bool
	} = hf
	for {
		p := frag.HeaderBlockFragment()
		if int64(len(p)) > 2*int64(b.remain) || b.invalid != nil {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		if _, err := b.dec.Write(p); err != nil {
			return http2.ConnectionError(http2.ErrCodeCompression)
		}
		if frag.HeadersEnded() {
			break
		}
		f, err := fr.ReadFrame()
		if err != nil {
			return err
		}
		frag = f.(*http2.ContinuationFrame) // the Framer allows no other frame here
	}
	if err := b.dec.Close(); err != nil {
		return http2.ConnectionError(http2.ErrCodeCompression)
	}
	if b.invalid != nil {
		return http2.StreamError{StreamID: b.streamID, Code: http2.ErrCodeProtocol, Cause: b.invalid}
	}
	return b.checkPseudo()
}

// checkPseudo refuses what readMetaFrame refuses of the pseudo-header
// fields (whether they are a request's is newRequest's to say): an
// unknown one, one repeated, a response's with a request's.
func (b *headerBlock) checkPseudo() error {
	pseudo := b.pseudoFields()
	request, response := false, false
	for i, hf := range pseudo {
		switch hf.Name {
		case ":method", ":path", ":scheme", ":authority", ":protocol":
			request = true
		case ":status":
			response = true
		default:
			return http2.StreamError{StreamID: b.streamID, Code: http2.ErrCodeProtocol, Cause: errPseudoName}
		}
		for _, before := range pseudo[:i] { // at most five before: a sixth known name repeats one
			if before.Name == hf.Name {
				return http2.StreamError{StreamID: b.streamID, Code: http2.ErrCodeProtocol, Cause: errPseudoName}
			}
		}
	}
	if request && response {
		return http2.StreamError{StreamID: b.streamID, Code: http2.ErrCodeProtocol, Cause: errPseudoName}
	}
	return nil
}

func (b *headerBlock) pseudoFields() []hpack.HeaderField  { return b.fields[:b.pseudo] }
func (b *headerBlock) regularFields() []hpack.HeaderField { return b.fields[b.pseudo:] }
