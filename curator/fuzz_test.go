package curator

import (
	"net/netip"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// The fuzz targets of what the curator parses from outside: stored node
// records (which any caller's data ends up in), node statuses, labels and
// role changes. Each has a seed corpus in testdata/fuzz, which go test
// runs as ordinary tests; `go test -fuzz FuzzDecodeNode ./curator` (and
// so on) explores further (see docs/threat-model.md).

// FuzzDecodeNode: decodeNode never panics, and a record it accepts is
// consistent, passes the checks, and survives a round trip through the
// store's encoding unchanged.
func FuzzDecodeNode(f *testing.F) {
	f.Fuzz(func(t *testing.T, id string, value []byte) {
		n, err := decodeNode([]byte(nodePrefix+id), value)
		if err != nil || n == nil {
			return
		}
		if n.Id != id {
			t.Fatalf("record under %q holds %q", id, n.Id)
		}
		if err := checkNodeRecord(n); err != nil {
			t.Fatalf("accepted a record that fails the checks: %v", err)
		}
		enc, err := encodeNode(n)
		if err != nil {
			t.Fatalf("an accepted record does not encode: %v", err)
		}
		back, err := decodeNode([]byte(nodeKey(id)), []byte(enc))
		if err != nil || !proto.Equal(back, n) {
			t.Fatalf("round trip: %v, %v; want %v", back, err, n)
		}
	})
}

// FuzzNodeStatus: checkNodeStatus never panics, and a status it accepts
// is small, fully understood and of the documented form.
func FuzzNodeStatus(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		var st cpb.NodeStatus
		if proto.Unmarshal(data, &st) != nil {
			return
		}
		if checkNodeStatus(&st) != nil {
			return
		}
		if proto.Size(&st) > maxStatusSize || unknownFields(st.ProtoReflect()) != "" {
			t.Fatalf("accepted an oversized status or unknown fields: %d bytes", proto.Size(&st))
		}
		a, err := netip.ParseAddr(st.ExternalAddress)
		if err != nil || a.Zone() != "" || a.IsUnspecified() {
			t.Fatalf("accepted external_address %q", st.ExternalAddress)
		}
		if st.ConsensusPeerPort > 65535 || (st.RunningCurator != nil && (st.RunningCurator.Port == 0 || st.RunningCurator.Port > 65535)) {
			t.Fatalf("accepted ports %d, %v", st.ConsensusPeerPort, st.RunningCurator)
		}
	})
}

// FuzzLabel: label validation never panics, and what it accepts follows
// the rules UpdateNodeLabelsRequest states, checked here independently of
// the regular expressions.
func FuzzLabel(f *testing.F) {
	f.Fuzz(func(t *testing.T, key, value string) {
		keyErr, valueErr := validateLabelKey(key), validateLabelValue(value)
		if keyErr == nil {
			prefix, name, hasPrefix := strings.Cut(key, "/")
			if !hasPrefix {
				name = prefix
			} else if !dnsSubdomain(prefix) {
				t.Fatalf("accepted key %q with prefix %q", key, prefix)
			}
			if !labelName(name) {
				t.Fatalf("accepted key %q with name %q", key, name)
			}
		}
		if valueErr == nil && value != "" && !labelName(value) {
			t.Fatalf("accepted value %q", value)
		}
		err := checkLabels(map[string]string{key: value})
		if (err == nil) != (keyErr == nil && valueErr == nil) {
			t.Fatalf("checkLabels(%q=%q) = %v, but the key says %v and the value %v", key, value, err, keyErr, valueErr)
		}
	})
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }

// labelName: 1 to 63 of [A-Za-z0-9_.-], starting and ending alphanumeric.
func labelName(s string) bool {
	if len(s) < 1 || len(s) > 63 || !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return false
	}
	for i := range len(s) {
		if c := s[i]; !alnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

// dnsSubdomain: at most 253 characters, dot-separated parts of lower-case
// letters, digits and '-', each starting and ending with a letter or
// digit.
func dnsSubdomain(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for part := range strings.SplitSeq(s, ".") {
		if part == "" || part[0] == '-' || part[len(part)-1] == '-' {
			return false
		}
		for i := range len(part) {
			if c := part[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// FuzzPlanRoles: a role change never panics, is allowed only for UP
// nodes, does what the request says, and never yields roles a stored
// record could not hold.
func FuzzPlanRoles(f *testing.F) {
	f.Fuzz(func(t *testing.T, state, held, member, controller, worker byte) {
		n := &cpb.Node{Id: "node-000000000000000000000000", State: cpb.NodeState(state % 6), Roles: &cpb.Roles{}}
		if held&1 != 0 {
			n.Roles.ConsensusMember = &cpb.ConsensusMemberRole{}
		}
		if held&2 != 0 {
			n.Roles.KubernetesController = &cpb.KubernetesControllerRole{}
		}
		if held&4 != 0 {
			n.Roles.KubernetesWorker = &cpb.KubernetesWorkerRole{}
		}
		_ = checkRoles(n.State, n.Roles) // never panics, whatever the input
		tri := func(b byte) *bool {
			switch b % 3 {
			case 1:
				return proto.Bool(true)
			case 2:
				return proto.Bool(false)
			}
			return nil
		}
		req := &cpb.UpdateNodeRolesRequest{NodeId: n.Id, ConsensusMember: tri(member), KubernetesController: tri(controller), KubernetesWorker: tri(worker)}
		roles, err := planRoles(n, req)
		if err != nil {
			return
		}
		if n.State != cpb.NodeState_NODE_STATE_UP {
			t.Fatalf("planned roles for a %v node", n.State)
		}
		if err := checkRoles(n.State, roles); err != nil {
			t.Fatalf("planned roles %v that a record cannot hold: %v", roles, err)
		}
		for _, c := range []struct {
			want *bool
			got  bool
			name string
		}{
			{req.ConsensusMember, roles.ConsensusMember != nil, "ConsensusMember"},
			{req.KubernetesController, roles.KubernetesController != nil, "KubernetesController"},
			{req.KubernetesWorker, roles.KubernetesWorker != nil, "KubernetesWorker"},
		} {
			if c.want != nil && *c.want != c.got {
				t.Fatalf("asked for %s = %t, planned %v", c.name, *c.want, roles)
			}
		}
	})
}
