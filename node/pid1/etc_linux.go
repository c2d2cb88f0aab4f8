package pid1

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
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
