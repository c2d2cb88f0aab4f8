package node

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/localstorage"
)

func bootstrapParams(t *testing.T) *nodev1.NodeParameters {
	t.Helper()
	k, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return &nodev1.NodeParameters{Cluster: &nodev1.NodeParameters_ClusterBootstrap{
		ClusterBootstrap: &nodev1.ClusterBootstrap{OwnerPublicKey: k.Public().(ed25519.PublicKey)},
	}}
}

func writeParams(t *testing.T, path string, p *nodev1.NodeParameters) {
	t.Helper()
	b, err := proto.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestLoadParameters(t *testing.T) {
	dir := t.TempDir()
	src := ParameterSources{
		FWCfg: filepath.Join(dir, "fwcfg"),
		ESP:   localstorage.File{Path: filepath.Join(dir, "esp.pb")},
		File:  filepath.Join(dir, "flag.pb"),
	}
	if _, _, err := LoadParameters(src); !errors.Is(err, ErrNoParameters) || !strings.Contains(err.Error(), src.File) {
		t.Fatalf("no parameters: %v", err)
	}

	p := bootstrapParams(t)
	writeParams(t, src.File, p)
	got, where, err := LoadParameters(src)
	if err != nil || !proto.Equal(got, p) || strings.Join(where, ",") != "the command line" {
		t.Fatalf("LoadParameters = %v, %v, %v", got, where, err)
	}

	// The same parameters in two places agree.
	if err := src.ESP.WriteProto(p); err != nil {
		t.Fatal(err)
	}
	if _, where, err := LoadParameters(src); err != nil || len(where) != 2 {
		t.Fatalf("two agreeing sources: %v, %v", where, err)
	}

	// Different ones do not.
	writeParams(t, src.FWCfg, bootstrapParams(t))
	_, _, err = LoadParameters(src)
	if err == nil || !strings.Contains(err.Error(), "fw_cfg") || !strings.Contains(err.Error(), "disagree") {
		t.Fatalf("disagreeing sources: %v", err)
	}

	// Corrupt ones name where they came from.
	if err := os.WriteFile(src.FWCfg, []byte{0xff, 0xff}, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadParameters(src); err == nil || !strings.Contains(err.Error(), "fw_cfg") || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("corrupt source: %v", err)
	}
}

func TestValidateParameters(t *testing.T) {
	ca, err := identity.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	good := &nodev1.ClusterRegister{
		RegisterTicket: make([]byte, 32),
		ClusterDirectory: &cpb.ClusterDirectory{
			Curators:      []*cpb.CuratorEndpoint{{NodeId: "node-x", Address: "127.0.0.1", Port: 7835}},
			CaCertificate: ca.Certificate().Raw,
		},
	}
	reg := func(mod func(r *nodev1.ClusterRegister)) *nodev1.NodeParameters {
		r := proto.Clone(good).(*nodev1.ClusterRegister)
		mod(r)
		return &nodev1.NodeParameters{Cluster: &nodev1.NodeParameters_ClusterRegister{ClusterRegister: r}}
	}
	if err := ValidateParameters(reg(func(*nodev1.ClusterRegister) {})); err != nil {
		t.Fatalf("good register parameters: %v", err)
	}
	// Without the CA (the node learns it with the ticket) and without the
	// curators' node IDs (checked by address): good too.
	if err := ValidateParameters(reg(func(r *nodev1.ClusterRegister) {
		r.ClusterDirectory.CaCertificate = nil
		r.ClusterDirectory.Curators[0].NodeId = ""
	})); err != nil {
		t.Fatalf("register parameters without a CA: %v", err)
	}
	ticket, err := curator.NewRegisterTicket()
	if err != nil {
		t.Fatal(err)
	}
	boot := func(ticket []byte) *nodev1.NodeParameters {
		return &nodev1.NodeParameters{Cluster: &nodev1.NodeParameters_ClusterBootstrap{ClusterBootstrap: &nodev1.ClusterBootstrap{
			OwnerPublicKey: make([]byte, ed25519.PublicKeySize),
			RegisterTicket: ticket,
		}}}
	}
	if err := ValidateParameters(boot(ticket)); err != nil {
		t.Fatalf("bootstrap parameters with a chosen ticket: %v", err)
	}
	for name, tc := range map[string]struct {
		p    *nodev1.NodeParameters
		want string
	}{
		"empty":                  {&nodev1.NodeParameters{}, "neither"},
		"short owner":            {&nodev1.NodeParameters{Cluster: &nodev1.NodeParameters_ClusterBootstrap{ClusterBootstrap: &nodev1.ClusterBootstrap{OwnerPublicKey: []byte{1}}}}, "owner_public_key"},
		"no ticket":              {reg(func(r *nodev1.ClusterRegister) { r.RegisterTicket = nil }), "register_ticket"},
		"no curators":            {reg(func(r *nodev1.ClusterRegister) { r.ClusterDirectory.Curators = nil }), "no curator"},
		"bad address":            {reg(func(r *nodev1.ClusterRegister) { r.ClusterDirectory.Curators[0].Address = "example.com" }), "curators[0]"},
		"no port":                {reg(func(r *nodev1.ClusterRegister) { r.ClusterDirectory.Curators[0].Port = 0 }), "curators[0]"},
		"bad ca":                 {reg(func(r *nodev1.ClusterRegister) { r.ClusterDirectory.CaCertificate = []byte("x") }), "ca_certificate"},
		"short bootstrap ticket": {boot(ticket[:16]), "register_ticket: the register ticket is 16 bytes"},
		"zero bootstrap ticket":  {boot(make([]byte, 32)), "register_ticket: the register ticket is 32 times the byte 0x00"},
		"snapshots kept": {&nodev1.NodeParameters{Cluster: &nodev1.NodeParameters_ClusterBootstrap{ClusterBootstrap: &nodev1.ClusterBootstrap{
			OwnerPublicKey:              make([]byte, ed25519.PublicKeySize),
			InitialClusterConfiguration: &nodev1.ClusterConfiguration{ConsensusSnapshots: &cpb.SnapshotPolicy{Keep: 1000}},
		}}}, "consensus_snapshots: snapshot policy: keep 1000"},
		"pod range over services": {&nodev1.NodeParameters{Cluster: &nodev1.NodeParameters_ClusterBootstrap{ClusterBootstrap: &nodev1.ClusterBootstrap{
			OwnerPublicKey:              make([]byte, ed25519.PublicKeySize),
			InitialClusterConfiguration: &nodev1.ClusterConfiguration{PodNetwork: &cpb.PodNetwork{ClusterRange: "10.96.0.0/16"}},
		}}}, "pod_network: pod network: cluster range 10.96.0.0/16 overlaps the Kubernetes service range"},
	} {
		if err := ValidateParameters(tc.p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error about %s", name, err, tc.want)
		}
	}
}

// A sealed configuration that unseals but holds a key seed of the wrong
// size is refused with an error naming the file; before, it panicked in
// ed25519.NewKeyFromSeed on every start.
func TestSealedConfigurationChecked(t *testing.T) {
	root, err := localstorage.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := root.Create(); err != nil {
		t.Fatal(err)
	}
	ca, err := identity.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*nodev1.SealedConfiguration{
		"short seed": {NodePrivateKeySeed: key.Seed()[:31], CaCertificate: ca.Certificate().Raw},
		"no CA":      {NodePrivateKeySeed: key.Seed()},
	} {
		if err := writeSealedConfiguration(root, localstorage.Unsealed{}, c); err != nil {
			t.Fatal(err)
		}
		_, err := readSealedConfiguration(root, localstorage.Unsealed{})
		if !errors.Is(err, localstorage.ErrCorrupt) || !strings.Contains(err.Error(), root.ESP.SealedConfiguration.Path) {
			t.Errorf("%s: %v, want a CorruptError naming the file", name, err)
		}
	}
	good := &nodev1.SealedConfiguration{NodePrivateKeySeed: key.Seed(), CaCertificate: ca.Certificate().Raw}
	if err := writeSealedConfiguration(root, localstorage.Unsealed{}, good); err != nil {
		t.Fatal(err)
	}
	s, err := readSealedConfiguration(root, localstorage.Unsealed{})
	if err != nil || !s.key.Equal(key) {
		t.Fatalf("the good configuration: %v", err)
	}
}

// Once enrolled, a node keeps its parameters without the register ticket;
// such parameters without a sealed configuration say what happened.
func TestForgetTicket(t *testing.T) {
	ca, err := identity.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	f := localstorage.File{Path: filepath.Join(t.TempDir(), "parameters.pb")}
	p := &nodev1.NodeParameters{Cluster: &nodev1.NodeParameters_ClusterRegister{ClusterRegister: &nodev1.ClusterRegister{
		RegisterTicket: []byte("secret-ticket-secret-ticket-0123"),
		ClusterDirectory: &cpb.ClusterDirectory{
			Curators:      []*cpb.CuratorEndpoint{{NodeId: "node-x", Address: "127.0.0.1", Port: 7835}},
			CaCertificate: ca.Certificate().Raw,
		},
	}}}
	kept, err := forgetWritten(t, f, p)
	if err != nil || len(kept.GetClusterRegister().GetClusterDirectory().GetCurators()) != 1 {
		t.Fatalf("the directory was not kept: %v", err)
	}
	_, _, err = LoadParameters(ParameterSources{ESP: f})
	if !errors.Is(err, ErrNoParameters) || !strings.Contains(err.Error(), "sealed-configuration") {
		t.Fatalf("LoadParameters of forgotten parameters = %v", err)
	}
}

// A first node forgets the ticket it bootstrapped its cluster with, and
// keeps the rest of its parameters.
func TestForgetBootstrapTicket(t *testing.T) {
	f := localstorage.File{Path: filepath.Join(t.TempDir(), "parameters.pb")}
	p := bootstrapParams(t)
	p.GetClusterBootstrap().RegisterTicket = []byte("secret-ticket-secret-ticket-0123")
	kept, err := forgetWritten(t, f, p)
	if err != nil || !bytes.Equal(kept.GetClusterBootstrap().GetOwnerPublicKey(), p.GetClusterBootstrap().GetOwnerPublicKey()) {
		t.Fatalf("the rest was not kept: %v, %v", kept, err)
	}
}

// forgetWritten writes p to f, forgets its ticket twice (forgetting is
// idempotent), checks that no byte of the ticket (which holds
// "secret-ticket") is left in the file, and returns what the file holds
// then, or the error reading it.
func forgetWritten(t *testing.T, f localstorage.File, p *nodev1.NodeParameters) (*nodev1.NodeParameters, error) {
	t.Helper()
	if err := f.WriteProto(p); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := forgetTicket(f); err != nil {
			t.Fatal(err)
		}
	}
	raw, _ := os.ReadFile(f.Path)
	if strings.Contains(string(raw), "secret-ticket") {
		t.Fatal("the ticket is still on disk")
	}
	var kept nodev1.NodeParameters
	err := f.ReadProto(&kept)
	return &kept, err
}
