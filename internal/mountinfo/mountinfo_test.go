package mountinfo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const table = `23 1 0:21 / / rw shared:1 - tmpfs tmpfs rw,mode=755
24 23 0:22 / /proc rw,nosuid,nodev,noexec,relatime shared:2 - proc proc rw
26 23 254:32 / /system ro,nosuid,nodev,relatime shared:12 master:3 - squashfs /dev/vdc ro,errors=continue
27 23 0:24 / /with\040space rw - tmpfs tmpfs rw
28 23 0:25 / /back\134slash\0 rw - tmpfs a\011tab rw
`

func TestParse(t *testing.T) {
	mounts, err := Parse(table)
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) != 5 {
		t.Fatalf("%d mounts, want 5: %+v", len(mounts), mounts)
	}
	want := Mount{ID: 26, Parent: 23, MountPoint: "/system", Options: "ro,nosuid,nodev,relatime", Optional: "shared:12 master:3", FSType: "squashfs", Source: "/dev/vdc"}
	if mounts[2] != want {
		t.Errorf("the system disk's mount: %+v, want %+v", mounts[2], want)
	}
	for i, want := range map[int]string{3: "/with space", 4: `/back\slash\0`} {
		if got := mounts[i].MountPoint; got != want {
			t.Errorf("mount %d: mount point %q, want %q (escapes undone, a short one kept)", i, got, want)
		}
	}
	for in, want := range map[string]string{
		`/a/b`:             "/a/b",
		`/a\011\012\134`:   "/a\t\n\\",
		`/trailing\04`:     `/trailing\04`,
		`/not\08octal\999`: `/not\08octal\999`,
	} {
		if got := unescape(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
	if got := mounts[4].Source; got != "a\ttab" {
		t.Errorf("an escaped source reads %q", got)
	}
	for _, bad := range []string{"1 1 0:2 / / rw rootfs rootfs rw", "x 1 0:2 / / rw - tmpfs tmpfs rw", "1 1 0:2 / / rw -", "1 x 0:2 / / rw - tmpfs tmpfs rw"} {
		if _, err := Parse(bad); err == nil || !strings.Contains(err.Error(), "malformed line") {
			t.Errorf("Parse(%q) = %v, want an error naming the malformed line", bad, err)
		}
	}
}

func TestReadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(path, []byte(table), 0o600); err != nil {
		t.Fatal(err)
	}
	if mounts, err := ReadFile(path); err != nil || len(mounts) != 5 {
		t.Errorf("ReadFile: %d mounts, %v", len(mounts), err)
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "reading the mounts") {
		t.Errorf("ReadFile of a missing file: %v", err)
	}
}
