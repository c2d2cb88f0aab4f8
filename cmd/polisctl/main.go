// Command polisctl manages a Polis cluster as its owner; see package
// polisctl, which implements every command, or run polisctl --help.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/polis-os/polis/polisctl"
)

func main() {
	// Interrupting ends the running call, and node watch, cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := polisctl.Command().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "polisctl:", err)
		os.Exit(1)
	}
}
