package clustertest

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/polisctl"
)

// Polisctl runs polisctl commands with a cluster's configuration.
type Polisctl struct {
	// ConfigDir is polisctl's configuration directory (--config).
	ConfigDir string
	// Binary is the polisctl binary to run, as an operator runs it; if
	// empty, the command runs in this process (no build needed, and what
	// it does is in this process's race detector's sight).
	Binary string
}

// Run runs polisctl with args and returns its standard output; the error
// carries its standard error.
func (p Polisctl) Run(ctx context.Context, args ...string) ([]byte, error) {
	full := append([]string{"--config", p.ConfigDir}, args...)
	var stdout, stderr bytes.Buffer
	var err error
	if p.Binary != "" {
		cmd := exec.CommandContext(ctx, p.Binary, full...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err = cmd.Run()
	} else {
		cmd := polisctl.Command()
		cmd.SetOut(&stdout)
		cmd.SetErr(&stderr)
		cmd.SetArgs(full)
		err = cmd.ExecuteContext(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("polisctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// ListNodes is "polisctl node list -o json" with extra flags, parsed, by
// node ID.
func (p Polisctl) ListNodes(ctx context.Context, extra ...string) (map[string]*cpb.Node, error) {
	out, err := p.Run(ctx, append([]string{"node", "list", "-o", "json"}, extra...)...)
	if err != nil {
		return nil, err
	}
	var resp cpb.ListNodesResponse
	if err := UnmarshalJSON(out, &resp); err != nil {
		return nil, err
	}
	return ByID(resp.Nodes), nil
}

// UnmarshalJSON parses what polisctl printed with -o json into m.
func UnmarshalJSON(b []byte, m proto.Message) error {
	if err := protojson.Unmarshal(b, m); err != nil {
		return fmt.Errorf("polisctl printed something other than a %s: %w\n%s", m.ProtoReflect().Descriptor().Name(), err, b)
	}
	return nil
}
