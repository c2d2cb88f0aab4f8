package node

import (
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"strings"

	"google.golang.org/protobuf/proto"

	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/localstorage"
)

// FWCfgParametersPath is where qemu's fw_cfg exposes the parameters passed
// with -fw_cfg name=opt/polis/parameters,file=... once the qemu_fw_cfg
// module is loaded.
const FWCfgParametersPath = "/sys/firmware/qemu_fw_cfg/by_name/opt/polis/parameters/raw"

// ParameterSources are the places node parameters may come from. Empty
// fields are not consulted.
type ParameterSources struct {
	// FWCfg is the fw_cfg file (FWCfgParametersPath inside a VM).
	FWCfg string
	// ESP is the parameters file on the ESP.
	ESP localstorage.File
	// File is a file named on the command line (development).
	File string
}

// ErrNoParameters is returned by LoadParameters when no source has any.
var ErrNoParameters = errors.New("no node parameters")

// LoadParameters reads the node parameters from every source that has
// them. They must agree: two sources with different parameters are an
// error naming both, since guessing which one the operator meant could
// bootstrap a second cluster or register into the wrong one. It returns the
// parameters and the sources they were found in.
func LoadParameters(src ParameterSources) (*nodev1.NodeParameters, []string, error) {
	type found struct {
		where string
		p     *nodev1.NodeParameters
	}
	var all []found
	read := func(where, path string) error {
		if path == "" {
			return nil
		}
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading node parameters from %s (%s): %w", where, path, err)
		}
		var p nodev1.NodeParameters
		if err := proto.Unmarshal(b, &p); err != nil {
			return fmt.Errorf("node parameters from %s (%s) are corrupt: %w", where, path, err)
		}
		if err := ValidateParameters(&p); err != nil {
			return fmt.Errorf("node parameters from %s (%s): %w", where, path, err)
		}
		all = append(all, found{where: where, p: &p})
		return nil
	}
	if err := read("fw_cfg", src.FWCfg); err != nil {
		return nil, nil, err
	}
	if err := read("the ESP", src.ESP.Path); err != nil {
		return nil, nil, err
	}
	if err := read("the command line", src.File); err != nil {
		return nil, nil, err
	}
	if len(all) == 0 {
		var tried []string
		for _, p := range []string{src.FWCfg, src.ESP.Path, src.File} {
			if p != "" {
				tried = append(tried, p)
			}
		}
		return nil, nil, fmt.Errorf("%w: looked in %s", ErrNoParameters, strings.Join(tried, ", "))
	}
	var wheres []string
	for _, f := range all {
		if !proto.Equal(f.p, all[0].p) {
			return nil, nil, fmt.Errorf("the node parameters from %s and from %s disagree; remove the ones that are wrong", all[0].where, f.where)
		}
		wheres = append(wheres, f.where)
	}
	return all[0].p, wheres, nil
}

// ValidateParameters checks parameters for everything a node needs before
// it acts on them.
func ValidateParameters(p *nodev1.NodeParameters) error {
	switch c := p.Cluster.(type) {
	case *nodev1.NodeParameters_ClusterBootstrap:
		if n := len(c.ClusterBootstrap.GetOwnerPublicKey()); n != ed25519.PublicKeySize {
			return fmt.Errorf("cluster_bootstrap.owner_public_key must be an ed25519 public key (%d bytes), not %d bytes", ed25519.PublicKeySize, n)
		}
	case *nodev1.NodeParameters_ClusterRegister:
		r := c.ClusterRegister
		if n := len(r.GetRegisterTicket()); n == 0 {
			return errors.New("cluster_register.register_ticket is missing")
		}
		dir := r.GetClusterDirectory()
		if len(dir.GetCurators()) == 0 {
			return errors.New("cluster_register.cluster_directory lists no curator")
		}
		for i, ep := range dir.GetCurators() {
			if _, err := netip.ParseAddr(ep.GetAddress()); err != nil || ep.GetPort() == 0 || ep.GetPort() > 65535 {
				return fmt.Errorf("cluster_register.cluster_directory.curators[%d]: want an IP address and a port, have %q port %d", i, ep.GetAddress(), ep.GetPort())
			}
		}
		if _, err := x509.ParseCertificate(dir.GetCaCertificate()); err != nil {
			return fmt.Errorf("cluster_register.cluster_directory.ca_certificate: %w", err)
		}
	default:
		return errors.New("the parameters say neither cluster_bootstrap nor cluster_register")
	}
	return nil
}
