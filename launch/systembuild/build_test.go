package systembuild

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"go.uber.org/goleak"

	"github.com/polis-os/polis/node/pid1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func noderuntimeGoMod(t *testing.T) string {
	t.Helper()
	src, err := FindSource(".")
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(src, "noderuntime", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	return string(gomod)
}

// TestVersionsMatchModule fails when noderuntime/go.mod and the version
// constants tell different releases: the binaries would claim versions
// they are not.
func TestVersionsMatchModule(t *testing.T) {
	gomod := noderuntimeGoMod(t)
	for mod, v := range map[string]string{
		"github.com/containerd/containerd/v2":    ContainerdVersion,
		"github.com/opencontainers/runc":         RuncVersion,
		"github.com/containernetworking/plugins": CNIPluginsVersion,
		"github.com/coredns/coredns":             CoreDNSVersion,
	} {
		if !strings.Contains(gomod, "\t"+mod+" "+v+"\n") && !strings.Contains(gomod, "\t"+mod+" "+v+" // indirect\n") && !strings.Contains(gomod, "require "+mod+" "+v+"\n") {
			t.Errorf("noderuntime/go.mod does not require %s %s", mod, v)
		}
	}
}

// TestPackagesAreTools fails when a package built is not a tool of
// noderuntime/go.mod: go mod tidy would then be free to drop or move the
// module it comes from.
func TestPackagesAreTools(t *testing.T) {
	gomod := noderuntimeGoMod(t)
	for _, s := range steps() {
		for _, p := range s.packages {
			if s.module != "noderuntime" || strings.HasPrefix(p, noderuntimeModule+"/") {
				continue // the main module's, or noderuntime's own code
			}
			if !strings.Contains(gomod, "\t"+p+"\n") {
				t.Errorf("%s is not in noderuntime/go.mod's tool block", p)
			}
		}
	}
}

// TestLayoutFollowsContract checks the tree's files against the paths
// PID 1 and the kube/ code use in the VM.
func TestLayoutFollowsContract(t *testing.T) {
	inVM := func(rel string) string { return filepath.Join(pid1.SystemRoot, rel) }
	if inVM(KubeBundle) != pid1.SystemKubeBundle || inVM(PauseArchive) != pid1.SystemPauseImage {
		t.Errorf("KubeBundle %s, PauseArchive %s do not match the contract", KubeBundle, PauseArchive)
	}
	want := []string{
		"bin/polis-kube", "bin/containerd", "bin/containerd-shim-runc-v2", "bin/ctr", "bin/runc",
		"bin/polis-coredns", "bin/nft", "cni/bin/bridge", "cni/bin/host-local", "cni/bin/loopback", "cni/bin/portmap",
		"bin/mount", "bin/umount", "images/pause.tar",
	}
	if got := Files(); !slices.Equal(got, want) {
		t.Errorf("Files() = %v\nwant %v", got, want)
	}
	for _, f := range Files() {
		if d := inVM(filepath.Dir(f)); d != pid1.SystemBinDir && d != pid1.SystemCNIBinDir && d != pid1.SystemImagesDir {
			t.Errorf("%s is in %s, which is none of the contract's directories", f, d)
		}
	}
}

// TestBuildArgs checks the flags that make the binaries fit the system
// disk: static, stripped, -trimpath, runc alone with cgo.
func TestBuildArgs(t *testing.T) {
	for _, s := range append(steps(), pauseStep) {
		args := s.args("/out")
		joined := strings.Join(args, " ")
		for _, want := range []string{"-trimpath", "-buildvcs=false", "-ldflags -s -w"} {
			if !strings.Contains(joined, want) {
				t.Errorf("%s: go %s lacks %s", s.name, joined, want)
			}
		}
		o := args[slices.Index(args, "-o")+1]
		if len(s.packages) > 1 && o != "/out/" {
			t.Errorf("%s: -o %s, want /out/ (one binary per package)", s.name, o)
		}
		if len(s.packages) == 1 && o != "/out/"+s.outputs[0] {
			t.Errorf("%s: -o %s, want /out/%s", s.name, o, s.outputs[0])
		}
		for i, p := range s.packages {
			if len(s.packages) > 1 && filepath.Base(p) != s.outputs[i] {
				t.Errorf("%s: package %s does not build to %s", s.name, p, s.outputs[i])
			}
		}
		env := s.env()
		cgo := env[len(env)-1] // the last setting wins
		if s.cgo != (cgo == "CGO_ENABLED=1") || !strings.HasPrefix(cgo, "CGO_ENABLED=") {
			t.Errorf("%s: environment ends with %s, cgo %v", s.name, cgo, s.cgo)
		}
		if s.cgo && !strings.Contains(joined, "-extldflags -static") {
			t.Errorf("%s: a cgo build without -extldflags -static: %s", s.name, joined)
		}
	}
	var runc step
	for _, s := range steps() {
		if s.outputs[0] == "runc" {
			runc = s
		}
	}
	if !runc.cgo || !slices.Contains(runc.tags, "seccomp") {
		t.Errorf("runc builds with cgo %v and tags %v; want cgo and seccomp", runc.cgo, runc.tags)
	}
}

// TestWriteIfChanged checks the decision that keeps an unchanged tree's
// files untouched.
func TestWriteIfChanged(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	check := func(data string, perm os.FileMode, wantWrote bool) {
		t.Helper()
		wrote, err := writeIfChanged(p, []byte(data), perm)
		if err != nil {
			t.Fatal(err)
		}
		if wrote != wantWrote {
			t.Errorf("writeIfChanged(%q, %v) wrote %v, want %v", data, perm, wrote, wantWrote)
		}
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != data || st.Mode().Perm() != perm {
			t.Errorf("file holds %q with %v, want %q with %v", got, st.Mode().Perm(), data, perm)
		}
	}
	check("one", 0o644, true)
	old := time.Unix(1000, 0)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	check("one", 0o644, false)
	if st, _ := os.Stat(p); !st.ModTime().Equal(old) {
		t.Errorf("an unchanged file was touched: mtime %v", st.ModTime())
	}
	check("two", 0o644, true)
	check("two", 0o755, true)
	if entries, _ := os.ReadDir(filepath.Dir(p)); len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}

func TestFindSourceOutsideTheTree(t *testing.T) {
	if _, err := FindSource(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no Polis source tree") {
		t.Errorf("FindSource outside the tree: %v", err)
	}
	out := t.TempDir()
	err := Builder{SourceDir: t.TempDir(), CacheDir: t.TempDir(), Progress: io.Discard}.Build(context.Background(), out)
	if err == nil || !strings.Contains(err.Error(), "no Polis source tree") {
		t.Errorf("Build outside the tree: %v", err)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Errorf("Build outside the tree wrote %v", entries)
	}
}

// TestFindSourceFromInside finds the root from a directory below it, as
// an image builder running in its own package directory would give.
func TestFindSourceFromInside(t *testing.T) {
	root, err := FindSource("../..")
	if err != nil {
		t.Fatal(err)
	}
	here, err := FindSource(".")
	if err != nil {
		t.Fatal(err)
	}
	if here != root {
		t.Errorf("FindSource(.) = %s, FindSource(../..) = %s", here, root)
	}
}

// TestPauseArchive checks the archive's format with a stand-in binary:
// an OCI image layout naming PauseImage, whose config runs the binary.
func TestPauseArchive(t *testing.T) {
	bin := []byte("\x7fELF stand-in for the pause binary")
	a, err := PauseArchiveBytes(bin)
	if err != nil {
		t.Fatal(err)
	}
	b, err := PauseArchiveBytes(bin)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("two archives of the same binary differ: a rebuild would rewrite the file")
	}
	checkPauseArchive(t, a, bin)
}

// checkPauseArchive unpacks archive and checks it is an OCI image layout
// with one image, named PauseImage, linux/amd64, whose entrypoint is
// PauseEntrypoint and whose only layer holds bin there.
func checkPauseArchive(t *testing.T, archive, bin []byte) {
	t.Helper()
	dir := t.TempDir()
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			var data []byte
			if data, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(p, data, 0o644)
			}
		default:
			t.Fatalf("unexpected entry %s of type %c", h.Name, h.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	ii, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("not an OCI image layout: %v", err)
	}
	im, err := ii.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("%d images in the index, want 1", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if got := desc.Annotations[annotationContainerdName]; got != PauseImage {
		t.Errorf("image named %q, want %q", got, PauseImage)
	}
	img, err := ii.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := img.MediaType(); mt != "application/vnd.oci.image.manifest.v1+json" {
		t.Errorf("manifest media type %s", mt)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || !slices.Equal(cf.Config.Entrypoint, []string{PauseEntrypoint}) {
		t.Errorf("config: %s/%s, entrypoint %v; want linux/amd64 and [%s]", cf.OS, cf.Architecture, cf.Config.Entrypoint, PauseEntrypoint)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 || len(cf.RootFS.DiffIDs) != 1 {
		t.Fatalf("%d layers, %d diff ids; want 1", len(layers), len(cf.RootFS.DiffIDs))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	lr := tar.NewReader(rc)
	h, err := lr.Next()
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(lr)
	if err != nil {
		t.Fatal(err)
	}
	if "/"+h.Name != PauseEntrypoint || h.Mode&0o111 == 0 || !bytes.Equal(got, bin) {
		t.Errorf("layer entry %s, mode %o, %d bytes; want the %d-byte binary at %s, executable", h.Name, h.Mode, len(got), len(bin), PauseEntrypoint)
	}
	if _, err := lr.Next(); err != io.EOF {
		t.Errorf("more than one entry in the layer (%v)", err)
	}
}

// TestKeepTimesIfUnchanged checks that a build which leaves a binary as it
// was (go build touches it) does not make it look new, and that one which
// changes it does.
func TestKeepTimesIfUnchanged(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if goBuildID(self) == nil {
		t.Skip("the test binary has no Go build ID note")
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(p, data, 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Unix(1000, 0)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	touch := func() error { now := time.Now(); return os.Chtimes(p, now, now) }
	if err := keepTimesIfUnchanged([]string{p, filepath.Join(filepath.Dir(p), "not-built-yet")}, touch); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(p); !st.ModTime().Equal(old) {
		t.Errorf("an unchanged binary looks new: mtime %v, want %v", st.ModTime(), old)
	}
	replace := func() error { return os.WriteFile(p, []byte("something else"), 0o755) }
	if err := keepTimesIfUnchanged([]string{p}, replace); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(p); st.ModTime().Equal(old) {
		t.Error("a changed binary kept its old mtime")
	}
}
