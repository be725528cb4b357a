package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rotor-lb/rotor/config"
	"github.com/rotor-lb/rotor/placement"
)

// algorithms are the placers `rotor place` and `rotor moves` know, in the
// order `--algo all` shows them.
var algorithms = config.PlacerNames

// placerFlags are the flags shared by place and moves.
type placerFlags struct {
	algo      string
	vnodes    int
	hash      string
	epsilon   float64
	tableSize int
}

func (f *placerFlags) register(cmd *cobra.Command, allowAll bool) {
	usage := "placement algorithm: " + strings.Join(algorithms, "|")
	if allowAll {
		usage += "|all"
	}
	cmd.Flags().StringVar(&f.algo, "algo", "ring", usage)
	cmd.Flags().IntVar(&f.vnodes, "vnodes", placement.DefaultVNodes, "ring and bounded: points per node per unit of weight")
	cmd.Flags().StringVar(&f.hash, "hash", "xxhash", "ring, bounded and modn: xxhash|md5 (md5 reproduces article 000's ring)")
	cmd.Flags().Float64Var(&f.epsilon, "epsilon", placement.DefaultEpsilon, "bounded: a node takes no new key at (1+epsilon) x the average load")
	cmd.Flags().IntVar(&f.tableSize, "table-size", placement.DefaultTableSize, "maglev: lookup table size, a prime")
}

// validate checks the flags that do not depend on the node set.
func (f *placerFlags) validate(allowAll bool) ([]string, placement.Hash, error) {
	algos := []string{f.algo}
	if f.algo == "all" && allowAll {
		algos = algorithms
	} else if !slices.Contains(algorithms, f.algo) {
		return nil, 0, fmt.Errorf("--algo: %q is not an algorithm (%s)", f.algo, strings.Join(algorithms, ", "))
	}
	if f.vnodes < 1 {
		return nil, 0, fmt.Errorf("--vnodes: must be at least 1 (got %d)", f.vnodes)
	}
	h, err := placement.ParseHash(f.hash)
	if err != nil {
		return nil, 0, fmt.Errorf("--hash: %v", err)
	}
	if !(f.epsilon > 0) {
		return nil, 0, fmt.Errorf("--epsilon: must be positive (got %v)", f.epsilon)
	}
	if _, err := placement.NewMaglev(nil, placement.MaglevOptions{TableSize: f.tableSize}); err != nil || f.tableSize == 0 {
		return nil, 0, fmt.Errorf("--table-size: must be a prime (got %d)", f.tableSize)
	}
	return algos, h, nil
}

// newPlacer builds the named placer. flag names the flag the nodes came
// from, for error messages.
func (f *placerFlags) newPlacer(algo string, h placement.Hash, nodes []placement.Node, flag string) (placement.Placer, error) {
	if algo == "maglev" && len(nodes) > f.tableSize {
		return nil, fmt.Errorf("--table-size: must be at least the node count %d (got %d)", len(nodes), f.tableSize)
	}
	p, err := config.NewPlacer(algo, nodes, config.PlacerParams{VNodes: f.vnodes, Hash: h, Epsilon: f.epsilon, TableSize: f.tableSize})
	if err != nil {
		if !slices.Contains(algorithms, algo) {
			return nil, fmt.Errorf("--algo: %w", err)
		}
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return p, nil
}

// maxNodes bounds a node list: what the placers and the key-space
// figures handle in moments.
const maxNodes = 100_000

// parseNodes reads a node list: "a,b,c", with weights "a=3,b,c=2", and
// numbered runs "cache{0..99}" (cache0 .. cache99), which take a weight
// like any name ("cache{0..9}=2").
func parseNodes(flag, spec string) ([]placement.Node, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, fmt.Errorf("%s: at least one node is required", flag)
	}
	var nodes []placement.Node
	seen := map[string]bool{}
	for _, item := range strings.Split(spec, ",") {
		name, weight, hasWeight := strings.Cut(strings.TrimSpace(item), "=")
		name = strings.TrimSpace(name)
		if name == "" {
			return nil, fmt.Errorf("%s: node names must not be empty (in %q)", flag, spec)
		}
		w := 1
		if hasWeight {
			var err error
			if w, err = strconv.Atoi(strings.TrimSpace(weight)); err != nil || w < 1 {
				return nil, fmt.Errorf("%s: node %q: weight must be a whole number of at least 1 (got %q)", flag, name, weight)
			}
		}
		names, err := expandRange(name, maxNodes-len(nodes))
		if err != nil {
			return nil, fmt.Errorf("%s: node %q: %w", flag, name, err)
		}
		for _, name := range names {
			if seen[name] {
				return nil, fmt.Errorf("%s: node %q appears twice", flag, name)
			}
			seen[name] = true
			nodes = append(nodes, placement.Node{Name: name, Weight: w})
		}
	}
	return nodes, nil
}

// expandRange turns "n{0..2}x" into n0x, n1x, n2x, and a name with no
// braces into itself; it refuses any other use of braces and more than
// room names.
func expandRange(name string, room int) ([]string, error) {
	open := strings.IndexByte(name, '{')
	if open < 0 {
		if strings.ContainsRune(name, '}') {
			return nil, fmt.Errorf("braces only make a numbered run, as in n{0..9}")
		}
		if room < 1 {
			return nil, fmt.Errorf("more than %d nodes", maxNodes)
		}
		return []string{name}, nil
	}
	closing := strings.IndexByte(name[open:], '}')
	if closing < 0 {
		return nil, fmt.Errorf("braces only make a numbered run, as in n{0..9}")
	}
	closing += open
	prefix, body, suffix := name[:open], name[open+1:closing], name[closing+1:]
	if strings.ContainsAny(prefix+suffix, "{}") {
		return nil, fmt.Errorf("braces only make one numbered run, as in n{0..9}")
	}
	from, to, ok := strings.Cut(body, "..")
	lo, err1 := strconv.Atoi(from)
	hi, err2 := strconv.Atoi(to)
	if !ok || err1 != nil || err2 != nil || lo < 0 || hi < lo {
		return nil, fmt.Errorf("a numbered run is {FIRST..LAST}, whole numbers with FIRST <= LAST (got {%s})", body)
	}
	if hi-lo >= room {
		return nil, fmt.Errorf("more than %d nodes", maxNodes)
	}
	names := make([]string, 0, hi-lo+1)
	for i := lo; i <= hi; i++ {
		names = append(names, prefix+strconv.Itoa(i)+suffix)
	}
	return names, nil
}
