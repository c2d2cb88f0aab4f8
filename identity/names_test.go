package identity

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func TestNodeID(t *testing.T) {
	// A fixed key gives a fixed ID: IDs are stable across releases.
	pub := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)).Public().(ed25519.PublicKey)
	sum := sha256.Sum256(pub)
	want := "node-" + hex.EncodeToString(sum[:12])
	if got := NodeID(pub); got != want {
		t.Fatalf("NodeID = %q, want %q", got, want)
	}
	if len(want) != 29 {
		t.Fatalf("node IDs are %d characters, want 29", len(want))
	}
	if err := ValidateNodeID(want); err != nil {
		t.Errorf("ValidateNodeID(NodeID(pub)): %v", err)
	}
	if err := VerifyNodeID(want, pub); err != nil {
		t.Errorf("VerifyNodeID(NodeID(pub), pub): %v", err)
	}
	other := pubOf(mustKey(t))
	if err := VerifyNodeID(want, other); err == nil {
		t.Errorf("VerifyNodeID accepted another key's ID")
	}
	if err := VerifyNodeID(want, pub[:16]); err == nil {
		t.Errorf("VerifyNodeID accepted a short key")
	}
	if NodeID(other) == want {
		t.Errorf("two keys with one ID")
	}
}

func TestNodeIDPanicsOnBadKey(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("NodeID of a 31-byte key did not panic")
		}
	}()
	NodeID(make([]byte, 31))
}

// TestValidateNodeIDAnchored feeds ValidateNodeID valid IDs with something
// before or after them: an unanchored expression would accept them all.
func TestValidateNodeIDAnchored(t *testing.T) {
	id := NodeID(pubOf(mustKey(t)))
	bad := []string{
		"",
		"node-",
		"x" + id,
		id + "x",
		id + "0",
		" " + id,
		id + " ",
		id + "\n",
		"\n" + id,
		id + "\x00",
		id + "/" + id,
		"a," + id,
		strings.ToUpper(id),
		"node-" + strings.ToUpper(id[5:]),
		id[:len(id)-1],
		id[:len(id)-1] + "g",
		"node_" + id[5:],
		"owner",
	}
	for _, s := range bad {
		if err := ValidateNodeID(s); err == nil {
			t.Errorf("ValidateNodeID(%q) accepted it", s)
		}
	}
}

func TestValidateUserName(t *testing.T) {
	good := []string{"owner", "alice", "a", "ops-team-2", "a" + strings.Repeat("b", 62)}
	for _, s := range good {
		if err := ValidateUserName(s); err != nil {
			t.Errorf("ValidateUserName(%q): %v", s, err)
		}
	}
	bad := []string{
		"", "Owner", "1owner", "-owner", "owner\n", "\nowner", "own er", "owner/x",
		"a" + strings.Repeat("b", 63), "node-", "node-x", NodeID(pubOf(mustKey(t))),
		"own.er", "owner_", "xowner\x00",
	}
	for _, s := range bad {
		if err := ValidateUserName(s); err == nil {
			t.Errorf("ValidateUserName(%q) accepted it", s)
		}
	}
}

func TestPrivateKeyEncoding(t *testing.T) {
	key := mustKey(t)
	der, err := MarshalPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParsePrivateKey(der)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Equal(key) {
		t.Error("key changed through MarshalPrivateKey and ParsePrivateKey")
	}
	if _, err := ParsePrivateKey(der[:len(der)-1]); err == nil {
		t.Error("ParsePrivateKey accepted a truncated key")
	}
	if _, err := MarshalPrivateKey(key[:10]); err == nil {
		t.Error("MarshalPrivateKey accepted a short key")
	}
}
