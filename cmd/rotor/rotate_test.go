package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/bench"
)

// The demo at its defaults shows article 001's result: on every seed
// scored answers more, wastes less, and its mean latency is at most half
// round robin's (the article: 0.18 on its two routes).
func TestDemoJSON(t *testing.T) {
	for _, seed := range []string{"1", "2"} {
		code, out, errs := runRotor(t, "", "demo", "--duration", "4s", "--json", "--rate", "30", "--seed", seed)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		var rep bench.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		rows := map[string]bench.Row{}
		for _, r := range rep.Rows {
			rows[r.Policy] = r
		}
		rr, sc := rows["round_robin"], rows["scored"]
		if rr.Requests < 60 || sc.Requests < 60 || len(rep.Routes) != 4 {
			t.Fatalf("report %+v", rep)
		}
		// fast is blocked for a third of the run: the blind control keeps
		// sending it a quarter of its traffic; scored drops it once its
		// breaker opens.
		if sc.SuccessRate < rr.SuccessRate || sc.Wasted > rr.Wasted {
			t.Fatalf("seed %s: scored %.3f success, %d wasted; round robin %.3f, %d", seed, sc.SuccessRate, sc.Wasted, rr.SuccessRate, rr.Wasted)
		}
		if rr.Wasted == 0 {
			t.Fatal("the control wasted nothing on a blocked route")
		}
		if ratio := sc.Mean.Seconds() / rr.Mean.Seconds(); ratio > 0.5 {
			t.Errorf("seed %s: scored/round robin mean latency %.2f (%v, %v), want at most 0.5", seed, ratio, sc.Mean, rr.Mean)
		}
	}
}

// The demo's output fits 100 columns, explains its terms, skips seconds
// where nothing finished, and ends with a line a newcomer can repeat.
func TestDemoTable(t *testing.T) {
	code, out, errs := runRotor(t, "", "demo", "--duration", "3s", "--rate", "20")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"fast    adds 30ms", "round_robin (control)", "wasted: requests that failed on a route",
		"before open: those of them sent while", "what happened:", "  1s  | 100%", "\nIn short: scored answered "} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	for i, line := range strings.Split(out, "\n") {
		if n := len([]rune(line)); n > 100 {
			t.Errorf("line %d is %d columns: %q", i+1, n, line)
		}
		if strings.Contains(line, " 0 req ") || strings.Count(line, "|    -      -") == 2 {
			t.Errorf("line %d reports a second where nothing happened: %q", i+1, line)
		}
	}
}

func TestBenchAndFetchWithConfig(t *testing.T) {
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer target.Close()
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "relayed") }))
	defer relay.Close()
	cfg := filepath.Join(t.TempDir(), "routes.yaml")
	_ = os.WriteFile(cfg, []byte(fmt.Sprintf(`listeners:
  - {name: out, kind: forward, listen: "127.0.0.1:0", pool: routes, allow_targets: [127.0.0.0/8]}
pools:
  - name: routes
    endpoints:
      - {name: direct, url: "direct://"}
      - {name: relay, url: %q}
`, relay.URL)), 0o600)
	code, out, errs := runRotor(t, "", "bench", "--config", cfg, "--requests", "40", "--json", target.URL)
	if code != 0 {
		t.Fatalf("bench: exit %d: %s", code, errs)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 2 || rep.Rows[0].Requests != 40 || rep.Rows[1].SuccessRate != 1 {
		t.Fatalf("bench report %+v", rep)
	}
	code, out, errs = runRotor(t, "", "fetch", "--config", cfg, target.URL)
	if code != 0 || !strings.Contains(out, "status 200") || !strings.Contains(out, "route ") {
		t.Fatalf("fetch: exit %d, %q %q", code, out, errs)
	}
	// Without allow_targets, loopback is refused.
	code, _, errs = runRotor(t, "", "fetch", target.URL)
	if code == 0 || !strings.Contains(errs, "fetch over route direct: target address is not allowed") || !strings.Contains(errs, "--allow CIDR allows it") {
		t.Fatalf("fetch of loopback without --allow: exit %d, %q", code, errs)
	}
	code, out, _ = runRotor(t, "", "fetch", "--allow", "127.0.0.0/8", target.URL)
	if code != 0 || !strings.Contains(out, "route direct") {
		t.Fatalf("fetch --allow: exit %d, %q", code, out)
	}
	// --body: the body alone on standard output, the summary on standard
	// error; --insecure accepts a test server's certificate.
	tlsTarget := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "secure body") }))
	defer tlsTarget.Close()
	code, _, errs = runRotor(t, "", "fetch", "--allow", "127.0.0.0/8", "--body", tlsTarget.URL)
	if code == 0 || !strings.Contains(errs, "certificate") {
		t.Fatalf("a test certificate without --insecure: exit %d, %q", code, errs)
	}
	code, out, errs = runRotor(t, "", "fetch", "--allow", "127.0.0.0/8", "--insecure", "--body", tlsTarget.URL)
	if code != 0 || out != "secure body" || !strings.Contains(errs, "status 200") {
		t.Fatalf("fetch --insecure --body: exit %d, out %q, err %q", code, out, errs)
	}
	code, _, errs = runRotor(t, "", "fetch", "--config", cfg, "--insecure", target.URL)
	if code == 0 || !strings.Contains(errs, "--insecure: with --config") {
		t.Fatalf("--insecure with --config: exit %d, %q", code, errs)
	}
	code, _, errs = runRotor(t, "", "bench", "--policies", "round_robin,p3c")
	if code == 0 || !strings.Contains(errs, `--policies: "p3c" is not a policy`) {
		t.Fatalf("bad policy: %q", errs)
	}
	code, _, errs = runRotor(t, "", "bench", "--policies", "scored:gamma=x")
	if code == 0 || !strings.Contains(errs, "the only setting is gamma=NUMBER") {
		t.Fatalf("bad gamma: %q", errs)
	}
}

// The bench's progress counts requests as they add up, second after
// second, never past the total.
func TestCountTicks(t *testing.T) {
	var got []int64
	tick := countTicks(func(done, total int64) {
		if total != 40 {
			t.Fatalf("total %d", total)
		}
		got = append(got, done)
	}, 40)
	for _, n := range []int{10, 3, 12, 20} {
		tick(bench.Tick{Policies: []bench.PolicyTick{{Requests: n}, {Requests: 1}}})
	}
	if want := []int64{11, 15, 28, 40}; !slices.Equal(got, want) {
		t.Errorf("progress %v, want %v", got, want)
	}
}

// No progress bar goes to a stderr that is not a terminal (a pipe, a log,
// a test's buffer), even for a run that lasts over a second.
func TestNoProgressBarWithoutTerminal(t *testing.T) {
	var errs strings.Builder
	cmd := newRootCmd()
	cmd.SetErr(&errs)
	report, finish := progress(cmd, "requests")
	time.Sleep(1100 * time.Millisecond)
	report(5, 10)
	report(10, 10)
	finish()
	if errs.Len() != 0 {
		t.Errorf("stderr got %q", errs.String())
	}
}
