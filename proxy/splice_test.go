package proxy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/internal/testtool"
	"github.com/rotor-lb/rotor/proxy"
)

// pair returns the two ends of a loopback TCP connection.
func pair(tb testing.TB) (net.Conn, net.Conn) {
	c, s := testtool.TCPPair(tb)
	return c, s
}

// A way is how Splice gets its connections: plain TCP ones go to the
// event loop (on Linux), others to a goroutine a direction.
type way struct {
	name string
	wrap func(net.Conn) net.Conn
	then bool // through SpliceThen, which returns at once
}

// splice runs Splice, or SpliceThen, on a and b the way w says; then
// gets the counts.
func (w way) splice(a, b net.Conn, s *proxy.Session, then func(aToB, bToA int64)) {
	if w.then {
		proxy.SpliceThen(a, b, s, then)
		return
	}
	go func() { then(proxy.Splice(a, b, s)) }()
}

// wrapped is a TCP connection Splice cannot take for the event loop; it
// still copies from it the raw way (it is a syscall.Conn).
type wrapped struct{ *net.TCPConn }

var ways = []way{
	{"loop", plain, false},
	{"goroutines", wrap, false},
	{"loop, then", plain, true},
	{"goroutines, then", wrap, true},
}

func plain(c net.Conn) net.Conn { return c }
func wrap(c net.Conn) net.Conn  { return wrapped{c.(*net.TCPConn)} }

// eachWay runs test once for each way.
func eachWay(t *testing.T, test func(t *testing.T, w way)) {
	for _, w := range ways {
		t.Run(w.name, func(t *testing.T) { test(t, w) })
	}
}

// spliced returns a client end and a backend end joined through Splice,
// and a channel with what Splice returns once both directions end.
func spliced(tb testing.TB, w way) (client, backend net.Conn, counts <-chan [2]int64) {
	client, a := pair(tb)
	b, backend := pair(tb)
	a, b = w.wrap(a), w.wrap(b)
	done := make(chan [2]int64, 1)
	w.splice(a, b, nil, func(in, out int64) {
		a.Close()
		b.Close()
		done <- [2]int64{in, out}
	})
	return client, backend, done
}

// Every byte arrives in order both ways, across reads that fill the
// small buffer, the big one, and neither; a half-close reaches the other
// side; the counts are the bytes each way.
func TestSpliceCopiesEveryByte(t *testing.T) { eachWay(t, testSpliceCopiesEveryByte) }

func testSpliceCopiesEveryByte(t *testing.T, w way) {
	client, backend, counts := spliced(t, w)
	up := make([]byte, 3<<20+12345)
	for i := range up {
		up[i] = byte(i * 7)
	}
	down := bytes.Repeat([]byte("0123456789abcdef"), 70000)
	go func() {
		_, _ = client.Write(up)
		_ = client.(*net.TCPConn).CloseWrite()
	}()
	go func() {
		_, _ = backend.Write(down)
		_ = backend.(*net.TCPConn).CloseWrite()
	}()
	gotUp, err := io.ReadAll(backend)
	if err != nil || !bytes.Equal(gotUp, up) {
		t.Fatalf("client to backend: %d bytes of %d arrived intact: %v", len(gotUp), len(up), err)
	}
	gotDown, err := io.ReadAll(client)
	if err != nil || !bytes.Equal(gotDown, down) {
		t.Fatalf("backend to client: %d bytes of %d arrived intact: %v", len(gotDown), len(down), err)
	}
	if c := <-counts; c != [2]int64{int64(len(up)), int64(len(down))} {
		t.Fatalf("Splice counted %v, want [%d %d]", c, len(up), len(down))
	}
	client.Close()
	backend.Close()
}

// BenchmarkSplice: a bulk transfer through Splice on loopback, one way.
//
//	go test ./proxy -run '^$' -bench Splice -count 5
func BenchmarkSplice(b *testing.B) {
	for _, w := range ways {
		b.Run(w.name, func(b *testing.B) { benchmarkSplice(b, w) })
	}
}

func benchmarkSplice(b *testing.B, w way) {
	client, backend, counts := spliced(b, w)
	chunk := make([]byte, 256<<10)
	const total = 64 << 20
	b.SetBytes(total)
	go func() { _, _ = io.Copy(io.Discard, backend) }()
	for b.Loop() {
		for sent := 0; sent < total; sent += len(chunk) {
			if _, err := client.Write(chunk); err != nil {
				b.Fatal(err)
			}
		}
	}
	client.Close()
	backend.Close()
	<-counts
}

// Small messages both ways, one at a time and in bursts, each answered:
// none waits on a readiness the copy missed (a raw read that waits
// without trying first must not sleep through bytes that came while it
// wrote).
func TestSpliceMessagesBothWays(t *testing.T) { eachWay(t, testSpliceMessagesBothWays) }

func testSpliceMessagesBothWays(t *testing.T, w way) {
	client, backend, counts := spliced(t, w)
	defer client.Close()
	defer backend.Close()
	go func() { // the backend echoes every byte
		_, _ = io.Copy(backend, backend)
		_ = backend.(*net.TCPConn).CloseWrite()
	}()
	_ = client.SetDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 64<<10)
	sent := 0
	for round := range 3000 {
		burst := 1 + round%7
		var msg []byte
		for i := range burst {
			msg = append(msg, fmt.Sprintf("message %d.%d;", round, i)...)
		}
		if _, err := client.Write(msg); err != nil {
			t.Fatal(err)
		}
		sent += len(msg)
		if _, err := io.ReadFull(client, buf[:len(msg)]); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if !bytes.Equal(buf[:len(msg)], msg) {
			t.Fatalf("round %d: echoed %q, want %q", round, buf[:len(msg)], msg)
		}
	}
	_ = client.(*net.TCPConn).CloseWrite()
	if rest, _ := io.ReadAll(client); len(rest) != 0 {
		t.Fatalf("%d bytes more than sent came back", len(rest))
	}
	if c := <-counts; c != [2]int64{int64(sent), int64(sent)} {
		t.Fatalf("Splice counted %v, want [%d %d]", c, sent, sent)
	}
}

// A backend that stops reading fills the copy's way to it: the bytes
// wait, and all arrive in order once it reads again. Meanwhile a drain's
// cut is not held up by the copy waiting on the backend, and ends the
// splice.
func TestSpliceSlowReader(t *testing.T) { eachWay(t, testSpliceSlowReader) }

func testSpliceSlowReader(t *testing.T, w way) {
	client, a := pair(t)
	b, backend := pair(t)
	a, b = w.wrap(a), w.wrap(b)
	defer client.Close()
	defer backend.Close()
	var conns proxy.Conns
	sess, _ := conns.Add(a, b)
	done := make(chan [2]int64, 1)
	w.splice(a, b, sess, func(in, out int64) {
		done <- [2]int64{in, out}
		sess.Done()
	})
	up := make([]byte, 16<<20)
	for i := range up {
		up[i] = byte(i * 13)
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := client.Write(up)
		wrote <- err
	}()
	time.Sleep(300 * time.Millisecond) // the backend reads nothing: the buffers fill
	got := make([]byte, len(up))
	if _, err := io.ReadFull(backend, got); err != nil || !bytes.Equal(got, up) {
		t.Fatalf("after the stall, %v; intact: %v", err, bytes.Equal(got, up))
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}

	go func() { _, _ = client.Write(up) }() // fills the way to the backend again
	time.Sleep(300 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the drain's deadline has passed: it cuts at once
	drained := make(chan error, 1)
	go func() { drained <- conns.Shutdown(ctx) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Splice did not end after the drain cut it")
	}
	select {
	case err := <-drained:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the drain returned %v, want it to say it cut", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the drain did not end after its session did")
	}
	// The client's side was closed, not left open.
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, client); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the client's connection after the cut: %v, want its end", err)
	}
}

// A client that sends its last bytes and half-closes at once, many times
// over: the end of the stream reaches the backend every time, however it
// came with the bytes (a copy that waited after a short read, instead of
// reading once more, would sleep through an end that came in the same
// readiness as the last bytes).
func TestSpliceHalfCloseAfterLastBytes(t *testing.T) { eachWay(t, testSpliceHalfCloseAfterLastBytes) }

func testSpliceHalfCloseAfterLastBytes(t *testing.T, w way) {
	for i := range 200 {
		client, backend, counts := spliced(t, w)
		payload := bytes.Repeat([]byte{'x'}, 1+i*37)
		if _, err := client.Write(payload); err != nil {
			t.Fatal(err)
		}
		_ = client.(*net.TCPConn).CloseWrite()
		_ = backend.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(backend)
		if err != nil || len(got) != len(payload) {
			t.Fatalf("connection %d: the backend read %d of %d bytes and then %v", i, len(got), len(payload), err)
		}
		_ = backend.(*net.TCPConn).CloseWrite()
		if c := <-counts; c[0] != int64(len(payload)) {
			t.Fatalf("connection %d: Splice counted %d bytes up, want %d", i, c[0], len(payload))
		}
		client.Close()
		backend.Close()
	}
}

// A relayed session that moves nothing either way for its tracker's
// tunnel bound is cut, and says so (Idled); one whose bytes keep moving,
// in either direction alone, is not, however long it lasts; a session
// that only waits for its relay to begin is not watched.
func TestSpliceTunnelIdle(t *testing.T) { eachWay(t, testSpliceTunnelIdle) }

func testSpliceTunnelIdle(t *testing.T, w way) {
	const bound = 400 * time.Millisecond
	var conns proxy.Conns
	conns.SetTunnelIdle(bound)
	waiting, _ := conns.Add() // no relay yet: never idle
	defer waiting.Done()
	type tunnel struct {
		client, backend net.Conn
		sess            *proxy.Session
		done            chan time.Time
	}
	open := func() *tunnel {
		client, a := pair(t)
		b, backend := pair(t)
		a, b = w.wrap(a), w.wrap(b)
		tn := &tunnel{client: client, backend: backend, done: make(chan time.Time, 1)}
		tn.sess, _ = conns.Add(a, b)
		w.splice(a, b, tn.sess, func(int64, int64) {
			a.Close()
			b.Close()
			tn.done <- time.Now()
			tn.sess.Done()
		})
		t.Cleanup(func() {
			client.Close()
			backend.Close()
		})
		return tn
	}
	quiet, up, down := open(), open(), open()
	start := time.Now()
	// up sends to its backend, down to its client, every 100 ms for three
	// bounds; each reader drains as it goes.
	for _, c := range []net.Conn{up.backend, down.client} {
		go func() { _, _ = io.Copy(io.Discard, c) }()
	}
	for time.Since(start) < 3*bound {
		for _, c := range []net.Conn{up.client, down.backend} {
			if _, err := c.Write([]byte("ping\n")); err != nil {
				t.Fatalf("a busy tunnel broke after %v: %v", time.Since(start), err)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case at := <-quiet.done:
		if d := at.Sub(start); d < bound-150*time.Millisecond {
			t.Fatalf("the quiet tunnel was cut after %v, before its %v bound", d, bound)
		}
	default:
		t.Fatalf("the quiet tunnel is still open after %v, three times its bound", time.Since(start))
	}
	if !quiet.sess.Idled() {
		t.Fatal("the quiet tunnel's session does not say it was cut for idling")
	}
	_ = quiet.client.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.Copy(io.Discard, quiet.client); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the quiet tunnel's client after the cut: %v, want its end", err)
	}
	for _, tn := range []*tunnel{up, down} {
		select {
		case <-tn.done:
			t.Fatal("a tunnel moving bytes one way was cut")
		default:
		}
		if tn.sess.Idled() {
			t.Fatal("a busy tunnel's session says it idled")
		}
	}
	if waiting.Idled() {
		t.Fatal("a session whose relay had not begun was cut")
	}
	// Quiet from now on, they go too.
	for _, tn := range []*tunnel{up, down} {
		select {
		case <-tn.done:
		case <-time.After(10 * bound):
			t.Fatal("a tunnel that went quiet was not cut")
		}
	}
}
