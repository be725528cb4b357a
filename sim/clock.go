// Package sim is a discrete-event simulator that runs rotor's own policies
// and health model, the very code the proxies run, on a virtual clock.
//
// Requests arrive (Poisson, or from a trace), a balance.Pool picks a server
// for each, every server is a queue in front of c workers, and outcomes go
// back through the pick's Done at their virtual completion time. The same
// seeded arrival stream is replayed for every policy, so the rows of a
// comparison differ only by the policy. Nothing here touches the network.
package sim

import (
	"time"
)

// Clock is the simulation's virtual clock: it implements health.Clock and
// moves only when the engine moves it.
type Clock struct {
	now time.Duration // since the start; only the engine's goroutine writes it
}

// Epoch is the instant virtual time zero stands for.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Now returns the virtual time.
func (c *Clock) Now() time.Time { return Epoch.Add(c.now) }

// Elapsed returns the virtual time since the start.
func (c *Clock) Elapsed() time.Duration { return c.now }

func (c *Clock) set(t time.Duration) { c.now = t }
