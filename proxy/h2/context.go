package h2

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rotor-lb/rotor/proxy/h1"
)

// streamContext is a stream's request's context, made with the stream: it
// has the connection's values, and is done once the stream ends (its
// answer finished, or its reset, which the connection's end is for every
// stream it has). A context.WithCancel of the connection's would cost
// three allocations a stream (the context, its Done channel, the value
// carrying the hook) and the connection context's lock each time a
// stream starts and ends; this one is part of the stream, makes its
// channel only when asked for it, and carries the hook itself
// (h1.HookedContext), so that the backend exchange is cut without
// registering with it.
//
// A context derived from it (context.WithCancel, context.AfterFunc)
// registers through AfterFunc, as it would with a context of the
// standard library's, without a goroutine a derived context.
type streamContext struct {
	// values is the connection's context, for its values alone: its end
	// comes after every stream's. The standard library does not take its
	// cancelCtx for this context's (the Done channels differ), and
	// context.Cause of this one is its Err. (context.WithoutCancel would
	// allocate at every Value.)
	values context.Context
	hook   h1.CancelHook
	ended  atomic.Bool

	mu     sync.Mutex
	done   chan struct{} // made by the first Done; closed once ended
	afters []*afterFunc  // to run once ended, each in a goroutine of its own
}

// An afterFunc is a function registered with AfterFunc.
type afterFunc struct{ f func() }

// closedDone is the Done of a context that ended before anyone asked.
var closedDone = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func (x *streamContext) Deadline() (time.Time, bool) { return x.values.Deadline() }
func (x *streamContext) Value(key any) any           { return x.values.Value(key) }

func (x *streamContext) Done() <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.done == nil {
		if x.ended.Load() {
			x.done = closedDone
		} else {
			x.done = make(chan struct{})
		}
	}
	return x.done
}

func (x *streamContext) Err() error {
	if x.ended.Load() {
		return context.Canceled
	}
	return nil
}

// CancelHook is the stream's hook, fired after the context ends
// (h1.HookedContext).
func (x *streamContext) CancelHook() *h1.CancelHook { return &x.hook }

// AfterFunc runs f in a goroutine of its own once x has ended, at once if
// it has; stop keeps it from running, and reports whether it did, as
// context.AfterFunc's stop does. context.AfterFunc and the contexts
// derived from x call it.
func (x *streamContext) AfterFunc(f func()) (stop func() bool) {
	a := &afterFunc{f: f}
	x.mu.Lock()
	if x.ended.Load() {
		x.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	x.afters = append(x.afters, a)
	x.mu.Unlock()
	return func() bool {
		x.mu.Lock()
		defer x.mu.Unlock()
		i := slices.Index(x.afters, a)
		if i < 0 {
			return false // it ran, or was stopped before
		}
		x.afters = slices.Delete(x.afters, i, i+1)
		return true
	}
}

// end ends x, once: its Done closes and the functions registered with it
// run; then the hook fires, which cuts a backend exchange the request
// has running.
func (x *streamContext) end() {
	x.mu.Lock()
	if x.ended.Load() {
		x.mu.Unlock()
		return
	}
	x.ended.Store(true)
	if x.done != nil {
		close(x.done)
	}
	afters := x.afters
	x.afters = nil
	x.mu.Unlock()
	for _, a := range afters {
		go a.f()
	}
	x.hook.Fire()
}
