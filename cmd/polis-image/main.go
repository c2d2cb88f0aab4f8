// Command polis-image builds the Polis node image: Debian's kernel and an
// initramfs with the node agent as /init and the kernel modules it needs,
// for qemu's -kernel and -initrd, and with --system DIR the read-only
// system disk (a squashfs of DIR, laid out like the node's /system). It
// prints each step; run again with nothing changed, it takes seconds.
//
//	go run ./cmd/polis-image [--out DIR] [--cache DIR] [--agent FILE] [--kernel-deb FILE] [--system DIR]
//
// It needs dpkg-deb (Debian) to unpack the kernel package, apt-get to
// fetch it unless --kernel-deb gives it, and Go to build the agent unless
// --agent gives it; no root. The Bazel build (//image:node_image) runs it
// with both given. The work is done by package launch/image.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/polis-os/polis/internal/cmdmain"
	"github.com/polis-os/polis/launch/image"
)

func main() { cmdmain.Run("polis-image", run) }

func run(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := cmdmain.FlagSet("polis-image", errOut)
	var (
		cfg     image.Config
		modules string
	)
	fs.StringVar(&cfg.OutDir, "out", "", "where to write vmlinuz and initramfs.cpio.gz (default: CACHE/out)")
	fs.StringVar(&cfg.CacheDir, "cache", "", "the cache for the kernel package and the agent (default: the user's cache directory + polis/image)")
	fs.StringVar(&cfg.Agent, "agent", "", "a prebuilt static polis-node (default: built from this repository)")
	fs.StringVar(&cfg.KernelDeb, "kernel-deb", "", "the kernel package's .deb, already fetched (default: apt-get download, once, into the cache)")
	fs.StringVar(&cfg.SystemDir, "system", "", "a directory laid out like the node's /system, to write the read-only system disk from (default: no system disk)")
	fs.StringVar(&modules, "modules", strings.Join(image.DefaultModules, ","), "the kernel modules wanted, comma-separated; their dependencies are added")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg.Modules = nil
	for m := range strings.SplitSeq(modules, ",") {
		if m = strings.TrimSpace(m); m != "" {
			cfg.Modules = append(cfg.Modules, m)
		}
	}
	if len(cfg.Modules) == 0 {
		return errors.New("--modules: name at least one module")
	}
	cfg.Progress = out
	img, err := image.Build(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "kernel:    %s\ninitramfs: %s\n", img.Kernel, img.Initramfs)
	if img.System != "" {
		fmt.Fprintf(out, "system:    %s (ID %.12s)\n", img.System, img.SystemID)
	}
	return nil
}
