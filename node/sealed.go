package node

import (
	"crypto/ed25519"
	"crypto/x509"
	"fmt"

	"google.golang.org/protobuf/proto"

	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/localstorage"
)

// sealed is what the sealed configuration gives a node that enrolled: its
// identity (the key) and the cluster it belongs to (the CA).
type sealed struct {
	key ed25519.PrivateKey
	ca  *x509.Certificate
}

func writeSealedConfiguration(root *localstorage.Root, s localstorage.Sealer, c *nodev1.SealedConfiguration) error {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		return fmt.Errorf("encoding the sealed configuration: %w", err)
	}
	return localstorage.WriteSealed(root.ESP.SealedConfiguration, s, b)
}

// readSealedConfiguration returns the node's sealed identity; an error
// matching fs.ErrNotExist means the node has not enrolled yet, one matching
// localstorage.ErrCorrupt that the file is damaged (the error says what to
// do).
func readSealedConfiguration(root *localstorage.Root, s localstorage.Sealer) (*sealed, error) {
	f := root.ESP.SealedConfiguration
	b, err := localstorage.ReadSealed(f, s)
	if err != nil {
		return nil, err
	}
	c, err := decodeSealedConfiguration(b)
	if err != nil {
		return nil, &localstorage.CorruptError{Path: f.Path, Problem: err.Error(), Advice: f.Advice}
	}
	return c, nil
}

// decodeSealedConfiguration parses and checks an unsealed configuration.
// Every field is checked before it is used: a key of the wrong size would
// panic in ed25519.NewKeyFromSeed, and a field this version does not know
// means the file was not written by it.
func decodeSealedConfiguration(b []byte) (*sealed, error) {
	var c nodev1.SealedConfiguration
	if err := proto.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("not a sealed configuration: %w", err)
	}
	if len(c.ProtoReflect().GetUnknown()) > 0 {
		return nil, fmt.Errorf("it holds fields this node agent does not know (%d bytes): written by another version?", len(c.ProtoReflect().GetUnknown()))
	}
	if n := len(c.NodePrivateKeySeed); n != ed25519.SeedSize {
		return nil, fmt.Errorf("node_private_key_seed is %d bytes, want %d", n, ed25519.SeedSize)
	}
	ca, err := x509.ParseCertificate(c.CaCertificate)
	if err != nil {
		return nil, fmt.Errorf("ca_certificate: %w", err)
	}
	if !ca.IsCA {
		return nil, fmt.Errorf("ca_certificate (%s) is not a CA certificate", ca.Subject)
	}
	if err := ca.CheckSignatureFrom(ca); err != nil {
		return nil, fmt.Errorf("ca_certificate (%s) is not a self-signed CA: %w", ca.Subject, err)
	}
	return &sealed{key: ed25519.NewKeyFromSeed(c.NodePrivateKeySeed), ca: ca}, nil
}
