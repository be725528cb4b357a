package proxy_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/rotor-lb/rotor/proxy"
)

// A body read ahead that ends within MaxAhead is in hand: nothing of it
// is spent (a try that never sent it leaves it for the next), Held says
// its length, and the try that sends it takes it whole. A longer one
// gives what was read ahead first and the rest after it, every byte
// once.
func TestReadAhead(t *testing.T) {
	for _, size := range []int{0, 5, proxy.MaxAhead} {
		body := bytes.Repeat([]byte("x"), size)
		b := proxy.NewBody(io.NopCloser(iotest.OneByteReader(bytes.NewReader(body))))
		n, whole, ok, err := b.ReadAhead(0)
		if n != int64(size) || !whole || !ok || err != nil {
			t.Fatalf("%d bytes: read ahead %d, whole %v, ok %v, %v", size, n, whole, ok, err)
		}
		if b.Spent() || b.Len() != int64(size) {
			t.Fatalf("%d bytes: spent %v, %d read; want none spent, all read", size, b.Spent(), b.Len())
		}
		h := b.Lend().(proxy.InHand)
		if n := h.Held(); n != int64(size) {
			t.Fatalf("%d bytes: Held %d", size, n)
		}
		if p, ok := h.Take(int64(size)); !ok || !bytes.Equal(p, body) || b.Spent() {
			t.Fatalf("%d bytes: took %d (%v), spent %v; want it taken, kept", size, len(p), ok, b.Spent())
		}
		if n, err := b.Lend().Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("%d bytes: a read after the take: %d, %v; want the end", size, n, err)
		}
	}

	body := bytes.Repeat([]byte("0123456789abcdef"), proxy.MaxAhead/16*3+1)
	b := proxy.NewBody(io.NopCloser(iotest.OneByteReader(bytes.NewReader(body))))
	n, whole, ok, err := b.ReadAhead(0)
	if n != proxy.MaxAhead+1 || whole || !ok || err != nil || b.Spent() {
		t.Fatalf("a long body: read ahead %d, whole %v, ok %v, %v, spent %v; want MaxAhead+1 read, not whole, none spent", n, whole, ok, err, b.Spent())
	}
	if n := b.Lend().(proxy.InHand).Held(); n != -1 {
		t.Fatalf("Held %d of a body not all in hand, want -1", n)
	}
	got, err := io.ReadAll(b.Lend())
	if err != nil || !bytes.Equal(got, body) || b.Len() != int64(len(body)) {
		t.Fatalf("read %d bytes (%v, equal %v), counted %d; want the %d bytes as sent", len(got), err, bytes.Equal(got, body), b.Len(), len(body))
	}
}

// A body that fails as it is read ahead gives the error, kept as the
// client's; while bodies read ahead hold the budget, nothing is read.
func TestReadAheadFailsAndKeepsToItsBudget(t *testing.T) {
	cut := errors.New("unexpected EOF in a chunk")
	b := proxy.NewBody(io.NopCloser(io.MultiReader(strings.NewReader("abc"), failing{cut})))
	if _, whole, ok, err := b.ReadAhead(0); whole || !ok || !errors.Is(err, cut) || !errors.Is(b.Err(), cut) {
		t.Fatalf("a cut body: whole %v, ok %v, %v (kept %v); want its error, kept", whole, ok, err, b.Err())
	}

	t.Cleanup(proxy.SetAheadBudget(proxy.MaxAhead))
	b = proxy.NewBody(io.NopCloser(strings.NewReader("hello")))
	if n, whole, ok, err := b.ReadAhead(0); n != 0 || whole || ok || err != nil || b.Len() != 0 {
		t.Fatalf("over the budget: %d, whole %v, ok %v, %v, %d read; want nothing read", n, whole, ok, err, b.Len())
	}
	if got, _ := io.ReadAll(b.Lend()); string(got) != "hello" {
		t.Fatalf("the body after a read ahead refused: %q", got)
	}
}

// Past MaxAhead a body is read on into a temporary file, up to the
// bytes it may spool: one that ends within them is whole (it goes on with
// its length) though not in hand, and the tries read it from the file,
// every byte once and in order, nothing spent until one does; one longer
// gives what was spooled first and the rest after it. The file's budget
// comes back once the file is read to its end or the body is closed, and
// a body that would pass the budget is not spooled.
func TestReadAheadSpools(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), proxy.MaxAhead/16*5+3)
	open := func(body []byte) *proxy.Body {
		return proxy.NewBody(io.NopCloser(iotest.HalfReader(bytes.NewReader(body))))
	}
	held := proxy.SpoolHeld()

	b := open(body)
	n, whole, ok, err := b.ReadAhead(int64(len(body)))
	if n != int64(len(body)) || !whole || !ok || err != nil || b.Spent() {
		t.Fatalf("spooled whole: %d, whole %v, ok %v, %v, spent %v; want all %d read, whole, none spent", n, whole, ok, err, b.Spent(), len(body))
	}
	if h := b.Lend().(proxy.InHand); h.Held() != -1 {
		t.Fatalf("Held %d of a body on disk, want -1", h.Held())
	} else if _, ok := h.Take(n); ok || b.Spent() {
		t.Fatal("a body on disk taken as one in hand")
	}
	if proxy.SpoolHeld() == held {
		t.Fatal("a spooled body holds none of the budget")
	}
	got, err := io.ReadAll(iotest.OneByteReader(b.Lend()))
	if err != nil || !bytes.Equal(got, body) || b.Spent() {
		t.Fatalf("read back %d bytes (%v, equal %v), spent %v; want the %d as sent, kept", len(got), err, bytes.Equal(got, body), b.Spent(), len(body))
	}
	// Kept for a try after this one until the body is closed.
	b.Again()
	if got, err := io.ReadAll(b.Lend()); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read again: %d bytes (%v, equal %v); want the %d as sent", len(got), err, bytes.Equal(got, body), len(body))
	}
	b.Close()
	if proxy.SpoolHeld() != held {
		t.Fatalf("closed, the spool still holds %d of the budget", proxy.SpoolHeld()-held)
	}

	// Longer than it may spool: the file's part first, then the rest.
	b = open(body)
	limit := int64(len(body) / 2)
	if n, whole, ok, err := b.ReadAhead(limit); n != limit+1 || whole || !ok || err != nil {
		t.Fatalf("past the limit: %d, whole %v, ok %v, %v; want %d read, not whole", n, whole, ok, err, limit+1)
	}
	if got, err := io.ReadAll(b.Lend()); err != nil || !bytes.Equal(got, body) || b.Len() != int64(len(body)) {
		t.Fatalf("past the limit: read back %d bytes (%v, equal %v), counted %d", len(got), err, bytes.Equal(got, body), b.Len())
	}

	// Closed before any try read it: the budget comes back.
	b = open(body)
	if _, whole, _, _ := b.ReadAhead(int64(len(body))); !whole {
		t.Fatal("not spooled whole")
	}
	b.Close()
	if proxy.SpoolHeld() != held {
		t.Fatalf("closed, the spool still holds %d of the budget", proxy.SpoolHeld()-held)
	}

	// The budget passed midway: what the file has first, then the rest
	// as it comes, and the budget back once read.
	t.Cleanup(proxy.SetSpoolBudget(held + 2*proxy.MaxAhead))
	b = open(body)
	if n, whole, ok, err := b.ReadAhead(int64(len(body))); n <= proxy.MaxAhead+1 || n > 3*proxy.MaxAhead || whole || !ok || err != nil {
		t.Fatalf("over the budget: %d, whole %v, ok %v, %v; want over MaxAhead+1 and at most the budget and a piece read, not whole", n, whole, ok, err)
	}
	if got, _ := io.ReadAll(b.Lend()); !bytes.Equal(got, body) {
		t.Fatalf("over the budget: read back %d bytes, want the %d as sent", len(got), len(body))
	}
	if proxy.SpoolHeld() != held {
		t.Fatalf("over the budget, read: the spool still holds %d of the budget", proxy.SpoolHeld()-held)
	}

	// Too little budget for even what was read into memory: nothing
	// spooled, MaxAhead and one read ahead, the rest as it comes.
	t.Cleanup(proxy.SetSpoolBudget(held + proxy.MaxAhead))
	b = open(body)
	if n, whole, ok, err := b.ReadAhead(int64(len(body))); n != proxy.MaxAhead+1 || whole || !ok || err != nil {
		t.Fatalf("no budget: %d, whole %v, ok %v, %v; want MaxAhead+1 read, not whole", n, whole, ok, err)
	}
	if got, _ := io.ReadAll(b.Lend()); !bytes.Equal(got, body) || proxy.SpoolHeld() != held {
		t.Fatalf("no budget: read back %d bytes (equal %v), %d of the budget held", len(got), bytes.Equal(got, body), proxy.SpoolHeld()-held)
	}
}

// A body whose file takes nothing (a full disk: /dev/full) is not
// spooled: what was read into memory goes first, the rest as it comes,
// and the budget comes back at once.
func TestReadAheadOnAFullDisk(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full here")
	}
	t.Cleanup(proxy.SetCreateSpool(func() (*os.File, string, error) {
		f, err := os.OpenFile("/dev/full", os.O_RDWR, 0)
		return f, "", err
	}))
	held := proxy.SpoolHeld()
	body := bytes.Repeat([]byte("0123456789abcdef"), proxy.MaxAhead/16*3)
	b := proxy.NewBody(io.NopCloser(bytes.NewReader(body)))
	if n, whole, ok, err := b.ReadAhead(int64(len(body))); n != proxy.MaxAhead+1 || whole || !ok || err != nil {
		t.Fatalf("a full disk: %d, whole %v, ok %v, %v; want MaxAhead+1 read, not whole", n, whole, ok, err)
	}
	if proxy.SpoolHeld() != held {
		t.Fatalf("nothing spooled, and %d of the budget held", proxy.SpoolHeld()-held)
	}
	if got, err := io.ReadAll(b.Lend()); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("a full disk: read back %d bytes (%v, equal %v), want the %d as sent", len(got), err, bytes.Equal(got, body), len(body))
	}
}

// A kept body whose file fails to read (here one opened write-only)
// fails its try with ErrSpoolRead, rotor's own fault, whichever try reads
// it: neither the client's (it is not the body's error) nor, in the
// transports, the endpoint's.
func TestSpooledBodyReadFails(t *testing.T) {
	dir := t.TempDir()
	t.Cleanup(proxy.SetCreateSpool(func() (*os.File, string, error) {
		f, err := os.CreateTemp(dir, "body-")
		if err != nil {
			return nil, "", err
		}
		f.Close()
		f, err = os.OpenFile(f.Name(), os.O_WRONLY, 0)
		return f, "", err
	}))
	body := bytes.Repeat([]byte("0123456789abcdef"), proxy.MaxAhead/16*3)
	b := proxy.NewBody(io.NopCloser(bytes.NewReader(body)))
	if _, whole, _, err := b.ReadAhead(int64(len(body))); !whole || err != nil {
		t.Fatalf("not spooled whole: %v", err)
	}
	for try := range 2 {
		if _, err := io.ReadAll(b.Lend()); !errors.Is(err, proxy.ErrSpoolRead) || b.Err() != nil {
			t.Fatalf("try %d: %v (the body's error %v); want ErrSpoolRead, not the client's", try, err, b.Err())
		}
		b.Again()
	}
	b.Close()
}

// proxy and sim never import net/http: the simulator drives the same
// flights as the listeners on virtual time, with none of a server's
// machinery.
func TestNoNetHTTP(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/rotor-lb/rotor/proxy", "github.com/rotor-lb/rotor/sim").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for pkg := range strings.SplitSeq(string(out), "\n") {
		if pkg == "net/http" {
			t.Fatalf("proxy or sim imports net/http:\n%s", out)
		}
	}
}
