package h1

import (
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A head that comes a byte at a time is found whole at its last byte,
// and each of its lines is checked once: the checks cost no more than
// for a head that came in one read.
func TestScanHeadByteAtATime(t *testing.T) {
	var head strings.Builder
	head.WriteString("GET /path HTTP/1.1\r\nHost: a\r\n")
	for range 20 {
		head.WriteString("X-Some-Header: some value\r\n")
	}
	head.WriteString("\r\n")
	b := []byte(head.String())
	feed := func() (int, int) {
		next := 0
		for end := 1; end <= len(b); end++ {
			n, nx := scanHead(b[:end], next)
			next = nx
			if n != 0 {
				return n, end
			}
		}
		return 0, len(b)
	}
	if n, at := feed(); n != len(b) || at != len(b) {
		t.Fatalf("head of %d bytes found %d long at byte %d", len(b), n, at)
	}
	// A string a line checked, 22 in all, and nothing per byte.
	if allocs := testing.AllocsPerRun(10, func() { feed() }); allocs > 30 {
		t.Fatalf("%.0f allocations to scan a %d-byte head a byte at a time, want one a line", allocs, len(b))
	}
}

func TestScanHeadRefusesEarly(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     int
	}{
		{"incomplete", "GET / HTTP/1.1\r\nHost: a\r\n", 0},
		{"whole", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", 27},
		{"bad request line, head not whole", "GET /\r\nHost", -1},
		{"bad header line, head not whole", "GET / HTTP/1.1\r\nX : a\r\nHo", -1},
		{"obs-fold, head not whole", "GET / HTTP/1.1\r\nX: a\r\n b\r\n", -1},
		{"bare LF", "GET / HTTP/1.1\nHost: a\r\n\r\n", -1},
		{"empty line first", "\r\nGET / HTTP/1.1\r\n\r\n", -1},
		{"bad line in a whole head: parseHead's to refuse", "GET / HTTP/1.1\r\nX : a\r\n\r\n", 25},
	} {
		if n, _ := scanHead([]byte(tc.in), 0); n != tc.want {
			t.Errorf("%s: scanHead(%q) = %d, want %d", tc.name, tc.in, n, tc.want)
		}
	}
}

// plainTarget makes of a target what url.ParseRequestURI makes of it,
// whenever it takes the target.
func FuzzPlainTarget(f *testing.F) {
	for _, s := range []string{"/", "/a/b?c=d&e", "/a?", "/a%20b", "/a b", "/a!b", "//x/y", "/a;b=c/@:", "http://h/a", "*", "", "/?", "/a?b#c", "/a#b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		var u url.URL
		if !plainTarget(target, &u) {
			return
		}
		want, err := url.ParseRequestURI(target)
		if err != nil {
			t.Fatalf("plainTarget took %q, which ParseRequestURI refuses: %v", target, err)
		}
		if diff := cmp.Diff(*want, u); diff != "" {
			t.Errorf("%q (-ParseRequestURI +plainTarget):\n%s", target, diff)
		}
	})
}
