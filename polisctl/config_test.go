package polisctl

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/ownerdir"
)

// TakeOwnership pins the CA on first use, saves what Dial needs, asks no
// more once pinned, and refuses another cluster's CA saying how to recover.
func TestTakeOwnershipAndDial(t *testing.T) {
	c := bootstrap(t)
	dir := filepath.Join(t.TempDir(), "polisctl")
	curators := []netip.AddrPort{c.first.Curator()}

	if err := ownerdir.TakeOwnership(ctxT(t), dir, curators, c.ownerKey, func(string) bool { return false }); err == nil || !strings.Contains(err.Error(), "not trusted") {
		t.Fatalf("TakeOwnership with the CA refused: %v, want an error saying it was not trusted", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused TakeOwnership left %s behind: %v", dir, err)
	}

	var asked []string
	trust := func(fp string) bool { asked = append(asked, fp); return true }
	if err := ownerdir.TakeOwnership(ctxT(t), dir, curators, c.ownerKey, trust); err != nil {
		t.Fatal(err)
	}
	ca := c.first.Credentials(t).CACertificate
	if len(asked) != 1 || asked[0] != ownerdir.Fingerprint(ca.Raw) {
		t.Fatalf("trust was asked about %q, want once about %s", asked, ownerdir.Fingerprint(ca.Raw))
	}
	for name, mode := range map[string]os.FileMode{"": 0o700, ownerdir.KeyFile: 0o600} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != mode {
			t.Errorf("%s has mode %v, want %v", filepath.Join(dir, name), st.Mode().Perm(), mode)
		}
	}

	conn, err := ownerdir.Dial(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	info, err := cpb.NewManagementServiceClient(conn).GetClusterInfo(ctxT(t), &cpb.GetClusterInfoRequest{})
	if err != nil {
		t.Fatalf("GetClusterInfo as the owner: %v", err)
	}
	if string(info.ClusterDirectory.CaCertificate) != string(ca.Raw) {
		t.Error("GetClusterInfo names another CA")
	}

	// Again: the CA is pinned, so trust is not asked.
	if err := ownerdir.TakeOwnership(ctxT(t), dir, curators, c.ownerKey, trust); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 {
		t.Errorf("trust asked again about a pinned CA: %q", asked)
	}

	// Another cluster, another CA: refused, whatever trust says.
	other := bootstrap(t)
	err = ownerdir.TakeOwnership(ctxT(t), dir, []netip.AddrPort{other.first.Curator()}, other.ownerKey, trust)
	var mismatch *ownerdir.CAMismatchError
	if !errors.As(err, &mismatch) {
		t.Fatalf("TakeOwnership at another cluster: %v, want a CAMismatchError", err)
	}
	for _, want := range []string{ownerdir.Fingerprint(ca.Raw), ownerdir.Fingerprint(other.first.Credentials(t).CACertificate.Raw), filepath.Join(dir, ownerdir.CAFile), "--config"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not mention %q", err, want)
		}
	}
	if len(asked) != 1 {
		t.Errorf("trust asked about another cluster's CA: %q", asked)
	}
}

func TestDialMissingConfig(t *testing.T) {
	dir := t.TempDir()
	_, err := ownerdir.Dial(dir)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, ownerdir.KeyFile)) || !strings.Contains(err.Error(), "polisctl take-ownership") {
		t.Fatalf("Dial of an empty directory: %v, want an error naming %s and take-ownership", err, ownerdir.KeyFile)
	}
}
