package pid1

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// etcFiles are the files of /etc that programs the node runs read and the
// initramfs does not carry: the Go resolver (in the agent, kubelet and
// containerd) looks localhost up in /etc/hosts, and asks a DNS server on
// ::1 (none) without it, so the kubelet could not reach its local
// apiserver proxy at localhost; kubelet reads /etc/passwd and /etc/group
// for its user-namespace mappings (a kubelet user, absent here: the
// defaults) and fails to start if they are missing.
var etcFiles = []struct {
	path, data string
}{
	{"/etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost\n"},
	{"/etc/passwd", "root:x:0:0:root:/:/bin/false\nnobody:x:65534:65534:nobody:/:/bin/false\n"},
	{"/etc/group", "root:x:0:\nnogroup:x:65534:\n"},
}

// writeEtc writes etcFiles and a machine ID, new at every boot, in
// /etc/machine-id (kubelet reports it as the Node's machine ID), unless
// the image already has them. The root is a tmpfs: nothing is kept.
func writeEtc() error {
	if err := os.MkdirAll("/etc", 0o755); err != nil {
		return fmt.Errorf("writing /etc: %w", err)
	}
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return fmt.Errorf("making a machine ID: %w", err)
	}
	files := append(etcFiles[:len(etcFiles):len(etcFiles)], struct{ path, data string }{"/etc/machine-id", hex.EncodeToString(id) + "\n"})
	for _, f := range files {
		if _, err := os.Stat(f.path); err == nil {
			continue
		}
		if err := os.WriteFile(filepath.Clean(f.path), []byte(f.data), 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", f.path, err)
		}
	}
	return nil
}

// Hostname is the machine's host name for its cluster address: polis-
// and the address with dashes (polis-10-77-0-2). The kernel's default,
// "(none)", is no valid label value, and kube-apiserver labels its
// identity Lease with the host name: the Lease, and the apiserver's
// readiness with it, failed on a controller node.
func Hostname(addr netip.Addr) string {
	return "polis-" + strings.NewReplacer(".", "-", ":", "-").Replace(addr.String())
}

// setHostname sets the kernel's host name to Hostname(addr).
func setHostname(addr netip.Addr) error {
	if err := unix.Sethostname([]byte(Hostname(addr))); err != nil {
		return fmt.Errorf("setting the host name: %w", err)
	}
	return nil
}
