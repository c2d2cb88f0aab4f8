package curator

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/identity"
	"github.com/polis-os/polis/supervisor"
)

// leaderState is what a curator holds while it leads. A new one is made for
// every term, so nothing from an earlier term leaks into the next.
type leaderState struct {
	leadership *Leadership
	ca         *identity.CA

	// membership serialises the management calls that change etcd's
	// membership along with node records (UpdateNodeRoles,
	// DecommissionNode), so that their checks and changes never interleave;
	// every change that gives a pod range holds it too (podnetwork.go), so
	// that none takes the range a membership change checked for.
	membership sync.Mutex

	// registration serialises the calls that create node records or
	// retire keys (Register, DeleteNode), so that the limit on NEW
	// records and the check for retired keys see every earlier such
	// change of this term (see registration.go).
	registration sync.Mutex
	// statusWrites is when Register last stored the status of each node
	// that registered again, for the per-key limit; guarded by
	// registration.
	statusWrites map[string]time.Time

	// kube is the cluster's Kubernetes PKI, read or created once per
	// term (rpc_kubernetes.go).
	kube kubernetesPKI
}

// runLeader publishes a leaderState while the election says this curator
// leads, and nil otherwise.
//
//	reads:  election status
//	writes: s.leader
func (s *Service) runLeader(ctx context.Context, ca *identity.CA) error {
	var in event.Inputs
	defer in.Close()
	election := event.Input(&in, s.election.Status(), nil)
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	defer s.leader.Set(nil)
	var current *leaderState
	for {
		why, err := in.Wait(ctx)
		if err != nil {
			return err
		}
		st := election.Latest()
		switch {
		case st.Leading == nil && current != nil:
			supervisor.Logger(ctx).Info("stepping down", zap.Stringer("because", why))
			current = nil
			s.leader.Set(nil)
		case st.Leading != nil && (current == nil || current.leadership != st.Leading):
			supervisor.Logger(ctx).Info("taking over as leader", zap.Stringer("because", why))
			current = &leaderState{leadership: st.Leading, ca: ca, statusWrites: map[string]time.Time{}}
			s.leader.Set(current)
		}
	}
}
