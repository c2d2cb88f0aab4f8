package systembuild

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseLoaderList(t *testing.T) {
	out := "\tlinux-vdso.so.1 (0x00007ffd)\n" +
		"\tlibnftables.so.1 => /lib/x86_64-linux-gnu/libnftables.so.1 (0x00007f10)\n" +
		"\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f20)\n" +
		"\t/lib64/ld-linux-x86-64.so.2 (0x00007f30)\n"
	got, err := parseLoaderList([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"libnftables.so.1":     "/lib/x86_64-linux-gnu/libnftables.so.1",
		"libc.so.6":            "/lib/x86_64-linux-gnu/libc.so.6",
		"ld-linux-x86-64.so.2": "/lib64/ld-linux-x86-64.so.2",
	}
	if len(got) != len(want) {
		t.Errorf("parsed %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s => %q, want %q", k, got[k], v)
		}
	}
	if _, err := parseLoaderList([]byte("\tlibgone.so.1 => not found\n")); err == nil || !strings.Contains(err.Error(), "libgone.so.1") {
		t.Errorf("a library not found: %v, want an error naming it", err)
	}
}

// TestInstallNft copies the build machine's nft and runs the copy the way
// cmd/polis-nft does, through the copied loader with the copied
// libraries alone; a second install changes nothing, and a stray file is
// removed.
func TestInstallNft(t *testing.T) {
	if _, err := os.Stat(NftProgram); err != nil {
		t.Skipf("%s is missing (apt-get install %s)", NftProgram, NftPackage)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := t.TempDir()
	logf := func(string, ...any) {}
	files, err := installNft(ctx, out, logf)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(out, NftDir)
	have := map[string]bool{}
	for _, f := range files {
		have[filepath.Base(f)] = true
	}
	for _, f := range []string{"nft", nftLoaderName, "libnftables.so.1", "libc.so.6"} {
		if !have[f] {
			t.Errorf("%s not installed (got %v)", f, files)
		}
	}
	cmd := exec.CommandContext(ctx, filepath.Join(dir, nftLoaderName), "--library-path", dir, "--inhibit-cache", "--argv0", "nft", filepath.Join(dir, "nft"), "--version")
	cmd.Env = []string{} // no LD_LIBRARY_PATH or anything else from here
	if got, err := cmd.CombinedOutput(); err != nil || !strings.HasPrefix(string(got), "nftables v") {
		t.Errorf("the copied nft --version: %v\n%s", err, got)
	}

	if err := os.WriteFile(filepath.Join(dir, "stray.so"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	before := modTimes(t, out, files)
	if _, err := installNft(ctx, out, logf); err != nil {
		t.Fatal(err)
	}
	after := modTimes(t, out, files)
	for _, f := range files {
		if !before[f].Equal(after[f]) {
			t.Errorf("the second install rewrote %s", f)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "stray.so")); !os.IsNotExist(err) {
		t.Errorf("a file the install did not make is still there: %v", err)
	}
}
