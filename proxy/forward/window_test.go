package forward

import (
	"net/http/httptest"
	"testing"

	"github.com/rotor-lb/rotor/internal/testtool"
)

// The writers an answer is copied through pass the client's writer's
// window on.
func TestWritersPassTheWindowOn(t *testing.T) {
	c := &counter{ResponseWriter: testtool.Framing{ResponseRecorder: httptest.NewRecorder()}}
	plain := &counter{ResponseWriter: httptest.NewRecorder()}
	if framing, whole := testtool.Windows(flushWriter{c}, flushWriter{plain}); !framing || !whole {
		t.Errorf("the client's writer's window passed on: %v; the whole buffer over a writer that does not frame: %v", framing, whole)
	}
}
