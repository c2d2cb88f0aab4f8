package devmapper

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCheckName(t *testing.T) {
	for _, name := range []string{"polis-data", "a", strings.Repeat("x", 127)} {
		if err := checkName(name); err != nil {
			t.Errorf("checkName(%q): %v", name, err)
		}
	}
	for _, name := range []string{"", ".", "..", "a/b", strings.Repeat("x", 128)} {
		if err := checkName(name); err == nil {
			t.Errorf("checkName(%q) accepted it", name)
		}
	}
}

func TestContainsWord(t *testing.T) {
	misc := "183 hw_random\n236 device-mapper\n 1 psaux\n"
	if !containsWord(misc, "device-mapper") {
		t.Error("device-mapper not found in /proc/misc's text")
	}
	if containsWord("183 hw_random\n", "device-mapper") || containsWord("236 device-mapper-x\n", "device-mapper") {
		t.Error("containsWord found a name that is not there")
	}
}

func TestCreateCryptRefusesBadInput(t *testing.T) {
	for _, c := range []Crypt{
		{Name: "", Device: "/dev/null", Key: make([]byte, CryptKeySize)},
		{Name: "x", Device: "/dev/null", Key: make([]byte, 32)},
		{Name: "x", Device: "/dev/null", Key: make([]byte, CryptKeySize), Options: []string{"no_read_workqueue 1 allow_discards"}},
		{Name: "x", Device: "/dev/null", Key: make([]byte, CryptKeySize), Options: []string{""}},
	} {
		if _, err := CreateCrypt(c); err == nil {
			t.Errorf("CreateCrypt(%q, key of %d bytes) succeeded", c.Name, len(c.Key))
		}
	}
}

// TestCryptOnLoopDevice maps a loop device through dm-crypt: what is
// written through the mapping is not on the backing file in clear, reads
// back with the same key, and reads as something else with another.
func TestCryptOnLoopDevice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: device-mapper and loop devices")
	}
	if err := Available(); err != nil {
		t.Skipf("no device-mapper on this machine, so no loop-device test (the VM suite maps the data disk for real): %v", err)
	}
	backing := filepath.Join(t.TempDir(), "disk")
	if err := os.WriteFile(backing, make([]byte, 8<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	loop, detach, err := attachLoop(backing)
	if err != nil {
		t.Skipf("cannot attach a loop device here: %v", err)
	}
	defer detach()

	key := make([]byte, CryptKeySize)
	rand.Read(key)
	name := fmt.Sprintf("polis-test-%d", os.Getpid())
	const offset = 8 // sectors left to a header
	c := Crypt{Name: name, Device: loop, Offset: offset, Key: key}
	mapped, err := CreateCrypt(c)
	if err != nil {
		t.Fatal(err)
	}
	defer Remove(name)
	if ok, err := Exists(name); err != nil || !ok {
		t.Fatalf("Exists(%s) = %v, %v after CreateCrypt", name, ok, err)
	}
	if _, err := CreateCrypt(c); err == nil {
		t.Fatal("a second CreateCrypt of the same name succeeded")
	}
	marker := bytes.Repeat([]byte("polis-marker-in-clear "), 200)
	writeAt(t, mapped, marker)
	if got := readAt(t, mapped, len(marker)); !bytes.Equal(got, marker) {
		t.Fatal("the mapped device did not read back what was written")
	}
	if err := Remove(name); err != nil {
		t.Fatal(err)
	}
	if ok, err := Exists(name); err != nil || ok {
		t.Fatalf("Exists(%s) = %v, %v after Remove", name, ok, err)
	}
	raw, err := os.ReadFile(backing)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("polis-marker-in-clear")) {
		t.Fatal("the backing file holds the marker in clear")
	}
	if len(bytes.Trim(raw[:offset*SectorSize], "\x00")) != 0 {
		t.Fatal("the mapping wrote into the sectors before its offset")
	}

	if mapped, err = CreateCrypt(c); err != nil {
		t.Fatal(err)
	}
	if got := readAt(t, mapped, len(marker)); !bytes.Equal(got, marker) {
		t.Fatal("mapped again with the same key, the device does not read back the marker")
	}
	if err := Remove(name); err != nil {
		t.Fatal(err)
	}
	other := Crypt{Name: name, Device: loop, Offset: offset, Key: bytes.Repeat([]byte{7}, CryptKeySize)}
	if mapped, err = CreateCrypt(other); err != nil {
		t.Fatal(err)
	}
	if got := readAt(t, mapped, len(marker)); bytes.Equal(got, marker) {
		t.Fatal("another key reads the marker")
	}
	if err := Remove(name); err != nil {
		t.Fatal(err)
	}
}

func writeAt(t *testing.T, dev string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func readAt(t *testing.T, dev string, n int) []byte {
	t.Helper()
	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

// attachLoop attaches file to a free loop device.
func attachLoop(file string) (string, func(), error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return "", nil, err
	}
	defer ctl.Close()
	n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
	if err != nil {
		return "", nil, fmt.Errorf("LOOP_CTL_GET_FREE: %w", err)
	}
	dev := fmt.Sprintf("/dev/loop%d", n)
	loop, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return "", nil, err
	}
	back, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		loop.Close()
		return "", nil, err
	}
	defer back.Close()
	if err := unix.IoctlSetInt(int(loop.Fd()), unix.LOOP_SET_FD, int(back.Fd())); err != nil {
		loop.Close()
		return "", nil, fmt.Errorf("LOOP_SET_FD on %s: %w", dev, err)
	}
	return dev, func() {
		_ = unix.IoctlSetInt(int(loop.Fd()), unix.LOOP_CLR_FD, 0)
		loop.Close()
	}, nil
}
