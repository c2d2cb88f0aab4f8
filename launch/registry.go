package launch

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Images without a public registry (Options.Images, polis-launch --image
// REF=PATH): the launcher serves them from a registry of its own, an
// in-memory one (go-containerregistry's registry handler) on its port on
// the cluster switch (RegistryPort at the launcher's address in the VM
// network), and every node is told (polis-node --kubernetes-registry,
// through the kernel command line) to pull the registry host of each REF
// from there. Nodes pull with containerd's ordinary pull, as they would
// from any registry: nothing is copied into them. The registry serves
// plain HTTP, on the cluster network only; the images are pushed into it
// through a loopback listener that lives only while they are.

// Image is an image the launcher serves to the nodes.
type Image struct {
	// Ref is the reference Pods name it by (demo, demo:v1,
	// registry.example/team/demo:v1); a Ref without a registry host is
	// docker.io's, as containerd reads it.
	Ref string
	// Path is an OCI image layout directory, or a tar archive of one (an
	// OCI archive) or a docker archive (docker save).
	Path string
}

// ParseImage parses REF=PATH.
func ParseImage(s string) (Image, error) {
	ref, p, ok := strings.Cut(s, "=")
	if !ok || ref == "" || p == "" {
		return Image{}, fmt.Errorf("image %q: want REF=PATH (e.g. demo=./demo-image)", s)
	}
	if _, err := name.ParseReference(ref); err != nil {
		return Image{}, fmt.Errorf("image %q: the reference: %w", s, err)
	}
	return Image{Ref: ref, Path: p}, nil
}

// RegistryPort is the launcher's registry's port on its cluster address.
const RegistryPort = 5000

// dockerHub is the registry host containerd gives a reference without
// one; go-containerregistry calls it index.docker.io.
const dockerHub = "docker.io"

// imageRegistry is the launcher's registry while it serves.
type imageRegistry struct {
	srv *http.Server
	// hosts are the registry hosts of the images, each pulled from url.
	hosts []string
	url   string
}

// loadedImage is an Image read from its path: an image or an index.
type loadedImage struct {
	Image
	ref   name.Reference
	img   v1.Image
	index v1.ImageIndex
}

// registryHost is ref's registry host as containerd names it.
func registryHost(ref name.Reference) string {
	h := ref.Context().RegistryStr()
	if h == name.DefaultRegistry {
		return dockerHub
	}
	return h
}

// loadImages reads every image of Options.Images, so that a bad path
// fails the launch before any VM boots. Tar archives of OCI layouts are
// unpacked below dir.
func loadImages(images []Image, dir string) ([]loadedImage, error) {
	var out []loadedImage
	for i, im := range images {
		ref, err := name.ParseReference(im.Ref)
		if err != nil {
			return nil, fmt.Errorf("launch: image %s: %w", im.Ref, err)
		}
		l := loadedImage{Image: im, ref: ref}
		if l.img, l.index, err = readImage(im.Path, filepath.Join(dir, fmt.Sprintf("image%d", i+1))); err != nil {
			return nil, fmt.Errorf("launch: image %s=%s: %w", im.Ref, im.Path, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// readImage reads an OCI layout directory, an OCI archive (unpacked into
// scratch) or a docker archive.
func readImage(p, scratch string) (v1.Image, v1.ImageIndex, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, nil, err
	}
	if st.IsDir() {
		return readLayout(p)
	}
	oci, err := isOCIArchive(p)
	if err != nil {
		return nil, nil, err
	}
	if oci {
		if err := untar(p, scratch); err != nil {
			return nil, nil, err
		}
		return readLayout(scratch)
	}
	img, err := tarball.ImageFromPath(p, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("neither an OCI layout (no oci-layout file) nor a docker archive with one image: %w", err)
	}
	return img, nil, nil
}

// readLayout reads an OCI layout: the one image or index its index.json
// names.
func readLayout(dir string) (v1.Image, v1.ImageIndex, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("an OCI image layout: %w", err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, nil, err
	}
	if len(m.Manifests) != 1 {
		return nil, nil, fmt.Errorf("the OCI layout %s names %d manifests in its index.json: want one image (or one index)", dir, len(m.Manifests))
	}
	d := m.Manifests[0]
	if d.MediaType.IsIndex() {
		ii, err := idx.ImageIndex(d.Digest)
		return nil, ii, err
	}
	if !d.MediaType.IsImage() {
		return nil, nil, fmt.Errorf("the OCI layout %s names a %s, not an image", dir, d.MediaType)
	}
	img, err := idx.Image(d.Digest)
	return img, nil, err
}

// isOCIArchive says whether the tar archive p holds an OCI layout.
func isOCIArchive(p string) (bool, error) {
	f, err := os.Open(p)
	if err != nil {
		return false, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("not a tar archive or an OCI layout directory: %w", err)
		}
		if path.Clean(h.Name) == "oci-layout" {
			return true, nil
		}
	}
}

// untar unpacks the regular files and directories of the archive p into
// dir, refusing names that leave it.
func untar(p, dir string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		rel := path.Clean(h.Name)
		if !filepath.IsLocal(rel) {
			return fmt.Errorf("the archive names %q, outside it", h.Name)
		}
		dst := filepath.Join(dir, filepath.FromSlash(rel))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			w, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(w, tr)
			if cerr := w.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

// startRegistry serves images on the launcher's cluster address and
// pushes them into it.
func (c *Cluster) startRegistry(ctx context.Context, images []loadedImage) error {
	if len(images) == 0 {
		return nil
	}
	handler := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	ln, err := c.vmnet.host.Listen(RegistryPort)
	if err != nil {
		return fmt.Errorf("launch: the image registry: %w", err)
	}
	addr := netip.AddrPortFrom(hostAddress(c.opts.VM.Network), RegistryPort)
	r := &imageRegistry{srv: &http.Server{Handler: handler, ReadHeaderTimeout: time.Minute}, url: "http://" + addr.String()}
	go r.srv.Serve(ln)
	c.registry = r
	// Pushed through loopback: the launcher cannot dial its own netstack
	// address from the host.
	lo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("launch: the image registry: %w", err)
	}
	push := &http.Server{Handler: handler, ReadHeaderTimeout: time.Minute}
	go push.Serve(lo)
	defer push.Close()
	if r.hosts, err = pushImages(ctx, lo.Addr().String(), images); err != nil {
		return err
	}
	for _, im := range images {
		c.progress("image %s (%s) served at %s/%s%s", im.Ref, im.Path, addr, im.ref.Context().RepositoryStr(), refSuffix(im.ref))
	}
	c.progress("the nodes pull %s from the launcher's registry %s", strings.Join(r.hosts, ", "), r.url)
	return nil
}

// pushImages pushes images to the registry at hostport (plain HTTP),
// each under its own repository and tag, and returns their registry
// hosts, sorted, each once.
func pushImages(ctx context.Context, hostport string, images []loadedImage) ([]string, error) {
	seen := map[string]bool{}
	var hosts []string
	for _, im := range images {
		dst, err := name.ParseReference(hostport+"/"+im.ref.Context().RepositoryStr()+refSuffix(im.ref), name.Insecure)
		if err != nil {
			return nil, fmt.Errorf("launch: image %s: %w", im.Ref, err)
		}
		if im.index != nil {
			err = remote.WriteIndex(dst, im.index, remote.WithContext(ctx))
		} else {
			err = remote.Write(dst, im.img, remote.WithContext(ctx))
		}
		if err != nil {
			return nil, fmt.Errorf("launch: serving image %s: %w", im.Ref, err)
		}
		if h := registryHost(im.ref); !seen[h] {
			seen[h] = true
			hosts = append(hosts, h)
		}
	}
	sort.Strings(hosts)
	return hosts, nil
}

// refSuffix is ref's tag (:TAG) or digest (@DIGEST).
func refSuffix(ref name.Reference) string {
	if d, ok := ref.(name.Digest); ok {
		return "@" + d.DigestStr()
	}
	return ":" + ref.Identifier()
}

// registryFlags are the nodes' kubernetes-registry settings
// (HOST=URL) for the launcher's registry.
func (c *Cluster) registryFlags() []string {
	if c.registry == nil {
		return nil
	}
	var f []string
	for _, h := range c.registry.hosts {
		f = append(f, "kubernetes-registry="+h+"="+c.registry.url)
	}
	return f
}

// closeRegistry stops serving images.
func (c *Cluster) closeRegistry() error {
	if c.registry == nil {
		return nil
	}
	return c.registry.srv.Close()
}
