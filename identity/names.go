package identity

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// nodeIDPrefix starts every node ID, so that an ID reads as what it is in
// logs, etcd keys and certificates.
const nodeIDPrefix = "node-"

// nodeIDBytes is how many bytes of SHA-256 of the public key a node ID
// carries: 12 bytes, 96 bits, 24 hexadecimal digits.
//
// Accidental collisions: among n keys the chance that two share an ID is
// about n²/2⁹⁷, below 2⁻⁵⁷ for a million nodes. Deliberate collisions: an
// attacker who wants a key whose ID equals one of n existing IDs must try
// about 2⁹⁶/n keys, far out of reach. And nothing trusts an ID alone: a
// node certificate is accepted only if its ID is NodeID of its own key
// (see Verifier.Identify), and the curator keeps each node's public key
// and compares keys, not IDs. A shorter ID would be friendlier but would
// bring deliberate collisions (2⁶⁴ for 16 digits) within reach of a
// well-funded attacker; a longer one buys nothing.
const nodeIDBytes = 12

// nodeIDRegexp is the form of a node ID. It is anchored at both ends:
// unanchored, "xnode-…" or "node-…\n" would pass. Go's $ without the m
// flag matches only at the end of the text.
var nodeIDRegexp = regexp.MustCompile(`^node-[0-9a-f]{24}$`)

// userNameRegexp is the form of a user name: lower case, starting with a
// letter, at most 63 characters, usable as a DNS label and as an etcd key
// component. Anchored for the same reason as nodeIDRegexp.
var userNameRegexp = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// NodeID returns the ID of the node whose public key is pub: "node-"
// followed by the first 96 bits of SHA-256 of the raw 32-byte key, in
// lower-case hexadecimal (29 characters in all). The ID is stable for the
// key's lifetime and never changes otherwise; it is a valid DNS label, etcd
// member name and user-facing handle. pub must be a valid ed25519 public key
// (32 bytes); NodeID panics otherwise, as a key of another length is a
// programming error, never input.
func NodeID(pub ed25519.PublicKey) string {
	if len(pub) != ed25519.PublicKeySize {
		panic(fmt.Sprintf("identity.NodeID: public key of %d bytes, want %d", len(pub), ed25519.PublicKeySize))
	}
	sum := sha256.Sum256(pub)
	return nodeIDPrefix + hex.EncodeToString(sum[:nodeIDBytes])
}

// ValidateNodeID reports whether id has the form of a node ID (as made by
// NodeID: "node-" and 24 lower-case hexadecimal digits, nothing before or
// after). It says nothing about which key the ID belongs to; see
// VerifyNodeID.
func ValidateNodeID(id string) error {
	if !nodeIDRegexp.MatchString(id) {
		q := strconv.Quote(id)
		if len(id) > 80 {
			// An error must not echo a huge argument back whole.
			q = fmt.Sprintf("%s… (%d bytes)", strconv.Quote(strings.ToValidUTF8(id[:80], "")), len(id))
		}
		return fmt.Errorf("%s is not a node ID (want %s)", q, nodeIDRegexp)
	}
	return nil
}

// VerifyNodeID checks that id is the node ID of pub.
func VerifyNodeID(id string, pub ed25519.PublicKey) error {
	if err := ValidateNodeID(id); err != nil {
		return err
	}
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("public key of %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	if NodeID(pub) != id {
		return fmt.Errorf("node ID %s does not belong to public key %s", id, NodeID(pub))
	}
	return nil
}

// ValidateUserName checks that name can name a user: lower-case letters,
// digits and dashes, starting with a letter, at most 63 characters, and not
// starting with "node-", so that no user name can ever be mistaken for a
// node ID, whatever else goes wrong.
func ValidateUserName(name string) error {
	if !userNameRegexp.MatchString(name) {
		return fmt.Errorf("%q is not a user name (want %s)", name, userNameRegexp)
	}
	if strings.HasPrefix(name, nodeIDPrefix) {
		return fmt.Errorf("%q is not a user name: %q is reserved for node IDs", name, nodeIDPrefix)
	}
	return nil
}
