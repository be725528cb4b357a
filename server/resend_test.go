package server_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/internal/rawio"
)

// secondTime answers each request (told apart by its X-Id) 503 the
// first time it comes and 200 the second, the body it got in the answer
// (its length and digest) and in its record, whichever endpoint it
// reaches.
type secondTime struct {
	mu   sync.Mutex
	got  map[string][]string // X-Id: each try's "length digest", in order
	cuts int                 // tries whose body failed to read
}

func (s *secondTime) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("X-Id")
	if r.Header.Get("X-Early") != "" && len(s.tries(id)) == 0 {
		// Answered before any of the body is read: the try that sent it
		// may still be sending when the next one begins.
		s.mu.Lock()
		s.got[id] = append(s.got[id], "not read")
		s.mu.Unlock()
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	body, err := io.ReadAll(r.Body)
	s.mu.Lock()
	if err != nil {
		s.cuts++
	}
	seen := fmt.Sprintf("%d %x", len(body), sha256.Sum256(body))
	if r.ContentLength >= 0 && r.ContentLength != int64(len(body)) {
		seen += " (framed as " + strconv.FormatInt(r.ContentLength, 10) + ")"
	}
	s.got[id] = append(s.got[id], seen)
	tries := len(s.got[id])
	s.mu.Unlock()
	if tries == 1 {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	io.WriteString(w, seen)
}

func (s *secondTime) tries(id string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got[id]
}

// A PUT whose first endpoint answers 503 goes again to the other with its
// body whole, as nginx resends a body it buffered: a body that came whole
// with its head, one read ahead (chunked, or HTTP/2's) into memory or into
// its file, over HTTP/1.1, HTTP/2 without TLS and the forward listener.
// A POST is not sent again (not idempotent), nor a body over 64 KiB that
// came with its length, which goes on as it comes and is not kept: the
// client gets the 503.
func TestIdempotentBodyGoesAgain(t *testing.T) {
	target := &secondTime{got: map[string][]string{}}
	a, b := httptest.NewServer(target), httptest.NewServer(target)
	t.Cleanup(a.Close)
	t.Cleanup(b.Close)
	r := startRotor(t, fmt.Sprintf(`admin: {listen: "off"}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app}
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes, allow_targets: [127.0.0.0/8]}
pools:
  - {name: app, policy: round_robin, retries: {attempts: 2, budget: 1}, endpoints: [{name: a, url: %q}, {name: b, url: %q}]}
  - {name: routes, policy: round_robin, retries: {attempts: 2, budget: 1}, endpoints: [{name: one, url: "direct://"}, {name: two, url: "direct://"}]}
`, a.URL, b.URL), nil)

	var h2 http.Protocols
	h2.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: &h2}, Timeout: 10 * time.Second}
	pu, _ := url.Parse("http://" + r.Addr("out").String())
	viaForward := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}, Timeout: 10 * time.Second}
	t.Cleanup(h2c.CloseIdleConnections)
	t.Cleanup(viaForward.CloseIdleConnections)

	rng := rand.New(rand.NewPCG(3, 4))
	data := make([]byte, 300<<10)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	small := data[:1000]
	for _, tc := range []struct {
		name   string
		client *http.Client
		base   string // the URL the client asks for
		method string
		body   []byte
		length bool // sent with its length, not chunked
		again  bool
		early  bool // the first endpoint answers before it reads the body
		expect bool // it asks for 100 Continue, and sends its body with its head (Go's client does without an ExpectContinueTimeout)
	}{
		{"in hand", client, r.url("web"), http.MethodPut, small, true, true, false, false},
		{"chunked, read ahead", client, r.url("web"), http.MethodPut, small, false, true, false, false},
		{"chunked, into a file", client, r.url("web"), http.MethodPut, data, false, true, false, false},
		{"chunked, into a file, answered before it is read", client, r.url("web"), http.MethodPut, data, false, true, true, false},
		{"in hand, answered before it is read", client, r.url("web"), http.MethodPut, small, true, true, true, false},
		// (Not where net/http's server reads requests, -tags norawio: a
		// body of up to 64 KiB asking for 100 Continue is left for the
		// backend to ask for, and goes on as it comes.)
		{"in hand, asking for 100 Continue", client, r.url("web"), http.MethodPut, small, true, rawio.Supported, false, true},
		{"chunked in hand, asking for 100 Continue", client, r.url("web"), http.MethodPut, small, false, true, false, true},
		{"HTTP/2, with its length", h2c, r.url("web"), http.MethodPut, small, true, true, false, false},
		{"HTTP/2, without", h2c, r.url("web"), http.MethodPut, data, false, true, false, false},
		{"forward listener", viaForward, b.URL, http.MethodPut, small, true, true, false, false},
		{"forward listener, chunked into a file", viaForward, b.URL, http.MethodPut, data, false, true, false, false},
		{"POST", client, r.url("web"), http.MethodPost, small, true, false, false, false},
		{"over 64 KiB with its length", client, r.url("web"), http.MethodPut, data, true, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader = bytes.NewReader(tc.body)
			if !tc.length {
				body = io.MultiReader(body) // no length: chunked, or HTTP/2 without content-length
			}
			req, _ := http.NewRequest(tc.method, tc.base+"/put", body)
			req.Header.Set("X-Id", tc.name)
			if tc.early {
				req.Header.Set("X-Early", "1")
			}
			if tc.expect {
				req.Header.Set("Expect", "100-continue")
			}
			resp, err := tc.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			answer, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := fmt.Sprintf("%d %x", len(tc.body), sha256.Sum256(tc.body))
			tries := target.tries(tc.name)
			if !tc.again {
				if resp.StatusCode != http.StatusServiceUnavailable || len(tries) != 1 || tries[0] != want {
					t.Fatalf("%d after tries %q; want the 503, one try with the whole body", resp.StatusCode, tries)
				}
				return
			}
			if resp.StatusCode != http.StatusOK || string(answer) != want {
				t.Fatalf("%d %q; want 200 and the whole body (%s)", resp.StatusCode, answer, want)
			}
			first := want
			if tc.early {
				first = "not read"
			}
			if len(tries) != 2 || tries[0] != first || tries[1] != want {
				t.Fatalf("tries %q; want two, the second (and the first, read) with the whole body", tries)
			}
			// The file a body was kept in is let go with the request.
			eventually(t, 2*time.Second, "the body's file closed", func() bool { return bodyFiles(t) == 0 })
		})
	}
	if target.cuts != 0 {
		t.Errorf("%d tries read a body cut short", target.cuts)
	}
}

// bodyFiles counts the temporary files of bodies open in this process
// (rotor's, in the test's): on Linux, where /proc tells; 0 elsewhere.
func bodyFiles(t *testing.T) int {
	if runtime.GOOS != "linux" {
		return 0
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if to, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.Contains(to, "rotor-body-") {
			n++
		}
	}
	return n
}
