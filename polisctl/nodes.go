package polisctl

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/identity"
)

func (c *cli) nodeCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "node", Short: "List, admit, change and remove nodes"}
	cmd.AddCommand(c.nodeList(), c.nodeDescribe(), c.nodeApprove(), c.nodeRole(true), c.nodeRole(false),
		c.nodeLabel(), c.nodeDecommission(), c.nodeDelete(), c.nodeWatch())
	cmd.AddCommand(c.nodeAPICommands()...)
	return cmd
}

// nodeID checks a node ID argument before anything is sent, so that a typo
// is named as one rather than as a node the curator does not know.
func nodeID(arg string) (string, error) {
	if err := identity.ValidateNodeID(arg); err != nil {
		return "", fmt.Errorf("%q is not a node ID: a node ID is \"node-\" and 24 lower-case hexadecimal digits; polisctl node list shows them", arg)
	}
	return arg, nil
}

// listNodes reads every node that req selects.
func (s *session) listNodes(ctx context.Context, req *cpb.ListNodesRequest) ([]*cpb.Node, error) {
	var nodes []*cpb.Node
	err := s.call(ctx, "listing nodes", func(ctx context.Context) error {
		nodes = nil
		stream, err := s.mgmt.ListNodes(ctx, req)
		if err != nil {
			return err
		}
		for {
			resp, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			nodes = append(nodes, resp.Nodes...)
		}
	})
	return nodes, err
}

func (c *cli) nodeList() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the nodes: state, roles, address, health",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			return c.withSession(func(s *session) error {
				nodes, err := s.listNodes(cmd.Context(), &cpb.ListNodesRequest{})
				if err != nil {
					return err
				}
				if output == "json" {
					return writeJSON(cmd.OutOrStdout(), &cpb.ListNodesResponse{Nodes: nodes})
				}
				return writeNodeTable(cmd.OutOrStdout(), nodes)
			})
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func writeNodeTable(w io.Writer, nodes []*cpb.Node) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tROLES\tADDRESS\tHEALTH\tSINCE HEARTBEAT")
	for _, n := range nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Id, stateName(n.State), dash(strings.Join(roleNames(n.Roles), ",")),
			dash(n.Status.GetExternalAddress()), healthName(n.Health), sinceHeartbeat(n))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func stateName(s cpb.NodeState) string {
	return strings.TrimPrefix(s.String(), "NODE_STATE_")
}

func healthName(h cpb.NodeHealth) string {
	if h == cpb.NodeHealth_NODE_HEALTH_UNSPECIFIED {
		return "-"
	}
	return strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(h.String(), "NODE_HEALTH_"), "_", "-"))
}

func sinceHeartbeat(n *cpb.Node) string {
	if n.TimeSinceHeartbeat == nil {
		return "-"
	}
	return n.TimeSinceHeartbeat.AsDuration().Round(100 * time.Millisecond).String()
}

// The roles by the names the commands use.
const (
	roleConsensusMember      = "consensus-member"
	roleKubernetesController = "kubernetes-controller"
	roleKubernetesWorker     = "kubernetes-worker"
)

var allRoles = []string{roleConsensusMember, roleKubernetesController, roleKubernetesWorker}

func roleNames(r *cpb.Roles) []string {
	var names []string
	if r.GetConsensusMember() != nil {
		names = append(names, roleConsensusMember)
	}
	if r.GetKubernetesController() != nil {
		names = append(names, roleKubernetesController)
	}
	if r.GetKubernetesWorker() != nil {
		names = append(names, roleKubernetesWorker)
	}
	return names
}

func (c *cli) nodeDescribe() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "describe NODE-ID",
		Short: "Show everything the cluster knows about one node",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			id, err := nodeID(args[0])
			if err != nil {
				return err
			}
			return c.withSession(func(s *session) error {
				nodes, err := s.listNodes(cmd.Context(), &cpb.ListNodesRequest{NodeIds: []string{id}})
				if err != nil {
					return err
				}
				if len(nodes) == 0 {
					return fmt.Errorf("the cluster has no node %s; polisctl node list shows the nodes there are", id)
				}
				if output == "json" {
					return writeJSON(cmd.OutOrStdout(), nodes[0])
				}
				return writeNode(cmd.OutOrStdout(), nodes[0])
			})
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func writeNode(w io.Writer, n *cpb.Node) error {
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("ID", n.Id)
	row("Public key", hex.EncodeToString(n.PublicKey))
	row("State", stateName(n.State))
	row("Roles", dash(strings.Join(roleNames(n.Roles), ", ")))
	row("Health", healthName(n.Health))
	row("Since heartbeat", sinceHeartbeat(n))
	st := n.Status
	row("Address", dash(st.GetExternalAddress()))
	row("Version", dash(st.GetVersion()))
	row("Boot ID", dash(st.GetBootId()))
	row("Data sealing", sealingName(st.GetDataSealing()))
	row("Data disk bound", clusterBoundName(st))
	if st.GetRunningCurator() != nil {
		row("Curator port", fmt.Sprint(st.GetRunningCurator().GetPort()))
	}
	if p := st.GetConsensusPeerPort(); p != 0 {
		row("Consensus peer port", fmt.Sprint(p))
	}
	if n.GetRoles().GetConsensusMember() != nil || len(st.GetConsensusSnapshots()) > 0 {
		heading, lines := snapshotRows(st.GetConsensusSnapshots())
		row("Consensus snapshots", heading)
		for _, l := range lines {
			fmt.Fprintf(tw, "\t  %s\n", l)
		}
	}
	if n.GetRoles().GetKubernetesController() != nil {
		row("Kubernetes controller", kubernetesController(st.GetKubernetes()))
	}
	worker, controller := n.GetRoles().GetKubernetesWorker() != nil, n.GetRoles().GetKubernetesController() != nil
	k := st.GetKubernetes()
	switch {
	case worker:
		row("Kubernetes worker", dash(k.GetWorkerNote()))
	case !controller && k.GetWorkerNote() != "":
		// The role was taken away, and what it left is not all removed.
		row("Kubernetes worker", "role taken away: "+k.GetWorkerNote())
	}
	if nn := n.GetNetwork(); nn != nil || worker {
		row("Pod range", dash(nn.GetPodRange()))
		row("WireGuard public key", wireGuardKey(nn.GetWireguardPublicKey()))
	}
	switch {
	case worker && strings.HasPrefix(k.GetWorkerNote(), notAvailable):
		// No pod network runs where the role cannot: a count of peers
		// "not in sync" would say it tried.
		row("Pod network", "not run (the Kubernetes worker is not available on this node)")
	case worker:
		row("Pod network", podNetwork(k))
	case controller && (k.GetNetworkPeers() > 0 || k.GetNetworkInSync() || k.GetWorkerNote() != ""):
		// A controller's routes to the workers' Pods, for its apiserver
		// (VM nodes; a process node reports none).
		s := podNetwork(k)
		if note := k.GetWorkerNote(); note != "" {
			s += " (" + note + ")"
		}
		row("Pod network", s)
	}
	if st.GetTimestamp() != nil {
		row("Status reported", st.GetTimestamp().AsTime().UTC().Format(time.RFC3339))
	}
	row("Labels", dash(formatLabels(n.Labels)))
	return tw.Flush()
}

// wireGuardKey is a WireGuard public key in WireGuard's own form
// (base64), as wg(8) shows it; "-" while the node has published none.
func wireGuardKey(k []byte) string {
	if len(k) == 0 {
		return "-"
	}
	return base64.StdEncoding.EncodeToString(k)
}

// podNetwork says what a worker's kernel routes of the other workers' pod
// ranges, as the node reported: how many peers, and whether the kernel
// matched them at its last look (their IDs are in polisctl node graph).
func podNetwork(k *cpb.KubernetesStatus) string {
	if k == nil {
		return "not reported by the node yet"
	}
	peers := "peers"
	if k.GetNetworkPeers() == 1 {
		peers = "peer"
	}
	s := fmt.Sprintf("%d %s over WireGuard", k.GetNetworkPeers(), peers)
	if k.GetNetworkInSync() {
		return s + ", in sync"
	}
	return s + ", not in sync"
}

// kubernetesController says what a node holding KubernetesController runs
// of it, as the node reported: the components running, whether the
// apiserver is ready, and the node's note on what is not run.
func kubernetesController(k *cpb.KubernetesStatus) string {
	if k == nil {
		return "not reported by the node yet"
	}
	s := "nothing running"
	if len(k.GetRunning()) > 0 {
		s = strings.Join(k.GetRunning(), ", ") + " running"
	}
	switch {
	case k.GetApiserverReady():
		s += fmt.Sprintf("; apiserver ready on port %d", k.GetApiserverPort())
	case len(k.GetRunning()) > 0:
		s += "; apiserver not ready"
	}
	if note := k.GetControllerNote(); note != "" {
		s += " (" + note + ")"
	}
	return s
}

func formatLabels(l map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(l)) {
		parts = append(parts, k+"="+l[k])
	}
	return strings.Join(parts, ",")
}

func (c *cli) nodeApprove() *cobra.Command {
	return c.nodeCall(&cobra.Command{
		Use:   "approve NODE-ID",
		Short: "Admit a registered (NEW) node into the cluster",
	}, "approving ", func(ctx context.Context, s *session, id string) error {
		_, err := s.mgmt.ApproveNode(ctx, &cpb.ApproveNodeRequest{NodeId: id})
		return err
	}, "Approved %s: it joins once it has collected its certificate.\n")
}

// nodeCall completes cmd as a command that takes one node ID, makes one
// Management call about it (doing, e.g. "approving ", names the call in
// error advice) and, once it succeeded, prints done with the node ID:
// approve, decommission and delete.
func (c *cli) nodeCall(cmd *cobra.Command, doing string, call func(ctx context.Context, s *session, id string) error, done string) *cobra.Command {
	cmd.Args = exactArgs(1)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := nodeID(args[0])
		if err != nil {
			return err
		}
		return c.withSession(func(s *session) error {
			err := s.call(cmd.Context(), doing+id, func(ctx context.Context) error {
				return call(ctx, s, id)
			})
			if err == nil {
				fmt.Fprintf(cmd.OutOrStdout(), done, id)
			}
			return err
		})
	}
	return cmd
}

// nodeRole is add-role (give) or remove-role.
func (c *cli) nodeRole(give bool) *cobra.Command {
	use, short, verb := "add-role", "Give a node roles", "giving roles to "
	if !give {
		use, short, verb = "remove-role", "Take roles from a node", "taking roles from "
	}
	return &cobra.Command{
		Use:   use + " NODE-ID ROLE...",
		Short: short + " (" + strings.Join(allRoles, ", ") + ")",
		Long: short + `. The roles are:

  consensus-member       runs a consensus (etcd) member and a curator
  kubernetes-controller  runs the Kubernetes control plane (needs consensus-member)
  kubernetes-worker      runs Kubernetes workloads

Only UP nodes hold roles.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return fmt.Errorf("%s needs a node ID and at least one role: usage: %s", cmd.CommandPath(), cmd.UseLine())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := nodeID(args[0])
			if err != nil {
				return err
			}
			req := &cpb.UpdateNodeRolesRequest{NodeId: id}
			for _, r := range args[1:] {
				switch r {
				case roleConsensusMember:
					req.ConsensusMember = proto.Bool(give)
				case roleKubernetesController:
					req.KubernetesController = proto.Bool(give)
				case roleKubernetesWorker:
					req.KubernetesWorker = proto.Bool(give)
				default:
					return fmt.Errorf("unknown role %q: the roles are %s", r, strings.Join(allRoles, ", "))
				}
			}
			return c.withSession(func(s *session) error {
				var resp *cpb.UpdateNodeRolesResponse
				err := s.call(cmd.Context(), verb+id, func(ctx context.Context) (err error) {
					resp, err = s.mgmt.UpdateNodeRoles(ctx, req)
					return err
				})
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s now holds: %s\n", id, dash(strings.Join(roleNames(resp.Roles), ", ")))
				if give && (req.KubernetesController != nil || req.KubernetesWorker != nil) {
					s.warnKubernetesNotRun(cmd.Context(), cmd.ErrOrStderr(), id, req)
				}
				return nil
			})
		},
	}
}

// notAvailable starts a node's note on a Kubernetes role it cannot run at
// all (cpb.KubernetesStatus: no runtime, no bundle, no cgroup v2), as
// opposed to one it is starting or failing to run.
const notAvailable = "not available"

// kubernetesReportWait bounds how long add-role waits for the node to say
// whether it can run the Kubernetes roles it was given.
const kubernetesReportWait = 10 * time.Second

// warnKubernetesNotRun waits (up to kubernetesReportWait) for node id to
// report what it makes of the Kubernetes roles req gave it, and warns on w
// about each one the node says it cannot run ("not available: …", as a
// node started without a Kubernetes bundle says): the curator grants the
// role all the same, since the node may be fixed later, but the operator
// should hear it now. A node that does not report in time is left alone:
// starting takes longer than this, and polisctl node describe shows it.
func (s *session) warnKubernetesNotRun(ctx context.Context, w io.Writer, id string, req *cpb.UpdateNodeRolesRequest) {
	ctx, cancel := context.WithTimeout(ctx, min(kubernetesReportWait, s.timeout))
	defer cancel()
	type role struct {
		name string
		note func(*cpb.KubernetesStatus) string
	}
	var roles []role
	if req.GetKubernetesController() {
		roles = append(roles, role{roleKubernetesController, func(k *cpb.KubernetesStatus) string {
			if len(k.GetRunning()) > 0 && k.GetControllerNote() == "" {
				return "running"
			}
			return k.GetControllerNote()
		}})
	}
	if req.GetKubernetesWorker() {
		roles = append(roles, role{roleKubernetesWorker, func(k *cpb.KubernetesStatus) string { return k.GetWorkerNote() }})
	}
	for {
		nodes, err := s.listNodes(ctx, &cpb.ListNodesRequest{NodeIds: []string{id}})
		if err != nil || len(nodes) != 1 {
			return
		}
		if k := nodes[0].GetStatus().GetKubernetes(); k != nil {
			reported := true
			for _, r := range roles {
				reported = reported && r.note(k) != ""
			}
			if reported {
				for _, r := range roles {
					if note := r.note(k); strings.HasPrefix(note, notAvailable) {
						fmt.Fprintf(w, "warning: %s holds %s but cannot run it: %s\n", id, r.name, note)
					}
				}
				return
			}
		}
		t := time.NewTimer(250 * time.Millisecond) // polling interval: the Management API has no watch
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (c *cli) nodeLabel() *cobra.Command {
	return &cobra.Command{
		Use:   "label NODE-ID KEY=VALUE... KEY-...",
		Short: "Set (KEY=VALUE) and remove (KEY-) labels of a node, in one change",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return fmt.Errorf("%s needs a node ID and at least one label change: usage: %s", cmd.CommandPath(), cmd.UseLine())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := nodeID(args[0])
			if err != nil {
				return err
			}
			req := &cpb.UpdateNodeLabelsRequest{NodeId: id, Set: map[string]string{}}
			for _, a := range args[1:] {
				if k, v, ok := strings.Cut(a, "="); ok {
					req.Set[k] = v
				} else if k, ok := strings.CutSuffix(a, "-"); ok && k != "" {
					req.Remove = append(req.Remove, k)
				} else {
					return fmt.Errorf("label change %q: want KEY=VALUE to set a label or KEY- to remove one", a)
				}
			}
			return c.withSession(func(s *session) error {
				var resp *cpb.UpdateNodeLabelsResponse
				err := s.call(cmd.Context(), "labelling "+id, func(ctx context.Context) (err error) {
					resp, err = s.mgmt.UpdateNodeLabels(ctx, req)
					return err
				})
				if err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "%s labels: %s\n", id, dash(formatLabels(resp.Labels)))
				}
				return err
			})
		},
	}
}

func (c *cli) nodeDecommission() *cobra.Command {
	return c.nodeCall(&cobra.Command{
		Use:   "decommission NODE-ID",
		Short: "Take an UP node out of the cluster for good",
		Long: `decommission takes an UP node out of the cluster for good: its roles are
taken away and the cluster refuses it from then on; its key can never
register or join again. This cannot be undone. The record stays until
polisctl node delete removes it. A node that is NEW or STANDBY is deleted
instead.`,
	}, "decommissioning ", func(ctx context.Context, s *session, id string) error {
		_, err := s.mgmt.DecommissionNode(ctx, &cpb.DecommissionNodeRequest{NodeId: id})
		return err
	}, "Decommissioned %s.\n")
}

func (c *cli) nodeDelete() *cobra.Command {
	return c.nodeCall(&cobra.Command{
		Use:   "delete NODE-ID",
		Short: "Remove the record of a NEW, STANDBY or DECOMMISSIONED node",
	}, "deleting ", func(ctx context.Context, s *session, id string) error {
		_, err := s.mgmt.DeleteNode(ctx, &cpb.DeleteNodeRequest{NodeId: id})
		return err
	}, "Deleted %s.\n")
}

func (c *cli) nodeWatch() *cobra.Command {
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Print the nodes, then every change to them, until interrupted",
		Long: `watch prints the node table, then a line for every change: a node that
appears or goes away, and changes of state, roles, address, health and
labels.

It polls ListNodes (every --interval): the Management API has no watch
call, and the curator's Watch serves nodes only. A change that is undone
between two polls is not seen.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval <= 0 {
				return fmt.Errorf("--interval %v: want a positive duration", interval)
			}
			return c.withSession(func(s *session) error {
				return watchNodes(cmd.Context(), s, cmd.OutOrStdout(), interval)
			})
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "how often to ask the cluster")
	return cmd
}

// watchNodes prints the table, then the differences between successive
// listings, until ctx ends (which is not an error: it is how watch stops).
func watchNodes(ctx context.Context, s *session, w io.Writer, interval time.Duration) error {
	var last map[string]*cpb.Node
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		nodes, err := s.listNodes(ctx, &cpb.ListNodesRequest{})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		now := make(map[string]*cpb.Node, len(nodes))
		for _, n := range nodes {
			now[n.Id] = n
		}
		if last == nil {
			if err := writeNodeTable(w, nodes); err != nil {
				return err
			}
		} else {
			stamp := time.Now().Format("15:04:05")
			for _, line := range nodeChanges(last, now) {
				if _, err := fmt.Fprintf(w, "%s %s\n", stamp, line); err != nil {
					return err
				}
			}
		}
		last = now
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// nodeChanges describes what changed from before to after, one line per
// change, in node ID order. The time since the last heartbeat is left out:
// it changes with every listing.
func nodeChanges(before, after map[string]*cpb.Node) []string {
	var lines []string
	ids := slices.Sorted(maps.Keys(after))
	for id := range before {
		if _, ok := after[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		b, a := before[id], after[id]
		switch {
		case b == nil:
			lines = append(lines, fmt.Sprintf("%s appeared: %s, address %s", id, stateName(a.State), dash(a.Status.GetExternalAddress())))
			continue
		case a == nil:
			lines = append(lines, id+" deleted")
			continue
		}
		change := func(what, from, to string) {
			if from != to {
				lines = append(lines, fmt.Sprintf("%s %s: %s → %s", id, what, from, to))
			}
		}
		change("state", stateName(b.State), stateName(a.State))
		change("roles", dash(strings.Join(roleNames(b.Roles), ",")), dash(strings.Join(roleNames(a.Roles), ",")))
		change("address", dash(b.Status.GetExternalAddress()), dash(a.Status.GetExternalAddress()))
		change("health", healthName(b.Health), healthName(a.Health))
		change("labels", dash(formatLabels(b.Labels)), dash(formatLabels(a.Labels)))
	}
	return lines
}
