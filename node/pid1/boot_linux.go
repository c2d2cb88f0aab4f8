package pid1

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Machine is a booted node machine.
type Machine struct {
	// Address is the node's cluster address, with its prefix.
	Address netip.Prefix
	// AgentArgs are the agent's flags from the kernel command line
	// (AgentFlags), as command-line arguments: --lease-ttl 5s ...
	AgentArgs []string
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
	if m.Address, m.AgentArgs, err = parseCommandLine(string(cmdline)); err != nil {
		return nil, err
	}
	step("kernel command line: address %v, agent flags %q", m.Address, m.AgentArgs)
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

// parseCommandLine finds polis.address=IP/PREFIX (required) and the
// agent's flags (polis.FLAG=VALUE, for AgentFlags) on the kernel command
// line; any other polis.* parameter is an error naming it.
func parseCommandLine(cmdline string) (netip.Prefix, []string, error) {
	var (
		addr netip.Prefix
		args []string
	)
	for f := range strings.FieldsSeq(cmdline) {
		k, v, _ := strings.Cut(f, "=")
		name, ok := strings.CutPrefix(k, ParameterPrefix)
		if !ok {
			continue
		}
		if k == AddressParameter {
			p, err := netip.ParsePrefix(v)
			if err != nil || !p.Addr().Is4() && !p.Addr().Is6() || p.Addr().IsUnspecified() {
				return netip.Prefix{}, nil, fmt.Errorf("kernel command line: %s=%q: want the node's address and prefix, e.g. 10.0.0.2/24", AddressParameter, v)
			}
			addr = p
			continue
		}
		if !slices.Contains(AgentFlags, name) {
			return netip.Prefix{}, nil, fmt.Errorf("kernel command line: unknown parameter %s: the node agent takes %s and %s%s", k, AddressParameter, ParameterPrefix, strings.Join(AgentFlags, ", "+ParameterPrefix))
		}
		if v == "" {
			return netip.Prefix{}, nil, fmt.Errorf("kernel command line: %s has no value (want %s=VALUE)", k, k)
		}
		args = append(args, "--"+name, v)
	}
	if !addr.IsValid() {
		return netip.Prefix{}, nil, fmt.Errorf("kernel command line: no %s=IP/PREFIX (have %q)", AddressParameter, strings.TrimSpace(cmdline))
	}
	return addr, args, nil
}

// Requests delivers power requests: the ACPI power button (power off) and
// Request (the node API's Reboot and PowerOff).
func (m *Machine) Requests() <-chan Action { return m.requests }

// ephemeralDir is the tmpfs for localstorage's ephemeral part.
func (m *Machine) ephemeralDir() string { return filepath.Join(m.StorageRoot, "ephemeral") }
