package debpkg

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildDeb makes a minimal package pkg holding usr/share/hello with dpkg-deb
// -b into dir, as apt-get download would have left it.
func buildDeb(t *testing.T, dir, pkg string) {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "DEBIAN"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "usr", "share"), 0o755); err != nil {
		t.Fatal(err)
	}
	control := "Package: " + pkg + "\nVersion: 1.0\nArchitecture: all\nMaintainer: test <test@example.invalid>\nDescription: test\n"
	if err := os.WriteFile(filepath.Join(root, "DEBIAN", "control"), []byte(control), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr", "share", "hello"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "-b", root, filepath.Join(dir, pkg+"_1.0_all.deb")).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -b: %v\n%s", err, out)
	}
}

// A .deb in the cache is unpacked and checked once; a refused check leaves
// no stamp, so the next call unpacks again; two .debs are an error.
func TestUnpack(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("no dpkg-deb on this machine")
	}
	ctx := context.Background()
	dir := t.TempDir()
	buildDeb(t, dir, "polis-test")
	progress := func(string, ...any) {}

	refused := errors.New("refused")
	if _, err := Unpack(ctx, dir, "polis-test", progress, func(string) error { return refused }); !errors.Is(err, refused) {
		t.Fatalf("Unpack with a refusing check: %v, want %v", err, refused)
	}
	checks := 0
	check := func(unpacked string) error {
		checks++
		_, err := os.Stat(filepath.Join(unpacked, "usr", "share", "hello"))
		return err
	}
	for range 2 {
		got, err := Unpack(ctx, dir, "polis-test", progress, check)
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(dir, "polis-test"); got != want {
			t.Errorf("Unpack: %s, want %s", got, want)
		}
	}
	if checks != 1 {
		t.Errorf("check ran %d times, want once (the stamp marks the unpack done)", checks)
	}

	dir2 := t.TempDir()
	buildDeb(t, dir2, "polis-test")
	if err := os.Link(filepath.Join(dir2, "polis-test_1.0_all.deb"), filepath.Join(dir2, "polis-test_2.0_all.deb")); err != nil {
		t.Fatal(err)
	}
	if _, err := Unpack(ctx, dir2, "polis-test", progress, nil); err == nil || !strings.Contains(err.Error(), "several polis-test packages") {
		t.Errorf("Unpack with two .debs: %v, want an error naming them", err)
	}
}
