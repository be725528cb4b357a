package h2

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// FuzzServe feeds a connection whatever frames (or bytes) a client might
// send after its preface and SETTINGS: the server must neither panic nor
// hang, and must end with the connection, every handler returned.
func FuzzServe(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, frames []byte) {
		s := &Server{MaxConcurrentStreams: 4, MaxHeaderBytes: 4096, IdleTimeout: time.Second}
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.serveConn(server, &tls.ConnectionState{}, http.HandlerFunc(fuzzHandler))
		}()
		go func() { _, _ = io.Copy(io.Discard, client) }()
		_ = client.SetWriteDeadline(time.Now().Add(2 * time.Second))
		_, _ = client.Write([]byte(http2.ClientPreface))
		var settings bytes.Buffer
		_ = http2.NewFramer(&settings, nil).WriteSettings()
		_, _ = client.Write(settings.Bytes())
		_, _ = client.Write(frames)
		time.Sleep(time.Millisecond) // let the handlers start
		client.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the server did not end with its connection")
		}
	})
}

// fuzzHandler uses what a handler can: the body, trailers, 1xx, flushes
// and a read deadline.
func fuzzHandler(w http.ResponseWriter, r *http.Request) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(time.Second))
	w.Header().Set("Trailer", "X-T")
	if r.Header.Get("X-Early") != "" {
		w.WriteHeader(http.StatusEarlyHints)
	}
	n, _ := io.Copy(io.Discard, r.Body)
	_, _ = w.Write(bytes.Repeat([]byte("a"), int(n%70000)))
	w.(http.Flusher).Flush()
	_, _ = w.Write([]byte("end"))
	w.Header().Set("X-T", r.Trailer.Get("X-In"))
}

func fuzzSeeds() [][]byte {
	block := encodeBlock
	req := func(method string, extra ...string) []byte {
		return block(append([]string{":method", method, ":scheme", "https", ":authority", "x", ":path", "/"}, extra...)...)
	}
	var seeds [][]byte
	add := func(write func(fr *http2.Framer)) {
		var b bytes.Buffer
		write(http2.NewFramer(&b, nil))
		seeds = append(seeds, b.Bytes())
	}
	add(func(fr *http2.Framer) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: req("GET"), EndStream: true, EndHeaders: true})
	})
	add(func(fr *http2.Framer) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: req("POST", "content-length", "5", "trailer", "x-in", "x-early", "1"), EndHeaders: true})
		_ = fr.WriteData(1, false, []byte("hel"))
		_ = fr.WriteWindowUpdate(0, 1000)
		_ = fr.WriteData(1, false, []byte("lo"))
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block("x-in", "v"), EndStream: true, EndHeaders: true})
		_ = fr.WritePing(false, [8]byte{7})
	})
	add(func(fr *http2.Framer) {
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}, http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: req("GET"), EndStream: true, EndHeaders: false})
		_ = fr.WriteContinuation(3, true, block("x-a", "b"))
		_ = fr.WriteRSTStream(3, http2.ErrCodeCancel)
		_ = fr.WritePriority(5, http2.PriorityParam{StreamDep: 5})
		_ = fr.WriteWindowUpdate(3, 1)
		_ = fr.WriteGoAway(0, http2.ErrCodeNo, nil)
	})
	add(func(fr *http2.Framer) {
		for id := uint32(1); id < 20; id += 2 {
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: req("POST"), EndHeaders: true})
			_ = fr.WriteDataPadded(id, id%3 == 0, []byte("body"), []byte{0, 0, 0})
		}
	})
	return append(seeds, nil)
}
