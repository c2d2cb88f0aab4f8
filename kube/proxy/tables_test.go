package proxy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeNft writes a stand-in nft into a new bin dir that lists tables as
// listed says, notes every call in the returned log, and fails to delete
// the tables in refuse; it returns the bin dir.
func fakeNft(t *testing.T, listed, refuse string) (binDir, log string) {
	t.Helper()
	binDir = t.TempDir()
	log = filepath.Join(binDir, "log")
	script := `#!/bin/sh
echo "$*" >>` + log + `
case "$*" in
"list tables") printf '` + listed + `' ;;
` + refuse + `) echo "Error: Could not process rule: Device or resource busy" >&2; exit 1 ;;
esac
`
	if err := os.WriteFile(filepath.Join(binDir, "nft"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return binDir, log
}

// DeleteTables deletes the tables asked for that exist, leaves the others
// (another program's), and says which deletion failed with nft's words.
func TestDeleteTables(t *testing.T) {
	want := append(Tables(), "inet cni_hostport")
	bin, log := fakeNft(t, `table inet filter\ntable ip kube-proxy\ntable inet cni_hostport\n`, `"none"`)
	if err := DeleteTables(context.Background(), bin, want); err != nil {
		t.Fatalf("DeleteTables: %v", err)
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(data); got != "list tables\ndelete table ip kube-proxy\ndelete table inet cni_hostport\n" {
		t.Errorf("nft was called:\n%s\nwant the existing kube-proxy and cni_hostport tables deleted alone", got)
	}

	bin, _ = fakeNft(t, `table ip kube-proxy\ntable ip6 kube-proxy\n`, `"delete table ip6 kube-proxy"`)
	err = DeleteTables(context.Background(), bin, want)
	if err == nil || !strings.Contains(err.Error(), "deleting nftables table ip6 kube-proxy") || !strings.Contains(err.Error(), "Device or resource busy") || strings.Contains(err.Error(), "table ip kube-proxy:") {
		t.Errorf("a failed deletion: %v, want it to name ip6 kube-proxy alone and say nft's words", err)
	}
	if err := DeleteTables(context.Background(), t.TempDir(), want); err == nil || !strings.Contains(err.Error(), "listing the nftables tables") {
		t.Errorf("without nft: %v, want the listing's failure", err)
	}
}
