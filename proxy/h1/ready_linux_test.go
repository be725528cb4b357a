//go:build !norawio

package h1

import (
	"net"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/internal/rawio"
)

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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var q readyQueue
	var (
		mu      sync.Mutex
		order   []int
		wg      sync.WaitGroup
		clients []syscall.RawConn
	)
	waiters := make([]waiter, n)
	for i := range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		crc, _ := c.(*net.TCPConn).SyscallConn()
		clients = append(clients, crc)
		src, _ := s.(*net.TCPConn).SyscallConn()
		waiters[i].init()
		wg.Add(1)
		go func() {
			defer wg.Done()
			src.Read(func(fd uintptr) bool {
				if !q.wait(&waiters[i], fd) {
					t.Error("the queue did not take the socket")
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				return true
			})
			q.remove(&waiters[i], src)
		}()
	}
	time.Sleep(100 * time.Millisecond) // all sixteen wait
	for _, rc := range clients {
		// Raw: a write through Go's would tell the scheduler, which
		// might run another goroutine before the last byte is sent.
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
