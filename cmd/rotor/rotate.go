package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/bench"
	"github.com/rotor-lb/rotor/config"
	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/proxy/forward"
	"github.com/rotor-lb/rotor/server"
	"github.com/rotor-lb/rotor/sim"
)

func newFetchCmd() *cobra.Command {
	var (
		path, pool string
		allow      []string
		policy     string
		body       bool
		insecure   bool
	)
	cmd := &cobra.Command{
		Use:   "fetch URL",
		Short: "Fetch a URL through the route rotator and say which route carried it",
		Long: `Fetch URL over the routes of a config's forward pool, exactly as rotor
serve's forward listener would send it (its policy, retries and budget,
backups, guard), or over the direct route without --config, and print the
route that carried it, the status, the latency and the size. With --body
the body goes to standard output and that line to standard error.

Private, loopback and metadata targets are refused: allow them with the
listener's allow_targets in the config, or --allow without one.`,
		Example: "  rotor fetch https://example.com/ --config examples/routes.yaml\n" +
			"  rotor fetch --allow 127.0.0.0/8 --insecure --body https://127.0.0.1:8443/",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tr, closeRuntime, err := fetchTransport(path, pool, policy, allow, insecure)
			if err != nil {
				return err
			}
			defer closeRuntime()
			req, err := http.NewRequestWithContext(cmd.Context(), http.MethodGet, args[0], nil)
			if err != nil {
				return fmt.Errorf("URL: %w", err)
			}
			start := time.Now()
			resp, route, err := tr.RoundTripRoute(req)
			if err != nil {
				return fetchError(route, err, path != "")
			}
			defer resp.Body.Close()
			dst, summary := io.Discard, cmd.OutOrStdout()
			if body {
				dst, summary = cmd.OutOrStdout(), cmd.ErrOrStderr() // the body alone on standard output
			}
			n, err := io.Copy(dst, resp.Body)
			if err != nil {
				return fmt.Errorf("reading the body over route %s: %v", route, err)
			}
			fmt.Fprintf(summary, "route %s\tstatus %d\tlatency %v\tbytes %d\n", route, resp.StatusCode, time.Since(start).Round(time.Millisecond), n)
			return nil
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "a config with a forward listener whose routes to use")
	cmd.Flags().StringVar(&pool, "pool", "", "the route pool to use (default: the first forward listener's)")
	cmd.Flags().StringArrayVar(&allow, "allow", nil, "CIDR to allow although private or loopback (repeatable; without --config)")
	cmd.Flags().StringVar(&policy, "policy", "", "policy (default: the pool's, or scored)")
	cmd.Flags().BoolVar(&body, "body", false, "write the body to standard output")
	cmd.Flags().BoolVar(&insecure, "insecure", false, "accept any certificate from the target (a test server's); without --config")
	return cmd
}

// fetchError says why a fetch failed, with the route when one was picked
// and what to do when the target was refused.
func fetchError(route string, err error, withConfig bool) error {
	msg := err.Error()
	if route != "" {
		msg = "over route " + route + ": " + msg
	}
	if errors.Is(err, forward.ErrForbiddenTarget) {
		if withConfig {
			msg += " (a private, loopback or metadata address: the forward listener's allow_targets can allow it)"
		} else {
			msg += " (a private, loopback or metadata address: --allow CIDR allows it)"
		}
	}
	return fmt.Errorf("fetch %s", msg)
}

// fetchTransport is the transport rotor fetch sends through: the forward
// listener's of the config's runtime, or the direct route.
func fetchTransport(path, pool, policy string, allow []string, insecure bool) (*forward.Transport, func(), error) {
	if path != "" {
		switch {
		case len(allow) > 0:
			return nil, nil, fmt.Errorf("--allow: with --config, the listener's allow_targets say what may be reached")
		case policy != "":
			return nil, nil, fmt.Errorf("--policy: with --config, the pool's policy is used; set it in the file")
		case insecure:
			return nil, nil, fmt.Errorf("--insecure: with --config, a route's insecure_skip_verify says so")
		}
		return server.ForwardTransport(path, os.Getenv, pool)
	}
	guard := &forward.Guard{}
	for _, c := range allow {
		p, err := config.ParsePrefix(c)
		if err != nil {
			return nil, nil, fmt.Errorf("--allow: %w", err)
		}
		guard.Allow = append(guard.Allow, p)
	}
	if policy == "" {
		policy = "scored"
	}
	p, err := config.NewPolicy(policy, config.PolicyParams{})
	if err != nil {
		return nil, nil, fmt.Errorf("--policy: %w", err)
	}
	direct, err := forward.NewRoute(forward.RouteOptions{Name: "direct", URL: "direct://", Guard: guard, InsecureSkipVerify: insecure})
	if err != nil {
		return nil, nil, err
	}
	tr, err := forward.NewTransport([]*forward.Route{direct}, forward.Options{Policy: p})
	if err != nil {
		return nil, nil, err
	}
	return tr, tr.CloseIdleConnections, nil
}

type benchFlags struct {
	path, pool  string
	routes      string
	requests    int
	concurrency int
	policies    string
	asJSON      bool
	seed        uint64
}

func newBenchCmd() *cobra.Command {
	f := &benchFlags{}
	cmd := &cobra.Command{
		Use:   "bench [URL]",
		Short: "Send the same requests through several policies over the same routes",
		Long: `Send --requests requests per policy to URL over the routes of a config's
forward pool, every policy at the same time through its own pool, and print
article 001's table: policy, requests, success rate, mean and p95 latency
of successes, share per route, and requests wasted on failing routes (with
those sent before the route's breaker opened).

Without --config it starts the demo's routes and target on loopback.
round_robin runs as the control: blind, with no breaker.`,
		Example: "  rotor bench --requests 400\n  rotor bench --config examples/routes.yaml --policies round_robin,scored https://example.com/",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.requests < 1 || f.concurrency < 1 {
				return fmt.Errorf("--requests and --concurrency: must be at least 1")
			}
			o := bench.Options{Requests: f.requests, Concurrency: f.concurrency, Seed: f.seed,
				Policies: strings.Split(f.policies, ","), Factory: benchFactory}
			for _, p := range o.Policies {
				if _, err := benchFactory(p); err != nil {
					return fmt.Errorf("--policies: %w", err)
				}
			}
			if f.path != "" {
				cfg, err := config.Load(f.path, os.Getenv)
				if err != nil {
					return err
				}
				routes, pc, err := server.RouteOptions(cfg, f.pool)
				if err != nil {
					return fmt.Errorf("--config: %s: %w", f.path, err)
				}
				o.Routes, o.Health = routes, pc.HealthConfig()
				if len(args) == 0 {
					return fmt.Errorf("URL: required with --config")
				}
				o.URL = args[0]
			} else {
				dm, err := bench.StartDemo(30*time.Second, f.seed)
				if err != nil {
					return err
				}
				defer dm.Close()
				o.Routes, o.URL = dm.Routes, dm.Target.URL+"/page"
				if len(args) > 0 {
					o.URL = args[0]
				}
			}
			if f.routes != "" {
				keep := map[string]bool{}
				for _, n := range strings.Split(f.routes, ",") {
					keep[n] = true
				}
				var kept []forward.RouteOptions
				for _, r := range o.Routes {
					if keep[r.Name] {
						kept = append(kept, r)
						delete(keep, r.Name)
					}
				}
				if len(keep) > 0 || len(kept) == 0 {
					return fmt.Errorf("--routes: %q names a route that is not there", f.routes)
				}
				o.Routes = kept
			}
			pr, finish := progress(cmd, "requests")
			o.Tick = countTicks(pr, int64(f.requests*len(o.Policies)))
			rep, err := bench.Run(cmd.Context(), o)
			finish()
			if err != nil {
				return err
			}
			if f.asJSON {
				return writeJSON(cmd.OutOrStdout(), rep)
			}
			return writeBenchTable(cmd.OutOrStdout(), rep)
		},
	}
	cmd.Flags().StringVar(&f.path, "config", "", "a config with a forward listener whose routes to use")
	cmd.Flags().StringVar(&f.pool, "pool", "", "the route pool to use")
	cmd.Flags().StringVar(&f.routes, "routes", "", "only these routes, comma-separated")
	cmd.Flags().IntVar(&f.requests, "requests", 200, "requests per policy")
	cmd.Flags().IntVar(&f.concurrency, "concurrency", 8, "requests in flight per policy")
	cmd.Flags().StringVar(&f.policies, "policies", "round_robin,scored", "policies to compare")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print JSON")
	cmd.Flags().Uint64Var(&f.seed, "seed", 1, "random seed")
	return cmd
}

// countTicks turns ticks, each counting the requests of its own second,
// into the running total a progress bar wants.
func countTicks(pr sim.Progress, total int64) func(bench.Tick) {
	var done int64
	return func(t bench.Tick) {
		for _, p := range t.Policies {
			done += int64(p.Requests)
		}
		pr(min(done, total), total)
	}
}

// benchFactory builds a policy from NAME or NAME:gamma=G (scored with
// another exponent), so one run can compare settings.
func benchFactory(spec string) (balance.Policy, error) {
	name, opt, ok := strings.Cut(spec, ":")
	params := config.PolicyParams{}
	if ok {
		v, found := strings.CutPrefix(opt, "gamma=")
		g, err := strconv.ParseFloat(v, 64)
		if !found || err != nil {
			return nil, fmt.Errorf("%q: the only setting is gamma=NUMBER", spec)
		}
		params.Gamma = &g
	}
	return config.NewPolicy(name, params)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func writeBenchTable(w io.Writer, rep bench.Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "policy\trequests\tok\tmean\tp95\tper route %%\twasted\tbefore open\t\n")
	for _, r := range rep.Rows {
		shares := make([]string, len(rep.Routes))
		for i, name := range rep.Routes {
			shares[i] = fmt.Sprintf("%.0f", 100*r.Share[name])
		}
		label := r.Policy
		if bench.IsControl(r.Policy) {
			label += " (control)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f%%\t%.3fs\t%.3fs\t%s\t%d\t%d\t\n", label, r.Requests, 100*r.SuccessRate,
			r.Mean.Seconds(), r.P95.Seconds(), strings.Join(shares, "/"), r.Wasted, r.BeforeOpen)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, `
ok: requests that succeeded. mean, p95: latency of those that succeeded.
per route: share of requests sent to %s.
wasted: requests that failed on a route; before open: those of them sent while
the route's breaker was still closed (about its threshold, 3, per outage: what
a breaker cannot save). The control has no breaker, so all it wastes is before.
`, strings.Join(rep.Routes, "/"))
	return err
}

// conclusion is the one line a newcomer can repeat: how the scored
// policy did against the control.
func conclusion(rep bench.Report) string {
	var rr, sc *bench.Row
	for i := range rep.Rows {
		switch rep.Rows[i].Policy {
		case "round_robin":
			rr = &rep.Rows[i]
		case "scored":
			sc = &rep.Rows[i]
		}
	}
	if rr == nil || sc == nil || rr.Mean <= 0 || sc.Mean <= 0 {
		return ""
	}
	return fmt.Sprintf("In short: scored answered %.1f%% of requests in %.2fs on average; round robin %.1f%% in %.2fs.\n"+
		"Scored was %.1fx faster and wasted %d requests on failing routes to round robin's %d.",
		100*sc.SuccessRate, sc.Mean.Seconds(), 100*rr.SuccessRate, rr.Mean.Seconds(),
		rr.Mean.Seconds()/sc.Mean.Seconds(), sc.Wasted, rr.Wasted)
}

func newDemoCmd() *cobra.Command {
	var (
		duration time.Duration
		seed     uint64
		asJSON   bool
		rate     float64
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Round robin against health-scored rotation, on routes started here",
		Long: `Start, in this process on loopback, a target site and four routes: "fast",
which starts refusing with 403 a third of the way in and lets traffic
through again later; "slow", which never fails but adds 2.5 s; "flaky",
which fails in bursts and recovers; and "direct". Then send the same
requests through round robin (the control: blind, no breaker) and the
scored policy at its defaults, both at the same time; print a line a second
of what each is doing, the table at the end, what happened (which breaker
opened when, and when recovery was noticed), and the result in a line.
The breakers' cooldown is a sixth of the run (15 s in rotor serve), so
recoveries fit in it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if duration < 3*time.Second {
				return fmt.Errorf("--duration: must be at least 3s (got %v)", duration)
			}
			if !(rate > 0) {
				return fmt.Errorf("--rate: must be positive")
			}
			dm, err := bench.StartDemo(duration, seed)
			if err != nil {
				return err
			}
			defer dm.Close()
			out := cmd.OutOrStdout()
			policies := []string{"round_robin", "scored"}
			if !asJSON {
				fmt.Fprintf(out, "rotor demo: the same requests, %.0f a second for %v, through two policies at once:\n", rate, duration)
				fmt.Fprintln(out, "  round_robin (the control) takes each route in turn and has no breaker;")
				fmt.Fprintln(out, "  scored weighs each route by its success and latency, and has a breaker.")
				fmt.Fprintf(out, "routes, to the target at %s/page:\n", dm.Target.URL)
				for _, s := range dm.Specs {
					fmt.Fprintf(out, "  %-7s %s\n", s.Name, describe(s))
				}
				fmt.Fprintf(out, "  %-7s straight to the target (%v)\n\n", "direct", bench.TargetLatency)
				fmt.Fprint(out, tickHeader(policies, dm.Routes))
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			o := bench.Options{
				URL: dm.Target.URL + "/page", Routes: dm.Routes,
				Policies: policies, Factory: benchFactory,
				Duration: duration, Rate: rate, Concurrency: 128, Seed: seed,
				Health: health.Config{Cooldown: max(duration/6, 2*time.Second)},
			}
			if !asJSON {
				o.Tick = func(t bench.Tick) {
					if line := tickLine(t, dm.Routes); line != "" {
						fmt.Fprintln(out, line)
					}
				}
			}
			rep, err := bench.Run(ctx, o)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(out, rep)
			}
			fmt.Fprintln(out)
			if err := writeBenchTable(out, rep); err != nil {
				return err
			}
			fmt.Fprintln(out, "\nwhat happened:")
			for _, e := range rep.Events {
				fmt.Fprintf(out, "  %5.1fs  %-7s %-6s %s\n", e.At.Seconds(), e.Policy, e.Route, e.What)
			}
			if len(rep.Events) == 0 {
				fmt.Fprintln(out, "  no breaker moved")
			}
			if c := conclusion(rep); c != "" {
				fmt.Fprintf(out, "\n%s\n", c)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&duration, "duration", 15*time.Second, "how long to run")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "random seed (route jitter and the policies' draws)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON, without the live lines")
	cmd.Flags().Float64Var(&rate, "rate", 25, "requests per second per policy")
	return cmd
}

func describe(s bench.RouteSpec) string {
	d := fmt.Sprintf("adds %v", s.Latency)
	if s.BlockFor > 0 {
		d += fmt.Sprintf("; refuses with 403 from %.1fs to %.1fs", s.BlockFrom.Seconds(), (s.BlockFrom + s.BlockFor).Seconds())
	}
	if s.BurstEvery > 0 {
		d += fmt.Sprintf("; fails with 503 for %.1fs every %.1fs", s.BurstFor.Seconds(), s.BurstEvery.Seconds())
	}
	return d
}

// The live lines' columns: per policy, the share of requests that
// succeeded that second, their mean latency, requests per route, and the
// routes whose breaker is open.
const (
	shareWidth = 11 // "12/ 3/ 4/ 5" for four routes
	openWidth  = 12
)

func tickHeader(policies []string, routes []forward.RouteOptions) string {
	var b strings.Builder
	names := make([]string, len(routes))
	for i, r := range routes {
		names[i] = r.Name
	}
	fmt.Fprintf(&b, "each second: ok = share that succeeded, mean = their latency, per route = requests\n")
	fmt.Fprintf(&b, "sent to %s, open = routes whose breaker is open\n\n", strings.Join(names, "/"))
	names1, names2 := "time", "    "
	for _, p := range policies {
		if bench.IsControl(p) {
			p += " (control)"
		}
		names1 += fmt.Sprintf("  | %-*s", 4+1+6+2+shareWidth+2+openWidth, p)
		names2 += fmt.Sprintf("  | %4s %6s  %-*s  %-*s", "ok", "mean", shareWidth, "per route", openWidth, "open")
	}
	b.WriteString(strings.TrimRight(names1, " ") + "\n" + strings.TrimRight(names2, " ") + "\n")
	return b.String()
}

// tickLine is one second of the live output, or "" when no policy saw a
// request finish that second.
func tickLine(t bench.Tick, routes []forward.RouteOptions) string {
	any := false
	for _, p := range t.Policies {
		any = any || p.Requests > 0
	}
	if !any {
		return ""
	}
	line := fmt.Sprintf("%3.0fs", t.Elapsed.Seconds())
	for _, p := range t.Policies {
		if p.Requests == 0 {
			line += fmt.Sprintf("  | %4s %6s  %-*s  %-*s", "-", "-", shareWidth, "", openWidth, "")
			continue
		}
		shares := make([]string, len(routes))
		for i, r := range routes {
			shares[i] = fmt.Sprintf("%2d", p.Share[r.Name])
		}
		open := append([]string(nil), p.Open...)
		sort.Strings(open)
		o := strings.Join(open, ",")
		if len(o) > openWidth {
			o = o[:openWidth-1] + "+"
		}
		line += fmt.Sprintf("  | %3.0f%% %6s  %-*s  %-*s", 100*float64(p.OK)/float64(p.Requests), shortDuration(p.Mean),
			shareWidth, strings.Join(shares, "/"), openWidth, o)
	}
	return strings.TrimRight(line, " ")
}

// shortDuration prints a latency in at most six characters: 152ms, 1.55s.
func shortDuration(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}
