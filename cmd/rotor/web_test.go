package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/rotor-lb/rotor/internal/testtool/browser"
	"github.com/rotor-lb/rotor/sim"
)

// rotorOut runs a rotor command line in this process and returns what it
// printed, failing the test on an error.
func rotorOut(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(args, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("rotor %s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
	}
	return out.String()
}

// movesJSON is `rotor moves --json`'s one row for these settings.
func movesJSON(t *testing.T, args ...string) movesRow {
	t.Helper()
	var rows []movesRow
	if err := json.Unmarshal([]byte(rotorOut(t, append([]string{"moves", "--json"}, args...)...)), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("rotor moves %v: %v (%d rows)", args, err, len(rows))
	}
	return rows[0]
}

// js evaluates an expression in the page.
func js[T any](tab *browser.Tab, what, expr string) T {
	return browser.Get(tab, what, chromedp.Evaluate[T](expr))
}

// waitJS waits until an expression is true in the page.
func waitJS(tab *browser.Tab, what, expr string) {
	browser.Get(tab, what, chromedp.Poll[bool](expr))
}

// checkStrips checks that every strip on the page shows what rotor moves
// prints for the same change.
func checkStrips(t *testing.T, tab *browser.Tab, vnodes int, from, to string) {
	t.Helper()
	type strip struct {
		Algo, Moved, Fraction, Shown string
	}
	strips := js[[]strip](tab, "read the strips", `[...document.querySelectorAll(".strip")].map(s => ({
		Algo: s.dataset.algo, Moved: s.dataset.moved, Fraction: s.dataset.fraction,
		Shown: s.querySelector(".moved-count").textContent + " " + s.querySelector(".moved-pct").textContent}))`)
	if len(strips) != 2 || strips[1].Algo != "modn" {
		t.Fatalf("strips %+v: want the algorithm's and hash %% N's", strips)
	}
	for _, s := range strips {
		args := []string{"--algo", s.Algo, "--from", from, "--to", to, "--keys", "10000"}
		if s.Algo == "ring" || s.Algo == "bounded" {
			args = append(args, "--vnodes", strconv.Itoa(vnodes))
		}
		want := movesJSON(t, args...)
		shown := fmt.Sprintf("%s %.1f%%", commaInt(want.Moved), 100*want.Fraction)
		if s.Moved != strconv.Itoa(want.Moved) || s.Shown != shown {
			t.Errorf("%s %s → %s at %d vnodes: the page shows %q (%s moved), rotor moves says %q", s.Algo, from, to, vnodes, s.Shown, s.Moved, shown)
		}
	}
}

func commaInt(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// The lesson page, in a real browser: what it shows after each thing a
// reader does is what rotor's commands print for the same settings.
func TestWebLessonPage(t *testing.T) {
	srv := httptest.NewServer(newWebHandler())
	defer srv.Close()
	tab := browser.Start(t)
	tab.Do("open the page", chromedp.Navigate(srv.URL+"/"))
	waitJS(tab, "the ring is drawn", `document.body.dataset.ready === "1" && document.querySelectorAll("#owned li").length === 3`)

	// The slider, moved with the keyboard: 1 → 10 virtual nodes.
	tab.Do("focus the slider", chromedp.Focus("#vnodes"))
	for range 9 {
		tab.Do("press →", chromedp.KeyEvent(kb.ArrowRight))
	}
	waitJS(tab, "redrawn at 10 vnodes", `document.querySelectorAll("#clock .points line").length === 30`)
	if got := js[string](tab, "vnodes shown", `document.getElementById("vnodes-out").textContent`); got != "10" {
		t.Fatalf("the slider shows %q, want 10", got)
	}
	// The bars are the keys each server owns of 10,000.
	owned := js[[]int](tab, "owned", `[...document.querySelectorAll("#owned li")].map(li => +li.dataset.keys)`)
	if len(owned) != 3 || owned[0]+owned[1]+owned[2] != 10000 {
		t.Fatalf("keys owned %v, want three bars summing to 10000", owned)
	}

	tab.Do("add a server", chromedp.Click("#add"))
	waitJS(tab, "the strips", `document.querySelectorAll(".strip").length === 2 && document.querySelectorAll("#owned li").length === 4`)
	checkStrips(t, tab, 10, "s0,s1,s2", "s0,s1,s2,s3")

	tab.Do("remove s1", chromedp.Click(`button[aria-label="Remove server s1"]`))
	waitJS(tab, "s1 gone", `document.querySelectorAll("#owned li").length === 3 && document.querySelector(".strip h3").textContent !== ""
		&& document.querySelector("#strips .caption").textContent.includes("→ s0, s2, s3")`)
	checkStrips(t, tab, 10, "s0,s1,s2,s3", "s0,s2,s3")

	// More points: the same change measured again.
	tab.Do("slider to 40", chromedp.Evaluate[chromedp.Void](`(() => { const s = document.getElementById("vnodes"); s.value = "40"; s.dispatchEvent(new Event("input")); })()`))
	waitJS(tab, "redrawn at 40 vnodes", `document.querySelectorAll("#clock .points line").length === 120`)
	checkStrips(t, tab, 40, "s0,s1,s2,s3", "s0,s2,s3")

	// The lookup box: the owner is rotor place's, the walk ends on it.
	tab.Do("look up a key", chromedp.SetValue("#key", "cart:7"), chromedp.Click("#lookup button"))
	waitJS(tab, "the walk", `document.querySelector("#owner") !== null && document.querySelector("#walk .cmd").textContent.includes("cart:7")`)
	owner := js[string](tab, "owner", `document.getElementById("owner").textContent`)
	want := strings.TrimSpace(strings.Split(rotorOut(t, "place", "--algo", "ring", "--vnodes", "40", "--nodes", "s0,s2,s3", "cart:7"), "\t")[1])
	if owner != want {
		t.Fatalf("the page says cart:7 belongs to %q, rotor place says %q", owner, want)
	}
	if n := js[int](tab, "walk marks", `document.querySelectorAll("#clock .walkmark path").length`); n != 1 {
		t.Errorf("the clockwise walk is not drawn on the ring (%d paths)", n)
	}

	// Another algorithm: Maglev's strips and owner are rotor's too.
	tab.Do("choose Maglev", chromedp.SetValue("#algo", "maglev"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("algo").dispatchEvent(new Event("change"))`))
	waitJS(tab, "maglev drawn", `document.querySelector(".strip").dataset.algo === "maglev" && document.querySelector("#walk .cmd").textContent.includes("maglev")`)
	checkStrips(t, tab, 40, "s0,s1,s2,s3", "s0,s2,s3")
	owner = js[string](tab, "maglev owner", `document.getElementById("owner").textContent`)
	want = strings.TrimSpace(strings.Split(rotorOut(t, "place", "--algo", "maglev", "--nodes", "s0,s2,s3", "cart:7"), "\t")[1])
	if owner != want {
		t.Fatalf("maglev: the page says %q, rotor place says %q", owner, want)
	}

	// The balancing cards: the page ran once on load; tick server 0 is
	// 3x slower and run again.
	waitJS(tab, "the first run", `document.getElementById("cards").dataset.run === "1"`)
	tab.Do("tick slow, run", chromedp.Click("#slow"), chromedp.Click("#run"))
	waitJS(tab, "the second run", `document.getElementById("cards").dataset.run === "2"`)
	type card struct{ Policy, MeanNS, Shown, Command string }
	cards := js[[]card](tab, "cards", `[...document.querySelectorAll(".card")].map(c => ({Policy: c.dataset.policy,
		MeanNS: c.dataset.meanNs, Shown: c.querySelector(".avg-ms").textContent, Command: c.querySelector(".cmd").textContent}))`)
	if len(cards) != 13 {
		t.Fatalf("%d cards, want one per policy (13)", len(cards))
	}
	checked := 0
	for _, c := range cards {
		if c.Policy != "round_robin" && c.Policy != "p2c" {
			continue
		}
		checked++
		args := strings.Fields(strings.TrimPrefix(c.Command, "rotor "))
		if !strings.Contains(c.Command, "--slow 0=3") {
			t.Fatalf("%s: the card's command %q does not say server 0 is slower", c.Policy, c.Command)
		}
		var rep sim.BalanceReport
		if err := json.Unmarshal([]byte(rotorOut(t, args...)), &rep); err != nil || len(rep.Results) != 1 {
			t.Fatalf("%s: %v", c.Command, err)
		}
		r := rep.Results[0]
		if c.MeanNS != strconv.FormatInt(int64(r.Mean), 10) || c.Shown != ms(r.Mean) {
			t.Errorf("%s: the card shows %s ms (%s ns), %s gives %s ms (%d ns)", c.Policy, c.Shown, c.MeanNS, c.Command, ms(r.Mean), r.Mean)
		}
	}
	if checked != 2 {
		t.Fatalf("round_robin and p2c cards not found: %+v", cards)
	}
	tab.Do("back to the ring", chromedp.SetValue("#algo", "ring"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("algo").dispatchEvent(new Event("change"))`))
	waitJS(tab, "ring drawn", `document.querySelector(".strip").dataset.algo === "ring" && document.querySelector("#walk .cmd").textContent.includes("--algo ring")`)
	checkStrips(t, tab, 40, "s0,s1,s2,s3", "s0,s2,s3")
	tab.Screenshot("web-lesson.png")

	// A phone: nothing wider than the screen.
	tab.Do("phone width", chromedp.EmulateViewport(390, 844))
	if w := js[int](tab, "page width", `document.documentElement.scrollWidth`); w > 390 {
		wide := js[[]string](tab, "what is wide", `[...document.querySelectorAll("body *")].filter(e => e.getBoundingClientRect().right > 391).slice(0, 8).map(e => e.tagName + "." + e.className + "#" + e.id + " " + Math.round(e.getBoundingClientRect().right))`)
		t.Errorf("at 390 px the page is %d px wide: %v", w, wide)
	}
}

// The API names the parameter and the rule of a bad request, and refuses
// what would cost too much.
func TestWebAPIErrors(t *testing.T) {
	h := newWebHandler()
	for _, tc := range []struct{ path, want string }{
		{"/api/ring?nodes=a,b&vnodes=0", "vnodes: must be a whole number from 1 to 500"},
		{"/api/ring?nodes=", "nodes: at least one node is required"},
		{"/api/ring?nodes=n{0..99}", "nodes: at most 32 nodes"},
		{"/api/ring?nodes=a&algo=crc", `is not an algorithm (ring, rendezvous`},
		{"/api/moves?from=a,b&to=a,b,c&keys=99999999", "keys: must be a whole number from 240 to 100000"},
		{"/api/place?nodes=a,b&key=", "key: must be one line"},
		{"/api/balance?policies=p2c,nope", `is not a policy (round_robin`},
		{"/api/balance?requests=10000000", "requests: must be a whole number from 1000 to 100000"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", tc.path, nil))
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("%s: %d %s, want 400 with %q", tc.path, rec.Code, rec.Body, tc.want)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/place?nodes=a,b&key=it's+me", nil))
	var doc placeDoc
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || !strings.HasSuffix(doc.Command, `-- 'it'\''s me'`) {
		t.Fatalf("place with a quote: %s", rec.Body)
	}
}

// rotor web binds where it is told (a free loopback port by default),
// prints the address, serves the page and stops on SIGINT with exit 0.
func TestWebCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"web", "--listen", "localhost"}, strings.NewReader(""), &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), `--listen: "localhost" is not HOST:PORT`) {
		t.Fatalf("bad --listen: exit %d, %q", code, errOut.String())
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "ROTOR_TEST_MAIN=web")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	url := strings.Fields(strings.TrimPrefix(line, "rotor web: serving "))[0]
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("printed %q: want a loopback address", line)
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "<title>rotor: see it</title>") ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Fatalf("GET /: %d %v", resp.StatusCode, resp.Header)
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("rotor web after SIGINT: %v", err)
	}
}
