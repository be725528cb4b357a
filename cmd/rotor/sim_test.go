package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/sim"
)

// sim rotation takes routes and policies of its own: article 001's two
// routes, round robin against scored.
func TestSimRotationRoutes(t *testing.T) {
	code, out, errs := runRotor(t, "", "sim", "rotation", "--route", "slow=2.65s", "--route", "direct=150ms,fail=0.1",
		"--route", "blocked=100ms,block=1s-2s,bursts=500ms/2s", "--duration", "4s", "--rate", "5", "--policies", "round_robin,scored,scored:gamma=3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"slow (2.65s), direct (150ms, fails 10%), blocked (100ms, 3 failure windows)", "share % slow/direct/blocked",
		"round_robin (control)", "scored γ=2", "scored γ=3"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestSimBalanceTableAndJSON(t *testing.T) {
	code, out, errs := runRotor(t, "", "sim", "balance", "--slow", "0=3", "--requests", "20000", "--policies", "round_robin,p2c")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"server 0 3x slower", "round_robin", "p2c", "p99 ms", "share % s0/s1/s2/s3/s4"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// A slow spell, as in Linkerd's "Beyond Round Robin": server 0 takes
	// 2 s from 15 s to 45 s. Round robin keeps sending it a share and pays
	// for it in the tail; peak_ewma stops within a request or two.
	code, out, errs = runRotor(t, "", "sim", "balance", "--servers", "11", "--workers", "100", "--load", "0.01",
		"--slow", "0=200@15s-45s", "--requests", "66000", "--policies", "round_robin,peak_ewma", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var spell sim.BalanceReport
	if err := json.Unmarshal([]byte(out), &spell); err != nil {
		t.Fatal(err)
	}
	if spell.Condition != "server 0 200x slower from 15s to 45s" || len(spell.Results) != 2 {
		t.Fatalf("report %+v", spell)
	}
	if rr, pe := spell.Results[0], spell.Results[1]; rr.P999 < time.Second || pe.P999 > 200*time.Millisecond {
		t.Errorf("p99.9: round_robin %v, peak_ewma %v; want over 1 s and under 200 ms", rr.P999, pe.P999)
	}
	code, out, errs = runRotor(t, "", "sim", "balance", "--uneven", "--requests", "20000", "--json", "--seed", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep sim.BalanceReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != len(sim.DefaultPolicies) || rep.Results[0].Requests != 20000 || rep.Condition != "cost varies 10x" {
		t.Fatalf("JSON report %+v", rep)
	}
}

func TestSimScenariosRun(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"sim", "bins", "--bins", "200", "--trials", "2", "--plot", filepath.Join(dir, "bins.svg")},
		{"sim", "keys", "--keys", "5000", "--seconds", "5", "--rate", "1000", "--plot", filepath.Join(dir, "keys.png")},
		{"sim", "rotation", "--duration", "60s", "--plot", filepath.Join(dir, "rotation.svg")},
		{"sim", "balance", "--requests", "5000", "--plot", filepath.Join(dir, "balance.png")},
	} {
		code, out, errs := runRotor(t, "", args...)
		if code != 0 || out == "" {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		file := args[len(args)-1]
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("%v: no plot: %v", args, err)
		}
		if strings.HasSuffix(file, ".svg") && !strings.Contains(string(b[:200]), "<svg") ||
			strings.HasSuffix(file, ".png") && string(b[1:4]) != "PNG" {
			t.Fatalf("%v: %s is not an image", args, file)
		}
	}
}

func TestSimBadInput(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"sim", "balance", "--policies", "p3c"}, `rotor: --policies: "p3c" is not a policy (round_robin,`},
		{[]string{"sim", "balance", "--slow", "zero=3"}, `rotor: --slow: "zero=3" is not SERVER=FACTOR`},
		{[]string{"sim", "balance", "--slow", "9=3"}, `rotor: --slow: "9=3": server 9 is not one of 0..4`},
		{[]string{"sim", "balance", "--slow", "0=3@45s-15s"}, `rotor: --slow: "0=3@45s-15s" is not SERVER=FACTOR or SERVER=FACTOR@FROM-TO`},
		{[]string{"sim", "balance", "--slow", "0=3@15s"}, `rotor: --slow: "0=3@15s" is not SERVER=FACTOR or SERVER=FACTOR@FROM-TO`},
		{[]string{"sim", "balance", "--lognormal", "-1"}, "rotor: --lognormal: must be zero or positive (got -1)"},
		{[]string{"sim", "balance", "--choices", "99"}, "rotor: --choices: must be between 1 and 16 (got 99)"},
		{[]string{"sim", "balance", "--choices", "0"}, "rotor: --choices: must be between 1 and 16 (got 0)"},
		{[]string{"sim", "balance", "--gamma", "-1"}, "rotor: --gamma: must be zero or positive (got -1)"},
		{[]string{"sim", "balance", "--attempts", "0"}, "rotor: --attempts: must be between 1 and 10 (got 0)"},
		{[]string{"sim", "balance", "--down", "7=1s-2s"}, `rotor: --down: "7=1s-2s" is not SERVER=FROM-TO`},
		{[]string{"sim", "rotation", "--route", "slow"}, `rotor: --route: "slow": want NAME=LATENCY, e.g. slow=1.5s`},
		{[]string{"sim", "rotation", "--route", "a=0s"}, `rotor: --route: "a=0s": the latency must be a positive duration`},
		{[]string{"sim", "rotation", "--route", "a=1s,fail=2"}, `rotor: --route: "a=1s,fail=2": fail must be a share between 0 and 1`},
		{[]string{"sim", "rotation", "--route", "a=1s,block=9s-3s"}, `rotor: --route: "a=1s,block=9s-3s": block must be FROM-TO`},
		{[]string{"sim", "rotation", "--route", "a=1s,bursts=10s/5s"}, `rotor: --route: "a=1s,bursts=10s/5s": bursts must be SPAN/PERIOD`},
		{[]string{"sim", "rotation", "--route", "a=1s,speed=2"}, `rotor: --route: "a=1s,speed=2": "speed" is not a setting (fail, block, bursts)`},
		{[]string{"sim", "rotation", "--route", "a=1s", "--route", "a=2s"}, `rotor: --route: "a=2s" names route a twice`},
		{[]string{"sim", "rotation", "--policies", "p2c"}, `rotor: --policies: "p2c" is not round_robin, scored or scored:gamma=G`},
		{[]string{"sim", "bins", "--bins", "1000000000"}, "rotor: --bins: must be between 2 and 1000000 (got 1000000000)"},
		{[]string{"sim", "keys", "--rate", "0"}, "rotor: --rate: must be between 1 and 10000000 (got 0)"},
		{[]string{"sim", "keys", "--keys", "1000000000"}, "rotor: --keys: must be between 1 and 5000000 (got 1000000000)"},
		{[]string{"sim", "balance", "--hot", "1.5"}, "rotor: --hot: must be between 0 and 1"},
		{[]string{"sim", "balance", "--uniform", "--uneven"}, "rotor: --uniform: cannot be combined"},
		{[]string{"sim", "balance", "--servers", "0"}, "rotor: --servers: must be at least 1"},
		{[]string{"sim", "balance", "--plot", "x.gif"}, `rotor: --plot: "x.gif" must end in .svg or .png`},
		{[]string{"sim", "balance", "--trace", "/nonexistent/trace"}, "rotor: --trace: open /nonexistent/trace"},
		{[]string{"sim", "bins", "--choices", "1,x"}, `rotor: --choices: "x" is not a whole number`},
		{[]string{"sim", "bins", "--choices", "17"}, "rotor: --choices: at most 16"},
		{[]string{"sim", "bins", "--choices", "0"}, `rotor: --choices: "0" is not a whole number of at least 1`},
		{[]string{"sim", "keys", "--change", "swap"}, `rotor: --change: "swap" is not add, remove, replace or all`},
		{[]string{"sim", "keys", "--algos", "ring,hrw"}, `rotor: --algos: "hrw" is not an algorithm`},
		{[]string{"sim", "rotation", "--duration", "1s"}, "rotor: --duration: must be at least 3s"},
	}
	for _, tt := range tests {
		code, _, errs := runRotor(t, "", tt.args...)
		if code == 0 || strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, tt.want) {
			t.Errorf("%v: exit %d, stderr %q, want one line starting %q", tt.args, code, errs, tt.want)
		}
	}
}

func TestSimTraceFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "trace.csv")
	if err := os.WriteFile(file, []byte("0,a,1\n0.001,b,2\n0.002,a,1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runRotor(t, "", "sim", "balance", "--trace", file, "--policies", "p2c", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep sim.BalanceReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Results[0].Requests != 3 {
		t.Fatalf("report %+v, err %v", rep, err)
	}
	if err := os.WriteFile(file, []byte("0,a,1\nbad\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs = runRotor(t, "", "sim", "balance", "--trace", file)
	if code == 0 || !strings.Contains(errs, "trace.csv: line 2: want time,key,cost") {
		t.Fatalf("bad trace: exit %d, %q", code, errs)
	}
}
