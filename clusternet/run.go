package clusternet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.uber.org/zap"

	"github.com/polis-os/polis/event"
	"github.com/polis-os/polis/supervisor"
)

// StatusName is the name a Status value is given (Config.Status), by which
// the role server's graph knows it.
const StatusName = "clusternet.status"

// Status is what the reconciler last did, for the node's status.
type Status struct {
	Mode Mode
	// Device is the WireGuard device's name; empty in plain mode.
	Device string
	// Peers are the peers configured in the kernel when InSync, else the
	// peers being configured.
	Peers []Peer
	// Skipped are the peers left out, and why.
	Skipped []SkippedPeer
	// InSync is true when the kernel matched Peers after the last attempt.
	InSync bool
	// Changed is when the kernel was last changed (zero: never, by this
	// run).
	Changed time.Time
	// LastError is the last attempt's error, empty when it succeeded;
	// LastErrorAt is when the last error happened, kept after a success.
	LastError   string
	LastErrorAt time.Time
}

// PeerIDs are the node IDs of s.Peers, sorted; nil for a nil Status.
func (s *Status) PeerIDs() []string {
	if s == nil {
		return nil
	}
	ids := make([]string, len(s.Peers))
	for i, p := range s.Peers {
		ids[i] = p.NodeID
	}
	slices.Sort(ids)
	return ids
}

// Run keeps the node's kernel in line with the peers of c.Peers until ctx
// is done: one WireGuard peer and one route per peer (ModeWireGuard), or
// one route through each peer's address (ModePlain). It is a supervised
// runnable (supervisor.Run(ctx, "clusternet", func(ctx) error { return
// clusternet.Run(ctx, c) })), healthy once the kernel first matched the
// peers. A failed attempt is published in c.Status and retried with
// backoff or as soon as the peers change; Run itself fails only on a
// configuration error or when the peers value fails.
func Run(ctx context.Context, c Config) error {
	c, err := c.withDefaults()
	if err != nil {
		return err
	}
	k := c.kernel
	if k == nil {
		nk, err := newNetlinkKernel()
		if err != nil {
			return err
		}
		defer nk.Close()
		k = nk
	}
	r := &reconciler{c: c, k: k, log: supervisor.Logger(ctx)}
	return r.run(ctx)
}

// Clear removes what Run put in the kernel (the WireGuard device of c,
// every route marked as this package's and the egress rule), for a node that stops connecting
// pod networks. Run itself leaves them in place when it returns, so that
// Pods keep reaching each other while the agent restarts. c.Peers is not
// needed.
func Clear(c Config) error {
	k := c.kernel
	if k == nil {
		nk, err := newNetlinkKernel()
		if err != nil {
			return err
		}
		defer nk.Close()
		k = nk
	}
	if c.Device == "" {
		c.Device = DefaultDevice
	}
	dev, err := k.Device(c.Device)
	if err != nil {
		return fmt.Errorf("clusternet: reading WireGuard device %s: %w", c.Device, err)
	}
	// Only the marked routes go: the others are not this package's.
	routes, _, err := k.Routes()
	if err != nil {
		return fmt.Errorf("clusternet: listing routes: %w", err)
	}
	// No device and no routes: the desired state of plain mode with no peers.
	nothing := desired{}
	err = errors.Join(diff(nothing, dev, routes).apply(k, c.Device), k.ClearEgress())
	if err != nil {
		return fmt.Errorf("clusternet: %w", err)
	}
	return nil
}

type reconciler struct {
	c      Config
	k      kernel
	log    *zap.Logger
	status Status
	// egressDone is whether the egress rule is as the configuration says
	// since the last attempt.
	egressDone bool
}

func (r *reconciler) run(ctx context.Context) error {
	var in event.Inputs
	defer in.Close()
	peers := event.Input(&in, r.c.Peers, nil)

	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 100 * time.Millisecond
	bo.MaxInterval = 30 * time.Second
	healthy := false
	// wait is how long to wait for new peers before trying again: after a
	// failure, the backoff; otherwise the resync interval.
	var wait time.Duration
	for {
		why, err := waitFor(ctx, &in, wait)
		switch {
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			why = "retry"
			if r.status.LastError == "" {
				why = "resync"
			}
		case err != nil:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("clusternet: watching peers: %w", err)
		}
		err = r.reconcile(peers.Latest(), why)
		if err != nil {
			wait = bo.NextBackOff()
			r.log.Warn("kernel not in line with the peers", zap.Error(err), zap.Duration("retry in", wait))
			continue
		}
		bo.Reset()
		wait = r.c.Resync
		if !healthy {
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			healthy = true
		}
	}
}

// waitFor waits for new peers, at most d when d is not zero. It returns
// why it woke.
func waitFor(ctx context.Context, in *event.Inputs, d time.Duration) (string, error) {
	if d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	why, err := in.Wait(ctx)
	if err != nil {
		return "", err
	}
	return why.String(), nil
}

// reconcile brings the kernel in line with peers and publishes the status.
func (r *reconciler) reconcile(peers []Peer, why string) error {
	want := decide(r.c, peers)
	p, err := r.plan(&want)
	// Said once, not at every resync: a peer without a key yet stays
	// skipped for a while.
	if !slices.Equal(want.skipped, r.status.Skipped) {
		for _, s := range want.skipped {
			r.log.Warn("peer skipped", zap.String("node", s.NodeID), zap.String("reason", s.Reason))
		}
	}
	r.status.Mode, r.status.Peers, r.status.Skipped = r.c.Mode, want.peers, want.skipped
	if r.c.Mode == ModeWireGuard {
		r.status.Device = r.c.Device
	} else {
		r.status.Device = ""
	}
	if err == nil && !p.empty() {
		err = p.apply(r.k, r.c.Device)
		r.status.Changed = time.Now()
		if err == nil {
			r.log.Info("kernel changed", zap.String("because", why), zap.Stringer("plan", p), zap.Int("peers", len(want.peers)))
		}
	} else if err == nil {
		r.log.Debug("kernel already in line", zap.String("because", why), zap.Int("peers", len(want.peers)))
	}
	err = errors.Join(err, r.egress(why))
	r.status.InSync = err == nil
	if err != nil {
		r.status.LastError = err.Error()
		r.status.LastErrorAt = time.Now()
	} else {
		r.status.LastError = ""
	}
	if r.c.Status != nil {
		s := r.status
		r.c.Status.Set(&s)
	}
	return err
}

// egress brings the egress rule in line with the configuration: at the
// first attempt, after a failed one and at every resync (which undoes
// what someone else changed; the table is written whole in one
// transaction, so rewriting an unchanged rule disturbs nothing).
func (r *reconciler) egress(why string) error {
	if r.egressDone && why != "resync" {
		return nil
	}
	var err error
	if r.c.ClusterPodRange.IsValid() {
		if err = r.k.SetEgress(r.c.PodCIDR, r.c.ClusterPodRange); err == nil && !r.egressDone {
			r.log.Info("egress rule set", zap.Stringer("podRange", r.c.PodCIDR), zap.Stringer("clusterPodRange", r.c.ClusterPodRange))
		}
	} else {
		err = r.k.ClearEgress()
	}
	r.egressDone = err == nil
	if err != nil {
		return fmt.Errorf("egress rule: %w", err)
	}
	return nil
}

// plan reads the kernel's state and diffs it against want, after dropping
// from want the peers whose pod range someone else routes (yieldTo).
func (r *reconciler) plan(want *desired) (plan, error) {
	dev, err := r.k.Device(r.c.Device)
	if err != nil {
		return plan{}, fmt.Errorf("reading WireGuard device %s: %w", r.c.Device, err)
	}
	routes, foreign, err := r.k.Routes()
	if err != nil {
		return plan{}, fmt.Errorf("listing routes: %w", err)
	}
	want.yieldTo(foreign, routes)
	return diff(*want, dev, routes), nil
}
