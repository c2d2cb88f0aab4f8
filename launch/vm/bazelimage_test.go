package vm

import (
	"context"
	"crypto/ed25519"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/node/pid1"
)

// bazelImageEnv names the directory of a node image Bazel built
// (bazel-bin/image/node_image: vmlinuz and initramfs.cpio.gz).
// scripts/bazel-test builds //image:node_image and runs
// TestBazelBuiltImageBoots with it set.
const bazelImageEnv = "POLIS_BAZEL_IMAGE"

// TestBazelBuiltImageBoots boots the node image that Bazel built (the
// agent compiled by rules_go, the kernel package fetched by Bazel, the
// image assembled by cmd/polis-image in a Bazel action) as one machine,
// which prepares itself and bootstraps a cluster: the image is a working
// node image, not only a file that was written.
func TestBazelBuiltImageBoots(t *testing.T) {
	dir := os.Getenv(bazelImageEnv)
	if dir == "" {
		t.Skipf("%s is not set: scripts/bazel-test sets it to the image bazel build //image:node_image made", bazelImageEnv)
	}
	qemu := needQEMU(t)
	kernel, initramfs := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initramfs.cpio.gz")
	for _, f := range []string{kernel, initramfs} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%s=%s: %v", bazelImageEnv, dir, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	tmp := shortTempDir(t)
	sw, err := NewSwitch(filepath.Join(tmp, "sw.sock"))
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
	m, err := Start(Config{
		Name: "node1", Kernel: kernel, Initramfs: initramfs, QEMU: qemu,
		Dir:          filepath.Join(tmp, "node1"),
		Address:      netip.MustParsePrefix("10.77.0.1/24"),
		Parameters:   params,
		SwitchSocket: sw.Socket(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Kill()
	for _, w := range []string{pid1.PreparedMessage, pid1.BootedMessage, "bootstrapping a new cluster", "enrolled"} {
		line, err := m.WaitConsole(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("phase: qemu start → %q: %v", w, time.Since(m.Started()).Round(10*time.Millisecond))
		if w == pid1.PreparedMessage {
			t.Logf("PID 1: %s", line)
		}
	}
	if err := m.PowerOff(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.WaitConsole(ctx, pid1.HaltMessage+": power off"); err != nil {
		t.Fatal(err)
	}
}
