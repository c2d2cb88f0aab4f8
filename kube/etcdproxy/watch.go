package etcdproxy

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
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
	return forwardStream(stream,
		func(ctx context.Context) (pb.Watch_WatchClient, error) { return s.upstream.Watch(ctx) },
		func(req *pb.WatchRequest) error {
			if cr := req.GetCreateRequest(); cr != nil {
				cr.Key, cr.RangeEnd = prefixed(s.prefix, cr.Key, cr.RangeEnd)
			}
			return nil
		},
		func(resp *pb.WatchResponse) { s.unprefix(resp.Events) })
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
