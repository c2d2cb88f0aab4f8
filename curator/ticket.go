package curator

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
)

// The register ticket is the cluster's shared secret for registering: 32
// random bytes in etcd (ticketKey), which the curator makes at bootstrap
// and on every RotateRegisterTicket, unless whoever bootstraps the cluster
// chose the first one (ClusterBootstrap.register_ticket). Besides admitting
// Register, it lets a node that holds it but not the cluster's CA
// certificate learn the CA safely: a curator proves that it knows the
// ticket, bound to a challenge of the node's and to the CA certificate it
// sends (RegisterTicketProof), before the node sends the ticket itself.

// RegisterTicketSize is the size of every register ticket.
const RegisterTicketSize = 32

// RegisterTicketChallengeSize is the size of the challenge a node sends
// with GetCACertificate to have the curator prove it knows the ticket.
const RegisterTicketChallengeSize = 32

// NewRegisterTicket makes a register ticket: RegisterTicketSize bytes from
// the system's cryptographic random source, the same whether the curator
// makes it or a launcher chooses the cluster's first one.
func NewRegisterTicket() ([]byte, error) {
	t := make([]byte, RegisterTicketSize)
	if _, err := rand.Read(t); err != nil {
		return nil, fmt.Errorf("making a register ticket: %w", err)
	}
	return t, nil
}

// CheckRegisterTicket checks a ticket chosen outside the curator
// (ClusterBootstrap.register_ticket): RegisterTicketSize bytes, not all
// alike. Randomness cannot be checked; a constant fill (a buffer never
// filled) can, and is refused.
func CheckRegisterTicket(t []byte) error {
	if len(t) != RegisterTicketSize {
		return fmt.Errorf("the register ticket is %d bytes, want %d from a cryptographic random source", len(t), RegisterTicketSize)
	}
	if bytes.Count(t, t[:1]) == len(t) {
		return fmt.Errorf("the register ticket is %d times the byte %#02x: want %d bytes from a cryptographic random source", len(t), t[0], RegisterTicketSize)
	}
	return nil
}

// registerTicketProofLabel separates the proof from any other use of the
// ticket as a key.
const registerTicketProofLabel = "polis register ticket proof v1\x00"

// RegisterTicketProof is the proof a curator gives, with GetCACertificate,
// that it knows ticket: HMAC-SHA256 keyed with the ticket over a fixed
// label, the caller's challenge and the CA certificate sent (DER). A node
// checks it with the ticket it holds (hmac.Equal) before trusting the CA.
// The challenge has a fixed size, so the concatenation is unambiguous.
func RegisterTicketProof(ticket, challenge, caDER []byte) []byte {
	m := hmac.New(sha256.New, ticket)
	m.Write([]byte(registerTicketProofLabel))
	m.Write(challenge)
	m.Write(caDER)
	return m.Sum(nil)
}
