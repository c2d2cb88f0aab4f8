package curator

import (
	"crypto/ed25519"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/consensus"
)

// TestSnapshotPolicyAtBootstrap: a policy given at bootstrap is what every
// member reads back; a bad one is refused with the field named and the
// cluster is not initialised; none given reads as the defaults.
func TestSnapshotPolicyAtBootstrap(t *testing.T) {
	params := func() BootstrapParams {
		return BootstrapParams{
			OwnerKey:   mustKey(t).Public().(ed25519.PublicKey),
			NodeKey:    mustKey(t).Public().(ed25519.PublicKey),
			NodeStatus: &cpb.NodeStatus{ExternalAddress: "127.0.0.1"},
		}
	}

	t.Run("defaults", func(t *testing.T) {
		cli := startConsensus(t)
		if _, err := Bootstrap(ctxT(t), cli, params(), time.Now()); err != nil {
			t.Fatal(err)
		}
		got, err := ConsensusSnapshotPolicy(ctxT(t), cli)
		if err != nil {
			t.Fatal(err)
		}
		if want := (consensus.SnapshotPolicy{Interval: consensus.DefaultSnapshotInterval, Keep: consensus.DefaultSnapshotKeep}); got != want {
			t.Errorf("policy = %+v, want the defaults %+v", got, want)
		}
	})

	t.Run("given", func(t *testing.T) {
		cli := startConsensus(t)
		p := params()
		p.SnapshotPolicy = &cpb.SnapshotPolicy{Interval: durationpb.New(10 * time.Minute), Keep: 3}
		if _, err := Bootstrap(ctxT(t), cli, p, time.Now()); err != nil {
			t.Fatal(err)
		}
		got, err := ConsensusSnapshotPolicy(ctxT(t), cli)
		if err != nil {
			t.Fatal(err)
		}
		if want := (consensus.SnapshotPolicy{Interval: 10 * time.Minute, Keep: 3}); got != want {
			t.Errorf("policy = %+v, want %+v", got, want)
		}
		// Only the keep count given: the interval is the default.
		cli2 := startConsensus(t)
		p = params()
		p.SnapshotPolicy = &cpb.SnapshotPolicy{Keep: 2}
		if _, err := Bootstrap(ctxT(t), cli2, p, time.Now()); err != nil {
			t.Fatal(err)
		}
		if got, err := ConsensusSnapshotPolicy(ctxT(t), cli2); err != nil || got.Interval != consensus.DefaultSnapshotInterval || got.Keep != 2 {
			t.Errorf("policy = %+v, %v; want the default interval and 2", got, err)
		}
	})

	for name, tc := range map[string]struct {
		policy *cpb.SnapshotPolicy
		want   string
	}{
		"too often":     {&cpb.SnapshotPolicy{Interval: durationpb.New(time.Millisecond)}, "interval"},
		"too rare":      {&cpb.SnapshotPolicy{Interval: durationpb.New(30 * 24 * time.Hour)}, "interval"},
		"negative":      {&cpb.SnapshotPolicy{Interval: durationpb.New(-time.Hour)}, "interval"},
		"too many kept": {&cpb.SnapshotPolicy{Keep: consensus.MaxSnapshotKeep + 1}, "keep"},
	} {
		t.Run(name, func(t *testing.T) {
			cli := startConsensus(t)
			p := params()
			p.SnapshotPolicy = tc.policy
			_, err := Bootstrap(ctxT(t), cli, p, time.Now())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Bootstrap with %v: %v, want an error about %s", tc.policy, err, tc.want)
			}
			if resp, err := cli.Get(ctxT(t), ownerKey); err != nil || len(resp.Kvs) != 0 {
				t.Errorf("a refused bootstrap initialised the cluster (%v)", err)
			}
		})
	}
}

func TestNodeStatusSnapshots(t *testing.T) {
	snap := func(rev int64) *cpb.ConsensusSnapshot {
		return &cpb.ConsensusSnapshot{TakenAt: timestamppb.New(time.Date(2026, 11, 25, 14, 0, 0, 0, time.UTC)), Revision: rev, Size: 1 << 30}
	}
	// The largest a member reports, beside Kubernetes notes of the longest
	// allowed: accepted.
	st := &cpb.NodeStatus{
		ExternalAddress: "2001:db8::1234:5678:9abc:def0",
		Version:         strings.Repeat("v", maxVersionLen),
		BootId:          "01234567-89ab-cdef-0123-456789abcdef",
		Timestamp:       timestamppb.Now(),
		Kubernetes: &cpb.KubernetesStatus{
			Running:        []string{"apiserver", "controller-manager", "scheduler"},
			ControllerNote: strings.Repeat("c", 200),
			WorkerNote:     strings.Repeat("w", 200),
			ApiserverPort:  65535,
		},
	}
	for i := range consensus.MaxSnapshotKeep {
		st.ConsensusSnapshots = append(st.ConsensusSnapshots, snap(int64(1<<40+i)))
	}
	if err := checkNodeStatus(st); err != nil {
		t.Fatalf("the largest status a member reports: %v", err)
	}
	for name, tc := range map[string]struct {
		snaps []*cpb.ConsensusSnapshot
		want  string
	}{
		"too many":     {append(append([]*cpb.ConsensusSnapshot{}, st.ConsensusSnapshots...), snap(1)), "more than"},
		"no time":      {[]*cpb.ConsensusSnapshot{{Revision: 1}}, "taken_at"},
		"negative rev": {[]*cpb.ConsensusSnapshot{{TakenAt: timestamppb.Now(), Revision: -1}}, "negative"},
	} {
		t.Run(name, func(t *testing.T) {
			bad := &cpb.NodeStatus{ExternalAddress: "127.0.0.1", ConsensusSnapshots: tc.snaps}
			if err := checkNodeStatus(bad); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("checkNodeStatus: %v, want an error about %s", err, tc.want)
			}
		})
	}
}
