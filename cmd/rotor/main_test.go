package main

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func runRotor(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestPlace(t *testing.T) {
	tests := []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{
			name: "keys as arguments, md5 ring as article 000",
			args: []string{"place", "--hash", "md5", "--vnodes", "100", "--nodes", "a,b,c", "user:42", "user:7"},
			// the owners the reference ring (placement/testdata/ring_ref.py) gives
			want: "user:42\tb\nuser:7\tb\n",
		},
		{
			name:  "keys from standard input with replicas",
			stdin: "user:42\nuser:7\n",
			args:  []string{"place", "--hash", "md5", "--nodes", "a,b,c", "--replicas", "2"},
			want:  "user:42\tb,a\nuser:7\tb,a\n",
		},
		{
			name: "modn",
			args: []string{"place", "--algo", "modn", "--hash", "md5", "--nodes", "a,b,c", "user:42"},
			want: "user:42\tc\n", // 1457184536 % 3 = 2
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := runRotor(t, tt.stdin, tt.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if diff := cmp.Diff(out, tt.want); diff != "" {
				t.Errorf("(-got +want)\n%s", diff)
			}
		})
	}
}

func TestPlaceEveryAlgorithm(t *testing.T) {
	for _, algo := range algorithms {
		code, out, errs := runRotor(t, "", "place", "--algo", algo, "--nodes", "a,b,c,d", "--replicas", "2", "k1", "k2")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", algo, code, errs)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			key, owners, _ := strings.Cut(line, "\t")
			o := strings.Split(owners, ",")
			if (key != "k1" && key != "k2") || len(o) != 2 || o[0] == o[1] {
				t.Errorf("%s: bad line %q", algo, line)
			}
		}
		code, out, errs = runRotor(t, "", "place", "--algo", algo, "--nodes", "a,b,c,d", "--explain", "k1")
		if code != 0 || !strings.Contains(out, `key "k1"`) || !strings.Contains(out, "owners: [") {
			t.Errorf("%s: --explain: exit %d, out %q, err %q", algo, code, out, errs)
		}
	}
}

func TestExplainShowsTheWalk(t *testing.T) {
	code, out, _ := runRotor(t, "", "place", "--hash", "md5", "--vnodes", "1", "--nodes", "a,b,c", "--explain", "user:42")
	want := `key "user:42" (md5)  hash 1457184536
  b#0            0509158149           node b          last point at or before the key (not the owner)
  a#0            3627721093           node a          owner
owners: [a]
`
	if code != 0 || out != want {
		t.Errorf("exit %d, (-got +want)\n%s", code, cmp.Diff(out, want))
	}
}

func TestBadInput(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no nodes", []string{"place", "k"}, "rotor: --nodes: at least one node is required"},
		{"empty name", []string{"place", "--nodes", "a,,b", "k"}, "rotor: --nodes: node names must not be empty"},
		{"duplicate", []string{"place", "--nodes", "a,b,a", "k"}, `rotor: --nodes: node "a" appears twice`},
		{"weight zero", []string{"place", "--nodes", "a=0", "k"}, `rotor: --nodes: node "a": weight must be a whole number of at least 1 (got "0")`},
		{"weight negative", []string{"moves", "--from", "a=-2"}, `rotor: --from: node "a": weight must be`},
		{"weight not a number", []string{"moves", "--to", "a=x"}, `rotor: --to: node "a": weight must be`},
		{"unknown algo", []string{"place", "--algo", "p3c", "--nodes", "a"}, `rotor: --algo: "p3c" is not an algorithm (ring, rendezvous, jump, maglev, bounded, modn)`},
		{"all only for moves", []string{"place", "--algo", "all", "--nodes", "a"}, `rotor: --algo: "all" is not an algorithm`},
		{"vnodes", []string{"place", "--vnodes", "0", "--nodes", "a"}, "rotor: --vnodes: must be at least 1 (got 0)"},
		{"replicas above nodes", []string{"place", "--nodes", "a,b", "--replicas", "3", "k"}, "rotor: --replicas: must be between 1 and the node count 2 (got 3)"},
		{"replicas zero", []string{"place", "--nodes", "a,b", "--replicas", "0", "k"}, "rotor: --replicas: must be between 1"},
		{"hash", []string{"place", "--hash", "sha1", "--nodes", "a"}, `rotor: --hash: "sha1" is not a hash (xxhash, md5)`},
		{"table size", []string{"moves", "--algo", "maglev", "--table-size", "100"}, "rotor: --table-size: must be a prime (got 100)"},
		{"epsilon", []string{"moves", "--epsilon", "0"}, "rotor: --epsilon: must be positive (got 0)"},
		{"keys", []string{"moves", "--keys", "0"}, "rotor: --keys: must be between 1 and 5000000 (got 0)"},
		{"keys beyond memory", []string{"moves", "--keys", "1000000000"}, "rotor: --keys: must be between 1 and 5000000 (got 1000000000)"},
		{"jump weights", []string{"moves", "--algo", "jump", "--from", "a=2,b"}, `rotor: --from: node "a": jump does not support weights (got 2)`},
		{"unknown flag", []string{"moves", "--nope"}, "rotor: unknown flag: --nope"},
		{"spread", []string{"moves", "--spread", "arcs"}, `rotor: --spread: must be keys or space (got "arcs")`},
		{"run backwards", []string{"moves", "--from", "n{3..1}"}, `rotor: --from: node "n{3..1}": a numbered run is {FIRST..LAST}, whole numbers with FIRST <= LAST (got {3..1})`},
		{"run too long", []string{"moves", "--from", "n{0..100000}"}, `rotor: --from: node "n{0..100000}": more than 100000 nodes`},
		{"stray brace", []string{"place", "--nodes", "a}", "k"}, `rotor: --nodes: node "a}": braces only make a numbered run`},
		{"two runs", []string{"place", "--nodes", "a{0..1}{0..1}", "k"}, `rotor: --nodes: node "a{0..1}{0..1}": braces only make one numbered run`},
		{"run overlaps", []string{"place", "--nodes", "n{0..3},n2", "k"}, `rotor: --nodes: node "n2" appears twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := runRotor(t, "", tt.args...)
			if code == 0 {
				t.Fatalf("exit 0, want non-zero; out %q", out)
			}
			if strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, tt.want) {
				t.Errorf("stderr %q, want one line starting %q", errs, tt.want)
			}
		})
	}
}

func TestMovesJSON(t *testing.T) {
	code, out, errs := runRotor(t, "", "moves", "--algo", "all", "--from", "a,b,c", "--to", "a,b,c,d", "--keys", "20000", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rows []movesRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	got := map[string]movesRow{}
	for _, r := range rows {
		got[r.Algo] = r
	}
	if len(got) != len(algorithms) {
		t.Fatalf("rows for %d algorithms, want %d", len(got), len(algorithms))
	}
	for _, algo := range []string{"ring", "rendezvous", "jump"} {
		r := got[algo]
		if !r.OnlyChanged || r.Stray != 0 || r.Fraction < 0.12 || r.Fraction > 0.35 || r.Ideal != 0.25 {
			t.Errorf("%s: %+v, want a minimal move near 1/4", algo, r)
		}
	}
	if r := got["modn"]; r.Fraction < 0.6 || r.OnlyChanged {
		t.Errorf("modn: %+v, want most keys moved", r)
	}
}

// --spread space measures the exact key-space shares: the ring at 1,000
// points a node matches the jump-hash paper's 3.16%, jump is even to far
// below what keys could show, placers with no finite space show none.
func TestMovesKeySpace(t *testing.T) {
	code, out, errs := runRotor(t, "", "moves", "--algo", "all", "--vnodes", "1000", "--from", "n{0..99}", "--to", "n{0..100}", "--keys", "1000", "--spread", "space", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rows []movesRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Spread != "space" || r.From != 100 || r.To != 101 {
			t.Fatalf("row %+v", r)
		}
		switch r.Algo {
		case "rendezvous", "bounded":
			if r.Before != nil || r.After != nil {
				t.Errorf("%s: a key-space spread %+v %+v", r.Algo, r.Before, r.After)
			}
		case "ring":
			if d := r.Before.StddevOverMean - 0.0316; d < -0.006 || d > 0.006 {
				t.Errorf("ring: stddev/mean %.4f, want near 0.0316", r.Before.StddevOverMean)
			}
		case "jump", "modn":
			if r.Before.StddevOverMean > 1e-6 || r.After.MaxOverMean > 1+1e-6 {
				t.Errorf("%s: spread %+v %+v, want even", r.Algo, r.Before, r.After)
			}
		case "maglev":
			// 65537 slots over 101 nodes: 648 or 649 each.
			if r.After.MaxOverMean > 650.0/(65537.0/101) {
				t.Errorf("maglev: max/mean %.5f, more than a slot over", r.After.MaxOverMean)
			}
		}
	}
	code, out, _ = runRotor(t, "", "moves", "--algo", "jump", "--from", "n{0..9}", "--to", "n{0..10}", "--keys", "1000", "--spread", "space")
	if code != 0 || !strings.Contains(out, "space max/mean") || !strings.Contains(out, "1+") {
		t.Errorf("exit %d, table:\n%s", code, out)
	}
}

func TestMovesTable(t *testing.T) {
	code, out, errs := runRotor(t, "", "moves", "--algo", "all", "--from", "a=2,b,c", "--keys", "5000")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"moved/ideal", "rendezvous", "jump: n/a: --from: node \"a\": jump does not support weights"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// FuzzParseNodes: the --nodes parser never panics, and whatever it accepts
// is a valid set that prints back to itself.
func FuzzParseNodes(f *testing.F) {
	for _, s := range []string{"a,b,c", "a=3,b,c=2", " a = 1 , b ", "a,,b", "a=0", "a=-1", "a=b=c", "=", ",", "a,a", "ä=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		nodes, err := parseNodes("--nodes", spec)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "--nodes: ") || strings.Contains(err.Error(), "\n") && !strings.Contains(spec, "\n") {
				t.Fatalf("error %q does not name the flag on one line", err)
			}
			return
		}
		var parts []string
		seen := map[string]bool{}
		for _, n := range nodes {
			if n.Name == "" || n.Weight < 1 || seen[n.Name] {
				t.Fatalf("accepted a bad set %+v from %q", nodes, spec)
			}
			seen[n.Name] = true
			parts = append(parts, n.Name+"="+strconv.Itoa(n.Weight))
		}
		again, err := parseNodes("--nodes", strings.Join(parts, ","))
		if err != nil || !cmp.Equal(again, nodes) {
			t.Fatalf("%q parsed to %+v, which prints back as %+v (%v)", spec, nodes, again, err)
		}
	})
}

// rotor --version names the build.
func TestVersion(t *testing.T) {
	code, out, errs := runRotor(t, "", "--version")
	if code != 0 || !strings.HasPrefix(out, "rotor ") || !strings.Contains(out, "go1.") {
		t.Fatalf("exit %d, %q %q", code, out, errs)
	}
}
