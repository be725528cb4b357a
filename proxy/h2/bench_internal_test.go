package h2

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rotor-lb/rotor/proxy/h1"
)

// BenchmarkStreams: GETs with small answers over one connection, ten
// streams at a time, each with the four fields curl or a browser sends,
// the client a bare framer over loopback TCP. What a stream costs the
// server, its allocations above all (the client's are few: a frame
// header and the frames it reads). The handler answers as the reverse
// proxy does, with a header read into one of h1's maps and passed on.
func BenchmarkStreams(b *testing.B) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		backend := h1.HeaderMap(1)
		backend["Content-Type"] = []string{"text/plain"}
		h1.PassHeader(w, backend)
		_, _ = io.WriteString(w, "ok")
	})
	client, _ := serveLoopback(b, h)

	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: "bench"}, {Name: ":path", Value: "/"}, {Name: "user-agent", Value: "bench"},
		{Name: "accept", Value: "*/*"}, {Name: "accept-encoding", Value: "gzip, deflate, br"}, {Name: "accept-language", Value: "en"}} {
		_ = enc.WriteField(f)
	}
	var out bytes.Buffer
	wf := http2.NewFramer(&out, nil)
	out.WriteString(http2.ClientPreface)
	_ = wf.WriteSettings()
	_ = wf.WriteWindowUpdate(0, 1<<30)
	if _, err := client.Write(out.Bytes()); err != nil {
		b.Fatal(err)
	}
	rf := http2.NewFramer(nil, client)
	id := uint32(1)
	const window = 10
	b.ReportAllocs()
	b.ResetTimer()
	for sent, ended := 0, 0; ended < b.N; {
		out.Reset()
		for ; sent < b.N && sent-ended < window; sent++ {
			_ = wf.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true})
			id += 2
		}
		if out.Len() > 0 {
			if _, err := client.Write(out.Bytes()); err != nil {
				b.Fatal(err)
			}
		}
		f, err := rf.ReadFrame()
		if err != nil {
			b.Fatal(err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				out.Reset()
				_ = wf.WriteSettingsAck()
				_, _ = client.Write(out.Bytes())
			}
		case *http2.RSTStreamFrame:
			b.Fatal("stream " + strconv.Itoa(int(f.StreamID)) + " reset")
		}
		if f.Header().Flags.Has(http2.FlagDataEndStream) && (f.Header().Type == http2.FrameData || f.Header().Type == http2.FrameHeaders) {
			ended++
		}
	}
}
