package vm

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/launch/image"
	"github.com/polis-os/polis/node/diskseal"
	"github.com/polis-os/polis/node/pid1"
)

// needQEMU returns qemu's path, or skips the test where qemu is missing;
// in CI (CI=true), where scripts/test installs it, a missing qemu fails.
func needQEMU(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("qemu-system-x86_64 is missing; scripts/test installs it (apt-get install qemu-system-x86): %v", err)
		}
		t.Skip("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86); skipping the VM tests")
	}
	return p
}

// testLog sends progress lines to t.Log.
type testLog struct{ t testing.TB }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// buildImage builds the node image from this repository into the user's
// cache, so that test runs after the first reuse it.
func buildImage(ctx context.Context, t testing.TB) *image.Image {
	t.Helper()
	start := time.Now()
	img, err := image.Build(ctx, image.Config{SourceDir: "../..", Progress: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("phase: image built in %v (reused: %v)", time.Since(start).Round(10*time.Millisecond), img.Reused)
	return img
}

// buildImageWithSystem builds the node image with a system disk made from
// a small tree (a marker file and a program), into an output directory
// of this package's own, so that another package's build (test/vm) does
// not replace the disk between this build and qemu opening it.
func buildImageWithSystem(ctx context.Context, t *testing.T) *image.Image {
	t.Helper()
	tree := t.TempDir()
	for p, data := range map[string]string{"bin/hello": "#!/bin/true\n", "marker": "the launch/vm test's system disk\n"} {
		full := filepath.Join(tree, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	img, err := image.Build(ctx, image.Config{
		SourceDir: "../..", SystemDir: tree, Progress: testLog{t},
		OutDir: filepath.Join(cache, "polis", "image", "out-launch-vm"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("phase: image with a system disk built in %v (reused: %v)", time.Since(start).Round(10*time.Millisecond), img.Reused)
	return img
}

// checkPrepared checks PID 1's summary line: the root is a tmpfs, not
// rootfs; the system disk, if given, is mounted read-only at /system
// (its ID read from the disk through the mount); cgroup2's controllers
// are delegated with the agent out of the root cgroup; every module of
// the image loaded.
func checkPrepared(t *testing.T, line string, img *image.Image, system bool) {
	t.Helper()
	t.Logf("PID 1: %s", line)
	wants := []string{
		"root tmpfs (not rootfs; pivot_root tried: works)",
		"cgroup2 controllers cpu cpuset io memory pids hugetlb delegated, the agent in /polis/agent",
		fmt.Sprintf("; %d modules", len(img.Modules)),
		// every machine has an i6300esb (launch/vm), which PID 1 arms
		fmt.Sprintf("; watchdog %q armed (timeout %v)", "i6300ESB timer", pid1.WatchdogTimeout),
	}
	if system {
		wants = append(wants, fmt.Sprintf("(squashfs, ro, ID %.12s) on %s", img.SystemID, pid1.SystemRoot))
	} else {
		wants = append(wants, "no system disk")
	}
	for _, w := range wants {
		if !strings.Contains(line, w) {
			t.Errorf("PID 1's summary lacks %q:\n%s", w, line)
		}
	}
}

// shortTempDir is a temporary directory with a path short enough for the
// unix sockets inside it.
func shortTempDir(t testing.TB) string {
	d, err := os.MkdirTemp("", "polis-vm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kept %s for inspection", d)
			return
		}
		os.RemoveAll(d)
	})
	return d
}

// TestBootBootstrapRebootPowerOff boots one node machine from the image:
// the agent is PID 1, prepares the machine (a tmpfs root, cgroup2, the
// system disk mounted read-only: checkPrepared), formats its disks,
// bootstraps a cluster; a press of the power button stops it cleanly
// (qemu exits 0); booted again with no parameters and no system disk, it
// boots as a node without one and rejoins its cluster from what its disks
// kept. Its data disk is encrypted, its key and its configuration sealed
// by its TPM (swtpm): with another TPM, the disks do not unlock, the
// console says why, and nothing is written to them.
func TestBootBootstrapRebootPowerOff(t *testing.T) {
	qemu := needQEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	img := buildImageWithSystem(ctx, t)
	dir := shortTempDir(t)
	sw, err := NewSwitch(filepath.Join(dir, "sw.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()

	owner, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	params, err := proto.Marshal(&nodev1.NodeParameters{Cluster: &nodev1.NodeParameters_ClusterBootstrap{
		ClusterBootstrap: &nodev1.ClusterBootstrap{OwnerPublicKey: owner},
	}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Name: "node1", Kernel: img.Kernel, Initramfs: img.Initramfs, System: img.System, QEMU: qemu,
		Dir:          filepath.Join(dir, "node1"),
		Address:      netip.MustParsePrefix("10.77.0.1/24"),
		Parameters:   params,
		SwitchSocket: sw.Socket(),
	}
	boot := func(cfg Config, wants ...string) {
		t.Helper()
		m, err := Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Kill()
		line, err := m.WaitConsole(ctx, pid1.PreparedMessage)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("phase: qemu start → machine prepared: %v", time.Since(m.Started()).Round(10*time.Millisecond))
		checkPrepared(t, line, img, cfg.System != "")
		for _, w := range append([]string{pid1.BootedMessage}, wants...) {
			if _, err := m.WaitConsole(ctx, w); err != nil {
				t.Fatal(err)
			}
			t.Logf("phase: qemu start → %q: %v", w, time.Since(m.Started()).Round(10*time.Millisecond))
		}
		offAt := time.Now()
		if err := m.PowerOff(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := m.WaitConsole(ctx, pid1.HaltMessage+": power off"); err != nil {
			t.Fatal(err)
		}
		t.Logf("phase: power button → qemu exited 0: %v", time.Since(offAt).Round(10*time.Millisecond))
	}
	// "new roles": the node saved its roles (consensus member); powered
	// off before that, it could not tell after a reboot that it must
	// start its own control plane.
	boot(cfg, "bootstrapping a new cluster", "enrolled", "new roles")
	cfg.Parameters = nil
	cfg.System = ""
	os.Remove(filepath.Join(cfg.Dir, "parameters.pb"))
	boot(cfg, "rejoining the cluster", "taking over as leader")
	log, err := os.ReadFile(cfg.ConsoleLog())
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), "formatted the blank"); n != 1 {
		t.Errorf("the console log shows %d blank disks formatted; want 1, the ESP on the first boot only", n)
	}
	if n := strings.Count(string(log), "formatted the encrypted data disk"); n != 1 {
		t.Errorf("the console log shows the encrypted data disk formatted %d times; want once, on the first boot", n)
	}
	if n := strings.Count(string(log), "unlocked the data disk"); n != 1 {
		t.Errorf("the console log shows the data disk unlocked %d times; want once, on the second boot (the first made it)", n)
	}
	if n := strings.Count(string(log), "tpm sealing"); n != 2 {
		t.Errorf("the console log shows the data disk sealed by the TPM on %d boots; want 2", n)
	}
	checkDataDiskEncrypted(t, filepath.Join(cfg.Dir, "data.img"))
	esp, err := os.ReadFile(filepath.Join(cfg.Dir, "esp.img"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(esp, []byte("POLIS-UNSEALED")) || !bytes.Contains(esp, []byte("POLIS-TPM-SEALED")) {
		t.Error("the sealed configuration on the ESP is not sealed by the TPM")
	}

	// The same disks with another TPM (a new TPM state, as another
	// machine's would be) do not unlock, and the console says why.
	before := fileSum(t, filepath.Join(cfg.Dir, "data.img"))
	if err := os.Rename(cfg.TPMDir(), cfg.TPMDir()+".own"); err != nil {
		t.Fatal(err)
	}
	m, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Kill()
	if _, err := m.WaitConsole(ctx, "was sealed by another TPM"); err != nil {
		t.Fatal(err)
	}
	m.Kill()
	if before != fileSum(t, filepath.Join(cfg.Dir, "data.img")) {
		t.Fatal("booted with another TPM, the node changed its data disk")
	}
}

// fileSum is the SHA-256 of a file, read as a stream (the data disk is 2
// GiB, mostly holes).
func fileSum(t *testing.T, p string) [sha256.Size]byte {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return [sha256.Size]byte(h.Sum(nil))
}

// checkDataDiskEncrypted reads a powered-off machine's data disk: it
// starts with the Polis header, and neither an ext4 superblock nor the
// PEM of a certificate or key (the node's, the cluster CA's in etcd) is
// in it in clear.
func checkDataDiskEncrypted(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := make([]byte, diskseal.DataOffset+4096)
	if _, err := io.ReadFull(f, head); err != nil {
		t.Fatal(err)
	}
	if _, err := diskseal.Read(head); err != nil {
		t.Errorf("the data disk's header: %v", err)
	}
	if sb := diskseal.DataOffset + 1080; head[sb] == 0x53 && head[sb+1] == 0xEF {
		t.Error("the data disk holds an ext4 superblock in clear")
	}
	for _, found := range testutil.FileContains(t, path, "-----BEGIN", "polis-data") {
		t.Errorf("the data disk holds %q in clear", found)
	}
}

// TestProbeKVM: the probe answers within its bound whether or not KVM
// works here (where /dev/kvm exists but a KVM guest hangs, it says no).
func TestProbeKVM(t *testing.T) {
	needQEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	img := buildImage(ctx, t)
	const bound = 10 * time.Second
	start := time.Now()
	ok := ProbeKVM(ctx, img.Kernel, img.Initramfs, shortTempDir(t), bound)
	took := time.Since(start)
	t.Logf("phase: KVM probe: works=%v, in %v", ok, took.Round(10*time.Millisecond))
	// The bound, plus starting and killing qemu.
	if took > bound+30*time.Second {
		t.Errorf("the probe took %v, bound %v", took, bound)
	}
}
