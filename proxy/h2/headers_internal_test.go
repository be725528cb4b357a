package h2

import (
	"bytes"
	"strconv"
	"testing"

	"golang.org/x/net/http2"
)

// A connection's header block keeps its field slice from block to block,
// unless a long header list grew it past keepFields: a client cannot make
// a connection hold a large one.
func TestHeaderBlockKeepsFewFields(t *testing.T) {
	var wire bytes.Buffer
	wf := http2.NewFramer(&wire, nil)
	frame := func(id uint32, n int) {
		fields := []string{":method", "GET", ":path", "/"}
		for i := range n {
			fields = append(fields, "x-"+strconv.Itoa(i), "v")
		}
		_ = wf.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: encodeBlock(fields...), EndStream: true, EndHeaders: true})
	}
	frame(1, 3)
	frame(3, 3)
	frame(5, 200)
	frame(7, 3)
	rf := http2.NewFramer(nil, &wire)
	b := newHeaderBlock(1 << 20)
	var caps []int
	for range 4 {
		f, err := rf.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if err := b.read(f.(*http2.HeadersFrame), rf); err != nil {
			t.Fatal(err)
		}
		caps = append(caps, cap(b.fields))
		if got := len(b.regularFields()); got != len(b.fields)-2 || len(b.pseudoFields()) != 2 {
			t.Fatalf("stream %d: %d pseudo, %d regular fields", b.streamID, len(b.pseudoFields()), got)
		}
	}
	if caps[1] != caps[0] {
		t.Errorf("the second block's slice (capacity %d) is not the first's (%d)", caps[1], caps[0])
	}
	if caps[2] <= keepFields || caps[3] > keepFields {
		t.Errorf("capacities %v: want the 202-field block's over %d, and the one after within it", caps, keepFields)
	}
}
