package proxy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/rotor-lb/rotor/proxy"
)

// countingWriter records the size of every write it is given.
type countingWriter struct {
	bytes.Buffer
	writes []int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes = append(w.writes, len(p))
	return w.Buffer.Write(p)
}

// A lent body copies itself out in large writes, counts what it read, and
// keeps a read error as the client's.
func TestLentBodyWritesLarge(t *testing.T) {
	const size = 3*proxy.CopyBuffer + 17
	b := proxy.NewBody(io.NopCloser(io.LimitReader(zeros{}, size)))
	var w countingWriter
	n, err := io.Copy(&w, b.Lend())
	if err != nil || n != size || w.Len() != size || b.Len() != size || !b.Spent() {
		t.Fatalf("copied %d (%v), wrote %d, counted %d; want %d", n, err, w.Len(), b.Len(), size)
	}
	if len(w.writes) > 4 {
		t.Fatalf("%d writes for %d bytes (%v): the body went out in small pieces", len(w.writes), size, w.writes)
	}
	cut := errors.New("unexpected EOF in a chunk")
	b = proxy.NewBody(io.NopCloser(io.MultiReader(io.LimitReader(zeros{}, 100), failing{cut})))
	if _, err := io.Copy(io.Discard, b.Lend()); !errors.Is(err, cut) || !errors.Is(b.Err(), cut) || b.Len() != 100 {
		t.Fatalf("a body cut short: copy %v, Err %v, Len %d", err, b.Err(), b.Len())
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

type failing struct{ err error }

func (f failing) Read([]byte) (int, error) { return 0, f.err }

// framed is a Framer: it gives copies a window inside their buffer and
// counts the writes that did not come from it.
type framed struct {
	bytes.Buffer
	window  []byte
	windows int
	outside int
}

func (f *framed) Window(b []byte) []byte {
	f.windows++
	f.window = b[10 : len(b)-20]
	return f.window
}

func (f *framed) Write(p []byte) (int, error) {
	if len(p) > len(f.window) || &p[0] != &f.window[0] {
		f.outside++
	}
	return f.Buffer.Write(p)
}

// CopyAnswer reads each piece of an answer into the window its writer
// gives, and the bytes come through whole.
func TestCopyAnswerReadsIntoTheWindow(t *testing.T) {
	body := make([]byte, 3*proxy.CopyBuffer+99)
	for i := range body {
		body[i] = byte(i % 251)
	}
	var f framed
	if rerr, werr := proxy.CopyAnswer(&f, bytes.NewReader(body)); rerr != nil || werr != nil {
		t.Fatalf("copy: %v, %v", rerr, werr)
	}
	if !bytes.Equal(f.Bytes(), body) {
		t.Fatalf("%d bytes came through, not the %d sent", f.Len(), len(body))
	}
	if f.windows < 4 || f.outside > 0 {
		t.Fatalf("%d windows asked for, %d writes from outside the window", f.windows, f.outside)
	}
}

// inHand is a body in memory, as the short way's server hands one on.
type inHand struct{ b []byte }

func (h *inHand) Read(p []byte) (int, error) {
	if len(h.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, h.b)
	h.b = h.b[n:]
	return n, nil
}

func (h *inHand) Close() error { return nil }

func (h *inHand) Held() int64 { return int64(len(h.b)) }

func (h *inHand) Take(n int64) ([]byte, bool) {
	if int64(len(h.b)) != n {
		return nil, false
	}
	p := h.b
	h.b = nil
	return p, true
}

// A lent body in hand gives its bytes whole when they are all that is
// asked for, counted as read (and kept: the body can go again);
// asked for another length, or with some of it read, it gives nothing
// and stays as it was; a body not in hand gives nothing. Held says the
// length Take takes, while all of it is in hand.
func TestLentBodyTakesWhatIsInHand(t *testing.T) {
	b := proxy.NewBody(&inHand{b: []byte("hello")})
	h := b.Lend().(proxy.InHand)
	if n := h.Held(); n != 5 {
		t.Fatalf("Held of 5 bytes in hand: %d", n)
	}
	if p, ok := h.Take(4); ok || p != nil || b.Spent() {
		t.Fatalf("Take(4) of 5 bytes: %q, %v, spent %v; want nothing taken", p, ok, b.Spent())
	}
	if p, ok := h.Take(5); !ok || string(p) != "hello" || b.Len() != 5 || b.Spent() {
		t.Fatalf("Take(5): %q, %v, %d read, spent %v; want the 5 bytes, counted, kept", p, ok, b.Len(), b.Spent())
	}
	if n, err := b.Lend().Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("a read after the take: %d, %v; want the end", n, err)
	}

	b = proxy.NewBody(&inHand{b: []byte("hello")})
	io.ReadFull(b.Lend(), make([]byte, 2))
	if p, ok := b.Lend().(proxy.InHand).Take(5); ok || p != nil || b.Len() != 5 {
		t.Fatalf("Take(5) after 2 read: %q, %v, %d read; want nothing taken, all 5 kept at the first read", p, ok, b.Len())
	}
	if n := b.Lend().(proxy.InHand).Held(); n != -1 {
		t.Fatalf("Held after 2 read: %d, want -1 (not all of it in hand)", n)
	}

	b = proxy.NewBody(io.NopCloser(strings.NewReader("hello")))
	if p, ok := b.Lend().(proxy.InHand).Take(5); ok || p != nil || b.Spent() {
		t.Fatalf("Take of a body not in hand: %q, %v; want nothing", p, ok)
	}
	if n := b.Lend().(proxy.InHand).Held(); n != -1 {
		t.Fatalf("Held of a body not in hand: %d, want -1", n)
	}
}

// A body kept whole (in hand, read ahead into memory or into its file)
// is not spent by a try that takes it, and after Again each try is lent
// all of it from its start, read apart from the tries before, whose
// readers a transport may still be reading (here at once, for the race
// detector); a body read from the client as it comes is spent by a try
// that read any of it, and Again lends it as it is.
func TestKeptBodyGoesAgain(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), proxy.MaxAhead/16*3+5)
	small := body[:1000]
	cases := []struct {
		name   string
		body   []byte
		open   func(p []byte) *proxy.Body
		inHand bool // a later try can Take it
	}{
		{"in hand, taken", small, func(p []byte) *proxy.Body {
			return proxy.NewBody(&inHand{b: bytes.Clone(p)})
		}, true},
		{"in hand, read", small, func(p []byte) *proxy.Body {
			return proxy.NewBody(&inHand{b: bytes.Clone(p)})
		}, true},
		{"read ahead", small, func(p []byte) *proxy.Body {
			b := proxy.NewBody(io.NopCloser(bytes.NewReader(p)))
			if _, whole, _, _ := b.ReadAhead(0); !whole {
				t.Fatal("not read ahead whole")
			}
			return b
		}, true},
		{"spooled", body, func(p []byte) *proxy.Body {
			b := proxy.NewBody(io.NopCloser(bytes.NewReader(p)))
			if _, whole, _, _ := b.ReadAhead(int64(len(p))); !whole {
				t.Fatal("not spooled whole")
			}
			return b
		}, false},
	}
	held := proxy.SpoolHeld()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := c.open(c.body)
			first := b.Lend()
			half := make([]byte, len(c.body)/2)
			if c.name == "in hand, taken" {
				// The short way's transport takes it whole.
				if _, ok := first.(proxy.InHand).Take(int64(len(c.body))); !ok {
					t.Fatal("not taken")
				}
				half = c.body
			} else if _, err := io.ReadFull(first, half); err != nil {
				t.Fatalf("the first try's half: %v", err)
			}
			if b.Spent() {
				t.Fatal("spent by the first try")
			}
			first.(interface{ Abort() }).Abort() // its connection gone
			if b.Spent() {
				t.Fatal("spent by an Abort")
			}
			b.Again()
			errs := make(chan error, 2)
			read := func(r io.Reader, want []byte) {
				got, err := io.ReadAll(iotest.OneByteReader(r))
				if err == nil && !bytes.Equal(got, want) {
					err = fmt.Errorf("read %d bytes, want %d (equal %v)", len(got), len(want), bytes.Equal(got, want))
				}
				errs <- err
			}
			go read(first, c.body[len(half):]) // the first try's, on as it was
			go read(b.Lend(), c.body)
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			b.Again()
			h := b.Lend().(proxy.InHand)
			if n := h.Held(); (n == int64(len(c.body))) != c.inHand {
				t.Fatalf("a third try: Held %d; want in hand %v", n, c.inHand)
			}
			if c.inHand {
				if p, ok := h.Take(int64(len(c.body))); !ok || !bytes.Equal(p, c.body) {
					t.Fatalf("a third try took %d bytes (%v), want the whole body", len(p), ok)
				}
			} else if got, err := io.ReadAll(h.(io.Reader)); err != nil || !bytes.Equal(got, c.body) {
				t.Fatalf("a third try read %d bytes (%v), want the whole body", len(got), err)
			}
			if b.Spent() {
				t.Fatal("spent after three tries")
			}
			b.Close()
			if proxy.SpoolHeld() != held {
				t.Fatalf("closed, the spool still holds %d of the budget", proxy.SpoolHeld()-held)
			}
		})
	}

	t.Run("as it comes", func(t *testing.T) {
		b := proxy.NewBody(io.NopCloser(bytes.NewReader(small)))
		if n, _ := b.Lend().Read(make([]byte, 10)); n != 10 || !b.Spent() {
			t.Fatalf("read %d bytes, spent %v; want 10 read, spent", n, b.Spent())
		}
		b.Again()
		if got, _ := io.ReadAll(b.Lend()); !bytes.Equal(got, small[10:]) {
			t.Fatalf("after Again: %d bytes, want the %d not read", len(got), len(small)-10)
		}
	})
}

// slowReader gives its bytes a piece a read, each after a pause: a
// client uploading slowly.
type slowReader struct {
	pieces int
	pause  time.Duration
}

func (r *slowReader) Read(p []byte) (int, error) {
	if r.pieces == 0 {
		return 0, io.EOF
	}
	time.Sleep(r.pause)
	r.pieces--
	return copy(p, "piece"), nil
}

// A try's latency leaves out what its reads of the client's body waited:
// the client's pace is not the endpoint's.
func TestTryLatencyLeavesOutTheUpload(t *testing.T) {
	const pause = 20 * time.Millisecond
	b := proxy.NewBody(io.NopCloser(&slowReader{pieces: 5, pause: pause}))
	start, waited := time.Now(), b.Waited()
	if _, err := io.Copy(io.Discard, b.Lend()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond) // the endpoint's own time, after the body
	end := time.Now()
	if w := b.Waited() - waited; w < 5*pause {
		t.Fatalf("waited %v over five reads of %v each", w, pause)
	}
	if got := proxy.TryLatency(b, start, end, waited); got < 30*time.Millisecond || got > end.Sub(start)-5*pause+5*time.Millisecond {
		t.Errorf("latency %v of a try of %v, the upload %v of it; want what came after the upload, about 30ms", got, end.Sub(start), 5*pause)
	}
	// No body: the whole try; and never below zero.
	if got := proxy.TryLatency(nil, start, end, 0); got != end.Sub(start) {
		t.Errorf("without a body: %v, want the try's %v", got, end.Sub(start))
	}
	if got := proxy.TryLatency(b, end.Add(-time.Millisecond), end, 0); got != 0 {
		t.Errorf("waits longer than the try: %v, want 0", got)
	}
}

// A lent body a transport gives up (Abort: its backend's connection gone
// while it sent the body) stops a read that waits for the client, and
// what that read fails with is not kept as the client's error; the body
// is spent, not to be sent again.
func TestAbortStopsAWaitingRead(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	b := proxy.NewBody(pr)
	l := b.Lend()
	read := make(chan error, 1)
	go func() {
		_, err := l.Read(make([]byte, 8))
		read <- err
	}()
	time.Sleep(20 * time.Millisecond) // the read waits for the client
	l.(interface{ Abort() }).Abort()
	select {
	case err := <-read:
		if err == nil || b.Err() != nil || !b.Spent() {
			t.Fatalf("read ended with %v, kept %v, spent %v; want it failed, nothing kept, spent", err, b.Err(), b.Spent())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the read still waits after Abort")
	}
}

// A body the client's bounds ended is the client's however the try ended:
// its read fails at the body timeout just as the server ends the request's
// context and the transport gives the body up (net/http's server and
// transport do both), and BrokeTry, asked once the context has ended,
// waits for that read and finds the client's error, where Err asked at
// once found none.
func TestBrokeTryWaitsForTheRead(t *testing.T) {
	pr, pw := io.Pipe()
	// Its Close does not end a read in flight, as net/http's server's
	// body's waits for it.
	b := proxy.NewBody(io.NopCloser(pr))
	l := b.Lend()
	go func() { _, _ = l.Read(make([]byte, 8)) }()
	time.Sleep(20 * time.Millisecond) // the read waits for the client
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the server ended the request as its read failed
	l.(interface{ Abort() }).Abort()
	if b.Err() != nil {
		t.Fatalf("an error before the read returned: %v", b.Err())
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		pw.CloseWithError(proxy.ErrBodyTimeout) // the read's own end, the body timeout's
	}()
	if !proxy.BrokeTry(b, ctx) || !errors.Is(b.Err(), proxy.ErrBodyTimeout) {
		t.Fatalf("BrokeTry false, or the body's error %v: the client's timeout was not kept", b.Err())
	}
	if proxy.BrokeTry(proxy.NewBody(io.NopCloser(strings.NewReader("x"))), ctx) || proxy.BrokeTry(nil, ctx) {
		t.Fatal("a body that did not fail, or none, broke the try")
	}
}
