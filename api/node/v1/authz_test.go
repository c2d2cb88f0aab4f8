package nodev1

import (
	"testing"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// Every NodeService method declares a valid requirement, and the readers
// and the power switch need different permissions.
func TestEveryMethodDeclaresARequirement(t *testing.T) {
	sd := File_polis_node_v1_nodeapi_proto.Services().ByName("NodeService")
	for i := range sd.Methods().Len() {
		m := sd.Methods().Get(i)
		full := "/" + string(sd.FullName()) + "/" + string(m.Name())
		r, err := MethodRequirement(full)
		if err != nil {
			t.Errorf("%s: %v", full, err)
			continue
		}
		want, wantQuiet := NodePermission_NODE_PERMISSION_READ_NODE, true
		if m.Name() == "Reboot" || m.Name() == "PowerOff" {
			// Who switched a node off is worth an audit line.
			want, wantQuiet = NodePermission_NODE_PERMISSION_POWER_NODE, false
		}
		if r.Caller != cpb.Caller_CALLER_USER || r.Permission != want {
			t.Errorf("%s requires %s, want a user with %s", full, r, want)
		}
		if r.Quiet != wantQuiet {
			t.Errorf("%s: quiet is %v, want %v", full, r.Quiet, wantQuiet)
		}
	}
	for _, bad := range []string{"", "NodeService/Logs", "/polis.node.v1.NodeService/Nope", "/polis.node.v1.Nope/Logs", "/polis.node.v1.LogsRequest/Logs"} {
		if _, err := MethodRequirement(bad); err == nil {
			t.Errorf("MethodRequirement(%q) succeeded", bad)
		}
	}
}
