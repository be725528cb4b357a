package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rotor-lb/rotor/internal/testtool/browser"
)

// The admin listener's live page, in a real browser, against a running
// rotor: it shows the listeners and the pool, a drain needs the token,
// and a drained endpoint takes no more traffic.
func TestLivePageDrains(t *testing.T) {
	const token = "live-page-token-0123456789"
	a, b := newBackend(t, "a"), newBackend(t, "b")
	r := startRotor(t, fmt.Sprintf(`admin: {listen: "127.0.0.1:0", token: "${ADMIN_TOKEN}"}
listeners: [{name: web, kind: http, listen: "127.0.0.1:0", pool: app}]
pools:
  - name: app
    policy: round_robin
    endpoints: [{name: a, url: %q}, {name: b, url: %q}]
`, a.url(), b.url()), map[string]string{"ADMIN_TOKEN": token})
	for range 20 {
		if code, _ := get(t, r.url("web")); code != 200 {
			t.Fatalf("status %d", code)
		}
	}
	tab := browser.Start(t)
	eval := func(what, expr string) string { return browser.Get(tab, what, chromedp.Evaluate[string](expr)) }
	wait := func(what, expr string) { browser.Get(tab, what, chromedp.Poll[bool](expr)) }

	tab.Do("open /ui", chromedp.Navigate("http://"+r.Addr("admin").String()+"/ui"))
	wait("the pool", `document.querySelectorAll('[data-pool="app"] tbody tr').length === 2`)
	if got := eval("listeners", `document.querySelector("#listeners tbody").textContent`); got != "webhttp"+r.Addr("web").String() {
		t.Errorf("listeners shown: %q", got)
	}
	wait("both endpoints picked", `[...document.querySelectorAll("[data-share]")].every(td => +td.dataset.share > 0.4)`)

	// Without the token the drain is refused, and the page says why.
	drainB := `button[aria-label="Drain b in app"]`
	tab.Allow("status of 401 (Unauthorized) (http://" + r.Addr("admin").String() + "/admin/endpoints/app/b/drain")
	tab.Do("drain b", chromedp.Click(drainB))
	wait("the refusal", `document.getElementById("action-error").textContent.includes("needs the admin token")`)
	if eval("token box", `String(document.getElementById("token-box").open)`) != "true" {
		t.Errorf("the token box did not open after a refusal")
	}
	if r.Pools()[0].Snapshot.Get("b").State.Draining() {
		t.Fatal("b drained without the token")
	}
	tab.Do("give the token", chromedp.SendKeys("#token", token), chromedp.Click(`#token-form button`), chromedp.Click(drainB))
	wait("b draining", `document.querySelector('tr[data-endpoint="b"]').dataset.draining === "true"`)
	if !r.Pools()[0].Snapshot.Get("b").State.Draining() {
		t.Fatal("the page shows b draining, the pool does not")
	}
	before := b.count()
	for range 30 {
		if code, body := get(t, r.url("web")); code != 200 || body != "a" {
			t.Fatalf("after draining b: %d %q", code, body)
		}
	}
	if b.count() != before {
		t.Fatalf("b took %d requests while drained", b.count()-before)
	}
	// The history catches up: b's share of the recent picks falls.
	deadline := time.Now().Add(10 * time.Second)
	for eval("b's share", `document.querySelector('tr[data-endpoint="b"] [data-share]').dataset.share`) == "0.5000" {
		if time.Now().After(deadline) {
			t.Fatal("b's share of picks did not move after the drain")
		}
		time.Sleep(200 * time.Millisecond)
	}
	tab.Screenshot("web-live.png")
	tab.Do("phone width", chromedp.EmulateViewport(390, 844))
	if w := browser.Get(tab, "page width", chromedp.Evaluate[int](`document.documentElement.scrollWidth`)); w > 390 {
		t.Errorf("at 390 px the live page is %d px wide", w)
	}
	tab.Do("laptop width", chromedp.EmulateViewport(1280, 900))

	tab.Do("undrain b", chromedp.Click(`button[aria-label="Undrain b in app"]`))
	wait("b back", `document.querySelector('tr[data-endpoint="b"]').dataset.draining === "false"`)
	for range 4 {
		get(t, r.url("web"))
	}
	if b.count() == before {
		t.Fatal("b takes no traffic after the undrain")
	}
	if logs := r.logs.String(); strings.Contains(logs, token) {
		t.Fatal("the token is in the log")
	}
}
