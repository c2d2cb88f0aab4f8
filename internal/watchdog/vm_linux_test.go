package watchdog_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/polis-os/polis/internal/watchdog"
	"github.com/polis-os/polis/launch/vm"
	"github.com/polis-os/polis/launch/vm/vmtest"
	"github.com/polis-os/polis/node/pid1"
)

// What the guest prints on the console, and the timeouts it arms.
const (
	vmMarker = "WATCHDOG-VM:"
	// disarmedMarker: armed with guestShortTimeout and disarmed at once,
	// the watchdog let the machine run for twice that.
	disarmedMarker = vmMarker + " disarmed"
	// armedMarker starts the line with what the driver and the kernel
	// say of the watchdog armed with guestTimeout (armedLine).
	armedMarker = vmMarker + " armed"
	// fedMarker: fed every second for guestFeedFor, longer than its
	// timeout, the watchdog let the machine run; the guest then gives
	// it guestLastTimeout, as PID 1's halt does, and stops feeding it.
	fedMarker = vmMarker + " fed"
	// failedMarker: the guest could not do its part; the rest of the
	// line says why, and it powers off.
	failedMarker = vmMarker + " failed"

	guestShortTimeout = 5 * time.Second
	guestTimeout      = 10 * time.Second
	guestFeedFor      = 15 * time.Second
	guestLastTimeout  = 4 * time.Second
)

// armedLine is what the guest prints of its armed watchdog: the
// driver's name, the timeout it took, and the kernel's view of both in
// sysfs (the timeout, and the watchdog core's stop_on_reboot, which
// pid1.ModuleParameters set).
func armedLine(identity string, timeout time.Duration, sysfsTimeout, stopOnReboot string) string {
	return fmt.Sprintf("%s: %q, timeout %v; sysfs: timeout %s, stop_on_reboot %s", armedMarker, identity, timeout, sysfsTimeout, stopOnReboot)
}

func init() { asInit = guestMain }

// guestMain is the test binary as a VM's PID 1: mount what the driver
// needs, load the image's modules as PID 1 does, then show that a
// disarmed watchdog stays quiet, that a fed one does not fire, and that
// an armed one left alone resets the machine, which the host sees as
// qemu's WATCHDOG event.
func guestMain() {
	for _, mnt := range []struct{ dir, fs string }{{"/proc", "proc"}, {"/sys", "sysfs"}, {"/dev", "devtmpfs"}} {
		os.MkdirAll(mnt.dir, 0o755)
		if err := unix.Mount(mnt.fs, mnt.dir, mnt.fs, 0, ""); err != nil && err != unix.EBUSY {
			guestFailed(fmt.Errorf("mounting %s: %w", mnt.dir, err))
		}
	}
	if _, err := pid1.LoadModules(pid1.ModuleListPath); err != nil {
		guestFailed(err)
	}
	d, err := watchdog.Open(watchdog.DevicePath, guestShortTimeout)
	if err != nil {
		guestFailed(err)
	}
	if err := d.Disarm(); err != nil {
		guestFailed(err)
	}
	time.Sleep(2 * guestShortTimeout)
	fmt.Printf("%s %v ago; the machine still runs\n", disarmedMarker, 2*guestShortTimeout)

	if d, err = watchdog.Open(watchdog.DevicePath, guestTimeout); err != nil {
		guestFailed(err)
	}
	fmt.Println(armedLine(d.Identity(), d.Timeout(), guestSysfs("/sys/class/watchdog/watchdog0/timeout"), guestSysfs("/sys/module/watchdog/parameters/stop_on_reboot")))
	ctx, cancel := context.WithTimeout(context.Background(), guestFeedFor)
	d.Run(ctx, time.Second, func(err error) { fmt.Printf("%s %v\n", vmMarker, err) })
	cancel()
	if err := d.SetTimeout(guestLastTimeout); err != nil {
		guestFailed(err)
	}
	fmt.Printf("%s for %v; now timeout %v (sysfs %s), fed no more\n", fedMarker, guestFeedFor, d.Timeout(), guestSysfs("/sys/class/watchdog/watchdog0/timeout"))
	for {
		time.Sleep(time.Hour) // not select{}: the runtime would call that a deadlock and exit
	}
}

// guestSysfs is a sysfs attribute's value, or what went wrong reading it.
func guestSysfs(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(string(b))
}

func guestFailed(err error) {
	fmt.Printf("%s: %v\n", failedMarker, err)
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	for {
		time.Sleep(time.Hour)
	}
}

// TestWatchdogResetsAHungMachine boots the node image's kernel under
// qemu, with an i6300esb as every node machine has (launch/vm), and this
// test binary as init (guestMain), which drives the watchdog as PID 1
// does: the real driver, the real device, qemu's reset. The guest says
// how far it got on the console.
func TestWatchdogResetsAHungMachine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	m := vmtest.Boot(ctx, t, "watchdog", vm.Config{Address: netip.MustParsePrefix("10.98.0.1/24"), NoTPM: true})
	// A reset before any of these lines ends qemu, and the wait fails
	// with the console's tail.
	if _, err := m.WaitConsole(ctx, disarmedMarker); err != nil {
		t.Fatal(err)
	}
	line, err := m.WaitConsole(ctx, armedMarker)
	if err != nil {
		t.Fatal(err)
	}
	secs := func(d time.Duration) string { return fmt.Sprint(int(d.Seconds())) }
	if want := armedLine("i6300ESB timer", guestTimeout, secs(guestTimeout), "0"); !strings.HasSuffix(line, want) {
		t.Errorf("the armed watchdog:\n%s\nwant it to end\n%s", line, want)
	}
	line, err = m.WaitConsole(ctx, fedMarker)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("now timeout %v (sysfs %s)", guestLastTimeout, secs(guestLastTimeout)); !strings.Contains(line, want) {
		t.Errorf("the watchdog's last timeout:\n%s\nwant %q", line, want)
	}
	stopped := time.Now()
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	console, _ := os.ReadFile(m.ConsoleLog())
	if !m.WatchdogFired() {
		t.Fatalf("qemu exited without a WATCHDOG event; the console:\n%s", console)
	}
	t.Logf("the watchdog reset the machine %v after the guest stopped feeding it (timeout %v); the console:\n%s",
		time.Since(stopped).Round(100*time.Millisecond), guestLastTimeout, console)
}
