// Package demoimage builds the tiny image of Polis' examples and tests:
// cmd/polis-demo (a static HTTP server, our own code) in an OCI image
// layout directory, which polis-launch --image REF=DIR serves to the nodes.
// It needs no container daemon and no registry: go build, then
// go-containerregistry writes the layout.
//
// The image has one layer holding the binary as Entrypoint, a linux config
// for the machine's architecture, port 8080 exposed, and runs as nobody.
// Every file in the layer has the same time, so the same binary gives the
// same image digest. Binary is that recipe for any one-binary image: the
// pause image of the node's system tree (launch/systembuild) is one too.
package demoimage

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Entrypoint is where the binary is in the image.
const Entrypoint = "/polis-demo"

// Port is the port the server listens on in its Pod.
const Port = 8080

// pkg is the binary's package.
const pkg = "github.com/polis-os/polis/cmd/polis-demo"

// epoch is the time of the layer's file and of the image.
var epoch = time.Unix(0, 0).UTC()

// Build builds cmd/polis-demo (static: CGO_ENABLED=0, -trimpath, stripped)
// from the source tree around srcDir (the working directory if empty) and
// writes the image as an OCI layout in outDir, which it replaces.
func Build(ctx context.Context, srcDir, outDir string) error {
	tmp, err := os.MkdirTemp("", "polis-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "polis-demo")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, pkg)
	cmd.Dir = srcDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("demoimage: go build %s: %w\n%s", pkg, err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	img, err := Image(b)
	if err != nil {
		return err
	}
	return WriteLayout(outDir, img)
}

// Image is the image around the binary b.
func Image(b []byte) (v1.Image, error) {
	img, err := Binary{
		Entrypoint: Entrypoint,
		Arch:       runtime.GOARCH,
		User:       "65534:65534",
		CreatedBy:  "polis demoimage: cmd/polis-demo",
		Ports:      []int{Port},
	}.Image(b)
	if err != nil {
		return nil, fmt.Errorf("demoimage: %w", err)
	}
	return img, nil
}

// Binary describes an image of one static binary: the demo's, and the
// pause image of the node's system tree (launch/systembuild).
type Binary struct {
	// Entrypoint is where the binary is in the image, and what it runs.
	Entrypoint string
	// Arch is the config's architecture (its OS is linux).
	Arch string
	// User is who the image runs as (uid:gid).
	User string
	// CreatedBy is the layer's history.
	CreatedBy string
	// Ports are the TCP ports the config exposes.
	Ports []int
}

// Image is the image around the binary b: one layer holding it as
// Entrypoint (mode 0755), and a config whose entrypoint it is. Every time
// in it is the epoch, so that the same binary gives the same digest.
func (d Binary) Image(b []byte) (v1.Image, error) {
	var layerTar bytes.Buffer
	tw := tar.NewWriter(&layerTar)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(d.Entrypoint, "/"), Mode: 0o755, Size: int64(len(b)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(b); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar.Bytes())), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("the layer: %w", err)
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	if img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: d.CreatedBy}}); err != nil {
		return nil, fmt.Errorf("the layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", d.Arch, v1.Time{Time: epoch}
	cf.Config = v1.Config{Entrypoint: []string{d.Entrypoint}, User: d.User}
	for _, p := range d.Ports {
		if cf.Config.ExposedPorts == nil {
			cf.Config.ExposedPorts = map[string]struct{}{}
		}
		cf.Config.ExposedPorts[fmt.Sprintf("%d/tcp", p)] = struct{}{}
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, fmt.Errorf("the config: %w", err)
	}
	return img, nil
}

// WriteLayout writes img as the only image of an OCI layout in dir,
// replacing whatever dir held: the layout is written beside it and
// renamed into place, so a reader never sees half of one.
func WriteLayout(dir string, img v1.Image) error {
	dir = filepath.Clean(dir)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return fmt.Errorf("demoimage: %w", err)
	}
	if err := p.AppendImage(img); err != nil {
		return fmt.Errorf("demoimage: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}
