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

// The bridge carries PodMTU when it is given (Pods then fit the tunnel
// to other nodes), and the kernel's default when not; an MTU IPv6 cannot
// use is refused with its name.
func TestCNIConfigPodMTU(t *testing.T) {
	bridgeMTU := func(c Config) (int, bool) {
		var conf struct {
			Plugins []map[string]any `json:"plugins"`
		}
		if err := json.Unmarshal(c.cniConfig(), &conf); err != nil {
			t.Fatalf("the CNI configuration is not JSON: %v", err)
		}
		m, ok := conf.Plugins[0]["mtu"].(float64)
		return int(m), ok
	}
	if m, ok := bridgeMTU(Config{PodMTU: 8920}); !ok || m != 8920 {
		t.Errorf("bridge mtu %d (set %v), want 8920", m, ok)
	}
	if m, ok := bridgeMTU(Config{}); ok {
		t.Errorf("bridge mtu %d with no PodMTU, want none (the kernel's default)", m)
	}
	for _, bad := range []int{-1, 576, 70000} {
		_, err := Config{PodMTU: bad}.withDefaults()
		if err == nil || !strings.Contains(err.Error(), "PodMTU") {
			t.Errorf("PodMTU %d: error %v, want one naming PodMTU", bad, err)
		}
	}
}

// The bridge is the one the node removes when the role goes (Bridge), in
// the network whose state it removes (CNINetwork), and its plugin may
// replace the gateway address a bridge kept from an earlier range
// (forceAddress): otherwise every Pod's ADD fails once the range changed.
func TestCNIConfigBridge(t *testing.T) {
	var conf struct {
		Name    string           `json:"name"`
		Plugins []map[string]any `json:"plugins"`
	}
	c := Config{PodCIDR: netip.MustParsePrefix("10.244.7.0/24")}
	if err := json.Unmarshal(c.cniConfig(), &conf); err != nil {
		t.Fatalf("the CNI configuration is not JSON: %v", err)
	}
	if conf.Name != CNINetwork {
		t.Errorf("network %q, want %q", conf.Name, CNINetwork)
	}
	bridge := conf.Plugins[0]
	if bridge["bridge"] != Bridge || bridge["forceAddress"] != true || bridge["isGateway"] != true {
		t.Errorf("bridge plugin %v, want bridge %q, forceAddress and isGateway true", bridge, Bridge)
	}
}
