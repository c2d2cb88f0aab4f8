package node

import (
	"errors"
	"io/fs"
	"net/netip"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/identity"
)

// The fuzz targets of what a node reads from outside (its parameters) and
// from its own disk (the sealed configuration, the saved roles and cluster
// directory). Each has a seed corpus in testdata/fuzz/<target>, which every
// go test runs; docs/threat-model.md says how to fuzz longer.

// FuzzParseParameters: node parameters, as fw_cfg or a file give them,
// are parsed and checked without a panic, and what is accepted is valid.
func FuzzParseParameters(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseParameters(b)
		if err != nil {
			return
		}
		if err := ValidateParameters(p); err != nil {
			t.Fatalf("ParseParameters accepted invalid parameters: %v", err)
		}
	})
}

// FuzzDecodeSealedConfiguration: an unsealed configuration of any content
// is refused with an error or gives a usable identity; never a panic (a
// seed of the wrong length used to panic in ed25519.NewKeyFromSeed).
func FuzzDecodeSealedConfiguration(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeSealedConfiguration(b)
		if err != nil {
			return
		}
		if len(s.key) == 0 || s.ca == nil || !s.ca.IsCA {
			t.Fatalf("accepted an unusable identity: %+v", s)
		}
	})
}

// fuzzNode is a node over a fresh storage root, for the fuzz targets of
// its saved files.
func fuzzNode(t *testing.T) *Node {
	n, err := New(Config{StorageRoot: t.TempDir(), Address: netip.MustParseAddr("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.root.Create(); err != nil {
		t.Fatal(err)
	}
	return n
}

// FuzzSavedRoles: whatever roles.pb holds behind a valid checksum (what a
// buggy or older writer could leave), restoring the roles never panics and
// leaves a file that reads back, or none.
func FuzzSavedRoles(f *testing.F) {
	f.Fuzz(func(t *testing.T, content []byte) {
		n := fuzzNode(t)
		if err := n.root.Data.Roles.Write(content); err != nil {
			t.Fatal(err)
		}
		member, err := n.restoreRoles(zap.NewNop())
		if err != nil {
			t.Fatalf("restoreRoles: %v", err)
		}
		var roles cpb.Roles
		err = n.root.Data.Roles.ReadProto(&roles)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if member {
				t.Fatal("a consensus member without saved roles")
			}
		case err != nil:
			t.Fatalf("restoreRoles left a file that does not read: %v", err)
		case member != (roles.ConsensusMember != nil):
			t.Fatalf("restoreRoles says member=%v, the file %v", member, &roles)
		}
	})
}

// FuzzSavedDirectory: whatever cluster-directory.pb holds behind a valid
// checksum, the node's known curators come out without a panic, from the
// file if it parses, otherwise from the parameters.
func FuzzSavedDirectory(f *testing.F) {
	ca, err := identity.NewCA(time.Now())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, content []byte) {
		n := fuzzNode(t)
		if err := n.root.ESP.ClusterDirectory.Write(content); err != nil {
			t.Fatal(err)
		}
		curators := n.knownCurators(zap.NewNop(), ca.Certificate())
		var dir cpb.ClusterDirectory
		if proto.Unmarshal(content, &dir) == nil && len(dir.Curators) > 0 && len(curators) != len(dir.Curators) {
			t.Fatalf("knownCurators = %d curators, the file lists %d", len(curators), len(dir.Curators))
		}
	})
}
