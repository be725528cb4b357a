package health

import (
	"sync"
	"time"
)

// Clock tells the time. The health model never sleeps and never starts a
// timer: every transition is worked out from the time a Clock gives when
// something happens, so a simulator or a test can drive it on virtual time.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// ManualClock is a Clock that moves only when told to. It is safe for
// concurrent use. The zero value starts at an arbitrary fixed instant.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time // guarded by mu
}

// NewManualClock returns a clock stopped at start.
func NewManualClock(start time.Time) *ManualClock { return &ManualClock{now: start} }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now.IsZero() {
		c.now = epoch
	}
	return c.now
}

// Advance moves the clock forward by d.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now.IsZero() {
		c.now = epoch
	}
	c.now = c.now.Add(d)
}

// Set moves the clock to t.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}
