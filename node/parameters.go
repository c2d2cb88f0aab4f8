package node

import (
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/curator"
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
	parse := func(where, path string, b []byte) error {
		p, err := ParseParameters(b)
		if err != nil {
			return fmt.Errorf("node parameters from %s (%s): %w", where, path, err)
		}
		all = append(all, found{where: where, p: p})
		return nil
	}
	read := func(where, path string) error {
		if path == "" {
			return nil
		}
		b, err := readLimited(path, maxParametersSize)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading node parameters from %s (%s): %w", where, path, err)
		}
		return parse(where, path, b)
	}
	if err := read("fw_cfg", src.FWCfg); err != nil {
		return nil, nil, err
	}
	// The ESP's copy is the node's own, written through localstorage (and
	// so checksummed).
	if src.ESP.Path != "" {
		b, err := src.ESP.Read()
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, nil, err
		default:
			if isForgotten(b) {
				return nil, nil, fmt.Errorf("%w: the parameters in %s are those of a node that enrolled and forgot its register ticket, but its sealed configuration is gone: restore %s from a backup, or wipe the node's storage and start it with new parameters (polisctl ticket --parameters) to register it as a new node",
					ErrNoParameters, src.ESP.Path, filepath.Join(filepath.Dir(src.ESP.Path), "sealed-configuration"))
			}
			if err := parse("the ESP", src.ESP.Path, b); err != nil {
				return nil, nil, err
			}
		}
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

// maxParametersSize bounds what is read as node parameters: real ones are a
// few kilobytes (a CA certificate and a handful of curators), and fw_cfg or
// a path on the command line could name anything.
const maxParametersSize = 1 << 20

// readLimited reads at most limit bytes of path, refusing a longer file.
func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("larger than %d bytes: not node parameters", limit)
	}
	return b, nil
}

// ParseParameters decodes and checks node parameters (a NodeParameters
// message in binary protobuf) from outside the node: fw_cfg, the command
// line, the ESP. Fields this version does not know are refused, not
// ignored: they would be instructions the node silently drops.
func ParseParameters(b []byte) (*nodev1.NodeParameters, error) {
	if len(b) > maxParametersSize {
		return nil, fmt.Errorf("%d bytes, more than %d: not node parameters", len(b), maxParametersSize)
	}
	var p nodev1.NodeParameters
	if err := proto.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("corrupt: not a NodeParameters message: %w", err)
	}
	if hasUnknownFields(p.ProtoReflect()) {
		return nil, errors.New("they hold fields this node agent does not know: made for another version?")
	}
	if err := ValidateParameters(&p); err != nil {
		return nil, err
	}
	return &p, nil
}

// hasUnknownFields reports whether m or a message in it holds fields its
// schema does not know.
func hasUnknownFields(m protoreflect.Message) bool {
	if len(m.GetUnknown()) > 0 {
		return true
	}
	unknown := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := range l.Len() {
				if hasUnknownFields(l.Get(i).Message()) {
					unknown = true
				}
			}
		case fd.Message() != nil && !fd.IsMap():
			unknown = hasUnknownFields(v.Message())
		}
		return !unknown
	})
	return unknown
}

// forgetTicket removes the register ticket from the parameters on the ESP
// (f): once a node is enrolled it never registers again, and a ticket left
// on its disk would let whoever reads the disk later (of a decommissioned
// node, say) register nodes of their own. The same goes for the ticket a
// first node bootstrapped its cluster with (ClusterBootstrap's): the
// cluster holds it now. The rest stays, since the cluster directory in it
// is a way back to the curators. It is idempotent.
func forgetTicket(f localstorage.File) error {
	var p nodev1.NodeParameters
	err := f.ReadProto(&p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		// Damaged parameters of an enrolled node are useless, and may
		// still hold the ticket.
		return f.Remove()
	}
	if b := p.GetClusterBootstrap(); len(b.GetRegisterTicket()) > 0 {
		b.RegisterTicket = nil
		return f.WriteProto(&p)
	}
	r := p.GetClusterRegister()
	if len(r.GetRegisterTicket()) == 0 {
		return nil
	}
	r.RegisterTicket = nil
	return f.WriteProto(&p)
}

// isForgotten reports whether b are parameters whose ticket forgetTicket
// removed.
func isForgotten(b []byte) bool {
	var p nodev1.NodeParameters
	if proto.Unmarshal(b, &p) != nil {
		return false
	}
	r := p.GetClusterRegister()
	return r != nil && len(r.RegisterTicket) == 0
}

// ValidateParameters checks parameters for everything a node needs before
// it acts on them.
func ValidateParameters(p *nodev1.NodeParameters) error {
	switch c := p.Cluster.(type) {
	case *nodev1.NodeParameters_ClusterBootstrap:
		if n := len(c.ClusterBootstrap.GetOwnerPublicKey()); n != ed25519.PublicKeySize {
			return fmt.Errorf("cluster_bootstrap.owner_public_key must be an ed25519 public key (%d bytes), not %d bytes", ed25519.PublicKeySize, n)
		}
		if err := curator.CheckSnapshotPolicy(c.ClusterBootstrap.GetInitialClusterConfiguration().GetConsensusSnapshots()); err != nil {
			return fmt.Errorf("cluster_bootstrap.initial_cluster_configuration.consensus_snapshots: %w", err)
		}
		if err := curator.CheckPodNetwork(c.ClusterBootstrap.GetInitialClusterConfiguration().GetPodNetwork()); err != nil {
			return fmt.Errorf("cluster_bootstrap.initial_cluster_configuration.pod_network: %w", err)
		}
		if t := c.ClusterBootstrap.GetRegisterTicket(); t != nil {
			if err := curator.CheckRegisterTicket(t); err != nil {
				return fmt.Errorf("cluster_bootstrap.register_ticket: %w", err)
			}
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
		// Left out, the node learns it from the curators, who must prove
		// they know the ticket (enrolment.learnCA).
		if ca := dir.GetCaCertificate(); len(ca) > 0 {
			if _, err := x509.ParseCertificate(ca); err != nil {
				return fmt.Errorf("cluster_register.cluster_directory.ca_certificate: %w", err)
			}
		}
	default:
		return errors.New("the parameters say neither cluster_bootstrap nor cluster_register")
	}
	return nil
}
