package proxy

import "io"

// A Framer writes what it is given inside framing of its own, as an
// HTTP/1.1 writer of a body of no given length sends each write as a
// chunk. Window returns the part of a copy buffer to read its next bytes
// into (rawio.ChunkWindow's, when it chunks; the whole buffer otherwise).
// Writers that wrap one pass Window on (WindowOf).
type Framer interface {
	Window(buf []byte) []byte
}

// WindowOf returns w's window on buf: buf itself unless w is a Framer.
func WindowOf(w io.Writer, buf []byte) []byte {
	if f, ok := w.(Framer); ok {
		return f.Window(buf)
	}
	return buf
}
