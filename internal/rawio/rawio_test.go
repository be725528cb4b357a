//go:build unix && !norawio

package rawio

import (
	"bytes"
	"net"
	"slices"
	"syscall"
	"testing"
)

// Write sends all of p, and stops with EAGAIN, having written what fit,
// when a non-blocking socket is full; Read gets the bytes back, EAGAIN
// once the socket is empty, and 0 at its end; Send to a peer gone is
// EPIPE, and no SIGPIPE ends the test.
func TestReadWrite(t *testing.T) {
	r, w := pair(t)

	msg := bytes.Repeat([]byte("rotor "), 100)
	if n, err := Write(w, msg); n != len(msg) || err != nil {
		t.Fatalf("Write: %d, %v; want %d, nil", n, err, len(msg))
	}
	got := make([]byte, 2*len(msg))
	if n, err := Read(r, got); err != nil || !bytes.Equal(got[:n], msg) {
		t.Fatalf("Read: %q, %v", got[:n], err)
	}
	if _, err := Read(r, got); err != syscall.EAGAIN {
		t.Fatalf("Read of an empty socket: %v, want EAGAIN", err)
	}

	big := make([]byte, 4<<20) // more than a socket holds
	n, err := Write(w, big)
	if err != syscall.EAGAIN || n <= 0 || n >= len(big) {
		t.Fatalf("Write to a socket that fills: %d, %v; want part of it and EAGAIN", n, err)
	}
	if n, err := Send(w, big); n != 0 || err != syscall.EAGAIN {
		t.Fatalf("Send to a full socket: %d, %v; want 0 and EAGAIN", n, err)
	}

	if err := syscall.Shutdown(int(w), syscall.SHUT_WR); err != nil {
		t.Fatal(err)
	}
	for {
		n, err := Read(r, got)
		if err != nil {
			t.Fatalf("Read to the end: %v", err)
		}
		if n == 0 {
			break // the end, after what was sent
		}
	}

	gone, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(gone[1])
	syscall.Close(gone[0])
	if _, err := Send(uintptr(gone[1]), msg); err != syscall.EPIPE {
		t.Fatalf("Send to a peer gone: %v, want EPIPE", err)
	}
}

// pair returns the two ends of a non-blocking socket pair, closed when
// the test ends.
func pair(t *testing.T) (r, w uintptr) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		t.Cleanup(func() { syscall.Close(fd) })
		if err := syscall.SetNonblock(fd, true); err != nil {
			t.Fatal(err)
		}
	}
	return uintptr(fds[0]), uintptr(fds[1])
}

// BenchmarkExchange: a 100-byte message written to one end of a loopback
// TCP connection and read at the other, through the net package's Write
// and Read (write(2) and read(2), the scheduler told of each) and through
// rawio's Send and Read.
func BenchmarkExchange(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	w, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	r, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	msg, buf := make([]byte, 100), make([]byte, 4096)
	b.Run("net", func(b *testing.B) {
		for b.Loop() {
			if _, err := w.Write(msg); err != nil {
				b.Fatal(err)
			}
			if _, err := r.Read(buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("rawio", func(b *testing.B) {
		wfd, rfd := fdOf(b, w), fdOf(b, r)
		for b.Loop() {
			if _, err := Send(wfd, msg); err != nil {
				b.Fatal(err)
			}
			// Loopback delivers as it sends: the bytes are there.
			if _, err := Read(rfd, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// fdOf is c's descriptor, still c's.
func fdOf(b *testing.B, c net.Conn) (fd uintptr) {
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		b.Fatal(err)
	}
	if err := rc.Control(func(f uintptr) { fd = f }); err != nil {
		b.Fatal(err)
	}
	return fd
}

// Peek tells a waiting byte, an empty socket (EAGAIN) and an ended one
// (0) apart, and takes nothing.
func TestPeek(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fds[0])
	r, w := uintptr(fds[0]), uintptr(fds[1])
	if n, err := Peek(r); n != 0 || err != syscall.EAGAIN {
		t.Errorf("Peek of an empty socket: %d, %v; want 0, EAGAIN", n, err)
	}
	if _, err := Send(w, []byte("x")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if n, err := Peek(r); n != 1 || err != nil {
			t.Errorf("Peek with a byte waiting: %d, %v; want 1, nil", n, err)
		}
	}
	syscall.Close(fds[1])
	b := make([]byte, 4)
	if n, err := Read(r, b); n != 1 || err != nil || b[0] != 'x' {
		t.Errorf("Read after two Peeks: %q, %v; want the byte", b[:n], err)
	}
	if n, err := Peek(r); n != 0 || err != nil {
		t.Errorf("Peek of an ended socket: %d, %v; want 0, nil", n, err)
	}
}

// Writev sends several buffers in order, skipping empty ones and taking
// more than MaxVec in several calls; on a socket that fills it stops
// with EAGAIN, leaving bufs holding exactly what it did not write, and
// picks up from there once the reader has drained it. What arrives is the
// buffers joined, byte for byte; Sendv to a peer gone is EPIPE.
func TestWritev(t *testing.T) {
	r, w := pair(t)

	small := [][]byte{[]byte("3\r\n"), nil, []byte("abc"), []byte("\r\n"), []byte("0"), []byte("\r\n\r\n")}
	want := []byte("3\r\nabc\r\n0\r\n\r\n")
	if n, err := Writev(w, small); n != len(want) || err != nil {
		t.Fatalf("Writev of six buffers: %d, %v; want %d, nil", n, err, len(want))
	}
	got := make([]byte, 64<<10)
	if n, err := Read(r, got); err != nil || !bytes.Equal(got[:n], want) {
		t.Fatalf("read back %q, %v; want %q", got[:n], err, want)
	}

	// Three buffers, the middle one more than the socket holds.
	big := make([]byte, 4<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	bufs := [][]byte{[]byte("400000\r\n"), big, []byte("\r\n")}
	want = slices.Concat(bufs...)
	var sent int
	var recv []byte
	for len(recv) < len(want) {
		n, err := Writev(w, bufs)
		sent += n
		if err != nil && err != syscall.EAGAIN {
			t.Fatalf("Writev: %v", err)
		}
		left := 0
		for _, b := range bufs {
			left += len(b)
		}
		if sent+left != len(want) {
			t.Fatalf("after %d bytes written, bufs holds %d: want the %d not written", sent, left, len(want)-sent)
		}
		for {
			n, err := Read(r, got)
			if err == syscall.EAGAIN {
				break
			}
			if err != nil || n == 0 {
				t.Fatalf("Read: %d, %v", n, err)
			}
			recv = append(recv, got[:n]...)
		}
		if err == nil && len(recv) < len(want) && left == 0 {
			t.Fatalf("Writev wrote everything, yet %d of %d bytes came", len(recv), len(want))
		}
	}
	if !bytes.Equal(recv, want) {
		t.Fatalf("the %d bytes read differ from the %d written", len(recv), len(want))
	}

	gone, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(gone[1])
	syscall.Close(gone[0])
	if _, err := Sendv(uintptr(gone[1]), [][]byte{want[:1], want[1:2]}); err != syscall.EPIPE {
		t.Fatalf("Sendv to a peer gone: %v, want EPIPE", err)
	}
}
