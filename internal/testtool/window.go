package testtool

import (
	"io"
	"net/http/httptest"

	"github.com/rotor-lb/rotor/proxy"
)

// Framing is a client's writer that frames (a proxy.Framer): its window
// on a buffer of 100 bytes or more is bytes 7 to 100 of it, so that a
// test can tell whether a writer wrapping it passes the window on.
type Framing struct{ *httptest.ResponseRecorder }

// Window returns b[7:100].
func (Framing) Window(b []byte) []byte { return b[7:100] }

// Windows reports what w makes of a copy buffer's window: framing, that
// it passes on a Framing's below it, and plain, that it leaves the whole
// buffer to a writer below it that does not frame (over which plainW
// is the same kind of writer).
func Windows(w, plainW io.Writer) (framing, plain bool) {
	buf := make([]byte, 1000)
	got := proxy.WindowOf(w, buf)
	framing = len(got) == 93 && &got[0] == &buf[7]
	return framing, len(proxy.WindowOf(plainW, buf)) == len(buf)
}
