package curator

import (
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A decommissioned node is refused every call with PermissionDenied, like
// any caller without standing; but unlike the others, its refusal is final
// and means "you hold no roles any more": the node must stop what its roles
// made it run, not retry. The refusal carries an ErrorInfo with this reason
// so that the node tells it apart by a field, not by the wording of the
// message.
const (
	errorDomain              = "curator.polis-os.io"
	reasonNodeDecommissioned = "NODE_DECOMMISSIONED"
)

// errNodeDecommissioned is the refusal of every call of decommissioned
// node id.
func errNodeDecommissioned(id string) error {
	st := status.Newf(codes.PermissionDenied, "node %s is decommissioned", id)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reasonNodeDecommissioned, Domain: errorDomain, Metadata: map[string]string{"node_id": id}}); err == nil {
		st = d
	}
	return st.Err()
}

// IsNodeDecommissioned reports whether err (or an error it wraps) is a
// curator's refusal of a call because the calling node was decommissioned.
func IsNodeDecommissioned(err error) bool {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return false
	}
	st := se.GRPCStatus()
	if st.Code() != codes.PermissionDenied {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == errorDomain && info.Reason == reasonNodeDecommissioned {
			return true
		}
	}
	return false
}
