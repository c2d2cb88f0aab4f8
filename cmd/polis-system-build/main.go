// Command polis-system-build builds the node's system tree (the contents of
// the read-only system disk: the Kubernetes bundle with kubelet, containerd,
// runc, the CNI plugins, mount and the pause image) with launch/systembuild:
//
//	go run ./cmd/polis-system-build [-o DIR] [-cache DIR]
//
// The first build on a machine compiles Kubernetes and containerd and takes
// a quarter of an hour or more (it reports progress every half minute);
// later ones take seconds. Without -o the tree goes where the tests look
// for it (systembuild.OutDirForTests), which is what scripts/test does
// before running the tests. It prints the tree's directory.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/polis-os/polis/launch/systembuild"
)

func main() {
	out := flag.String("o", systembuild.OutDirForTests(), "directory to build the system tree in")
	cache := flag.String("cache", "", "directory for downloads kept between builds (default: polis/system in the user's cache directory)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := (systembuild.Builder{CacheDir: *cache}).Build(ctx, *out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(*out)
}
