package proxy_test

import (
	"bytes"
	"errors"
	"io"
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
		n, whole, ok, err := b.ReadAhead()
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
		if p, ok := h.Take(int64(size)); !ok || !bytes.Equal(p, body) || b.Spent() != (size > 0) {
			t.Fatalf("%d bytes: took %d (%v), spent %v", size, len(p), ok, b.Spent())
		}
		if n, err := b.Lend().Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("%d bytes: a read after the take: %d, %v; want the end", size, n, err)
		}
	}

	body := bytes.Repeat([]byte("0123456789abcdef"), proxy.MaxAhead/16*3+1)
	b := proxy.NewBody(io.NopCloser(iotest.OneByteReader(bytes.NewReader(body))))
	n, whole, ok, err := b.ReadAhead()
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
	if _, whole, ok, err := b.ReadAhead(); whole || !ok || !errors.Is(err, cut) || !errors.Is(b.Err(), cut) {
		t.Fatalf("a cut body: whole %v, ok %v, %v (kept %v); want its error, kept", whole, ok, err, b.Err())
	}

	t.Cleanup(proxy.SetAheadBudget(proxy.MaxAhead))
	b = proxy.NewBody(io.NopCloser(strings.NewReader("hello")))
	if n, whole, ok, err := b.ReadAhead(); n != 0 || whole || ok || err != nil || b.Len() != 0 {
		t.Fatalf("over the budget: %d, whole %v, ok %v, %v, %d read; want nothing read", n, whole, ok, err, b.Len())
	}
	if got, _ := io.ReadAll(b.Lend()); string(got) != "hello" {
		t.Fatalf("the body after a read ahead refused: %q", got)
	}
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
