package launch

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/polis-os/polis/ownerdir"
)

// A CA other than the one polisctl's configuration pins (a stale
// configuration against a new cluster) ends the wait at once with
// polisctl's explanation, instead of being retried until the step times
// out; a curator that does not answer yet is asked again.
func TestCAMismatchEndsTheWait(t *testing.T) {
	c := &Cluster{opts: Options{StepTimeout: time.Hour}}
	mismatch := &ownerdir.CAMismatchError{Pinned: "aa", Presented: "bb", File: "/cfg/ca.der", Curators: []netip.AddrPort{netip.MustParseAddrPort("127.79.9.1:7835")}}
	attempts := 0
	err := c.poll(context.Background(), "curator serving", func(context.Context) (bool, error) {
		attempts++
		if attempts < 3 {
			return ownershipTaken(fmt.Errorf("dialling: %w", errors.New("connection refused")))
		}
		return ownershipTaken(fmt.Errorf("taking ownership: %w", mismatch))
	})
	var got *ownerdir.CAMismatchError
	if !errors.As(err, &got) || !strings.Contains(err.Error(), "the cluster CA has changed") {
		t.Fatalf("poll = %v, want the CA mismatch", err)
	}
	if attempts != 3 {
		t.Errorf("%d attempts, want 3 (two refused connections retried, the mismatch final)", attempts)
	}
	if ok, err := ownershipTaken(nil); !ok || err != nil {
		t.Errorf("ownershipTaken(nil) = %v, %v", ok, err)
	}
}
