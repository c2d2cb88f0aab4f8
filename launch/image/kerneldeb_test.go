package image

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPlaceKernelDeb(t *testing.T) {
	src := t.TempDir()
	write := func(name string) string {
		p := filepath.Join(src, name)
		if err := os.WriteFile(p, []byte("deb"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write(KernelPackage + "_1.0-1_amd64.deb")
	other := write(KernelPackage + "_2.0-1_amd64.deb")
	wrong := write("linux-image-5.10.0-1-amd64_1.0_amd64.deb")

	cache := filepath.Join(t.TempDir(), "kernel")
	if err := placeKernelDeb(wrong, cache); err == nil || !strings.Contains(err.Error(), KernelPackage) {
		t.Errorf("another kernel package: got %v, want an error naming %s", err, KernelPackage)
	}
	if err := placeKernelDeb(filepath.Join(src, KernelPackage+"_9_amd64.deb"), cache); err == nil {
		t.Error("a missing .deb was accepted")
	}
	if err := placeKernelDeb(good, cache); err != nil {
		t.Fatal(err)
	}
	if deb, err := findDebForTest(cache); err != nil || filepath.Base(deb) != filepath.Base(good) {
		t.Fatalf("the cache holds %q (%v), want %s", deb, err, filepath.Base(good))
	}
	if err := placeKernelDeb(good, cache); err != nil {
		t.Errorf("placing the same package again: %v", err)
	}
	if err := placeKernelDeb(other, cache); err == nil || !strings.Contains(err.Error(), "already holds") {
		t.Errorf("another build of the package over a filled cache: got %v, want a refusal", err)
	}
}

// findDebForTest is what fetchKernel's unpack looks for in the cache.
func findDebForTest(dir string) (string, error) {
	m, err := filepath.Glob(filepath.Join(dir, KernelPackage+"_*.deb"))
	if err != nil || len(m) != 1 {
		return "", err
	}
	return m[0], nil
}
