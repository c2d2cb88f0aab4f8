package pid1

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Machine is a booted node machine.
type Machine struct {
	// Address is the node's cluster address, with its prefix.
	Address netip.Prefix
	// StorageRoot is the root of localstorage's layout.
	StorageRoot string

	logf     func(format string, args ...any)
	mounts   []string // mounted storage, in mount order
	requests chan Action
}

// Action is what the machine does when the agent has stopped.
type Action int

const (
	// PowerOff turns the machine off.
	PowerOff Action = iota
	// Reboot restarts it.
	Reboot
)

func (a Action) String() string {
	if a == Reboot {
		return "reboot"
	}
	return "power off"
}

// Boot prepares the machine for the agent (see the package doc for the
// steps). logf prints to the console.
func Boot(logf func(format string, args ...any)) (*Machine, error) {
	start := time.Now()
	step := func(format string, args ...any) {
		logf("polis: [%6.2fs] "+format, append([]any{time.Since(start).Seconds()}, args...)...)
	}
	m := &Machine{StorageRoot: StorageRoot, logf: logf, requests: make(chan Action, 1)}
	if err := mountEarly(); err != nil {
		return nil, err
	}
	step("mounted proc, sys, dev, run, tmp")
	n, err := loadModules(ModuleListPath)
	if err != nil {
		return nil, err
	}
	step("loaded %d kernel modules", n)
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return nil, fmt.Errorf("reading the kernel command line: %w", err)
	}
	if m.Address, err = parseAddress(string(cmdline)); err != nil {
		return nil, err
	}
	nic, err := setUpNetwork(m.Address)
	if err != nil {
		return nil, err
	}
	step("network: lo and %s up, %v", nic, m.Address)
	go reapOrphans()
	if err := m.mountStorage(step); err != nil {
		m.unmountAll()
		return nil, err
	}
	go m.watchPowerButton()
	step("storage mounted under %s", m.StorageRoot)
	return m, nil
}

// parseAddress finds polis.address=IP/PREFIX on the kernel command line.
func parseAddress(cmdline string) (netip.Prefix, error) {
	for f := range strings.FieldsSeq(cmdline) {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k != AddressParameter {
			continue
		}
		p, err := netip.ParsePrefix(v)
		if err != nil || !p.Addr().Is4() && !p.Addr().Is6() || p.Addr().IsUnspecified() {
			return netip.Prefix{}, fmt.Errorf("kernel command line: %s=%q: want the node's address and prefix, e.g. 10.0.0.2/24", AddressParameter, v)
		}
		return p, nil
	}
	return netip.Prefix{}, fmt.Errorf("kernel command line: no %s=IP/PREFIX (have %q)", AddressParameter, strings.TrimSpace(cmdline))
}

// Requests delivers power requests: the ACPI power button (power off) and
// Request (the node API's Reboot and PowerOff).
func (m *Machine) Requests() <-chan Action { return m.requests }

// ephemeralDir is the tmpfs for localstorage's ephemeral part.
func (m *Machine) ephemeralDir() string { return filepath.Join(m.StorageRoot, "ephemeral") }
