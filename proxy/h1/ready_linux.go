//go:build !norawio

package h1

import (
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rotor-lb/rotor/internal/cores"
	"github.com/rotor-lb/rotor/internal/rawio"
)

// Go's poller hands the goroutines a wait made ready to the scheduler
// newest first: it pushes each event's goroutine onto the front of a list
// and runs the list from the front. When a proxy's core is the limit,
// one turn of the poller carries many connections' requests, and the one
// that came first is served last: what HAProxy's and nginx's event loops
// serve first waits for the whole turn. (Built with a runtime that kept
// epoll's order, rotor's p99 at wrk -c50 over nginx backends fell from
// 1.59x HAProxy's to 1.26x; docs/BENCHMARKS.md.)
//
// So a cleartext client connection of the short way waits for its next
// request, and a backend connection for its answer, in a ready queue of
// rotor's own (while GOMAXPROCS is 1: readyMaxProcs): an epoll set of
// their sockets, which a
// goroutine waits on in Go's poller (an epoll set is readable while an
// event is pending), and which wakes the connections in the order epoll
// found them ready. A goroutine made ready by another goes to the
// scheduler's next slot, pushing the one there to the back of its queue:
// the queue wakes the oldest last, so that it runs first and the others
// after it, in their order.
//
// A socket stays in the set from its first wait to its connection's end,
// edge-triggered: each arrival is a token for its connection, kept until
// it waits again. The set and its goroutine live while any socket is in
// it, as the TCP relays' loops do.
//
// The order is worth keeping only while the core is full: with time to
// spare a turn carries a connection or two, and the queue's wake and its
// look at the set cost 4-8% more CPU a request for nothing
// (docs/BENCHMARKS.md). So a wait now and then (every) looks at how
// busy rotor's core was since the last look, and below openAt the queue
// stands aside: the connections waiting in it are poked out, each socket
// leaves the set at its connection's next wait, and waits are Go's
// poller's, until a look finds the core busy enough again. How busy is
// the larger of rotor's own share of GOMAXPROCS cores and that of the
// cores it may run on, whoever used them: a core rotor shares with its
// backends is full with rotor at 70% of it, and a turn's order counts
// there as much as where rotor alone fills it.
//
// Between holds.From and openAt the core has room, and with requests
// enough in service at once (holdServing) the queue is used to hold each
// turn for a moment (hold) before it takes the turn's events, so that
// the turn's arrivals gather and what they send leaves together
// (cores.Holds says when, for this queue and the TCP relay loop alike).

// readyQueue is an epoll set of sockets whose connections wait to read,
// and the goroutine that wakes them.
type readyQueue struct {
	// How busy rotor's core must be for the queue to be used (a share:
	// the larger of rotor's own of GOMAXPROCS cores and that of the cores
	// it may run on), and how often a wait looks (openAt 0: used however
	// busy; every 0: no look, used throughout).
	openAt float64
	every  time.Duration
	// When the queue is used with its turns held (holds.From, under
	// openAt, to holds.Until), and for how long a turn is (hold 0: never).
	holds cores.Holds
	hold  time.Duration
	// gauge reads how busy the core was at each look.
	lookMu sync.Mutex
	gauge  cores.Gauge // guarded by lookMu

	aside     atomic.Bool  // the queue stands aside: waits are Go's poller's
	inService atomic.Int32 // requests the short way's client connections are serving
	peak      atomic.Int32 // the most in service at once since the last look (roughly: not a CAS)
	turnSize  atomic.Int32 // the connections the last turn woke
	lookAt    atomic.Int64 // when the last look was, in ns since readyEpoch; 0: none yet

	// The batch of sends with a turn (sendWithTurn): its connections, in
	// order, and their sends; the ring it goes out in (nil: none could
	// be made; ringTried: one was tried for).
	sendMu    sync.Mutex
	sends     []*waiter
	batch     []*rawio.Sending
	ring      *rawio.SendRing
	ringTried bool
	// sentTogether counts the sends made in batches of two or more.
	sentTogether atomic.Int64

	mu    sync.Mutex
	set   *readySet      // nil while no socket is in it; guarded by mu
	slots slots[*waiter] // the waiters in the set; guarded by mu
	live  int            // sockets in the set; guarded by mu
}

// How far under openAt the core's busy share falls before the queue
// stands aside: the queue's own cost is not enough to take it back
// across.
const readyHysteresis = 0.05

var readyEpoch = time.Now()

// readySet is the epoll descriptor of a running queue, as a file Go's
// poller waits on, and what its goroutine alone uses.
type readySet struct {
	*rawio.Epoll
	q      *readyQueue
	events [128]syscall.EpollEvent
	woken  []*waiter
	turnFn func(uintptr) bool
}

// A waiter is a connection's place in the queue.
type waiter struct {
	ch   chan struct{} // a token: the socket was found readable since the last wait
	slot int32
	// Its send in a turn's batch (sendWithTurn), made at the first: a
	// connection that never sends with a turn holds a pointer.
	turn *turnSend
	// in the set; never to be (the set could not take it): the
	// connection's goroutine alone touches them.
	in, off bool
}

// readyMaxProcs is the most Ps at which the queue is used: with more,
// it stands aside (looked at with how busy the core is, so as GOMAXPROCS
// changes while rotor runs). With two, Go's poller spreads a turn's
// goroutines over both Ps, where the queue's one goroutine wakes them all
// on its own: on two cores shared with the load that cost more than the
// order saved (0.88x to 1.02x the rate at up to 1.11x the CPU a request,
// docs/BENCHMARKS.md), so there connections wait in Go's poller. Tests
// set it higher, to run the queue on any machine.
var readyMaxProcs = 1

// serving counts a request into service (1) or out of it (-1).
func (q *readyQueue) serving(d int32) {
	if n := q.inService.Add(d); n > q.peak.Load() {
		q.peak.Store(n)
	}
}

// inTurn says whether a connection whose waits are q's (w) is to send
// with its turn: while q is in use and the turn that woke it woke
// togetherFrom or more. The queue's goroutine wakes a turn's connections
// together, and each would otherwise receive, work and send as soon as it
// ran, its peer on the other side of the socket (a backend, a client)
// woken for each send and asleep again before the next. Sent together
// once the turn's reads and work are done, as an event loop's sends
// leave, the peer woken once finds several, and its neighbours and
// rotor's own receives and sends cost the kernel less (docs/BENCHMARKS.md,
// "A turn's sends together"). In a turn of few connections (fewer than
// togetherFrom) the wait costs a request's latency more than the sends
// together save (measured at ten connections), and a socket not in the
// set (the queue standing aside, more than one P, a connection's first
// exchange) is in no turn: those send at once.
func (q *readyQueue) inTurn(w *waiter) bool {
	return w.in && q.turnSize.Load() >= togetherFrom && !q.aside.Load()
}

// together lets the rest of the turn run before a connection in it
// sends (inTurn): it yields, and goes behind the others its turn made
// ready. The sends that sendWithTurn cannot take (several buffers)
// leave so.
func (q *readyQueue) together(w *waiter) {
	if q.inTurn(w) {
		runtime.Gosched()
	}
}

// sendWithTurn writes p to socket fd as rawio.Write does, for a
// connection in a turn (inTurn), with the turn's other sends: all in one
// system call (a rawio.SendRing), made once the rest of the turn has run.
// The first send of a batch yields, as together does, and makes the
// batch's sends when it runs again; the sends that joined it meanwhile
// wait for it, inside their raw calls, so that their descriptors stay
// theirs. One call for the turn's sends rather than one each: a send
// wakes its reader, which on a core shared with rotor would take the core
// between one send and the next and find one message; woken by the batch,
// it finds the batch's (docs/BENCHMARKS.md, "A turn's sends in one
// call"). Where the kernel gives no ring (before Linux 5.18; refused by a
// seccomp filter or kernel.io_uring_disabled) the send yields and goes on
// its own.
func (q *readyQueue) sendWithTurn(w *waiter, fd uintptr, p []byte) (int, error) {
	q.sendMu.Lock()
	if !q.ringTried {
		q.ringTried = true
		if r, err := rawio.NewSendRing(turnSends); err == nil {
			q.ring = r
		}
	}
	if q.ring == nil || len(q.sends) == q.ring.Size() {
		q.sendMu.Unlock()
		if q.ring == nil {
			runtime.Gosched()
		}
		return rawio.Write(fd, p)
	}
	if w.turn == nil {
		w.turn = &turnSend{sent: make(chan struct{}, 1)}
	}
	t := w.turn
	t.Sending = rawio.Sending{FD: fd, P: p}
	q.sends = append(q.sends, w)
	q.batch = append(q.batch, &t.Sending)
	first := len(q.sends) == 1
	q.sendMu.Unlock()
	if first {
		runtime.Gosched()
		q.sendBatch()
	} else {
		<-t.sent
	}
	n, err := t.N, t.Err
	t.Sending = rawio.Sending{}
	if err == nil && n < len(p) {
		m, err := rawio.Write(fd, p[n:])
		return n + m, err
	}
	return n, err
}

// sendBatch makes the sends of the batch begun by the caller's, and lets
// the others' connections go on.
func (q *readyQueue) sendBatch() {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	q.ring.Send(q.batch)
	if len(q.batch) > 1 {
		q.sentTogether.Add(int64(len(q.batch)))
	}
	for _, w := range q.sends[1:] {
		w.turn.sent <- struct{}{}
	}
	clear(q.sends)
	clear(q.batch)
	q.sends, q.batch = q.sends[:0], q.batch[:0]
}

// A turnSend is a connection's send in a turn's batch, and what says it
// was made.
type turnSend struct {
	rawio.Sending
	sent chan struct{}
}

// turnSends is the most sends a batch holds, a turn's most connections
// (the set's events a turn); a send past it goes on its own.
const turnSends = 128

// holdServing is the fewest requests in service for turns to be held:
// with fewer, what a hold would gather is their own next steps, each the
// later for it.
const holdServing = 16

// togetherFrom is the fewest connections a turn must have woken for
// together to yield in it (the turn's size as the queue last saw it).
const togetherFrom = 4

// readySockets is the queue of the short way's connections, clients'
// (cleartext) and backends' alike: used for its order while rotor's core
// is 90% busy or more (the tail it keeps was measured with the core
// full, 96-98% busy; with time to spare rotor is 68-78% busy), and with
// its turns held 10 us from 50% to 90% (10 us gained at ten connections
// and at fifty; 20 us gained more at fifty and nothing at ten), looked
// at ten times a second.
var readySockets = readyQueue{openAt: cores.HoldUntil, holds: cores.Holds{From: cores.HoldFrom, Until: cores.HoldUntil}, hold: cores.HoldFor, every: 100 * time.Millisecond}

// wait waits for a token: the socket fd (valid throughout: the caller is
// in a raw read of it) was found readable, or the waiter was poked. The
// first wait puts the socket in the set, which reports it at once if
// bytes are there already. false: the queue cannot take it (the caller
// waits in Go's poller instead).
func (q *readyQueue) wait(w *waiter, fd uintptr) bool {
	if w.off {
		return false
	}
	if q.every > 0 {
		now := max(int64(time.Since(readyEpoch)), 1)
		if last := q.lookAt.Load(); (last == 0 || now-last >= int64(q.every)) && q.lookAt.CompareAndSwap(last, now) {
			q.look(last == 0, time.Duration(now-last))
		}
	}
	if q.aside.Load() {
		if w.in {
			w.in = false
			q.drop(w, func(set int) { _ = syscall.EpollCtl(set, syscall.EPOLL_CTL_DEL, int(fd), nil) })
		}
		return false
	}
	if !w.in {
		if !q.add(w, int(fd)) {
			w.off = true
			return false
		}
		w.in = true
	}
	<-w.ch
	return true
}

// look has the queue stand aside, or step in again, by how busy rotor's
// core was over the time since the last look (first: there was none;
// only note rotor's CPU time and its cores' ticks). With more Ps than
// readyMaxProcs it stands aside, first look or not.
func (q *readyQueue) look(first bool, since time.Duration) {
	procs := runtime.GOMAXPROCS(0)
	q.lookMu.Lock()
	busy, full, ok := q.gauge.Look(since, procs)
	q.lookMu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if procs > readyMaxProcs {
		// More Ps than the queue serves (from the start, or Go's count
		// raised since): aside, whatever the core.
		if !q.aside.Load() {
			q.standAside()
		}
		return
	}
	if first || !ok {
		return
	}
	// Requests enough at once, since the last look, for a hold to gather.
	many := q.hold > 0 && q.peak.Swap(q.inService.Load()) >= holdServing
	in := q.openAt // how busy the core must be for the queue to step in
	if many {
		in = min(in, q.holds.From)
	}
	standing := q.aside.Load()
	switch {
	case standing && busy >= in:
		q.aside.Store(false)
	case !standing && busy < in-readyHysteresis:
		q.standAside()
		return
	}
	if !q.aside.Load() {
		q.holds.Decide(busy, full, many)
	}
}

// standAside has the queue stand aside: the connections waiting in it
// are poked out, to leave the set and wait in Go's poller (a poke to one
// not waiting is a read more at its next wait); q.mu is held.
func (q *readyQueue) standAside() {
	q.aside.Store(true)
	q.holds.Off()
	for _, w := range q.slots.held {
		if w != nil {
			w.poke()
		}
	}
}

// init makes w's token, before anything may poke it.
func (w *waiter) init() { w.ch = make(chan struct{}, 1) }

// poke gives w a token, if it has none: its wait ends.
func (w *waiter) poke() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// add gives w a slot and its socket to the set, starting the set's
// goroutine if none runs.
func (q *readyQueue) add(w *waiter, fd int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	start := q.set == nil
	if start {
		ep, err := rawio.NewEpoll()
		if err != nil {
			return false
		}
		q.set = &readySet{Epoll: ep, q: q}
		q.set.turnFn = q.set.turn
	}
	var gen int32
	w.slot, gen = q.slots.put(w)
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | rawio.EdgeTriggered, Fd: w.slot, Pad: gen}
	if err := syscall.EpollCtl(q.set.FD, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		q.slots.release(w.slot)
		if start {
			q.set.File.Close() // no goroutine runs it yet
			q.set = nil
		}
		return false
	}
	q.live++
	if start {
		go q.set.run()
	}
	return true
}

// remove takes w's socket out of the set, through rc (the socket's own
// descriptor, so that a number another socket took since is never the
// one removed: a closed socket left the set with its last descriptor),
// and the set's goroutine ends with its last socket.
func (q *readyQueue) remove(w *waiter, rc syscall.RawConn) {
	if !w.in {
		return
	}
	w.in = false
	q.drop(w, func(set int) {
		_ = rc.Control(func(fd uintptr) { _ = syscall.EpollCtl(set, syscall.EPOLL_CTL_DEL, int(fd), nil) })
	})
}

// drop takes w's socket out of the set, which del does given the set's
// descriptor, frees its slot, and ends the set with its last socket.
func (q *readyQueue) drop(w *waiter, del func(set int)) {
	q.mu.Lock()
	s := q.set
	del(s.FD)
	q.slots.release(w.slot)
	if q.live--; q.live > 0 {
		s = nil
	} else {
		q.set = nil // the next socket starts another
	}
	q.mu.Unlock()
	if s != nil {
		// Wakes its goroutine, which ends; after the lock, as Close waits
		// for a turn that runs, which takes it.
		s.File.Close()
	}
}

// run wakes the connections of the set's events, in turns, until the set
// is closed.
func (s *readySet) run() {
	for s.Raw.Read(s.turnFn) == nil {
	}
}

// turn takes the events pending and wakes their connections, the oldest
// last, the turn held first while the queue holds them; false: wait in
// Go's poller until more are pending.
func (s *readySet) turn(uintptr) bool {
	if s.q.holds.On() {
		cores.Hold(s.q.hold)
	}
	for {
		n, err := rawio.PollNow(s.FD, s.events[:])
		if err != nil || n <= 0 {
			return false
		}
		s.woken = s.woken[:0]
		s.q.mu.Lock()
		for _, ev := range s.events[:n] {
			if w := s.q.slots.at(ev.Fd, ev.Pad); w != nil {
				s.woken = append(s.woken, w)
			}
		}
		s.q.mu.Unlock()
		s.q.turnSize.Store(int32(len(s.woken)))
		if len(s.woken) > 0 {
			for _, w := range s.woken[1:] {
				w.poke()
			}
			s.woken[0].poke()
		}
		clear(s.woken)
		if n < len(s.events) {
			return false // drained: the set is readable again with its next event
		}
	}
}
