package cores

import (
	"sync/atomic"
	"time"
)

// An event loop of rotor's (the short way's ready queue, the TCP relay
// loop) that takes each arrival as it comes sends each client and
// backend one message at a time, and wakes them as often; one that lets
// a turn's arrivals gather for a moment sends them several together.
// Where the clients and the backends are what is busy (rotor's core with
// room, theirs full), their switches between each other set the rate:
// held turns brought them level with HAProxy's, and rotor's rate with it
// (docs/BENCHMARKS.md, "Turns held while the core has room", and "Held
// turns in the relay loop"). A hold spins, as a sleep that short served
// less than none (Go's timers sleep a millisecond at the least), and the
// time spun is left out of how busy the next look finds the cores: it is
// time rotor would give up to other work.
//
// Holds says, look by look, whether a loop holds its turns: while its
// cores are busy enough for the holds to gather something (From) and not
// full (Until), where a hold would only idle the core, and with enough
// going on at once (many: with few, a hold gathers only their own next
// steps, each the later for it). Once the cores with the holds in them
// are full (Until and the hysteresis past it), the holds stop: they spun
// on time the work needed, and, left out of the share, they would hide
// that the cores are full.

// HoldFor is how long a held turn waits: 10 us gained at ten
// connections and at fifty, where 20 us gained more at fifty and nothing
// at ten.
const HoldFor = 10 * time.Microsecond

// HoldFrom and HoldUntil are the loops' band (Holds' From and Until):
// turns are held from 50% busy, where a hold finds something to gather,
// to 90%, where it would idle a core the work needs.
const (
	HoldFrom  = 0.5
	HoldUntil = 0.9
)

// holdHysteresis is how far past a line the share moves before a loop's
// holds change back.
const holdHysteresis = 0.05

var spun atomic.Int64

// Hold holds a turn for d: it spins, and counts the time as spun.
func Hold(d time.Duration) {
	start := time.Now()
	for time.Since(start) < d {
	}
	spun.Add(int64(time.Since(start)))
}

// Spun is the time Hold has spun, all loops' together, since rotor
// started.
func Spun() time.Duration { return time.Duration(spun.Load()) }

// A Gauge tells how busy rotor's cores were between two of its looks.
// Its zero value is ready to use; one goroutine looks at a time.
type Gauge struct {
	// Tests set these: the cores' ticks (nil: Now), rotor's CPU time
	// (nil: CPU) and the time its holds spun (nil: Spun).
	ReadCores func() (Ticks, bool)
	ReadCPU   func() time.Duration
	ReadSpun  func() time.Duration

	looked bool
	cpu    time.Duration
	ticks  Ticks
	spun   time.Duration
}

// Look reads how busy the cores were over since, the time since the last
// look, for rotor running on procs Ps: busy with work (busy) and with the
// holds too (full), each the larger of rotor's own share of its Ps and
// that of the cores it may run on, whoever used them (a core rotor
// shares with its backends is full with rotor at 70% of it). false: the
// first look, which only notes where things stand.
func (g *Gauge) Look(since time.Duration, procs int) (busy, full float64, ok bool) {
	readCores, readCPU, readSpun := g.ReadCores, g.ReadCPU, g.ReadSpun
	if readCores == nil {
		readCores = Now
	}
	if readCPU == nil {
		readCPU = CPU
	}
	if readSpun == nil {
		readSpun = Spun
	}
	cpu, s := readCPU(), readSpun()
	ticks, ticksOK := readCores()
	used, held, last := cpu-g.cpu, s-g.spun, g.ticks
	first := !g.looked
	g.looked, g.cpu, g.spun, g.ticks = true, cpu, s, ticks
	if first || since <= 0 || procs <= 0 {
		return 0, 0, false
	}
	busy = float64(used-held) / float64(since) / float64(procs)
	full = float64(used) / float64(since) / float64(procs)
	if ticksOK {
		if share, ok := ticks.ShareWithout(last, held); ok {
			busy = max(busy, share)
		}
		if share, ok := ticks.Share(last); ok {
			full = max(full, share)
		}
	}
	return busy, full, true
}

// Holds is whether a loop holds its turns: from From busy to Until (a
// share of the cores, as a Gauge reads it).
type Holds struct {
	From, Until float64
	on          atomic.Bool
}

// On says whether turns are held.
func (h *Holds) On() bool { return h.on.Load() }

// Off stops the holds (until Decide starts them again).
func (h *Holds) Off() { h.on.Store(false) }

// Decide starts or stops the holds by a look's busy and full shares and
// whether enough went on at once (many).
func (h *Holds) Decide(busy, full float64, many bool) {
	on := h.on.Load()
	switch {
	case on && (!many || busy >= h.Until || full >= h.Until+holdHysteresis || busy < h.From-holdHysteresis):
		h.on.Store(false)
	case !on && many && busy >= h.From && busy < h.Until-holdHysteresis:
		h.on.Store(true)
	}
}
