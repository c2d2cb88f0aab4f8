package clusternet

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/polis-os/polis/launch/image"
	"github.com/polis-os/polis/launch/vm"
	"github.com/polis-os/polis/node/pid1"
)

// The host's kernel may lack WireGuard (this project's CI machine does), so
// TestNetworkNamespacesInVM runs the namespace tests inside a VM booting the node image's
// kernel, with this test binary as its init: the real module, loaded the
// way the node loads it, under the real reconciler.

// vmDoneMarker starts the line the guest prints when its tests ended.
const vmDoneMarker = "CLUSTERNET-VM: exit"

func init() { asInit = guestMain }

// requireWireGuard turns the WireGuard tests' skip into a failure: set in
// the VM, whose kernel must have it.
var requireWireGuard bool

// guestMain is the test binary as a VM's PID 1: mount what the tests need,
// load the image's modules, run the namespace tests, say how they ended
// and power off.
func guestMain(m *testing.M) {
	for _, mnt := range []struct{ dir, fs string }{{"/proc", "proc"}, {"/sys", "sysfs"}, {"/run", "tmpfs"}, {"/tmp", "tmpfs"}} {
		os.MkdirAll(mnt.dir, 0o755)
		if err := unix.Mount(mnt.fs, mnt.dir, mnt.fs, 0, ""); err != nil {
			fmt.Printf("mounting %s: %v\n", mnt.dir, err)
		}
	}
	code := 1
	if err := loadGuestModules(); err != nil {
		fmt.Println(err)
	} else {
		requireWireGuard = true
		profileKernel = true
		flag.Set("test.run", "^TestNetns")
		flag.Set("test.v", "true")
		// The WireGuard figures, which only a kernel with WireGuard gives
		// (docs/benchmarks.md).
		flag.Set("test.bench", "NewPeer|PodToPod")
		flag.Set("test.benchtime", "2s")
		flag.Set("test.benchmem", "true")
		code = m.Run()
	}
	fmt.Printf("%s %d\n", vmDoneMarker, code)
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {}
}

func loadGuestModules() error {
	b, err := os.ReadFile(pid1.ModuleListPath)
	if err != nil {
		return err
	}
	for _, path := range strings.Fields(string(b)) {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && err != unix.EEXIST {
			return fmt.Errorf("loading %s: %w", path, err)
		}
	}
	return nil
}

// TestNetworkNamespacesInVM boots the node image's kernel with this test binary as init
// and checks that the namespace tests, WireGuard's included, passed there.
func TestNetworkNamespacesInVM(t *testing.T) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("qemu-system-x86_64 is missing: %v", err)
		}
		t.Skip("qemu-system-x86_64 is not installed; skipping the VM test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "cnvm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	// This test binary, static, as the image's init.
	self := filepath.Join(dir, "clusternet.test")
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
		Agent: self, SourceDir: "..",
		OutDir: filepath.Join(cache, "polis", "image", "out-clusternet"),
	})
	if err != nil {
		t.Fatal(err)
	}
	m, err := vm.Start(vm.Config{
		Name: "clusternet", Kernel: img.Kernel, Initramfs: img.Initramfs,
		Dir: dir, Address: netip.MustParsePrefix("10.99.0.1/24"), QEMU: qemu,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Kill()
	line, err := m.WaitConsole(ctx, vmDoneMarker)
	if err != nil {
		t.Fatal(err)
	}
	console, _ := os.ReadFile(m.ConsoleLog())
	for _, want := range []string{"--- PASS: TestNetnsPlain", "--- PASS: TestNetnsWireGuard"} {
		if !strings.Contains(string(console), want) {
			t.Errorf("the guest's tests did not say %q", want)
		}
	}
	if !strings.HasSuffix(strings.TrimSpace(line), vmDoneMarker+" 0") || t.Failed() {
		t.Fatalf("the guest's tests failed (%s); its console:\n%s", line, console)
	}
	t.Logf("the guest's tests passed; its console:\n%s", console)
}
