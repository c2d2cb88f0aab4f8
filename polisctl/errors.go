package polisctl

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/polis-os/polis/curator/client"
	"github.com/polis-os/polis/ownerdir"
)

// explain turns the error of a call to the cluster into one that says what
// went wrong and what to do about it. what names the action ("approving
// node-…"); dir and curators (the addresses asked) go into the advice.
//
// The curator's own messages are precise about the node and the rule
// (they name the state a node is in, the role that is missing); what they
// cannot know is the operator's situation: which file holds the
// credentials, which addresses were tried, which command helps next. That
// is what is added here, by status code.
func explain(err error, what, dir, curators string, timeout time.Duration) error {
	st, ok := grpcStatus(err)
	if !ok {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%s: no curator answered within %v (tried %s); check that the cluster is running and the addresses are right, or raise --timeout", what, timeout, curators)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	msg := st.Message()
	tlsFailed := strings.Contains(msg, "certificate") || strings.Contains(msg, "handshake")
	if client.IsUnreachable(err) && !tlsFailed {
		// Every connection was refused at once: waiting longer would
		// not help, and the curators' addresses are what to check. (A
		// failed handshake is reported below, with its own advice.)
		return fmt.Errorf("%s: no curator could be reached at %s: %s; check that the cluster is running and that %s lists its curators",
			what, curators, msg, filepath.Join(dir, ownerdir.ClusterFile))
	}
	switch st.Code() {
	case codes.PermissionDenied:
		return fmt.Errorf("%s: the curator refused: %s; are you the cluster's owner? run polisctl take-ownership with the owner key", what, msg)
	case codes.Unauthenticated:
		return fmt.Errorf("%s: the curator did not accept the credentials in %s: %s; run polisctl take-ownership for a fresh owner certificate", what, dir, msg)
	case codes.NotFound:
		return fmt.Errorf("%s: %s; polisctl node list shows the nodes there are", what, msg)
	case codes.InvalidArgument, codes.FailedPrecondition, codes.ResourceExhausted, codes.AlreadyExists:
		// The curator's message names the rule that was broken.
		return fmt.Errorf("%s: %s", what, msg)
	case codes.Unavailable, codes.DeadlineExceeded:
		if tlsFailed {
			return fmt.Errorf("%s: the TLS handshake with the curators at %s failed: %s; if the cluster was rebuilt, its CA differs from the one pinned in %s: remove that directory's files and take ownership again",
				what, curators, msg, filepath.Join(dir, ownerdir.CAFile))
		}
		return fmt.Errorf("%s: no curator leader answered within %v (tried %s): %s; check that the cluster is running and that %s lists its curators, or raise --timeout",
			what, timeout, curators, msg, filepath.Join(dir, ownerdir.ClusterFile))
	case codes.Canceled:
		return fmt.Errorf("%s: interrupted", what)
	}
	return fmt.Errorf("%s: %s: %s", what, st.Code(), msg)
}

// grpcStatus finds the status of the gRPC call inside err, however deeply
// wrapped: its message is the curator's own words, without the "rpc error:
// code = …" of the error's text and without the wrapping's context, which
// explain says in its own way.
func grpcStatus(err error) (*status.Status, bool) {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus(), true
	}
	return nil, false
}

// explainNodeAPI is explain for a call to one node's own API at addr: the
// node, not a curator, is what did not answer.
func explainNodeAPI(err error, what, id, addr string, timeout time.Duration) error {
	st, ok := grpcStatus(err)
	if !ok {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%s: the node API of %s at %s did not answer within %v; is the node running? (polisctl node list shows its health), or raise --timeout", what, id, addr, timeout)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	msg := st.Message()
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded:
		if strings.Contains(msg, "certificate") || strings.Contains(msg, "handshake") {
			return fmt.Errorf("%s: the TLS handshake with the node API of %s at %s failed: %s", what, id, addr, msg)
		}
		return fmt.Errorf("%s: the node API of %s at %s did not answer: %s; is the node running? (polisctl node list shows its health)", what, id, addr, msg)
	case codes.PermissionDenied, codes.Unauthenticated:
		return fmt.Errorf("%s: the node refused: %s; are you the cluster's owner? run polisctl take-ownership with the owner key", what, msg)
	case codes.InvalidArgument, codes.FailedPrecondition, codes.NotFound, codes.ResourceExhausted:
		return fmt.Errorf("%s: %s", what, msg)
	case codes.Canceled:
		return fmt.Errorf("%s: interrupted", what)
	}
	return fmt.Errorf("%s: %s: %s", what, st.Code(), msg)
}
