package main

import (
	"bufio"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rotor-lb/rotor/placement"
)

func newPlaceCmd() *cobra.Command {
	var (
		f        placerFlags
		nodeSpec string
		replicas int
		explain  string
	)
	cmd := &cobra.Command{
		Use:   "place [KEY...]",
		Short: "Print the node each key lands on",
		Long: `Print "KEY<TAB>OWNER" for each key given, or for each line of standard input
when none is. With --replicas R > 1 the owners are comma-separated, the owner
first. --explain KEY prints how the key was placed: its hash, the points or
scores the algorithm looked at, and the owners.

bounded places each key as held, in order, so later keys spill past a node
that has reached its bound.`,
		Example: `  rotor place --nodes a,b,c user:1 user:2
  rotor place --algo rendezvous --nodes a=3,b,c --replicas 2 < keys.txt
  rotor place --hash md5 --vnodes 100 --nodes a,b,c --explain user:42`,
		RunE: func(cmd *cobra.Command, args []string) error {
			algos, h, err := f.validate(false)
			if err != nil {
				return err
			}
			nodes, err := parseNodes("--nodes", nodeSpec)
			if err != nil {
				return err
			}
			if replicas < 1 || replicas > len(nodes) {
				return fmt.Errorf("--replicas: must be between 1 and the node count %d (got %d)", len(nodes), replicas)
			}
			p, err := f.newPlacer(algos[0], h, nodes, "--nodes")
			if err != nil {
				return err
			}
			out := bufio.NewWriter(cmd.OutOrStdout())
			defer out.Flush()
			if cmd.Flags().Changed("explain") {
				e, err := p.(placement.Explainer).Explain(explain, replicas)
				if err != nil {
					return err
				}
				_, err = e.WriteTo(out)
				return err
			}
			place := func(key string) error {
				var owners []string
				if a, ok := p.(placement.Acquirer); ok && replicas == 1 {
					o, err := a.Acquire(key)
					if err != nil {
						return err
					}
					owners = []string{o}
				} else if owners, err = placement.Owners(p, key, replicas); err != nil {
					return err
				}
				_, err := fmt.Fprintf(out, "%s\t%s\n", key, strings.Join(owners, ","))
				return err
			}
			if len(args) > 0 {
				for _, k := range args {
					if err := place(k); err != nil {
						return err
					}
				}
				return nil
			}
			if isTerminal(cmd.InOrStdin()) {
				return fmt.Errorf("no keys: give them as arguments (rotor place --nodes a,b user:1) or one a line on standard input")
			}
			sc := bufio.NewScanner(cmd.InOrStdin())
			sc.Buffer(make([]byte, 64*1024), 1<<20)
			for sc.Scan() {
				if err := place(sc.Text()); err != nil {
					return err
				}
			}
			if err := sc.Err(); err != nil {
				return fmt.Errorf("reading keys from standard input: %w", err)
			}
			return nil
		},
	}
	f.register(cmd, false)
	cmd.Flags().StringVar(&nodeSpec, "nodes", "", "nodes, comma-separated, each NAME or NAME=WEIGHT (required)")
	cmd.Flags().IntVar(&replicas, "replicas", 1, "owners per key: the owner and R-1 replicas")
	cmd.Flags().StringVar(&explain, "explain", "", "print how KEY is placed, step by step, instead of placing keys")
	return cmd
}
