package h2

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/proxy/h1"
)

// A stream's context behaves as a cancelled context of the standard
// library's: Done closes at its end, whether asked for before or after;
// Err and Cause say Canceled; contexts derived from it and AfterFuncs end
// with it (through its AfterFunc, with no goroutine waiting before it
// ends: TestMain's leak check); a stopped AfterFunc does not run; the
// connection's values are its, and its end is not the connection's; it
// carries its hook (h1.HookedContext), which h1's transport finds on it.
func TestStreamContext(t *testing.T) {
	base := context.WithValue(context.Background(), http.ServerContextKey, "server")
	connCtx, cancelConn := context.WithCancel(base)
	defer cancelConn()
	x := &streamContext{values: connCtx}

	if x.Err() != nil || x.Value(http.ServerContextKey) != "server" {
		t.Fatalf("before its end: Err %v, value %v", x.Err(), x.Value(http.ServerContextKey))
	}
	if _, ok := x.Deadline(); ok {
		t.Fatal("a deadline of its own")
	}
	done := x.Done()
	child, cancelChild := context.WithCancel(x)
	defer cancelChild()
	ran := make(chan struct{})
	context.AfterFunc(x, func() { close(ran) })
	stopped := false
	stop := context.AfterFunc(x, func() { stopped = true })
	if !stop() || stop() {
		t.Fatal("stop before the end: want true once, then false")
	}
	var hooked h1.HookedContext = x
	if hooked.CancelHook() != &x.hook {
		t.Fatal("not the stream's hook")
	}

	select {
	case <-done:
		t.Fatal("done before its end")
	case <-child.Done():
		t.Fatal("child done before its end")
	default:
	}
	x.end()
	x.end() // a second end changes nothing (and would close done twice)
	for what, c := range map[string]<-chan struct{}{"Done": done, "child": child.Done(), "AfterFunc": ran, "Done asked after": x.Done()} {
		select {
		case <-c:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s not done after the end", what)
		}
	}
	if !errors.Is(x.Err(), context.Canceled) || !errors.Is(context.Cause(x), context.Canceled) ||
		!errors.Is(child.Err(), context.Canceled) || !errors.Is(context.Cause(child), context.Canceled) {
		t.Fatalf("after the end: Err %v, Cause %v; the child's %v, %v", x.Err(), context.Cause(x), child.Err(), context.Cause(child))
	}
	if stopped {
		t.Fatal("a stopped AfterFunc ran")
	}
	late := make(chan struct{})
	if context.AfterFunc(x, func() { close(late) })() {
		t.Fatal("stop of an AfterFunc registered after the end: true")
	}
	select {
	case <-late:
	case <-time.After(5 * time.Second):
		t.Fatal("an AfterFunc registered after the end did not run")
	}
	if connCtx.Err() != nil {
		t.Fatal("the stream's end ended the connection's context")
	}
}
