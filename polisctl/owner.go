package polisctl

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/hex"
	"fmt"

	"github.com/spf13/cobra"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/ownerdir"
)

// ownerCmd is the owner's own credentials.
func (c *cli) ownerCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "owner", Short: "The owner's key and certificates"}
	cmd.AddCommand(&cobra.Command{
		Use:   "rotate-key",
		Short: "Replace the owner key with a new one, revoking every certificate of the old one",
		Long: `rotate-key makes a new owner key, has the cluster accept it in place of the
current one, and saves the new key and its owner certificate in the
configuration directory.

The cluster accepts an owner certificate only while it is for the current
owner key, so this revokes every owner certificate of the old key at once,
wherever copies of it are: this is how to revoke the owner's credentials
after a workstation was lost. The old key no longer takes ownership either.

The new key is saved first as key.der.new; if the command is interrupted
after the cluster accepted it, run polisctl take-ownership --owner-key with
that file.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.withSession(func(s *session) error { return rotateOwnerKey(cmd, s) })
		},
	})
	return cmd
}

func rotateOwnerKey(cmd *cobra.Command, s *session) error {
	cfg, err := ownerdir.Open(s.dir)
	if err != nil {
		return err
	}
	keyDER, err := cfg.Key.Read()
	if err != nil {
		return err
	}
	oldKey, err := identity.ParsePrivateKey(keyDER)
	if err != nil {
		return fmt.Errorf("%s: %w", cfg.Key.Path, err)
	}
	caDER, err := cfg.CA.Read()
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return fmt.Errorf("%s: %w", cfg.CA.Path, err)
	}
	newKey, err := identity.GenerateKey()
	if err != nil {
		return err
	}
	newDER, err := identity.MarshalPrivateKey(newKey)
	if err != nil {
		return err
	}
	// Through cfg, so Plain: the recovery reads this file as a bare key.
	pending := cfg.NewKey
	if err := pending.Write(newDER); err != nil {
		return err
	}
	newPub := newKey.Public().(ed25519.PublicKey)
	req := &cpb.RotateOwnerKeyRequest{
		NewOwnerKey:          newPub,
		NewOwnerKeySignature: ed25519.Sign(newKey, cpb.OwnerKeyRotationMessage(caDER, oldKey.Public().(ed25519.PublicKey))),
	}
	var resp *cpb.RotateOwnerKeyResponse
	err = s.call(cmd.Context(), "rotating the owner key", func(ctx context.Context) (err error) {
		resp, err = cpb.NewAAAServiceClient(s.conn).RotateOwnerKey(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	cert, err := x509.ParseCertificate(resp.OwnerCertificate)
	if err != nil {
		return fmt.Errorf("the owner certificate the curator issued: %w; the new key is in %s: run polisctl take-ownership --owner-key %s", err, pending.Path, pending.Path)
	}
	if err := cert.CheckSignatureFrom(caCert); err != nil {
		return fmt.Errorf("the owner certificate the curator issued is not from the cluster CA: %w", err)
	}
	if _, err := identity.TLSCertificate(cert, newKey); err != nil {
		return fmt.Errorf("the owner certificate the curator issued: %w", err)
	}
	// The key before the certificate: a new key with the old certificate
	// fails to connect with a clear error, and take-ownership mends it.
	if err := cfg.Key.Write(newDER); err != nil {
		return fmt.Errorf("%w; the new key is in %s: run polisctl take-ownership --owner-key %s", err, pending.Path, pending.Path)
	}
	if err := cfg.Cert.Write(cert.Raw); err != nil {
		return fmt.Errorf("%w; run polisctl take-ownership --owner-key %s", err, cfg.Key.Path)
	}
	if err := pending.Remove(); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "The owner key is now %s (saved in %s); every certificate of the old key is revoked.\n",
		hex.EncodeToString(newPub), cfg.Key.Path)
	return nil
}
