// Package cores reads how busy the cores a process may run on are, and
// how much CPU time the process has used: what rotor's ready queue, its
// relay loop and its count of Ps go by; and it says when an event loop
// holds its turns (Holds), and holds them (Hold).
package cores

import (
	"bytes"
	"strconv"
	"time"
)

// Ticks counts the clock ticks of a set of cores: those they were busy
// (anyone's work, the kernel's, and time the hypervisor gave to other
// machines) and all of them.
type Ticks struct{ Busy, Total uint64 }

// Share is how busy the cores were between then and t (0 to 1); false:
// no time passed that both readings saw (t not after then).
func (t Ticks) Share(then Ticks) (float64, bool) { return t.ShareWithout(then, 0) }

// ShareWithout is Share with idle of the busy time left out, as the
// cores were idle for it (rotor's own spinning, which it would give up
// to other work): never under 0.
func (t Ticks) ShareWithout(then Ticks, idle time.Duration) (float64, bool) {
	if then.Total == 0 || t.Total <= then.Total || t.Busy < then.Busy {
		return 0, false
	}
	busy := float64(t.Busy-then.Busy) - idle.Seconds()*TicksPerSecond
	return max(busy, 0) / float64(t.Total-then.Total), true
}

// TicksPerSecond is the rate /proc/stat counts in (USER_HZ, 100 on every
// architecture Linux has).
const TicksPerSecond = 100

// Sum adds up the ticks of the cores of /proc/stat's text that mine
// reports as the process's: of a line "cpuN user nice system idle iowait
// irq softirq steal ...", idle and iowait are idle, the rest of the first
// eight busy (guest time is counted in user already). A line that cannot
// be read whole counts for nothing.
func Sum(stat []byte, mine func(int) bool) Ticks {
	var t Ticks
	for line := range bytes.Lines(stat) {
		rest, ok := bytes.CutPrefix(line, []byte("cpu"))
		if !ok || len(rest) == 0 || rest[0] < '0' || rest[0] > '9' {
			continue // the total line, or another counter
		}
		fields := bytes.Fields(rest)
		n, err := strconv.Atoi(string(fields[0]))
		if err != nil || !mine(n) || len(fields) < 9 {
			continue
		}
		var c Ticks
		for i, f := range fields[1:9] {
			v, err := strconv.ParseUint(string(f), 10, 64)
			if err != nil {
				c = Ticks{}
				break
			}
			c.Total += v
			if i != 3 && i != 4 { // idle, iowait
				c.Busy += v
			}
		}
		t.Busy += c.Busy
		t.Total += c.Total
	}
	return t
}
