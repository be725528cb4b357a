//go:build !norawio

package h1

import (
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/rotor-lb/rotor/internal/rawio"
)

// A client connection of the short way (cleartext or TLS) that has
// waited a second for its next request (parkTicks) waits on with no
// goroutine: its goroutine leaves it, its socket waits in the park (an
// epoll set of rotor's own), and what comes on it (a request, the
// client's end) has a goroutine serve it again. A goroutine that waits
// keeps its stack: 4 KiB once it has served a request, as Go shrinks a
// stack only under a quarter of it in use, about a third of what an idle
// keep-alive connection cost (docs/RELIABILITY.md). What a park and its
// wake cost (an epoll_ctl each way, a goroutine woken, 20-30 us of CPU in
// all) is paid at most once a second a client: a connection in use never
// waits that long.
//
// The ticker asks a connection idle that long to park
// (askPark): under the connection's parkMu, its state goes from idle to
// parking and its read deadline to the past, which ends its wait in Go's
// poller, or over TLS its tls.Conn's read (which goes on after a read
// past its deadline), and a poke its wait in the ready queue. Its
// goroutine, out of the wait, gives the socket to the park (park.add). A
// request that comes first is read: its read takes the state from parking
// to serving and lifts the deadline under parkMu, so that a deadline set
// for parking never stays on a connection that does not park.
//
// In the park a socket is one-shot: its first event takes it out (the
// state from parked to idle) and hands it to a goroutine (resume), which
// reads what came, as after any wait. The shutdown and the idle timeout
// take a parked connection out themselves (park.close, the state from
// parked to closed), and the goroutine handed it closes it. Each move out
// of parked is a compare-and-swap under the park's lock: one of them takes
// it. The goroutine a connection leaves waits a tick to serve the next to
// come out of the park (park.next; parkWorkers of them at the most), with
// the stack serving grew, then ends.
//
// The set and its goroutine outlive their last connection by parkLinger,
// so that a client or two idle in turns (a request every second, say) do
// not make and close a set at every park: 7 system calls a park more
// where they did (strace: an epoll_create1, three fcntl, two epoll_ctl and
// a close).
type park struct {
	mu    sync.Mutex
	ep    *rawio.Epoll // nil while none runs
	slots slots[*clientConn]
	live  int         // connections parked
	sweep *time.Timer // ends the set once empty for parkLinger
	// Goroutines that left a connection in the park, waiting to serve one
	// that comes out of it, the newest last: a goroutine's stack, grown
	// by serving, is freed when it ends, and a new one's grown again
	// (copied twice or three times over), about 14 us of a request that
	// came to a parked connection where a new goroutine served it.
	workers []chan *clientConn
}

// parkWorkers is the most goroutines that wait to serve a connection out
// of the park, and workerWait how long each waits.
const (
	parkWorkers = 16
	workerWait  = tickEvery
)

// parkLinger is how long the park's set stays once empty. Tests set it
// shorter; it is read with the park's lock held.
var parkLinger = 2 * time.Second

// parks is where idle connections wait with no goroutine.
var parks park

// canPark says whether a connection may park here.
const canPark = true

// A connection's place in the park.
type parkSlot struct {
	slot, gen int32
}

// add parks c, whose state is parking, and its goroutine is free of it;
// false: the state was no longer parking (the shutdown closed it) or the
// park could not take the socket.
func (p *park) add(c *clientConn) bool {
	p.mu.Lock()
	start := p.ep == nil
	if start {
		ep, err := rawio.NewEpoll()
		if err != nil {
			p.mu.Unlock()
			return false
		}
		p.ep = ep
	}
	c.park.slot, c.park.gen = p.slots.put(c)
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: c.park.slot, Pad: c.park.gen}
	err := p.ctl(c, syscall.EPOLL_CTL_ADD, &ev)
	if err == nil && c.state.CompareAndSwap(stateParking, stateParked) {
		p.live++
		ep := p.ep
		p.mu.Unlock()
		if start {
			go p.run(ep)
		}
		return true
	}
	if err == nil {
		_ = p.ctl(c, syscall.EPOLL_CTL_DEL, nil)
	}
	p.slots.release(c.park.slot)
	var end *rawio.Epoll
	if start {
		end, p.ep = p.ep, nil
	}
	p.mu.Unlock()
	if end != nil {
		end.File.Close() // no goroutine runs it yet
	}
	return false
}

// ended ends the set if it is still empty (sweep's timer).
func (p *park) ended() {
	p.mu.Lock()
	var end *rawio.Epoll
	if p.live == 0 {
		end, p.ep = p.ep, nil // the next to park starts another
	}
	p.mu.Unlock()
	if end != nil {
		end.File.Close() // ends its goroutine's wait
	}
}

// ctl changes c's socket in the park's set; p.mu is held.
func (p *park) ctl(c *clientConn, op int, ev *syscall.EpollEvent) error {
	var err error
	if cerr := c.rc.Control(func(fd uintptr) { err = syscall.EpollCtl(p.ep.FD, op, int(fd), ev) }); cerr != nil {
		return cerr
	}
	return err
}

// take takes c out of the park, its state going from parked to state;
// false: c was not parked (a wake or a close took it first). The set ends
// parkLinger after its last connection leaves, if none came meanwhile.
// p.mu is held.
func (p *park) take(c *clientConn, state int32) bool {
	if p.slots.at(c.park.slot, c.park.gen) != c || !c.state.CompareAndSwap(stateParked, state) {
		return false
	}
	_ = p.ctl(c, syscall.EPOLL_CTL_DEL, nil)
	p.slots.release(c.park.slot)
	if p.live--; p.live == 0 {
		if p.sweep == nil {
			p.sweep = time.AfterFunc(parkLinger, p.ended)
		} else {
			p.sweep.Reset(parkLinger)
		}
	}
	return true
}

// close takes parked connection c out of the park to be closed, and
// hands it to a goroutine, which closes it; false: c was not parked.
func (p *park) close(c *clientConn) bool {
	p.mu.Lock()
	ok := p.take(c, stateClosed)
	p.mu.Unlock()
	if ok {
		p.hand(c)
	}
	return ok
}

// run takes the events of set ep and hands the connections they came for
// to goroutines, until ep is closed.
func (p *park) run(ep *rawio.Epoll) {
	events := make([]syscall.EpollEvent, 64)
	var woken []*clientConn
	_ = ep.Raw.Read(func(uintptr) bool {
		for {
			n, err := rawio.PollNow(ep.FD, events)
			if err != nil || n <= 0 {
				return false
			}
			p.mu.Lock()
			for _, ev := range events[:n] {
				if c := p.slots.at(ev.Fd, ev.Pad); c != nil && p.take(c, stateIdle) {
					woken = append(woken, c)
				}
			}
			p.mu.Unlock()
			for _, c := range woken {
				p.hand(c)
			}
			clear(woken)
			woken = woken[:0]
			if n < len(events) {
				return false // drained: the set is readable again with its next event
			}
		}
	})
}

// hand gives c, just out of the park, to a goroutine: one that waits for
// it (the last to wait), or a new one.
func (p *park) hand(c *clientConn) {
	p.mu.Lock()
	var w chan *clientConn
	if n := len(p.workers); n > 0 {
		w = p.workers[n-1]
		p.workers = p.workers[:n-1]
	}
	p.mu.Unlock()
	if w != nil {
		w <- c // never blocks: a place for one, and it was taken off the list
		return
	}
	go c.resume()
}

// next is a goroutine that left a connection in the park waiting for one
// that comes out of it, for workerWait at the most; nil: none came, or
// parkWorkers wait already.
func (p *park) next() *clientConn {
	w := make(chan *clientConn, 1)
	p.mu.Lock()
	if len(p.workers) >= parkWorkers {
		p.mu.Unlock()
		return nil
	}
	p.workers = append(p.workers, w)
	p.mu.Unlock()
	t := time.NewTimer(workerWait)
	defer t.Stop()
	select {
	case c := <-w:
		return c
	case <-t.C:
	}
	p.mu.Lock()
	i := slices.Index(p.workers, w)
	if i >= 0 {
		p.workers = slices.Delete(p.workers, i, i+1)
	}
	p.mu.Unlock()
	if i < 0 {
		return <-w // handed one as the time ran out
	}
	return nil
}
