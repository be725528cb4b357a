package main

import (
	"fmt"
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
	Before      spread  `json:"before"`
	After       spread  `json:"after"`
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

--algo all prints one row per algorithm, hash % N included.`,
		Example: `  rotor moves --algo all
  rotor moves --algo ring --from a,b,c --to a,b,c,d --keys 100000
  rotor moves --algo all --from a,b,c,d --to a,c,d --json`,
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
			if keys < 1 || keys > maxKeys {
				return fmt.Errorf("--keys: must be between 1 and %d (got %d)", maxKeys, keys)
			}
			keySet := placement.Keys(keys)
			var rows []movesRow
			for _, algo := range algos {
				row := movesRow{Algo: algo, From: len(before), To: len(after), Keys: keys}
				pb, err := f.newPlacer(algo, h, before, "--from")
				if err == nil {
					var pa placement.Placer
					if pa, err = f.newPlacer(algo, h, after, "--to"); err == nil {
						var m placement.Movement
						if m, err = placement.Compare(pb, pa, keySet); err == nil {
							row.Moved, row.Fraction, row.Ideal = m.Moved, m.Fraction, m.Ideal
							row.Stray, row.OnlyChanged = m.Stray, m.OnlyChanged
							row.Before = spread{m.Before.MaxOverMean, m.Before.StddevOverMean}
							row.After = spread{m.After.MaxOverMean, m.After.StddevOverMean}
						}
					}
				}
				if err != nil {
					if len(algos) == 1 {
						return err
					}
					row.Error = err.Error()
				}
				rows = append(rows, row)
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
	return cmd
}

func writeMovesTable(cmd *cobra.Command, rows []movesRow) error {
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "algo\tnodes\tkeys\tmoved\tideal\tmoved/ideal\tstray\tonly new/removed\tmax/mean before\tafter\tstddev/mean before\tafter\t\n")
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
		fmt.Fprintf(w, "%s\t%d→%d\t%d\t%.2f%%\t%.2f%%\t%s\t%d\t%s\t%.3f\t%.3f\t%.3f\t%.3f\t\n",
			r.Algo, r.From, r.To, r.Keys, 100*r.Fraction, 100*r.Ideal, ratio, r.Stray, yesNo(r.OnlyChanged),
			r.Before.MaxOverMean, r.After.MaxOverMean, r.Before.StddevOverMean, r.After.StddevOverMean)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(cmd.OutOrStdout(), n)
	}
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
