package placement_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rotor-lb/rotor/internal/testtool"
	"github.com/rotor-lb/rotor/placement"
)

func nodes(names ...string) []placement.Node {
	out := make([]placement.Node, len(names))
	for i, n := range names {
		out[i] = placement.Node{Name: n}
	}
	return out
}

func letters(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "n" + strconv.Itoa(i)
	}
	return out
}

// all builds one of each placer over ns.
func all(t testing.TB, ns []placement.Node) map[string]placement.Mutable {
	t.Helper()
	ring, err := placement.NewRing(ns, placement.RingOptions{})
	must(t, err)
	md5ring, err := placement.NewRing(ns, placement.RingOptions{Hash: placement.MD5})
	must(t, err)
	hrw, err := placement.NewRendezvous(ns)
	must(t, err)
	jump, err := placement.NewJump(ns)
	must(t, err)
	maglev, err := placement.NewMaglev(ns, placement.MaglevOptions{})
	must(t, err)
	bounded, err := placement.NewBounded(ns, placement.BoundedOptions{})
	must(t, err)
	modn, err := placement.NewModN(ns, placement.XXHash)
	must(t, err)
	return map[string]placement.Mutable{
		"ring": ring, "ring-md5": md5ring, "rendezvous": hrw, "jump": jump,
		"maglev": maglev, "bounded": bounded, "modn": modn,
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Article 000's own expectations: a,b,c then a,b,c,d at 100 virtual nodes on
// MD5; every key that moves, moves to d, and 15-35% move; hash % N moves
// over 60%.
func TestArticleExpectations(t *testing.T) {
	keys := placement.Keys(2000)
	before, err := placement.NewRing(nodes("a", "b", "c"), placement.RingOptions{VNodes: 100, Hash: placement.MD5})
	must(t, err)
	after, err := placement.NewRing(nodes("a", "b", "c", "d"), placement.RingOptions{VNodes: 100, Hash: placement.MD5})
	must(t, err)
	moved := 0
	for _, k := range keys {
		ob, _ := before.Owner(k)
		oa, _ := after.Owner(k)
		if ob != oa {
			moved++
			if oa != "d" {
				t.Errorf("key %s moved %s -> %s, not to the new node d", k, ob, oa)
			}
		}
	}
	if f := float64(moved) / float64(len(keys)); f < 0.15 || f > 0.35 {
		t.Errorf("ring moved %.3f of keys, want 0.15..0.35", f)
	}
	mb, _ := placement.NewModN(nodes("a", "b", "c"), placement.MD5)
	ma, _ := placement.NewModN(nodes("a", "b", "c", "d"), placement.MD5)
	m, err := placement.Compare(mb, ma, keys)
	must(t, err)
	if m.Fraction <= 0.6 {
		t.Errorf("hash %% N moved %.3f of keys, want over 0.6", m.Fraction)
	}
}

// The md5 ring reproduces article 000's reference ring key for key. The
// reference is run as an independent program (testdata/ring_ref.py).
func TestRingMD5MatchesReference(t *testing.T) {
	python := testtool.Require(t, "python3")
	keys := append(placement.Keys(3000), "", "x", "ünïcode", "a#0", strings.Repeat("k", 300))
	for _, tc := range []struct {
		vnodes int
		nodes  []string
	}{
		{1, []string{"a", "b", "c"}},
		{100, []string{"a", "b", "c"}},
		{100, []string{"a", "b", "c", "d"}},
		{7, letters(40)},
	} {
		t.Run(fmt.Sprintf("v=%d,n=%d", tc.vnodes, len(tc.nodes)), func(t *testing.T) {
			args := append([]string{filepath.Join("testdata", "ring_ref.py"), strconv.Itoa(tc.vnodes)}, tc.nodes...)
			cmd := exec.Command(python, args...)
			cmd.Stdin = strings.NewReader(strings.Join(keys, "\n") + "\n")
			out, err := cmd.Output()
			must(t, err)
			ring, err := placement.NewRing(nodes(tc.nodes...), placement.RingOptions{VNodes: tc.vnodes, Hash: placement.MD5})
			must(t, err)
			lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
			if len(lines) != len(keys) {
				t.Fatalf("reference printed %d lines for %d keys", len(lines), len(keys))
			}
			for i, line := range lines {
				_, want, _ := strings.Cut(line, "\t")
				if got, _ := ring.Owner(keys[i]); got != want {
					t.Fatalf("key %q: ring says %s, reference says %s", keys[i], got, want)
				}
			}
		})
	}
}

// JumpHash is bit for bit the paper's C++ code, which is compiled and run as
// the oracle (testdata/jump_ref.cc).
func TestJumpHashMatchesPaper(t *testing.T) {
	cxx := testtool.Require(t, "c++", "g++", "clang++")
	bin := filepath.Join(t.TempDir(), "jump_ref")
	if out, err := exec.Command(cxx, "-O1", "-o", bin, filepath.Join("testdata", "jump_ref.cc")).CombinedOutput(); err != nil {
		t.Fatalf("compiling the reference: %v\n%s", err, out)
	}
	var in bytes.Buffer
	type q struct {
		key     uint64
		buckets int32
	}
	var qs []q
	x := uint64(0x9e3779b97f4a7c15)
	for i := range 20000 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		buckets := []int32{1, 2, 3, 10, 11, 100, 101, 1000, 65536, 1 << 30, 2147483647}[i%11]
		key := x
		if i < 64 {
			key = uint64(i) // the small keys too
		}
		if i == 64 {
			key = ^uint64(0)
		}
		qs = append(qs, q{key, buckets})
		fmt.Fprintf(&in, "%d %d\n", key, buckets)
	}
	cmd := exec.Command(bin)
	cmd.Stdin = &in
	out, err := cmd.Output()
	must(t, err)
	lines := strings.Fields(string(out))
	if len(lines) != len(qs) {
		t.Fatalf("reference printed %d answers for %d queries", len(lines), len(qs))
	}
	for i, s := range lines {
		want, _ := strconv.Atoi(s)
		if got := placement.JumpHash(qs[i].key, qs[i].buckets); int(got) != want {
			t.Fatalf("JumpHash(%d, %d) = %d, paper says %d", qs[i].key, qs[i].buckets, got, want)
		}
	}
	if got := placement.JumpHash(42, 0); got != -1 {
		t.Errorf("JumpHash(42, 0) = %d, want -1", got)
	}
}

// Every placer answers the same in every process: no seeded hash anywhere.
// The test binary runs itself again and compares.
func TestDeterministicAcrossProcesses(t *testing.T) {
	if os.Getenv("ROTOR_PLACEMENT_CHILD") == "1" {
		return
	}
	dump := func() string {
		var b strings.Builder
		ps := all(t, nodes(letters(17)...))
		for _, name := range []string{"ring", "ring-md5", "rendezvous", "jump", "maglev", "bounded", "modn"} {
			for _, k := range placement.Keys(500) {
				o, err := placement.Owners(ps[name], k, 3)
				must(t, err)
				fmt.Fprintf(&b, "%s %s %v\n", name, k, o)
			}
		}
		return b.String()
	}
	if os.Getenv("ROTOR_PLACEMENT_DUMP") == "1" {
		fmt.Print(dump())
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDeterministicAcrossProcesses$")
	cmd.Env = append(os.Environ(), "ROTOR_PLACEMENT_DUMP=1")
	out, err := cmd.Output()
	must(t, err)
	if diff := cmp.Diff(string(out), dump()); diff != "" {
		t.Fatalf("another process placed keys differently (-child +this):\n%.2000s", diff)
	}
}

func TestEmptySetIsAnError(t *testing.T) {
	for name, p := range all(t, nil) {
		if _, err := p.Owner("k"); !errors.Is(err, placement.ErrNoNodes) {
			t.Errorf("%s: Owner on empty set: err = %v, want ErrNoNodes", name, err)
		}
		if _, err := p.AppendOwners(nil, "k", 2); !errors.Is(err, placement.ErrNoNodes) {
			t.Errorf("%s: AppendOwners on empty set: err = %v, want ErrNoNodes", name, err)
		}
		if x, ok := p.(placement.Indexer); ok {
			if _, err := x.OwnerIndex("k"); !errors.Is(err, placement.ErrNoNodes) {
				t.Errorf("%s: OwnerIndex on empty set: err = %v, want ErrNoNodes", name, err)
			}
		}
		if e, ok := p.(placement.Explainer); ok {
			if _, err := e.Explain("k", 1); !errors.Is(err, placement.ErrNoNodes) {
				t.Errorf("%s: Explain on empty set: err = %v, want ErrNoNodes", name, err)
			}
		}
	}
}

func TestBadNodesRefused(t *testing.T) {
	tests := []struct {
		name    string
		nodes   []placement.Node
		wantErr string
	}{
		{"empty name", []placement.Node{{Name: ""}}, "name must not be empty"},
		{"duplicate", nodes("a", "b", "a"), `"a": duplicate name`},
		{"negative weight", []placement.Node{{Name: "a", Weight: -2}}, "weight must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for algo, p := range all(t, nodes("x")) {
				err := p.Set(tt.nodes)
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("%s: Set: err = %v, want it to contain %q", algo, err, tt.wantErr)
				}
				if got, _ := p.Owner("k"); got != "x" {
					t.Errorf("%s: a refused Set changed the set: owner %q", algo, got)
				}
			}
		})
	}
	if _, err := placement.NewJump([]placement.Node{{Name: "a", Weight: 2}}); err == nil {
		t.Error("jump accepted a weight")
	}
	if _, err := placement.NewMaglev(nodes("a"), placement.MaglevOptions{TableSize: 100}); err == nil {
		t.Error("maglev accepted a table size that is not prime")
	}
	if _, err := placement.NewMaglev(nodes(letters(10)...), placement.MaglevOptions{TableSize: 7}); err == nil {
		t.Error("maglev accepted fewer slots than nodes")
	}
	if _, err := placement.NewRing(nodes("a"), placement.RingOptions{VNodes: -1}); err == nil {
		t.Error("ring accepted vnodes < 1")
	}
	if _, err := placement.NewBounded(nodes("a"), placement.BoundedOptions{Epsilon: -0.1}); err == nil {
		t.Error("bounded accepted a negative epsilon")
	}
}

func TestReplicasDistinct(t *testing.T) {
	ps := all(t, nodes(letters(12)...))
	for name, p := range ps {
		for _, k := range placement.Keys(300) {
			for r := 1; r <= 14; r += 3 {
				got, err := placement.Owners(p, k, r)
				must(t, err)
				if want := min(r, 12); len(got) != want {
					t.Fatalf("%s: %d owners for r=%d, want %d", name, len(got), r, want)
				}
				seen := map[string]bool{}
				for _, o := range got {
					if seen[o] {
						t.Fatalf("%s: key %s: owners %v repeat %s", name, k, got, o)
					}
					seen[o] = true
				}
				if first, _ := p.Owner(k); name != "bounded" && got[0] != first {
					t.Fatalf("%s: key %s: first of owners %v is not Owner %s", name, k, got, first)
				}
			}
		}
	}
}

// Adding a node moves keys only to that node, for the consistent placers,
// and about 1/(N+1) of them.
func TestMonotoneOnAdd(t *testing.T) {
	keys := placement.Keys(20000)
	for _, n := range []int{3, 10, 50} {
		before := all(t, nodes(letters(n)...))
		after := all(t, nodes(letters(n+1)...))
		newNode := "n" + strconv.Itoa(n)
		for _, name := range []string{"ring", "ring-md5", "rendezvous", "jump"} {
			m, err := placement.Compare(before[name], after[name], keys)
			must(t, err)
			if !m.OnlyChanged {
				t.Errorf("%s %d->%d: %d keys moved between old nodes", name, n, n+1, m.Stray)
			}
			ideal := 1 / float64(n+1)
			if m.Fraction < ideal*0.5 || m.Fraction > ideal*1.6 {
				t.Errorf("%s %d->%d: moved %.4f, want near %.4f", name, n, n+1, m.Fraction, ideal)
			}
			// and every mover went to the new node
			for _, k := range keys[:2000] {
				ob, _ := before[name].Owner(k)
				oa, _ := after[name].Owner(k)
				if ob != oa && oa != newNode {
					t.Fatalf("%s: key %s moved %s -> %s", name, k, ob, oa)
				}
			}
		}
		// Maglev trades a little disruption for its O(1) lookups; it must
		// still be far from hash % N.
		m, err := placement.Compare(before["maglev"], after["maglev"], keys)
		must(t, err)
		if m.Fraction > 3/float64(n+1) {
			t.Errorf("maglev %d->%d moved %.4f, more than 3x the ideal", n, n+1, m.Fraction)
		}
	}
}

func TestWeightsRespected(t *testing.T) {
	ns := []placement.Node{{Name: "big", Weight: 4}, {Name: "mid", Weight: 2}, {Name: "s1", Weight: 1}, {Name: "s2", Weight: 1}}
	keys := placement.Keys(80000)
	ring, _ := placement.NewRing(ns, placement.RingOptions{VNodes: 200})
	hrw, _ := placement.NewRendezvous(ns)
	maglev, _ := placement.NewMaglev(ns, placement.MaglevOptions{})
	for name, p := range map[string]placement.Placer{"ring": ring, "rendezvous": hrw, "maglev": maglev} {
		owners, err := placement.Assign(p, keys)
		must(t, err)
		sp := placement.SpreadOf(ns, owners)
		// Each count over its fair share: 1 is perfect.
		tol := map[string]float64{"ring": 0.12, "rendezvous": 0.03, "maglev": 0.03}[name]
		if sp.MaxOverMean > 1+tol {
			t.Errorf("%s: weighted spread max/mean %.3f, want <= %.2f (counts %v)", name, sp.MaxOverMean, 1+tol, sp.Keys)
		}
	}
}

// Incremental Add and Remove give exactly the ring a fresh build gives.
func TestRingIncrementalEqualsRebuild(t *testing.T) {
	r, _ := placement.NewRing(nodes("a", "b"), placement.RingOptions{VNodes: 50})
	must(t, r.Add(placement.Node{Name: "c", Weight: 3}))
	must(t, r.Add(placement.Node{Name: "d"}))
	must(t, r.Remove("b"))
	must(t, r.Add(placement.Node{Name: "b"}))
	fresh, _ := placement.NewRing([]placement.Node{{Name: "a"}, {Name: "c", Weight: 3}, {Name: "d"}, {Name: "b"}}, placement.RingOptions{VNodes: 50})
	if r.Points() != fresh.Points() {
		t.Fatalf("points: incremental %d, rebuild %d", r.Points(), fresh.Points())
	}
	for _, k := range placement.Keys(5000) {
		a, _ := placement.Owners(r, k, 3)
		b, _ := placement.Owners(fresh, k, 3)
		if !cmp.Equal(a, b) {
			t.Fatalf("key %s: incremental %v, rebuild %v", k, a, b)
		}
	}
	if err := r.Remove("zz"); !errors.Is(err, placement.ErrUnknownNode) {
		t.Errorf("Remove unknown: %v", err)
	}
	if err := r.Add(placement.Node{Name: "a"}); err == nil {
		t.Error("Add accepted a duplicate")
	}
}

func TestJumpRemovesOnlyLast(t *testing.T) {
	j, _ := placement.NewJump(nodes("a", "b", "c"))
	if err := j.Remove("b"); !errors.Is(err, placement.ErrNotLast) {
		t.Errorf("Remove(b) = %v, want ErrNotLast", err)
	}
	must(t, j.Remove("c"))
	if got := j.Nodes(); len(got) != 2 {
		t.Errorf("nodes after removing c: %v", got)
	}
}

// Lookups keep answering from a whole snapshot while membership changes.
func TestConcurrentLookupsDuringChanges(t *testing.T) {
	base := nodes(letters(8)...)
	for name, p := range all(t, base) {
		t.Run(name, func(t *testing.T) {
			var wg sync.WaitGroup
			stop := make(chan struct{})
			for g := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf := make([]string, 0, 3)
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						k := "k" + strconv.Itoa(g*1_000_000+i)
						o, err := p.AppendOwners(buf[:0], k, 3)
						if err != nil || len(o) != 3 || o[0] == o[1] || o[1] == o[2] || o[0] == o[2] {
							t.Errorf("owners %v, err %v", o, err)
							return
						}
						if a, ok := p.(*placement.Bounded); ok {
							if n, err := a.Acquire(k); err == nil {
								a.Release(n)
							}
						}
					}
				}()
			}
			for i := range 40 {
				extra := placement.Node{Name: "x" + strconv.Itoa(i)}
				must(t, p.Add(extra))
				must(t, p.Remove(extra.Name))
			}
			must(t, p.Set(base[:5]))
			close(stop)
			wg.Wait()
		})
	}
}

func TestExplain(t *testing.T) {
	ps := all(t, nodes("a", "b", "c", "d"))
	for name, p := range ps {
		e, err := p.(placement.Explainer).Explain("user:42", 2)
		must(t, err)
		want, _ := placement.Owners(p, "user:42", 2)
		if !cmp.Equal(e.Owners, want) {
			t.Errorf("%s: explained owners %v, placer says %v", name, e.Owners, want)
		}
		var b strings.Builder
		if _, err := e.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), "owners: ["+strings.Join(want, " ")+"]") || len(e.Steps) == 0 {
			t.Errorf("%s: explanation does not show its walk:\n%s", name, b.String())
		}
	}
}

func TestIdealMovement(t *testing.T) {
	tests := []struct {
		name          string
		before, after []placement.Node
		want          float64
	}{
		{"3 to 4", nodes("a", "b", "c"), nodes("a", "b", "c", "d"), 0.25},
		{"4 to 3", nodes("a", "b", "c", "d"), nodes("a", "b", "c"), 0.25},
		{"replace one", nodes("a", "b"), nodes("a", "c"), 0.5},
		{"same", nodes("a", "b"), nodes("b", "a"), 0},
		{"double a weight", nodes("a", "b"), []placement.Node{{Name: "a", Weight: 2}, {Name: "b"}}, 1.0 / 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := placement.IdealMovement(tt.before, tt.after); got < tt.want-1e-9 || got > tt.want+1e-9 {
				t.Errorf("got %.4f, want %.4f", got, tt.want)
			}
		})
	}
}

// The same set in any order gives every key the same owners, in every
// placer: two instances whose files list endpoints differently agree.
func TestOwnersIndependentOfOrder(t *testing.T) {
	for _, weighted := range []bool{false, true} {
		ns := nodes(letters(100)...)
		if weighted {
			ns = ns[:20]
			for i := range ns {
				ns[i].Weight = 1 + i%3
			}
		}
		rev := slices.Clone(ns)
		slices.Reverse(rev)
		shuffled := slices.Clone(ns)
		rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		keys := placement.Keys(20000)
		for name, ref := range allOrWeighted(t, ns, weighted) {
			for label, order := range map[string][]placement.Node{"reversed": rev, "shuffled": shuffled} {
				other := allOrWeighted(t, order, weighted)[name]
				differ := 0
				for _, k := range keys {
					a, err := placement.Owners(ref, k, 3)
					must(t, err)
					b, err := placement.Owners(other, k, 3)
					must(t, err)
					if !slices.Equal(a, b) {
						differ++
					}
				}
				if differ != 0 {
					t.Errorf("%s (weighted %v), %s: %d of %d keys have different owners", name, weighted, label, differ, len(keys))
				}
			}
		}
	}
}

// OwnerIndex names the owner Owner names, by its position in Nodes(),
// for every placer that has it, weighted or not, and after a change.
func TestOwnerIndexIsOwner(t *testing.T) {
	for _, weighted := range []bool{false, true} {
		ns := nodes(letters(37)...)
		if weighted {
			for i := range ns {
				ns[i].Weight = 1 + i%5
			}
		}
		indexers := 0
		for name, p := range allOrWeighted(t, ns, weighted) {
			x, ok := p.(placement.Indexer)
			if !ok {
				continue
			}
			indexers++
			for round := range 2 {
				if round == 1 {
					must(t, p.Remove(ns[3].Name)) // positions shift
				}
				got := p.Nodes()
				for k := range 5000 {
					key := "key-" + strconv.Itoa(k)
					want, err := p.Owner(key)
					must(t, err)
					i, err := x.OwnerIndex(key)
					must(t, err)
					if i < 0 || i >= len(got) || got[i].Name != want {
						t.Fatalf("%s weighted=%v round %d: OwnerIndex(%q) = %d, Owner = %s", name, weighted, round, key, i, want)
					}
				}
			}
		}
		if indexers < 3 {
			t.Fatalf("weighted=%v: %d placers have OwnerIndex, want ring, rendezvous and maglev", weighted, indexers)
		}
	}
}

// allOrWeighted is all, leaving out the placers that refuse weights when
// the set is weighted.
func allOrWeighted(t *testing.T, ns []placement.Node, weighted bool) map[string]placement.Mutable {
	if !weighted {
		return all(t, ns)
	}
	ring, err := placement.NewRing(ns, placement.RingOptions{})
	must(t, err)
	hrw, err := placement.NewRendezvous(ns)
	must(t, err)
	maglev, err := placement.NewMaglev(ns, placement.MaglevOptions{})
	must(t, err)
	bounded, err := placement.NewBounded(ns, placement.BoundedOptions{})
	must(t, err)
	return map[string]placement.Mutable{"ring": ring, "rendezvous": hrw, "maglev": maglev, "bounded": bounded}
}

// Jump and ModN number nodes in natural name order: the next number sorts
// last, so growing n0..n9 by n10 is a cheap change.
func TestJumpNumbersInNaturalOrder(t *testing.T) {
	j, err := placement.NewJump(nodes("n10", "n9", "n1", "n0", "n2"))
	must(t, err)
	var got []string
	for _, n := range j.Nodes() {
		got = append(got, n.Name)
	}
	if want := []string{"n0", "n1", "n2", "n9", "n10"}; !slices.Equal(got, want) {
		t.Errorf("bucket order %v, want %v", got, want)
	}
	must(t, j.Add(placement.Node{Name: "n11"}))
	if err := j.Add(placement.Node{Name: "n3"}); !errors.Is(err, placement.ErrNotLast) {
		t.Errorf("Add(n3) = %v, want ErrNotLast", err)
	}
	if err := j.Add(placement.Node{Name: "n11"}); err == nil || errors.Is(err, placement.ErrNotLast) {
		t.Errorf("Add(n11) again = %v, want a duplicate error", err)
	}
	before, _ := placement.NewJump(nodes(letters(10)...))
	after, _ := placement.NewJump(nodes(letters(11)...))
	m, err := placement.Compare(before, after, placement.Keys(20000))
	must(t, err)
	if !m.OnlyChanged || m.Fraction > 1.2/11 {
		t.Errorf("n0..n9 -> n0..n10 moved %.4f (stray %d), want about 1/11 and none stray", m.Fraction, m.Stray)
	}
}

// The circle a ring draws is the one it looks keys up on: each key's owner
// is the node of the first point clockwise past the key's hash.
func TestRingCircle(t *testing.T) {
	for _, h := range []placement.Hash{placement.XXHash, placement.MD5} {
		r, err := placement.NewRing([]placement.Node{{Name: "a"}, {Name: "b", Weight: 2}, {Name: "c"}}, placement.RingOptions{VNodes: 7, Hash: h})
		if err != nil {
			t.Fatal(err)
		}
		pts := r.Circle()
		if len(pts) != 28 || len(pts) != r.Points() {
			t.Fatalf("%v: %d points, want 28", h, len(pts))
		}
		for i, p := range pts {
			if p.At < 0 || p.At >= 1 || (i > 0 && p.Hash < pts[i-1].Hash) || (i > 0 && p.At < pts[i-1].At) {
				t.Fatalf("%v: point %d %+v out of order or off the circle", h, i, p)
			}
			if !strings.HasPrefix(p.Label, p.Node+"#") {
				t.Fatalf("%v: point %+v: label is not its node's", h, p)
			}
		}
		for _, key := range placement.Keys(1000) {
			kh := h.Sum(key)
			want := pts[0].Node
			for _, p := range pts {
				if p.Hash > kh {
					want = p.Node
					break
				}
			}
			if got, _ := r.Owner(key); got != want {
				t.Fatalf("%v: %s: owner %s, the circle says %s", h, key, got, want)
			}
		}
	}
}
