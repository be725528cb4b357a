package forward

import (
	"net/http/httptest"
	"testing"

	"github.com/rotor-lb/rotor/proxy"
)

// framerWriter is a client's writer that frames: its window is a part
// of the buffer.
type framerWriter struct{ *httptest.ResponseRecorder }

func (framerWriter) Window(b []byte) []byte { return b[7:100] }

// The writers an answer is copied through pass the client's writer's
// window on.
func TestWritersPassTheWindowOn(t *testing.T) {
	buf := make([]byte, 1000)
	c := &counter{ResponseWriter: framerWriter{httptest.NewRecorder()}}
	if got := proxy.WindowOf(flushWriter{c}, buf); len(got) != 93 || &got[0] != &buf[7] {
		t.Errorf("a window of %d, not the client's writer's", len(got))
	}
	plain := &counter{ResponseWriter: httptest.NewRecorder()}
	if got := proxy.WindowOf(flushWriter{plain}, buf); len(got) != len(buf) {
		t.Errorf("over a writer that does not frame: a window of %d, want the buffer", len(got))
	}
}
