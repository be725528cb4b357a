package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"

	"github.com/spf13/cobra"

	"github.com/rotor-lb/rotor/config"
	"github.com/rotor-lb/rotor/internal/gcfloor"
	"github.com/rotor-lb/rotor/internal/procs"
	"github.com/rotor-lb/rotor/server"
	"github.com/rotor-lb/rotor/shared"
)

func newServeCmd() *cobra.Command {
	var path, cpuProfile, allocProfile string
	cmd := &cobra.Command{
		Use:   "serve --config FILE",
		Short: "Run the HTTP reverse proxy and TCP proxy described by a config file",
		Long: `Serve the listeners, pools and admin API of a config file (docs/CONFIG.md).

SIGHUP or POST /admin/reload loads the file again: a bad file is refused and
the running config keeps serving. SIGTERM stops accepting, lets requests
and connections in flight finish up to each listener's shutdown timeout,
and exits 0.`,
		Example: "  rotor serve --config examples/web-p2c.yaml",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if path == "" {
				return fmt.Errorf("--config: required")
			}
			if os.Getenv("GOGC") == "" {
				// The heap may grow to heapFloor before the collector
				// runs at GOGC's pace (docs/CONFIG.md, "Memory"); a GOGC
				// set in the environment is the runtime's alone.
				defer gcfloor.Start(heapFloor, 100)()
			}
			if os.Getenv("GOMAXPROCS") == "" {
				// One P fewer at a time while rotor's cores are full
				// and its work fits (docs/CONFIG.md, "Cores"); a
				// GOMAXPROCS set in the environment is the runtime's
				// alone.
				defer procs.Start()()
			}
			if cpuProfile != "" {
				stop, err := startCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			if allocProfile != "" {
				f, err := os.Create(allocProfile)
				if err != nil {
					return fmt.Errorf("--alloc-profile: %w", err)
				}
				defer func() {
					runtime.GC() // the profile counts up to the last collection
					_ = pprof.Lookup("allocs").WriteTo(f, 0)
					f.Close()
				}()
			}
			s, err := server.New(path, os.Getenv, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			// What libraries log of their own goes to rotor's log, in its
			// format: the log package's (net/http's transport, say) and
			// the Redis client's.
			slog.SetDefault(s.Log())
			shared.LogTo(s.Log())
			return s.Run(context.Background())
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "the config file (YAML)")
	cmd.Flags().StringVar(&cpuProfile, "cpu-profile", "", "write a CPU profile (go tool pprof) of the whole run to this file")
	cmd.Flags().StringVar(&allocProfile, "alloc-profile", "", "write what the whole run allocated, sampled (go tool pprof -sample_index=alloc_space), to this file as rotor exits")
	return cmd
}

// heapFloor is the heap rotor serve lets grow before its collector keeps
// to GOGC's pace: a proxy's live heap is a few MB and its garbage comes
// with every request, so at GOGC 100 alone it collects tens of times a
// second (docs/BENCHMARKS.md, "A floor under the heap").
const heapFloor = 16 << 20

// startCPUProfile profiles the process into path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

func newCheckConfigCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "check-config FILE",
		Short: "Validate a config file without starting anything",
		Long: `Load, validate and build the config as rotor serve would (pools, routes,
transports, certificates), without binding or starting anything: a file
it accepts, serve starts with.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := server.Check(args[0], os.Getenv); err != nil {
				return err
			}
			f, err := config.Load(args[0], os.Getenv)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (%d listeners, %d pools)\n", args[0], len(f.Listeners), len(f.Pools))
			return nil
		},
	}
}
