//go:build !norawio

package h1

import (
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/internal/cores"
	"github.com/rotor-lb/rotor/internal/rawio"
)

func init() {
	// The queue in use at every P count and however busy the tests keep
	// the machine, so that every test of the short way runs through it
	// (it is used at one P alone, and with the core full, otherwise).
	readyMaxProcs = 1 << 20
	readySockets.openAt = 0
}

// Connections waiting in a ready queue run in the order their sockets
// became readable, the first first, where Go's poller runs a turn's
// goroutines the last first. On one P, so that the order they run in is
// the order the scheduler was given: sixteen connections wait, a byte
// goes to each in turn while none can run, and each notes when it ran.
// The race detector's scheduler shuffles what it runs next on purpose:
// under it the test holds only that all sixteen woke and left (the suite
// runs it once more without it, scripts/test.sh).
func TestReadyQueueWakesInOrder(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const n = 16
	var q readyQueue
	var (
		mu    sync.Mutex
		order []int
	)
	clients, servers := socketPairs(t, n)
	_, wg := waitEach(servers, func(i int, src syscall.RawConn, w *waiter) {
		src.Read(func(fd uintptr) bool {
			if !q.wait(w, fd) {
				t.Error("the queue did not take the socket")
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			return true
		})
		q.remove(w, src)
	})
	time.Sleep(100 * time.Millisecond) // all sixteen wait
	for _, c := range clients {
		// Raw: a write through Go's would tell the scheduler, which
		// might run another goroutine before the last byte is sent.
		rc, _ := c.SyscallConn()
		rc.Control(func(fd uintptr) { rawio.Write(fd, []byte{1}) })
	}
	wg.Wait()
	want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	if raceEnabled {
		slices.Sort(order)
	}
	if !slices.Equal(order, want) {
		t.Fatalf("woken in the order %v, want %v", order, want)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.live != 0 || q.set != nil {
		t.Fatalf("%d sockets left in the queue (set %v), want none and no set", q.live, q.set != nil)
	}
}

// A queue that finds rotor less busy than it asks for stands aside: the
// connections waiting in it are poked out, their sockets leave the set,
// and they wait in Go's poller, where their bytes still reach them; once
// busy enough it steps in again, and the connections' next waits are its
// once more. Four connections read bytes; before each send the time for
// a look has passed, so that the next wait looks. Where the look is to
// change the queue's state, one connection alone gets a byte: the
// others, waiting, must be poked out (or find the queue in use again at
// their next wait).
func TestReadyQueueStandsAside(t *testing.T) {
	const n = 4
	q := &readyQueue{openAt: 2, every: 5 * time.Millisecond} // never that busy
	var (
		got  [n]atomic.Int32
		stop atomic.Bool // the test is over: out at the next byte or poke
	)
	clients, servers := socketPairs(t, n)
	waiters, wg := waitEach(servers, func(i int, src syscall.RawConn, w *waiter) {
		var b [1]byte
		for !stop.Load() {
			err := src.Read(func(fd uintptr) bool {
				for !stop.Load() {
					m, err := rawio.Read(fd, b[:])
					if m == 1 {
						got[i].Add(1)
						return true
					}
					if err != syscall.EAGAIN {
						t.Errorf("connection %d: read %d, %v", i, m, err)
						return true
					}
					if !q.wait(w, fd) {
						return false // in Go's poller
					}
				}
				return true
			})
			if err != nil {
				t.Errorf("connection %d: %v", i, err)
				return
			}
		}
		q.remove(w, src)
	})
	var once sync.Once
	finish := func() {
		once.Do(func() {
			stop.Store(true)
			for i := range waiters {
				waiters[i].poke()
			}
			for _, c := range clients {
				c.Write([]byte{1}) // to those in Go's poller
			}
			wg.Wait()
		})
	}
	defer finish() // before the sockets close: Close waits for a raw read
	// until waits for the queue to stand aside or not, with live
	// sockets in its set.
	until := func(what string, aside bool, live int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; {
			q.mu.Lock()
			l := q.live
			q.mu.Unlock()
			if q.aside.Load() == aside && l == live {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: aside %v with %d sockets, want %v with %d", what, q.aside.Load(), l, aside, live)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// send sends a byte to each connection of to (all when none) and
	// waits until each has read it.
	send := func(to ...int) {
		t.Helper()
		if len(to) == 0 {
			to = []int{0, 1, 2, 3}
		}
		time.Sleep(2 * q.every) // the next wait looks
		var want [n]int32
		for _, i := range to {
			want[i] = got[i].Load() + 1
			if _, err := clients[i].Write([]byte{1}); err != nil {
				t.Fatal(err)
			}
		}
		for deadline := time.Now().Add(5 * time.Second); ; {
			done := 0
			for _, i := range to {
				if got[i].Load() == want[i] {
					done++
				}
			}
			if done == len(to) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d connections got their byte", done, len(to))
			}
			time.Sleep(time.Millisecond)
		}
	}
	setOpenAt := func(v float64) {
		q.mu.Lock()
		q.openAt = v
		q.mu.Unlock()
	}

	until("every connection's socket in the queue", false, n)
	send(0) // through the queue; the wait after it stands it aside
	until("aside, every socket out of the set", true, 0)
	send() // through Go's poller

	setOpenAt(0) // busy enough now
	send(0)      // through Go's poller; the wait after it steps in
	send()       // through Go's poller; each wait after it is the queue's
	until("every connection's socket in the queue again", false, n)
	send() // through the queue, a set of its own again

	setOpenAt(2)
	send(1)
	until("aside again", true, 0)
	send()
	finish()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.live != 0 || q.set != nil {
		t.Fatalf("%d sockets left in the queue (set %v), want none and no set", q.live, q.set != nil)
	}
}

// socketPairs connects n pairs of sockets on loopback: the dialled ends,
// and the accepted ends' raw connections. They close when the test ends.
func socketPairs(t *testing.T, n int) (clients []*net.TCPConn, servers []syscall.RawConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		rc, _ := s.(*net.TCPConn).SyscallConn()
		clients, servers = append(clients, c.(*net.TCPConn)), append(servers, rc)
	}
	return clients, servers
}

// waitEach runs wait for each of servers in a goroutine of its own, with
// a waiter of its own, and returns the waiters and what the goroutines
// are done with.
func waitEach(servers []syscall.RawConn, wait func(i int, src syscall.RawConn, w *waiter)) ([]waiter, *sync.WaitGroup) {
	waiters := make([]waiter, len(servers))
	wg := new(sync.WaitGroup)
	for i, src := range servers {
		waiters[i].init()
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait(i, src, &waiters[i])
		}()
	}
	return waiters, wg
}

// TestReadyQueueLooksAtItsCores: a core rotor shares with other work is
// full while rotor's own share of it is not, and the queue's order counts
// there too: the queue steps in when rotor's cores are busy enough,
// whoever keeps them busy, and stands aside again when they are not.
func TestReadyQueueLooksAtItsCores(t *testing.T) {
	ticks := cores.Ticks{Busy: 3000, Total: 10000} // since the machine started
	ok := true
	q := &readyQueue{openAt: 0.9}
	q.gauge.ReadCores = func() (cores.Ticks, bool) { return ticks, ok }
	// look has a slice of the cores' time pass, busy for the share given,
	// and rotor's own CPU a speck of the hour it says went by.
	look := func(share float64) {
		ticks.Busy += uint64(share * 1000)
		ticks.Total += 1000
		q.look(false, time.Hour)
	}
	q.look(true, 0)
	for _, step := range []struct {
		share float64
		aside bool
	}{
		{0.50, true},  // time to spare: aside
		{0.95, false}, // full: in
		{0.87, false}, // under openAt, within the hysteresis: still in
		{0.80, true},  // aside
		{0.89, true},  // under openAt: still aside
		{0.90, false}, // in
	} {
		look(step.share)
		if got := q.aside.Load(); got != step.aside {
			t.Fatalf("cores %.0f%% busy: aside %v, want %v", 100*step.share, got, step.aside)
		}
	}
	// Cores that cannot be read leave rotor's own share to go by.
	ok = false
	look(1)
	if !q.aside.Load() {
		t.Errorf("cores unread, rotor's own share a speck: in use, want aside")
	}
}

// TestReadyQueueHoldsWithRoom: with the core busy but not full and
// requests enough in service at once, the queue is used with its turns
// held; a full core, too few requests or too little work take the holds
// away (and the queue, below openAt). The time spent holding is not
// counted as the core's work, unless the core with it was full: then
// the holds stop, as they spun on time the work needed.
func TestReadyQueueHoldsWithRoom(t *testing.T) {
	ticks := cores.Ticks{Busy: 3000, Total: 10000}
	var spun time.Duration
	q := &readyQueue{openAt: 0.9, holds: cores.Holds{From: 0.5, Until: 0.9}, hold: 10 * time.Microsecond}
	q.gauge.ReadCores = func() (cores.Ticks, bool) { return ticks, true }
	q.gauge.ReadSpun = func() time.Duration { return spun }
	// look has 1000 ticks (ten seconds) of the cores pass, busy for the
	// share given, with n requests in service at once since the last
	// look and held spent holding.
	look := func(share float64, n int32, held time.Duration) {
		for range n {
			q.serving(1)
		}
		for range n {
			q.serving(-1)
		}
		spun += held
		ticks.Busy += uint64(share * 1000)
		ticks.Total += 1000
		q.look(false, 10*time.Second)
	}
	q.look(true, 0)
	for _, step := range []struct {
		name           string
		share          float64
		n              int32
		held           time.Duration
		aside, holding bool
	}{
		{"room, many requests", 0.70, holdServing, 0, false, true},
		{"full", 0.95, holdServing, 0, false, false},
		{"room again", 0.80, holdServing, 0, false, true},
		{"room, with the holds", 0.90, holdServing, 1500 * time.Millisecond, false, true},
		{"full with the holds", 0.97, holdServing, 2 * time.Second, false, false},
		{"full, no holds", 0.97, holdServing, 0, false, false},
		{"room again", 0.75, holdServing, 0, false, true},
		{"room, few requests", 0.70, holdServing - 1, 0, true, false},
		{"little work, many requests", 0.40, holdServing, 0, true, false},
		{"room, many requests again", 0.60, holdServing, 0, false, true},
	} {
		look(step.share, step.n, step.held)
		if got := q.aside.Load(); got != step.aside {
			t.Errorf("%s: aside %v, want %v", step.name, got, step.aside)
		}
		if got := q.holds.On(); got != step.holding {
			t.Errorf("%s: holding %v, want %v", step.name, got, step.holding)
		}
	}
	if n := q.inService.Load(); n != 0 {
		t.Errorf("in service after every request left: %d", n)
	}
}

// TestReadyQueueStandsAsideForMorePs: with more Ps than the queue serves
// it stands aside at every look, the first too, however busy the core;
// when the Ps fall back to what it serves, a busy core takes it up again
// at the next look. (The Ps change while rotor runs: internal/procs.)
func TestReadyQueueStandsAsideForMorePs(t *testing.T) {
	ticks := cores.Ticks{Busy: 3000, Total: 10000}
	q := &readyQueue{openAt: 0.9}
	q.gauge.ReadCores = func() (cores.Ticks, bool) { return ticks, true }
	look := func(first bool) {
		ticks.Busy += 1000 // full
		ticks.Total += 1000
		q.look(first, time.Hour)
	}
	saved := readyMaxProcs
	defer func() { readyMaxProcs = saved }()
	readyMaxProcs = runtime.GOMAXPROCS(0) - 1 // one P more than it serves
	w := &waiter{}
	w.init()
	q.slots.put(w) // waiting in the set
	look(true)
	if !q.aside.Load() {
		t.Fatalf("first look with more Ps than it serves: in use, want aside")
	}
	select {
	case <-w.ch:
	default:
		t.Errorf("standing aside: the connection waiting in the set was not poked out")
	}
	look(false)
	if !q.aside.Load() {
		t.Fatalf("core full, more Ps than it serves: in use, want aside")
	}
	readyMaxProcs = runtime.GOMAXPROCS(0)
	look(false)
	if q.aside.Load() {
		t.Errorf("core full, the Ps it serves: aside, want in use")
	}
}

// A connection about to send lets the rest of its turn run first while
// its waits are the queue's, the queue is in use and the turn woke
// enough others, and sends at once otherwise: a turn of too few, not in
// the set, or the queue standing aside. One P: a
// goroutine made ready before the send runs before it only if the
// sender yields.
func TestTogetherLetsTheTurnRunFirst(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector shuffles the scheduler's order on purpose; scripts/test.sh runs this without it")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for _, tt := range []struct {
		name      string
		in, aside bool
		turn      int32
		want      []string
	}{
		{"in the set, the queue in use", true, false, togetherFrom, []string{"the turn's other", "send"}},
		{"a turn of too few", true, false, togetherFrom - 1, []string{"send", "the turn's other"}},
		{"not in the set", false, false, togetherFrom, []string{"send", "the turn's other"}},
		{"the queue standing aside", true, true, togetherFrom, []string{"send", "the turn's other"}},
	} {
		var order []string
		// A yield runs the goroutine made ready first but one time in 61,
		// when the scheduler looks at its global queue first (where the
		// yielder went): up to three tries.
		for range 3 {
			var q readyQueue
			q.aside.Store(tt.aside)
			q.turnSize.Store(tt.turn)
			w := &waiter{in: tt.in}
			var mu sync.Mutex
			order = nil
			note := func(s string) {
				mu.Lock()
				order = append(order, s)
				mu.Unlock()
			}
			done := make(chan struct{})
			go func() { // made ready in the same turn, ahead of the send
				note("the turn's other")
				close(done)
			}()
			q.together(w)
			note("send")
			<-done
			if slices.Equal(order, tt.want) {
				break
			}
		}
		if !slices.Equal(order, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, order, tt.want)
		}
	}
}

// The sends of a turn's connections leave in one batch, made once the
// turn has run: each connection's bytes reach its peer, and each send
// returns what it sent. Where no ring can be had the sends yield and go
// one by one, and arrive the same. One P, so that the turn's senders all
// join the first one's batch before it runs again (on a loaded machine a
// sender can be preempted before it joins: a turn is tried up to three
// times for all of them to).
func TestSendWithTurnSendsTheTurnTogether(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const n = 6
	turn := func(ring bool) (together int64, haveRing bool) {
		var q readyQueue
		q.turnSize.Store(togetherFrom)
		if !ring {
			q.ringTried = true // tried for, and none had
		}
		clients, servers := socketPairs(t, n)
		sent := make([]int, n)
		errs := make([]error, n)
		_, wg := waitEach(servers, func(i int, src syscall.RawConn, w *waiter) {
			w.in = true
			src.Write(func(fd uintptr) bool {
				sent[i], errs[i] = q.sendWithTurn(w, fd, []byte{'a' + byte(i)})
				return true
			})
		})
		wg.Wait()
		for i, c := range clients {
			if sent[i] != 1 || errs[i] != nil {
				t.Fatalf("ring %v, connection %d: sent %d, %v", ring, i, sent[i], errs[i])
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			got := make([]byte, 2)
			if k, err := c.Read(got); err != nil || k != 1 || got[0] != 'a'+byte(i) {
				t.Fatalf("ring %v, connection %d: read %q, %v", ring, i, got[:k], err)
			}
		}
		if q.ring != nil {
			q.ring.Close()
		}
		return q.sentTogether.Load(), q.ring != nil
	}
	for _, ring := range []bool{true, false} {
		together, haveRing := turn(ring)
		for try := 1; ring && haveRing && !raceEnabled && together != n && try < 3; try++ {
			together, haveRing = turn(ring)
		}
		switch {
		case ring && !haveRing:
			if os.Getenv("CI") == "true" {
				t.Fatal("no io_uring to send with")
			}
			t.Log("SKIP: this kernel gives no io_uring to send with; the sends went one by one")
		case ring && !raceEnabled && together != n:
			t.Fatalf("%d of the turn's %d sends left together, want all", together, n)
		case !ring && together != 0:
			t.Fatalf("%d sends left together with no ring", together)
		}
	}
}
