package vm

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/polis-os/polis/node/pid1"
)

func testConfig(t *testing.T) Config {
	return Config{
		Name:      "t",
		Kernel:    "vmlinuz",
		Initramfs: "initramfs",
		Dir:       shortTempDir(t),
		Address:   netip.MustParsePrefix("10.77.0.2/24"),
		QEMU:      "false", // exits at once: these tests look at what Start prepares
	}
}

// TestAgentFlags: the agent's flags go to the kernel command line as
// polis.NAME=VALUE; a flag PID 1 would refuse is refused here first.
func TestAgentFlags(t *testing.T) {
	cfg := testConfig(t)
	cfg.AgentFlags = []string{"lease-ttl=3s", "heartbeat-interval=1s"}
	c, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.Index(c.args(), "-append")
	cmdline := c.args()[i+1]
	for _, want := range []string{"polis.address=10.77.0.2/24", "polis.lease-ttl=3s", "polis.heartbeat-interval=1s"} {
		if !slices.Contains(strings.Fields(cmdline), want) {
			t.Errorf("kernel command line %q lacks %s", cmdline, want)
		}
	}
	for _, bad := range []string{"lease-ttl", "lease-ttl=", "storage=/", "lease-ttl=3s panic=0"} {
		cfg.AgentFlags = []string{bad}
		if _, err := cfg.withDefaults(); err == nil || !strings.Contains(err.Error(), "agent flag") {
			t.Errorf("agent flag %q: %v, want it refused", bad, err)
		}
	}
}

// TestTCGParametersUnderTCGOnly: under TCG the guest kernel is told to
// leave SSSE3 alone (its generic ChaCha20 is faster there) and to spare
// itself mitigations for an emulated CPU that does not speculate; under
// KVM it is told neither, where the vector code runs natively and the
// host's CPU does speculate.
func TestTCGParametersUnderTCGOnly(t *testing.T) {
	for _, tc := range []struct {
		accel string
		want  bool
	}{{"", true}, {"tcg", true}, {"kvm", false}} {
		cfg := testConfig(t)
		cfg.Accel = tc.accel
		c, err := cfg.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		cmdline := c.args()[slices.Index(c.args(), "-append")+1]
		for _, p := range []string{"clearcpuid=ssse3", "mitigations=off"} {
			if got := slices.Contains(strings.Fields(cmdline), p); got != tc.want {
				t.Errorf("accel %q: kernel command line %q: has %s %v, want %v", tc.accel, cmdline, p, got, tc.want)
			}
		}
	}
}

// TestParametersFile: parameters go to fw_cfg from a file Start writes
// (0600); a boot without parameters removes it and gives no fw_cfg, so a
// register ticket given once does not stay on the host.
func TestParametersFile(t *testing.T) {
	cfg := testConfig(t)
	cfg.Parameters = []byte("ticket")
	m, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.Wait(context.Background()) //nolint:errcheck // "false" fails, as it should
	p := filepath.Join(cfg.Dir, "parameters.pb")
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("parameters file: %v, %v; want it, 0600", fi, err)
	}
	if b, _ := os.ReadFile(p); string(b) != "ticket" {
		t.Errorf("parameters file holds %q", b)
	}
	if !slices.ContainsFunc(m.cfg.args(), func(a string) bool { return strings.Contains(a, "opt/polis/parameters") }) {
		t.Error("no fw_cfg for the parameters")
	}
	cfg.Parameters = nil
	m, err = Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.Wait(context.Background()) //nolint:errcheck
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("the parameters file is still there after a boot without parameters: %v", err)
	}
	if slices.ContainsFunc(m.cfg.args(), func(a string) bool { return strings.Contains(a, "fw_cfg") }) {
		t.Error("a boot without parameters still gets fw_cfg")
	}
}

// TestGuestRebooted: a reboot is told from a power-off by PID 1's halt
// line, the last one of the boot; without one, the guest said neither.
func TestGuestRebooted(t *testing.T) {
	for _, tc := range []struct {
		lines              []string
		reboot, poweredOff bool
	}{
		{[]string{"polis: machine ready", "polis: halting: reboot"}, true, false},
		{[]string{"polis: FATAL: no disk", "polis: halting: reboot in 10s"}, true, false},
		{[]string{"polis: halting: reboot", "polis: halting: power off"}, false, true},
		{[]string{"polis: halting: power off"}, false, true},
		{[]string{"Kernel panic - not syncing"}, false, false},
	} {
		m := &Machine{console: newConsole(), done: make(chan struct{})}
		m.console.lines = tc.lines
		if m.GuestRebooted() || m.GuestPoweredOff() {
			t.Errorf("%q: rebooted or powered off while qemu runs", tc.lines)
		}
		close(m.done)
		if got := m.GuestRebooted(); got != tc.reboot {
			t.Errorf("%q: GuestRebooted = %v, want %v", tc.lines, got, tc.reboot)
		}
		if got := m.GuestPoweredOff(); got != tc.poweredOff {
			t.Errorf("%q: GuestPoweredOff = %v, want %v", tc.lines, got, tc.poweredOff)
		}
	}
}

// TestSystemDiskArgs: the system disk is attached read-only with its
// serial, only when there is one; a missing file is refused before qemu
// starts.
func TestSystemDiskArgs(t *testing.T) {
	cfg := testConfig(t)
	c, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(c.args(), func(a string) bool { return strings.Contains(a, pid1.SerialSystem) }) {
		t.Error("a machine without a system disk gets one")
	}
	cfg.System = filepath.Join(cfg.Dir, "system.squashfs")
	if _, err := cfg.withDefaults(); err == nil || !strings.Contains(err.Error(), "system disk") {
		t.Errorf("a missing system disk: %v, want it refused", err)
	}
	if err := os.WriteFile(cfg.System, []byte("hsqs"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err = cfg.withDefaults(); err != nil {
		t.Fatal(err)
	}
	args := strings.Join(c.args(), " ")
	for _, want := range []string{"file=" + cfg.System + ",if=none,format=raw,readonly=on,id=system", "virtio-blk-pci,drive=system,serial=" + pid1.SerialSystem} {
		if !strings.Contains(args, want) {
			t.Errorf("qemu's arguments lack %q:\n%s", want, args)
		}
	}
}

// TestRestoreSnapshotArgs: a machine booted to restore gets the snapshot
// through fw_cfg under the name PID 1's agent reads, only then; a path
// qemu's option syntax cannot take is refused.
func TestRestoreSnapshotArgs(t *testing.T) {
	cfg := testConfig(t)
	c, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(c.args(), func(a string) bool { return strings.Contains(a, pid1.RestoreSnapshotFWCfg) }) {
		t.Error("a machine without a snapshot to restore gets one")
	}
	cfg.RestoreSnapshot = filepath.Join(cfg.Dir, "restore-snapshot.db")
	if c, err = cfg.withDefaults(); err != nil {
		t.Fatal(err)
	}
	if args, want := strings.Join(c.args(), " "), "-fw_cfg name=opt/polis/restore-snapshot,file="+cfg.RestoreSnapshot; !strings.Contains(args, want) {
		t.Errorf("qemu's arguments lack %q:\n%s", want, args)
	}
	cfg.RestoreSnapshot = filepath.Join(cfg.Dir, "a,b.db")
	if _, err := cfg.withDefaults(); err == nil || !strings.Contains(err.Error(), "comma") {
		t.Errorf("a snapshot path with a comma: %v, want it refused", err)
	}
}

// TestCPUsAndNIC: a machine gets DefaultCPUs unless given more, and a
// count qemu would refuse is refused here first; a NIC on a switch offers
// SwitchMTU (the guest's driver takes it), one without a peer offers none.
func TestCPUsAndNIC(t *testing.T) {
	cfg := testConfig(t)
	c, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	args := c.args()
	if i := slices.Index(args, "-smp"); i < 0 || args[i+1] != "1" {
		t.Errorf("qemu's arguments %q: want -smp 1 by default", args)
	}
	if a := strings.Join(args, " "); strings.Contains(a, "host_mtu") {
		t.Errorf("a NIC with no switch offers an MTU: %s", a)
	}
	cfg.CPUs, cfg.SwitchSocket = KubernetesCPUs, "/run/switch.sock"
	if c, err = cfg.withDefaults(); err != nil {
		t.Fatal(err)
	}
	args = c.args()
	if i := slices.Index(args, "-smp"); i < 0 || args[i+1] != "2" {
		t.Errorf("qemu's arguments %q: want -smp 2", args)
	}
	if a := strings.Join(args, " "); !strings.Contains(a, "virtio-net-pci,netdev=net0,romfile=,mac="+c.MAC+",host_mtu=9000") {
		t.Errorf("a NIC on a switch does not offer MTU %d: %s", SwitchMTU, a)
	}
	for _, bad := range []int{-1, 65} {
		cfg.CPUs = bad
		if _, err := cfg.withDefaults(); err == nil || !strings.Contains(err.Error(), "CPUs") {
			t.Errorf("%d CPUs: %v, want it refused", bad, err)
		}
	}
}

// fakeQEMU writes a shell script that stands in for qemu: it prints
// lines on its console, then runs then (a shell command).
func fakeQEMU(t *testing.T, lines []string, then string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	for _, l := range lines {
		fmt.Fprintf(&b, "echo '%s'\n", l)
	}
	b.WriteString(then + "\n")
	p := filepath.Join(t.TempDir(), "qemu")
	if err := os.WriteFile(p, []byte(b.String()), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestStuckHaltIsEnded: a machine whose guest said it was halting and
// whose qemu does not exit is ended HaltTimeout later, Wait says so, and
// the halt line still tells the reboot it was on its way to (launch boots
// it again); one that has not said so is left alone.
func TestStuckHaltIsEnded(t *testing.T) {
	cfg := testConfig(t)
	cfg.NoTPM = true
	cfg.HaltTimeout = 100 * time.Millisecond
	cfg.QEMU = fakeQEMU(t, []string{"polis: machine ready", pid1.RebootMessage}, "exec sleep 600")
	m, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.Wait(ctx); err == nil || !strings.Contains(err.Error(), "had not exited 100ms after the guest said it was halting") {
		t.Fatalf("a machine stuck in its halt: Wait: %v; want it ended, and said", err)
	}
	if !m.PlugPulled() || !m.GuestRebooted() {
		t.Errorf("a machine stuck in its reboot: PlugPulled %v, GuestRebooted %v; want both", m.PlugPulled(), m.GuestRebooted())
	}
	if b, _ := os.ReadFile(cfg.ConsoleLog()); !strings.Contains(string(b), "qemu has not exited: ending qemu") {
		t.Errorf("the console log does not say why qemu was ended:\n%s", b)
	}

	// Running, no halt line: qemu exits by itself, after more than
	// HaltTimeout.
	cfg.QEMU = fakeQEMU(t, []string{"polis: machine ready"}, "sleep 1")
	if m, err = Start(cfg); err != nil {
		t.Fatal(err)
	}
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if m.PlugPulled() {
		t.Error("a machine that never said it was halting was ended")
	}
}

// TestConsoleLongLine: a console line longer than the reader's buffer is
// kept in pieces, and what follows it is still read: a console that
// stopped being read would stall the guest on its serial port.
func TestConsoleLongLine(t *testing.T) {
	// Over 1 MiB: the longest line a bufio.Scanner took here once, after
	// which it stopped reading.
	long := strings.Repeat("x", 17*consoleMaxLine+7)
	c := newConsole()
	var log strings.Builder
	c.copy(strings.NewReader("first\n"+long+"\nlast\nno newline"), &log)
	if l, ok := c.last("last"); !ok || l != "last" {
		t.Errorf("the line after a long one: %q, %v", l, ok)
	}
	if _, ok := c.last("no newline"); !ok {
		t.Error("the last line without a newline was dropped")
	}
	if got := strings.Count(log.String(), "x"); got != len(long) {
		t.Errorf("the log holds %d of the long line's %d bytes", got, len(long))
	}
	if !c.closed {
		t.Error("the console is not closed at EOF")
	}
	if want := 1 + 18 + 2; len(c.lines) != want {
		t.Errorf("%d lines kept, want %d: the first, the long one in 18 pieces, and two more", len(c.lines), want)
	}
}
