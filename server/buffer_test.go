package server_test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rotor-lb/rotor/internal/testtool"
)

// git pushes a pack over its http.postBuffer (1 MiB) chunked, and
// git-http-backend behind a CGI server that takes no chunked request (Go's
// net/http/cgi, as Apache's mod_cgi) reads none of it: direct, the push
// fails. Through rotor, which reads such a body ahead into a temporary
// file and sends it on with its length (as nginx buffers it), the push of
// a 3 MB commit lands whole.
func TestGitPushOfALargePack(t *testing.T) {
	git := testtool.Require(t, "git")
	run := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command(git, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "HOME="+dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	root, work := t.TempDir(), t.TempDir()
	backend := filepath.Join(run(work, "--exec-path"), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		testtool.Require(t, "git-http-backend") // git without its http backend
	}
	run(root, "init", "-q", "--bare", "r.git")
	run(filepath.Join(root, "r.git"), "config", "http.receivepack", "true")
	be := httptest.NewServer(&cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}})
	t.Cleanup(be.Close)
	r := startRotor(t, fmt.Sprintf(`admin: {listen: "off"}
listeners: [{name: web, kind: http, listen: "127.0.0.1:0", pool: git}]
pools: [{name: git, endpoints: [{name: a, url: %q}], timeouts: {try: 1m, total: 1m}}]
`, be.URL), nil)

	run(work, "init", "-q")
	run(work, "config", "user.email", "t@example.test")
	run(work, "config", "user.name", "t")
	blob := make([]byte, 3<<20) // random: the pack does not compress under 1 MiB
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range blob {
		blob[i] = byte(rng.Uint32())
	}
	if err := os.WriteFile(filepath.Join(work, "big.bin"), blob, 0o600); err != nil {
		t.Fatal(err)
	}
	run(work, "add", "big.bin")
	run(work, "commit", "-q", "-m", "a large file")
	head := run(work, "rev-parse", "HEAD")
	url := r.url("web") + "/r.git"
	run(work, "push", "-q", url, "HEAD:refs/heads/main")
	if got := run(work, "ls-remote", url, "refs/heads/main"); !strings.HasPrefix(got, head) {
		t.Fatalf("after the push the remote has %q, want %s", got, head)
	}
	if got := run(root, "--git-dir", filepath.Join(root, "r.git"), "cat-file", "-s", head+":big.bin"); got != fmt.Sprint(len(blob)) {
		t.Fatalf("the pushed file is %s bytes, want %d", got, len(blob))
	}
}

// Where $TMPDIR cannot take a file, rotor says so as it starts, and a
// body past 64 KiB goes on chunked, whole, as it did before it could be
// buffered.
func TestRequestBufferWithoutATempDir(t *testing.T) {
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing"))
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%d %d %v", r.ContentLength, len(b), err)
	}))
	t.Cleanup(be.Close)
	r := startRotor(t, fmt.Sprintf(`admin: {listen: "off"}
listeners: [{name: web, kind: http, listen: "127.0.0.1:0", pool: app}]
pools: [{name: app, endpoints: [{name: a, url: %q}]}]
`, be.URL), nil)
	if !strings.Contains(r.logs.String(), "cannot be buffered to a file") {
		t.Fatalf("no warning of the buffer's directory:\n%s", r.logs.String())
	}
	body := strings.Repeat("x", 100_000)
	req, _ := http.NewRequest(http.MethodPost, r.url("web"), io.MultiReader(strings.NewReader(body))) // no length: chunked
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := "-1 100000 <nil>"; string(got) != want {
		t.Fatalf("%d %q, want %q", resp.StatusCode, got, want)
	}
}
