package image

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/polis-os/polis/node/pid1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestWriteInitramfs checks the archive PID 1 will find: the agent at
// /init, the resolved modules, and their list in load order.
func TestWriteInitramfs(t *testing.T) {
	dir := fixtureKernel(t)
	ix, err := IndexModules(dir)
	if err != nil {
		t.Fatal(err)
	}
	mods, err := ix.Resolve([]string{"ext4"})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "initramfs.cpio.gz")
	if err := writeInitramfs(out, []byte("the agent"), dir, mods); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]newcEntry{}
	for _, e := range readNewc(t, raw) {
		files["/"+e.name] = e
	}
	if e := files[pid1.InitPath]; string(e.data) != "the agent" || e.mode&0o111 == 0 {
		t.Errorf("%s: %+v, want the agent, executable", pid1.InitPath, e)
	}
	list := string(files[pid1.ModuleListPath].data)
	want := "crc32c_generic mbcache jbd2 crc16 ext4"
	var got []string
	for _, line := range strings.Fields(list) {
		got = append(got, strings.TrimSuffix(filepath.Base(line), ".ko"))
		e, ok := files[line]
		if !ok {
			t.Errorf("the module list names %s, which the archive lacks", line)
			continue
		}
		if !bytes.HasPrefix(e.data, []byte("\x7fELF")) {
			t.Errorf("%s is not the module file", line)
		}
	}
	if strings.Join(got, " ") != want {
		t.Errorf("module list %q, want %q", got, want)
	}
	for _, d := range []string{"/dev", "/proc", "/sys"} {
		if files[d].mode&newcTypeDir == 0 {
			t.Errorf("%s is missing: the kernel needs /dev to open the console", d)
		}
	}
}

// TestCacheLock: a second build waits for the first's lock.
func TestCacheLock(t *testing.T) {
	dir := t.TempDir()
	unlock, err := lockCache(dir, func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{})
	waiting := make(chan struct{}, 1)
	go func() {
		u, err := lockCache(dir, func(string, ...any) { waiting <- struct{}{} })
		if err == nil {
			u()
		}
		close(got)
	}()
	<-waiting // the second one found the lock taken
	select {
	case <-got:
		t.Fatal("a second lock was granted while the first was held")
	default:
	}
	unlock()
	<-got
}
