package server_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/server"
)

// What a client of the admin listener sends, and how long it holds a
// connection, is bounded: a head too large is refused with 431, a head
// too slow and a keep-alive connection left idle are closed.
func TestAdminListenerBoundsItsClients(t *testing.T) {
	server.SetAdminBounds(t, 300*time.Millisecond, 300*time.Millisecond, 4<<10)
	r := startRotor(t, `admin: {listen: "127.0.0.1:0"}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app}
pools:
  - {name: app, endpoints: [{name: a, url: "http://127.0.0.1:1"}]}
`, nil)
	addr := r.Addr("admin").String()
	dial := func() (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		return c, bufio.NewReader(c)
	}
	// closed says the server closed c: EOF (or a reset) before the
	// test's own 5 s deadline.
	closed := func(br *bufio.Reader) bool {
		_, err := br.ReadByte()
		var ne net.Error
		return err != nil && !(errors.As(err, &ne) && ne.Timeout())
	}

	c, br := dial()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	start := time.Now()
	if !closed(br) {
		t.Fatal("a keep-alive connection left idle was not closed")
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Fatalf("the idle connection closed after %v, before its bound", took)
	}

	c, br = dial()
	if _, err := io.WriteString(c, "GET /status HTTP/1.1\r\nHost: admin\r\nX-Big: "+strings.Repeat("b", 8<<10)+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("an 8 KiB head: %v %v, want 431", resp, err)
	}

	c, br = dial()
	if _, err := io.WriteString(c, "GET /status HTTP/1.1\r\nHost: adm"); err != nil {
		t.Fatal(err)
	}
	if !closed(br) {
		t.Fatal("a head that never ends held its connection")
	}
}
