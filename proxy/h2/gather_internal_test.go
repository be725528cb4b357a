package h2

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// serveLoopback serves HTTP/2 with h on a loopback TCP connection, the
// frames alone (no TLS), until the test ends. It returns the client's
// end and the server's, whose writes it counts.
func serveLoopback(tb testing.TB, h http.Handler) (client net.Conn, server *countingConn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	raw, err := ln.Accept()
	if err != nil {
		client.Close()
		tb.Fatal(err)
	}
	server = &countingConn{Conn: raw}
	done := make(chan struct{})
	go func() {
		defer close(done)
		(&Server{}).serveConn(server, &tls.ConnectionState{}, h)
	}()
	tb.Cleanup(func() {
		client.Close()
		<-done
	})
	return client, server
}

// countingConn counts the writes made to a connection.
type countingConn struct {
	net.Conn
	writes atomic.Int32
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// Answers that become ready together leave together: ten streams whose
// handlers are let go at once are answered in fewer writes than ten. On
// one P, where each handler would otherwise run to its flush before the
// next one runs, a write that waited for the others' turn takes them all.
func TestAnswersReadyTogetherLeaveTogether(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const streams = 10
	started, release := make(chan struct{}, streams), make(chan struct{})
	var once sync.Once
	letGo := func() { once.Do(func() { close(release) }) }
	defer letGo() // before the server's end waits for the handlers
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
		_, _ = io.WriteString(w, "ok "+r.URL.Path)
	})
	client, server := serveLoopback(t, h)

	// The preface, SETTINGS and every request in one write.
	var out bytes.Buffer
	out.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&out, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for i := range streams {
		var block bytes.Buffer
		enc := hpack.NewEncoder(&block)
		for _, f := range []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
			{Name: ":authority", Value: "x"}, {Name: ":path", Value: "/" + string(rune('a'+i))}} {
			_ = enc.WriteField(f)
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: block.Bytes(),
			EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	_ = client.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := client.Write(out.Bytes()); err != nil {
		t.Fatal(err)
	}
	for range streams {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the handlers did not all start")
		}
	}
	before := server.writes.Load() // SETTINGS, its ACK, the window's update
	letGo()

	in := http2.NewFramer(nil, client)
	in.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	bodies := map[uint32]string{}
	for ended := 0; ended < streams; {
		f, err := in.ReadFrame()
		if err != nil {
			t.Fatalf("after %d answers: %v", ended, err)
		}
		if d, ok := f.(*http2.DataFrame); ok {
			bodies[d.StreamID] += string(d.Data())
		}
		if f.Header().Flags.Has(http2.FlagDataEndStream) && (f.Header().Type == http2.FrameData || f.Header().Type == http2.FrameHeaders) {
			ended++
		}
	}
	for i := range streams {
		if want, got := "ok /"+string(rune('a'+i)), bodies[uint32(2*i+1)]; got != want {
			t.Errorf("stream %d answered %q, want %q", 2*i+1, got, want)
		}
	}
	if n := server.writes.Load() - before; n > streams/3 {
		t.Fatalf("%d answers ready together took %d writes: want them gathered, at most %d", streams, n, streams/3)
	}
}
