// Command polis-kube-build builds the Kubernetes bundle (polis-kube, from
// the kubernetes/ module) with kube/bundle and prints its path:
//
//	go run ./cmd/polis-kube-build [-o DIR]
//
// The first build on a machine takes about 7 minutes on two idle cores (it
// reports progress every half minute); later ones come from Go's build
// cache in seconds. Without -o the bundle goes where the tests look for it
// (bundle.OutDirForTests), which is what scripts/test does before running
// the tests.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/polis-os/polis/kube/bundle"
)

func main() {
	out := flag.String("o", bundle.OutDirForTests(), "directory to put polis-kube in")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	path, err := bundle.Build(ctx, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(path)
}
