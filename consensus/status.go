package consensus

import (
	"errors"
	"fmt"
)

// State is the lifecycle state of a consensus member, as seen by Status.
type State int

const (
	// StateStarting: Run is preparing the data directory or waiting for
	// etcd to be ready (which, after a restart, needs a quorum of members).
	StateStarting State = iota + 1
	// StateRunning: etcd serves. The Status carries the member's role and
	// can make clients and change membership.
	StateRunning
	// StateStopped: Run returned; Status.Err says why. Clients made from an
	// earlier Status no longer work.
	StateStopped
)

func (s State) String() string {
	switch s {
	case StateStarting:
		return "starting"
	case StateRunning:
		return "running"
	case StateStopped:
		return "stopped"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// ErrNotRunning is returned by the methods of a Status whose State is not
// StateRunning: clients and membership changes need a serving member.
var ErrNotRunning = errors.New("consensus member is not running")

// ErrRemoved is returned by Run once this member has been removed from the
// cluster. It is final: a removed member's data directory can never serve
// again, and the node must wipe it and join anew.
var ErrRemoved = errors.New("consensus member was removed from the cluster")

// Status is a snapshot of a consensus member, published as an event value
// by Service.Status. A Status is immutable once published; a change (leader
// election, promotion, stop) publishes a new one.
type Status struct {
	// State is where the member is in its lifecycle.
	State State
	// Name is the configured member name.
	Name string
	// ClusterID and MemberID are etcd's IDs, set while running.
	ClusterID uint64
	MemberID  uint64
	// Learner is true while the member is a non-voting learner, that is
	// between joining and being promoted. Learners cannot serve clients:
	// ClientFor and the membership methods fail until promotion.
	Learner bool
	// Leader is true when this member is the raft leader.
	Leader bool
	// LeaderID is the member ID of the raft leader, 0 while none is known.
	LeaderID uint64
	// Err is why Run returned, for StateStopped.
	Err error

	// m is the running member behind this status, nil unless running.
	m *member
}

// running returns the member behind a running, voting status.
func (s *Status) running() (*member, error) {
	if s == nil || s.State != StateRunning || s.m == nil {
		return nil, ErrNotRunning
	}
	if s.Learner {
		return nil, fmt.Errorf("%w: member is a learner and cannot serve clients until promoted", ErrNotRunning)
	}
	return s.m, nil
}

// IsRunning reports whether s is a running member. It is meant for
// event.Filter.
func IsRunning(s *Status) bool { return s != nil && s.State == StateRunning }

// IsVoter reports whether s is a running member with a vote (promoted, or
// bootstrapped), that is one that can serve clients. It is meant for
// event.Filter.
func IsVoter(s *Status) bool { return IsRunning(s) && !s.Learner }

// statusEqual lets the status value drop republications of an unchanged
// status. Errors are compared by identity only when both are nil: two
// stopped statuses are always published.
func statusEqual(a, b *Status) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.State == b.State && a.Name == b.Name &&
		a.ClusterID == b.ClusterID && a.MemberID == b.MemberID &&
		a.Learner == b.Learner && a.Leader == b.Leader && a.LeaderID == b.LeaderID &&
		a.Err == nil && b.Err == nil && a.m == b.m
}
