// Package mountinfo reads the kernel's table of mounts, the format of
// /proc/self/mountinfo (proc(5)): one line per mount, with its ID and its
// parent's, the mount point, its options and optional fields (shared:N,
// master:N, ...), then after a lone "-" the file system type and source.
//
// Two parts of the node read it: PID 1, which checks the machine's root
// and system disk before it goes on (node/pid1), and the kubelet runner,
// which finds the mounts a stopped container runtime left (kube/kubelet).
// Mount points and sources come back as the kernel named them, with its
// octal escapes (\040 for a space) undone.
package mountinfo

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Path is the table of the calling process's mount namespace.
const Path = "/proc/self/mountinfo"

// Mount is one line of the table.
type Mount struct {
	// ID and Parent are the mount's ID and its parent's; a mount that is
	// its own parent is the namespace's first (rootfs).
	ID, Parent int
	// MountPoint is where it is mounted.
	MountPoint string
	// Options are the per-mount options (ro, nosuid, ...).
	Options string
	// Optional are the optional fields, space-separated (shared:N, ...).
	Optional string
	// FSType and Source are the file system's type and source.
	FSType, Source string
}

// Parse reads a table; a malformed line is an error naming it.
func Parse(table string) ([]Mount, error) {
	var out []Mount
	for line := range strings.SplitSeq(table, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Fields(line)
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if len(f) < 7 || sep < 0 || len(f) < sep+3 {
			return nil, fmt.Errorf("mountinfo: malformed line %q", line)
		}
		id, err1 := strconv.Atoi(f[0])
		parent, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("mountinfo: malformed line %q", line)
		}
		out = append(out, Mount{
			ID: id, Parent: parent,
			MountPoint: unescape(f[4]),
			Options:    f[5],
			Optional:   strings.Join(f[6:sep], " "),
			FSType:     f[sep+1],
			Source:     unescape(f[sep+2]),
		})
	}
	return out, nil
}

// ReadFile reads and parses the table at path (Path, or a test's file).
func ReadFile(path string) ([]Mount, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the mounts: %w", err)
	}
	return Parse(string(b))
}

// unescape undoes the kernel's octal escapes (\040 for a space, \011,
// \012, \134).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
