package systembuild

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/polis-os/polis/launch/demoimage"
)

// PauseEntrypoint is where the pause binary is in the image, and the
// image's entrypoint.
const PauseEntrypoint = "/pause"

// pauseUser is the image's user: nobody's ids, as a sandbox needs no
// privilege to wait and reap (a Pod's security context may still choose
// another).
const pauseUser = "65535:65535"

// Annotations of the image in the archive's index, which containerd's
// image import names the image by: the full reference, and (as the OCI
// image layout has it) the tag alone.
const (
	annotationContainerdName = "io.containerd.image.name"
	annotationRefName        = "org.opencontainers.image.ref.name"
)

// epoch is the time of every entry, so that the same binary always gives
// the same archive, byte for byte.
var epoch = time.Unix(0, 0).UTC()

// PauseArchiveBytes returns the pause image as an OCI image archive (a tar
// of an OCI image layout): one layer holding pause as PauseEntrypoint, a
// linux/amd64 config whose entrypoint it is, and an index that names the
// image PauseImage, which is how containerd's image import (ctr images
// import, and the client's Import) names it. The same binary always gives
// the same bytes.
func PauseArchiveBytes(pause []byte) ([]byte, error) {
	img, err := demoimage.Binary{
		Entrypoint: PauseEntrypoint,
		Arch:       "amd64",
		User:       pauseUser,
		CreatedBy:  "polis systembuild: the pause binary",
	}.Image(pause)
	if err != nil {
		return nil, err
	}
	return ociArchive(img, PauseImage)
}

// ociArchive writes img, named ref, as a tar of an OCI image layout:
// oci-layout, index.json and every blob under blobs/sha256/.
func ociArchive(img v1.Image, ref string) ([]byte, error) {
	manifest, err := img.RawManifest()
	if err != nil {
		return nil, err
	}
	mdigest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return nil, err
	}
	cdigest, err := img.ConfigName()
	if err != nil {
		return nil, err
	}
	tag := ref[strings.LastIndexByte(ref, ':')+1:]
	index, err := json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType:   types.OCIManifestSchema1,
			Size:        int64(len(manifest)),
			Digest:      mdigest,
			Annotations: map[string]string{annotationContainerdName: ref, annotationRefName: tag},
			Platform:    &v1.Platform{Architecture: "amd64", OS: "linux"},
		}},
	})
	if err != nil {
		return nil, err
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	if err := add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return nil, err
	}
	if err := add("index.json", index); err != nil {
		return nil, err
	}
	if err := add("blobs/sha256/"+mdigest.Hex, manifest); err != nil {
		return nil, err
	}
	if err := add("blobs/sha256/"+cdigest.Hex, config); err != nil {
		return nil, err
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return nil, err
		}
		rc, err := l.Compressed()
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, err
		}
		if err := add("blobs/sha256/"+d.Hex, data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
