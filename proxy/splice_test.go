package proxy_test

import (
	"bytes"
	"io"
	"net"
	"testing"

	"github.com/rotor-lb/rotor/proxy"
)

// pair returns the two ends of a loopback TCP connection.
func pair(tb testing.TB) (net.Conn, net.Conn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		tb.Fatal("accept failed")
	}
	return c, s
}

// spliced returns a client end and a backend end joined through Splice,
// and a channel with what Splice returns once both directions end.
func spliced(tb testing.TB) (client, backend net.Conn, counts <-chan [2]int64) {
	client, a := pair(tb)
	b, backend := pair(tb)
	done := make(chan [2]int64, 1)
	go func() {
		in, out := proxy.Splice(a, b)
		a.Close()
		b.Close()
		done <- [2]int64{in, out}
	}()
	return client, backend, done
}

// Every byte arrives in order both ways, across reads that fill the
// small buffer, the big one, and neither; a half-close reaches the other
// side; the counts are the bytes each way.
func TestSpliceCopiesEveryByte(t *testing.T) {
	client, backend, counts := spliced(t)
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
	client, backend, counts := spliced(b)
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
