package h1

import (
	"net/http"
	"net/url"
	"slices"
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

// ctlFree, eight bytes at a time, finds every control byte a byte-by-byte
// test finds, at every place in a word and after bytes of every kind
// (a high byte must not hide a low one by its borrow).
func TestCtlFreeAgainstBytes(t *testing.T) {
	slow := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if s[i] < ' ' || s[i] == 0x7f {
				return false
			}
		}
		return true
	}
	fill := []byte{' ', 'a', 0x7e, 0x80, 0xa0, 0xff}
	for n := 0; n <= 19; n++ {
		for at := 0; at < n; at++ {
			for c := range 256 {
				for _, f := range fill {
					b := make([]byte, 0, n)
					for range n {
						b = append(b, f)
					}
					b[at] = byte(c)
					if got, want := ctlFree(string(b)), slow(string(b)); got != want {
						t.Fatalf("ctlFree(%q) = %v, want %v", b, got, want)
					}
				}
			}
		}
	}
}

// A name in any case comes out as http.CanonicalHeaderKey makes it, the
// common ones without an allocation.
func TestCanonicalName(t *testing.T) {
	for _, name := range []string{
		"user-agent", "USER-AGENT", "x-forwarded-for", "accept", "a", "x-very-long-name-that-is-past-the-buffer",
		"x-", "-x", "x--y", "content-TYPE", "sec-ch-ua", "x_y-z",
	} {
		if got, _, _ := field(name + ": v"); got != http.CanonicalHeaderKey(name) {
			t.Errorf("field named %q %q, want %q", name, got, http.CanonicalHeaderKey(name))
		}
	}
	for n, c := range commonFiled() {
		if c != http.CanonicalHeaderKey(n) || n != c && n != strings.ToLower(c) {
			t.Errorf("common name %q is filed as %q", n, c)
		}
		if name, _, ok := field(n + ": v"); !ok || name != c {
			t.Errorf("field(%q) named %q, %v; want %q", n+": v", name, ok, c)
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { field("user-agent: v") }); allocs != 0 {
		t.Errorf("%.0f allocations to make a common name canonical, want 0", allocs)
	}
}

// commonFiled is every form of a common name the readers file, by
// itself and in lower case, to its canonical form.
func commonFiled() map[string]string {
	m := map[string]string{}
	for _, n := range commonNames {
		m[n], m[strings.ToLower(n)] = n, n
	}
	return m
}

// The common names' table files each common name by both of its forms,
// to its canonical form cut from tokenText, and nothing else: not a name
// that shares its slot (one byte changed, the bytes its key is made of
// among them), nor another case, nor a name too short for a key.
func TestCommonNameTable(t *testing.T) {
	filed := commonFiled()
	for form, c := range filed {
		if got, ok := commonName(form); !ok || got != c || !within(got, tokenText) {
			t.Errorf("commonName(%q) = %q, %v; want %q cut from tokenText", form, got, ok, c)
		}
		others := []string{strings.ToUpper(form), form + "s", "x" + form}
		for i := range len(form) {
			b := []byte(form)
			b[i] ^= 1
			others = append(others, string(b))
		}
		for _, o := range others {
			if _, common := filed[o]; common {
				continue
			}
			if got, ok := commonName(o); ok {
				t.Errorf("commonName(%q) = %q, want none", o, got)
			}
		}
	}
	for _, n := range []string{"", "A", "t", "-"} {
		if got, ok := commonName(n); ok {
			t.Errorf("commonName(%q) = %q, want none", n, got)
		}
	}
}

// field takes a name as net/http does: canonical or made so, and refuses
// one that is not a token.
func TestFieldNames(t *testing.T) {
	for _, tc := range []struct{ line, name string }{
		{"Host: a", "Host"},
		{"host: a", "Host"},
		{"X-Forwarded-For: a", "X-Forwarded-For"},
		{"X-forwarded-For: a", "X-Forwarded-For"},
		{"x-Forwarded-for: a", "X-Forwarded-For"},
		{"ETag: a", "Etag"},
		{"A-B-C: a", "A-B-C"},
		{"a-b-c: a", "A-B-C"},
		{"X-1a: a", "X-1a"},
		{"X-1A: a", "X-1a"},
		{"X : a", ""},
		{": a", ""},
		{"X\x7fY: a", ""},
		{"X\x80Y: a", ""},
		{"noColon", ""},
	} {
		name, _, ok := field(tc.line)
		if ok != (tc.name != "") || name != tc.name {
			t.Errorf("field(%q) = %q, %v; want %q", tc.line, name, ok, tc.name)
		}
	}
}

// sameHeadSize checks that a head the short way takes is the size
// HeadSize counts of its request, by which the short way holds heads to
// MaxHeaderBytes and a handler holds net/http's.
func sameHeadSize(t *testing.T, raw []byte) {
	t.Helper()
	if r, _, size := shortHead(raw); r != nil && size != HeadSize(r) {
		t.Errorf("for %q parseHead counted %d bytes, HeadSize %d", raw, size, HeadSize(r))
	}
}

// shortHead is the request the short way reads from the head raw begins
// with, the block it was read into and its size as parseHead counts it;
// a nil request when there is no whole head or the short way does not
// take it.
func shortHead(raw []byte) (*http.Request, *headBlock, int) {
	n, _ := scanHead(raw, 0)
	if n <= 0 {
		return nil, nil, 0
	}
	a := new(headBlock)
	r, _, size := parseHead(raw[:n], &http.Request{}, a)
	return r, a, size
}

// The short way counts a head as HeadSize does: the request line, Host,
// every field once whatever its spacing, and the Cache-Control a Pragma
// adds.
func TestHeadSizeCounted(t *testing.T) {
	for _, raw := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /a?b=c HTTP/1.0\r\nhost:   a.test  \r\nX-A:1\r\nx-a: 2\r\nUser-Agent: curl\r\n\r\n",
		"GET http://b.test/x HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nPragma: no-cache\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nPragma: no-cache\r\nCache-Control: max-age=0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nConnection: keep-alive\r\n\r\n",
	} {
		if r, _, _ := shortHead([]byte(raw)); r == nil {
			t.Fatalf("%q not taken", raw)
		}
		sameHeadSize(t, []byte(raw))
	}
}

// Any head the short way takes is counted as HeadSize counts it.
func FuzzHeadSize(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\nPragma: no-cache\r\nx-a:  1 \r\n\r\n"))
	f.Add([]byte("GET http://b/ HTTP/1.0\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi"))
	f.Fuzz(sameHeadSize)
}

// sortFields orders fields as slices.Sort orders their names, whatever
// the names: prefixes of each other, sharing their first eight bytes,
// holding zeros or bytes past 0x7f, and over the insertion sort's twelve.
func TestSortFieldsAsStrings(t *testing.T) {
	names := []string{"", "A", "A\x00", "A\x00B", "AB", "Accept", "Accept-Encoding", "Content-Length", "Content-Type",
		"Content-", "Content", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded", "X-Real-Ip",
		"\xff", "\xff\xff\xff\xff\xff\xff\xff\xff", "\xff\xff\xff\xff\xff\xff\xff\xfe", "a", "date", "Date", "zzzzzzzzz"}
	rng := uint64(1)
	for round := range 200 {
		n := 2 + round%len(names)
		var fields []headerField
		var want []string
		for i := range n {
			rng = rng*6364136223846793005 + 1442695040888963407
			name := names[(rng>>33)%uint64(len(names))]
			if i%5 == 4 {
				name += names[(rng>>40)%uint64(len(names))]
			}
			fields = append(fields, headerField{name: name})
			want = append(want, name)
		}
		slices.Sort(want)
		sortFields(fields)
		got := make([]string, len(fields))
		for i, f := range fields {
			got[i] = f.name
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Fatalf("round %d, %d fields (-sorted as strings +sortFields):\n%s", round, n, d)
		}
	}
}

// A block emptied keeps its values' array for the next head only when
// nothing holds the values any longer (HeaderDone): else the values a
// header sent on shares stay as they were.
func TestHeadBlockValues(t *testing.T) {
	a := new(headBlock)
	read := func(v string) []string {
		t.Helper()
		r, _, _ := parseHead([]byte("GET / HTTP/1.1\r\nHost: a\r\nX-A: "+v+"\r\n\r\n"), &http.Request{}, a)
		if r == nil {
			t.Fatalf("head with X-A %q not taken", v)
		}
		return r.Header["X-A"]
	}
	// Emptied as putHeadBlock empties it, not given to the pool: a block
	// in it twice would be two requests' at once.
	held := read("1")
	emptyHeadBlock(a, false)
	done := read("2")
	emptyHeadBlock(a, true)
	read("3")
	if held[0] != "1" {
		t.Errorf("values held past their request: %q after later heads, want [1]", held)
	}
	if done[0] != "3" {
		t.Errorf("values given back: %q after the next head, want its [3] (the array read into again)", done)
	}
}

// Heads copied to shared chunks stay as they were while later heads fill
// the chunks, and a small head costs a chunk's allocation now and then,
// not one of its own; a large head gets a string of its own.
func TestHeadTextChunks(t *testing.T) {
	buf := make([]byte, maxChunkedHead)
	var got, want []string
	for i := range 3 * headChunkSize / 100 {
		n := 60 + i%80
		for j := range buf[:n] {
			buf[j] = byte('a' + (i+j)%26)
		}
		got = append(got, headText(buf[:n]))
		want = append(want, string(buf[:n]))
		clear(buf) // the caller's buffer is its own again
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("head %d changed once later heads were copied: %q, want %q", i, got[i], want[i])
		}
	}

	small, large := buf[:200], make([]byte, maxChunkedHead+1)
	if n := testing.AllocsPerRun(200, func() { _ = headText(small) }); n > 0.2 {
		t.Errorf("%v allocations a %d-byte head, want a chunk's now and then", n, len(small))
	}
	if n := testing.AllocsPerRun(100, func() { _ = headText(large) }); n != 1 {
		t.Errorf("%v allocations a %d-byte head, want its own", n, len(large))
	}
}

// sameOutgoingInPlace checks, for a head the short way takes, that
// OutgoingInPlace makes of its request's header what Outgoing makes of
// it with ForwardingFields dropped, when it says it did; and that it
// leaves it as it was otherwise, which it says for every head with a
// field Outgoing leaves out.
func sameOutgoingInPlace(t *testing.T, raw []byte) {
	t.Helper()
	r, a, _ := shortHead(raw)
	if r == nil {
		return
	}
	want := Outgoing(r.Header, ForwardingFields, nil)
	before := r.Header.Clone()
	dropped := false
	for name := range r.Header {
		dropped = dropped || leftOut(name)
	}
	if !OutgoingInPlace(r.Header, &a.read) {
		if !dropped {
			t.Errorf("%q: not sent in place, with no field Outgoing leaves out", raw)
		}
		if d := cmp.Diff(before, r.Header); d != "" {
			t.Errorf("%q: refused, and changed (-before +after):\n%s", raw, d)
		}
		return
	}
	if dropped {
		t.Errorf("%q: sent in place with a field Outgoing leaves out", raw)
	}
	if d := cmp.Diff(want, r.Header); d != "" {
		t.Errorf("%q: in place (-Outgoing +in place):\n%s", raw, d)
	}
	if OutgoingInPlace(r.Header, nil) {
		t.Errorf("sent in place with no head known")
	}
}

// A request goes on in its own header map as Outgoing would have made
// it, and only when its head had none of the fields Outgoing leaves out:
// hop-by-hop ones (those Connection names among them, which come only
// with a Connection) and the forwarding ones, by any case of their names.
func TestOutgoingInPlace(t *testing.T) {
	for _, raw := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nUser-Agent: curl\r\nAccept: */*\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nuser-agent: h2load\r\nX-Real-Ip: 10.0.0.1\r\nX-A: 1\r\nx-a: 2\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
		"GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nConnection: X-A\r\nX-A: 1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nKeep-Alive: 5\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nte: trailers\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nProxy-Authorization: Basic eDp5\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nProxy-Connection: close\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nForwarded: for=1.2.3.4\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nx-forwarded-for: 1.2.3.4\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-Host: b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX-FORWARDED-PROTO: https\r\n\r\n",
	} {
		if r, _, _ := shortHead([]byte(raw)); r == nil {
			t.Fatalf("%q not taken", raw)
		}
		sameOutgoingInPlace(t, []byte(raw))
	}
	// Each field Outgoing leaves out whatever else comes is refused.
	for _, name := range append([]string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer"}, ForwardingFields...) {
		a := new(headBlock)
		r, _, _ := parseHead([]byte("GET / HTTP/1.1\r\nHost: a\r\n"+name+": x\r\n\r\n"), &http.Request{}, a)
		if r == nil {
			t.Fatalf("%s: not taken", name)
		}
		if OutgoingInPlace(r.Header, &a.read) {
			t.Errorf("%s: sent in place", name)
		}
	}
}

// Any head the short way takes goes on in place as Outgoing would have
// made it, or is refused and left as it was.
func FuzzOutgoingInPlace(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\nUser-Agent: x\r\n\r\n"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\nConnection: X-A\r\nX-A: 1\r\n\r\n"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\nx-forwarded-for: 1\r\nX-Real-Ip: 2\r\n\r\n"))
	f.Fuzz(sameOutgoingInPlace)
}
