package clustertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/internal/testutil"
)

// Lister lists a cluster's nodes, by node ID: a launched cluster's
// ListNodes, or polisctl node list.
type Lister func(context.Context) (map[string]*cpb.Node, error)

// awaitInterval is how often Await lists the nodes.
const awaitInterval = 250 * time.Millisecond

// Await lists the nodes until ready, given them, returns nil (Whole, or a
// suite's own condition over the whole list), and returns them; or, once
// ctx ends, returns ctx's error with what ready last said. Each time what it
// awaits changes it logs it, with the time since it began: where the time
// of a slow phase goes.
func Await(ctx context.Context, tb testing.TB, list Lister, ready func(map[string]*cpb.Node) error) (map[string]*cpb.Node, error) {
	tb.Helper()
	start := time.Now()
	var recs map[string]*cpb.Node
	logged := ""
	err := testutil.Poll(ctx, awaitInterval, func() error {
		var err error
		recs, err = list(ctx)
		if err != nil {
			err = fmt.Errorf("listing the nodes: %w", err)
		} else {
			err = ready(recs)
		}
		if err != nil && err.Error() != logged {
			logged = err.Error()
			tb.Logf("%6.1fs: waiting: %s", time.Since(start).Seconds(), logged)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return recs, nil
}
