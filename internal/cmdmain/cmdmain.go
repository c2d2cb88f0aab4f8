// Package cmdmain is the main function of a Polis command written as a
// run function over its arguments and output streams (so that its tests
// call run itself): the context that Ctrl-C and SIGTERM end, and the one
// way such a command reports a failure, "name: error" and exit status 1.
// -h is no failure: the flag set has printed the help.
package cmdmain

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Run runs run with the command line's arguments, standard output and
// standard error, under a context that ends at Ctrl-C or SIGTERM, and
// exits 1 when it fails (see the package doc).
func Run(name string, run func(ctx context.Context, args []string, out, errOut io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if code := Report(name, err, os.Stderr); code != 0 {
		os.Exit(code)
	}
}

// Report prints err as command name's failure to errOut and returns the
// exit status: 0 for no error or flag.ErrHelp, 1 otherwise.
func Report(name string, err error, errOut io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(errOut, "%s: %v\n", name, err)
	return 1
}

// FlagSet is command name's flag set: parse errors and -h are returned
// (flag.ErrHelp), not exits, and its messages go to errOut.
func FlagSet(name string, errOut io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(errOut)
	return fs
}
