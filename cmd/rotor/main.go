// Command rotor is a load balancer that knows what its backends are doing,
// and the tools that show the trade-offs of balancing with numbers.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes one rotor command line and returns the process exit code.
// Every error is printed as one line, "rotor: ...", on stderr.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.Execute(); err != nil {
		fmt.Fprintf(stderr, "rotor: %v\n", err)
		return 1
	}
	return 0
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "rotor",
		Short:         "A load balancer that knows what its backends are doing",
		Version:       version(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("rotor {{.Version}}\n")
	root.AddCommand(newDemoCmd(), newPlaceCmd(), newMovesCmd(), newSimCmd(), newServeCmd(), newCheckConfigCmd(), newFetchCmd(), newBenchCmd(), newWebCmd())
	return root
}

// version says which rotor this is: the module version when installed
// with go install, else the commit it was built from (and whether the tree
// had changes), and the Go it was built with.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := bi.Main.Version
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+changes"
			}
		}
	}
	if (v == "" || v == "(devel)") && rev != "" {
		v = "commit " + rev[:min(12, len(rev))] + dirty
	}
	if v == "" {
		v = "(devel)"
	}
	return v + ", " + bi.GoVersion
}

// isTerminal reports whether r is a terminal (a person, not a pipe).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// isTerminalWriter reports whether w is a terminal.
func isTerminalWriter(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
