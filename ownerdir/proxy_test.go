package ownerdir

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The proxy a kubeconfig names (polisctl kubeconfig) is the saved one as a bare URL (the file
// ends in a newline, which a proxy-url must not), or --proxy's.
func TestProxyAddress(t *testing.T) {
	dir := t.TempDir()
	cfg, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := cfg.ProxyAddress(); err != nil || got != "" {
		t.Fatalf("no proxy saved: %q, %v; want none", got, err)
	}
	if err := SaveProxy(dir, "http://127.0.0.1:4321"); err != nil {
		t.Fatal(err)
	}
	if got, err := cfg.ProxyAddress(); err != nil || got != "http://127.0.0.1:4321" {
		t.Fatalf("saved proxy: %q, %v", got, err)
	}
	cfg.ProxyURL = "socks5://127.0.0.1:9"
	if got, err := cfg.ProxyAddress(); err != nil || got != "socks5://127.0.0.1:9" {
		t.Fatalf("--proxy: %q, %v", got, err)
	}
}
