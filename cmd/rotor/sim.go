package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/config"
	"github.com/rotor-lb/rotor/placement"
	"github.com/rotor-lb/rotor/sim"
)

// The largest sizes the tools take: each holds a figure per bin or key in
// memory (sim bins runs a real pool, about 700 bytes a bin; moves and sim
// keys about 70 bytes a key), and past these a run would not fit, or not
// finish, on a laptop. Sampled figures are already precise to about
// 1/sqrt(keys).
const (
	maxBins  = 1_000_000
	maxBalls = 10_000_000
	maxKeys  = 5_000_000
)

// simFlags are the flags every scenario takes.
type simFlags struct {
	seed   uint64
	asJSON bool
	plot   string
}

func newSimCmd() *cobra.Command {
	f := &simFlags{}
	cmd := &cobra.Command{
		Use:   "sim SCENARIO",
		Short: "Simulate policies on a virtual clock and compare them with numbers",
		Long: `Run rotor's own policies and health model on a virtual clock: the same
seeded request stream through every policy, so the rows compare.

Scenarios:
  balance   policies on queueing servers: uniform, --slow 0=3, --uneven, --hot 0.45
  bins      n balls into n bins with 1, 2 or d random choices, against the theory
  keys      membership changes on every placer: keys moved and the cache-miss storm
  rotation  article 001's routes: round robin against the health-scored policy`,
	}
	cmd.PersistentFlags().Uint64Var(&f.seed, "seed", 1, "random seed: the same seed gives the same numbers")
	cmd.PersistentFlags().BoolVar(&f.asJSON, "json", false, "print JSON instead of a table")
	cmd.PersistentFlags().StringVar(&f.plot, "plot", "", "also draw a chart to FILE.svg or FILE.png")
	cmd.AddCommand(newSimBalanceCmd(f), newSimBinsCmd(f), newSimKeysCmd(f), newSimRotationCmd(f))
	return cmd
}

func (f *simFlags) check() error {
	if f.plot != "" && !strings.HasSuffix(strings.ToLower(f.plot), ".svg") && !strings.HasSuffix(strings.ToLower(f.plot), ".png") {
		return fmt.Errorf("--plot: %q must end in .svg or .png", f.plot)
	}
	return nil
}

func (f *simFlags) emit(cmd *cobra.Command, v any, table func(io.Writer) error) error {
	if f.asJSON {
		return writeJSON(cmd.OutOrStdout(), v)
	}
	return table(cmd.OutOrStdout())
}

// interruptible returns a context cancelled by Ctrl-C.
func interruptible(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(cmd.Context(), os.Interrupt)
}

// progress shows a bar on stderr, labelled with what is counted, for runs
// that last over a second, when stderr is a terminal: a pipe or a log file
// gets no bar. Report it the running total and the total to come.
func progress(cmd *cobra.Command, label string) (sim.Progress, func()) {
	var (
		mu    sync.Mutex
		bar   *progressbar.ProgressBar
		start = time.Now()
		show  = isTerminalWriter(cmd.ErrOrStderr())
	)
	report := func(done, total int64) {
		if !show {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if bar == nil {
			if time.Since(start) < time.Second {
				return
			}
			bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(cmd.ErrOrStderr()),
				progressbar.OptionSetDescription(label), progressbar.OptionShowCount(),
				progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
		}
		_ = bar.Set64(done)
	}
	finish := func() {
		mu.Lock()
		defer mu.Unlock()
		if bar != nil {
			_ = bar.Finish()
		}
	}
	return report, finish
}

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64) }

func newSimBalanceCmd(f *simFlags) *cobra.Command {
	var (
		o        sim.BalanceOptions
		policies string
		slow     []string
		uniform  bool
		trace    string
		choices  int
		gamma    float64
		backups  string
		down     []string
	)
	cmd := &cobra.Command{
		Use:   "balance",
		Short: "Policies on queueing servers, on the same request stream",
		Example: `  rotor sim balance --slow 0=3
  rotor sim balance --uneven --plot uneven.svg
  rotor sim balance --hot 0.45 --policies round_robin,p2c,sticky
  rotor sim balance --down 0=5s-15s --down 1=5s-15s --backup 4 --attempts 2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(); err != nil {
				return err
			}
			if uniform && (len(slow) > 0 || o.Uneven || o.Hot > 0) {
				return fmt.Errorf("--uniform: cannot be combined with --slow, --uneven or --hot")
			}
			if choices < 1 || choices > balance.MaxChoices {
				return fmt.Errorf("--choices: must be between 1 and %d (got %d)", balance.MaxChoices, choices)
			}
			if !(gamma >= 0) {
				return fmt.Errorf("--gamma: must be zero or positive (got %v)", gamma)
			}
			if !(o.LogNormal >= 0) {
				return fmt.Errorf("--lognormal: must be zero or positive (got %v)", o.LogNormal)
			}
			if policies != "" {
				o.Policies = strings.Split(policies, ",")
			}
			params := config.PolicyParams{Choices: choices, Gamma: &gamma}
			o.Factory = func(name string) (balance.Policy, error) { return config.NewPolicy(name, params) }
			for _, name := range o.Policies {
				if _, err := o.Factory(name); err != nil {
					return fmt.Errorf("--policies: %w", err)
				}
			}
			if o.Hot < 0 || o.Hot > 1 {
				return fmt.Errorf("--hot: must be between 0 and 1 (got %v)", o.Hot)
			}
			for _, s := range slow {
				n, sd, err := parseSlow(s)
				if err != nil {
					return err
				}
				if n >= o.Servers {
					return fmt.Errorf("--slow: %q: server %d is not one of 0..%d", s, n, o.Servers-1)
				}
				if o.Slow == nil {
					o.Slow = map[int]sim.Slowdown{}
				}
				o.Slow[n] = sd
			}
			if o.Rules.Attempts < 1 {
				return fmt.Errorf("--attempts: must be between 1 and 10 (got %d)", o.Rules.Attempts)
			}
			if err := o.Rules.Validate(); err != nil {
				return fmt.Errorf("--%w", err)
			}
			if backups != "" {
				for _, part := range strings.Split(backups, ",") {
					n, err := strconv.Atoi(strings.TrimSpace(part))
					if err != nil || n < 0 || n >= o.Servers {
						return fmt.Errorf("--backup: %q is not a server in 0..%d", part, o.Servers-1)
					}
					o.Backups = append(o.Backups, n)
				}
			}
			for _, d := range down {
				n, w, err := parseDown(d)
				if err != nil || n >= o.Servers {
					return fmt.Errorf("--down: %q is not SERVER=FROM-TO with a server in 0..%d, e.g. 0=10s-20s", d, o.Servers-1)
				}
				if o.Down == nil {
					o.Down = map[int]sim.Window{}
				}
				o.Down[n] = w
			}
			if trace != "" {
				fh, err := os.Open(trace)
				if err != nil {
					return fmt.Errorf("--trace: %w", err)
				}
				defer fh.Close()
				if o.Trace, err = sim.ParseTrace(fh); err != nil {
					return fmt.Errorf("--trace: %s: %w", trace, err)
				}
			}
			for name, v := range map[string]int{"--servers": o.Servers, "--workers": o.Workers, "--requests": o.Requests} {
				if v < 1 {
					return fmt.Errorf("%s: must be at least 1 (got %d)", name, v)
				}
			}
			if !(o.Load > 0) {
				return fmt.Errorf("--load: must be positive (got %v)", o.Load)
			}
			if o.Service <= 0 {
				return fmt.Errorf("--service: must be positive (got %v)", o.Service)
			}
			o.Seed = f.seed
			ctx, cancel := interruptible(cmd)
			defer cancel()
			var finish func()
			o.Progress, finish = progress(cmd, "simulating requests")
			rep, err := sim.Balance(ctx, o)
			finish()
			if err != nil {
				return err
			}
			if f.plot != "" {
				labels := make([]string, len(rep.Results))
				mean, p99 := make([]float64, len(rep.Results)), make([]float64, len(rep.Results))
				for i, r := range rep.Results {
					labels[i], mean[i], p99[i] = r.Policy, float64(r.Mean)/1e6, float64(r.P99)/1e6
				}
				if err := sim.BarChart(f.plot, "balance: "+rep.Condition, "latency (ms)", labels,
					[]sim.Series{{Name: "mean", Values: mean}, {Name: "p99", Values: p99}}); err != nil {
					return err
				}
			}
			return f.emit(cmd, rep, func(w io.Writer) error { return writeBalanceTable(w, rep, o) })
		},
	}
	cmd.Flags().StringVar(&policies, "policies", strings.Join(sim.DefaultPolicies, ","), "policies to compare, comma-separated")
	cmd.Flags().IntVar(&o.Servers, "servers", 5, "servers")
	cmd.Flags().IntVar(&o.Workers, "workers", 1, "workers per server")
	cmd.Flags().DurationVar(&o.Service, "service", 10*time.Millisecond, "mean service time of a request of cost 1")
	cmd.Flags().Float64Var(&o.Load, "load", 0.7, "offered load, as a share of the nominal capacity")
	cmd.Flags().IntVar(&o.Requests, "requests", 200000, "requests per policy")
	cmd.Flags().BoolVar(&uniform, "uniform", false, "identical servers and requests (the default condition)")
	cmd.Flags().StringArrayVar(&slow, "slow", nil, "SERVER=FACTOR[@FROM-TO]: make a server FACTOR times slower, for the run or a window of it, e.g. 0=200@15s-45s (repeatable)")
	cmd.Flags().BoolVar(&o.Uneven, "uneven", false, "request cost varies 10x")
	cmd.Flags().Float64Var(&o.Hot, "hot", 0, "share of requests from one user (sticky by user)")
	cmd.Flags().Float64Var(&o.LogNormal, "lognormal", 0, "log-normal service times with this sigma (default exponential)")
	cmd.Flags().StringVar(&trace, "trace", "", "replay a trace file of time,key,cost lines instead of Poisson arrivals")
	cmd.Flags().IntVar(&choices, "choices", 2, "p2c and peak_ewma: random choices")
	cmd.Flags().Float64Var(&gamma, "gamma", balance.DefaultGamma, "scored: exponent on scores")
	cmd.Flags().IntVar(&o.Rules.Attempts, "attempts", 1, "tries per request: a failed try goes again to another server, as in rotor serve")
	cmd.Flags().Float64Var(&o.Rules.Budget, "budget", 0.2, "retries allowed, as a share of requests")
	cmd.Flags().StringVar(&backups, "backup", "", "servers (comma-separated) that take requests only while no other is available")
	cmd.Flags().StringArrayVar(&down, "down", nil, "SERVER=FROM-TO: the server fails every request (503) in that window, e.g. 0=10s-20s (repeatable)")
	cmd.Flags().Float64Var(&o.Rules.PanicThreshold, "panic", 0, "panic mode: below this share of healthy servers, spread over all")
	cmd.Flags().DurationVar(&o.Rules.SlowStart, "slow-start", 0, "a server that comes back ramps up over this window")
	return cmd
}

// parseSlow parses SERVER=FACTOR, or SERVER=FACTOR@FROM-TO for a slow
// spell: 0=3, 0=200@15s-45s.
func parseSlow(s string) (int, sim.Slowdown, error) {
	bad := fmt.Errorf("--slow: %q is not SERVER=FACTOR or SERVER=FACTOR@FROM-TO, e.g. 0=3 or 0=200@15s-45s", s)
	i, spec, ok := strings.Cut(s, "=")
	factor, span, windowed := strings.Cut(spec, "@")
	n, err1 := strconv.Atoi(i)
	x, err2 := strconv.ParseFloat(factor, 64)
	if !ok || err1 != nil || err2 != nil || n < 0 || !(x > 0) || math.IsInf(x, 0) {
		return 0, sim.Slowdown{}, bad
	}
	sd := sim.Slowdown{Factor: x}
	if windowed {
		var ok bool
		if sd.From, sd.To, ok = parseSpan(span); !ok {
			return 0, sim.Slowdown{}, bad
		}
	}
	return n, sd, nil
}

// parseSpan parses FROM-TO, two durations with 0 <= FROM < TO: 10s-20s.
func parseSpan(s string) (from, to time.Duration, ok bool) {
	a, b, cut := strings.Cut(s, "-")
	f, err1 := time.ParseDuration(a)
	t, err2 := time.ParseDuration(b)
	if !cut || err1 != nil || err2 != nil || f < 0 || t <= f {
		return 0, 0, false
	}
	return f, t, true
}

// parseDown parses SERVER=FROM-TO, e.g. 0=10s-20s.
func parseDown(s string) (int, sim.Window, error) {
	i, span, ok := strings.Cut(s, "=")
	n, err := strconv.Atoi(i)
	f, t, ok2 := parseSpan(span)
	if !ok || !ok2 || err != nil || n < 0 {
		return 0, sim.Window{}, fmt.Errorf("bad")
	}
	return n, sim.Window{From: f, To: t}, nil
}

func writeBalanceTable(w io.Writer, rep sim.BalanceReport, o sim.BalanceOptions) error {
	fmt.Fprintf(w, "balance: %s; %d servers x %d workers, %.0f req/s, %d requests per policy, seed %d\n\n",
		rep.Condition, rep.Servers, rep.Workers, rep.Rate, o.Requests, o.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	shares := make([]string, rep.Servers)
	for i := range shares {
		shares[i] = "s" + strconv.Itoa(i)
	}
	retries := ""
	if o.Rules.Attempts > 1 {
		retries = "retries\t"
	}
	fmt.Fprintf(tw, "policy\tmean ms\tp50 ms\tp99 ms\tp99.9 ms\tmax queue\tshare %% %s\tfailures\t%s\n", strings.Join(shares, "/"), retries)
	for _, r := range rep.Results {
		for i, s := range r.Share {
			shares[i] = strconv.FormatFloat(100*s, 'f', 0, 64)
		}
		if o.Rules.Attempts > 1 {
			retries = strconv.Itoa(r.Retries) + "\t"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\n", r.Policy, ms(r.Mean), ms(r.P50), ms(r.P99), ms(r.P999),
			r.MaxQueue, strings.Join(shares, "/"), r.Failures, retries)
	}
	return tw.Flush()
}

func parseInts(flag, s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not a whole number of at least 1", flag, part)
		}
		out = append(out, n)
	}
	return out, nil
}

func newSimBinsCmd(f *simFlags) *cobra.Command {
	var (
		o       sim.BinsOptions
		choices string
	)
	cmd := &cobra.Command{
		Use:     "bins",
		Short:   "Balls into bins: the fullest bin with one, two or d random choices",
		Example: "  rotor sim bins --bins 1000\n  rotor sim bins --bins 1000 --balls 100000 --choices 1,2,4",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(); err != nil {
				return err
			}
			var err error
			if o.Choices, err = parseInts("--choices", choices); err != nil {
				return err
			}
			for _, d := range o.Choices {
				if d > balance.MaxChoices {
					return fmt.Errorf("--choices: at most %d (got %d)", balance.MaxChoices, d)
				}
			}
			switch {
			case o.Bins < 2 || o.Bins > maxBins:
				return fmt.Errorf("--bins: must be between 2 and %d (got %d)", maxBins, o.Bins)
			case o.Balls < 0 || o.Balls > maxBalls:
				return fmt.Errorf("--balls: must be between 1 and %d (got %d)", maxBalls, o.Balls)
			case o.Trials < 1 || o.Trials > 1000:
				return fmt.Errorf("--trials: must be between 1 and 1000 (got %d)", o.Trials)
			}
			o.Seed = f.seed
			ctx, cancel := interruptible(cmd)
			defer cancel()
			rep, err := sim.Bins(ctx, o)
			if err != nil {
				return err
			}
			if f.plot != "" {
				labels := make([]string, len(rep.Rows))
				got, theory := make([]float64, len(rep.Rows)), make([]float64, len(rep.Rows))
				for i, r := range rep.Rows {
					labels[i], got[i], theory[i] = fmt.Sprintf("d=%d", r.Choices), r.MeanFullest, r.Theory
				}
				if err := sim.BarChart(f.plot, fmt.Sprintf("%d balls into %d bins: the fullest bin", rep.Balls, rep.Bins), "balls in the fullest bin",
					labels, []sim.Series{{Name: "simulated (mean)", Values: got}, {Name: "predicted (fluid limit)", Values: theory}}); err != nil {
					return err
				}
			}
			return f.emit(cmd, rep, func(w io.Writer) error {
				fmt.Fprintf(w, "bins: %d balls into %d bins, %d trials, seed %d\n\n", rep.Balls, rep.Bins, rep.Trials, o.Seed)
				tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
				fmt.Fprintf(tw, "choices\tfullest (mean)\tmin\tmax\tpredicted\t\n")
				for _, r := range rep.Rows {
					fmt.Fprintf(tw, "%d\t%.2f\t%d\t%d\t%.0f\t\n", r.Choices, r.MeanFullest, r.MinFullest, r.MaxFullest, r.Theory)
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().IntVar(&o.Bins, "bins", 1000, "bins (n)")
	cmd.Flags().IntVar(&o.Balls, "balls", 0, "balls (m); default n")
	cmd.Flags().StringVar(&choices, "choices", "1,2,3", "random choices to compare, comma-separated")
	cmd.Flags().IntVar(&o.Trials, "trials", 10, "trials averaged per row")
	return cmd
}

func newSimKeysCmd(f *simFlags) *cobra.Command {
	var (
		o      sim.KeysOptions
		algos  string
		change string
		vnodes int
	)
	cmd := &cobra.Command{
		Use:     "keys",
		Short:   "Membership changes on every placer: keys moved and the cache-miss storm",
		Example: "  rotor sim keys\n  rotor sim keys --change remove --nodes 100 --plot misses.svg",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(); err != nil {
				return err
			}
			o.Algos = strings.Split(algos, ",")
			for _, a := range o.Algos {
				if !slices.Contains(config.PlacerNames, a) {
					return fmt.Errorf("--algos: %q is not an algorithm (%s)", a, strings.Join(config.PlacerNames, ", "))
				}
			}
			switch change {
			case "all":
			case "add", "remove", "replace":
				o.Changes = []string{change}
			default:
				return fmt.Errorf("--change: %q is not add, remove, replace or all", change)
			}
			if vnodes < 1 {
				return fmt.Errorf("--vnodes: must be at least 1 (got %d)", vnodes)
			}
			switch {
			case o.Nodes < 2 || o.Nodes > 10_000:
				return fmt.Errorf("--nodes: must be between 2 and 10000 (got %d)", o.Nodes)
			case o.Keys < 1 || o.Keys > maxKeys:
				return fmt.Errorf("--keys: must be between 1 and %d (got %d)", maxKeys, o.Keys)
			case o.Seconds < 1 || o.Seconds > 3600:
				return fmt.Errorf("--seconds: must be between 1 and 3600 (got %d)", o.Seconds)
			case !(o.Rate >= 1) || o.Rate > 1e7:
				return fmt.Errorf("--rate: must be between 1 and 10000000 (got %v)", o.Rate)
			}
			o.Factory = func(algo string, nodes []placement.Node) (placement.Placer, error) {
				return config.NewPlacer(algo, nodes, config.PlacerParams{VNodes: vnodes})
			}
			o.Seed = f.seed
			ctx, cancel := interruptible(cmd)
			defer cancel()
			rep, err := sim.Keys(ctx, o)
			if err != nil {
				return err
			}
			if f.plot != "" {
				var series []sim.Series
				first := rep.Rows[0].Change
				x := make([]float64, len(rep.Rows[0].MissesPerSecond))
				for i := range x {
					x[i] = float64(i + 1)
				}
				for _, r := range rep.Rows {
					if r.Change != first {
						continue
					}
					v := make([]float64, len(r.MissesPerSecond))
					for i, m := range r.MissesPerSecond {
						v[i] = float64(m)
					}
					series = append(series, sim.Series{Name: r.Algo, Values: v})
				}
				if err := sim.LineChart(f.plot, fmt.Sprintf("cache misses after %s (%d nodes, %d keys, %.0f req/s)", first, rep.Nodes, rep.Keys, rep.Rate),
					"seconds after the change", "misses per second", x, series); err != nil {
					return err
				}
			}
			return f.emit(cmd, rep, func(w io.Writer) error {
				fmt.Fprintf(w, "keys: %d nodes, %d keys, %.0f requests/s after the change, seed %d\n\n", rep.Nodes, rep.Keys, rep.Rate, o.Seed)
				tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
				fmt.Fprintf(tw, "change\talgo\tmoved\tideal\tmisses 1st s\t10th s\ttotal misses\t99%% warm after\t\n")
				for _, r := range rep.Rows {
					tenth := 0
					if len(r.MissesPerSecond) >= 10 {
						tenth = r.MissesPerSecond[9]
					}
					warm := "never"
					if r.Warm >= 0 {
						warm = strconv.Itoa(r.Warm) + " s"
					}
					fmt.Fprintf(tw, "%s\t%s\t%.2f%%\t%.2f%%\t%d\t%d\t%d\t%s\t\n", r.Change, r.Algo, 100*r.Moved, 100*r.Ideal,
						r.MissesPerSecond[0], tenth, r.TotalMisses, warm)
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&algos, "algos", strings.Join(config.PlacerNames, ","), "placers to compare")
	cmd.Flags().IntVar(&o.Nodes, "nodes", 10, "nodes before the change")
	cmd.Flags().IntVar(&o.Keys, "keys", 100000, "keys")
	cmd.Flags().Float64Var(&o.Rate, "rate", 10000, "requests per second after the change")
	cmd.Flags().IntVar(&o.Seconds, "seconds", 60, "seconds to watch after the change")
	cmd.Flags().StringVar(&change, "change", "all", "add, remove, replace or all")
	cmd.Flags().IntVar(&vnodes, "vnodes", placement.DefaultVNodes, "ring and bounded: points per node")
	return cmd
}

func newSimRotationCmd(f *simFlags) *cobra.Command {
	var (
		o        sim.RotationOptions
		routes   []string
		policies string
	)
	cmd := &cobra.Command{
		Use:   "rotation",
		Short: "Article 001's routes: round robin against the health-scored policy",
		Long: `Simulated routes, by default three: "fast" (200 ms) is blocked with 403s for
the middle third of the run, "slow" (1.5 s) never fails, "flaky" (400 ms)
answers 503 for 10 s in every minute. Round robin, the control, against the
scored policy with and without the breaker, at several gammas and decays.

--route NAME=LATENCY sets up routes of your own (repeat it), each with
optional settings after commas: fail=RATE fails that share of requests at
random; block=FROM-TO answers 403 in that window; bursts=SPAN/PERIOD answers
503 for SPAN in every PERIOD. --policies picks what to compare:
round_robin (the control, with no breaker) and scored, or scored:gamma=G.

wasted: requests sent to a route inside one of its block or burst windows;
before open: those sent before the route's breaker opened in that window (at
most the threshold, 3, plus what was already on its way). recovery: the
longest time from the end of a window to that route's next success.`,
		Example: `  rotor sim rotation
  rotor sim rotation --duration 10m --rate 50 --plot rotation.svg
  rotor sim rotation --route slow=2.65s --route direct=150ms --duration 4s --rate 5 --policies round_robin,scored`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(); err != nil {
				return err
			}
			if o.Duration < 3*time.Second {
				return fmt.Errorf("--duration: must be at least 3s (got %v)", o.Duration)
			}
			if !(o.Rate > 0) {
				return fmt.Errorf("--rate: must be positive (got %v)", o.Rate)
			}
			if n := o.Duration.Seconds() * o.Rate; n > maxBalls {
				return fmt.Errorf("--rate: %.0f requests over --duration is more than %d", n, maxBalls)
			}
			for _, spec := range routes {
				r, err := parseRoute(spec, o.Duration)
				if err != nil {
					return err
				}
				for _, have := range o.Routes {
					if have.Name == r.Name {
						return fmt.Errorf("--route: %q names route %s twice", spec, r.Name)
					}
				}
				o.Routes = append(o.Routes, r)
			}
			if policies != "" {
				for _, p := range strings.Split(policies, ",") {
					v, err := rotationVariant(p)
					if err != nil {
						return err
					}
					o.Variants = append(o.Variants, v)
				}
			}
			o.Seed = f.seed
			ctx, cancel := interruptible(cmd)
			defer cancel()
			var finish func()
			o.Progress, finish = progress(cmd, "simulating requests")
			rep, err := sim.Rotation(ctx, o)
			finish()
			if err != nil {
				return err
			}
			if f.plot != "" {
				if err := rotationChart(f.plot, rep); err != nil {
					return err
				}
			}
			return f.emit(cmd, rep, func(w io.Writer) error { return writeRotationTable(w, rep, o) })
		},
	}
	cmd.Flags().DurationVar(&o.Duration, "duration", 180*time.Second, "virtual length of the run")
	cmd.Flags().Float64Var(&o.Rate, "rate", 20, "requests per second")
	cmd.Flags().StringArrayVar(&routes, "route", nil, "NAME=LATENCY[,fail=RATE][,block=FROM-TO][,bursts=SPAN/PERIOD]: a route of your own (repeatable)")
	cmd.Flags().StringVar(&policies, "policies", "", "what to compare, comma-separated: round_robin, scored, scored:gamma=G (default: several gammas and decays)")
	return cmd
}

// parseRoute reads NAME=LATENCY[,fail=RATE][,block=FROM-TO][,bursts=SPAN/PERIOD].
func parseRoute(spec string, d time.Duration) (sim.Server, error) {
	bad := func(why string) (sim.Server, error) {
		return sim.Server{}, fmt.Errorf("--route: %q: %s", spec, why)
	}
	parts := strings.Split(spec, ",")
	name, lat, ok := strings.Cut(parts[0], "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return bad("want NAME=LATENCY, e.g. slow=1.5s")
	}
	latency, err := time.ParseDuration(strings.TrimSpace(lat))
	if err != nil || latency <= 0 {
		return bad("the latency must be a positive duration, e.g. 1.5s")
	}
	r := sim.Server{Name: name, Latency: latency}
	for _, opt := range parts[1:] {
		key, val, _ := strings.Cut(strings.TrimSpace(opt), "=")
		switch key {
		case "fail":
			x, err := strconv.ParseFloat(val, 64)
			if err != nil || !(x >= 0 && x <= 1) {
				return bad("fail must be a share between 0 and 1")
			}
			r.ErrorRate = x
		case "block":
			from, to, ok := parseSpan(val)
			if !ok {
				return bad("block must be FROM-TO, e.g. 60s-120s")
			}
			r.Windows = append(r.Windows, sim.Block(from, to))
		case "bursts":
			span, period, ok := strings.Cut(val, "/")
			sp, err1 := time.ParseDuration(span)
			pe, err2 := time.ParseDuration(period)
			if !ok || err1 != nil || err2 != nil || sp <= 0 || pe <= sp {
				return bad("bursts must be SPAN/PERIOD with SPAN shorter than PERIOD, e.g. 10s/60s")
			}
			r.Windows = append(r.Windows, sim.Bursts(pe-sp, sp, pe, d)...)
		default:
			return bad(fmt.Sprintf("%q is not a setting (fail, block, bursts)", key))
		}
	}
	return r, nil
}

// rotationVariant reads a --policies entry: round_robin, scored or
// scored:gamma=G.
func rotationVariant(spec string) (sim.RotationVariant, error) {
	spec = strings.TrimSpace(spec)
	if spec == "round_robin" {
		return sim.RotationVariant{Label: "round_robin (control)", Policy: "round_robin"}, nil
	}
	pol, err := benchFactory(spec)
	sc, ok := pol.(*balance.Scored)
	if err != nil || !ok {
		return sim.RotationVariant{}, fmt.Errorf("--policies: %q is not round_robin, scored or scored:gamma=G", spec)
	}
	return sim.RotationVariant{Label: fmt.Sprintf("scored γ=%g", sc.Gamma()), Policy: "scored", Gamma: sc.Gamma(), Breaker: true}, nil
}

func writeRotationTable(w io.Writer, rep sim.RotationReport, o sim.RotationOptions) error {
	fmt.Fprintf(w, "rotation: routes %s; %v at %.0f req/s, seed %d\n\n", describeRoutes(o.Routes, rep.Duration), rep.Duration, rep.Rate, o.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "policy\trequests\tsuccess\tmean ok s\tp95 ok s\tshare %% %s\twasted\tbefore open\trecovery\t\n", strings.Join(rep.Routes, "/"))
	for _, r := range rep.Rows {
		rec := "never"
		if r.Recovery >= 0 {
			rec = r.Recovery.Round(10 * time.Millisecond).String()
		}
		shares := make([]string, len(r.Share))
		for i, x := range r.Share {
			shares[i] = fmt.Sprintf("%.0f", 100*x)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f%%\t%.3f\t%.3f\t%s\t%d\t%d\t%s\t\n", r.Label, r.Requests, 100*r.SuccessRate,
			r.Mean.Seconds(), r.P95.Seconds(), strings.Join(shares, "/"), r.Wasted, r.WastedBeforeOpen, rec)
	}
	return tw.Flush()
}

// describeRoutes is the heading's account of the routes.
func describeRoutes(routes []sim.Server, d time.Duration) string {
	if routes == nil {
		return fmt.Sprintf("fast (200ms, blocked %v-%v), slow (1.5s), flaky (400ms, 503 bursts)", d/3, 2*d/3)
	}
	parts := make([]string, len(routes))
	for i, r := range routes {
		p := fmt.Sprintf("%s (%v", r.Name, r.Latency)
		if r.ErrorRate > 0 {
			p += fmt.Sprintf(", fails %.0f%%", 100*r.ErrorRate)
		}
		if len(r.Windows) > 0 {
			p += fmt.Sprintf(", %d failure windows", len(r.Windows))
		}
		parts[i] = p + ")"
	}
	return strings.Join(parts, ", ")
}

// rotationChart draws the success rate and the mean latency of successes
// side by side, each on its own axis.
func rotationChart(file string, rep sim.RotationReport) error {
	labels := make([]string, len(rep.Rows))
	succ, lat, p95 := make([]float64, len(rep.Rows)), make([]float64, len(rep.Rows)), make([]float64, len(rep.Rows))
	for i, r := range rep.Rows {
		labels[i], succ[i], lat[i], p95[i] = r.Label, 100*r.SuccessRate, r.Mean.Seconds(), r.P95.Seconds()
	}
	return sim.SavePanels(file,
		sim.Panel{Title: "rotation: success rate", YLabel: "requests that succeeded (%)", Labels: labels,
			Series: []sim.Series{{Name: "success rate", Values: succ}}},
		sim.Panel{Title: "latency of successes", YLabel: "seconds", Labels: labels,
			Series: []sim.Series{{Name: "mean", Values: lat}, {Name: "p95", Values: p95}}})
}
