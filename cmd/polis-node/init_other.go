//go:build !linux

package main

import (
	"fmt"
	"os"
)

// runAsInit: only Linux machines boot the node image.
func runAsInit() {
	fmt.Fprintln(os.Stderr, "polis-node: running as PID 1 is supported on Linux only")
	os.Exit(2)
}
