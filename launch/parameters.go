package launch

import (
	"fmt"
	"path/filepath"

	"google.golang.org/protobuf/proto"

	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/localstorage"
)

// parametersFile is the node's parameters file: --parameters of a
// process, the fw_cfg blob of a VM. It is written atomically (a node
// started at any moment reads all of it or none) and secret (it may hold
// the register ticket).
func parametersFile(n *Node) localstorage.File {
	return localstorage.File{Path: filepath.Join(n.Dir, "parameters.pb"), Plain: true, Secret: true}
}

func writeParameters(n *Node, p *nodev1.NodeParameters) error {
	b, err := proto.Marshal(p)
	if err != nil {
		return err
	}
	if err := parametersFile(n).Write(b); err != nil {
		return fmt.Errorf("launch: %v: %w", n, err)
	}
	return nil
}

// forgetParameters removes the node's parameters once it is UP: it has
// forgotten its register ticket itself, and needs only its storage to
// start again, so the launcher's copy (a VM's fw_cfg blob on its next
// boot) goes too.
func forgetParameters(n *Node) error {
	if err := parametersFile(n).Remove(); err != nil {
		return fmt.Errorf("launch: %v: removing its parameters: %w", n, err)
	}
	return nil
}
