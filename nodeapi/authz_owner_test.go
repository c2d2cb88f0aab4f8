package nodeapi

import (
	"context"
	"crypto/ed25519"
	"errors"
	"testing"
	"time"

	"github.com/polis-os/polis/curator"
	"github.com/polis-os/polis/identity"
)

// TestOwnerKeyWaitsLongerWithoutFallback: a node that has never been told
// the owner key waits for the curator as long as the call may (a slow
// curator on a loaded machine refused a Reboot after the fixed 3 s this
// replaced); a node with a key to fall back on asks briefly and then goes
// by it.
func TestOwnerKeyWaitsLongerWithoutFallback(t *testing.T) {
	ownerPub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	owner := identity.Identity{Kind: identity.KindUser, UserName: curator.OwnerUserName, PublicKey: ownerPub}
	var budget time.Duration
	fail := true
	s := &Service{cfg: Config{OwnerKey: func(ctx context.Context) (ed25519.PublicKey, error) {
		d, ok := ctx.Deadline()
		if !ok {
			t.Fatal("the owner key is asked for without a deadline")
		}
		budget = time.Until(d)
		if fail {
			return nil, errors.New("curator slow")
		}
		return ownerPub, nil
	}}}
	callCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	if err := s.ownerStands(callCtx, owner); err == nil {
		t.Fatal("a node never told the owner key accepted the owner")
	}
	if budget <= ownerKeyTimeout {
		t.Errorf("without a key to fall back on the curator got %v, want the call's own deadline (about 20s)", budget)
	}

	fail = false
	if err := s.ownerStands(callCtx, owner); err != nil {
		t.Fatalf("owner refused with the curator answering: %v", err)
	}
	fail = true
	if err := s.ownerStands(callCtx, owner); err != nil {
		t.Fatalf("owner refused while the node has the key the curator gave earlier: %v", err)
	}
	if budget > ownerKeyTimeout {
		t.Errorf("with a key to fall back on the curator got %v, want at most %v", budget, ownerKeyTimeout)
	}
}
