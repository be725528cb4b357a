package main

import (
	"fmt"
	"math"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/rotor-lb/rotor/placement"
)

// movesRow is one algorithm's line in `rotor moves`.
type movesRow struct {
	Algo        string  `json:"algo"`
	From        int     `json:"from_nodes"`
	To          int     `json:"to_nodes"`
	Keys        int     `json:"keys"`
	Moved       int     `json:"moved"`
	Fraction    float64 `json:"fraction"`
	Ideal       float64 `json:"ideal"`
	Stray       int     `json:"stray"`
	OnlyChanged bool    `json:"only_changed"`
	// Spread says what Before and After measure: "keys", the sampled keys
	// per node; or "space", each node's exact share of the key space
	// (ring arcs, Maglev table slots, jump's recurrence, hash mod N
	// residues), which placers with no finite space leave out.
	Spread string  `json:"spread"`
	Before *spread `json:"before,omitempty"`
	After  *spread `json:"after,omitempty"`
	// Error says why this algorithm could not run the change (jump and
	// modn refuse weights); the other fields are then zero.
	Error string `json:"error,omitempty"`
}

type spread struct {
	MaxOverMean    float64 `json:"max_over_mean"`
	StddevOverMean float64 `json:"stddev_over_mean"`
}

func newMovesCmd() *cobra.Command {
	var (
		f        placerFlags
		from, to string
		keys     int
		asJSON   bool
		measure  string
	)
	cmd := &cobra.Command{
		Use:   "moves",
		Short: "Measure how many keys move when the node set changes",
		Long: `Place --keys keys on the --from nodes and on the --to nodes and print, for
that change: the fraction of keys that moved; the ideal fraction (the least
any placer must move: 1/(N+1) for one node added to N); whether every moved
key moved to a new node or from a removed one ("stray" counts those that did
not); and the load spread before and after, as max/mean and stddev/mean of
keys per node (1 and 0 are perfect; weights are taken into account).

--spread space measures the spread without sampling: each node's exact
share of the key space, as the papers measure it (the ring's arcs, Maglev's
table slots, jump's buckets computed from its recurrence, hash mod N's
residues). Rendezvous and bounded have no such partition and show "-".
Nodes may be given as numbered runs: n{0..999} is n0 .. n999.

--algo all prints one row per algorithm, hash % N included.`,
		Example: `  rotor moves --algo all
  rotor moves --algo ring --from a,b,c --to a,b,c,d --keys 100000
  rotor moves --algo all --from a,b,c,d --to a,c,d --json
  rotor moves --algo ring --vnodes 1000 --from 'n{0..999}' --to 'n{0..1000}' --spread space`,
		RunE: func(cmd *cobra.Command, args []string) error {
			algos, h, err := f.validate(true)
			if err != nil {
				return err
			}
			before, err := parseNodes("--from", from)
			if err != nil {
				return err
			}
			after, err := parseNodes("--to", to)
			if err != nil {
				return err
			}
			if measure != "keys" && measure != "space" {
				return fmt.Errorf("--spread: must be keys or space (got %q)", measure)
			}
			if keys < 1 || keys > maxKeys {
				return fmt.Errorf("--keys: must be between 1 and %d (got %d)", maxKeys, keys)
			}
			keySet := placement.Keys(keys)
			var rows []movesRow
			for _, algo := range algos {
				c, err := f.change(algo, h, before, after, keySet, measure)
				if err != nil {
					if len(algos) == 1 {
						return err
					}
					c.row.Error = err.Error()
				}
				rows = append(rows, c.row)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), rows)
			}
			return writeMovesTable(cmd, rows)
		},
	}
	f.register(cmd, true)
	cmd.Flags().StringVar(&from, "from", "a,b,c", "nodes before the change, each NAME or NAME=WEIGHT")
	cmd.Flags().StringVar(&to, "to", "a,b,c,d", "nodes after the change, each NAME or NAME=WEIGHT")
	cmd.Flags().IntVar(&keys, "keys", 100000, "how many keys to place")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON rows instead of a table")
	cmd.Flags().StringVar(&measure, "spread", "keys", "what the spread columns measure: keys (sampled) or space (exact key-space shares)")
	return cmd
}

// change is one algorithm's answer to a change of membership: its moves
// row, and each key's owner before and after.
type change struct {
	row           movesRow
	before, after placement.Placer
	// ownersBefore[i] and ownersAfter[i] own keys[i].
	ownersBefore, ownersAfter []string
}

// change places keys on before and on after with algo and measures the
// movement, the spread measured by "keys" or "space". On an error the row
// still names the algorithm and the sizes.
func (f *placerFlags) change(algo string, h placement.Hash, before, after []placement.Node, keys []string, measure string) (change, error) {
	c := change{row: movesRow{Algo: algo, From: len(before), To: len(after), Keys: len(keys), Spread: measure}}
	var err error
	if c.before, err = f.newPlacer(algo, h, before, "--from"); err != nil {
		return c, err
	}
	if c.after, err = f.newPlacer(algo, h, after, "--to"); err != nil {
		return c, err
	}
	if c.ownersBefore, err = placement.Assign(c.before, keys); err != nil {
		return c, fmt.Errorf("before: %w", err)
	}
	if c.ownersAfter, err = placement.Assign(c.after, keys); err != nil {
		return c, fmt.Errorf("after: %w", err)
	}
	m := placement.CompareOwners(c.before.Nodes(), c.after.Nodes(), c.ownersBefore, c.ownersAfter)
	r := &c.row
	r.Moved, r.Fraction, r.Ideal, r.Stray, r.OnlyChanged = m.Moved, m.Fraction, m.Ideal, m.Stray, m.OnlyChanged
	if measure == "keys" {
		r.Before, r.After = spreadOf(m.Before), spreadOf(m.After)
	} else {
		r.Before, r.After = spaceSpread(c.before), spaceSpread(c.after)
	}
	return c, nil
}

func spreadOf(sp placement.Spread) *spread {
	return &spread{sp.MaxOverMean, sp.StddevOverMean}
}

// spaceSpread is the spread of p's exact key-space shares, or nil for a
// placer that has none.
func spaceSpread(p placement.Placer) *spread {
	ks, ok := p.(placement.KeySpacer)
	if !ok {
		return nil
	}
	shares := ks.KeySpace()
	if shares == nil {
		return nil
	}
	return spreadOf(placement.SpreadOfShares(ks.Nodes(), shares))
}

func writeMovesTable(cmd *cobra.Command, rows []movesRow) error {
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', tabwriter.AlignRight)
	by := "keys"
	if len(rows) > 0 && rows[0].Spread == "space" {
		by = "space"
	}
	fmt.Fprintf(w, "algo\tnodes\tkeys\tmoved\tideal\tmoved/ideal\tstray\tonly new/removed\t%s max/mean before\tafter\tstddev/mean before\tafter\t\n", by)
	var notes []string
	for _, r := range rows {
		if r.Error != "" {
			fmt.Fprintf(w, "%s\t%d→%d\t%d\tn/a\t\t\t\t\t\t\t\t\t\n", r.Algo, r.From, r.To, r.Keys)
			notes = append(notes, fmt.Sprintf("%s: n/a: %s", r.Algo, r.Error))
			continue
		}
		ratio := "-"
		if r.Ideal > 0 {
			ratio = fmt.Sprintf("%.2f", r.Fraction/r.Ideal)
		}
		fmt.Fprintf(w, "%s\t%d→%d\t%d\t%.2f%%\t%.2f%%\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t\n",
			r.Algo, r.From, r.To, r.Keys, 100*r.Fraction, 100*r.Ideal, ratio, r.Stray, yesNo(r.OnlyChanged),
			spreadFigure(r.Before, (*spread).max), spreadFigure(r.After, (*spread).max),
			spreadFigure(r.Before, (*spread).stddev), spreadFigure(r.After, (*spread).stddev))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(cmd.OutOrStdout(), n)
	}
	return nil
}

func (s *spread) max() float64    { return s.MaxOverMean }
func (s *spread) stddev() float64 { return s.StddevOverMean }

// spreadFigure prints one spread figure with three decimals, or, for one
// within a thousandth of perfect (jump's key space is even to 1e-7), the
// distance from perfect: 1+7.0e-05 for a max/mean, 6.99e-05 for a
// stddev/mean. "-" when there is none.
func spreadFigure(s *spread, figure func(*spread) float64) string {
	if s == nil {
		return "-"
	}
	v := figure(s)
	whole := math.Round(v)
	if d := v - whole; d != 0 && math.Abs(d) < 0.0005 {
		if whole == 0 {
			return strconv.FormatFloat(v, 'g', 3, 64)
		}
		return fmt.Sprintf("%.0f%+.1e", whole, d)
	}
	return fmt.Sprintf("%.3f", v)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
