// Command rotor is a load balancer that knows what its backends are doing,
// and the tools that show the trade-offs of balancing with numbers.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
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
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newDemoCmd(), newPlaceCmd(), newMovesCmd(), newSimCmd(), newServeCmd(), newCheckConfigCmd(), newFetchCmd(), newBenchCmd())
	return root
}
