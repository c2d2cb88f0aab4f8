// Package vmtest boots a package's own test binary as the init of a
// qemu VM that runs the node image's kernel with the image's modules:
// for tests of what only a real kernel and real devices show (WireGuard
// in clusternet, the hardware watchdog in internal/watchdog), where the
// host's kernel lacks the module or the host has no such device.
//
// # The model
//
// The test binary is two programs. As a test process on the host it
// calls Boot, which builds the same package's test binary again (static,
// go test -c), puts it in an initramfs as /init beside the modules the
// node image carries (launch/image), and boots that under qemu
// (launch/vm). As the VM's PID 1 it finds itself with os.Getpid() == 1
// in its TestMain, does its part in the guest and prints on the console
// what the host side waits for (vm.Machine.WaitConsole).
//
// Only tests import it (internal/archcheck's TestKits).
package vmtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/polis-os/polis/launch/image"
	"github.com/polis-os/polis/launch/vm"
)

// Boot builds the test binary of the package in the working directory,
// an initramfs with it as init, and boots it with cfg, to which it adds
// the kernel, the initramfs, the directory and qemu; the machine is
// killed, and its directory removed, when the test ends. name names the
// cached initramfs (under the user's cache directory), so that packages
// do not rebuild each other's. Without qemu it skips the test, except
// under CI=true, where qemu must be there.
func Boot(ctx context.Context, t testing.TB, name string, cfg vm.Config) *vm.Machine {
	t.Helper()
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("qemu-system-x86_64 is missing: %v", err)
		}
		t.Skip("qemu-system-x86_64 is not installed; skipping the VM test")
	}
	// Short: the machine's unix sockets live in it.
	dir, err := os.MkdirTemp("", name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	self := filepath.Join(dir, name+".test")
	build := exec.CommandContext(ctx, "go", "test", "-c", "-trimpath", "-o", self, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the test binary: %v\n%s", err, out)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	img, err := image.Build(ctx, image.Config{
		Agent: self, SourceDir: ".",
		OutDir: filepath.Join(cache, "polis", "image", "out-"+name),
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Name, cfg.Kernel, cfg.Initramfs, cfg.Dir, cfg.QEMU = name, img.Kernel, img.Initramfs, dir, qemu
	m, err := vm.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Kill() })
	return m
}
