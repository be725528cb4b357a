//go:build !norawio

package proxy

import (
	"bytes"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/internal/cores"
	"github.com/rotor-lb/rotor/internal/rawio"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// relayed joins a client end and a backend end through the loop l; done
// is closed once the relay ends.
func relayed(t *testing.T, l *loop) (client, backend *net.TCPConn, done <-chan struct{}) {
	client, a := tcpPair(t)
	b, backend := tcpPair(t)
	ch := make(chan struct{})
	if l.relay(a, b, nil, func(int64, int64) { close(ch) }) == nil {
		t.Fatal("the loop did not take the connections")
	}
	return client, backend, ch
}

// The loop takes turns: an exchange of small messages goes on while a
// transfer without end runs beside it on the same loop, and the
// transfer, whose reads run out of their budget a turn (with no new event
// to bring the loop back to it), is taken up again after the others'
// events. The loop's goroutine ends, and its epoll set is closed, with its
// last relay.
func TestRelayLoopIsShared(t *testing.T) {
	l := newLoop()
	bulkClient, bulkBackend, bulkDone := relayed(t, l)
	var stop atomic.Bool
	go func() { // writes until told to stop, as fast as it can
		chunk := make([]byte, 256<<10)
		for !stop.Load() {
			if _, err := bulkClient.Write(chunk); err != nil {
				return
			}
		}
		_ = bulkClient.CloseWrite()
	}()
	var received atomic.Int64
	go func() {
		n, _ := io.Copy(io.Discard, bulkBackend)
		received.Store(n)
		_ = bulkBackend.CloseWrite()
	}()

	client, backend, done := relayed(t, l)
	go func() { // echoes
		_, _ = io.Copy(backend, backend)
		_ = backend.CloseWrite()
	}()
	_ = client.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64)
	for i := range 300 {
		msg := []byte{byte(i), byte(i >> 8), 'x'}
		if _, err := client.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(client, buf[:len(msg)]); err != nil || !bytes.Equal(buf[:len(msg)], msg) {
			t.Fatalf("round trip %d beside the transfer: %v", i, err)
		}
	}
	if received.Load() != 0 {
		t.Fatal("the transfer ended before the exchange did: nothing was shared")
	}
	stop.Store(true)
	_ = client.CloseWrite()
	if rest, err := io.ReadAll(client); len(rest) != 0 || err != nil {
		t.Fatalf("after the exchange: %d bytes more, %v", len(rest), err)
	}
	for _, ch := range []<-chan struct{}{done, bulkDone} {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("a relay did not end after both its sides did")
		}
	}
	for _, c := range []net.Conn{client, backend, bulkClient, bulkBackend} {
		c.Close()
	}
	waitStopped(t, l)
}

// waitStopped waits for the loop l, its last relay over, to stop and
// close its epoll set and its ring.
func waitStopped(t *testing.T, l *loop) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		l.mu.Lock()
		idle := l.ep == nil && l.live == 0
		ring := l.ring != nil
		l.mu.Unlock()
		if idle && ring {
			t.Fatal("the loop stopped and kept its ring")
		}
		if idle {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the loop kept its epoll set with no relay left")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// New relays go to the first loop that keeps up, among as many as
// GOMAXPROCS is when each starts (Go changes it while running: a
// container's CPU limit); when every one is full, to each in turn.
func TestNextLoopPacks(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	runtime.GOMAXPROCS(3)
	first := nextLoop()
	loopsMu.Lock()
	ls := slices.Clone(loops[:3])
	loopsMu.Unlock()
	defer func() {
		for _, l := range ls {
			l.full.Store(false)
		}
	}()
	if first != ls[0] {
		t.Fatal("with every loop keeping up, a relay did not go to the first")
	}
	ls[0].full.Store(true)
	if l := nextLoop(); l != ls[1] {
		t.Fatal("with the first loop full, a relay did not go to the second")
	}
	ls[1].full.Store(true)
	if l := nextLoop(); l != ls[2] {
		t.Fatal("with two loops full, a relay did not go to the third")
	}
	ls[2].full.Store(true)
	ls[1].full.Store(false)
	if st := RelayLoops(); len(st) < 3 || !st[0].Full || st[1].Full || !st[2].Full {
		t.Fatalf("RelayLoops says %+v, want the first and third of three full", st)
	}
	ls[1].full.Store(true)
	seen := map[*loop]int{}
	for range 6 {
		seen[nextLoop()]++
	}
	if len(seen) != 3 || seen[ls[0]] != 2 || seen[ls[1]] != 2 || seen[ls[2]] != 2 {
		t.Fatalf("every loop full: six relays went %v over the loops, want two each of three", seen)
	}
	runtime.GOMAXPROCS(1)
	if l := nextLoop(); l != ls[0] {
		t.Fatal("GOMAXPROCS 1: a relay did not go to the first loop")
	}
	runtime.GOMAXPROCS(2)
	ls[1].full.Store(false)
	if l := nextLoop(); l != ls[1] {
		t.Fatal("GOMAXPROCS 2, the second loop keeping up: a relay did not go to it")
	}
}

// A loop spreading hands another loop half the relays it has more than
// that one (none when they have as many), and they go on where they
// were: an exchange of messages on each, and a transfer
// whose backend had stopped reading (the relay holding bytes it could
// not write) arrives whole and in order once it reads again. A relay
// moved is cut by Close on its new loop, and every relay ends as it
// would have, both loops stopping with their last.
func TestRelaysMoveToALoopThatKeepsUp(t *testing.T) {
	home, other := newLoop(), newLoop()
	type started struct {
		client, backend *net.TCPConn
		r               *relay
		done            chan struct{}
	}
	start := func() started {
		client, a := tcpPair(t)
		b, backend := tcpPair(t)
		_ = b.SetWriteBuffer(32 << 10)
		_ = backend.SetReadBuffer(32 << 10)
		done := make(chan struct{})
		r := home.relay(a, b, nil, func(int64, int64) { close(done) })
		if r == nil {
			t.Fatal("the connections were not relayed")
		}
		return started{client, backend, r, done}
	}
	// The transfer first, so that it is among the half that moves.
	bulk := start()
	const size = 8 << 20
	want := make([]byte, size)
	for i := range want {
		want[i] = byte(i*7 + i>>11)
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := bulk.client.Write(want)
		wrote <- err
	}()
	var echo []started
	for range 5 {
		e := start()
		go func() { // echoes
			_, _ = io.Copy(e.backend, e.backend)
			_ = e.backend.CloseWrite()
		}()
		echo = append(echo, e)
	}
	all := append([]started{bulk}, echo...)
	// The transfer fills the backend's small socket buffer and stalls, the
	// relay holding what it read and could not write.
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-wrote:
		t.Fatalf("the transfer did not stall: its write returned (%v)", err)
	default:
	}
	deadline := time.Now().Add(10 * time.Second)

	home.spreadTo.Store(other)
	roundTrip := func(e started, i int) {
		t.Helper()
		_ = e.client.SetDeadline(time.Now().Add(10 * time.Second))
		msg := []byte{byte(i), byte(i >> 8), 'm'}
		buf := make([]byte, len(msg))
		if _, err := e.client.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(e.client, buf); err != nil || !bytes.Equal(buf, msg) {
			t.Fatalf("round trip %d: %q, %v", i, buf, err)
		}
	}
	roundTrip(echo[0], 0) // wakes the loop, which spreads after the batch
	moved := map[*relay]bool{}
	for time.Now().Before(deadline) {
		clear(moved)
		for _, x := range all {
			if x.r.l.Load() == other {
				moved[x.r] = true
			}
		}
		if len(moved) == len(all)/2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(moved) != len(all)/2 {
		t.Fatalf("%d of %d relays moved, want half", len(moved), len(all))
	}
	if !moved[bulk.r] {
		t.Fatal("the transfer, the first relay, did not move")
	}
	if got := home.moved.Load(); got != uint64(len(all)/2) {
		t.Fatalf("the loop counts %d relays moved, want %d", got, len(all)/2)
	}
	for i := range 50 {
		for _, e := range echo {
			roundTrip(e, i)
		}
	}
	// As many on each: a spread moves none back or on.
	home.spreadTo.Store(other)
	for _, e := range echo {
		if !moved[e.r] {
			roundTrip(e, 0) // wakes home
			break
		}
	}
	time.Sleep(50 * time.Millisecond)
	for _, x := range all {
		if on := x.r.l.Load(); (on == other) != moved[x.r] {
			t.Fatal("a spread between loops with as many relays each moved one")
		}
	}
	if home.moved.Load() != uint64(len(all)/2) || other.moved.Load() != 0 {
		t.Fatalf("after a spread that moved none, the loops count %d and %d moved, want %d and 0",
			home.moved.Load(), other.moved.Load(), len(all)/2)
	}

	got := make([]byte, 0, size)
	buf := make([]byte, 64<<10)
	_ = bulk.backend.SetReadDeadline(time.Now().Add(20 * time.Second))
	for len(got) < size {
		n, err := bulk.backend.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("the transfer after its move: %d of %d bytes, %v", len(got), size, err)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the transfer's bytes changed in the move")
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}

	// A moved relay cut by Close (a drain's deadline) ends on its new loop.
	var cut started
	for _, e := range echo {
		if moved[e.r] {
			cut = e
			break
		}
	}
	if cut.r == nil {
		t.Fatal("no echo relay moved")
	}
	cut.r.Close()
	for _, x := range all {
		if x.r != cut.r {
			_ = x.client.CloseWrite()
			_ = x.backend.CloseWrite()
		}
	}
	for _, x := range all {
		select {
		case <-x.done:
		case <-time.After(10 * time.Second):
			t.Fatal("a relay did not end")
		}
		x.client.Close()
		x.backend.Close()
	}
	waitStopped(t, home)
	waitStopped(t, other)
}

// A loop is full once it has not waited for an event in fullAfter windows
// on end, and spreads then; after a spread it spreads again only
// calmAfter windows later, and one wait makes it keep up again, at once.
func TestMeterFindsALoopFull(t *testing.T) {
	t0 := time.Unix(1000, 0)
	m := meter{window: t0}
	now := t0
	// wake runs the loop for d, waking every millisecond; waiting, it
	// waits once at the start. It returns the last full and whether it
	// was told to spread.
	wake := func(d time.Duration, waiting bool) (full, spread bool) {
		if waiting {
			m.wait()
		}
		for end := now.Add(d); now.Before(end); {
			now = now.Add(time.Millisecond)
			if ended, f, s := m.look(now); ended {
				full, spread = f, spread || s
			}
		}
		return full, spread
	}
	if full, spread := wake(time.Duration(fullAfter-1)*loadWindow, false); full || spread {
		t.Fatalf("after %d busy windows: full %v, spread %v", fullAfter-1, full, spread)
	}
	if full, spread := wake(loadWindow, false); !full || !spread {
		t.Fatalf("after %d busy windows: full %v, spread %v; want both", fullAfter, full, spread)
	}
	m.calm = calmAfter // it spread
	if full, spread := wake(time.Duration(calmAfter-1)*loadWindow, false); !full || spread {
		t.Fatalf("still busy, in the calm after a spread: full %v, spread %v; want full alone", full, spread)
	}
	if full, spread := wake(loadWindow, false); !full || !spread {
		t.Fatalf("still busy after the calm: full %v, spread %v; want both", full, spread)
	}
	if !m.wait() {
		t.Fatal("a full loop's wait did not say it was full")
	}
	if m.wait() {
		t.Fatal("a second wait said the loop was full")
	}
	if full, _ := wake(loadWindow, false); full {
		t.Fatal("a window with a wait: still full")
	}
	if full, spread := wake(time.Duration(fullAfter-1)*loadWindow, false); full || spread {
		t.Fatal("busy again, fewer windows than fullAfter: full")
	}
}

// A loop's turn sends what its reads took in one call: messages that
// arrive on several relays before the loop runs leave together, each
// whole, on its own relay; an end that came with its message reaches
// the backend after the message. One P, and the messages written raw, so
// that the loop runs only once all are there.
func TestRelayLoopSendsATurnTogether(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const n = 8
	l := newLoop()
	var clients, backends []*net.TCPConn
	var dones []<-chan struct{}
	for range n {
		c, b, done := relayed(t, l)
		clients, backends, dones = append(clients, c), append(backends, b), append(dones, done)
	}
	rawWrite := func(c *net.TCPConn, p []byte) {
		rc, _ := c.SyscallConn()
		rc.Control(func(fd uintptr) {
			if k, err := rawio.Write(fd, p); k != len(p) || err != nil {
				t.Errorf("write: %d, %v", k, err)
			}
		})
	}
	for i, c := range clients {
		rawWrite(c, []byte{'a' + byte(i)})
		if i == n-1 {
			// The end with the message, raw as the writes.
			syscall.RawSyscall(syscall.SYS_SHUTDOWN, uintptr(fdOf(t, c)), syscall.SHUT_WR, 0)
		}
	}
	for i, b := range backends {
		_ = b.SetDeadline(time.Now().Add(10 * time.Second))
		got := make([]byte, 2)
		if k, err := io.ReadFull(b, got[:1]); k != 1 || got[0] != 'a'+byte(i) {
			t.Fatalf("backend %d: %q, %v", i, got[:k], err)
		}
		if i == n-1 {
			if k, err := b.Read(got); k != 0 || err != io.EOF {
				t.Fatalf("backend %d after its message: %d bytes, %v; want the end", i, k, err)
			}
		}
	}
	ring, err := rawio.NewSendRing(2)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no io_uring to send with: %v", err)
		}
		t.Logf("SKIP: this kernel gives no io_uring to send with (%v); the sends went one by one", err)
	} else if ring.Close(); !raceEnabled && l.sentTogether.Load() < n {
		got := l.sentTogether.Load()
		t.Fatalf("%d messages sent together, want the turn's %d", got, n)
	}
	for i, b := range backends {
		rawWrite(b, []byte{'A' + byte(i)})
	}
	for i, c := range clients {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		got := make([]byte, 1)
		if k, err := io.ReadFull(c, got); k != 1 || got[0] != 'A'+byte(i) {
			t.Fatalf("client %d: %q, %v", i, got[:k], err)
		}
	}
	for i := range n {
		clients[i].Close()
		backends[i].Close()
		select {
		case <-dones[i]:
		case <-time.After(10 * time.Second):
			t.Fatal("a relay did not end after both its sides did")
		}
	}
	waitStopped(t, l)
}

// fdOf is c's descriptor, for a call on it the net package has none for.
func fdOf(t *testing.T, c *net.TCPConn) (fd int) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	rc.Control(func(f uintptr) { fd = int(f) })
	return fd
}

// TestRelayLoopHoldsItsTurns: with its core busy but not full and many
// relays with events since its last look, a loop holds its turns (the
// time counted as spun, for the next look to leave out), and the bytes go
// through as before; once the core is full the holds stop.
func TestRelayLoopHoldsItsTurns(t *testing.T) {
	saved := holdMaxProcs
	holdMaxProcs = 1 << 10
	defer func() { holdMaxProcs = saved }()
	var share atomic.Uint64 // how busy the cores are, in thousandths
	share.Store(700)
	var ticks cores.Ticks // the loop's goroutine alone reads them
	l := newLoop()
	l.gauge.ReadCores = func() (cores.Ticks, bool) {
		ticks.Busy += share.Load()
		ticks.Total += 1000
		return ticks, true
	}
	l.gauge.ReadCPU = func() time.Duration { return 0 }
	l.gauge.ReadSpun = func() time.Duration { return 0 }
	clients := make([]*net.TCPConn, relayMany)
	var conns []net.Conn
	var dones []<-chan struct{}
	for i := range clients {
		client, backend, done := relayed(t, l)
		go func() { // echoes
			_, _ = io.Copy(backend, backend)
			_ = backend.CloseWrite()
		}()
		_ = client.SetDeadline(time.Now().Add(20 * time.Second))
		clients[i] = client
		conns = append(conns, client, backend)
		dones = append(dones, done)
	}
	// exchange has every client send a message and read it back, in
	// turn, for d: every relay has events in every look.
	exchange := func(d time.Duration) {
		buf := make([]byte, 8)
		for i, end := 0, time.Now().Add(d); time.Now().Before(end); i++ {
			for j, c := range clients {
				msg := []byte{byte(i), byte(i >> 8), byte(j), 'x'}
				if _, err := c.Write(msg); err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(c, buf[:len(msg)]); err != nil || !bytes.Equal(buf[:len(msg)], msg) {
					t.Fatalf("round trip %d of relay %d: %q, %v", i, j, buf[:len(msg)], err)
				}
			}
		}
	}
	spun := cores.Spun()
	exchange(3 * relayLook)
	if !l.holds.On() {
		t.Fatal("the core busy with room and many relays: the loop does not hold its turns")
	}
	exchange(relayLook)
	if cores.Spun() == spun {
		t.Fatal("the loop holds its turns, and nothing was spun")
	}
	share.Store(970)
	exchange(3 * relayLook)
	if l.holds.On() {
		t.Fatal("the core full: the loop still holds its turns")
	}
	for _, c := range clients {
		_ = c.CloseWrite()
	}
	for _, ch := range dones {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("a relay did not end after both its sides did")
		}
	}
	for _, c := range conns {
		c.Close()
	}
	waitStopped(t, l)
}
