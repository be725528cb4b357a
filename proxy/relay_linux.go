//go:build !norawio

package proxy

import (
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rotor-lb/rotor/internal/cores"
	"github.com/rotor-lb/rotor/internal/rawio"
)

// On Linux, Splice relays two plain TCP connections in an event loop of
// rotor's own, as HAProxy and nginx do, instead of a goroutine a
// direction. Go's poller is edge-triggered and does not say when a peer
// half-closed, so a goroutine's copy must read once more after every
// short read before it waits (the end of the stream may have come with
// the last bytes, in the same readiness), and each message wakes a
// goroutine. The loop asks epoll for EPOLLRDHUP: a short read drains the
// socket, and a half-close is an event of its own, so a message costs
// one read and one write, and the loop a batch of events.
//
// The connections leave Go's poller: their descriptors are duplicated
// and the net.Conns closed (which takes them out of Go's epoll), so the
// loop is the only one watching them. A drain reaches them through the
// Session, whose closers the relay replaces with its own.
//
// The loop is a goroutine that waits in Go's poller on the epoll
// descriptor itself (an epoll set is readable while any of its events
// is pending), so it holds no thread while idle and the scheduler runs
// it like any other. There are up to one loop a P (GOMAXPROCS, as it is
// when a relay starts: Go changes it while running when a container's
// CPU limit changes), each started with its first relay and ended, its
// epoll set closed, with its last: with no connection open the loops
// hold no descriptor.
//
// Relays are packed onto as few loops as keep up, not spread over all
// of them. Loops wait in Go's one poller, where one thread waits at a
// time: two loops with events take turns more than they run side by
// side, and each wake carries half the events (on two cores shared with
// the load, one loop served about 1.15x the requests of two, at less CPU
// a request). A new relay goes to the first loop that keeps up; a loop
// that found work waiting at every look for fullAfter windows on end is
// full, and hands the first loop that keeps up half the relays it has
// more than that one (a loop is started for them if none runs), so a
// loop's load spreads once one core is not enough for it, and only then.

// A loop holds its turns (cores.Holds) while rotor's core has room and
// relayMany relays or more had events since the last look (a hold with
// few gathers only their own next steps, each the later for it), at one
// P, as the ready queue of the short way does (with more Ps Go's poller
// spreads the work, and holds were not measured there). It looks every
// relayLook. Through redis-server on the load's core, held turns served
// 1.01-1.10x the messages of the loop without them in eleven of twelve
// paired medians (docs/BENCHMARKS.md, "Held turns in the relay loop").
const (
	relayLook = 100 * time.Millisecond
	relayMany = 16
)

// holdMaxProcs is the most Ps at which a loop holds its turns; tests set
// it higher, to hold on any machine.
var holdMaxProcs = 1

// relayBudget is the reads a direction gets before the loop turns to
// other connections' events (and comes back to it after them).
const relayBudget = 16

// Per-descriptor readiness, as the events said and reads and writes
// found it.
const (
	canRead  = 1 << iota // bytes or an end may be there
	canWrite             // the socket may take bytes
	peerDone             // the peer half-closed (or the socket failed): read to the end
)

// A direction's state.
const (
	flowing  = iota
	ended    // the source ended: half-close the destination once the bytes left
	finished // the destination was half-closed, or failed
)

// How a loop finds it is full: over a window of loadWindow it never
// waited for an event, fullAfter windows on end; after it spread its
// relays, it waits calmAfter windows before it spreads again.
const (
	loadWindow = 10 * time.Millisecond
	fullAfter  = 10
	calmAfter  = 10
)

// A meter tells from a loop's waits whether it keeps up.
type meter struct {
	window time.Time // when the window began
	waited bool      // the loop waited for an event in this window
	busy   int       // windows on end in which it did not
	calm   int       // windows before it may spread again
}

// wait notes that the loop waits for an event: it keeps up. It says
// whether the loop had been found full (its flag is to be cleared now, not
// at the end of the window, which comes with the next wake: an idle loop
// may wait for long).
func (m *meter) wait() (wasFull bool) {
	wasFull = m.busy >= fullAfter
	m.waited, m.busy = true, 0
	return wasFull
}

// look is a wake of the loop at now. At a window's end (ended) it says
// whether the loop is full, and whether it is to spread its relays.
func (m *meter) look(now time.Time) (ended, full, spread bool) {
	if now.Sub(m.window) < loadWindow {
		return false, false, false
	}
	if m.waited {
		m.busy = 0
	} else {
		m.busy++
	}
	m.window, m.waited, m.calm = now, false, max(m.calm-1, 0)
	full = m.busy >= fullAfter
	return true, full, full && m.calm == 0
}

// A loop relays its sockets in one goroutine while it has any.
type loop struct {
	buf []byte // the reads' buffer; the running goroutine alone uses it
	id  uint64 // the loops' order, in which two are locked together

	// The turn's sends, made together once its reads are done (see
	// sendTurn); the running goroutine alone uses them. ring is nil where
	// the kernel gives none (ringTried: one was tried for).
	ring      *rawio.SendRing
	ringTried bool
	toSend    []sendOf
	sendsWere []sendOf // the batch before, for toSend to reuse
	held      []byte   // the bytes of toSend, copied from buf
	sendings  []rawio.Sending
	sendPtrs  []*rawio.Sending
	// sentTogether counts the messages sent in batches of two or more.
	sentTogether atomic.Uint64

	// full is set while the loop keeps up no more (see loadWindow): new
	// relays go to another loop while one keeps up.
	full atomic.Bool
	// spreadTo has the loop spread to another at its next wake, as if it
	// were full (tests).
	spreadTo atomic.Pointer[loop]
	// moved counts the relays the loop handed to another.
	moved atomic.Uint64

	// Whether turns are held, looked at every relayLook (lookAt) with
	// gauge, from the relays that had events since (active; a relay's
	// lookN is the look it was counted in). The running goroutine alone
	// touches all but holds.
	holds  cores.Holds
	gauge  cores.Gauge
	lookAt time.Time
	lookN  uint32
	active int

	mu     sync.Mutex
	ep     *rawio.Epoll // while running; guarded by mu
	relays []*relay     // by slot; guarded by mu
	free   []int32      // free slots; guarded by mu
	live   int          // relays not finished; guarded by mu
}

// A relay is two sockets relayed both ways by a loop.
type relay struct {
	l    atomic.Pointer[loop] // the loop it is on; changed under the new loop's mu when it moves
	slot int32
	gen  int32 // the slot's generation: an event of a slot's last relay is not this one's
	fd   [2]int
	// flags are each descriptor's readiness; dirs[d] copies fd[d] to
	// fd[1-d]. The loop's goroutine alone touches them.
	flags  [2]uint8
	dirs   [2]direction
	queued bool          // on the loop's list of relays with reads left
	lookN  uint32        // the loop's look it was last counted active in
	over   bool          // finished; guarded by the mu of the loop it is on
	cut    atomic.Bool   // cut by Close: the loop finishes it at its next event
	done   chan struct{} // closed once finished; nil when then is set
	then   func(aToB, bToA int64)
	// moves is the session's idle watch, bumped the first time the relay
	// has events in a look of its loop (relayLook); nil without a session.
	moves *atomic.Uint64
}

// A direction is one way of a relay: bytes read from one socket and
// written to the other.
type direction struct {
	n        int64           // bytes written
	state    uint8           // flowing, ended or finished
	pend     *[32 << 10]byte // bytes read but not yet written, when the destination was full
	off, end int             // pend[off:end] is left to write
	withTurn bool            // bytes read wait for the turn's sends (sendTurn)
}

// sendOf is a direction whose bytes wait for the turn's sends: r's
// dirs[d], its bytes held[from:to] of its loop's.
type sendOf struct {
	r        *relay
	d        int
	from, to int
}

var (
	loopsMu  sync.Mutex
	loops    []*loop // grown to the largest GOMAXPROCS seen; guarded by loopsMu
	loopNext atomic.Uint32
)

// nextLoop returns the loop a new relay goes to: the first of the first
// GOMAXPROCS loops that keeps up, or, when none does, each in turn.
// Loops past GOMAXPROCS, after it fell, keep their relays until they end
// or move, and take no new ones.
func nextLoop() *loop {
	loopsMu.Lock()
	defer loopsMu.Unlock()
	ls := loopsNow()
	if l := keepingUp(ls, nil); l != nil {
		return l
	}
	return ls[loopNext.Add(1)%uint32(len(ls))]
}

// roomFor returns the first of the first GOMAXPROCS loops, other than
// not, that keeps up; nil when none does.
func roomFor(not *loop) *loop {
	loopsMu.Lock()
	defer loopsMu.Unlock()
	return keepingUp(loopsNow(), not)
}

// loopsNow returns the first GOMAXPROCS loops, made if need be; loopsMu
// is held.
func loopsNow() []*loop {
	n := runtime.GOMAXPROCS(0)
	for len(loops) < n {
		loops = append(loops, newLoop())
	}
	return loops[:n]
}

// keepingUp returns the first of ls, other than not, that is not full.
func keepingUp(ls []*loop, not *loop) *loop {
	for _, l := range ls {
		if l != not && !l.full.Load() {
			return l
		}
	}
	return nil
}

// relayTCP runs Splice in the event loop when a and b are both plain TCP
// connections; ok is false (and nothing was done) when they are not, or
// the loop could not take them.
func relayTCP(a, b io.ReadWriteCloser, s *Session) (aToB, bToA int64, ok bool) {
	r := startRelay(a, b, s, nil)
	if r == nil {
		return 0, 0, false
	}
	<-r.done
	return r.dirs[0].n, r.dirs[1].n, true
}

// relayTCPThen is relayTCP without the wait: then, when not nil, gets the
// counts in a goroutine of its own once the relay is over.
func relayTCPThen(a, b io.ReadWriteCloser, s *Session, then func(aToB, bToA int64)) bool {
	return startRelay(a, b, s, then) != nil
}

// startRelay hands a and b to a loop when both are plain TCP
// connections; nil (and nothing done) when they are not, or the loop
// could not take them.
func startRelay(a, b io.ReadWriteCloser, s *Session, then func(aToB, bToA int64)) *relay {
	ta, okA := plainTCP(a)
	tb, okB := plainTCP(b)
	if !okA || !okB {
		return nil
	}
	return nextLoop().relay(ta, tb, s, then)
}

var loopIDs atomic.Uint64

func newLoop() *loop {
	return &loop{buf: make([]byte, 32<<10), id: loopIDs.Add(1), holds: cores.Holds{From: cores.HoldFrom, Until: cores.HoldUntil}}
}

// relay starts relaying ta and tb in the loop l: the relay's done is
// closed, or then called, once it is over.
func (l *loop) relay(ta, tb *net.TCPConn, s *Session, then func(aToB, bToA int64)) *relay {
	fa, err := dupConn(ta)
	if err != nil {
		return nil
	}
	fb, err := dupConn(tb)
	if err != nil {
		syscall.Close(fa)
		return nil
	}
	r := &relay{fd: [2]int{fa, fb}, flags: [2]uint8{canWrite, canWrite}, then: then}
	if s != nil {
		r.moves = &s.moves
	}
	if then == nil {
		r.done = make(chan struct{})
	}
	if err := l.add(r); err != nil {
		syscall.Close(fa)
		syscall.Close(fb)
		return nil
	}
	// Out of Go's poller: from here the loop alone watches the sockets.
	ta.Close()
	tb.Close()
	if s != nil && !s.Replace(r) {
		r.Close() // the drain's cut came first
	}
	return r
}

// plainTCP returns c's socket when what c reads and writes is the
// socket's bytes and nothing else: a *net.TCPConn, or a connection that
// says so (PlainTCP; h1's connections handed to net/http once what was
// read ahead of it is gone).
func plainTCP(c io.ReadWriteCloser) (*net.TCPConn, bool) {
	switch c := c.(type) {
	case *net.TCPConn:
		return c, true
	case interface{ PlainTCP() (*net.TCPConn, bool) }:
		return c.PlainTCP()
	}
	return nil, false
}

// dupConn returns a descriptor of c's socket of its own (close-on-exec,
// and non-blocking as c's is: the flag is the socket's).
func dupConn(c *net.TCPConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var dupErr error
	if err := rc.Control(func(s uintptr) {
		r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, s, syscall.F_DUPFD_CLOEXEC, 0)
		if errno != 0 {
			dupErr = errno
			return
		}
		fd = int(r)
	}); err != nil {
		return -1, err
	}
	return fd, dupErr
}

// add gives r a slot and its sockets to epoll, and starts the loop's
// goroutine if it is not running. An error means the loop did not take r
// (and r is over).
func (l *loop) add(r *relay) error {
	l.mu.Lock()
	start, err := l.take(r)
	l.mu.Unlock()
	if err != nil {
		return err
	}
	return l.watch(r, start)
}

// take gives r a slot, making the loop's epoll set if it has none (start
// is then true: the loop's goroutine is to be started); l.mu is held.
func (l *loop) take(r *relay) (start bool, err error) {
	if start = l.ep == nil; start {
		if l.ep, err = rawio.NewEpoll(); err != nil {
			return false, err
		}
	}
	if n := len(l.free); n > 0 {
		r.slot = l.free[n-1]
		l.free = l.free[:n-1]
		r.gen = (l.relays[r.slot].gen + 1) & (1<<30 - 1) // it and the side fit in Pad
	} else {
		r.slot = int32(len(l.relays))
		l.relays = append(l.relays, nil)
	}
	l.relays[r.slot] = r
	l.live++
	r.l.Store(l)
	return start, nil
}

// watch gives the sockets of r, which took a slot, to the loop's epoll
// set, and starts the loop's goroutine when start says to. An error means
// the loop did not take r (and r is over).
func (l *loop) watch(r *relay, start bool) error {
	// Read under the lock: once registered, r is the loop's (the race
	// detector does not see epoll hand it over).
	l.mu.Lock()
	ep, fds, slot, gen := l.ep, r.fd, r.slot, r.gen
	l.mu.Unlock()
	for side, fd := range fds {
		ev := syscall.EpollEvent{
			Events: syscall.EPOLLIN | syscall.EPOLLOUT | syscall.EPOLLRDHUP | rawio.EdgeTriggered,
			Fd:     slot,
			Pad:    gen<<1 | int32(side),
		}
		if err := syscall.EpollCtl(ep.FD, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
			if side == 0 { // nothing is the loop's yet: Splice copies another way
				l.mu.Lock()
				l.release(r)
				if start && l.live == 0 { // no goroutine runs the set, and no relay needs one
					l.ep, start = nil, false
					ep.File.Close()
				}
				l.mu.Unlock()
				if start { // another relay joined the set meanwhile
					go l.run(ep)
				}
				return os.NewSyscallError("epoll_ctl", err)
			}
			// The loop may have read from the first already: it ends
			// the relay as a cut, at the first's event.
			defer r.Close()
			break
		}
	}
	if start {
		go l.run(ep)
	}
	return nil
}

// release frees r's slot; l.mu is held. The slot keeps the relay (and so
// its generation) until it is taken again.
func (l *loop) release(r *relay) {
	r.over = true
	l.free = append(l.free, r.slot)
	l.live--
}

// detach frees r's slot as r moves to another loop; l.mu is held. The
// slot keeps r's generation in a relay of its own, as r's changes with
// its new slot.
func (l *loop) detach(r *relay) {
	l.relays[r.slot] = &relay{gen: r.gen, over: true}
	l.free = append(l.free, r.slot)
	l.live--
}

// spread moves relays from l to the loop to, half of what l has more
// than to (so that two loops never hand the same relays back and forth),
// in l's goroutine between batches: each leaves l's epoll set, changes
// loops under both loops' locks (so that Close finds it on one or the
// other), then joins to's set, which reports what its sockets are ready
// for, so that to takes it up where l left it. Relays with reads left
// for l's next turn stay.
func (l *loop) spread(to *loop) {
	to.mu.Lock()
	theirs := to.live
	to.mu.Unlock()
	l.mu.Lock()
	var move []*relay
	for _, r := range l.relays {
		if len(move) >= (l.live-theirs)/2 {
			break
		}
		if !r.over && !r.queued && !r.cut.Load() {
			move = append(move, r)
		}
	}
	ep := l.ep
	l.mu.Unlock()
	first, second := l, to // locked in the loops' order: two may spread into each other
	if to.id < l.id {
		first, second = to, l
	}
	for _, r := range move {
		for _, fd := range r.fd {
			_ = syscall.EpollCtl(ep.FD, syscall.EPOLL_CTL_DEL, fd, nil)
		}
		first.mu.Lock()
		second.mu.Lock()
		l.detach(r)
		start, err := to.take(r)
		if err != nil { // no epoll set for to: r is on no loop
			r.over = true
		}
		second.mu.Unlock()
		first.mu.Unlock()
		if err != nil || to.watch(r, start) != nil {
			r.end() // in no epoll set, so no loop ends it
			continue
		}
		l.moved.Add(1)
	}
}

// relayLoops reports every loop made so far, in the order new relays
// fill them.
func relayLoops() []LoopStats {
	loopsMu.Lock()
	ls := slices.Clone(loops)
	loopsMu.Unlock()
	stats := make([]LoopStats, len(ls))
	for i, l := range ls {
		l.mu.Lock()
		stats[i].Relays = l.live
		l.mu.Unlock()
		stats[i].Full = l.full.Load()
		stats[i].Moved = l.moved.Load()
	}
	return stats
}

// Close cuts the relay, as a drain does at its deadline: it is marked cut
// and both sockets are shut down both ways, which is an event for each
// registered one; at the first the loop closes them. Under the loop's
// lock, as finish marks r over: the descriptors are r's.
func (r *relay) Close() error {
	l := r.lockLoop()
	defer l.mu.Unlock()
	if r.over {
		return nil
	}
	r.cut.Store(true)
	_ = syscall.Shutdown(r.fd[0], syscall.SHUT_RDWR)
	_ = syscall.Shutdown(r.fd[1], syscall.SHUT_RDWR)
	return nil
}

// lockLoop locks the mu of the loop r is on, and returns the loop.
func (r *relay) lockLoop() *loop {
	for {
		l := r.l.Load()
		l.mu.Lock()
		if r.l.Load() == l {
			return l
		}
		l.mu.Unlock() // r moved meanwhile
	}
}

func (l *loop) run(ep *rawio.Epoll) {
	events := make([]syscall.EpollEvent, 128)
	batch := make([]*relay, 0, 128)
	// Relays whose reads ran out of budget: again holds those of this
	// turn, retry those of the last, taken after this turn's events.
	var again, retry []*relay
	load := meter{window: time.Now()}
	for {
		n := 0
		stop := false
		err := ep.Raw.Read(func(uintptr) bool {
			if l.holds.On() {
				cores.Hold(cores.HoldFor)
			}
			n, _ = rawio.PollNow(ep.FD, events)
			if n > 0 || len(again) > 0 {
				return true
			}
			l.mu.Lock()
			if l.live == 0 {
				l.ep, stop = nil, true // the next relay starts another
				// Its ring too, made by the next goroutine when it needs
				// one: a loop that stops holds no descriptor. Before the
				// unlock, after which that goroutine may run.
				if l.ring != nil {
					l.ring.Close()
					l.ring, l.held = nil, nil
				}
				l.ringTried = false
				l.holds.Off() // looked at again once the next relay starts it
			}
			l.mu.Unlock()
			if load.wait() {
				l.full.Store(false)
			}
			return stop // else wait in Go's poller for an event
		})
		if stop || err != nil {
			l.full.Store(false)
			ep.File.Close()
			return
		}
		var to *loop
		if l.spreadTo.Load() != nil { // tests alone: no write a wake
			to = l.spreadTo.Swap(nil)
		}
		now := time.Now()
		ended, full, spread := load.look(now)
		if ended {
			l.full.Store(full)
		}
		if since := now.Sub(l.lookAt); since >= relayLook {
			l.lookAt = now
			procs := runtime.GOMAXPROCS(0)
			if busy, full, ok := l.gauge.Look(since, procs); ok {
				l.holds.Decide(busy, full, l.active >= relayMany && procs <= holdMaxProcs)
			}
			l.active = 0
			l.lookN++
		}
		// Find the events' relays under one lock.
		batch = batch[:0]
		l.mu.Lock()
		for _, ev := range events[:n] {
			var r *relay
			if c := l.relays[ev.Fd]; c.gen == ev.Pad>>1 && !c.over {
				r = c
			}
			batch = append(batch, r)
		}
		l.mu.Unlock()
		for i, ev := range events[:n] {
			r := batch[i]
			if r == nil || r.fd[0] < 0 {
				continue // finished earlier in this batch
			}
			if r.lookN != l.lookN {
				r.lookN = l.lookN
				l.active++
				if r.moves != nil {
					r.moves.Add(1)
				}
			}
			if r.cut.Load() {
				l.finish(r)
				continue
			}
			side := int(ev.Pad & 1)
			if ev.Events&(syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
				r.flags[side] |= canRead
			}
			if ev.Events&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
				r.flags[side] |= peerDone
			}
			if ev.Events&(syscall.EPOLLOUT|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
				r.flags[side] |= canWrite
			}
			again = l.turn(r, again)
		}
		again = l.sendTurn(again)
		// Those left with reads to do go again, after the events; those
		// that run out again wait for the next turn.
		retry, again = again, retry[:0]
		for _, r := range retry {
			r.queued = false
			if r.fd[0] >= 0 {
				again = l.turn(r, again)
			}
		}
		clear(retry)
		again = l.sendTurn(again)
		if spread && to == nil {
			to = roomFor(l)
		}
		if to != nil && to != l {
			l.spread(to)
			load.calm = calmAfter
		}
	}
}

// turn moves what can move both ways, and ends r when both directions
// have. It returns again with r added when a direction ran out of budget.
func (l *loop) turn(r *relay, again []*relay) []*relay {
	more := r.pump(0, l)
	more = r.pump(1, l) || more
	if r.dirs[0].state == finished && r.dirs[1].state == finished {
		l.finish(r)
		return again
	}
	if more && !r.queued {
		r.queued = true
		again = append(again, r)
	}
	return again
}

// pump copies fd[d] to fd[1-d] until the source has nothing, the
// destination takes nothing more, or the budget is spent (more is then
// true). A read that drained its socket leaves its bytes for the turn's
// sends (l.sendTurn), where the loop has a ring to make them in.
func (r *relay) pump(d int, l *loop) (more bool) {
	src, dst := d, 1-d
	x := &r.dirs[d]
	buf := l.buf
	for reads := 0; ; {
		switch {
		case x.state == finished, x.withTurn:
			return false
		case x.pend != nil:
			if r.flags[dst]&canWrite == 0 {
				return false
			}
			w, err := rawio.Send(uintptr(r.fd[dst]), x.pend[x.off:x.end])
			x.n += int64(w)
			x.off += w
			if x.off == x.end {
				copyBuffers.Put(x.pend)
				x.pend = nil
				continue
			}
			if err != nil && err != syscall.EAGAIN {
				r.fail(d)
				return false
			}
			if err == syscall.EAGAIN {
				r.flags[dst] &^= canWrite
				return false
			}
			continue // a short write: the next says whether it is full
		case x.state == ended:
			_ = syscall.Shutdown(r.fd[dst], syscall.SHUT_WR)
			x.state = finished
			return false
		case r.flags[src]&canRead == 0:
			return false
		case reads == relayBudget:
			return true
		}
		reads++
		n, err := rawio.Read(uintptr(r.fd[src]), buf)
		if err == syscall.EAGAIN {
			r.flags[src] &^= canRead
			return false
		}
		if err != nil || n == 0 {
			x.state = ended
			continue
		}
		if n < len(buf) && r.flags[src]&peerDone == 0 {
			// A short read drained the socket; bytes or an end that
			// come after it are a new event.
			r.flags[src] &^= canRead
		}
		if n < len(buf) && l.withTurn(n) {
			from := len(l.held)
			l.held = append(l.held, buf[:n]...)
			l.toSend = append(l.toSend, sendOf{r, d, from, len(l.held)})
			x.withTurn = true
			return false
		}
		w, err := rawio.Send(uintptr(r.fd[dst]), buf[:n])
		x.n += int64(w)
		if w == n {
			continue
		}
		if err != nil && err != syscall.EAGAIN {
			r.fail(d)
			return false
		}
		x.pend = copyBuffers.Get().(*[32 << 10]byte)
		x.off, x.end = 0, copy(x.pend[:], buf[w:n])
		if err == syscall.EAGAIN {
			r.flags[dst] &^= canWrite
			return false
		}
	}
}

// withTurn says whether a read's n bytes can wait for the turn's sends:
// the loop has a ring (made at the first ask), and room in its batch.
func (l *loop) withTurn(n int) bool {
	if !l.ringTried {
		l.ringTried = true
		if r, err := rawio.NewSendRing(relaySends); err == nil {
			l.ring = r
			l.held = make([]byte, 0, relayHeld)
		}
	}
	return l.ring != nil && len(l.toSend) < l.ring.Size() && len(l.held)+n <= cap(l.held)
}

// relaySends is the most sends a turn makes together, and relayHeld the
// most bytes they hold; a read past either sends its bytes at once.
const (
	relaySends = 128
	relayHeld  = 64 << 10
)

// sendTurn makes the turn's sends, the bytes of the reads that drained
// their sockets, in one system call (rawio.SendRing), and goes on with
// each of their relays (what a send left, an end read after the bytes):
// as an event loop's turn, the reads first and then the sends, rather
// than a send after each read. Each send wakes its reader; one after
// each read lets a reader on a core shared with the loop take the core
// between them, and find one message (docs/BENCHMARKS.md, "A turn's
// sends in one call"). It returns again with the relays that ran out of
// budget added.
func (l *loop) sendTurn(again []*relay) []*relay {
	for len(l.toSend) > 0 {
		// A relay finished since (cut in the same turn) has its sockets
		// closed and its bytes dropped: no send.
		l.sendings, l.sendPtrs = l.sendings[:0], l.sendPtrs[:0]
		for _, t := range l.toSend {
			var s rawio.Sending
			if t.r.fd[0] >= 0 {
				s = rawio.Sending{FD: uintptr(t.r.fd[1-t.d]), P: l.held[t.from:t.to]}
			}
			l.sendings = append(l.sendings, s)
		}
		for i, t := range l.toSend {
			if t.r.fd[0] >= 0 {
				l.sendPtrs = append(l.sendPtrs, &l.sendings[i])
			}
		}
		if len(l.sendPtrs) > 0 {
			l.ring.Send(l.sendPtrs)
		}
		if len(l.sendPtrs) > 1 {
			l.sentTogether.Add(uint64(len(l.sendPtrs)))
		}
		turn := l.toSend
		l.toSend = l.sendsWere[:0]
		for i, t := range turn {
			r, d := t.r, t.d
			x := &r.dirs[d]
			x.withTurn = false
			if r.fd[0] < 0 {
				continue
			}
			w, err := l.sendings[i].N, l.sendings[i].Err
			x.n += int64(w)
			switch {
			case w == t.to-t.from:
			case err != nil && err != syscall.EAGAIN:
				r.fail(d)
			default: // what the socket did not take waits for its room
				x.pend = copyBuffers.Get().(*[32 << 10]byte)
				x.off, x.end = 0, copy(x.pend[:], l.held[t.from+w:t.to])
				if err == syscall.EAGAIN {
					r.flags[1-d] &^= canWrite
				}
			}
		}
		l.held = l.held[:0]
		// Each relay goes on (its sends may queue the next batch).
		for _, t := range turn {
			if t.r.fd[0] >= 0 && !t.r.queued {
				again = l.turn(t.r, again)
			}
		}
		clear(turn)
		l.sendsWere = turn[:0]
	}
	return again
}

// fail ends direction d after its destination failed: what it held is
// dropped, and the destination half-closed (if it still can be).
func (r *relay) fail(d int) {
	x := &r.dirs[d]
	if x.pend != nil {
		copyBuffers.Put(x.pend)
		x.pend = nil
	}
	_ = syscall.Shutdown(r.fd[1-d], syscall.SHUT_WR)
	x.state = finished
}

// finish frees r's slot, closes its sockets (which takes them out of
// epoll) and lets Splice return.
func (l *loop) finish(r *relay) {
	l.mu.Lock()
	l.release(r)
	l.mu.Unlock()
	r.end()
}

// end closes the sockets of r, over, and lets Splice return.
func (r *relay) end() {
	for d := range r.dirs {
		if x := &r.dirs[d]; x.pend != nil {
			copyBuffers.Put(x.pend)
			x.pend = nil
		}
	}
	syscall.Close(r.fd[0])
	syscall.Close(r.fd[1])
	r.fd = [2]int{-1, -1}
	if r.then != nil {
		go r.then(r.dirs[0].n, r.dirs[1].n)
	} else {
		close(r.done)
	}
}
