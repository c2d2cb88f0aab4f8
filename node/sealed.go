package node

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/localstorage"
)

func writeSealedConfiguration(root *localstorage.Root, s localstorage.Sealer, c *nodev1.SealedConfiguration) error {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		return fmt.Errorf("encoding the sealed configuration: %w", err)
	}
	return localstorage.WriteSealed(root.ESP.SealedConfiguration, s, b)
}

// readSealedConfiguration returns the node's sealed configuration; an error
// matching fs.ErrNotExist means the node has not enrolled yet.
func readSealedConfiguration(root *localstorage.Root, s localstorage.Sealer) (*nodev1.SealedConfiguration, error) {
	b, err := localstorage.ReadSealed(root.ESP.SealedConfiguration, s)
	if err != nil {
		return nil, err
	}
	var c nodev1.SealedConfiguration
	if err := proto.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("the sealed configuration %s is corrupt: %w", root.ESP.SealedConfiguration.Path, err)
	}
	return &c, nil
}
