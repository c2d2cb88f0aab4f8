package launch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/polis-os/polis/launch/image"
	"github.com/polis-os/polis/launch/vm"
	"github.com/polis-os/polis/node/pid1"
	"github.com/polis-os/polis/ownerdir"
)

// VMOptions make a launch a cluster of qemu VMs booting the node image
// instead of node-agent processes on loopback addresses. Everything else
// (bootstrap, ownership, registration, approval, consensus members, the
// Node handles) is the same.
type VMOptions struct {
	// Image is the node image; nil builds it (launch/image) from the
	// repository the launcher runs in, with SystemDir, reporting to
	// Options.Progress. Every VM gets its system disk (Image.System), if
	// it has one, read-only: one file shared by the launch's VMs.
	Image *image.Image
	// SystemDir is the tree the built image's system disk is made from
	// (image.Config.SystemDir); empty: no system disk. Ignored with Image.
	SystemDir string
	// Network is the cluster network; default 10.77.0.0/24. Nodes get
	// .1, .2, ...; the launcher's own host port is the last address.
	Network netip.Prefix
	// MemoryMB is each VM's memory; default vm.DefaultMemoryMB, enough
	// for a plain cluster. VMs that run Kubernetes need
	// vm.KubernetesMemoryMB.
	MemoryMB int
	// CPUs is each VM's vCPUs; default vm.DefaultCPUs. VMs that run
	// Kubernetes get vm.KubernetesCPUs.
	CPUs int
	// Accel is qemu's accelerator: tcg (the default), kvm, or auto, which
	// boots a probe VM under KVM and uses KVM only if it runs (see
	// vm.ProbeKVM).
	Accel string
	// CaptureFile, if set, receives every frame that crosses the cluster
	// switch, as pcap (vm.Capture): what the machines send each other on
	// the wire, for tcpdump or Wireshark, and for tests that check what
	// crosses in clear.
	CaptureFile string
}

// The raft timings of VMs under TCG, unless Options says otherwise: an
// emulated single vCPU that the host's cores share with other machines is
// often not scheduled for longer than etcd's default election timeout
// (1 s), and every such pause made its followers start an election, which
// fails the writes in flight; the apiserver's start, whose post-start
// hooks give up on etcd writes after fixed times, did not survive three
// members (docs/benchmarks.md). Five times etcd's defaults: a dead
// leader is replaced after about 5 s instead of 1 s.
const (
	TCGConsensusHeartbeat       = 500 * time.Millisecond
	TCGConsensusElectionTimeout = 5 * time.Second
)

// DefaultVMNetwork is the cluster network of a VM launch.
var DefaultVMNetwork = netip.MustParsePrefix("10.77.0.0/24")

// vmNetwork is what a VM cluster's nodes are plugged into: the switch,
// the launcher's host port on it, and the proxy into it.
type vmNetwork struct {
	sw      *vm.Switch
	host    *vm.HostPort
	proxy   *vm.Proxy
	capture *vm.Capture // nil without VMOptions.CaptureFile
}

// hostMAC is the MAC of the launcher's port on the switch.
const hostMAC = "52:54:00:ff:ff:fe"

// ProxyURL is the HTTP CONNECT proxy into a VM cluster's network ("" for
// a process cluster), saved in polisctl's configuration.
func (c *Cluster) ProxyURL() string {
	if c.vmnet == nil {
		return ""
	}
	return c.vmnet.proxy.URL()
}

// SOCKS5ProxyURL is the same proxy as a SOCKS5 one (socks5://IP:PORT; ""
// for a process cluster): polisctl --proxy URL, or any SOCKS5 client.
func (c *Cluster) SOCKS5ProxyURL() string {
	if c.vmnet == nil {
		return ""
	}
	return c.vmnet.proxy.SOCKS5URL()
}

// Switch is a VM cluster's switch (nil for a process cluster), to cut
// nodes off and reconnect them.
func (c *Cluster) Switch() *vm.Switch {
	if c.vmnet == nil {
		return nil
	}
	return c.vmnet.sw
}

// Cut unplugs n's VM from the switch, as a pulled cable would: nothing it
// sends arrives, nothing reaches it, until Reconnect. Only VM clusters can
// be partitioned.
func (c *Cluster) Cut(n *Node) error {
	m, ok := n.m.(*vmMachine)
	if !ok {
		return fmt.Errorf("launch: %v is a process; only the nodes of a VM cluster can be cut off", n)
	}
	if err := c.vmnet.sw.Cut(m.mac); err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	c.progress("%v: cut off from the switch", n)
	return nil
}

// Isolate cuts n's VM off from the other nodes but not from the launcher:
// a partition with n and the launcher (an operator, polisctl) on one side
// and the other nodes on the other. Reconnect ends it.
func (c *Cluster) Isolate(n *Node) error {
	m, ok := n.m.(*vmMachine)
	if !ok {
		return fmt.Errorf("launch: %v is a process; only the nodes of a VM cluster can be isolated", n)
	}
	if err := c.vmnet.sw.CutExcept(m.mac, hostMAC); err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	c.progress("%v: cut off from the other nodes; the launcher still reaches it", n)
	return nil
}

// Reconnect plugs n's VM back into the switch.
func (c *Cluster) Reconnect(n *Node) error {
	m, ok := n.m.(*vmMachine)
	if !ok {
		return fmt.Errorf("launch: %v is a process; only the nodes of a VM cluster can be reconnected", n)
	}
	if err := c.vmnet.sw.Reconnect(m.mac); err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	c.progress("%v: reconnected to the switch", n)
	return nil
}

// vmAddresses are the nodes' addresses in the network.
func vmAddresses(network netip.Prefix, n int) ([]netip.Addr, error) {
	var out []netip.Addr
	a := network.Masked().Addr().Next()
	for range n {
		if !network.Contains(a) {
			return nil, fmt.Errorf("launch: the network %v has no room for %d nodes", network, n)
		}
		out = append(out, a)
		a = a.Next()
	}
	return out, nil
}

// hostAddress is the launcher's address in the network: its last one.
func hostAddress(network netip.Prefix) netip.Addr {
	a := network.Masked().Addr().As4()
	host := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	host |= (1<<(32-network.Bits()) - 1) - 1 // all ones but the broadcast bit
	return netip.AddrFrom4([4]byte{byte(host >> 24), byte(host >> 16), byte(host >> 8), byte(host)})
}

// startVMNetwork starts the switch, plugs the launcher in, serves the
// proxy and saves it in polisctl's configuration, through which the
// launcher and polisctl reach the nodes at their real addresses.
func (c *Cluster) startVMNetwork() error {
	o := c.opts.VM
	sw, err := vm.NewSwitch(filepath.Join(c.BaseDir, "switch.sock"))
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	var capture *vm.Capture
	if o.CaptureFile != "" {
		// Before anything is plugged in: the capture holds the wire
		// from its first frame.
		if capture, err = vm.StartCapture(sw, o.CaptureFile); err != nil {
			sw.Close()
			return fmt.Errorf("launch: %w", err)
		}
		c.progress("capturing every frame on the cluster switch into %s (pcap)", o.CaptureFile)
	}
	closeCapture := func() {
		if capture != nil {
			capture.Close()
		}
	}
	hostAddr := netip.PrefixFrom(hostAddress(o.Network), o.Network.Bits())
	host, err := vm.AttachHost(sw, hostAddr, hostMAC)
	if err != nil {
		closeCapture()
		sw.Close()
		return fmt.Errorf("launch: %w", err)
	}
	proxy, err := vm.ServeProxy(host, o.Network)
	if err != nil {
		host.Close()
		closeCapture()
		sw.Close()
		return fmt.Errorf("launch: %w", err)
	}
	c.vmnet = &vmNetwork{sw: sw, host: host, proxy: proxy, capture: capture}
	// polisctl, the launcher's own calls included, goes through the proxy
	// its configuration names.
	if err := ownerdir.SaveProxy(c.ConfigDir, proxy.URL()); err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	c.progress("switch %s; the launcher is %v on it; proxy into the cluster network %v: %s (also %s)", sw.Socket(), hostAddr.Addr(), o.Network, proxy.URL(), proxy.SOCKS5URL())
	return nil
}

// closeVMNetwork stops what startVMNetwork started.
func (c *Cluster) closeVMNetwork() error {
	if c.vmnet == nil {
		return nil
	}
	var capture error
	if c.vmnet.capture != nil {
		capture = c.vmnet.capture.Close()
	}
	return errors.Join(c.closeRegistry(), c.vmnet.proxy.Close(), c.vmnet.host.Close(), capture, c.vmnet.sw.Close())
}

// vmImage returns the node image, building it if needed.
func (c *Cluster) vmImage(ctx context.Context) (*image.Image, error) {
	if c.opts.VM.Image != nil {
		return c.opts.VM.Image, nil
	}
	return image.Build(ctx, image.Config{SystemDir: c.opts.VM.SystemDir, Progress: progressWriter{c}})
}

// progressWriter turns the image builder's lines into launch progress.
type progressWriter struct{ c *Cluster }

func (w progressWriter) Write(b []byte) (int, error) {
	w.c.progress("%s", trimNewline(string(b)))
	return len(b), nil
}

func trimNewline(s string) string {
	for len(s) > 0 && s[len(s)-1] == '\n' {
		s = s[:len(s)-1]
	}
	return s
}

// vmConfig is a node's machine.
func (c *Cluster) vmConfig(n *Node, img *image.Image) vm.Config {
	o := c.opts.VM
	return vm.Config{
		Name:         fmt.Sprintf("node%d", n.Index),
		Kernel:       img.Kernel,
		Initramfs:    img.Initramfs,
		System:       img.System,
		Dir:          n.Dir,
		Address:      netip.PrefixFrom(n.Address, o.Network.Bits()),
		MAC:          vm.DefaultMAC(n.Address),
		SwitchSocket: c.vmnet.sw.Socket(),
		MemoryMB:     o.MemoryMB,
		CPUs:         o.CPUs,
		Accel:        o.Accel,
		AgentFlags:   c.agentFlags(),
	}
}

// agentFlags are the options a node process gets as flags (nodeArgs),
// for a VM's kernel command line (pid1.AgentFlags).
func (c *Cluster) agentFlags() []string {
	o := &c.opts
	var f []string
	if o.LeaseTTL > 0 {
		f = append(f, "lease-ttl="+o.LeaseTTL.String())
	}
	if o.HeartbeatInterval > 0 {
		f = append(f, "heartbeat-interval="+o.HeartbeatInterval.String())
	}
	heartbeat, election := o.ConsensusHeartbeat, o.ConsensusElectionTimeout
	if heartbeat == 0 && election == 0 && o.VM.Accel == "tcg" {
		heartbeat, election = TCGConsensusHeartbeat, TCGConsensusElectionTimeout
	}
	if heartbeat > 0 {
		f = append(f, "consensus-heartbeat="+heartbeat.String())
	}
	if election > 0 {
		f = append(f, "consensus-election-timeout="+election.String())
	}
	f = append(f, fmt.Sprintf("consensus-port=%d", o.ConsensusPort), fmt.Sprintf("curator-port=%d", o.CuratorPort))
	return append(f, c.registryFlags()...)
}

// vmMachine is a node that runs as a qemu VM booting the node image.
type vmMachine struct {
	// cfg is the machine, as it boots next (setRecovery and restoreNext
	// change its kernel command line).
	cfg vm.Config
	// mac is its MAC on the switch, which never changes.
	mac string
}

// boot boots the node's VM. The parameters file the launcher wrote, if
// any, goes to fw_cfg.
func (m *vmMachine) boot(n *Node) error {
	cfg := m.cfg
	b, err := parametersFile(n).Read()
	switch {
	case err == nil:
		cfg.Parameters = b
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%v: %w", n, err)
	}
	q, err := vm.Start(cfg)
	if err != nil {
		return fmt.Errorf("%v: %w", n, err)
	}
	p := &process{exited: make(chan struct{}), qemu: q}
	n.run = p
	go func() {
		<-q.Done()
		err := q.Wait(context.Background())
		n.mu.Lock()
		p.err = err
		expected := p.expected
		// The next run replaces this one before this one is marked
		// ended, so no one sees the node stopped.
		var rerr error
		rebooted := bootsAgain(expected, err, q)
		if rebooted {
			rerr = m.boot(n)
		}
		n.mu.Unlock()
		close(p.exited)
		switch {
		case rebooted && rerr == nil:
			stuck := ""
			switch {
			case q.WatchdogFired():
				stuck = fmt.Sprintf(" (reset by its hardware watchdog: the guest had stopped feeding it for %v; its console: %s)", pid1.WatchdogTimeout, n.Log)
			case q.PlugPulled():
				stuck = fmt.Sprintf(" (stuck on its way down %v after it said it was halting, so the launcher ended it; its console: %s)", vm.HaltTimeout, n.Log)
			}
			// A reboot PID 1 chose (it could not prepare the machine
			// or start the agent) says why on the console; the node
			// API's reboots print no FATAL line.
			if why, ok := q.FatalLine(); ok {
				n.report("%v: its VM rebooted after %q%s; booting it again (pid %d)", n, why, stuck, n.PID())
				break
			}
			n.report("%v: its VM rebooted%s; booting it again (pid %d)", n, stuck, n.PID())
		case rebooted:
			n.report("%v: its VM rebooted, but booting it again failed: %v", n, rerr)
		case !expected:
			n.report("%v: its VM stopped unexpectedly (%v); its console: %s", n, err, n.Log)
		}
	}()
	return nil
}

// bootEnding is how a boot of a VM ended, as vm.Machine reports it.
type bootEnding interface {
	GuestRebooted() bool
	GuestPoweredOff() bool
	PlugPulled() bool
	WatchdogFired() bool
}

// bootsAgain says whether the launcher boots a node's VM again once its
// qemu has exited (waitErr is what Wait said), as the machine's firmware
// would after a reset: qemu runs with -no-reboot, so every reset ends
// it. That is a reboot the guest asked for (the node API's Reboot, or
// PID 1's after a fatal boot error), including one stuck on its way
// down that the machine ended (vm.HaltTimeout), and a reset by the
// machine's hardware watchdog. Never a stop the launcher asked for
// (expected), a power-off (also one that hung until the watchdog or the
// launcher ended it: the guest meant to stay off), or a crash of qemu.
func bootsAgain(expected bool, waitErr error, q bootEnding) bool {
	switch {
	case expected, q.GuestPoweredOff():
		return false
	case q.WatchdogFired():
		return true
	}
	return (waitErr == nil || q.PlugPulled()) && q.GuestRebooted()
}

func (m *vmMachine) pid(p *process) int { return p.qemu.PID() }

// halt stops the node's VM: SIGKILL pulls the plug; anything else presses
// the power button and waits for a clean power-off, pulling the plug
// after timeout.
func (m *vmMachine) halt(n *Node, p *process, sig syscall.Signal, timeout time.Duration) error {
	// Like a process's stop, return only once the node's own record of
	// the run has ended, so that a Start right after sees it stopped.
	defer func() { <-p.exited }()
	if sig == syscall.SIGKILL {
		return p.qemu.Kill()
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := p.qemu.PowerOff(ctx); err != nil {
		p.qemu.Kill()
		return fmt.Errorf("%v: %w", n, err)
	}
	return nil
}

// kvmProbeTimeout bounds the KVM probe: a KVM guest prints its first line
// in about a second where KVM works.
const kvmProbeTimeout = 15 * time.Second

func (o *VMOptions) setDefaults() error {
	switch o.Accel {
	case "":
		o.Accel = "tcg"
	case "tcg", "kvm", "auto":
	default:
		return fmt.Errorf("launch: accelerator %q: want tcg, kvm or auto", o.Accel)
	}
	if !o.Network.IsValid() {
		o.Network = DefaultVMNetwork
	}
	if !o.Network.Addr().Is4() || o.Network.Bits() > 29 {
		return fmt.Errorf("launch: VM network %v: want an IPv4 network of at least 8 addresses", o.Network)
	}
	o.Network = o.Network.Masked()
	return nil
}

// vmPlatform runs every node as a qemu VM booting the node image, on the
// cluster's switch.
type vmPlatform struct {
	c *Cluster
	// img is the node image, found or built by prepare.
	img *image.Image
}

// checkAddresses refuses addresses outside the VM network, and the
// launcher's own.
func (p *vmPlatform) checkAddresses(addrs []netip.Addr) error {
	network := p.c.opts.VM.Network
	for _, a := range addrs {
		if !network.Contains(a) || a == hostAddress(network) {
			return fmt.Errorf("launch: address %v is not a node address of the VM network %v", a, network)
		}
	}
	return nil
}

// prepare makes what the VMs need: with Kubernetes the system tree, then
// the images to serve, the node image, the accelerator, the network and
// the registry.
func (p *vmPlatform) prepare(ctx context.Context) error {
	c := p.c
	if c.opts.Kubernetes {
		if err := c.kubernetesSystem(ctx); err != nil {
			return err
		}
	}
	images, err := loadImages(c.opts.Images, filepath.Join(c.BaseDir, "images"))
	if err != nil {
		return err
	}
	img, err := c.vmImage(ctx)
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	p.img = img
	if c.opts.VM.Accel == "auto" {
		c.opts.VM.Accel = "tcg"
		c.progress("probing KVM: booting the image under KVM for at most %v", kvmProbeTimeout)
		if vm.ProbeKVM(ctx, img.Kernel, img.Initramfs, c.BaseDir, kvmProbeTimeout) {
			c.opts.VM.Accel = "kvm"
		}
		c.progress("accelerator: %s", c.opts.VM.Accel)
	}
	if err := c.startVMNetwork(); err != nil {
		return err
	}
	return c.startRegistry(ctx, images)
}

func (p *vmPlatform) newMachine(n *Node) (machine, string) {
	cfg := p.c.vmConfig(n, p.img)
	return &vmMachine{cfg: cfg, mac: cfg.MAC}, cfg.ConsoleLog()
}

// kubernetesWorkers is every node but the first: VMs have the container
// runtime on their system disk, so every other node runs Pods.
func (p *vmPlatform) kubernetesWorkers(nodes []*Node) []*Node { return nodes[1:] }

// apiserverReach: the VMs' addresses are reached through the launcher's
// port on the switch; and under TCG the control plane starts slowly
// (kubernetesVMTimeout).
func (p *vmPlatform) apiserverReach() (func(ctx context.Context, network, address string) (net.Conn, error), time.Duration) {
	return p.c.vmnet.host.DialContext, kubernetesVMTimeout
}

// DialThrough returns the owner's connection to the curator leader as an
// operator who reaches only n would have it: ownerdir.Dial with a copy of
// polisctl's configuration that names a proxy into n's address alone. A
// call succeeds only while n's curator leads and can act; otherwise it
// fails when its context ends. This is what a client on n's side of a
// partition (Isolate) sees. close releases the proxy and the copy.
func (c *Cluster) DialThrough(n *Node) (conn *grpc.ClientConn, close func() error, err error) {
	if _, ok := n.m.(*vmMachine); !ok {
		return nil, nil, fmt.Errorf("launch: %v is a process; only a VM cluster's nodes are reached through a proxy", n)
	}
	proxy, err := vm.ServeProxy(c.vmnet.host, netip.PrefixFrom(n.Address, n.Address.BitLen()))
	if err != nil {
		return nil, nil, fmt.Errorf("launch: %w", err)
	}
	dir, err := os.MkdirTemp(c.BaseDir, "polisctl-through-")
	if err == nil {
		err = copyFiles(c.ConfigDir, dir)
	}
	if err == nil {
		err = ownerdir.SaveProxy(dir, proxy.URL())
	}
	if err == nil {
		conn, err = ownerdir.Dial(dir)
	}
	release := func() error {
		var cerr error
		if conn != nil {
			cerr = conn.Close()
		}
		return errors.Join(cerr, proxy.Close(), os.RemoveAll(dir))
	}
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("launch: a connection through %v only: %w", n, err)
	}
	return conn, release, nil
}

// copyFiles copies the regular files of src into dst, keeping their
// permissions.
func copyFiles(src, dst string) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, fi.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}
