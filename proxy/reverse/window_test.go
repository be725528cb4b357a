package reverse

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
// window on: the recorder, and the flusher of a stream over it.
func TestWritersPassTheWindowOn(t *testing.T) {
	buf := make([]byte, 1000)
	rec := &recorder{ResponseWriter: framerWriter{httptest.NewRecorder()}}
	f := &flusher{w: rec}
	for name, w := range map[string]interface{ Write([]byte) (int, error) }{"recorder": rec, "flusher": f} {
		if got := proxy.WindowOf(w, buf); len(got) != 93 || &got[0] != &buf[7] {
			t.Errorf("%s: a window of %d, not the client's writer's", name, len(got))
		}
	}
	plain := &recorder{ResponseWriter: httptest.NewRecorder()}
	if got := proxy.WindowOf(&flusher{w: plain}, buf); len(got) != len(buf) {
		t.Errorf("over a writer that does not frame: a window of %d, want the buffer", len(got))
	}
}
