package supervisor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
)

func TestBackoffUntilAndTreeOf(t *testing.T) {
	const wait = time.Hour
	got := make(chan bool, 1)
	tr := startTree(t, func(ctx context.Context) error {
		tree, ok := TreeOf(ctx)
		got <- ok && tree != nil
		if err := Run(ctx, "crash", func(context.Context) error { return errors.New("boom") }); err != nil {
			return err
		}
		return healthyUntilCancelled(ctx)
	}, WithBackoff(func() backoff.BackOff { return backoff.NewConstantBackOff(wait) }))
	if !<-got {
		t.Error("TreeOf found no tree inside a runnable")
	}
	if _, ok := TreeOf(context.Background()); ok {
		t.Error("TreeOf found a tree outside any runnable")
	}
	n := tr.waitState(t, "root.crash", StateBackoff)
	if !n.Until.Equal(n.Since.Add(wait)) || n.LastError == "" {
		t.Errorf("backing off node: Since %v, Until %v (want Since+%v), LastError %q", n.Since, n.Until, wait, n.LastError)
	}
	if root, _ := tr.now(t).Root(); !root.Until.IsZero() {
		t.Errorf("a healthy node has Until %v", root.Until)
	}
}
