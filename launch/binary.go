package launch

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// nodeModulePackage is the node agent's main package, built when no binary
// is given.
const nodeModulePackage = "github.com/polis-os/polis/cmd/polis-node"

// nodeBinary returns the polis-node to run: the one in Options, one next
// to the running executable (an installed polis-launch), or one built from
// source into BaseDir/bin, so that "go run ./cmd/polis-launch" on a fresh
// clone needs nothing but Go.
func (c *Cluster) nodeBinary(ctx context.Context) (string, error) {
	if c.opts.NodeBinary != "" {
		return filepath.Abs(c.opts.NodeBinary)
	}
	if exe, err := os.Executable(); err == nil {
		sibling := filepath.Join(filepath.Dir(exe), "polis-node")
		if st, err := os.Stat(sibling); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return sibling, nil
		}
	}
	out := filepath.Join(c.BaseDir, "bin", "polis-node")
	c.progress("building polis-node into %s (on a fresh clone the first build takes a minute or two)", out)
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, nodeModulePackage)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("launch: building polis-node: %w\n%s\nRun from inside the Polis repository, or pass the path of a polis-node binary", err, strings.TrimSpace(string(b)))
	}
	c.progress("built polis-node in %v", time.Since(start).Round(100*time.Millisecond))
	return out, nil
}
