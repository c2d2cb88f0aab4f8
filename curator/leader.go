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
	// since is when this term started. health counts the silence of nodes
	// not heard from in this term from here, so that a leader change does
	// not make every node look dead.
	since time.Time
	// heartbeatInterval is the interval nodes are told to heartbeat at
	// (Config.HeartbeatInterval); health judges silence against it.
	heartbeatInterval time.Duration

	// membership serialises the management calls that change etcd's
	// membership along with node records (UpdateNodeRoles,
	// DecommissionNode), so that their checks and changes never interleave.
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

	mu sync.Mutex
	// heartbeats is the time of each node's last heartbeat in this term.
	heartbeats map[string]time.Time
}

// heartbeat records that node id was heard of at now (see health).
func (l *leaderState) heartbeat(id string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.heartbeats[id] = now
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
			current = &leaderState{leadership: st.Leading, ca: ca, since: s.cfg.Now(), heartbeatInterval: s.cfg.HeartbeatInterval, heartbeats: map[string]time.Time{}, statusWrites: map[string]time.Time{}}
			s.leader.Set(current)
		}
	}
}
