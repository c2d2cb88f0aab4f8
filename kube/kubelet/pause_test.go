package kubelet

import (
	"archive/tar"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/polis-os/polis/internal/testutil"
	"github.com/polis-os/polis/kube/pki"
	"github.com/polis-os/polis/supervisor/supervisortest"
)

// testManifest is the digest the test archives' index.json names.
const testManifest = "sha256:1fd9b90cc8089f5e7c25e0307540f9b0bdca1478d66e7db1ce8da3cc43d5d15d"

// writeArchive writes an OCI archive at path holding files (name →
// contents).
func writeArchive(t *testing.T, path string, files map[string]string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for name, data := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

func pauseArchive(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "pause.tar")
	writeArchive(t, path, map[string]string{
		"oci-layout": `{"imageLayoutVersion":"1.0.0"}`,
		"index.json": `{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"` + testManifest + `"}]}`,
	})
	return path
}

// The pause image counts as imported while containerd's content store
// holds its manifest, and not otherwise, nor when the archive cannot say
// which manifest it is.
func TestPauseImported(t *testing.T) {
	dir := t.TempDir()
	archive := pauseArchive(t, dir)
	root := filepath.Join(dir, "containerd")
	if pauseImported(archive, root) {
		t.Error("imported, with an empty containerd root")
	}
	blob := filepath.Join(root, contentBlobs, "sha256", strings.TrimPrefix(testManifest, "sha256:"))
	if err := os.MkdirAll(filepath.Dir(blob), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blob, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !pauseImported(archive, root) {
		t.Error("not imported, with the manifest in containerd's content store")
	}

	for name, files := range map[string]map[string]string{
		"no index":         {"oci-layout": "{}"},
		"two manifests":    {"index.json": `{"manifests":[{"digest":"` + testManifest + `"},{"digest":"sha256:00"}]}`},
		"a path as digest": {"index.json": `{"manifests":[{"digest":"sha256:../../x"}]}`},
		"bad json":         {"index.json": `{"manifests":`},
	} {
		bad := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".tar")
		writeArchive(t, bad, files)
		if pauseImported(bad, root) {
			t.Errorf("%s: imported", name)
		}
	}
	if pauseImported(filepath.Join(dir, "missing.tar"), root) {
		t.Error("a missing archive: imported")
	}
	if _, err := pauseManifest(filepath.Join(dir, "no-index.tar")); err == nil || !strings.Contains(err.Error(), "no index.json") {
		t.Errorf("an archive without index.json: %v, want an error naming it", err)
	}
}

// A runner whose containerd holds the pause image already (its manifest in
// the content store on the data disk, as after an earlier start) does not
// import it again: the kubelet starts without a ctr import.
func TestRunnerSkipsImportedPause(t *testing.T) {
	c, err := pki.NewCluster("test", now)
	if err != nil {
		t.Fatal(err)
	}
	var ready readyNode
	ready.Store(true)
	api := fakeAPIServer(t, c, "node-1", &ready)
	dir := t.TempDir()
	cfg, logPath := fakeRuntime(t, dir)
	cfg.PauseImage = pauseArchive(t, dir)
	blob := filepath.Join(cfg.StateDir, "containerd", contentBlobs, "sha256", strings.TrimPrefix(testManifest, "sha256:"))
	if err := os.MkdirAll(filepath.Dir(blob), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blob, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	asNodeOne(t, &cfg, c, api)
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	supervisortest.HarnessTree(t, r.Run)
	waitStatus(t, r, "the kubelet running", func(s *Status) bool { return s.KubeletRunning })
	// The status says running once the process is started; its script
	// notes its arguments a moment later. An import would come before.
	var got string
	testutil.Eventually(t, waitTimeout, "the kubelet noting its arguments", func() error {
		if got = readLog(t, logPath); !strings.Contains(got, "kubelet --config") {
			return fmt.Errorf("log:\n%s", got)
		}
		return nil
	})
	if strings.Contains(got, "images import") {
		t.Errorf("the pause image containerd holds was imported again; log:\n%s", got)
	}
}
