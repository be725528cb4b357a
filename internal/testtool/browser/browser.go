// Package browser drives Debian's Chromium, headless, from Go tests with
// chromedp, and fails the test on anything the page reports as an error:
// a console error, an uncaught exception, a failed load or a refused
// script.
package browser

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rotor-lb/rotor/internal/testtool"
)

// Tab is one browser tab of a test.
type Tab struct {
	t   testing.TB
	ctx context.Context

	mu       sync.Mutex
	problems []string
	allowed  []string
}

// Start opens Chromium headless with a tab of its own; both close when the
// test ends, and the test fails if the page reported an error.
func Start(t testing.TB) *Tab {
	t.Helper()
	path := testtool.Require(t, "chromium", "chromium-browser", "google-chrome")
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.DisableGPU,
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-quic", true),
		chromedp.WindowSize(1280, 900),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	tab := &Tab{t: t, ctx: ctx}
	// Console starts the browser and subscribes before any page loads.
	messages := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				tab.problem("%s (%s:%d)", m.String(), m.URL, m.Line)
			}
		}
	}()
	if err := chromedp.Do(ctx); err != nil {
		cancelCtx()
		cancelAlloc()
		<-done
		t.Fatalf("starting chromium: %v", err)
	}
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc()
		<-done
		for _, p := range tab.Problems() {
			t.Errorf("the page reported: %s", p)
		}
	})
	return tab
}

func (tab *Tab) problem(format string, args ...any) {
	tab.mu.Lock()
	defer tab.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	for _, a := range tab.allowed {
		if strings.Contains(msg, a) {
			return
		}
	}
	tab.problems = append(tab.problems, msg)
}

// Allow lets reports containing text pass: the browser logs a refused
// request the test makes on purpose (a 401, say) as an error.
func (tab *Tab) Allow(text string) {
	tab.mu.Lock()
	defer tab.mu.Unlock()
	tab.allowed = append(tab.allowed, text)
}

// Problems returns what the page reported as errors so far.
func (tab *Tab) Problems() []string {
	tab.mu.Lock()
	defer tab.mu.Unlock()
	return append([]string(nil), tab.problems...)
}

// Do runs steps in the tab, failing the test if any fails or they take
// over 30 seconds; what names the step in the failure.
func (tab *Tab) Do(what string, steps ...chromedp.Action[chromedp.Void]) {
	tab.t.Helper()
	Get(tab, what, chromedp.Steps(steps...))
}

// Get runs one action in the tab and returns its value, failing the test
// as Do does.
func Get[T any](tab *Tab, what string, a chromedp.Action[T]) T {
	tab.t.Helper()
	ctx, cancel := context.WithTimeout(tab.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		tab.t.Fatalf("%s: %v (page problems: %v)", what, err, tab.Problems())
	}
	return v
}

// Screenshot saves the whole page as a PNG when the ROTOR_SCREENSHOTS
// folder is set (bench/screenshots.sh sets it to docs/img).
func (tab *Tab) Screenshot(name string) {
	tab.t.Helper()
	dir := os.Getenv("ROTOR_SCREENSHOTS")
	if dir == "" {
		return
	}
	png := Get(tab, "screenshot "+name, chromedp.FullScreenshot(100))
	if err := os.WriteFile(dir+"/"+name, png, 0o644); err != nil {
		tab.t.Fatal(err)
	}
}
