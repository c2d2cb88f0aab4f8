package vm

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"time"
)

// probeAddress is the probe machine's address; it has no network.
var probeAddress = netip.MustParsePrefix("192.0.2.1/24")

// ProbeKVM reports whether a KVM guest actually runs here: /dev/kvm can
// exist and qemu accept -accel kvm while the guest hangs before its first
// line (as on the machines Polis is developed on), so the only honest test
// is booting the image under KVM and waiting, at most timeout, for PID 1's
// first console line. The probe machine has no disks or network and is
// killed at once; dir receives its console log.
func ProbeKVM(ctx context.Context, kernel, initramfs, dir string, timeout time.Duration) bool {
	if f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0); err != nil {
		return false
	} else {
		f.Close()
	}
	m, err := Start(Config{
		Name: "kvm-probe", Kernel: kernel, Initramfs: initramfs,
		Dir:     filepath.Join(dir, "kvm-probe"),
		Address: probeAddress,
		Accel:   "kvm",
	})
	if err != nil {
		return false
	}
	defer m.Kill()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err = m.WaitConsole(ctx, "polis: [")
	return err == nil
}
