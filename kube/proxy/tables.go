package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Tables are kube-proxy's nftables tables in nftables mode, one per
// family ("family name", as nft names a table). kube-proxy leaves them
// when it stops, so that Services keep working across its restart; a node
// that stops running it for good deletes them (DeleteTables), or it goes
// on sending connections to ClusterIPs to Pods long gone.
func Tables() []string { return []string{"ip kube-proxy", "ip6 kube-proxy"} }

// DeleteTables deletes the nftables tables named ("family name") that
// exist, with nft from binDir (Config.BinDir); one that does not exist is
// no error. It runs nft itself rather than the bundle's `proxy --cleanup`:
// that one skips nftables without a word when it cannot run nft (and
// reports success), probes iptables and IPVS too, and starts the whole
// bundle; the kubelet's Pods' host ports need the same deletion (their
// table is portmap's).
func DeleteTables(ctx context.Context, binDir string, tables []string) error {
	nft := filepath.Join(binDir, "nft")
	out, err := runNft(ctx, nft, "list", "tables")
	if err != nil {
		return fmt.Errorf("kube-proxy: listing the nftables tables to delete %s: %w", strings.Join(tables, ", "), err)
	}
	var present []string
	for line := range strings.Lines(out) {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "table "); ok && slices.Contains(tables, name) {
			present = append(present, name)
		}
	}
	var errs []error
	for _, table := range present {
		if _, err := runNft(ctx, nft, append([]string{"delete", "table"}, strings.Fields(table)...)...); err != nil {
			errs = append(errs, fmt.Errorf("deleting nftables table %s: %w", table, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kube-proxy: %w", err)
	}
	return nil
}

// runNft runs nft with args, binDir first in its PATH as kube-proxy's, and
// returns its output; a failure carries what nft said.
func runNft(ctx context.Context, nft string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, nft, args...)
	cmd.Env = []string{"PATH=" + filepath.Dir(nft) + ":/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", nft, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
