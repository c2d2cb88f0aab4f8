package test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	cpb "github.com/polis-os/polis/api/curator/v1"
	"github.com/polis-os/polis/ownerdir"
)

// ownerConn is the VM test's one connection to the curators as the
// cluster's owner, with the credentials polis-launch saved for polisctl.
// The phases poll node records every 200 ms while they wait; a polisctl
// process per poll cost node 1 a TLS handshake and a leader discovery each
// time under TCG, on the VM that also runs etcd and the apiserver whose
// speed the test measures. Over one connection a poll is a ListNodes
// call, served from the curator's node cache.
type ownerConn struct {
	mgmt cpb.ManagementServiceClient
}

// dialOwner connects with polisctl's configuration in config; the
// connection is closed when t ends.
func dialOwner(t *testing.T, config string) *ownerConn {
	t.Helper()
	conn, err := ownerdir.Dial(config)
	if err != nil {
		t.Fatalf("connecting to the curators as the owner (%s): %v", config, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &ownerConn{mgmt: cpb.NewManagementServiceClient(conn)}
}

// ownerCallTimeout bounds one ListNodes; the curator on a loaded TCG VM
// can take seconds.
const ownerCallTimeout = time.Minute

// nodes is ListNodes: node ID → its record.
func (o *ownerConn) nodes(t *testing.T) map[string]*cpb.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ownerCallTimeout)
	defer cancel()
	stream, err := o.mgmt.ListNodes(ctx, &cpb.ListNodesRequest{})
	if err != nil {
		t.Fatalf("listing nodes: %v", err)
	}
	out := map[string]*cpb.Node{}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("listing nodes: %v", err)
		}
		for _, n := range resp.Nodes {
			out[n.Id] = n
		}
	}
}
