//go:build !linux

package cores

import "time"

// Now reads the ticks of the process's cores on Linux alone: elsewhere
// they cannot be read.
func Now() (Ticks, bool) { return Ticks{}, false }

// CPU reads the process's CPU time on Linux alone (0 elsewhere).
func CPU() time.Duration { return 0 }
