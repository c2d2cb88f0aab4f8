package kubelet

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// contentBlobs is where containerd keeps content (images' manifests,
// configurations and layers) below its root, one file per digest.
const contentBlobs = "io.containerd.content.v1.content/blobs"

// pauseManifest is the digest ("sha256:…") of the sandbox image's manifest
// in the OCI archive at path: the archive's index.json names it.
func pauseManifest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("%s holds no index.json: not an OCI archive", path)
		}
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", path, err)
		}
		if strings.TrimPrefix(h.Name, "./") != "index.json" {
			continue
		}
		var index struct {
			Manifests []struct{ Digest string }
		}
		if err := json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&index); err != nil {
			return "", fmt.Errorf("%s: index.json: %w", path, err)
		}
		if len(index.Manifests) != 1 {
			return "", fmt.Errorf("%s: index.json names %d manifests, want the sandbox image's one", path, len(index.Manifests))
		}
		return index.Manifests[0].Digest, nil
	}
}

// pauseImported reports whether containerd, whose root is root, holds the
// sandbox image of the archive at archive already: whether its content
// store has the image's manifest. containerd keeps its content on the data
// disk across restarts and reboots, and removes a manifest only with the
// image that refers to it (its garbage collector), so the manifest is
// there exactly while the image is. Importing again, a ctr process on a
// single emulated vCPU, took 4 to 9 s of every kubelet's start under TCG.
// An error (an archive that cannot be read) says to import, which names
// what is wrong.
func pauseImported(archive, root string) bool {
	digest, err := pauseManifest(archive)
	if err != nil {
		return false
	}
	alg, hex, ok := strings.Cut(digest, ":")
	if !ok || alg == "" || hex == "" || strings.ContainsAny(alg+hex, "/.") {
		return false
	}
	fi, err := os.Stat(filepath.Join(root, contentBlobs, alg, hex))
	return err == nil && fi.Mode().IsRegular()
}
