package localstorage

import (
	"fmt"
	"os"
	"path/filepath"
)

// Directory is one directory of the layout.
type Directory struct {
	// Path is the directory's absolute path.
	Path string
	// Private directories (0700) hold secrets; others are 0755.
	Private bool
}

// Root is a node's whole storage layout. Build it with New; every path in
// it is fixed by New, which is the only place that composes paths.
type Root struct {
	// Dir is the root directory everything lives under.
	Dir       string
	ESP       ESP
	Data      Data
	Ephemeral Ephemeral
}

// ESP is the part readable before anything else, kept across reinstalls of
// the data disk.
type ESP struct {
	Directory
	// NodeParameters are the parameters the node was first started with
	// (bootstrap a cluster, or register into one).
	NodeParameters File
	// SealedConfiguration holds what the node needs to rejoin its cluster
	// after a reboot, sealed by a Sealer.
	SealedConfiguration File
	// ClusterDirectory is where the cluster's curators were last seen, to
	// find them again after a reboot.
	ClusterDirectory File
}

// Data is the node's state.
type Data struct {
	Directory
	// Etcd is the consensus member's data directory.
	Etcd Directory
	// Node holds the node's credentials.
	Node NodeCredentials
	// Roles are the node's last known roles, so that a lone control-plane
	// node can restart its control plane before it can reach any curator.
	Roles File
}

// NodeCredentials are the node's key and certificates.
type NodeCredentials struct {
	Directory
	// Key is the node's ed25519 private key (PKCS#8 DER).
	Key File
	// Certificate is the node's certificate from the cluster CA (DER).
	Certificate File
	// CACertificate is the cluster CA's certificate (DER).
	CACertificate File
}

// Ephemeral holds runtime files that mean nothing after a reboot.
type Ephemeral struct {
	Directory
	// ConsensusSocket is the unix socket local processes reach etcd on.
	ConsensusSocket string
}

// New returns the layout under dir, which must be an absolute path.
func New(dir string) (*Root, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("storage root %q must be an absolute path", dir)
	}
	dir = filepath.Clean(dir)
	esp := filepath.Join(dir, "esp")
	data := filepath.Join(dir, "data")
	node := filepath.Join(data, "node")
	eph := filepath.Join(dir, "ephemeral")
	return &Root{
		Dir: dir,
		ESP: ESP{
			Directory: Directory{Path: esp, Private: true},
			NodeParameters: File{Path: filepath.Join(esp, "parameters.pb"), Secret: true,
				Advice: "remove it and start the node with its parameters again (fw_cfg or --parameters)"},
			SealedConfiguration: File{Path: filepath.Join(esp, "sealed-configuration"), Secret: true,
				Advice: "the node cannot prove who it is without it: restore it from a backup, or wipe the node's storage and register it again as a new node (then delete the old one with polisctl node delete)"},
			ClusterDirectory: File{Path: filepath.Join(esp, "cluster-directory.pb"),
				Advice: "remove it: the node finds the curators through its parameters or its own curator and saves it again"},
		},
		Data: Data{
			Directory: Directory{Path: data, Private: true},
			Etcd:      Directory{Path: filepath.Join(data, "etcd"), Private: true},
			Node: NodeCredentials{
				Directory: Directory{Path: node, Private: true},
				Key: File{Path: filepath.Join(node, "key.der"), Secret: true,
					Advice: "remove it: an enrolled node takes its key from the sealed configuration, one that is not enrolled yet makes a new one"},
				Certificate: File{Path: filepath.Join(node, "certificate.der"),
					Advice: "remove it: the node asks the cluster for a new certificate (Join)"},
				CACertificate: File{Path: filepath.Join(node, "ca-certificate.der"),
					Advice: "remove it: the node takes the CA from its sealed configuration"},
			},
			Roles: File{Path: filepath.Join(data, "roles.pb"),
				Advice: "remove it: the node rebuilds it from its consensus data and the curator"},
		},
		Ephemeral: Ephemeral{
			Directory:       Directory{Path: eph, Private: true},
			ConsensusSocket: filepath.Join(eph, "consensus.sock"),
		},
	}, nil
}

// directories lists every directory of the layout, parents first.
func (r *Root) directories() []Directory {
	return []Directory{
		{Path: r.Dir},
		r.ESP.Directory,
		r.Data.Directory,
		r.Data.Node.Directory,
		r.Ephemeral.Directory,
		// Etcd's directory is created by etcd itself, which insists on
		// making it (and checks its permissions).
	}
}

// Create makes every directory of the layout that is missing, and tightens
// the mode of private ones that exist with looser permissions, so that no
// secret is ever written into a world-readable directory. It removes the
// temporary files of writes a crash interrupted (see File.Write): call it
// before anything writes.
func (r *Root) Create() error {
	for _, d := range r.directories() {
		if err := d.create(); err != nil {
			return err
		}
		leftovers, err := filepath.Glob(filepath.Join(d.Path, ".*"+tmpInfix+"*"))
		if err != nil {
			return fmt.Errorf("listing interrupted writes in %s: %w", d.Path, err)
		}
		for _, l := range leftovers {
			if err := os.Remove(l); err != nil {
				return fmt.Errorf("removing the interrupted write %s: %w", l, err)
			}
		}
	}
	return nil
}

// create makes d if it is missing and restricts it to its owner if it is
// private.
func (d Directory) create() error {
	mode := os.FileMode(0o755)
	if d.Private {
		mode = 0o700
	}
	if err := os.MkdirAll(d.Path, mode); err != nil {
		return fmt.Errorf("creating %s: %w", d.Path, err)
	}
	if !d.Private {
		return nil
	}
	fi, err := os.Stat(d.Path)
	if err != nil {
		return fmt.Errorf("checking %s: %w", d.Path, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", d.Path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(d.Path, 0o700); err != nil {
			return fmt.Errorf("restricting %s to its owner: %w", d.Path, err)
		}
	}
	return nil
}
