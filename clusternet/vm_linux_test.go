package clusternet

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/polis-os/polis/launch/vm"
	"github.com/polis-os/polis/launch/vm/vmtest"
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
	if _, err := pid1.LoadModules(pid1.ModuleListPath); err != nil {
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

// TestNetworkNamespacesInVM boots the node image's kernel with this test binary as init
// and checks that the namespace tests, WireGuard's included, passed there.
func TestNetworkNamespacesInVM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	m := vmtest.Boot(ctx, t, "clusternet", vm.Config{Address: netip.MustParsePrefix("10.99.0.1/24")})
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
