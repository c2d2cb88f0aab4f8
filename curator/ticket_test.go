package curator

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	cpb "github.com/polis-os/polis/api/curator/v1"
)

// TestBootstrapWithChosenTicket: a ticket chosen by whoever bootstraps is
// the one the cluster accepts; one that is not 32 bytes, or a constant
// fill, is refused before anything is written.
func TestBootstrapWithChosenTicket(t *testing.T) {
	cli := startConsensus(t)
	params := BootstrapParams{
		OwnerKey:   mustKey(t).Public().(ed25519.PublicKey),
		NodeKey:    mustKey(t).Public().(ed25519.PublicKey),
		NodeStatus: &cpb.NodeStatus{ExternalAddress: "127.0.0.1"},
	}
	for _, bad := range [][]byte{make([]byte, 16), bytes.Repeat([]byte{7}, RegisterTicketSize), make([]byte, RegisterTicketSize+1)} {
		p := params
		p.RegisterTicket = bad
		if _, err := Bootstrap(ctxT(t), cli, p, time.Now()); err == nil {
			t.Errorf("bootstrap with the ticket %x succeeded", bad)
		}
		resp, err := cli.Get(ctxT(t), ownerKey)
		if err != nil || len(resp.Kvs) != 0 {
			t.Fatalf("a refused bootstrap wrote the owner key: %v, %v", resp, err)
		}
	}
	ticket, err := NewRegisterTicket()
	if err != nil {
		t.Fatal(err)
	}
	params.RegisterTicket = ticket
	if _, err := Bootstrap(ctxT(t), cli, params, time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctxT(t), ticketKey)
	if err != nil || len(resp.Kvs) != 1 || !bytes.Equal(resp.Kvs[0].Value, ticket) {
		t.Fatalf("stored ticket %v (%v), want the chosen %x", resp.Kvs, err, ticket)
	}
}

// TestRegisterTicketProof: anyone may ask for the CA certificate with a
// challenge; the answer's proof is the HMAC of the current ticket over the
// challenge and the CA certificate, so it checks with the ticket and not
// with another (the one rotated away), and differs per challenge.
func TestRegisterTicketProof(t *testing.T) {
	c := newTestCluster(t)
	cur := cpb.NewCuratorServiceClient(c.anonymous())
	ask := func(challenge []byte) *cpb.GetCACertificateResponse {
		t.Helper()
		resp, err := cur.GetCACertificate(ctxT(t), &cpb.GetCACertificateRequest{RegisterTicketChallenge: challenge})
		if err != nil {
			t.Fatalf("GetCACertificate: %v", err)
		}
		if !bytes.Equal(resp.CaCertificate, c.ca.Certificate().Raw) {
			t.Fatal("the answer is not the cluster CA certificate")
		}
		return resp
	}
	if p := ask(nil).RegisterTicketProof; p != nil {
		t.Errorf("a proof (%x) without a challenge", p)
	}
	a, b := bytes.Repeat([]byte{1}, RegisterTicketChallengeSize), bytes.Repeat([]byte{2}, RegisterTicketChallengeSize)
	ticket := c.registerTicket()
	pa, pb := ask(a).RegisterTicketProof, ask(b).RegisterTicketProof
	if !hmac.Equal(pa, RegisterTicketProof(ticket, a, c.ca.Certificate().Raw)) {
		t.Error("the proof does not check with the ticket")
	}
	if hmac.Equal(pa, pb) {
		t.Error("two challenges, one proof")
	}
	if hmac.Equal(pa, RegisterTicketProof(ticket, a, []byte("another CA"))) {
		t.Error("the proof checks with another CA certificate")
	}
	_, err := cur.GetCACertificate(ctxT(t), &cpb.GetCACertificateRequest{RegisterTicketChallenge: []byte("short")})
	wantCode(t, "a 5-byte challenge", err, codes.InvalidArgument)

	if _, err := c.management().RotateRegisterTicket(ctxT(t), &cpb.RotateRegisterTicketRequest{}); err != nil {
		t.Fatal(err)
	}
	after := ask(a).RegisterTicketProof
	if hmac.Equal(after, pa) {
		t.Error("the proof still checks with the ticket rotated away")
	}
	if !hmac.Equal(after, RegisterTicketProof(c.registerTicket(), a, c.ca.Certificate().Raw)) {
		t.Error("the proof does not check with the new ticket")
	}
}
