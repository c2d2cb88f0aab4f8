package kubelet

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// The CNI configuration gives Pods addresses from the node's own range,
// with the bridge, loopback and host ports chained in that order, and the
// kubelet is told the same range.
func TestCNIConfigUsesNodeRange(t *testing.T) {
	c := Config{PodCIDR: netip.MustParsePrefix("10.244.7.0/24"), StateDir: "/s", RunDir: "/r", NodeIP: netip.MustParseAddr("10.77.0.3")}
	var conf struct {
		Plugins []struct {
			Type    string `json:"type"`
			Backend string `json:"backend"`
			IPAM    struct {
				Type   string                `json:"type"`
				Ranges [][]map[string]string `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(c.cniConfig(), &conf); err != nil {
		t.Fatalf("the CNI configuration is not JSON: %v\n%s", err, c.cniConfig())
	}
	var types []string
	for _, p := range conf.Plugins {
		types = append(types, p.Type)
	}
	if want := []string{"bridge", "loopback", "portmap"}; !slices.Equal(types, want) {
		t.Errorf("plugins %v, want %v", types, want)
	}
	bridge := conf.Plugins[0]
	if bridge.IPAM.Type != "host-local" || len(bridge.IPAM.Ranges) != 1 || len(bridge.IPAM.Ranges[0]) != 1 || bridge.IPAM.Ranges[0][0]["subnet"] != "10.244.7.0/24" {
		t.Errorf("bridge IPAM %+v, want host-local over 10.244.7.0/24", bridge.IPAM)
	}
	if conf.Plugins[2].Backend != "nftables" {
		t.Errorf("portmap backend %q: the node carries no iptables", conf.Plugins[2].Backend)
	}
	if kc := string(c.kubeletConfig()); !strings.Contains(kc, `podCIDR: "10.244.7.0/24"`) {
		t.Errorf("the kubelet configuration does not name the node's range:\n%s", kc)
	}
}
