package reverse

import (
	"net/http/httptest"
	"testing"

	"github.com/rotor-lb/rotor/internal/testtool"
)

// The writers an answer is copied through pass the client's writer's
// window on: the recorder, and the flusher of a stream over it.
func TestWritersPassTheWindowOn(t *testing.T) {
	rec := &recorder{ResponseWriter: testtool.Framing{ResponseRecorder: httptest.NewRecorder()}}
	plain := &recorder{ResponseWriter: httptest.NewRecorder()}
	for name, w := range map[string][2]interface{ Write([]byte) (int, error) }{
		"recorder": {rec, plain},
		"flusher":  {&flusher{w: rec}, &flusher{w: plain}},
	} {
		if framing, whole := testtool.Windows(w[0], w[1]); !framing || !whole {
			t.Errorf("%s: the client's writer's window passed on: %v; the whole buffer over a writer that does not frame: %v", name, framing, whole)
		}
	}
}
