package h1_test

import (
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// A client that sends its last request and closes its side at once gets
// its answer and then the end of the connection, soon (within the
// ticker's two ticks), not after the idle timeout: its end may come with
// the request, before the read that takes it, where the wait that
// follows the answer cannot see it.
func TestServerClosesAfterClientsEnd(t *testing.T) {
	_, addr, _ := startShort(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}), IdleTimeout: time.Minute})
	for i := range 20 {
		c, br := dial(t, addr)
		tc := c.(*net.TCPConn)
		if i%2 == 1 {
			// The request and the end in one segment: corked, the
			// request waits in the socket until the end is added to it.
			rc, err := tc.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CORK, 1) })
		}
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		_ = tc.CloseWrite()
		if _, body := readAnswer(t, br); body != "ok" {
			t.Fatalf("answer %q", body)
		}
		start := time.Now()
		_ = c.SetReadDeadline(start.Add(2 * time.Second))
		if _, err := br.ReadByte(); err != io.EOF {
			t.Fatalf("connection %d: read %v after the answer, want the end within 2 s of it", i, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("connection %d ended %v after its answer", i, d)
		}
		c.Close()
	}
}
