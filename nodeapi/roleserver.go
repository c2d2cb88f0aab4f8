package nodeapi

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpb "github.com/polis-os/polis/api/curator/v1"
	nodev1 "github.com/polis-os/polis/api/node/v1"
	"github.com/polis-os/polis/consensus"
	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/roleserve"
)

// RoleServer is what GetRoleServerGraph shows of a role server: its
// declared edges, its values, and (where the role server records them)
// each worker's last reaction.
type RoleServer struct {
	// Edges returns the graph's declared edges (roleserve.Graph.Edges).
	Edges func() []roleserve.Edge
	// Values are the role server's values, by name.
	Values []ValueView
	// Reactions returns each worker's last reaction
	// (roleserve.Graph.Workers); nil shows none.
	Reactions func() []roleserve.Reaction
}

// ValueView shows one value: its bookkeeping and a one-line summary of its
// current data.
type ValueView struct {
	Name string
	// Info reports the value's version and watchers.
	Info func() event.Info
	// Summary renders the current data, "unset" before the first Set.
	Summary func() string
}

// outside is the writer shown for values written outside the role server.
const outside = "(outside)"

// Snapshot renders the graph as it is now.
func (r *RoleServer) Snapshot() *nodev1.GetRoleServerGraphResponse {
	values := map[string]*nodev1.GraphValue{}
	workers := map[string]*nodev1.GraphWorker{}
	value := func(name string) *nodev1.GraphValue {
		v := values[name]
		if v == nil {
			// A value declared in the graph that no view shows (the
			// kubernetes worker's runner status lives inside that
			// worker): say so rather than call it unset.
			v = &nodev1.GraphValue{Name: name, Summary: "not shown by the node API"}
			values[name] = v
		}
		return v
	}
	for _, e := range r.Edges() {
		w := workers[e.Worker]
		if w == nil {
			w = &nodev1.GraphWorker{Name: e.Worker}
			workers[e.Worker] = w
		}
		v := value(e.Value)
		if e.Writes {
			w.Writes = append(w.Writes, e.Value)
			v.Writers = append(v.Writers, e.Worker)
		} else {
			w.Reads = append(w.Reads, e.Value)
			v.Readers = append(v.Readers, e.Worker)
		}
	}
	for _, vv := range r.Values {
		v := value(vv.Name)
		info := vv.Info()
		v.Version, v.Watchers = info.Version, uint32(info.Watchers)
		v.Summary = vv.Summary()
	}
	out := &nodev1.GetRoleServerGraphResponse{}
	for _, v := range values {
		if len(v.Writers) == 0 {
			v.Writers = []string{outside}
		}
		out.Values = append(out.Values, v)
	}
	if r.Reactions != nil {
		for _, re := range r.Reactions() {
			if w := workers[re.Worker]; w != nil {
				w.LastReaction = &nodev1.WorkerReaction{Time: timestamppb.New(re.At), Why: re.Why, Count: re.Count}
			}
		}
	}
	for _, w := range workers {
		out.Workers = append(out.Workers, w)
	}
	slices.SortFunc(out.Values, func(a, b *nodev1.GraphValue) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(out.Workers, func(a, b *nodev1.GraphWorker) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// RoleServerValues are the views of every value of v, with summaries made
// for people reading polisctl node graph.
func RoleServerValues(v *roleserve.Values) []ValueView {
	return []ValueView{
		view(&v.Credentials, func(c *roleserve.Credentials) string {
			if c == nil {
				return "none"
			}
			return fmt.Sprintf("node %s, certificate until %s", c.NodeID, c.Certificate.NotAfter.UTC().Format(time.RFC3339))
		}),
		view(&v.Membership, func(m *roleserve.ClusterMembership) string {
			if m == nil {
				return "none"
			}
			return "connected as node " + m.Credentials.NodeID
		}),
		view(&v.LocalRoles, func(r *cpb.Roles) string {
			if r == nil {
				return "not known yet"
			}
			var roles []string
			r.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
				roles = append(roles, string(fd.Name()))
				return true
			})
			if len(roles) == 0 {
				return "no roles"
			}
			return strings.Join(roles, ", ")
		}),
		view(&v.LocalControlPlane, func(l *roleserve.LocalControlPlane) string {
			switch {
			case l == nil:
				return "none running"
			case l.Curator == nil:
				return "consensus only"
			}
			return "consensus and curator"
		}),
		view(&v.Directory, func(d []*cpb.CuratorEndpoint) string {
			eps := make([]string, len(d))
			for i, e := range d {
				eps[i] = fmt.Sprintf("%s:%d", e.Address, e.Port)
			}
			return fmt.Sprintf("%d curators: %s", len(d), strings.Join(eps, ", "))
		}),
		view(&v.LocalCurator, func(ep *cpb.CuratorEndpoint) string {
			if ep == nil {
				return "not serving"
			}
			return fmt.Sprintf("serving at %s:%d", ep.Address, ep.Port)
		}),
		view(&v.Kubernetes, (*roleserve.KubernetesStatus).String),
		view(&v.KubernetesWorker, (*roleserve.KubernetesWorkerStatus).String),
		view(&v.LocalLabels, func(l map[string]string) string {
			if l == nil {
				return "not known yet"
			}
			return fmt.Sprintf("%d labels", len(l))
		}),
		view(&v.ConsensusSnapshots, func(s []*cpb.ConsensusSnapshot) string {
			if len(s) == 0 {
				return "none"
			}
			newest := s[len(s)-1]
			for _, x := range s {
				if x.GetTakenAt().AsTime().After(newest.GetTakenAt().AsTime()) {
					newest = x
				}
			}
			return fmt.Sprintf("%d kept, newest at revision %d taken %s", len(s), newest.GetRevision(), newest.GetTakenAt().AsTime().UTC().Format(time.RFC3339))
		}),
		// The statuses of the services the controlplane worker runs
		// live in those services, found through LocalControlPlane.
		produced(&v.LocalControlPlane, consensus.StatusName, func(l *roleserve.LocalControlPlane) watchable[*consensus.Status] {
			return describable(l.Consensus.Status())
		}, func(s *consensus.Status) string {
			if s == nil {
				return "none"
			}
			role := "voter"
			if s.Learner {
				role = "learner"
			}
			if s.Leader {
				role += ", raft leader"
			}
			if s.Err != nil {
				return fmt.Sprintf("%s: %v", s.State, s.Err)
			}
			return fmt.Sprintf("%s (%s)", s.State, role)
		}),
		produced(&v.LocalControlPlane, curator.StatusName, func(l *roleserve.LocalControlPlane) watchable[*curator.Status] {
			if l.Curator == nil {
				return nil
			}
			return describable(l.Curator.Status())
		}, func(s *curator.Status) string {
			if s == nil {
				return "not serving"
			}
			return "serving at " + s.Address.String()
		}),
	}
}

// describable is v as a watchable, nil if it does not report its
// bookkeeping (every value of package event/memory does).
func describable[T any](v event.ValueWatch[T]) watchable[T] {
	w, _ := v.(watchable[T])
	return w
}

// produced makes the view of a value that lives inside a service the
// local control plane runs (a status a worker Produces): what of lcp's
// current data pick returns, "not running" while no control plane runs.
func produced[T any](lcp watchable[*roleserve.LocalControlPlane], name string, pick func(*roleserve.LocalControlPlane) watchable[T], render func(T) string) ValueView {
	current := func() watchable[T] {
		w := lcp.Watch()
		defer w.Close()
		select {
		case <-w.Ready():
		default:
			return nil
		}
		l, err := w.Get(context.Background())
		if err != nil || l == nil {
			return nil
		}
		return pick(l)
	}
	return ValueView{
		Name: name,
		Info: func() event.Info {
			if v := current(); v != nil {
				info := v.Info()
				info.Name = name
				return info
			}
			return event.Info{Name: name}
		},
		Summary: func() string {
			v := current()
			if v == nil {
				return "not running"
			}
			return view(v, render).Summary()
		},
	}
}

// watchable is what view needs of a value.
type watchable[T any] interface {
	event.ValueWatch[T]
	event.Describer
}

// view makes the ValueView of v. Summary reads the current data without
// waiting: an unset value is "unset".
func view[T any](v watchable[T], render func(T) string) ValueView {
	return ValueView{
		Name: v.Info().Name,
		Info: v.Info,
		Summary: func() string {
			w := v.Watch()
			defer w.Close()
			select {
			case <-w.Ready():
			default:
				return "unset"
			}
			d, err := w.Get(context.Background())
			if err != nil {
				return "unset"
			}
			return render(d)
		},
	}
}
