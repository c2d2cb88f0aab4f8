package etcdproxy

import (
	"context"
	"errors"
	"io"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/metadata"
)

// watchServer forwards each watch stream as one stream to etcd. Requests
// pass unchanged except that a create request's range is moved under the
// prefix; responses pass unchanged except that event keys are moved out of
// it. Watch ids, progress requests and notifications, fragments and
// cancellations therefore behave exactly as etcd's own.
type watchServer struct {
	pb.UnimplementedWatchServer

	upstream pb.WatchClient
	prefix   string
}

func (s *watchServer) Watch(stream pb.Watch_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	// etcd reads "require a leader" and similar flags from the metadata;
	// pass the client's on.
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = metadata.NewOutgoingContext(ctx, md)
	}
	up, err := s.upstream.Watch(ctx)
	if err != nil {
		return err
	}

	// Requests: client → etcd, until the client closes its side.
	reqErr := make(chan error, 1)
	go func() {
		reqErr <- func() error {
			for {
				req, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					return up.CloseSend()
				}
				if err != nil {
					return err
				}
				if cr := req.GetCreateRequest(); cr != nil {
					cr.Key, cr.RangeEnd = prefixed(s.prefix, cr.Key, cr.RangeEnd)
				}
				if err := up.Send(req); err != nil {
					return err
				}
			}
		}()
	}()

	// Responses: etcd → client, until either side ends. The request
	// goroutine ends with this handler at the latest: gRPC ends Recv when
	// the handler returns.
	for {
		resp, err := up.Recv()
		if err != nil {
			select {
			case rerr := <-reqErr:
				if rerr != nil {
					return rerr
				}
			default:
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		s.unprefix(resp.Events)
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// unprefix moves event keys out of the prefix, dropping any event outside
// it (a confined watch cannot produce one).
func (s *watchServer) unprefix(events []*mvccpb.Event) {
	for _, ev := range events {
		for _, kv := range []*mvccpb.KeyValue{ev.Kv, ev.PrevKv} {
			if kv == nil {
				continue
			}
			if rest, ok := unprefixed(s.prefix, kv.Key); ok {
				kv.Key = rest
			} else {
				kv.Key, kv.Value = nil, nil
			}
		}
	}
}
