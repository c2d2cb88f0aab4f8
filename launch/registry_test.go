package launch

import (
	"archive/tar"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/polis-os/polis/launch/demoimage"
)

func TestParseImage(t *testing.T) {
	im, err := ParseImage("demo=/tmp/demo-image")
	if err != nil || im.Ref != "demo" || im.Path != "/tmp/demo-image" {
		t.Fatalf("ParseImage = %+v, %v", im, err)
	}
	for _, bad := range []string{"demo", "=x", "demo=", "UPPER/Case=x"} {
		if _, err := ParseImage(bad); err == nil {
			t.Errorf("ParseImage(%q) accepted", bad)
		}
	}
}

func TestRegistryHost(t *testing.T) {
	for ref, want := range map[string]string{
		"demo":                     "docker.io",
		"docker.io/library/demo":   "docker.io",
		"polis.internal/demo:v1":   "polis.internal",
		"registry.example:5000/ab": "registry.example:5000",
	} {
		r, err := name.ParseReference(ref)
		if err != nil {
			t.Fatal(err)
		}
		if got := registryHost(r); got != want {
			t.Errorf("registryHost(%s) = %s, want %s", ref, got, want)
		}
	}
}

// writeTar archives the files below dir as a tar at path.
func writeTar(t *testing.T, dir, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

// The three forms of --image PATH load as the same image, are pushed to a
// registry, and pull back with the digest they had; a path that is none
// of them is refused with an error naming it.
func TestImagesServed(t *testing.T) {
	img, err := demoimage.Image([]byte("#!not really a binary\n"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	layoutDir := filepath.Join(dir, "layout")
	if err := demoimage.WriteLayout(layoutDir, img); err != nil {
		t.Fatal(err)
	}
	ociTar := filepath.Join(dir, "oci.tar")
	writeTar(t, layoutDir, ociTar)
	dockerTar := filepath.Join(dir, "docker.tar")
	if err := tarball.WriteToFile(dockerTar, name.MustParseReference("demo:docker"), img); err != nil {
		t.Fatal(err)
	}
	images, err := loadImages([]Image{
		{Ref: "demo", Path: layoutDir},
		{Ref: "polis.internal/team/demo:v1", Path: ociTar},
		{Ref: "demo:docker", Path: dockerTar},
	}, filepath.Join(dir, "scratch"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()
	hosts, err := pushImages(ctx, host, images)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(hosts, []string{"docker.io", "polis.internal"}) {
		t.Errorf("registry hosts %q, want docker.io and polis.internal", hosts)
	}
	for _, ref := range []string{"library/demo:latest", "team/demo:v1", "library/demo:docker"} {
		r, err := name.ParseReference(host+"/"+ref, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		got, err := remote.Image(r, remote.WithContext(ctx))
		if err != nil {
			t.Fatalf("pulling %s: %v", ref, err)
		}
		d, err := got.Digest()
		if err != nil {
			t.Fatal(err)
		}
		// A docker archive is re-encoded as a docker manifest: compare
		// the config (the image's ID) there.
		if !strings.HasSuffix(ref, ":docker") && d != want {
			t.Errorf("%s pulled with digest %v, want %v", ref, d, want)
		}
		wantCfg, _ := img.ConfigName()
		if cfg, _ := got.ConfigName(); cfg != wantCfg {
			t.Errorf("%s has config %v, want %v", ref, cfg, wantCfg)
		}
	}

	notImage := filepath.Join(dir, "not-an-image")
	if err := os.WriteFile(notImage, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{notImage, filepath.Join(dir, "missing"), dir} {
		if _, err := loadImages([]Image{{Ref: "demo", Path: p}}, filepath.Join(dir, "scratch2")); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("loading %s: %v, want an error naming it", p, err)
		}
	}
}
