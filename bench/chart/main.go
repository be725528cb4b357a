// Command chart draws bench/peers.sh's results as grouped bars: one group
// per test, one bar per proxy, each value divided by the reference
// proxy's in the same test, so that tests of different units share an
// axis. It reads lines of TEST<TAB>TARGET<TAB>VALUE (a value of - or a
// missing one is a test the target cannot run) and writes the chart.
// Usage: chart -ref haproxy -title TITLE results.tsv chart.svg
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/rotor-lb/rotor/sim"
)

func main() {
	ref := flag.String("ref", "haproxy", "the target every value is divided by")
	title := flag.String("title", "rotor beside its peers", "the chart's title")
	skip := flag.String("skip", "direct", "targets left out of the chart, comma-separated")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: chart [-ref TARGET] [-title TITLE] results.tsv chart.svg")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), flag.Arg(1), *ref, *title, strings.Split(*skip, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
}

func run(in, out, ref, title string, skip []string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	var tests, targets []string
	values := map[[2]string]float64{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) != 3 {
			return fmt.Errorf("%s:%d: want TEST<TAB>TARGET<TAB>VALUE", in, line)
		}
		test, target := fields[0], fields[1]
		if slices.Contains(skip, target) {
			continue
		}
		if !slices.Contains(tests, test) {
			tests = append(tests, test)
		}
		if !slices.Contains(targets, target) {
			targets = append(targets, target)
		}
		if fields[2] == "-" || fields[2] == "" {
			continue
		}
		v, err := strconv.ParseFloat(fields[2], 64)
		if err != nil || v < 0 {
			return fmt.Errorf("%s:%d: value %q is not a number", in, line, fields[2])
		}
		values[[2]string{test, target}] = v
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if !slices.Contains(targets, ref) {
		return fmt.Errorf("%s: no results for the reference %q", in, ref)
	}
	series := make([]sim.Series, len(targets))
	for i, target := range targets {
		series[i] = sim.Series{Name: target, Values: make([]float64, len(tests))}
		for j, test := range tests {
			v, ok := values[[2]string{test, target}]
			r, rok := values[[2]string{test, ref}]
			if ok && rok && r > 0 {
				series[i].Values[j] = v / r
			}
		}
	}
	return sim.BarChart(out, title, "relative to "+ref+" (higher is better)", tests, series)
}
