package pid1

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/polis-os/polis/internal/mountinfo"
	"github.com/polis-os/polis/localstorage"
)

// Machine is a booted node machine.
type Machine struct {
	// Address is the node's cluster address, with its prefix.
	Address netip.Prefix
	// AgentArgs are the agent's flags from the kernel command line
	// (AgentFlags), as command-line arguments: --lease-ttl=5s ...
	AgentArgs []string
	// StorageRoot is the root of localstorage's layout.
	StorageRoot string
	// System says whether the machine has a system disk, mounted
	// read-only at SystemRoot: the agent then runs Kubernetes from it.
	System bool
	// DiskBench is the mode of DiskBenchParameter, "" without it: the
	// agent then measures the data disk instead of running.
	DiskBench string
	// DiskBenchStart is when the benchmark starts measuring
	// (DiskBenchStartParameter); zero: at once.
	DiskBenchStart time.Time
	// DataSealing says how the data disk's key is sealed: "tpm",
	// "software" (protects nothing against a copy of the disk), or
	// DataSealingNone for a plain disk from before sealing.
	DataSealing string

	logf     func(format string, args ...any)
	opts     BootOptions
	mounts   []string                // mounted storage, in mount order
	mapped   bool                    // the data disk's dm-crypt mapping exists
	data     *DataDisk               // nil for a plain data disk
	tpm      *localstorage.TPMSealer // nil without a TPM
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
// steps). logf prints to the console. On the initramfs' rootfs it does
// not return: it moves to a tmpfs root and executes /init again, and the
// second run, on the new root, prepares the machine.
func Boot(logf func(format string, args ...any), opts BootOptions) (*Machine, error) {
	start := time.Now()
	step := func(format string, args ...any) {
		logf("polis: [%6.2fs] "+format, append([]any{time.Since(start).Seconds()}, args...)...)
	}
	m := &Machine{StorageRoot: StorageRoot, logf: logf, opts: opts, requests: make(chan Action, 1)}
	if _, err := switchRootIfNeeded(logf); err != nil {
		return nil, err
	}
	if err := mountEarly(); err != nil {
		return nil, err
	}
	step("mounted sys, dev, dev/pts, dev/shm, run, tmp, cgroup2; / shared")
	if err := writeEtc(); err != nil {
		return nil, err
	}
	n, err := LoadModules(ModuleListPath)
	if err != nil {
		return nil, err
	}
	step("loaded %d kernel modules", n)
	dog := armWatchdog(logf)
	step("%s", dog)
	m.prepareTPM()
	if err := setSysctls(sysctls); err != nil {
		return nil, err
	}
	ctrls, err := setUpCgroups()
	if err != nil {
		return nil, err
	}
	cgroup, err := ownCgroup()
	if err != nil {
		return nil, err
	}
	step("cgroup2: the agent in %s, controllers %s delegated", cgroup, strings.Join(ctrls, " "))
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return nil, fmt.Errorf("reading the kernel command line: %w", err)
	}
	if m.Address, m.AgentArgs, err = parseCommandLine(string(cmdline)); err != nil {
		return nil, err
	}
	if m.DiskBench, m.DiskBenchStart, err = diskBenchMode(string(cmdline)); err != nil {
		return nil, err
	}
	step("kernel command line: address %v, agent flags %q", m.Address, m.AgentArgs)
	if err := setHostname(m.Address.Addr()); err != nil {
		return nil, err
	}
	nic, err := setUpNetwork(m.Address)
	if err != nil {
		return nil, err
	}
	step("network: lo and %s up, %v", nic, m.Address)
	go reapOrphans()
	// Before the disks: a data disk bound to its cluster may wait for a
	// curator, and the power button must work meanwhile.
	go m.watchPowerButton()
	disks, err := waitForDisks()
	if err != nil {
		return nil, err
	}
	if err := m.mountStorage(disks, step); err != nil {
		m.unmountAll()
		return nil, err
	}
	step("storage mounted under %s", m.StorageRoot)
	sysDev, sysID, err := m.mountSystem(disks)
	if err != nil {
		m.unmountAll()
		return nil, err
	}
	m.System = sysDev != ""
	// What the summary says is read back from the kernel's mount table,
	// not assumed from the calls above.
	root, system, err := checkMounts(sysDev, sysID)
	if err == nil {
		err = probePivotRoot("/run")
	}
	if err != nil {
		m.unmountAll()
		return nil, err
	}
	logf("%s root %s (not rootfs; pivot_root tried: works); %s; cgroup2 controllers %s delegated, the agent in %s; %d modules, %d sysctls; %s",
		PreparedMessage, root.FSType, system, strings.Join(ctrls, " "), cgroup, n, len(sysctls), dog)
	return m, nil
}

// checkMounts reads the mount table and checks what Boot made of it: the
// root is a real mount (pivot_root works), and the system disk, if the
// machine has one (sysDev), is mounted read-only at SystemRoot. It
// returns the root's mount and the system disk's part of the summary.
func checkMounts(sysDev, sysID string) (mountinfo.Mount, string, error) {
	mounts, err := mountinfo.ReadFile(mountinfo.Path)
	if err != nil {
		return mountinfo.Mount{}, "", err
	}
	root, ok := rootMount(mounts)
	if !ok {
		return mountinfo.Mount{}, "", fmt.Errorf("mountinfo: nothing is mounted at /")
	}
	if err := pivotRootAllowed(root); err != nil {
		return mountinfo.Mount{}, "", err
	}
	if !strings.Contains(root.Optional, "shared:") {
		return mountinfo.Mount{}, "", fmt.Errorf("the root is not a shared mount (%q): kubelet needs shared mount propagation", root.Optional)
	}
	if sysDev == "" {
		return root, "no system disk", nil
	}
	i := slices.IndexFunc(mounts, func(m mountinfo.Mount) bool { return m.MountPoint == SystemRoot })
	if i < 0 {
		return mountinfo.Mount{}, "", fmt.Errorf("the system disk %s is not in the mount table at %s", sysDev, SystemRoot)
	}
	sm := mounts[i]
	if !slices.Contains(strings.Split(sm.Options, ","), "ro") {
		return mountinfo.Mount{}, "", fmt.Errorf("the system disk is mounted at %s with %q, not read-only", SystemRoot, sm.Options)
	}
	return root, fmt.Sprintf("system disk %s (%s, %s, ID %.12s) on %s", sm.Source, sm.FSType, strings.Split(sm.Options, ",")[0], sysID, SystemRoot), nil
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
		if k == DiskBenchParameter || k == DiskBenchStartParameter {
			continue // diskBenchMode's
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
		// One argument, --NAME=VALUE: the flag package takes a
		// boolean flag's value only so (--recover-single-member true
		// would leave "true" behind as a stray argument).
		args = append(args, "--"+name+"="+v)
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

// diskBenchMode is the value of DiskBenchParameter on the command line, ""
// without it, and of DiskBenchStartParameter.
func diskBenchMode(cmdline string) (mode string, start time.Time, err error) {
	for f := range strings.FieldsSeq(cmdline) {
		if v, ok := strings.CutPrefix(f, DiskBenchParameter+"="); ok {
			if v != DiskBenchDefault && v != DiskBenchNoWorkqueue && v != DiskBenchZeroedJournal {
				return "", time.Time{}, fmt.Errorf("kernel command line: %s=%q: want %s, %s or %s", DiskBenchParameter, v, DiskBenchDefault, DiskBenchNoWorkqueue, DiskBenchZeroedJournal)
			}
			mode = v
		}
		if v, ok := strings.CutPrefix(f, DiskBenchStartParameter+"="); ok {
			sec, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return "", time.Time{}, fmt.Errorf("kernel command line: %s=%q: want seconds since 1970", DiskBenchStartParameter, v)
			}
			start = time.Unix(sec, 0)
		}
	}
	return mode, start, nil
}
