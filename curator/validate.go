package curator

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/kube/controlplane"
)

// Every byte the curator stores comes from a caller at some point, and every
// watcher receives every stored record: so every stored message is checked
// in full before it is written (checkNodeRecord, from encodeNode) and again
// when it is read back (decodeNode). The checks are the same both ways:
//
//   - No unknown fields, anywhere in the message. proto.Unmarshal keeps
//     fields it does not know and proto.Marshal writes them out again, so
//     without this check a caller could have the curator store, and send
//     to every watcher, any number of bytes that no validation looks at.
//   - A size cap per message: a status at most maxStatusSize, a whole
//     record at most maxNodeRecordSize. Together with the limit on NEW
//     records (registration.go) they bound what a caller without approval
//     can make the cluster store.
//   - Every field of the form its documentation gives: IP addresses,
//     ports, label syntax, state, roles that fit the state.
//
// A refused message is a clear INVALID_ARGUMENT naming the field; a stored
// record that fails is corrupt, and is refused rather than served (the
// node cache leaves it out, so the node is refused everywhere). A curator
// therefore refuses records written by a newer curator with fields it does
// not know: an upgrade that adds a stored field must reach every curator
// before any of them writes it.

// Limits on what the curator stores.
const (
	// maxStatusSize is the largest NodeStatus, encoded. A real one is
	// under 200 bytes, plus up to about 350 for a consensus member's
	// list of snapshots and 450 for the Kubernetes notes.
	maxStatusSize = 1536
	// maxNodeRecordSize is the largest node record, encoded: 64 labels of
	// the longest form take about 25 KiB, and a consensus member's join
	// data a few KiB plus its peers and the peer CA's revocation list.
	maxNodeRecordSize = 128 << 10
	// maxVersionLen is the longest version a node may report.
	maxVersionLen = 128
	// maxBootIDLen is the longest boot ID. A boot ID is a UUID (36
	// characters); the limit leaves room for other forms without letting
	// the field carry anything else.
	maxBootIDLen = 64
	// maxLabels is the most labels a node may carry (see
	// UpdateNodeLabelsRequest).
	maxLabels = 64
)

// unknownFields returns the path of the first field of m, or of a message
// within it, that the curator's API does not define ("" if there is none).
func unknownFields(m protoreflect.Message) string {
	if len(m.GetUnknown()) > 0 {
		return string(m.Descriptor().Name())
	}
	var found string
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		found = unknownFieldsIn(fd, v)
		if found != "" {
			found = string(m.Descriptor().Name()) + "." + found
		}
		return found == ""
	})
	return found
}

// unknownFieldsIn is unknownFields for the value v of field fd.
func unknownFieldsIn(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	name := string(fd.Name())
	switch {
	case fd.IsList() && fd.Message() != nil:
		l := v.List()
		for i := range l.Len() {
			if u := unknownFields(l.Get(i).Message()); u != "" {
				return fmt.Sprintf("%s[%d].%s", name, i, u)
			}
		}
	case fd.IsMap() && fd.MapValue().Message() != nil:
		var found string
		v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
			if u := unknownFields(mv.Message()); u != "" {
				found = fmt.Sprintf("%s[%v].%s", name, k, u)
			}
			return found == ""
		})
		return found
	case fd.Message() != nil && !fd.IsList() && !fd.IsMap():
		if u := unknownFields(v.Message()); u != "" {
			return name + "." + u
		}
	}
	return ""
}

// checkNoUnknownFields refuses m if it carries a field the API does not
// define, naming it.
func checkNoUnknownFields(what string, m proto.Message) error {
	if u := unknownFields(m.ProtoReflect()); u != "" {
		return fmt.Errorf("%s carries fields this curator does not know (in %s): refused, since nothing could check them", what, u)
	}
	return nil
}

// checkNodeStatus checks a status a node reports about itself: no unknown
// fields, at most maxStatusSize bytes, and every field of its documented
// form.
func checkNodeStatus(st *cpb.NodeStatus) error {
	if err := checkNoUnknownFields("status", st); err != nil {
		return err
	}
	if size := proto.Size(st); size > maxStatusSize {
		return fmt.Errorf("status is %d bytes encoded, more than the %d allowed", size, maxStatusSize)
	}
	var errs []error
	addr, err := netip.ParseAddr(st.ExternalAddress)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("external_address %q is not an IP address", st.ExternalAddress))
	case addr.Zone() != "":
		// A zone only means something on the host that wrote it.
		errs = append(errs, fmt.Errorf("external_address %q: an address with a zone cannot be reached from other nodes", st.ExternalAddress))
	case addr.IsUnspecified():
		errs = append(errs, fmt.Errorf("external_address %q is unspecified: give the address other nodes reach this node at", st.ExternalAddress))
	}
	if len(st.Version) > maxVersionLen {
		errs = append(errs, fmt.Errorf("version is %d bytes, more than %d", len(st.Version), maxVersionLen))
	}
	if len(st.BootId) > maxBootIDLen {
		errs = append(errs, fmt.Errorf("boot_id is %d bytes, more than %d", len(st.BootId), maxBootIDLen))
	}
	if rc := st.RunningCurator; rc != nil && (rc.Port == 0 || rc.Port > 65535) {
		errs = append(errs, fmt.Errorf("running_curator.port %d is not a TCP port", rc.Port))
	}
	if st.ConsensusPeerPort > 65535 {
		errs = append(errs, fmt.Errorf("consensus_peer_port %d is not a TCP port", st.ConsensusPeerPort))
	}
	if k := st.Kubernetes; k != nil {
		errs = append(errs, checkKubernetesStatus(k)...)
	}
	errs = append(errs, checkConsensusSnapshots(st.ConsensusSnapshots)...)
	if st.Timestamp != nil {
		if err := st.Timestamp.CheckValid(); err != nil {
			errs = append(errs, fmt.Errorf("timestamp: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("status: %w", err)
	}
	return nil
}

// kubernetesComponents are the names KubernetesStatus.running may hold.
var kubernetesComponents = map[string]bool{controlplane.APIServer: true, controlplane.ControllerManager: true, controlplane.Scheduler: true}

// maxKubernetesNoteLen is the documented bound of KubernetesStatus' notes.
const maxKubernetesNoteLen = 200

// checkKubernetesStatus checks the Kubernetes part of a status against its
// documented form: operators read it in node describe, and the curator
// hands its apiserver port to every kubeconfig it issues.
func checkKubernetesStatus(k *cpb.KubernetesStatus) []error {
	var errs []error
	seen := map[string]bool{}
	for _, c := range k.Running {
		if !kubernetesComponents[c] {
			errs = append(errs, fmt.Errorf("kubernetes.running: %q is not a control-plane component (apiserver, controller-manager, scheduler)", c))
		} else if seen[c] {
			errs = append(errs, fmt.Errorf("kubernetes.running: %q named twice", c))
		}
		seen[c] = true
	}
	if k.ApiserverPort > 65535 {
		errs = append(errs, fmt.Errorf("kubernetes.apiserver_port %d is not a TCP port", k.ApiserverPort))
	}
	if k.ApiserverReady && k.ApiserverPort == 0 {
		errs = append(errs, errors.New("kubernetes: apiserver_ready without an apiserver_port"))
	}
	if len(k.ControllerNote) > maxKubernetesNoteLen {
		errs = append(errs, fmt.Errorf("kubernetes.controller_note is %d bytes, more than %d", len(k.ControllerNote), maxKubernetesNoteLen))
	}
	if len(k.WorkerNote) > maxKubernetesNoteLen {
		errs = append(errs, fmt.Errorf("kubernetes.worker_note is %d bytes, more than %d", len(k.WorkerNote), maxKubernetesNoteLen))
	}
	return errs
}

// validateNodeStatus is checkNodeStatus for a handler: a refusal is
// INVALID_ARGUMENT.
func validateNodeStatus(st *cpb.NodeStatus) error {
	if err := checkNodeStatus(st); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return nil
}

// checkNodeRecord checks a whole node record, as it is stored: what every
// record written must pass (encodeNode) and every record read back
// (decodeNode).
func checkNodeRecord(n *cpb.Node) error {
	if err := checkNoUnknownFields("node record", n); err != nil {
		return err
	}
	if size := proto.Size(n); size > maxNodeRecordSize {
		return fmt.Errorf("node record is %d bytes encoded, more than the %d allowed", size, maxNodeRecordSize)
	}
	if err := identity.VerifyNodeID(n.Id, ed25519.PublicKey(n.PublicKey)); err != nil {
		return fmt.Errorf("node record: %w", err)
	}
	switch n.State {
	case cpb.NodeState_NODE_STATE_NEW, cpb.NodeState_NODE_STATE_STANDBY, cpb.NodeState_NODE_STATE_UP, cpb.NodeState_NODE_STATE_DECOMMISSIONED:
	default:
		return fmt.Errorf("node record %s: invalid state %v", n.Id, n.State)
	}
	if err := checkRoles(n.State, n.Roles); err != nil {
		return fmt.Errorf("node record %s: %w", n.Id, err)
	}
	if n.Status != nil {
		if err := checkNodeStatus(n.Status); err != nil {
			return fmt.Errorf("node record %s: %w", n.Id, err)
		}
	}
	if err := checkLabels(n.Labels); err != nil {
		return fmt.Errorf("node record %s: %w", n.Id, err)
	}
	if err := checkNodeNetwork(n.Network); err != nil {
		return fmt.Errorf("node record %s: %w", n.Id, err)
	}
	if n.Health != cpb.NodeHealth_NODE_HEALTH_UNSPECIFIED || n.TimeSinceHeartbeat != nil {
		return fmt.Errorf("node record %s: health is judged, never stored", n.Id)
	}
	return nil
}

// checkRoles checks that a node in state holds roles it may: only UP nodes
// hold roles, and KubernetesController needs ConsensusMember.
func checkRoles(state cpb.NodeState, r *cpb.Roles) error {
	if r == nil {
		return nil
	}
	held := r.ConsensusMember != nil || r.KubernetesController != nil || r.KubernetesWorker != nil
	if held && state != cpb.NodeState_NODE_STATE_UP {
		return fmt.Errorf("a %v node holds roles; only UP nodes do", state)
	}
	if r.KubernetesController != nil && r.ConsensusMember == nil {
		return errors.New("KubernetesController is held without ConsensusMember")
	}
	return nil
}

// checkLabels checks a node's labels: at most maxLabels, each key and value
// of the form UpdateNodeLabelsRequest gives.
func checkLabels(labels map[string]string) error {
	if len(labels) > maxLabels {
		return fmt.Errorf("%d labels, more than the %d allowed", len(labels), maxLabels)
	}
	// Sorted, so that the error names the same label every time.
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if err := validateLabelKey(k); err != nil {
			return fmt.Errorf("label key %s: %w", quoted(k), err)
		}
		if err := validateLabelValue(labels[k]); err != nil {
			return fmt.Errorf("label %s: value %s: %w", quoted(k), quoted(labels[k]), err)
		}
	}
	return nil
}

// Label syntax, as UpdateNodeLabelsRequest states it (Kubernetes' rules).
// Anchored: an unanchored pattern would accept any string containing a
// valid one.
var (
	labelNameRegexp   = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$`)
	labelPrefixRegexp = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$`)
)

// maxLabelPrefix is the longest prefix of a label key (a DNS subdomain).
const maxLabelPrefix = 253

// validateLabelKey checks a label key: a name with an optional DNS
// subdomain prefix ("name" or "prefix/name").
func validateLabelKey(k string) error {
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		name = prefix
	} else {
		if len(prefix) > maxLabelPrefix {
			return fmt.Errorf("prefix longer than %d characters", maxLabelPrefix)
		}
		if !labelPrefixRegexp.MatchString(prefix) {
			return errors.New("prefix is not a DNS subdomain (dot-separated lower-case letters, digits and '-', each part starting and ending with a letter or digit)")
		}
	}
	if !labelNameRegexp.MatchString(name) {
		return errors.New("name must be 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit")
	}
	return nil
}

// validateLabelValue checks a label value: empty, or of the form of a
// label name.
func validateLabelValue(v string) error {
	if v != "" && !labelNameRegexp.MatchString(v) {
		return errors.New("must be empty or 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit")
	}
	return nil
}

// maxQuoted is how much of an argument an error message repeats.
const maxQuoted = 80

// quoted is s quoted for an error message, cut to its first maxQuoted
// bytes with its length: an error must not echo a 100 KB argument back
// whole.
func quoted(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(strings.ToValidUTF8(s[:maxQuoted], "")), len(s))
}
