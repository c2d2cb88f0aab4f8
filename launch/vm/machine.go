package vm

import (
	"context"
	"errors"
	"fmt"

	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/polis-os/polis/localstorage"
	"github.com/polis-os/polis/node/pid1"
)

// Disk sizes of a new node. The files are sparse: a new node costs what
// its file systems hold, not these sizes.
const (
	ESPSize  = 64 << 20
	DataSize = 2 << 30
)

// Guest memory. DefaultMemoryMB runs the agent with its etcd and curator
// (a plain cluster). A node that runs Kubernetes needs more: the
// apiserver takes about 300 MB, kubelet and containerd about 150 MB, and
// the pods their own, hence KubernetesMemoryMB. qemu only takes from the
// host what the guest touches.
const (
	DefaultMemoryMB    = 256
	KubernetesMemoryMB = 1536
)

// Guest CPUs. One is enough for the agent alone. A node that runs
// Kubernetes gets two: under TCG each vCPU is a host thread (qemu's
// multi-threaded TCG), and with one the apiserver's, the kubelet's and the
// Pods' work all waits on a single emulated CPU; with two the whole
// Kubernetes VM suite runs in about three quarters of the time and the
// network between Pods at twice the throughput, even on a 2-core host
// (docs/benchmarks.md).
const (
	DefaultCPUs    = 1
	KubernetesCPUs = 2
	// MaxCPUs bounds Config.CPUs: more is an operator's typo.
	MaxCPUs = 64
)

// Config describes one node machine.
type Config struct {
	// Name names the machine in logs and errors.
	Name string
	// Kernel and Initramfs are the node image (launch/image).
	Kernel, Initramfs string
	// System is the image's read-only system disk (image.Image.System),
	// attached read-only with the serial pid1.SerialSystem; "" attaches
	// none. The machines of a launch share one file: qemu takes a shared
	// lock on a read-only image, which any number of readers may hold
	// (only a writer would be refused).
	System string
	// Dir holds the machine's disks (esp.img, data.img, made sparse and
	// blank on first start: the node formats them), its TPM's state
	// (TPMStateDir, unless NoTPM), its console log
	// (console.log, appended to on every boot), its parameters and its QMP
	// socket. The disks persist across boots.
	Dir string
	// Address is the node's cluster address and prefix.
	Address netip.Prefix
	// Parameters are the node parameters (binary NodeParameters), given
	// through fw_cfg from Dir/parameters.pb, which Start writes
	// atomically; nil gives none (a node that has joined needs none), and
	// Start removes that file, so that no register ticket stays behind.
	Parameters []byte
	// RestoreSnapshot, if set, is a file (an etcd snapshot) given to the
	// guest through fw_cfg as pid1.RestoreSnapshotFWCfg, for a boot that
	// restores a cluster onto the machine's fresh disks; qemu reads it
	// when it starts.
	RestoreSnapshot string
	// AgentFlags are node agent flags for the kernel command line, each
	// NAME=VALUE with NAME one of pid1.AgentFlags (lease-ttl=5s).
	AgentFlags []string
	// SwitchSocket is the unix socket of the virtual switch the NIC is
	// plugged into (Switch.Socket). Empty: a NIC with no peer.
	SwitchSocket string
	// MAC is the NIC's address; default derived from Address.
	MAC string
	// MemoryMB is the guest's memory; default DefaultMemoryMB. A node
	// that runs Kubernetes needs KubernetesMemoryMB.
	MemoryMB int
	// CPUs is the guest's vCPUs; default DefaultCPUs. A node that runs
	// Kubernetes is better off with KubernetesCPUs.
	CPUs int
	// Accel is qemu's accelerator; default "tcg" (see ProbeKVM).
	Accel string
	// QEMU is the qemu binary; default qemu-system-x86_64 from PATH.
	QEMU string
	// HaltTimeout is how long qemu has to exit after the guest's halt
	// line before the launcher ends it; default HaltTimeout.
	HaltTimeout time.Duration
	// NoTPM boots the machine without a TPM. By default it has a TPM
	// 2.0, emulated by swtpm with its state in Dir/TPMStateDir beside the
	// disks, with which the node seals its data disk's key and its
	// configuration: the disks alone, without that state, open nothing.
	NoTPM bool
	// SWTPM is the swtpm binary; default swtpm from PATH.
	SWTPM string
	// DiskBench, if set, boots the machine to measure its data disk
	// (pid1.DiskBenchParameter, one of its modes) instead of running
	// the agent; it powers off when done. For BenchmarkDataDisk.
	DiskBench string
	// DiskBenchStart, with DiskBench, is when the benchmark starts
	// measuring (pid1.DiskBenchStartParameter); zero: at once.
	DiskBenchStart time.Time
}

// Machine is one boot of a node machine: Start makes it, and it ends when
// qemu exits (power-off, reboot, or Kill). Boot it again with another
// Start on the same Config: the disks keep its state.
type Machine struct {
	cfg     Config
	cmd     *exec.Cmd
	console *console
	logFile *os.File
	started time.Time

	// exited is closed when qemu has exited, done once the TPM has
	// saved its state and the log is closed after that.
	exited  chan struct{}
	done    chan struct{}
	waitErr error
	// plugPulled is set when watchHalt killed qemu because the guest
	// had said it was halting and qemu had not exited HaltTimeout later.
	plugPulled atomic.Bool
	// watchdogFired is set when qemu reported that the guest's hardware
	// watchdog fired (watchEvents).
	watchdogFired atomic.Bool
}

// HaltTimeout is how long a machine has, from PID 1's halt line
// (pid1.HaltMessage), for qemu to exit: PID 1 syncs, unmounts and
// removes the data disk's mapping, and the guest kernel resets or powers
// off the machine, which ends qemu (-no-reboot). That takes seconds under
// TCG on a loaded host. A machine that has not gone HaltTimeout later is
// stuck on its way down (in the guest or in qemu), where no node API or
// power button reaches it any more; Start's watcher then ends qemu, as a
// machine's hardware watchdog would reset it, so that a reboot still
// boots it again (launch decides) rather than leave the node down for
// good.
const HaltTimeout = 90 * time.Second

// DefaultMAC is the NIC address a machine with addr gets by default: 52:54
// (qemu's prefix, locally administered unicast) and the address's last
// four bytes, so that a frame's source says which node sent it.
func DefaultMAC(addr netip.Addr) string {
	a := addr.As16()
	return fmt.Sprintf("52:54:%02x:%02x:%02x:%02x", a[12], a[13], a[14], a[15])
}

// qmpSocket is where qemu listens for QMP. Unix socket paths are short
// (108 bytes), hence a short name.
func (c *Config) qmpSocket() string { return filepath.Join(c.Dir, "qmp.sock") }

// ConsoleLog is the path of the machine's console log.
func (c *Config) ConsoleLog() string { return filepath.Join(c.Dir, "console.log") }

func (c *Config) withDefaults() (Config, error) {
	o := *c
	if o.Name == "" {
		o.Name = "node"
	}
	if o.Kernel == "" || o.Initramfs == "" {
		return o, fmt.Errorf("vm %s: Kernel and Initramfs are required (build them with launch/image)", o.Name)
	}
	if o.Dir == "" {
		return o, fmt.Errorf("vm %s: Dir is required", o.Name)
	}
	if o.System != "" {
		if strings.Contains(o.System, ",") {
			return o, fmt.Errorf("vm %s: the system disk's path %q has a comma, which qemu's -drive cannot take", o.Name, o.System)
		}
		if _, err := os.Stat(o.System); err != nil {
			return o, fmt.Errorf("vm %s: the system disk: %w", o.Name, err)
		}
	}
	if !o.Address.IsValid() {
		return o, fmt.Errorf("vm %s: Address is required", o.Name)
	}
	if o.RestoreSnapshot != "" && strings.Contains(o.RestoreSnapshot, ",") {
		return o, fmt.Errorf("vm %s: the snapshot's path %q has a comma, which qemu's -fw_cfg cannot take", o.Name, o.RestoreSnapshot)
	}
	if o.MemoryMB == 0 {
		o.MemoryMB = DefaultMemoryMB
	}
	if o.CPUs == 0 {
		o.CPUs = DefaultCPUs
	}
	if o.CPUs < 0 || o.CPUs > MaxCPUs {
		return o, fmt.Errorf("vm %s: %d CPUs: want 1 to %d", o.Name, o.CPUs, MaxCPUs)
	}
	if o.Accel == "" {
		o.Accel = "tcg"
	}
	if o.HaltTimeout <= 0 {
		o.HaltTimeout = HaltTimeout
	}
	if o.QEMU == "" {
		o.QEMU = "qemu-system-x86_64"
	}
	if o.SWTPM == "" {
		o.SWTPM = "swtpm"
	}
	if o.MAC == "" {
		o.MAC = DefaultMAC(o.Address.Addr())
	}
	for _, f := range o.AgentFlags {
		name, v, ok := strings.Cut(f, "=")
		if !ok || v == "" || strings.ContainsAny(v, " \t\n") || !slices.Contains(pid1.AgentFlags, name) {
			return o, fmt.Errorf("vm %s: agent flag %q: want NAME=VALUE, NAME one of %s, VALUE without spaces", o.Name, f, strings.Join(pid1.AgentFlags, ", "))
		}
	}
	if n := max(len(o.qmpSocket()), len(o.tpmSocket()), len(o.eventsSocket())); n > 100 {
		return o, fmt.Errorf("vm %s: the directory %s is too long for a unix socket path (%d bytes); use a shorter one", o.Name, o.Dir, n)
	}
	return o, nil
}

// args is qemu's command line. -nodefaults: no NIC or other devices we did
// not ask for (qemu would add a NIC with outbound NAT); -no-reboot and
// panic=-1: a guest reboot or panic ends qemu instead of looping or
// hanging, and the launcher decides what comes next.
func (c *Config) args() []string {
	a := []string{
		"-nodefaults", "-no-reboot", "-nographic",
		"-name", c.Name,
		"-accel", c.Accel,
		// Westmere: the oldest CPU model with AES-NI (and the SSSE3 and
		// PCLMULQDQ the kernel's aesni_intel uses beside it). The data
		// disk is encrypted with AES; under TCG the guest's table AES is
		// emulated instruction by instruction, while qemu runs AES-NI's
		// instructions as its own helpers (a first boot's format:
		// docs/benchmarks.md). qemu64 with +aes alone is not enough:
		// aesni_intel's self-test then hits PSHUFB (SSSE3), an invalid
		// opcode there.
		"-cpu", "Westmere",
		"-m", strconv.Itoa(c.MemoryMB),
		"-smp", strconv.Itoa(c.CPUs),
		"-kernel", c.Kernel,
		"-initrd", c.Initramfs,
		"-append", strings.Join(c.kernelCommandLine(), " "),
		"-serial", "stdio",
		"-monitor", "none",
		"-qmp", "unix:" + c.qmpSocket() + ",server=on,wait=off",
		"-drive", "file=" + filepath.Join(c.Dir, "esp.img") + ",if=none,format=raw,id=esp",
		"-device", "virtio-blk-pci,drive=esp,serial=" + pid1.SerialESP,
		"-drive", "file=" + filepath.Join(c.Dir, "data.img") + ",if=none,format=raw,id=data",
		"-device", "virtio-blk-pci,drive=data,serial=" + pid1.SerialData,
	}
	if c.System != "" {
		// readonly=on: the guest cannot write it, and qemu takes a
		// shared lock, so every machine of a launch opens the same file.
		a = append(a,
			"-drive", "file="+c.System+",if=none,format=raw,readonly=on,id=system",
			"-device", "virtio-blk-pci,drive=system,serial="+pid1.SerialSystem)
	}
	if c.SwitchSocket != "" {
		a = append(a, "-netdev", "stream,id=net0,server=off,addr.type=unix,addr.path="+c.SwitchSocket)
	} else {
		a = append(a, "-netdev", "user,id=net0,restrict=on")
	}
	// romfile=: no iPXE option ROM; the kernel is given to qemu, never
	// fetched over the network, and SeaBIOS then skips loading and
	// running the ROM on every boot.
	nic := "virtio-net-pci,netdev=net0,romfile=,mac=" + c.MAC
	if c.SwitchSocket != "" {
		// The guest's driver takes the MTU the device offers.
		nic += ",host_mtu=" + strconv.Itoa(SwitchMTU)
	}
	a = append(a, "-device", nic)
	if !c.NoTPM {
		a = append(a, c.tpmArgs()...)
	}
	if c.Parameters != nil {
		a = append(a, "-fw_cfg", "name=opt/polis/parameters,file="+c.parametersFile().Path)
	}
	if c.RestoreSnapshot != "" {
		a = append(a, "-fw_cfg", "name="+pid1.RestoreSnapshotFWCfg+",file="+c.RestoreSnapshot)
	}
	return append(a, c.eventsArgs()...)
}

// tcgParameters are given to the guest kernel under TCG only, where its
// CPU is qemu's emulation; under KVM the guest runs on the host's CPU and
// keeps the kernel's defaults.
//
// clearcpuid=ssse3 hides SSSE3 from the guest kernel (not from its
// programs: they ask the CPU, which still has it), so that WireGuard's
// ChaCha20 runs as the kernel's generic C code rather than its SSSE3 code.
// TCG turns plain integer instructions into about as many host
// instructions, while it runs the SSE shuffles and vector rotates that the
// SSSE3 code is made of much more slowly: pod traffic through WireGuard
// went from 6.2 to 9.5 MB/s in TestNetworkNamespacesInVM with it, the clear
// path unchanged (docs/benchmarks.md, issue 20). dm-crypt's AES-XTS keeps
// its AES-NI driver (xts-aes-aesni, seen in such a guest's /proc/crypto):
// aesni_intel asks for the AES bit, which stays.
//
// mitigations=off: TCG executes the guest's instructions one translated
// block at a time and never speculates, so none of the side channels the
// kernel's mitigations guard against (Meltdown, Spectre, MDS, ...) exist
// on the emulated CPU. The kernel cannot tell: the CPU model (Westmere)
// says it is an Intel CPU of an affected generation, so by default it
// turns on page-table isolation, whose page-table switch on every system
// call and interrupt makes qemu flush its whole software TLB, and
// retpolines and buffer clearing besides. All of that cost and no
// protection: without it a system call in the guest took 0.76 instead of
// 14 µs, plain routing between two namespaces in one VM went from 35-51
// to 100-325 MB/s, and a worker's Node Ready after its role came back
// from 13-37 to 7 s (docs/benchmarks.md).
var tcgParameters = []string{"clearcpuid=ssse3", "mitigations=off"}

// kernelCommandLine is the kernel's command line: the console, reboot on
// panic, no timer check, and the settings PID 1 reads (pid1.AgentFlags
// says why there). no_timer_check: under TCG on a loaded host, the
// kernel's early check that the IO-APIC timer ticks can miss the ticks of
// a slow virtual CPU, and it panics ("IO-APIC + timer doesn't work!"),
// which was seen with eight VMs' worth of load on two cores.
func (c *Config) kernelCommandLine() []string {
	l := []string{"console=ttyS0", "panic=-1", "quiet", "no_timer_check", pid1.AddressParameter + "=" + c.Address.String()}
	if c.Accel == "tcg" {
		l = append(l, tcgParameters...)
	}
	for _, f := range c.AgentFlags {
		l = append(l, pid1.ParameterPrefix+f)
	}
	if c.DiskBench != "" {
		l = append(l, pid1.DiskBenchParameter+"="+c.DiskBench)
		if !c.DiskBenchStart.IsZero() {
			l = append(l, fmt.Sprintf("%s=%d", pid1.DiskBenchStartParameter, c.DiskBenchStart.Unix()))
		}
	}
	return l
}

// parametersFile is where Start writes the parameters qemu gives the
// guest through fw_cfg.
func (c *Config) parametersFile() localstorage.File {
	return localstorage.File{Path: filepath.Join(c.Dir, "parameters.pb"), Plain: true, Secret: true}
}

// Start boots the machine: it creates missing disks, writes the
// parameters, and starts qemu with the console copied to the log.
func Start(cfg Config) (*Machine, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("vm %s: %w", c.Name, err)
	}
	for _, d := range []struct {
		name string
		size int64
	}{{"esp.img", ESPSize}, {"data.img", DataSize}} {
		p := filepath.Join(c.Dir, d.name)
		if _, err := os.Stat(p); err == nil {
			continue
		}
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, fmt.Errorf("vm %s: creating %s: %w", c.Name, d.name, err)
		}
		err = f.Truncate(d.size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("vm %s: creating %s: %w", c.Name, d.name, err)
		}
	}
	if c.Parameters != nil {
		if err := c.parametersFile().Write(c.Parameters); err != nil {
			return nil, fmt.Errorf("vm %s: writing the parameters: %w", c.Name, err)
		}
	} else if err := c.parametersFile().Remove(); err != nil {
		return nil, fmt.Errorf("vm %s: removing old parameters: %w", c.Name, err)
	}
	os.Remove(c.qmpSocket())
	os.Remove(c.eventsSocket())
	logFile, err := os.OpenFile(c.ConsoleLog(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("vm %s: %w", c.Name, err)
	}
	stopTPM := func() {}
	if !c.NoTPM {
		if stopTPM, err = c.startTPM(); err != nil {
			logFile.Close()
			return nil, err
		}
	}
	cmd := exec.Command(c.QEMU, c.args()...)
	setProcAttr(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		stopTPM()
		logFile.Close()
		return nil, fmt.Errorf("vm %s: %w", c.Name, err)
	}
	cmd.Stderr = cmd.Stdout // qemu's own complaints go to the console log too
	m := &Machine{cfg: c, cmd: cmd, console: newConsole(), logFile: logFile, exited: make(chan struct{}), done: make(chan struct{})}
	fmt.Fprintf(logFile, "%s === %s: starting qemu (%s)\n", logTime(), c.Name, c.Accel)
	m.started = time.Now()
	if err := cmd.Start(); err != nil {
		stopTPM()
		logFile.Close()
		return nil, fmt.Errorf("vm %s: starting %s: %w", c.Name, c.QEMU, err)
	}
	copied := make(chan struct{})
	go func() { m.console.copy(stdout, logFile); close(copied) }()
	go m.watchHalt(c.HaltTimeout)
	eventsRead := make(chan struct{})
	go m.watchEvents(eventsRead)
	go func() {
		<-copied // all output read before Wait closes the pipe
		m.waitErr = cmd.Wait()
		close(m.exited)
		<-eventsRead // every event qemu sent, read before Done
		stopTPM()    // the TPM's state is saved before Done
		logFile.Close()
		close(m.done)
	}()
	return m, nil
}

// PID is qemu's process ID.
func (m *Machine) PID() int { return m.cmd.Process.Pid }

// ConsoleLog is the path of the machine's console log.
func (m *Machine) ConsoleLog() string { return m.cfg.ConsoleLog() }

// Started is when qemu was started.
func (m *Machine) Started() time.Time { return m.started }

// WaitConsole waits for a console line of this boot containing substr and
// returns it. If qemu ends first, the error carries the console's last
// lines.
func (m *Machine) WaitConsole(ctx context.Context, substr string) (string, error) {
	l, _, err := m.console.wait(ctx, 0, substr)
	if err != nil {
		return "", fmt.Errorf("vm %s: %w; the console's last lines:\n%s", m.cfg.Name, err, m.console.tail(20))
	}
	return l, nil
}

// FatalLine returns this boot's last console line in which PID 1 said it
// is rebooting because it could not prepare the machine or start the
// agent (pid1.FatalMessage): after a reboot nobody asked for, the reason.
func (m *Machine) FatalLine() (string, bool) {
	return m.console.last(pid1.FatalMessage)
}

// LastLine returns this boot's last console line containing substr: what
// the machine said of a step the caller watches for without waiting
// (pid1.RecoveryRefusedMessage).
func (m *Machine) LastLine(substr string) (string, bool) {
	return m.console.last(substr)
}

// PowerOff presses the machine's power button (ACPI, through QMP) and
// waits for qemu to exit: the agent stops, PID 1 syncs and unmounts the
// disks, then powers off. A clean power-off is qemu exiting with 0.
func (m *Machine) PowerOff(ctx context.Context) error {
	if err := qmpCommand(ctx, m.cfg.qmpSocket(), "system_powerdown"); err != nil {
		select {
		case <-m.done: // already off
		default:
			return fmt.Errorf("vm %s: pressing the power button: %w", m.cfg.Name, err)
		}
	}
	return m.Wait(ctx)
}

// Kill ends qemu at once, as pulling the plug would: what the guest had
// not synced is lost.
func (m *Machine) Kill() error {
	if m.cmd.Process != nil {
		m.cmd.Process.Kill()
	}
	<-m.done
	return nil
}

// GuestRebooted reports whether the guest asked for a reboot, as its last
// words before qemu exited: PID 1's halt line for a reboot (the node API's
// Reboot, or a fatal boot error). qemu runs with -no-reboot, so a guest
// reboot ends qemu like a power-off; the caller boots the machine again.
// False while qemu runs.
func (m *Machine) GuestRebooted() bool {
	l, ok := m.haltLine()
	return ok && strings.Contains(l, pid1.RebootMessage)
}

// GuestPoweredOff reports whether the guest's last halt line before qemu
// exited was a power-off's: whatever ended qemu after it (the power-off
// itself, HaltTimeout, the watchdog), the guest meant to stay off. False
// while qemu runs.
func (m *Machine) GuestPoweredOff() bool {
	l, ok := m.haltLine()
	return ok && !strings.Contains(l, pid1.RebootMessage)
}

// haltLine is the guest's last halt line (pid1.HaltMessage) of the boot,
// once qemu has exited; none while it runs.
func (m *Machine) haltLine() (string, bool) {
	select {
	case <-m.done:
		return m.console.last(pid1.HaltMessage)
	default:
		return "", false
	}
}

// WatchdogFired reports whether the guest's hardware watchdog fired:
// the guest stopped feeding it (PID 1 arms it and feeds it while the
// machine runs) or its halt outlasted the last timeout PID 1 gave it, and
// qemu reset the machine, which ends qemu (-no-reboot) with status 0.
// Final once Done is closed. A machine on real
// hardware would boot again after such a reset, and launch boots it again
// unless the guest was on its way to a power-off (GuestPoweredOff).
func (m *Machine) WatchdogFired() bool { return m.watchdogFired.Load() }

// Done is closed when qemu has exited.
func (m *Machine) Done() <-chan struct{} { return m.done }

// watchHalt ends qemu if it has not exited timeout after the guest's halt
// line (HaltTimeout says why). It returns when qemu exits.
func (m *Machine) watchHalt(timeout time.Duration) {
	// The console ends when qemu exits, and the wait with it.
	if _, _, err := m.console.wait(context.Background(), 0, pid1.HaltMessage); err != nil {
		return // qemu exited first
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-m.exited:
	case <-t.C:
		fmt.Fprintf(m.logFile, "%s === %s: the guest said it was halting %v ago and qemu has not exited: ending qemu\n", logTime(), m.cfg.Name, timeout)
		m.plugPulled.Store(true)
		m.cmd.Process.Kill()
	}
}

// PlugPulled reports whether qemu was ended because the guest said it was
// halting and did not go (HaltTimeout); the halt line still says whether
// it was on its way to a reboot (GuestRebooted) or a power-off. Wait
// says so as an error: the disks may not have been cleanly unmounted.
func (m *Machine) PlugPulled() bool { return m.plugPulled.Load() }

// Wait waits for qemu to exit. An exit status other than 0 is an error,
// and so is a machine that the launcher ended because it was stuck in its
// halt (PlugPulled).
func (m *Machine) Wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return fmt.Errorf("vm %s: waiting for qemu to exit: %w", m.cfg.Name, ctx.Err())
	case <-m.done:
	}
	if m.plugPulled.Load() {
		return fmt.Errorf("vm %s: qemu had not exited %v after the guest said it was halting; ended it; the console's last lines:\n%s", m.cfg.Name, m.cfg.HaltTimeout, m.console.tail(20))
	}
	if m.waitErr != nil {
		var ee *exec.ExitError
		if errors.As(m.waitErr, &ee) {
			return fmt.Errorf("vm %s: qemu exited with %v; the console's last lines:\n%s", m.cfg.Name, ee, m.console.tail(20))
		}
		return fmt.Errorf("vm %s: %w", m.cfg.Name, m.waitErr)
	}
	return nil
}
