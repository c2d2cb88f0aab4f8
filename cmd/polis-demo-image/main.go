// Command polis-demo-image builds the demo image (cmd/polis-demo, a static
// HTTP server) as an OCI image layout with launch/demoimage and prints its
// directory, for polis-launch --image demo=DIR:
//
//	go run ./cmd/polis-demo-image -o /tmp/demo-image
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/polis-os/polis/launch/demoimage"
)

func main() {
	out := flag.String("o", "demo-image", "the directory to write the OCI image layout to (replaced)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := demoimage.Build(ctx, "", *out); err != nil {
		fmt.Fprintln(os.Stderr, "polis-demo-image:", err)
		os.Exit(1)
	}
	fmt.Println(*out)
}
