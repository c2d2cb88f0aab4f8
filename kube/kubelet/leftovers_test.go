package kubelet

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// RemoveCNIState removes the network's reservations and cached results,
// leaves other networks' alone, and finds nothing to do the second time.
func TestRemoveCNIState(t *testing.T) {
	dir := t.TempDir()
	mine := []string{"networks/polis/10.244.7.2", "networks/polis/last_reserved_ip.0", "results/polis-0123abcd-eth0"}
	theirs := []string{"networks/other/10.1.0.2", "results/other-0123abcd-eth0"}
	for _, f := range append(mine, theirs...) {
		path := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if err := RemoveCNIState(dir); err != nil {
			t.Fatalf("RemoveCNIState: %v", err)
		}
	}
	for _, f := range append(mine, "networks/polis") {
		if _, err := os.Stat(filepath.Join(dir, f)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is left (%v)", f, err)
		}
	}
	for _, f := range theirs {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("another network's %s was removed: %v", f, err)
		}
	}
	if err := RemoveCNIState(filepath.Join(dir, "none")); err != nil {
		t.Errorf("RemoveCNIState of a directory that is not there: %v", err)
	}
}

// DeleteBridge deletes the Pods' bridge with its address, and a bridge
// that is not there is no error; in a network namespace of the test's
// (root only).
func TestDeleteBridge(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a network namespace needs root")
	}
	// The namespace is the thread's: the test's goroutine keeps its
	// thread, and the thread is given back only in the namespace it had.
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Skipf("cannot read the network namespace: %v", err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		runtime.UnlockOSThread()
		t.Skipf("cannot make a network namespace: %v", err)
	}
	defer ns.Close()
	defer func() {
		if err := netns.Set(orig); err != nil {
			t.Errorf("back to the test's network namespace: %v (the thread is left locked, and ends with the test)", err)
			return
		}
		runtime.UnlockOSThread()
	}()

	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: Bridge}}
	if err := netlink.LinkAdd(br); err != nil {
		t.Fatalf("making %s: %v", Bridge, err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 244, 7, 1), Mask: net.CIDRMask(24, 32)}}
	if err := netlink.AddrAdd(br, addr); err != nil {
		t.Fatalf("giving %s an address: %v", Bridge, err)
	}
	for range 2 {
		if err := DeleteBridge(); err != nil {
			t.Fatalf("DeleteBridge: %v", err)
		}
	}
	if _, err := netlink.LinkByName(Bridge); !errors.As(err, new(netlink.LinkNotFoundError)) {
		t.Errorf("%s after DeleteBridge: %v, want not found", Bridge, err)
	}
}
