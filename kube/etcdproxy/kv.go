package etcdproxy

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// kvServer serves KV over a namespaced clientv3.KV (client/v3/namespace),
// which moves every key of a request under the prefix and strips it from
// every key of the response. It adds the checks namespace does not make:
// leases attached to keys must be this proxy's, and Compact is refused.
type kvServer struct {
	pb.UnimplementedKVServer // RangeStream: not used by the apiserver

	kv     clientv3.KV
	leases *leaseSet
}

func (s *kvServer) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	resp, err := s.kv.Do(ctx, grpcproxy.RangeRequestToOp(r))
	if err != nil {
		return nil, err
	}
	return (*pb.RangeResponse)(resp.Get()), nil
}

func (s *kvServer) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	if err := s.leases.check(r.Lease); err != nil {
		return nil, err
	}
	resp, err := s.kv.Do(ctx, grpcproxy.PutRequestToOp(r))
	if err != nil {
		return nil, err
	}
	return (*pb.PutResponse)(resp.Put()), nil
}

func (s *kvServer) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	resp, err := s.kv.Do(ctx, grpcproxy.DelRequestToOp(r))
	if err != nil {
		return nil, err
	}
	return (*pb.DeleteRangeResponse)(resp.Del()), nil
}

func (s *kvServer) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := s.checkTxnLeases(r); err != nil {
		return nil, err
	}
	resp, err := s.kv.Do(ctx, grpcproxy.TxnRequestToOp(r))
	if err != nil {
		return nil, err
	}
	return (*pb.TxnResponse)(resp.Txn()), nil
}

// Compact is refused: compaction drops the history of every key in etcd,
// not only of the confined ones.
func (s *kvServer) Compact(context.Context, *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	return nil, status.Error(codes.PermissionDenied, "etcdproxy: compaction is global to etcd and not allowed through a confined endpoint (the cluster's etcd compacts itself)")
}

// checkTxnLeases checks the lease of every put in r, nested transactions
// included.
func (s *kvServer) checkTxnLeases(r *pb.TxnRequest) error {
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			if put := op.GetRequestPut(); put != nil {
				if err := s.leases.check(put.Lease); err != nil {
					return err
				}
			}
			if txn := op.GetRequestTxn(); txn != nil {
				if err := s.checkTxnLeases(txn); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
