// Package testtool finds the outside programs integration tests run against
// (python3, a C++ compiler, redis-server, tinyproxy, ...).
//
// On a laptop that lacks one, the test is skipped, loudly. Under CI=true a
// missing tool fails the test: CI installs everything the suite needs, so a
// skip there would hide a test that never ran.
package testtool

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rotor-lb/rotor/internal/rawio"
)

// Require returns the path of the first of names found on PATH.
func Require(t testing.TB, names ...string) string {
	t.Helper()
	for _, name := range names {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and none of %v is installed: .ci/run must install it", names)
	}
	t.Skipf("SKIPPED: none of %v is installed; this test runs in CI", names)
	return ""
}

// NeedsRaw skips a test of what only raw socket access (rawio) gives: a
// build without it (Windows, or -tags norawio, as the suite runs the
// proxies once more) hands the short ways over to net/http.
func NeedsRaw(t testing.TB) {
	t.Helper()
	if !rawio.Supported {
		t.Skip("tests raw socket access, which this build has not (rawio.Supported)")
	}
}

// Eventually polls cond every 5 ms until it holds, failing the test after
// within, and returns how long it took.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// VerifyNoLeaks runs a package's tests (TestMain) and fails it if any
// goroutine outlives them, but for the ones an http.Transport keeps for
// its idle connections (its reader and writer, the reader waiting in the
// poller): clients whose pools the tests leave to be collected.
func VerifyNoLeaks(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}
